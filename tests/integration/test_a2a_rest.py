"""A2A 1.0 over HTTP+JSON under `/a2a/rest`: the operations on the real app and
database, their statuses, `google.rpc.Status` errors, and SSE streams."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.db.keys import ApiKeyStore
from tests.conftest import ClientFactory, LiveFactory
from tests.integration.helpers import asks_for_a_colour

BASE = "/a2a/rest"
A2A_JSON = {"Content-Type": "application/a2a+json", "A2A-Version": "1.0"}


def message(text: str, **fields: Any) -> dict[str, Any]:
    return {
        "role": "ROLE_USER",
        "messageId": fields.pop("messageId", str(uuid.uuid4())),
        "parts": [{"text": text}],
        **fields,
    }


def later(text: str) -> bytes:
    return json.dumps(
        {"message": message(text), "configuration": {"returnImmediately": True}}
    ).encode()


def refusal(response: httpx.Response, status: int, reason: str) -> dict[str, Any]:
    """The google.rpc.Status of a refused request, checked for its status and reason."""
    assert response.status_code == status, response.text
    said = response.request.headers.get("content-type", "") + response.request.headers["accept"]
    spoken = "application/a2a+json" if "a2a+json" in said else "application/json"
    assert response.headers["content-type"] == spoken  # the client's, else plain JSON
    error: dict[str, Any] = response.json()["error"]
    assert error["code"] == status
    [info, *_] = error["details"]
    assert info["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"
    assert (info["reason"], info["domain"]) == (reason, "a2a-protocol.org")
    return error


async def events(client: httpx.AsyncClient, verb: str, path: str, body: Any = None) -> Any:
    """An SSE stream's events as (name, data), or the plain answer of a refusal."""
    seen: list[tuple[str, Any]] = []
    content = json.dumps(body).encode() if body is not None else None
    async with client.stream(verb, BASE + path, content=content, headers=A2A_JSON) as response:
        if not response.headers["content-type"].startswith("text/event-stream"):
            await response.aread()
            return response
        name = "message"
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                name = line[len("event: ") :]
            elif line.startswith("data: "):
                seen.append((name, json.loads(line[len("data: ") :])))
                name = "message"
    return seen


async def test_send_get_list_and_cancel(make_client: ClientFactory) -> None:
    async with make_client() as client:
        sent = await client.post(f"{BASE}/message:send", content=later("one"), headers=A2A_JSON)
        assert sent.status_code == 200
        assert sent.headers["content-type"] == "application/a2a+json"
        task = sent.json()["task"]
        assert task["status"]["state"] == "TASK_STATE_SUBMITTED"
        await client.post(f"{BASE}/message:send", content=later("two"), headers=A2A_JSON)

        got = (await client.get(f"{BASE}/tasks/{task['id']}?historyLength=1")).json()
        assert [m["parts"] for m in got["history"]] == [[{"text": "one"}]]
        assert (
            "history" not in (await client.get(f"{BASE}/tasks/{task['id']}?historyLength=0")).json()
        )

        page = (await client.get(f"{BASE}/tasks", params={"pageSize": 1})).json()
        assert (page["pageSize"], page["totalSize"]) == (1, 2)
        rest = await client.get(f"{BASE}/tasks", params={"pageToken": page["nextPageToken"]})
        assert [t["id"] for t in rest.json()["tasks"]] == [task["id"]]
        listed = await client.get(
            f"{BASE}/tasks",
            params={"status": "TASK_STATE_SUBMITTED", "contextId": task["contextId"]},
        )
        assert [t["id"] for t in listed.json()["tasks"]] == [task["id"]]

        cancelled = await client.post(f"{BASE}/tasks/{task['id']}:cancel", headers=A2A_JSON)
        assert cancelled.json()["status"]["state"] == "TASK_STATE_CANCELED"
        again = await client.post(f"{BASE}/tasks/{task['id']}:cancel", headers=A2A_JSON)
        assert refusal(again, 400, "TASK_NOT_CANCELABLE")["status"] == "FAILED_PRECONDITION"
        card = await client.get(f"{BASE}/extendedAgentCard")  # open mode: no key
        assert refusal(card, 400, "EXTENDED_AGENT_CARD_NOT_CONFIGURED")


