"""SSRF defence: tricky URLs are refused, allowed ones are pinned to their addresses."""

from __future__ import annotations

import ipaddress
import re

import pytest

from taskservice.webhooks.targets import AllowList, UnsafeTarget, resolve


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/hook",
        "http://2130706433/hook",  # decimal
        "http://0177.0.0.1/hook",  # octal
        "http://0x7f.0.0.1/hook",  # hex
        "http://127.1/hook",  # short form
        "http://localhost/hook",
        "http://[::1]/hook",
        "http://[::ffff:127.0.0.1]/hook",  # IPv4-mapped
        "http://[::ffff:7f00:1]/hook",
        "http://[2002:7f00:1::]/hook",  # 6to4 wrapping 127.0.0.1
        "http://169.254.169.254/latest/meta-data/",  # cloud metadata
        "http://[fe80::1]/hook",
        "http://10.0.0.1/hook",
        "http://172.16.5.4/hook",
        "http://192.168.1.1/hook",
        "http://100.64.0.1/hook",  # carrier-grade NAT
        "http://0.0.0.0/hook",
        "http://224.0.0.1/hook",  # multicast
        "http://240.0.0.1/hook",  # reserved
    ],
)
async def test_internal_addresses_are_refused_however_spelled(url: str) -> None:
    with pytest.raises(UnsafeTarget):
        await resolve(url, allow_http=True)


async def test_names_resolving_to_private_addresses_are_refused() -> None:
    async def rebinding(host: str, port: int) -> list[str]:
        return ["93.184.216.34", "10.1.2.3"]  # one public, one private: refused

    with pytest.raises(UnsafeTarget, match="private"):
        await resolve("https://hooks.example.com/x", resolver=rebinding)


async def test_https_is_required_unless_allowed_and_credentials_are_refused() -> None:
    async def public(host: str, port: int) -> list[str]:
        return ["93.184.216.34"]

    with pytest.raises(UnsafeTarget, match="https"):
        await resolve("http://hooks.example.com/x", resolver=public)
    with pytest.raises(UnsafeTarget, match="https"):
        await resolve("ftp://hooks.example.com/x", resolver=public)
    with pytest.raises(UnsafeTarget, match="credentials"):
        await resolve("https://user:pw@hooks.example.com/x", resolver=public)
    target = await resolve("https://hooks.example.com:8443/x", resolver=public)
    assert (target.host, target.port) == ("hooks.example.com", 8443)
    assert target.addresses == (ipaddress.ip_address("93.184.216.34"),)


async def test_the_operator_allow_list_admits_internal_receivers() -> None:
    allow = AllowList.parse(["127.0.0.0/8", "alerts.internal"])
    target = await resolve("http://127.0.0.1:9000/hook", allow=allow, allow_http=True)
    assert target.addresses == (ipaddress.ip_address("127.0.0.1"),)

    async def internal(host: str, port: int) -> list[str]:
        return ["10.0.0.7"]

    named = await resolve("https://alerts.internal/hook", allow=allow, resolver=internal)
    assert named.addresses == (ipaddress.ip_address("10.0.0.7"),)
    with pytest.raises(UnsafeTarget):
        await resolve("https://other.internal/hook", allow=allow, resolver=internal)


class Pointing:
    """A resolver whose answer the test changes, as a DNS record is re-pointed."""

    def __init__(self, *addresses: str) -> None:
        self.answer = list(addresses)

    async def __call__(self, host: str, port: int) -> list[str]:
        return list(self.answer)


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.2",  # loopback
        "::1",
        "::ffff:127.0.0.1",  # loopback behind an IPv4-mapped address
        "169.254.169.254",  # link-local: AWS, GCP, Azure, Oracle metadata
        "fe80::1",
        "fd00:ec2::254",  # AWS metadata over IPv6 (inside unique-local fc00::/7)
        "100.100.100.200",  # Alibaba Cloud metadata (inside CGNAT)
        "100.64.0.1",  # CGNAT
        "0.0.0.0",
        "198.18.0.1",  # benchmarking, reserved
    ],
)
async def test_an_allow_listed_name_admits_no_loopback_link_local_or_metadata_address(
    address: str,
) -> None:
    allow = AllowList.parse(["alerts.internal"])
    with pytest.raises(
        UnsafeTarget, match=re.escape(f"resolves to {ipaddress.ip_address(address)}")
    ):
        await resolve("https://alerts.internal/hook", allow=allow, resolver=Pointing(address))


@pytest.mark.parametrize("address", ["10.0.0.7", "172.16.9.9", "192.168.1.20", "fd12:3456::7"])
async def test_an_allow_listed_name_admits_the_private_network_addresses_it_resolves_to(
    address: str,
) -> None:
    allow = AllowList.parse(["Alerts.Internal."])  # case and the root's dot do not matter
    target = await resolve("https://alerts.internal/hook", allow=allow, resolver=Pointing(address))
    assert target.addresses == (ipaddress.ip_address(address),)


async def test_a_name_re_pointed_at_loopback_is_refused_at_the_next_check() -> None:
    """Registration and every attempt call `resolve`: the name's current answer is
    what is checked, and what is connected to."""
    allow = AllowList.parse(["alerts.internal"])
    resolver = Pointing("10.0.0.7")
    await resolve("https://alerts.internal/hook", allow=allow, resolver=resolver)
    resolver.answer[:] = ["127.0.0.2"]
    with pytest.raises(UnsafeTarget, match=re.escape("127.0.0.2, a loopback address")):
        await resolve("https://alerts.internal/hook", allow=allow, resolver=resolver)
    resolver.answer[:] = ["10.0.0.7", "169.254.169.254"]
    with pytest.raises(UnsafeTarget, match=re.escape("169.254.169.254")):
        await resolve("https://alerts.internal/hook", allow=allow, resolver=resolver)


async def test_loopback_and_metadata_need_an_explicit_cidr() -> None:
    allow = AllowList.parse(["alerts.internal", "127.0.0.0/8", "fd00:ec2::254/128"])
    for address in ("127.0.0.2", "fd00:ec2::254"):
        target = await resolve(
            "https://alerts.internal/hook", allow=allow, resolver=Pointing(address)
        )
        assert target.addresses == (ipaddress.ip_address(address),)


@pytest.mark.parametrize(
    "url",
    [
        "https://a..b/hook",  # an empty label
        f"https://{'a' * 64}.example.com/hook",  # a label over 63 characters
        "https://.example.com/hook",
        "https://example.com/ho\x00ok",  # NUL in the path
        "https://exa\x00mple.com/hook",
        "https://example.com/\r\nX-Injected: 1",
        "https://example.com\t/hook",  # urlsplit would drop the tab silently
    ],
)
async def test_invalid_host_names_and_control_characters_are_refused_before_resolving(
    url: str,
) -> None:
    async def never(host: str, port: int) -> list[str]:
        raise AssertionError("resolved")

    with pytest.raises(UnsafeTarget):
        await resolve(url, resolver=never)


async def test_a_resolver_raising_unicode_error_is_a_refusal_not_a_crash() -> None:
    async def idna_failure(host: str, port: int) -> list[str]:
        raise UnicodeError("encoding with 'idna' codec failed")

    with pytest.raises(UnsafeTarget, match="cannot resolve"):
        await resolve("https://hooks.example.com/x", resolver=idna_failure)
