"""Outbound safety: refuse targets that are not allow-listed, link-local or cloud metadata.

Why: a validation run makes a worker on a GPU node send requests to a user-supplied URL; without a
check it could be pointed at the cloud metadata service or internal hosts (SSRF). The check runs
before any connection: the host must be in the allow-list, and neither the literal address nor
any address the name resolves to may be link-local or a metadata address.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Callable, Iterable
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
