"""The dispatcher's HTTP client against a real receiver on 127.0.0.1."""

from __future__ import annotations

import ipaddress
import ssl

import httpcore
import httpx
import pytest
import trustme

from taskservice.webhooks.http import CheckedTransport, Sender
from taskservice.webhooks.targets import AllowList, Target, UnsafeTarget, resolve
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


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


async def pinned_to_loopback(host: str, port: int) -> list[str]:
    return ["127.0.0.1"]


@pytest.mark.parametrize(
    ("cert_for", "verified"), [("hooks.internal", True), ("other.internal", False)]
)
async def test_tls_is_verified_for_the_registered_name_not_the_pinned_address(
    ca: trustme.CA, cert_for: str, verified: bool
) -> None:
    """The connection goes to 127.0.0.1, but SNI and certificate verification use
    `hooks.internal`: a certificate for another name is refused."""
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    sender = Sender(timeout=5, ssl_context=client_context)
    with ca.issue_cert(cert_for).private_key_and_cert_chain_pem.tempfile() as pem:
        async with Receiver(certfile=pem) as receiver:
            target = await resolve(
                receiver.url(host="hooks.internal"),
                allow=AllowList.parse(["127.0.0.1/32"]),
                resolver=pinned_to_loopback,
            )
            if verified:
                answer = await sender.post(target, b"{}", {"webhook-id": "msg_tls"})
                assert answer.status_code == 200
            else:
                with pytest.raises(httpcore.ConnectError, match="certificate verify failed"):
                    await sender.post(target, b"{}", {"webhook-id": "msg_tls"})
            await sender.aclose()
    assert [r.webhook_id for r in receiver.received] == (["msg_tls"] if verified else [])


# -- other outbound calls (delegation): an httpx transport, checked and pinned ----


async def test_a_checked_transport_connects_to_the_checked_address_with_the_host_name() -> None:
    """`agents.internal` resolves only through the resolver of the check (nothing
    else knows it): the request reaches 127.0.0.1, with its name in `Host`."""
    asked: list[str] = []

    async def resolver(host: str, port: int) -> list[str]:
        asked.append(host)
        return ["127.0.0.1"]

    transport = CheckedTransport(
        allow=AllowList.parse(["127.0.0.1/32"]), allow_http=True, resolver=resolver
    )
    async with Receiver() as receiver, httpx.AsyncClient(transport=transport) as client:
        url = f"http://agents.internal:{receiver.port}/a2a"
        answers = [await client.post(url, json={"n": n}) for n in range(2)]
    assert [a.status_code for a in answers] == [200, 200]
    assert asked == ["agents.internal", "agents.internal"]  # each request checked
    assert [r.headers["host"] for r in receiver.received] == [
        f"agents.internal:{receiver.port}"
    ] * 2


async def test_a_checked_transport_refuses_an_address_that_is_not_allowed() -> None:
    transport = CheckedTransport(allow=AllowList(), allow_http=True, resolver=pinned_to_loopback)
    async with Receiver() as receiver, httpx.AsyncClient(transport=transport) as client:
        with pytest.raises(UnsafeTarget, match="loopback"):
            await client.post(f"http://agents.internal:{receiver.port}/a2a", json={})
    assert receiver.received == []
