"""SSRF defence: which webhook targets the service may call.

Checked at registration and again at every attempt (DNS answers change):

- https only, unless the operator allows http; no user:password in the URL;
- the host is resolved, numeric spellings included (`2130706433`, `0177.0.0.1`,
  `0x7f.1` all mean 127.0.0.1 to the resolver), and every address it resolves to
  must be global: loopback, private, link-local (cloud metadata), CGNAT, multicast,
  reserved and unspecified addresses are refused, and so are IPv4-mapped and 6to4
  IPv6 addresses wrapping one of them;
- a host name must be a valid IDNA name (no empty label, none over 63 characters),
  and no control character (NUL, CR, LF, tab …) may appear anywhere in the URL;
- an operator allow-list admits internal alerting systems. A CIDR admits every
  address in it, whatever it is. A host *name* admits only the *private-network*
  addresses it resolves to (RFC 1918, IPv6 unique-local), checked at every attempt
  like any other: loopback, link-local, cloud metadata (169.254.0.0/16,
  fd00:ec2::/32, 100.100.100.200), CGNAT and reserved addresses need a CIDR, so a
  name re-pointed at 127.0.0.2 or at the metadata service is refused.

`resolve` returns the checked addresses: a caller connects to one of those, never
resolving again, so DNS cannot be re-bound between the check and the connection.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[list[str]]]
_CGNAT = ipaddress.ip_network("100.64.0.0/10")
# Cloud metadata services outside link-local: AWS over IPv6 (IMDS, DNS, NTP; inside
# the unique-local fc00::/7) and Alibaba Cloud (inside CGNAT).
_METADATA = (
    ipaddress.ip_network("fd00:ec2::/32"),
    ipaddress.ip_network("100.100.100.200/32"),
)
# Private networks proper: what an allow-listed host name may point at.
_PRIVATE_NETWORKS = (
    ipaddress.ip_network("10.0.0.0/8"),
    ipaddress.ip_network("172.16.0.0/12"),
    ipaddress.ip_network("192.168.0.0/16"),
    ipaddress.ip_network("fc00::/7"),
)


class UnsafeTarget(ValueError):
    """The URL may not be called; the message says why."""


@dataclass(frozen=True, slots=True)
class Target:
    url: str
    scheme: str
    host: str  # the name as given: for TLS SNI and the Host header
    port: int
    addresses: tuple[IPAddress, ...]  # what was checked; connect to one of these


@dataclass(frozen=True, slots=True)
class AllowList:
    hosts: frozenset[str] = frozenset()
    networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> AllowList:
        hosts, networks = set(), []
        for entry in entries:
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                hosts.add(_name(entry))
        return cls(frozenset(hosts), tuple(networks))

    def admits(self, host: str, address: IPAddress) -> bool:
        """An unsafe address is admitted by a CIDR holding it, or by an allow-listed
        name when it is a private-network address (never loopback, link-local or
        metadata: a name is trusted for what it is meant to point at, not wherever
        it resolves)."""
        if any(address in net for net in self.networks):
            return True
        return _name(host) in self.hosts and _private_network(address)


async def system_resolver(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )
    return [str(info[4][0]) for info in infos]


def _name(host: str) -> str:
    """A host name compared case-insensitively, without the root's trailing dot."""
    return host.lower().rstrip(".")


def _check_name(host: str) -> None:
    """A name the resolver can be asked about: IDNA-encodable, every label 1-63
    characters (`a..b` and 64-character labels make the resolver raise UnicodeError,
    a ValueError, not OSError)."""
    try:
        host.rstrip(".").encode("idna")
    except UnicodeError as exc:
        raise UnsafeTarget(f"{host!r} is not a valid host name ({exc.__cause__ or exc})") from exc


def _unwrap(address: IPAddress) -> IPAddress:
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address.sixtofour is not None:
            return address.sixtofour
    return address


def _private_network(address: IPAddress) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in net for net in _PRIVATE_NETWORKS) and unsafe_reason(address) == "private"


def unsafe_reason(address: IPAddress) -> str | None:
    # The wrapped address first: ::ffff:127.0.0.1 is loopback, whatever the wrapper is.
    for candidate in dict.fromkeys((_unwrap(address), address)):
        if any(candidate in net for net in _METADATA):
            return "cloud metadata"
        if candidate.is_loopback:
            return "loopback"
        if candidate.is_link_local:
            return "link-local (cloud metadata)"
        if candidate.is_multicast:
            return "multicast"
        if candidate.is_unspecified:
            return "unspecified"
        if isinstance(candidate, ipaddress.IPv4Address) and candidate in _CGNAT:
            return "carrier-grade NAT"
        if any(candidate in net for net in _PRIVATE_NETWORKS):
            return "private"
        if candidate.is_private or candidate.is_reserved or not candidate.is_global:
            return "reserved"
    return None


def _written(url: str, allow_http: bool) -> tuple[str, str, int]:
    """The URL's scheme, host and port, if its form may be called at all."""
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in url):
        # urlsplit would silently drop tabs and newlines; NUL cannot be stored.
        raise UnsafeTarget("the URL contains a control character")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise UnsafeTarget(f"not a valid URL: {exc}") from exc
    if parts.scheme not in ("https", "http") or (parts.scheme == "http" and not allow_http):
        raise UnsafeTarget("webhook URLs must use https")
    if parts.username or parts.password:
        raise UnsafeTarget("webhook URLs must not carry credentials")
    host = parts.hostname
    if not host:
        raise UnsafeTarget("the URL has no host")
    return parts.scheme, host, port or (443 if parts.scheme == "https" else 80)


def _literal(host: str) -> IPAddress | None:
    """The address a host names without a resolver: one in canonical form, or
    `localhost` (RFC 6761: loopback, always)."""
    if _name(host) == "localhost" or _name(host).endswith(".localhost"):
        return ipaddress.ip_address("127.0.0.1")
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def check_as_written(url: str, *, allow: AllowList = AllowList(), allow_http: bool = False) -> None:
    """What can be checked of `url` without the network (configuration, at load): its
    form, and an address written in it (or `localhost`). A name is checked when it
    is resolved, at each connection (`resolve`)."""
    _, host, _ = _written(url, allow_http)
    address = _literal(host)
    reason = unsafe_reason(address) if address is not None else None
    if address is not None and reason is not None and not allow.admits(host, address):
        raise UnsafeTarget(f"{host} is a {reason} address")


async def resolve(
    url: str,
    *,
    allow: AllowList = AllowList(),
    allow_http: bool = False,
    resolver: Resolver = system_resolver,
) -> Target:
    scheme, host, port = _written(url, allow_http)
    try:
        # An address in canonical form needs no resolver (other numeric spellings,
        # such as 2130706433, are left to it: that is how connections read them).
        resolved = [str(ipaddress.ip_address(host))]
    except ValueError:
        _check_name(host)
        try:
            resolved = await resolver(host, port)
        except (OSError, UnicodeError) as exc:
            raise UnsafeTarget(f"cannot resolve {host}: {exc}") from exc
    if not resolved:
        raise UnsafeTarget(f"{host} resolves to no address")
    addresses: list[IPAddress] = []
    for text in resolved:
        address = ipaddress.ip_address(text.split("%", 1)[0])
        reason = unsafe_reason(address)
        if reason is not None and not allow.admits(host, address):
            raise UnsafeTarget(f"{host} resolves to {address}, a {reason} address")
        addresses.append(address)
    return Target(url, scheme, host, port, tuple(addresses))