async def test_errors_are_statuses_with_the_spec_s_http_codes(make_client: ClientFactory) -> None:
    async with make_client() as client:
        missing = await client.get(f"{BASE}/tasks/{uuid.uuid4()}")
        assert refusal(missing, 404, "TASK_NOT_FOUND")["status"] == "NOT_FOUND"
        no_parts = json.dumps({"message": {**message("x"), "parts": []}})
        invalid = await client.post(f"{BASE}/message:send", content=no_parts, headers=A2A_JSON)
        error = refusal(invalid, 400, "INVALID_PARAMS")
        assert error["details"][1]["fieldViolations"][0]["field"] == "message.parts"
        negative = await client.get(f"{BASE}/tasks", params={"historyLength": "-1"})
        refusal(negative, 400, "INVALID_PARAMS")
        stamp = await client.get(f"{BASE}/tasks", params={"statusTimestampAfter": "-1"})
        refusal(stamp, 400, "INVALID_PARAMS")
        file = json.dumps({"message": {**message("x"), "parts": [{"url": "https://x/a.pdf"}]}})
        typed = await client.post(f"{BASE}/message:send", content=file, headers=A2A_JSON)
        refusal(typed, 400, "CONTENT_TYPE_NOT_SUPPORTED")
        push = await client.post(
            f"{BASE}/tasks/x/pushNotificationConfigs", content=b"{}", headers=A2A_JSON
        )
        assert refusal(push, 400, "INVALID_PARAMS")["details"][1]["fieldViolations"] == [
            {"field": "url", "description": "Field required"}
        ]
        # What the request guard refuses, before any route: in the same form.
        text = await client.post(
            f"{BASE}/message:send", content=b"hi", headers={"Content-Type": "text/plain"}
        )
        refusal(text, 415, "CONTENT_TYPE_NOT_SUPPORTED")
        broken = await client.post(f"{BASE}/message:send", content=b"{", headers=A2A_JSON)
        refusal(broken, 400, "PARSE_ERROR")
        not_object = await client.post(f"{BASE}/message:send", content=b"[1]", headers=A2A_JSON)
        refusal(not_object, 400, "INVALID_REQUEST")
        # Another version: this binding is 1.0's only.
        old = await client.post(
            f"{BASE}/message:send", content=later("x"), headers={**A2A_JSON, "A2A-Version": "0.3"}
        )
        assert "A2A-Version: 1.0" in refusal(old, 400, "VERSION_NOT_SUPPORTED")["message"]
        by_query = await client.get(f"{BASE}/tasks?A2A-Version=2.0")
        refusal(by_query, 400, "VERSION_NOT_SUPPORTED")
        # An unknown path, and a known one with another verb.
        unknown = await client.get(f"{BASE}/tasks/x/nothing")
        refusal(unknown, 404, "METHOD_NOT_FOUND")
        verb = await client.delete(f"{BASE}/tasks/x:cancel")
        refusal(verb, 405, "METHOD_NOT_FOUND")
        assert verb.headers["allow"] == "POST"
        # Bad input changed nothing.
        assert (await client.get("/v1/tasks")).json()["tasks"] == []


async def test_answers_are_in_the_json_media_type_the_client_speaks(
    make_client: ClientFactory,
) -> None:
    a2a, plain = "application/a2a+json", "application/json"
    async with make_client() as client:
        sent = await client.post(
            f"{BASE}/message:send", content=later("x"), headers={"Content-Type": plain}
        )
        assert sent.headers["content-type"] == plain
        task_path = f"{BASE}/tasks/{sent.json()['task']['id']}"
        answers = {
            "no preference": await client.get(task_path),
            "accepts a2a+json": await client.get(task_path, headers={"Accept": a2a}),
            "sends a2a+json": await client.post(
                f"{BASE}/message:send", content=later("y"), headers={"Content-Type": a2a}
            ),
            "refused, no preference": await client.get(f"{BASE}/tasks/{uuid.uuid4()}"),
            "refused, accepts a2a+json": await client.get(
                f"{BASE}/tasks/{uuid.uuid4()}", headers={"Accept": f"{a2a}, */*;q=0.1"}
            ),
            "refused by the guard": await client.post(
                f"{BASE}/message:send", content=b"{", headers={"Content-Type": a2a}
            ),
        }
    assert {said: r.headers["content-type"] for said, r in answers.items()} == {
        "no preference": plain,
        "accepts a2a+json": a2a,
        "sends a2a+json": a2a,
        "refused, no preference": plain,
        "refused, accepts a2a+json": a2a,
        "refused by the guard": a2a,
    }


