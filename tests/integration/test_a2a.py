"""The A2A binding: agent card and JSON-RPC methods, on the real app and database."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import httpx
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.db.keys import ApiKeyStore
from taskservice.db.tables import tasks
from tests.conftest import ClientFactory, LiveFactory, wait_for
from tests.integration.helpers import asks_for_a_colour


def text_message(text: str, **fields: Any) -> dict[str, Any]:
    return {
        "kind": "message",
        "role": "user",
        "messageId": fields.pop("messageId", str(uuid.uuid4())),
        "parts": [{"kind": "text", "text": text}],
        **fields,
    }


async def rpc(
    client: httpx.AsyncClient, method: str, params: Any = None, **headers: str
) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": "r1", "method": method, "params": params}
    response = await client.post("/a2a", json=body, headers=headers)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    assert answer["jsonrpc"] == "2.0"
    assert answer["id"] == "r1"
    return answer


async def until_a2a_state(client: httpx.AsyncClient, task_id: str, state: str) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        task: dict[str, Any] = (await rpc(client, "tasks/get", {"id": task_id}))["result"]
        return task if task["status"]["state"] == state else None

    return await wait_for(check, timeout=20)  # type: ignore[no-any-return]


async def test_the_agent_card_keeps_the_fields_a_0_3_client_reads(
    make_client: ClientFactory, db: AsyncEngine
) -> None:
    await ApiKeyStore(db).create(tenant="carded")  # a key is required: the card says so
    async with make_client() as client:
        card = (await client.get("/.well-known/agent-card.json")).json()
    async with make_client(demo_agent=False) as client:
        without_demo = (await client.get("/.well-known/agent-card.json")).json()
    assert [skill["id"] for skill in without_demo["skills"]] == ["default"]
    assert card["protocolVersion"] == "0.3.0"
    assert card["url"] == "http://testserver/a2a"
    assert card["preferredTransport"] == "JSONRPC"
    assert card["capabilities"]["streaming"] is True
    assert card["capabilities"]["pushNotifications"] is True
    assert [skill["id"] for skill in card["skills"]] == ["default", "demo"]
    assert card["security"] == [{"bearer": []}]
    assert card["securitySchemes"]["bearer"]["type"] == "http"
    assert card["securitySchemes"]["bearer"]["scheme"] == "bearer"
    assert card["supportsAuthenticatedExtendedCard"] is True


async def test_a_message_starts_a_task_that_completes_with_an_artifact(
    make_client: ClientFactory,
) -> None:
    async with make_client(workers_enabled=True) as client:
        sent = await rpc(client, "message/send", {"message": text_message("What is A2A?")})
        task = sent["result"]
        assert task["kind"] == "task"
        assert task["status"]["state"] in ("submitted", "working", "completed")
        assert task["contextId"]  # one is made when the message brings none
        done = await until_a2a_state(client, task["id"], "completed")
        assert done["contextId"] == task["contextId"]
        [artifact] = done["artifacts"]
        [part] = artifact["parts"]
        assert part["kind"] == "text"
        assert "What is A2A?" in part["text"]
        # The same task on the REST API.
        rest = (await client.get(f"/v1/tasks/{task['id']}")).json()
        assert rest["state"] == "completed"
        assert rest["context_id"] == task["contextId"]
        assert rest["result"] == part["text"]


async def test_blocking_send_answers_with_the_finished_task(make_client: ClientFactory) -> None:
    async with make_client(workers_enabled=True) as client:
        params = {"message": text_message("quick"), "configuration": {"blocking": True}}
        task = (await rpc(client, "message/send", params))["result"]
    assert task["status"]["state"] == "completed"
    assert task["artifacts"]


async def test_a_resent_message_finds_the_task_it_created(
    make_client: ClientFactory, db: AsyncEngine
) -> None:
    message = text_message("once", messageId="m-123", contextId="ctx-1")
    async with make_client() as client:
        first = (await rpc(client, "message/send", {"message": message}))["result"]
        again = (await rpc(client, "message/send", {"message": message}))["result"]
        other = {**message, "parts": [{"kind": "text", "text": "something else"}]}
        reused = await rpc(client, "message/send", {"message": other})
        no_context = text_message("no context", messageId="m-456")
        fresh = (await rpc(client, "message/send", {"message": no_context}))["result"]
        retried = (await rpc(client, "message/send", {"message": no_context}))["result"]
    assert again["id"] == first["id"]
    assert first["contextId"] == "ctx-1"
    assert retried["id"] == fresh["id"]  # the context made up for it is the same too
    assert retried["contextId"] == fresh["contextId"]
    # Another message under an id used before is a message of its own (the
    # conformance kits send such), not a retry: it starts its own task.
    assert reused["result"]["id"] not in (first["id"], fresh["id"])
    async with db.connect() as conn:
        count = (await conn.execute(select(func.count()).select_from(tasks))).scalar_one()
    assert count == 3


async def test_a_task_waiting_for_input_is_answered_by_a_message_naming_it(
    make_client: ClientFactory,
) -> None:
    models = {"asker": asks_for_a_colour()}
    async with make_client(models=models, workers_enabled=True) as client:
        params = {"message": text_message("paint it"), "metadata": {"model": "asker"}}
        asked = (await rpc(client, "message/send", params))["result"]
        task = (await rpc(client, "message/send", {"message": text_message("other")}))["result"]
        waiting = await until_a2a_state(client, asked["id"], "input-required")
        assert waiting["status"]["message"]["role"] == "agent"
        assert waiting["status"]["message"]["parts"] == [{"kind": "text", "text": "Which colour?"}]
        reply = text_message("blue", taskId=asked["id"], contextId=waiting["contextId"])
        resumed = (await rpc(client, "message/send", {"message": reply}))["result"]
        assert resumed["id"] == asked["id"]
        assert resumed["status"]["state"] == "working"
        done = await until_a2a_state(client, asked["id"], "completed")
        assert done["artifacts"][0]["parts"][0]["text"] == "painted blue"
        # A finished task takes no more messages.
        finished = await until_a2a_state(client, task["id"], "completed")
        late = text_message("too late", taskId=finished["id"])
        refused = await rpc(client, "message/send", {"message": late})
        assert refused["error"]["code"] == -32004  # UnsupportedOperation
        assert "completed" in refused["error"]["message"]
        # A context that is not the task's is refused.
        elsewhere = text_message("x", taskId=asked["id"], contextId="another-context")
        mismatch = await rpc(client, "message/send", {"message": elsewhere})
        assert mismatch["error"]["code"] == -32602
        assert mismatch["error"]["data"]["errors"][0]["loc"] == ["message", "contextId"]


async def test_cancel_and_its_errors(make_client: ClientFactory) -> None:
    async with make_client() as client:
        task = (await rpc(client, "message/send", {"message": text_message("x")}))["result"]
        cancelled = (await rpc(client, "tasks/cancel", {"id": task["id"]}))["result"]
        assert cancelled["status"]["state"] == "canceled"
        again = await rpc(client, "tasks/cancel", {"id": task["id"]})
        assert again["error"]["code"] == -32002  # a cancelled task is not cancelable
        assert again["error"]["data"]["state"] == "cancelled"
        missing = await rpc(client, "tasks/get", {"id": str(uuid.uuid4())})
        assert missing["error"]["code"] == -32001
        assert (await rpc(client, "tasks/cancel", {"id": "nope"}))["error"]["code"] == -32001


async def test_a_finished_task_is_not_cancelable(make_client: ClientFactory) -> None:
    async with make_client(workers_enabled=True) as client:
        params = {"message": text_message("done soon"), "configuration": {"blocking": True}}
        task = (await rpc(client, "message/send", params))["result"]
        assert task["status"]["state"] == "completed"
        refused = await rpc(client, "tasks/cancel", {"id": task["id"]})
    assert refused["error"]["code"] == -32002
    assert refused["error"]["data"] == {"taskId": task["id"], "state": "completed"}


async def test_protocol_errors(make_client: ClientFactory) -> None:
    async with make_client() as client:

        async def raw(body: bytes) -> dict[str, Any]:
            response = await client.post(
                "/a2a", content=body, headers={"Content-Type": "application/json"}
            )
            assert response.status_code == 200
            answer: dict[str, Any] = response.json()
            return answer

        assert (await raw(b"{not json"))["error"]["code"] == -32700
        assert (await raw(b"[]"))["error"]["code"] == -32600
        no_version = await raw(b'{"id": 1, "method": "tasks/get", "params": {"id": "x"}}')
        assert no_version == {
            "jsonrpc": "2.0",
            "id": 1,
            "error": {"code": -32600, "message": "Request payload validation error"},
        }
        assert (await rpc(client, "tasks/delete", {}))["error"]["code"] == -32601
        # Without an id, the method is still checked (and answered, with id null).
        no_id = await raw(b'{"jsonrpc": "2.0", "method": "tasks/delete", "params": {}}')
        assert no_id["id"] is None
        assert no_id["error"]["code"] == -32601
        bad_id = await raw(b'{"jsonrpc": "2.0", "id": {}, "method": "tasks/get"}')
        assert bad_id["error"]["code"] == -32600
        not_object = await raw(b'{"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": 1}')
        assert not_object["error"]["code"] == -32602
        no_message = await rpc(client, "message/send", {})
        assert no_message["error"]["code"] == -32602
        assert no_message["error"]["data"]["errors"][0]["loc"] == ["message"]
        negative = await rpc(client, "tasks/get", {"id": "x", "historyLength": -1})
        assert negative["error"]["code"] == -32602
        assert negative["error"]["data"]["errors"][0]["loc"] == ["historyLength"]
        file_part = text_message("x")
        file_part["parts"] = [{"kind": "file", "file": {"uri": "https://example.com/a.pdf"}}]
        assert (await rpc(client, "message/send", {"message": file_part}))["error"][
            "code"
        ] == -32005
        push = await rpc(client, "tasks/pushNotificationConfig/set", {"id": "x"})
        assert push["error"]["code"] == -32602  # no taskId, no config
        # Bad input changes nothing.
        listed = (await client.get("/v1/tasks")).json()["tasks"]
        assert listed == []


async def test_a2a_is_scoped_to_the_caller_s_tenant(
    make_client: ClientFactory, db: AsyncEngine
) -> None:
    keys = ApiKeyStore(db)
    alice, _ = await keys.create(tenant="alice")
    bob, _ = await keys.create(tenant="bob")
    as_alice = {"Authorization": f"Bearer {alice}"}
    as_bob = {"Authorization": f"Bearer {bob}"}
    async with make_client() as client:
        anonymous = await client.post(
            "/a2a", json={"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {}}
        )
        assert anonymous.status_code == 401
        params = {"message": text_message("alice's")}
        task = (await rpc(client, "message/send", params, **as_alice))["result"]
        assert (await rpc(client, "tasks/get", {"id": task["id"]}, **as_bob))["error"][
            "code"
        ] == -32001
        assert (await rpc(client, "tasks/cancel", {"id": task["id"]}, **as_bob))["error"][
            "code"
        ] == -32001
        reply = text_message("hijack", taskId=task["id"])
        assert (await rpc(client, "message/send", {"message": reply}, **as_bob))["error"][
            "code"
        ] == -32001
        mine = (await rpc(client, "tasks/get", {"id": task["id"]}, **as_alice))["result"]
        assert mine["status"]["state"] == "submitted"


async def stream_results(
    client: httpx.AsyncClient, method: str, params: Any
) -> tuple[str, list[dict[str, Any]]]:
    """POST a streaming method; the content type and every JSON-RPC response it
    sent, read until the server ends the stream (or the one plain response)."""
    body = {"jsonrpc": "2.0", "id": "s1", "method": method, "params": params}
    answers: list[dict[str, Any]] = []
    async with client.stream("POST", "/a2a", json=body) as response:
        assert response.status_code == 200
        content_type = response.headers["content-type"]
        if content_type.startswith("application/json"):
            answers.append(json.loads(await response.aread()))
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                answers.append(json.loads(line[len("data: ") :]))
    assert all(a["jsonrpc"] == "2.0" and a["id"] == "s1" for a in answers)
    return content_type, answers


def slow_model(seconds: float) -> FunctionModel:
    async def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        await asyncio.sleep(seconds)
        return ModelResponse(parts=[TextPart("slowly done")])

    return FunctionModel(answer)


async def test_message_stream_sends_the_task_then_each_update_until_the_final_one(
    make_live: LiveFactory,
) -> None:
    async with (
        make_live(models={"slow": slow_model(0.3)}, workers_enabled=True) as live,
        httpx.AsyncClient(base_url=live.url, timeout=10) as client,
    ):
        params = {"message": text_message("take your time"), "metadata": {"model": "slow"}}
        content_type, answers = await stream_results(client, "message/stream", params)
    assert content_type.startswith("text/event-stream")
    results = [answer["result"] for answer in answers]
    first, *updates = results
    assert first["kind"] == "task"
    assert first["status"]["state"] in ("submitted", "working")
    kinds = [(u["kind"], u.get("status", {}).get("state"), u.get("final")) for u in updates]
    expected = [
        ("artifact-update", None, None),
        ("status-update", "completed", True),
    ]
    if first["status"]["state"] == "submitted":
        expected.insert(0, ("status-update", "working", False))
    assert kinds == expected
    assert updates[-2]["artifact"]["parts"] == [{"kind": "text", "text": "slowly done"}]
    assert {u["taskId"] for u in updates} == {first["id"]}
    assert {u["contextId"] for u in updates} == {first["contextId"]}


async def test_a_stream_pauses_for_input_and_the_answer_streams_to_the_end(
    make_live: LiveFactory,
) -> None:
    async with (
        make_live(models={"asker": asks_for_a_colour()}, workers_enabled=True) as live,
        httpx.AsyncClient(base_url=live.url, timeout=10) as client,
    ):
        params = {"message": text_message("paint"), "metadata": {"model": "asker"}}
        _, asked = await stream_results(client, "message/stream", params)
        last = asked[-1]["result"]
        task_id = asked[0]["result"]["id"]
        waiting = last.get("status", {})
        assert waiting["state"] == "input-required"
        assert waiting["message"]["parts"] == [{"kind": "text", "text": "Which colour?"}]
        assert last.get("final", True) is True
        # Resubscribing to a task that waits: the task, and the stream ends.
        _, again = await stream_results(client, "tasks/resubscribe", {"id": task_id})
        assert [a["result"]["status"]["state"] for a in again] == ["input-required"]
        # The answer, streamed: on to the end.
        reply = {"message": text_message("green", taskId=task_id)}
        _, rest = await stream_results(client, "message/stream", reply)
    final = rest[-1]["result"]
    assert final["status"]["state"] == "completed"
    assert final["final"] is True
    artifact = next(a["result"] for a in rest if a["result"]["kind"] == "artifact-update")
    assert artifact["artifact"]["parts"][0]["text"] == "painted green"


async def test_a_refused_streaming_request_is_answered_without_a_stream(
    make_live: LiveFactory,
) -> None:
    async with make_live() as live, httpx.AsyncClient(base_url=live.url, timeout=10) as client:
        content_type, bad = await stream_results(client, "message/stream", {})
        assert content_type.startswith("application/json")
        assert [a["error"]["code"] for a in bad] == [-32602]
        content_type, missing = await stream_results(
            client, "tasks/resubscribe", {"id": str(uuid.uuid4())}
        )
        assert content_type.startswith("application/json")
        assert [a["error"]["code"] for a in missing] == [-32001]
        assert (await client.get("/v1/tasks")).json()["tasks"] == []  # nothing was created


async def test_a_task_shows_its_history_as_long_as_asked(make_client: ClientFactory) -> None:
    models = {"asker": asks_for_a_colour()}
    async with make_client(models=models, workers_enabled=True) as client:
        message = text_message("paint it", messageId="m-paint")
        wait = {"blocking": True}
        params = {"message": message, "metadata": {"model": "asker"}, "configuration": wait}
        asked = (await rpc(client, "message/send", params))["result"]
        assert asked["status"]["state"] == "input-required"
        assert [(m["role"], m["parts"]) for m in asked["history"]] == [
            ("user", [{"kind": "text", "text": "paint it"}]),
            ("agent", [{"kind": "text", "text": "Which colour?"}]),
        ]
        assert asked["history"][0]["messageId"] == "m-paint"  # the id it was sent with
        reply = {"message": text_message("blue", taskId=asked["id"]), "configuration": wait}
        done = (await rpc(client, "message/send", reply))["result"]
        assert done["status"]["state"] == "completed"
        full = (await rpc(client, "tasks/get", {"id": asked["id"]}))["result"]
        short = (await rpc(client, "tasks/get", {"id": asked["id"], "historyLength": 1}))["result"]
        none = (await rpc(client, "tasks/get", {"id": asked["id"], "historyLength": 0}))["result"]
    said = [(m["role"], m["parts"][0]["text"]) for m in full["history"]]
    assert said == [
        ("user", "paint it"),
        ("agent", "Which colour?"),
        ("user", "blue"),
        ("agent", "painted blue"),
    ]
    assert {(m["taskId"], m["contextId"]) for m in full["history"]} == {
        (asked["id"], asked["contextId"])
    }
    assert len({m["messageId"] for m in full["history"]}) == 4
    assert [m["parts"][0]["text"] for m in short["history"]] == ["painted blue"]
    assert "history" not in none


async def test_text_and_data_parts_make_one_input(make_client: ClientFactory) -> None:
    async with make_client() as client:
        message = text_message("Summarise these rows")
        message["parts"].append({"kind": "data", "data": {"rows": [1, 2]}})
        task = (await rpc(client, "message/send", {"message": message}))["result"]
        rest = (await client.get(f"/v1/tasks/{task['id']}")).json()
        assert rest["input"] == {"text": "Summarise these rows", "data": {"rows": [1, 2]}}
        # The same checks as on REST: a bare number is no input.
        number = text_message("x")
        number["parts"] = [{"kind": "data", "data": 5}]
        refused = await rpc(client, "message/send", {"message": number})
        assert refused["error"]["code"] == -32602
        assert "text or a JSON object" in refused["error"]["message"]
        assert len((await client.get("/v1/tasks")).json()["tasks"]) == 1


async def test_a_0_3_message_referring_to_a_task_continues_it_as_a_fork(
    make_client: ClientFactory,
) -> None:
    async with make_client(workers_enabled=True) as client:
        params = {"message": text_message("one"), "configuration": {"blocking": True}}
        first = (await rpc(client, "message/send", params))["result"]
        follow = text_message("two", referenceTaskIds=[first["id"]])
        params = {"message": follow, "configuration": {"blocking": True}}
        then = (await rpc(client, "message/send", params))["result"]
    assert then["id"] != first["id"]
    assert then["contextId"] == first["contextId"]
    assert then["status"]["state"] == "completed"
    assert [m["parts"][0]["text"] for m in then["history"]][::2] == ["one", "two"]
