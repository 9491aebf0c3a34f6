"""The outbound guard (`benchmarks.harness.safety`) for aiohttp sessions: a resolver and a connector
that open connections only to the addresses `safety.checked_addresses` allows.

Its own module so that aiohttp loads with the load generator that opens a session, not with every web
process or command that only checks a URL (issue 39: start-up). Every aiohttp session of the harness
takes its connector from `tcp_connector`.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver

from benchmarks.harness import safety
from benchmarks.harness.safety import Allowed


class GuardedResolver(AbstractResolver):
    """aiohttp's DNS step through the guard: the addresses `checked_addresses` allows, or TargetRefused."""

    def __init__(self, allowed_hosts: Allowed) -> None:
        self.allowed_hosts = allowed_hosts

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET) -> list[Any]:
        loop = asyncio.get_running_loop()
        addresses = await loop.run_in_executor(None, safety.checked_addresses, host, port, self.allowed_hosts)
        return [
            {
                "hostname": host,
                "host": address,
                "port": port,
                "family": socket.AF_INET6 if ":" in address else socket.AF_INET,
                "proto": 0,
                "flags": socket.AI_NUMERICHOST,
            }
            for address in addresses
        ]

    async def close(self) -> None:
        return None


class GuardedConnector(aiohttp.TCPConnector):
    """An aiohttp connector whose every connection passes the guard: names through `GuardedResolver`,
    literal addresses (which aiohttp does not resolve) checked before connecting."""

    def __init__(self, allowed_hosts: Allowed, **kwargs: Any) -> None:
        super().__init__(resolver=GuardedResolver(allowed_hosts), **kwargs)
        self.allowed_hosts = allowed_hosts

    async def connect(self, req: Any, traces: Any, timeout: Any) -> Any:
        host = req.url.raw_host or ""
        if safety.is_literal_address(host):  # a name is checked by the resolver
            safety.checked_addresses(host, req.url.port or 80, self.allowed_hosts)
        return await super().connect(req, traces, timeout)


def tcp_connector(allowed_hosts: Allowed, **kwargs: Any) -> aiohttp.TCPConnector:
    """The connector for an aiohttp session: guarded when an allow-list is given (None: no check, the
    harness run by hand against a local engine), else aiohttp's own."""
    if allowed_hosts is None:
        return aiohttp.TCPConnector(**kwargs)
    return GuardedConnector(allowed_hosts, **kwargs)