async def test_the_operations_are_at_the_root_too(make_client: ClientFactory) -> None:
    async with make_client() as client:
        sent = await client.post("/message:send", content=later("root"), headers=A2A_JSON)
        task = sent.json()["task"]
        got = await client.get(f"/tasks/{task['id']}")
        assert got.json()["id"] == task["id"]
        broken = await client.post("/message:send", content=b"{", headers=A2A_JSON)
        refusal(broken, 400, "PARSE_ERROR")
        spec = (await client.get("/openapi.json")).json()
    assert "/message:send" not in spec["paths"]  # documented once, under /a2a/rest


async def test_a_missing_key_is_an_unauthenticated_status(
    make_client: ClientFactory, db: AsyncEngine
) -> None:
    key, _ = await ApiKeyStore(db).create(tenant="alice")
    async with make_client() as client:
        anonymous = await client.get(f"{BASE}/tasks")
        assert anonymous.status_code == 401
        assert anonymous.headers["www-authenticate"] == "Bearer"
        assert anonymous.json()["error"]["status"] == "UNAUTHENTICATED"
        as_alice = {"Authorization": f"Bearer {key}"}
        mine = await client.get(f"{BASE}/tasks", headers=as_alice)
        assert mine.json()["tasks"] == []
        card = await client.get(f"{BASE}/extendedAgentCard", headers=as_alice)
        assert "model:offline" in card.json()["skills"][0]["tags"]


async def test_streams_are_sse_of_stream_responses(make_live: LiveFactory) -> None:
    async with (
        make_live(models={"asker": asks_for_a_colour()}, workers_enabled=True) as live,
        httpx.AsyncClient(base_url=live.url, timeout=20) as client,
    ):
        body = {"message": message("paint"), "metadata": {"model": "asker"}}
        asked = await events(client, "POST", "/message:stream", body)
        assert {name for name, _ in asked} == {"message"}
        task = asked[0][1]["task"]
        last = asked[-1][1]["statusUpdate"]["status"]
        assert last["state"] == "TASK_STATE_INPUT_REQUIRED"
        assert last["message"]["parts"] == [{"text": "Which colour?"}]
        reply = {"message": message("green", taskId=task["id"])}
        answered = await client.post(
            f"{BASE}/message:send", content=json.dumps(reply), headers=A2A_JSON
        )
        assert answered.json()["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        # A finished task has nothing to subscribe to: a plain refusal, by GET or POST.
        for verb in ("GET", "POST"):
            finished = await events(client, verb, f"/tasks/{task['id']}:subscribe")
            refusal(finished, 400, "UNSUPPORTED_OPERATION")
        unknown = await events(client, "POST", f"/tasks/{uuid.uuid4()}:subscribe")
        refusal(unknown, 404, "TASK_NOT_FOUND")


async def test_proto_field_names_are_read_as_json_names_are(make_client: ClientFactory) -> None:
    body = {
        "message": {"role": "ROLE_USER", "message_id": "snake-1", "parts": [{"text": "hi"}]},
        "configuration": {"return_immediately": True, "history_length": 0},
    }
    async with make_client() as client:
        sent = await client.post(f"{BASE}/message:send", content=json.dumps(body), headers=A2A_JSON)
        task = sent.json()["task"]
        assert "history" not in task
        assert task["metadata"]["a2a"] == {"messageId": "snake-1"}
        listed = await client.get(f"{BASE}/tasks", params={"page_size": 1, "history_length": 1})
    assert listed.json()["pageSize"] == 1
    assert [m["messageId"] for m in listed.json()["tasks"][0]["history"]] == ["snake-1"]
