"""Which hardware a validation run loads, so that runs sharing it never overlap.

Two runs on the same GPUs (or the same engine host) measure each other: their latencies carry the
other's load. A run therefore holds the hardware it loads for as long as it runs, and a run that
needs hardware another run holds waits, saying which run holds it (`worker.claim`).

The hardware of a run is named by keys:
- `pool:<label>`: the candidate's GPU pool (runs go to queue gpu.<label>); a pool runs one
  validation at a time, whichever of its nodes serves the engine;
- `host:<name>`: each host the candidate's engine is reached on (its endpoint, metrics and caching-off
  endpoints). A loopback address names the machine the worker runs on (an engine on 127.0.0.1 is on
  the worker's machine, and two machines' loopbacks are different hardware).
Two runs conflict when their keys meet. Names are compared as written (lower case): an address and
a DNS name of one machine are two keys, so give a candidate's URLs one spelling per host.

Pure: no Django.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Iterable
from urllib.parse import urlsplit

POOL = "pool"
HOST = "host"
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_of(url: str | None) -> str | None:
    """The lower-case host of a URL, None for an empty or host-less one."""
    if not url:
        return None
    try:
        host = urlsplit(url.strip()).hostname
    except ValueError:
        return None
    return host.lower() if host else None


def hardware_keys(*, gpu_pool: str | None, urls: Iterable[str | None], machine: str) -> list[str]:
    """The sorted keys of the hardware a run loads (see the module's docstring); `machine` is the name
    of the machine the worker runs on (loopback endpoints are on it)."""
    keys = {f"{POOL}:{gpu_pool.strip().lower()}"} if gpu_pool and gpu_pool.strip() else set()
    for url in urls:
        host = host_of(url)
        if host is None:
            continue
        keys.add(f"{HOST}:{machine.strip().lower() if is_loopback(host) else host}")
    return sorted(keys)


def machine_hardware_key(machine: str | None = None) -> str:
    """The key of the machine a loopback engine runs on (this machine, unless named)."""
    return f"{HOST}:{(machine or socket.gethostname()).strip().lower()}"


def split_key(key: str) -> tuple[str, str]:
    """(kind, name) of a key: ("pool", "a100") or ("host", "gpu-node-3")."""
    kind, _sep, name = key.partition(":")
    return kind, name


def shared(first: Iterable[str], second: Iterable[str]) -> list[str]:
    """The keys two runs have in common (what makes them conflict), sorted."""
    return sorted(set(first) & set(second))
