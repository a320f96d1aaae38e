"""SSRF defence: tricky URLs are refused, allowed ones are pinned to their addresses."""

from __future__ import annotations

import ipaddress

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
