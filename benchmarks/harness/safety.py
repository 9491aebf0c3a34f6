"""Outbound safety: refuse targets that are not allow-listed, link-local or cloud metadata.

Why: a validation run makes a worker on a GPU node send requests to a user-supplied URL; without a
check it could be pointed at the cloud metadata service or internal hosts (SSRF). The check runs
before any connection: the host must be in the allow-list, and neither the literal address nor
any address the name resolves to may be link-local or a metadata address.

One guard for every outbound connection (the load, the metrics scrape, the identity probe, the
health and simulator checks): `checked_addresses` resolves the host once, refuses it by the rules
above, and the connection is opened to an address it returned, never by resolving the name again
(a DNS answer that changes between the check and the connection cannot slip past it). The
connection makers: `urlopen` (urllib, redirects included: each hop is checked where it connects),
`safety_aiohttp.tcp_connector` (aiohttp sessions: its own module, so that a process that only checks a
URL loads no aiohttp) and `open_connection` (the raw HTTP pool).
"""

from __future__ import annotations

import asyncio
import functools
import http.client
import ipaddress
import socket
import urllib.request
from typing import Any, Callable, Iterable
from urllib.parse import urlsplit

METADATA_HOSTS = {
    "metadata.google.internal",
    "metadata.goog",
    "metadata",
    "instance-data",
    "instance-data.ec2.internal",
    "metadata.azure.com",
}
METADATA_ADDRESSES = {
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200", "192.0.0.192")
}


class TargetRefused(ValueError):
    """The target URL may not be contacted; the message says which rule refused it."""


Resolver = Callable[[str, int], Iterable[str]]


