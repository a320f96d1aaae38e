"""The dispatcher's HTTP client against a real receiver on 127.0.0.1."""

from __future__ import annotations

import ipaddress

import httpcore
import pytest

from taskservice.webhooks.http import Sender
from taskservice.webhooks.targets import AllowList, Target, resolve
from tests.fakes.webhook_receiver import Receiver


async def test_the_connection_goes_to_the_checked_address_with_the_real_host_name() -> None:
    """`hooks.internal` resolves (through the resolver used for the check) to
    127.0.0.1; the sender never resolves it again, yet sends `Host: hooks.internal`."""

    async def resolver(host: str, port: int) -> list[str]:
        assert host == "hooks.internal"
        return ["127.0.0.1"]

    sender = Sender(timeout=5)
    async with Receiver() as receiver:
        url = f"http://hooks.internal:{receiver.port}/hook"
        target = await resolve(
            url,
            allow=AllowList.parse(["127.0.0.1/32"]),
            allow_http=True,
            resolver=resolver,
        )
        assert target.addresses == (ipaddress.ip_address("127.0.0.1"),)
        answer = await sender.post(target, b"{}", {"webhook-id": "msg_1"})
        await sender.aclose()
    assert answer.status_code == 200
    (got,) = receiver.received
    assert got.headers["host"] == f"hooks.internal:{receiver.port}"
    assert got.headers["webhook-id"] == "msg_1"
    assert got.headers["content-type"] == "application/json"


async def test_a_host_without_checked_addresses_is_never_connected() -> None:
    sender = Sender(timeout=5)
    async with Receiver() as receiver:
        unchecked = Target(receiver.url(), "http", "127.0.0.1", receiver.port, addresses=())
        with pytest.raises(httpcore.ConnectError, match="was not checked"):
            await sender.post(unchecked, b"{}", {})
        await sender.aclose()
    assert receiver.received == []
