"""A2A push notification configs: set on both bindings and both versions, delivered
by the real dispatcher to a real receiver on 127.0.0.1, in A2A's shape, with the
config's token and credentials, and signed as every webhook is."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import httpx
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine
from standardwebhooks.webhooks import Webhook

from taskservice.db.keys import ApiKeyStore
from taskservice.db.tables import webhook_deliveries, webhook_subscriptions
from tests.conftest import ClientFactory, wait_for
from tests.fakes.webhook_receiver import Received, Receiver
from tests.integration.helpers import count

V1 = {"A2A-Version": "1.0"}
PUSH = {
    "webhook_allow_http": True,
    "webhook_allow_targets": ["127.0.0.1/32"],
    "webhook_jitter": 0,
    "poll_interval": 0.1,
}


async def rpc(client: httpx.AsyncClient, method: str, params: Any, **headers: str) -> Any:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    response = await client.post("/a2a", json=body, headers=headers or V1)
    assert response.status_code == 200, response.text
    return response.json()


def message(text: str) -> dict[str, Any]:
    return {"role": "ROLE_USER", "messageId": str(uuid.uuid4()), "parts": [{"text": text}]}


async def pushed(receiver: Receiver, path: str, n: int) -> list[Received]:
    async def check() -> list[Received] | None:
        got = receiver.at(path)
        return got if len(got) >= n else None

    result: list[Received] = await wait_for(check, timeout=15)
    return result


async def secret_of(db: AsyncEngine, task_id: str) -> str:
    async with db.connect() as conn:
        query = select(webhook_subscriptions.c.secret).where(
            webhook_subscriptions.c.task_id == uuid.UUID(task_id)
        )
        return str((await conn.execute(query)).scalar_one())


async def test_a_config_sent_with_the_message_pushes_every_state_in_1_0_shape(
    make_client: ClientFactory, receiver: Receiver, db: AsyncEngine
) -> None:
    config = {
        "url": receiver.url("/a2a"),
        "token": "tok-1",
        "authentication": {"scheme": "Bearer", "credentials": "s3cret"},
    }
    async with make_client(workers_enabled=True, **PUSH) as client:
        params = {"message": message("hi"), "configuration": {"taskPushNotificationConfig": config}}
        task = (await rpc(client, "SendMessage", params))["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        got = await pushed(receiver, "/a2a", 3)
        secret = await secret_of(db, task["id"])
    states = [r.json["task"]["status"]["state"] for r in got]
    assert states == ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]
    last = got[-1]
    assert last.headers["content-type"] == "application/a2a+json"
    assert last.headers["x-a2a-notification-token"] == "tok-1"
    assert last.headers["authorization"] == "Bearer s3cret"
    assert last.json["task"]["id"] == task["id"]
    assert last.json["task"]["artifacts"][0]["parts"][0]["text"]
    Webhook(secret).verify(last.body, last.headers)  # signed as every webhook is


async def test_configs_are_created_read_listed_replaced_and_deleted(
    make_client: ClientFactory, receiver: Receiver, db: AsyncEngine
) -> None:
    async with make_client(**PUSH) as client:  # no workers: the task stays submitted
        sent = {"message": message("x"), "configuration": {"returnImmediately": True}}
        task = (await rpc(client, "SendMessage", sent))["result"]["task"]
        tid = task["id"]
        made = await rpc(
            client,
            "CreateTaskPushNotificationConfig",
            {"taskId": tid, "id": "c1", "url": receiver.url("/one"), "token": "t"},
        )
        assert made["result"] == {
            "id": "c1",
            "taskId": tid,
            "url": receiver.url("/one"),
            "token": "t",
        }
        # The state the task is in is pushed at once.
        [first] = await pushed(receiver, "/one", 1)
        assert first.json["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"
        anonymous = await rpc(
            client, "CreateTaskPushNotificationConfig", {"taskId": tid, "url": receiver.url("/two")}
        )
        second_id = anonymous["result"]["id"]
        assert second_id not in ("", "c1")
        got = await rpc(client, "GetTaskPushNotificationConfig", {"taskId": tid, "id": "c1"})
        assert got["result"]["url"] == receiver.url("/one")
        listed = await rpc(client, "ListTaskPushNotificationConfigs", {"taskId": tid})
        assert [c["id"] for c in listed["result"]["configs"]] == ["c1", second_id]
        # The same id again replaces the config.
        moved = {"taskId": tid, "id": "c1", "url": receiver.url("/moved")}
        await rpc(client, "CreateTaskPushNotificationConfig", moved)
        listed = await rpc(client, "ListTaskPushNotificationConfigs", {"taskId": tid})
        assert [c["url"] for c in listed["result"]["configs"]] == [
            receiver.url("/moved"),
            receiver.url("/two"),
        ]
        # Deleting is idempotent, and stops the config's deliveries.
        for _ in range(2):
            deleted = await rpc(
                client, "DeleteTaskPushNotificationConfig", {"taskId": tid, "id": "c1"}
            )
            assert deleted["result"] == {}
        missing = await rpc(client, "GetTaskPushNotificationConfig", {"taskId": tid, "id": "c1"})
        assert missing["error"]["code"] == -32001
        before = len(receiver.at("/moved"))
        await rpc(client, "CancelTask", {"id": tid})
        await pushed(receiver, "/two", 2)  # the config still there gets the cancel
        await asyncio.sleep(0.3)
        assert len(receiver.at("/moved")) == before
        async with db.connect() as conn:
            rows = (await conn.execute(select(webhook_deliveries.c.state))).scalars().all()
        # The second config's two; the deleted one's delivery went with it.
        assert sorted(rows) == ["cancelled", "pending"]


async def test_config_refusals(make_client: ClientFactory, receiver: Receiver) -> None:
    async with make_client(**PUSH) as client:
        sent = {"message": message("x"), "configuration": {"returnImmediately": True}}
        tid = (await rpc(client, "SendMessage", sent))["result"]["task"]["id"]
        unknown = await rpc(
            client,
            "CreateTaskPushNotificationConfig",
            {"taskId": str(uuid.uuid4()), "url": receiver.url()},
        )
        assert unknown["error"]["code"] == -32001
        private = await rpc(
            client, "CreateTaskPushNotificationConfig", {"taskId": tid, "url": "http://10.1.2.3/"}
        )
        assert private["error"]["code"] == -32602
        assert "refused" in private["error"]["message"]
        no_task = await rpc(client, "CreateTaskPushNotificationConfig", {"url": receiver.url()})
        assert no_task["error"]["code"] == -32602
        listed = await rpc(client, "ListTaskPushNotificationConfigs", {"taskId": tid})
        assert listed["result"]["configs"] == []
        card = (await client.get("/.well-known/agent-card.json")).json()
    assert card["capabilities"]["pushNotifications"] is True


async def test_the_http_json_binding_has_the_config_resources(
    make_client: ClientFactory, receiver: Receiver
) -> None:
    headers = {"Content-Type": "application/a2a+json", **V1}
    async with make_client(**PUSH) as client:
        sent = {"message": message("x"), "configuration": {"returnImmediately": True}}
        tid = (await rpc(client, "SendMessage", sent))["result"]["task"]["id"]
        base = f"/a2a/rest/tasks/{tid}/pushNotificationConfigs"
        body = json.dumps({"id": "r1", "url": receiver.url("/rest")})
        made = await client.post(base, content=body, headers=headers)
        assert made.status_code == 200, made.text
        assert made.json()["taskId"] == tid
        assert (await client.get(f"{base}/r1")).json()["url"] == receiver.url("/rest")
        assert [c["id"] for c in (await client.get(base)).json()["configs"]] == ["r1"]
        assert (await client.delete(f"{base}/r1")).json() == {}
        missing = await client.get(f"{base}/r1")
        assert missing.status_code == 404
        assert (await client.get(base)).json()["configs"] == []


async def test_a_0_3_config_pushes_the_0_3_task(
    make_client: ClientFactory, receiver: Receiver
) -> None:
    async with make_client(workers_enabled=True, **PUSH) as client:
        sent = {
            "message": {
                "kind": "message",
                "role": "user",
                "messageId": str(uuid.uuid4()),
                "parts": [{"kind": "text", "text": "old"}],
            },
            "configuration": {
                "blocking": True,
                "pushNotificationConfig": {
                    "url": receiver.url("/old"),
                    "authentication": {"schemes": ["Basic"], "credentials": "dTpw"},
                },
            },
        }
        task = (await rpc(client, "message/send", sent, **{"A2A-Version": "0.3"}))["result"]
        got = await pushed(receiver, "/old", 3)
        listed = await rpc(
            client,
            "tasks/pushNotificationConfig/list",
            {"id": task["id"]},
            **{"A2A-Version": "0.3"},
        )
        [config] = listed["result"]
        fetched = await rpc(
            client,
            "tasks/pushNotificationConfig/get",
            {"id": task["id"], "pushNotificationConfigId": config["pushNotificationConfig"]["id"]},
            **{"A2A-Version": "0.3"},
        )
        deleted = await rpc(
            client,
            "tasks/pushNotificationConfig/delete",
            {"id": task["id"], "pushNotificationConfigId": config["pushNotificationConfig"]["id"]},
            **{"A2A-Version": "0.3"},
        )
    assert got[-1].json["kind"] == "task"
    assert got[-1].json["status"]["state"] == "completed"
    assert got[-1].headers["authorization"] == "Basic dTpw"
    assert "x-a2a-notification-token" not in got[-1].headers
    assert config["taskId"] == task["id"]
    assert config["pushNotificationConfig"]["authentication"] == {
        "schemes": ["Basic"],
        "credentials": "dTpw",
    }
    assert fetched["result"] == config
    assert deleted["result"] is None


async def test_a_refused_reply_sets_no_config(
    make_client: ClientFactory, receiver: Receiver
) -> None:
    async with make_client(**PUSH) as client:
        sent = {"message": message("x"), "configuration": {"returnImmediately": True}}
        task = (await rpc(client, "SendMessage", sent))["result"]["task"]
        await rpc(client, "CancelTask", {"id": task["id"]})  # it takes no more messages
        reply = {
            "message": {**message("more"), "taskId": task["id"]},
            "configuration": {"taskPushNotificationConfig": {"url": receiver.url("/no")}},
        }
        refused = await rpc(client, "SendMessage", reply)
        assert refused["error"]["code"] == -32004
        listed = await rpc(client, "ListTaskPushNotificationConfigs", {"taskId": task["id"]})
    assert listed["result"]["configs"] == []


async def test_another_tenant_s_task_is_not_found_whatever_the_url(
    make_client: ClientFactory, receiver: Receiver, db: AsyncEngine
) -> None:
    """Ownership first: a refused URL (400 before) must not tell that the task is
    there. On both A2A bindings, both versions, and REST's task webhooks alike."""
    alice, _ = await ApiKeyStore(db).create(tenant="alice")
    bob, _ = await ApiKeyStore(db).create(tenant="bob")
    as_bob = {"Authorization": f"Bearer {bob}"}
    async with make_client(**PUSH) as client:
        sent = {"message": message("x"), "configuration": {"returnImmediately": True}}
        as_alice = {**V1, "Authorization": f"Bearer {alice}"}
        tid = (await rpc(client, "SendMessage", sent, **as_alice))["result"]["task"]["id"]
        for url in ("http://10.1.2.3/", receiver.url("/bob")):  # refused, then allowed
            v10_set = await rpc(
                client,
                "CreateTaskPushNotificationConfig",
                {"taskId": tid, "url": url},
                **V1,
                **as_bob,
            )
            v03_set = await rpc(
                client,
                "tasks/pushNotificationConfig/set",
                {"taskId": tid, "pushNotificationConfig": {"url": url}},
                **{"A2A-Version": "0.3"},
                **as_bob,
            )
            rest_binding = await client.post(
                f"/a2a/rest/tasks/{tid}/pushNotificationConfigs",
                content=json.dumps({"url": url}),
                headers={"Content-Type": "application/a2a+json", **V1, **as_bob},
            )
            webhook = await client.post(
                f"/v1/tasks/{tid}/webhooks", json={"url": url}, headers=as_bob
            )
            assert v10_set["error"]["code"] == -32001, url
            assert v03_set["error"]["code"] == -32001, url
            assert rest_binding.status_code == 404, url
            assert (webhook.status_code, webhook.json()["status"]) == (404, 404), url
    assert await count(db, webhook_subscriptions) == 0
