"""Webhooks end to end: real PostgreSQL, the real app and dispatcher, and a real HTTP
receiver on 127.0.0.1 (admitted by the operator allow-list, as an internal alerting
system would be)."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import httpx
import pytest
from sqlalchemy import null, select, update
from sqlalchemy.ext.asyncio import AsyncEngine
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from taskservice.db.keys import ApiKeyStore
from taskservice.db.tables import task_events, tasks, webhook_deliveries, webhook_subscriptions
from tests.conftest import ClientFactory, wait_for
from tests.fakes.webhook_receiver import Receiver, Reply
from tests.integration.helpers import count

# Short retry delays so a test sees a whole schedule; no jitter so gaps are known.
FAST = {
    "webhook_allow_http": True,
    "webhook_allow_targets": ["127.0.0.1/32"],
    "webhook_retry_schedule": [0, 0.2, 0.2, 0.2, 0.2, 0.2],
    "webhook_jitter": 0,
    "poll_interval": 0.1,
}


async def deliveries_of(client: httpx.AsyncClient, task_id: str) -> list[dict[str, Any]]:
    response = await client.get(f"/v1/tasks/{task_id}/deliveries")
    assert response.status_code == 200, response.text
    return list(response.json()["deliveries"])


async def settled(client: httpx.AsyncClient, task_id: str, n: int) -> list[dict[str, Any]]:
    """Wait until the task has n deliveries, none pending; oldest first."""

    async def check() -> list[dict[str, Any]] | None:
        found = await deliveries_of(client, task_id)
        done = len(found) == n and all(d["status"] != "pending" for d in found)
        return list(reversed(found)) if done else None

    result: list[dict[str, Any]] = await wait_for(check, timeout=15)
    return result


def verify(secret: str, received: Any) -> dict[str, Any]:
    """Check the signature with the reference Standard Webhooks implementation."""
    payload: dict[str, Any] = Webhook(secret).verify(received.body, received.headers)
    return payload


async def test_a_tasks_own_webhook_gets_each_state_signed_and_in_order(
    make_client: ClientFactory, receiver: Receiver
) -> None:
    async with make_client(workers_enabled=True, **FAST) as client:
        hook = {"url": receiver.url(), "states": ["running", "completed"]}
        created = await client.post("/v1/tasks", json={"input": "hi", "webhooks": [hook]})
        assert created.status_code == 201, created.text
        task = created.json()
        (registered,) = task["webhooks"]
        secret = registered["secret"]
        assert secret.startswith("whsec_")
        assert registered["states"] == ["running", "completed"]
        deliveries = await settled(client, task["id"], 2)

    assert [d["state"] for d in deliveries] == ["running", "completed"]
    assert all(d["status"] == "succeeded" for d in deliveries)
    got = receiver.at("/hook")
    assert [r.webhook_id for r in got] == [d["id"] for d in deliveries]
    bodies = [verify(secret, r) for r in got]
    assert [b["type"] for b in bodies] == ["task.running", "task.completed"]
    assert bodies[1]["data"]["task"]["id"] == task["id"]
    assert bodies[1]["data"]["task"]["state"] == "completed"
    assert bodies[0]["data"]["event_seq"] < bodies[1]["data"]["event_seq"]
    for d in deliveries:
        (attempt,) = d["attempt_log"]
        assert attempt["status_code"] == 200
        assert attempt["error"] is None
        assert attempt["duration_ms"] > 0
    # A tampered body or a wrong secret does not verify.
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(got[0].body + b" ", got[0].headers)
    other = "whsec_" + base64.b64encode(b"x" * 24).decode()
    with pytest.raises(WebhookVerificationError):
        Webhook(other).verify(got[0].body, got[0].headers)


async def test_registering_late_delivers_the_state_the_task_is_already_in(
    make_client: ClientFactory, receiver: Receiver
) -> None:
    async with make_client(**FAST) as client:
        task = (await client.post("/v1/tasks", json={"input": "hi"})).json()
        await client.post(f"/v1/tasks/{task['id']}/cancel", json={"reason": "no"})
        response = await client.post(
            f"/v1/tasks/{task['id']}/webhooks",
            json={"url": receiver.url(), "states": ["cancelled"]},
        )
        assert response.status_code == 201, response.text
        sub = response.json()
        assert response.headers["location"] == f"/v1/webhooks/{sub['id']}"
        (delivery,) = await settled(client, task["id"], 1)
        listed = (await client.get(f"/v1/tasks/{task['id']}/webhooks")).json()["webhooks"]

    assert delivery["state"] == "cancelled"
    assert delivery["webhook_id"] == sub["id"]
    (got,) = receiver.received
    assert verify(sub["secret"], got)["data"]["task"]["cancel_reason"] == "no"
    assert [w["id"] for w in listed] == [sub["id"]]
    assert "secret" not in listed[0]


async def test_a_registration_racing_a_transition_gets_exactly_one_delivery(
    make_client: ClientFactory, db: AsyncEngine, receiver: Receiver
) -> None:
    """Register for `cancelled` while the task is being cancelled, many times over:
    whichever commits first, the other sees it; never zero deliveries, never two."""
    async with make_client(webhooks_enabled=False, **FAST) as client:
        ids = [
            (await client.post("/v1/tasks", json={"input": "x"})).json()["id"] for _ in range(30)
        ]

        async def race(task_id: str) -> None:
            hook = {"url": receiver.url(), "states": ["cancelled"]}
            register = client.post(f"/v1/tasks/{task_id}/webhooks", json=hook)
            cancel = client.post(f"/v1/tasks/{task_id}/cancel")
            responses = await asyncio.gather(register, cancel)
            assert [r.status_code for r in responses] == [201, 200]

        await asyncio.gather(*(race(task_id) for task_id in ids))
    async with db.connect() as conn:
        rows = (await conn.execute(select(webhook_deliveries.c.task_id))).all()
    assert sorted(str(r.task_id) for r in rows) == sorted(ids)


async def test_tenant_webhooks_match_states_and_filters(
    make_client: ClientFactory, receiver: Receiver
) -> None:
    async with make_client(**FAST) as client:
        response = await client.post(
            "/v1/webhooks",
            json={
                "url": receiver.url("/alerts"),
                "states": ["cancelled"],
                "filters": {"metadata": {"team": "search"}, "agents": ["default"]},
            },
        )
        assert response.status_code == 201, response.text
        sub = response.json()
        wanted = await client.post(
            "/v1/tasks", json={"input": "a", "metadata": {"team": "search", "x": 1}}
        )
        other = await client.post("/v1/tasks", json={"input": "b", "metadata": {"team": "ads"}})
        for task in (wanted.json(), other.json()):
            await client.post(f"/v1/tasks/{task['id']}/cancel")
        await settled(client, wanted.json()["id"], 1)
        assert await deliveries_of(client, other.json()["id"]) == []
        page = (await client.get(f"/v1/webhooks/{sub['id']}/deliveries")).json()

    (got,) = receiver.at("/alerts")
    body = verify(sub["secret"], got)
    assert body["type"] == "task.cancelled"
    assert body["data"]["task"]["id"] == wanted.json()["id"]
    assert [d["task_id"] for d in page["deliveries"]] == [wanted.json()["id"]]


async def test_failures_are_retried_on_the_schedule_and_retry_after_is_honoured(
    make_client: ClientFactory, receiver: Receiver
) -> None:
    receiver.script(
        "/hook",
        Reply(500),
        Reply(503, headers={"Retry-After": "1"}),
        Reply(200),
    )
    async with make_client(**FAST) as client:
        hook = {"url": receiver.url(), "states": ["cancelled"]}
        task = (await client.post("/v1/tasks", json={"input": "x", "webhooks": [hook]})).json()
        await client.post(f"/v1/tasks/{task['id']}/cancel")
        (delivery,) = await settled(client, task["id"], 1)

    assert delivery["status"] == "succeeded"
    assert delivery["attempts"] == 3
    log = delivery["attempt_log"]
    assert [a["status_code"] for a in log] == [500, 503, 200]
    assert [a["error"] for a in log] == ["HTTP 500", "HTTP 503", None]
    got = receiver.at("/hook")
    # One webhook-id and one body for every attempt: receivers deduplicate on it.
    assert {r.webhook_id for r in got} == {delivery["id"]}
    assert len({r.body for r in got}) == 1
    # The schedule said 0.2 s after the first failure; Retry-After asked for 1 s.
    assert 0.15 <= got[1].at - got[0].at < 1.0
    assert got[2].at - got[1].at >= 0.95


async def test_a_hanging_receiver_times_out_and_is_tried_again(
    make_client: ClientFactory, receiver: Receiver
) -> None:
    receiver.script("/hook", Reply(200, delay=3))
    async with make_client(**FAST, webhook_timeout_seconds=0.5) as client:
        hook = {"url": receiver.url(), "states": ["cancelled"]}
        task = (await client.post("/v1/tasks", json={"input": "x", "webhooks": [hook]})).json()
        await client.post(f"/v1/tasks/{task['id']}/cancel")
        (delivery,) = await settled(client, task["id"], 1)

    log = delivery["attempt_log"]
    first, *between, last = log
    assert first["status_code"] is None
    assert first["error"] == "no answer within 0.5 s"
    assert 450 <= first["duration_ms"] < 2900  # cut at the timeout, not the 3 s reply
    # The receiver answers at once after its one hang; on a machine that stalls for
    # half a second a second attempt may time out as well, and is tried again too.
    assert all(a["error"] == "no answer within 0.5 s" for a in between), log
    assert [a["attempt"] for a in log] == list(range(1, len(log) + 1))
    assert last["status_code"] == 200
    assert delivery["status"] == "succeeded"


async def test_410_disables_the_webhook_with_an_event_and_nothing_more_is_sent(
    make_client: ClientFactory, db: AsyncEngine, receiver: Receiver
) -> None:
    receiver.script("/gone", Reply(410))
    async with make_client(**FAST) as client:
        sub = (
            await client.post(
                "/v1/webhooks", json={"url": receiver.url("/gone"), "states": ["cancelled"]}
            )
        ).json()
        first = (await client.post("/v1/tasks", json={"input": "x"})).json()
        await client.post(f"/v1/tasks/{first['id']}/cancel")
        (delivery,) = await settled(client, first["id"], 1)
        after = (await client.get(f"/v1/webhooks/{sub['id']}")).json()
        second = (await client.post("/v1/tasks", json={"input": "y"})).json()
        await client.post(f"/v1/tasks/{second['id']}/cancel")
        events = (await client.get(f"/v1/tasks/{first['id']}/events")).json()["events"]
        # Redelivery needs the webhook enabled again.
        refused = await client.post(f"/v1/deliveries/{delivery['id']}/redeliver")

    assert delivery["status"] == "failed"
    assert delivery["attempts"] == 1
    assert after["enabled"] is False
    assert after["disabled_reason"] == "the receiver answered 410 Gone"
    assert events[-1]["type"] == "webhook_disabled"
    assert events[-1]["data"]["subscription_id"] == sub["id"]
    assert refused.status_code == 409
    assert "disabled" in refused.json()["detail"]
    assert len(receiver.received) == 1
    async with db.connect() as conn:
        later = await conn.execute(
            select(webhook_deliveries).where(webhook_deliveries.c.task_id == second["id"])
        )
        assert later.all() == []


async def test_a_webhook_failing_for_too_long_is_disabled(
    make_client: ClientFactory, db: AsyncEngine, receiver: Receiver
) -> None:
    receiver.script("/down", *[Reply(500)] * 10)
    async with make_client(**FAST, webhook_disable_after_seconds=0.3) as client:
        sub = (
            await client.post(
                "/v1/webhooks", json={"url": receiver.url("/down"), "states": ["cancelled"]}
            )
        ).json()
        task = (await client.post("/v1/tasks", json={"input": "x"})).json()
        await client.post(f"/v1/tasks/{task['id']}/cancel")

        async def disabled() -> dict[str, Any] | None:
            found = (await client.get(f"/v1/webhooks/{sub['id']}")).json()
            return found if not found["enabled"] else None

        found = await wait_for(disabled, timeout=10)
        assert found["disabled_reason"].startswith("failing since ")
        assert found["consecutive_failures"] >= 2
        # The pending delivery waits; enabling again sends it.
        receiver.clear("/down")  # 200 from now on
        enabled = await client.patch(f"/v1/webhooks/{sub['id']}", json={"enabled": True})
        assert enabled.status_code == 200
        assert enabled.json()["consecutive_failures"] == 0
        (delivery,) = await settled(client, task["id"], 1)
    assert delivery["status"] == "succeeded"
    assert delivery["attempt_log"][-1]["status_code"] == 200


async def test_a_receiver_down_for_a_while_gets_everything_once_it_returns(
    make_client: ClientFactory, receiver: Receiver
) -> None:
    await receiver.stop()
    async with make_client(**FAST) as client:
        hook = {"url": receiver.url(), "states": ["cancelled"]}
        ids = []
        for n in range(5):
            task = (
                await client.post("/v1/tasks", json={"input": f"t{n}", "webhooks": [hook]})
            ).json()
            await client.post(f"/v1/tasks/{task['id']}/cancel")
            ids.append(task["id"])

        async def some_refused() -> bool:
            found = await deliveries_of(client, ids[-1])
            return bool(found) and found[0]["attempts"] >= 2

        await wait_for(some_refused, timeout=10)
        await receiver.start()
        results = [(await settled(client, task_id, 1))[0] for task_id in ids]

    assert all(d["status"] == "succeeded" for d in results)
    assert sorted(r.webhook_id for r in receiver.received) == sorted(d["id"] for d in results)
    first_error = results[0]["attempt_log"][0]["error"]
    assert first_error.startswith("ConnectError"), first_error


async def test_an_exhausted_delivery_fails_and_can_be_redelivered(
    make_client: ClientFactory, receiver: Receiver
) -> None:
    receiver.script("/hook", Reply(500), Reply(500))
    async with make_client(**{**FAST, "webhook_retry_schedule": [0, 0.1]}) as client:
        hook = {"url": receiver.url(), "states": ["cancelled"]}
        task = (await client.post("/v1/tasks", json={"input": "x", "webhooks": [hook]})).json()
        await client.post(f"/v1/tasks/{task['id']}/cancel")
        (failed,) = await settled(client, task["id"], 1)
        assert failed["status"] == "failed"
        assert failed["attempts"] == 2
        assert failed["last_status_code"] == 500
        again = await client.post(f"/v1/deliveries/{failed['id']}/redeliver")
        assert again.status_code == 202
        (delivered,) = await settled(client, task["id"], 1)
        single = (await client.get(f"/v1/deliveries/{failed['id']}")).json()

    assert delivered["status"] == "succeeded"
    assert delivered["attempts"] == 3
    assert [a["attempt"] for a in single["attempt_log"]] == [1, 2, 3]
    assert {r.webhook_id for r in receiver.received} == {failed["id"]}


async def test_redirects_are_not_followed(make_client: ClientFactory, receiver: Receiver) -> None:
    target = receiver.url("/elsewhere")  # allow-listed too: only a follow could reach it
    receiver.script("/hook", Reply(302, headers={"Location": target}))
    async with make_client(**{**FAST, "webhook_retry_schedule": [0]}) as client:
        hook = {"url": receiver.url(), "states": ["cancelled"]}
        task = (await client.post("/v1/tasks", json={"input": "x", "webhooks": [hook]})).json()
        await client.post(f"/v1/tasks/{task['id']}/cancel")
        (delivery,) = await settled(client, task["id"], 1)

    assert delivery["status"] == "failed"
    assert delivery["last_error"] == f"HTTP 302: redirect to '{target}' not followed"
    assert receiver.at("/elsewhere") == []


async def test_the_target_is_checked_again_at_every_attempt(
    make_client: ClientFactory, db: AsyncEngine, receiver: Receiver
) -> None:
    """A URL that passed at registration and no longer does (as after a DNS change)
    is not called."""
    async with make_client(
        **{**FAST, "webhook_retry_schedule": [0]}, webhooks_enabled=False
    ) as client:
        hook = {"url": receiver.url(), "states": ["cancelled"]}
        task = (await client.post("/v1/tasks", json={"input": "x", "webhooks": [hook]})).json()
    async with db.begin() as conn:
        await conn.execute(
            update(webhook_subscriptions).values(url=f"http://127.0.0.2:{receiver.port}/hook")
        )
    async with make_client(**{**FAST, "webhook_retry_schedule": [0]}) as client:
        await client.post(f"/v1/tasks/{task['id']}/cancel")
        (delivery,) = await settled(client, task["id"], 1)
    assert delivery["last_error"].startswith("target refused: 127.0.0.2 resolves to 127.0.0.2")
    assert delivery["attempt_log"][0]["status_code"] is None
    assert receiver.received == []


async def test_rotation_signs_with_both_secrets_during_the_overlap(
    make_client: ClientFactory, receiver: Receiver
) -> None:
    async with make_client(**FAST) as client:
        sub = (
            await client.post("/v1/webhooks", json={"url": receiver.url(), "states": ["cancelled"]})
        ).json()
        rotated = await client.post(
            f"/v1/webhooks/{sub['id']}/rotate-secret", json={"overlap_seconds": 3600}
        )
        assert rotated.status_code == 200
        new = rotated.json()
        assert new["secret"] != sub["secret"]
        assert new["previous_secret_expires_at"]
        task = (await client.post("/v1/tasks", json={"input": "x"})).json()
        await client.post(f"/v1/tasks/{task['id']}/cancel")
        await settled(client, task["id"], 1)
        # Without overlap the old secret stops at once.
        await client.post(f"/v1/webhooks/{sub['id']}/rotate-secret", json={"overlap_seconds": 0})
        # (the response carries the third secret; the first is now out of force)
        second = (await client.post("/v1/tasks", json={"input": "y"})).json()
        await client.post(f"/v1/tasks/{second['id']}/cancel")
        await settled(client, second["id"], 1)

    during, after = receiver.received
    assert len(during.headers["webhook-signature"].split(" ")) == 2
    verify(sub["secret"], during)
    verify(new["secret"], during)
    assert len(after.headers["webhook-signature"].split(" ")) == 1
    with pytest.raises(WebhookVerificationError):
        verify(sub["secret"], after)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/hook",
        "http://2130706433/hook",  # 127.0.0.1 in decimal
        "http://0177.0.0.1/hook",  # octal
        "http://0x7f.0.0.1/hook",  # hex
        "http://0x7f.1/hook",
        "http://[::ffff:127.0.0.1]/hook",  # IPv4-mapped IPv6
        "http://[::1]/hook",
        "http://[2002:7f00:1::]/hook",  # 6to4 around 127.0.0.1
        "http://localhost/hook",  # a name resolving to loopback
        "http://169.254.169.254/latest/meta-data",  # cloud metadata
        "http://10.0.0.8/hook",
        "http://192.168.1.1/hook",
        "http://100.64.0.1/hook",  # CGNAT
        "http://0.0.0.0/hook",
        "http://224.0.0.1/hook",
        "https://user:secret@example.com/hook",
        "ftp://example.com/hook",
        "file:///etc/passwd",
        "not a url",
    ],
)
async def test_tricky_urls_are_refused_at_registration_and_nothing_is_stored(
    make_client: ClientFactory, db: AsyncEngine, url: str
) -> None:
    async with make_client(webhook_allow_http=True) as client:
        tenant_wide = await client.post("/v1/webhooks", json={"url": url})
        with_task = await client.post("/v1/tasks", json={"input": "x", "webhooks": [{"url": url}]})
    for response in (tenant_wide, with_task):
        assert response.status_code == 422, response.text
        assert response.headers["content-type"] == "application/problem+json"
        assert "refused" in response.json()["detail"]
    assert await count(db, webhook_subscriptions) == 0
    assert await count(db, tasks) == 0


@pytest.mark.parametrize(
    "url",
    [
        "https://a..b/hook",  # an empty IDNA label
        f"https://{'a' * 64}.example.com/hook",  # a label over 63 characters
        "https://example.com/ho\u0000ok",  # NUL in the path
        "https://exa\u0000mple.com/hook",  # NUL in the host
        "https://example.com/hook\r\nX-Injected: 1",
    ],
)
async def test_invalid_host_names_and_control_characters_are_422_not_500(
    make_client: ClientFactory, db: AsyncEngine, receiver: Receiver, url: str
) -> None:
    async with make_client(**FAST) as client:
        existing = (await client.post("/v1/webhooks", json={"url": receiver.url()})).json()
        responses = [
            await client.post("/v1/webhooks", json={"url": url}),
            await client.post("/v1/tasks", json={"input": "x", "webhooks": [{"url": url}]}),
            await client.patch(f"/v1/webhooks/{existing['id']}", json={"url": url}),
        ]
        kept = (await client.get(f"/v1/webhooks/{existing['id']}")).json()
    for response in responses:
        assert response.status_code == 422, response.text
        assert response.headers["content-type"] == "application/problem+json"
    assert kept["url"] == receiver.url()
    assert await count(db, webhook_subscriptions) == 1
    assert await count(db, tasks) == 0


async def test_an_allow_listed_host_name_admits_no_loopback_address(
    make_client: ClientFactory, receiver: Receiver
) -> None:
    """`localhost` resolves to loopback: a name in the allow-list admits only the
    private-network addresses it resolves to; loopback needs a CIDR."""
    url = receiver.url(host="localhost")
    async with make_client(webhook_allow_http=True, webhook_allow_targets=["localhost"]) as client:
        by_name = await client.post("/v1/webhooks", json={"url": url})
    assert by_name.status_code == 422, by_name.text
    assert by_name.headers["content-type"] == "application/problem+json"
    assert "a loopback address" in by_name.json()["detail"]
    allowed = ["localhost", "127.0.0.0/8", "::1/128"]
    async with make_client(webhook_allow_http=True, webhook_allow_targets=allowed) as client:
        by_cidr = await client.post("/v1/webhooks", json={"url": url})
    assert by_cidr.status_code == 201, by_cidr.text


async def test_an_allow_listed_name_is_checked_against_the_rules_at_every_attempt(
    make_client: ClientFactory, receiver: Receiver
) -> None:
    """Registered while loopback was admitted by a CIDR; the dispatcher runs with only
    the name allow-listed: the address it would connect to is checked and refused."""
    url = receiver.url(host="localhost")
    both = {**FAST, "webhook_retry_schedule": [0]}
    both["webhook_allow_targets"] = ["localhost", "127.0.0.0/8", "::1/128"]
    async with make_client(**both, webhooks_enabled=False) as client:
        hook = {"url": url, "states": ["cancelled"]}
        task = (await client.post("/v1/tasks", json={"input": "x", "webhooks": [hook]})).json()
    name_only = {**both, "webhook_allow_targets": ["localhost"]}
    async with make_client(**name_only) as client:
        await client.post(f"/v1/tasks/{task['id']}/cancel")
        (delivery,) = await settled(client, task["id"], 1)
    assert delivery["status"] == "failed"
    assert delivery["last_error"].startswith("target refused: localhost resolves to ")
    assert delivery["last_error"].endswith("a loopback address")
    assert receiver.received == []


async def test_https_is_required_unless_the_operator_allows_http(
    make_client: ClientFactory, receiver: Receiver
) -> None:
    async with make_client(webhook_allow_targets=["127.0.0.1/32"]) as client:
        response = await client.post("/v1/webhooks", json={"url": receiver.url()})
    assert response.status_code == 422
    assert response.json()["detail"] == "webhook URL refused: webhook URLs must use https"


async def test_webhook_api_crud_and_validation(
    make_client: ClientFactory, receiver: Receiver
) -> None:
    async with make_client(**FAST) as client:
        made = await client.post("/v1/webhooks", json={"url": receiver.url()})
        assert made.status_code == 201
        sub = made.json()
        assert sub["states"] == ["input_required", "completed", "failed", "cancelled"]
        assert sub["task_id"] is None
        assert sub["enabled"] is True
        got = (await client.get(f"/v1/webhooks/{sub['id']}")).json()
        assert "secret" not in got
        assert got["url"] == receiver.url()
        listed = (await client.get("/v1/webhooks")).json()
        assert [w["id"] for w in listed["webhooks"]] == [sub["id"]]
        patched = await client.patch(
            f"/v1/webhooks/{sub['id']}", json={"states": ["failed"], "enabled": False}
        )
        assert patched.status_code == 200
        assert patched.json()["states"] == ["failed"]
        assert patched.json()["disabled_reason"] == "disabled by the API"

        bad: list[tuple[str, str, dict[str, Any]]] = [
            ("post", "/v1/webhooks", {"url": receiver.url(), "states": []}),
            ("post", "/v1/webhooks", {"url": receiver.url(), "states": ["done"]}),
            ("post", "/v1/webhooks", {"url": receiver.url(), "secret": "whsec_short"}),
            ("post", "/v1/webhooks", {"url": receiver.url(), "secret": "plain"}),
            ("post", "/v1/webhooks", {"url": receiver.url(), "filters": {"tenant": "x"}}),
            ("post", "/v1/webhooks", {"url": receiver.url(), "extra": 1}),
            ("patch", f"/v1/webhooks/{sub['id']}", {"url": "http://10.1.1.1/"}),
        ]
        for method, path, body in bad:
            response = await client.request(method, path, json=body)
            assert response.status_code == 422, (body, response.text)
            assert response.headers["content-type"] == "application/problem+json"
        unchanged = (await client.get(f"/v1/webhooks/{sub['id']}")).json()
        assert unchanged["url"] == receiver.url()

        own = "whsec_" + base64.b64encode(b"k" * 32).decode()
        mine = await client.post("/v1/webhooks", json={"url": receiver.url(), "secret": own})
        assert mine.json()["secret"] == own

        assert (await client.delete(f"/v1/webhooks/{sub['id']}")).status_code == 204
        for path in (f"/v1/webhooks/{sub['id']}", "/v1/webhooks/nope", "/v1/deliveries/nope"):
            missing = await client.get(path)
            assert missing.status_code == 404
        assert (await client.delete(f"/v1/webhooks/{sub['id']}")).status_code == 404
        unknown_task = await client.post(
            "/v1/tasks/0190aaaa-0000-7000-8000-000000000000/webhooks", json={"url": receiver.url()}
        )
        assert unknown_task.status_code == 404


async def test_webhooks_and_deliveries_are_scoped_to_the_tenant(
    make_client: ClientFactory, db: AsyncEngine, receiver: Receiver
) -> None:
    keys = ApiKeyStore(db)
    alice, _ = await keys.create(tenant="alice")
    bob, _ = await keys.create(tenant="bob")
    as_alice = {"Authorization": f"Bearer {alice}"}
    as_bob = {"Authorization": f"Bearer {bob}"}
    async with make_client(**FAST) as client:
        tenant_wide = (
            await client.post(
                "/v1/webhooks",
                json={"url": receiver.url("/bob"), "states": ["cancelled"]},
                headers=as_bob,
            )
        ).json()
        hook = {"url": receiver.url("/alice"), "states": ["cancelled"]}
        task = (
            await client.post(
                "/v1/tasks", json={"input": "x", "webhooks": [hook]}, headers=as_alice
            )
        ).json()
        await client.post(f"/v1/tasks/{task['id']}/cancel", headers=as_alice)
        (delivery,) = await settled_as(client, task["id"], as_alice)
        sub_id = task["webhooks"][0]["id"]
        for path in (
            f"/v1/webhooks/{sub_id}",
            f"/v1/webhooks/{sub_id}/deliveries",
            f"/v1/deliveries/{delivery['id']}",
            f"/v1/tasks/{task['id']}/deliveries",
            f"/v1/tasks/{task['id']}/webhooks",
        ):
            assert (await client.get(path, headers=as_bob)).status_code == 404, path
        assert (
            await client.post(f"/v1/deliveries/{delivery['id']}/redeliver", headers=as_bob)
        ).status_code == 404
        assert (
            await client.post(f"/v1/tasks/{task['id']}/webhooks", json=hook, headers=as_bob)
        ).status_code == 404
        assert (await client.get("/v1/webhooks", headers=as_alice)).json()["webhooks"] == []
        assert tenant_wide["id"]
    # Bob's tenant-wide webhook never hears of Alice's task.
    assert receiver.at("/bob") == []
    assert len(receiver.at("/alice")) == 1


async def settled_as(
    client: httpx.AsyncClient, task_id: str, headers: dict[str, str]
) -> list[dict[str, Any]]:
    async def check() -> list[dict[str, Any]] | None:
        found = (await client.get(f"/v1/tasks/{task_id}/deliveries", headers=headers)).json()
        items = found["deliveries"]
        return items if items and all(d["status"] != "pending" for d in items) else None

    result: list[dict[str, Any]] = await wait_for(check, timeout=15)
    return result


async def test_an_idempotent_replay_registers_nothing_twice(
    make_client: ClientFactory, db: AsyncEngine, receiver: Receiver
) -> None:
    async with make_client(**FAST, webhooks_enabled=False) as client:
        body = {"input": "x", "webhooks": [{"url": receiver.url()}]}
        headers = {"Idempotency-Key": "k1"}
        first = await client.post("/v1/tasks", json=body, headers=headers)
        again = await client.post("/v1/tasks", json=body, headers=headers)
        changed = await client.post(
            "/v1/tasks",
            json={**body, "webhooks": [{"url": receiver.url("/other")}]},
            headers=headers,
        )
    assert (first.status_code, again.status_code, changed.status_code) == (201, 200, 409)
    assert again.json()["webhooks"] == first.json()["webhooks"]
    assert await count(db, webhook_subscriptions) == 1


async def test_the_outbox_row_commits_with_the_state_change(
    make_client: ClientFactory, db: AsyncEngine, receiver: Receiver
) -> None:
    """No dispatcher runs: the delivery exists as soon as the cancel answered, in the
    same transaction as the state and its event."""
    async with make_client(**FAST, webhooks_enabled=False) as client:
        hook = {"url": receiver.url(), "states": ["pending", "cancelled"]}
        task = (await client.post("/v1/tasks", json={"input": "x", "webhooks": [hook]})).json()
        await client.post(f"/v1/tasks/{task['id']}/cancel")
        found = await deliveries_of(client, task["id"])
    assert sorted((d["state"], d["event_seq"]) for d in found) == [("cancelled", 2), ("pending", 1)]
    async with db.connect() as conn:
        seqs = (
            (
                await conn.execute(
                    select(task_events.c.seq).where(task_events.c.type == "state_change")
                )
            )
            .scalars()
            .all()
        )
    assert sorted(seqs) == [1, 2]


async def test_a_later_state_waits_for_the_earlier_one_to_be_settled(
    make_client: ClientFactory, receiver: Receiver
) -> None:
    """`pending` fails once and is retried 0.5 s later; `cancelled`, due meanwhile,
    is held back until `pending` went through: one (webhook, task) in state order."""
    receiver.script("/hook", Reply(500))
    schedule = {**FAST, "webhook_retry_schedule": [0, 0.5, 0.5]}
    async with make_client(**schedule) as client:
        hook = {"url": receiver.url(), "states": ["pending", "cancelled"]}
        task = (await client.post("/v1/tasks", json={"input": "x", "webhooks": [hook]})).json()
        await wait_for(lambda: receiver.received, timeout=5)  # pending's first attempt
        await client.post(f"/v1/tasks/{task['id']}/cancel")
        first, second = await settled(client, task["id"], 2)

    assert [first["state"], second["state"]] == ["pending", "cancelled"]
    got = [(r.json["data"]["state"], r.webhook_id) for r in receiver.received]
    assert got == [
        ("pending", first["id"]),
        ("pending", first["id"]),
        ("cancelled", second["id"]),
    ]


async def test_a_task_has_at_most_the_configured_number_of_webhooks(
    make_client: ClientFactory, db: AsyncEngine, receiver: Receiver
) -> None:
    async with make_client(**FAST, webhook_max_per_task=2, webhooks_enabled=False) as client:
        hooks = [{"url": receiver.url(f"/{n}")} for n in range(3)]
        too_many = await client.post("/v1/tasks", json={"input": "x", "webhooks": hooks})
        assert too_many.status_code == 422
        task = (await client.post("/v1/tasks", json={"input": "x", "webhooks": hooks[:2]})).json()
        third = await client.post(f"/v1/tasks/{task['id']}/webhooks", json=hooks[2])
    assert third.status_code == 409
    assert third.headers["content-type"] == "application/problem+json"
    assert await count(db, webhook_subscriptions) == 2


async def stored_payloads(db: AsyncEngine) -> dict[str, bytes]:
    async with db.connect() as conn:
        rows = await conn.execute(select(webhook_deliveries.c.id, webhook_deliveries.c.payload))
    return {str(row.id): row.payload.encode() for row in rows if row.payload is not None}


async def test_a_delivery_shows_the_task_as_it_was_at_the_state_change(
    make_client: ClientFactory, db: AsyncEngine, receiver: Receiver
) -> None:
    """No dispatcher runs while the task goes running -> completed; the `task.running`
    delivery's first attempt comes after the task finished, and still shows it
    running: the outbox row froze the task at the state change."""
    async with make_client(workers_enabled=True, webhooks_enabled=False, **FAST) as client:
        hook = {"url": receiver.url(), "states": ["running", "completed"]}
        task = (await client.post("/v1/tasks", json={"input": "hi", "webhooks": [hook]})).json()

        async def finished() -> bool:
            got = (await client.get(f"/v1/tasks/{task['id']}")).json()
            return bool(got["state"] == "completed")

        await wait_for(finished, timeout=15)
    async with db.connect() as conn:
        rows = await conn.execute(
            select(webhook_deliveries.c.state, webhook_deliveries.c.task_snapshot)
        )
        snapshots = {row.state: row.task_snapshot for row in rows}
    assert snapshots["running"]["state"] == "running"
    assert snapshots["running"]["result"] is None
    assert snapshots["completed"]["state"] == "completed"
    async with make_client(**FAST) as client:
        await settled(client, task["id"], 2)

    running, completed = receiver.received
    assert running.json["data"]["state"] == "running"
    assert running.json["data"]["task"]["state"] == "running"
    assert running.json["data"]["task"]["result"] is None
    assert running.json["data"]["task"]["finished_at"] is None
    assert completed.json["data"]["task"]["state"] == "completed"
    assert completed.json["data"]["task"]["result"] is not None
    saved = await stored_payloads(db)
    assert saved == {running.webhook_id: running.body, completed.webhook_id: completed.body}


async def test_a_delivery_queued_without_a_snapshot_gets_one_body_for_every_attempt(
    make_client: ClientFactory, db: AsyncEngine, receiver: Receiver
) -> None:
    """A row queued before snapshots existed is rendered once, from the task as it is,
    and the body is saved before the first send: the retry sends the same bytes."""
    receiver.script("/hook", Reply(500))
    async with make_client(**FAST, webhooks_enabled=False) as client:
        hook = {"url": receiver.url(), "states": ["cancelled"]}
        task = (await client.post("/v1/tasks", json={"input": "x", "webhooks": [hook]})).json()
        await client.post(f"/v1/tasks/{task['id']}/cancel", json={"reason": "old row"})
    async with db.begin() as conn:
        await conn.execute(update(webhook_deliveries).values(task_snapshot=null()))
    async with make_client(**FAST) as client:
        (delivery,) = await settled(client, task["id"], 1)

    assert delivery["status"] == "succeeded"
    first, second = receiver.received
    assert first.webhook_id == second.webhook_id == delivery["id"]
    assert first.body == second.body
    assert first.json["data"]["task"]["cancel_reason"] == "old row"
    assert await stored_payloads(db) == {delivery["id"]: first.body}


async def test_an_input_required_delivery_carries_the_approval_request(
    make_client: ClientFactory, receiver: Receiver
) -> None:
    """An alerting system subscribed to input_required can page someone with what
    the call is: the tool, its arguments, the profile's note."""
    async with make_client(workers_enabled=True, **FAST) as client:
        alerts = await client.post(
            "/v1/webhooks",
            json={"url": receiver.url("/page"), "states": ["input_required"]},
        )
        assert alerts.status_code == 201, alerts.text
        secret = alerts.json()["secret"]
        body = {"agent": "demo", "input": "approve, take 1s"}
        task = (await client.post("/v1/tasks", json=body)).json()
        (delivery,) = await settled(client, task["id"], 1)
    assert delivery["state"] == "input_required"
    (got,) = receiver.at("/page")
    sent = verify(secret, got)["data"]["task"]
    assert sent["state"] == "input_required"
    request = sent["input_request"]
    assert request["kind"] == "approvals"
    [call] = request["approvals"]
    assert call["tool"] == "publish"
    assert call["arguments"]["channel"] == "#demo"
    assert call["note"].startswith("The demo publishes its answer")