def _resolve(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
    return sorted({info[4][0] for info in infos})


def resolve(host: str, port: int) -> list[str]:
    """The addresses `host` resolves to (the lookup `check_target` uses when given no resolver)."""
    return _resolve(host, port)


def _forbidden_address(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if address.is_link_local:
        return "link-local (169.254.0.0/16 or fe80::/10)"
    if address.is_multicast or address.is_unspecified:
        return "multicast or unspecified"
    return None


def _host_allowed(host: str, allowed: list[str]) -> bool:
    for entry in allowed:
        entry = entry.strip().lower().rstrip(".")
        if not entry:
            continue
        if entry == "*":
            return True
        if entry.startswith("*.") and (host.endswith(entry[1:]) or host == entry[2:]):
            return True
        if "/" in entry:  # a network, e.g. 10.0.0.0/8
            try:
                if ipaddress.ip_address(host) in ipaddress.ip_network(entry, strict=False):
                    return True
            except ValueError:
                pass
            continue
        if host == entry.strip("[]"):
            return True
    return False


def check_target(url: str, allowed_hosts: Iterable[str] | str | None, resolver: Resolver | None = None) -> str:
    """Return the normalised host if `url` may be contacted, else raise TargetRefused.

    `allowed_hosts`: host names, IP addresses, networks (`10.0.0.0/8`), `*.example.com`, or `*`
    (any host, still never link-local/metadata); a comma-separated string is accepted.
    """
    if isinstance(allowed_hosts, str):
        allowed = [h for h in allowed_hosts.split(",") if h.strip()]
    else:
        allowed = list(allowed_hosts or [])
    parts = urlsplit(url or "")
    if parts.scheme not in ("http", "https"):
        raise TargetRefused(f"target.endpoint_url: scheme must be http or https, got {parts.scheme or 'none'!r}")
    host = (parts.hostname or "").lower().rstrip(".")
    if not host:
        raise TargetRefused(f"target.endpoint_url: no host in {url!r}")
    if parts.username or parts.password:
        raise TargetRefused("target.endpoint_url: credentials in the URL are not accepted; use the API key field")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise TargetRefused(f"target.endpoint_url: {exc}") from None
    if host in METADATA_HOSTS:
        raise TargetRefused(f"target.endpoint_url: {host!r} is a cloud metadata host and is always refused")
    try:
        literal = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    if literal is not None:
        reason = _forbidden_address(literal)
        if reason:
            raise TargetRefused(f"target.endpoint_url: {host} is {reason} and is always refused")
    if not _host_allowed(host, allowed):
        listed = ", ".join(allowed) if allowed else "empty"
        raise TargetRefused(
            f"target.endpoint_url: host {host!r} is not in KVSELECT_ALLOWED_TARGETS (allowed: {listed})"
        )
    if literal is None:
        try:
            addresses = list((resolver or _resolve)(host, port))
        except OSError as exc:
            raise TargetRefused(f"target.endpoint_url: cannot resolve {host!r}: {exc}") from None
        for text in addresses:
            try:
                address = ipaddress.ip_address(text.split("%")[0])
            except ValueError:
                continue
            reason = _forbidden_address(address)
            if reason:
                raise TargetRefused(f"target.endpoint_url: {host!r} resolves to {text}, {reason}; refused")
    return host


Allowed = Iterable[str] | str | None


def checked_addresses(host: str, port: int, allowed_hosts: Allowed, resolver: Resolver | None = None) -> list[str]:
    """The addresses a connection to `host:port` may be opened to: `host` allow-listed and not a
    metadata host, resolved once (a literal address is its own), none of them forbidden. Raises
    TargetRefused, also when the name resolves to nothing: the caller connects only to these."""
    host = (host or "").lower().rstrip(".").strip("[]")
    check_target(f"http://{'[' + host + ']' if ':' in host else host}:{port}/", allowed_hosts, resolver=_no_lookup)
    try:
        literal = ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        literal = None
    if literal is not None:
        return [host]
    try:
        addresses = list((resolver or _resolve)(host, port))
    except OSError as exc:
        raise TargetRefused(f"target.endpoint_url: cannot resolve {host!r}: {exc}") from None
    checked = []
    for text in addresses:
        try:
            address = ipaddress.ip_address(text.split("%")[0])
        except ValueError:
            raise TargetRefused(
                f"target.endpoint_url: {host!r} resolves to {text!r}, not an address; refused"
            ) from None
        reason = _forbidden_address(address)
        if reason:
            raise TargetRefused(f"target.endpoint_url: {host!r} resolves to {text}, {reason}; refused")
        checked.append(text)
    if not checked:
        raise TargetRefused(f"target.endpoint_url: {host!r} resolves to no address")
    return checked


def _no_lookup(host: str, port: int) -> list[str]:
    return []  # checked_addresses resolves (once) after the host's own rules


def create_connection(
    host: str,
    port: int,
    allowed_hosts: Allowed,
    timeout: float | None = None,
    source_address: tuple[str, int] | None = None,
) -> socket.socket:
    """A TCP connection to `host:port` opened to a checked address (`checked_addresses`)."""
    error: OSError = OSError(f"no address for {host}:{port}")
    for address in checked_addresses(host, port, allowed_hosts):
        try:
            return socket.create_connection((address, port), timeout, source_address)
        except OSError as exc:
            error = exc
    raise error


class _GuardedHTTPConnection(http.client.HTTPConnection):
    def __init__(self, *args: Any, allowed_hosts: Allowed, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._allowed_hosts = allowed_hosts

    def connect(self) -> None:
        self.sock = create_connection(self.host, self.port, self._allowed_hosts, self.timeout, self.source_address)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _GuardedHTTPSConnection(http.client.HTTPSConnection):
    def __init__(self, *args: Any, allowed_hosts: Allowed, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._allowed_hosts = allowed_hosts

    def connect(self) -> None:
        sock = create_connection(self.host, self.port, self._allowed_hosts, self.timeout, self.source_address)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)


class _GuardedHTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, allowed_hosts: Allowed) -> None:
        super().__init__()
        self.allowed_hosts = allowed_hosts

    def http_open(self, req: urllib.request.Request) -> Any:
        return self.do_open(functools.partial(_GuardedHTTPConnection, allowed_hosts=self.allowed_hosts), req)


class _GuardedHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, allowed_hosts: Allowed) -> None:
        super().__init__()
        self.allowed_hosts = allowed_hosts

    def https_open(self, req: urllib.request.Request) -> Any:
        connection = functools.partial(_GuardedHTTPSConnection, allowed_hosts=self.allowed_hosts)
        return self.do_open(connection, req, context=self._context)


def urlopen(url: str | urllib.request.Request, allowed_hosts: Allowed, timeout: float) -> Any:
    """`urllib.request.urlopen` through the guard: http(s) only, no proxy, every connection (a
    redirect's too) opened to an address `checked_addresses` allowed; TargetRefused otherwise."""
    full_url = url.full_url if isinstance(url, urllib.request.Request) else url
    check_target(full_url, allowed_hosts, resolver=_no_lookup)  # scheme, credentials, host: before anything
    opener = urllib.request.OpenerDirector()
    for handler in (
        _GuardedHTTPHandler(allowed_hosts),
        _GuardedHTTPSHandler(allowed_hosts),
        urllib.request.HTTPRedirectHandler(),
        urllib.request.HTTPDefaultErrorHandler(),
        urllib.request.HTTPErrorProcessor(),
        urllib.request.UnknownHandler(),  # file:, ftp:, data: after a redirect: refused
    ):
        opener.add_handler(handler)
    return opener.open(url, timeout=timeout)


async def open_address(host: str, port: int, allowed_hosts: Allowed) -> str:
    """The address to open a raw connection to: `host` itself without an allow-list, else the first
    address `checked_addresses` allows (resolved off the event loop)."""
    if allowed_hosts is None:
        return host
    if is_literal_address(host):  # no lookup: checked here, without a trip to the executor
        return checked_addresses(host, port, allowed_hosts)[0]
    loop = asyncio.get_running_loop()
    return (await loop.run_in_executor(None, checked_addresses, host, port, allowed_hosts))[0]


def is_literal_address(host: str) -> bool:
    """Whether `host` is an IP address (which aiohttp connects to without a lookup), not a name."""
    try:
        ipaddress.ip_address(host.strip("[]").split("%")[0])
    except ValueError:
        return False
    return True
