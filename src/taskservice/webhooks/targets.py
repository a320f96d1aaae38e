"""SSRF defence: which webhook targets the service may call.

Checked at registration and again at every attempt (DNS answers change):

- https only, unless the operator allows http; no user:password in the URL;
- the host is resolved, numeric spellings included (`2130706433`, `0177.0.0.1`,
  `0x7f.1` all mean 127.0.0.1 to the resolver), and every address it resolves to
  must be global: loopback, private, link-local (cloud metadata), CGNAT, multicast,
  reserved and unspecified addresses are refused, and so are IPv4-mapped and 6to4
  IPv6 addresses wrapping one of them;
- an operator allow-list of host names and CIDRs admits internal alerting systems.

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
                hosts.add(entry.lower())
        return cls(frozenset(hosts), tuple(networks))

    def admits(self, host: str, address: IPAddress) -> bool:
        return host.lower() in self.hosts or any(address in net for net in self.networks)


async def system_resolver(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )
    return [str(info[4][0]) for info in infos]


def _unwrap(address: IPAddress) -> IPAddress:
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address.sixtofour is not None:
            return address.sixtofour
    return address


def unsafe_reason(address: IPAddress) -> str | None:
    inner = _unwrap(address)
    for candidate in {address, inner}:
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
        if candidate.is_private:
            return "private"
        if candidate.is_reserved or not candidate.is_global:
            return "reserved"
    return None


async def resolve(
    url: str,
    *,
    allow: AllowList = AllowList(),
    allow_http: bool = False,
    resolver: Resolver = system_resolver,
) -> Target:
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
    port = port or (443 if parts.scheme == "https" else 80)
    try:
        # An address in canonical form needs no resolver (other numeric spellings,
        # such as 2130706433, are left to it: that is how connections read them).
        resolved = [str(ipaddress.ip_address(host))]
    except ValueError:
        try:
            resolved = await resolver(host, port)
        except OSError as exc:
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
    return Target(url, parts.scheme, host, port, tuple(addresses))
