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

from selection.domain.messages import NAME_SEPARATOR, Message, pgettext
from selection.domain.messages import marked as _

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


# Why a URL is refused, as message templates (pages say them in their language; the exception's
# text is the English with the field: "target.endpoint_url: ..."). Hosts are quoted as Python's repr.
BAD_SCHEME = _("scheme must be http or https, got '%(scheme)s'")
NO_HOST = _("no host in %(url)s")
CREDENTIALS = _("credentials in the URL are not accepted; use the API key field")
BAD_PORT = _("invalid port in %(url)s: it must be a number from 0 to 65535")
METADATA_HOST = _("'%(host)s' is a cloud metadata host and is always refused")
ALWAYS_REFUSED = _("%(host)s is %(kind)s and is always refused")
NOT_ALLOWED = _("host '%(host)s' is not in KVSELECT_ALLOWED_TARGETS (allowed: %(allowed)s)")
NOTHING_ALLOWED = pgettext("outbound allow-list", "empty")
CANNOT_RESOLVE = _("cannot resolve '%(host)s': %(error)s")
RESOLVES_FORBIDDEN = _("'%(host)s' resolves to %(address)s, %(kind)s; refused")
NOT_AN_ADDRESS = _("'%(host)s' resolves to %(address)s, not an address; refused")
NO_ADDRESS = _("'%(host)s' resolves to no address")
# the addresses refused whatever the allow-list says, by kind
METADATA_ADDRESS = _("a cloud metadata address")
LINK_LOCAL = _("link-local (169.254.0.0/16 or fe80::/10)")
MULTICAST = _("multicast or unspecified")


class TargetRefused(ValueError):
    """The target URL may not be contacted. `reason` says which rule refused it, as a message (a page
    renders it in its language); the exception's text is its English, after the field at fault."""

    def __init__(self, reason: Message) -> None:
        self.reason = reason
        super().__init__(f"target.endpoint_url: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.reason,))


Resolver = Callable[[str, int], Iterable[str]]


def _resolve(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
    return sorted({info[4][0] for info in infos})


def resolve(host: str, port: int) -> list[str]:
    """The addresses `host` resolves to (the lookup `check_target` uses when given no resolver)."""
    return _resolve(host, port)


def _forbidden_address(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> Message | None:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address in METADATA_ADDRESSES:
        return Message(METADATA_ADDRESS)
    if address.is_link_local:
        return Message(LINK_LOCAL)
    if address.is_multicast or address.is_unspecified:
        return Message(MULTICAST)
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
        raise TargetRefused(Message(BAD_SCHEME, {"scheme": parts.scheme or "none"}))
    host = (parts.hostname or "").lower().rstrip(".")
    if not host:
        raise TargetRefused(Message(NO_HOST, {"url": repr(url)}))
    if parts.username or parts.password:
        raise TargetRefused(Message(CREDENTIALS))
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise TargetRefused(Message(BAD_PORT, {"url": repr(url)})) from None
    if host in METADATA_HOSTS:
        raise TargetRefused(Message(METADATA_HOST, {"host": host}))
    try:
        literal = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    if literal is not None:
        reason = _forbidden_address(literal)
        if reason:
            raise TargetRefused(Message(ALWAYS_REFUSED, {"host": host, "kind": reason}))
    if not _host_allowed(host, allowed):
        listed = NAME_SEPARATOR.join(allowed) if allowed else NOTHING_ALLOWED
        raise TargetRefused(Message(NOT_ALLOWED, {"host": host, "allowed": listed}))
    if literal is None:
        try:
            addresses = list((resolver or _resolve)(host, port))
        except OSError as exc:
            raise TargetRefused(Message(CANNOT_RESOLVE, {"host": host, "error": str(exc)})) from None
        for text in addresses:
            try:
                address = ipaddress.ip_address(text.split("%")[0])
            except ValueError:
                continue
            reason = _forbidden_address(address)
            if reason:
                raise TargetRefused(Message(RESOLVES_FORBIDDEN, {"host": host, "address": text, "kind": reason}))
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
        raise TargetRefused(Message(CANNOT_RESOLVE, {"host": host, "error": str(exc)})) from None
    checked = []
    for text in addresses:
        try:
            address = ipaddress.ip_address(text.split("%")[0])
        except ValueError:
            raise TargetRefused(Message(NOT_AN_ADDRESS, {"host": host, "address": repr(text)})) from None
        reason = _forbidden_address(address)
        if reason:
            raise TargetRefused(Message(RESOLVES_FORBIDDEN, {"host": host, "address": text, "kind": reason}))
        checked.append(text)
    if not checked:
        raise TargetRefused(Message(NO_ADDRESS, {"host": host}))
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
