"""MCP's door holds what the others do: a call's arguments meet the limits REST and
A2A hold a task to, a request's id is one JSON-RPC allows, a task's `ttl` is a
duration. A refusal is a JSON-RPC error and writes nothing."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.db.retention import RetentionStore, prune
from taskservice.db.tables import tasks
from taskservice.db.tasks import TaskStore
from taskservice.mcp.handler import MAX_TTL_MS
from tests.conftest import ClientFactory
from tests.integration.helpers import count
from tests.integration.test_retention import WEEK, age

# On loopback the transport checks the Host (DNS rebinding protection).
HEADERS = {
    "Host": "127.0.0.1",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2025-11-25",
}


@pytest.fixture
async def client(make_client: ClientFactory) -> AsyncIterator[httpx.AsyncClient]:
    async with make_client(mcp_call_seconds=0.1) as client:
        yield client


async def post(client: httpx.AsyncClient, body: dict[str, Any]) -> httpx.Response:
    return await client.post("/mcp", json=body, headers=HEADERS)


def answer(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC response, sent as JSON or as the one event of an SSE stream."""
    if response.headers["content-type"].startswith("text/event-stream"):
        [data] = [line[5:] for line in response.text.splitlines() if line.startswith("data:")]
        return json.loads(data)  # type: ignore[no-any-return]
    return response.json()  # type: ignore[no-any-return]


def call(arguments: dict[str, Any], **params: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "default", "arguments": arguments, **params},
    }


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ({"input": "x", "context_id": "c" * 10_000}, "`context_id` has 1 to 200 characters"),
        ({"input": "x", "context_id": ""}, "`context_id` has 1 to 200 characters"),
        ({"input": ["a list"]}, "input must be text or a JSON object"),
        ({"input": ""}, "input must not be empty"),
        ({"input": "x" * 2_000}, "input is 2002 bytes encoded as JSON; the limit is 1024"),
    ],
    ids=["long-context", "empty-context", "array-input", "empty-input", "large-input"],
)
@pytest.mark.parametrize("as_task", [False, True], ids=["plain", "task"])
async def test_a_call_is_held_to_the_limits_of_every_task(
    make_client: ClientFactory,
    db: AsyncEngine,
    arguments: dict[str, Any],
    says: str,
    as_task: bool,
) -> None:
    task = {"task": {"ttl": 60_000}} if as_task else {}
    async with make_client(mcp_call_seconds=0.1, max_input_bytes=1024) as client:
        refused = answer(await post(client, call(arguments, **task)))
    assert refused["id"] == 7
    assert refused["error"]["code"] == -32602
    assert says in refused["error"]["message"]
    assert await count(db, tasks) == 0


async def test_rest_refuses_the_same_context_id(client: httpx.AsyncClient, db: AsyncEngine) -> None:
    rest = await client.post("/v1/tasks", json={"input": "x", "context_id": "c" * 201})
    assert rest.status_code == 422
    within = answer(await post(client, call({"input": "x", "context_id": "c" * 200})))
    assert "error" not in within
    assert await count(db, tasks) == 1


@pytest.mark.parametrize(
    "request_id",
    [{"x": 1}, [1], True, 1.5, None],
    ids=["object", "array", "boolean", "fraction", "null"],
)
async def test_a_request_whose_id_is_no_id_is_an_invalid_request(
    client: httpx.AsyncClient, db: AsyncEngine, request_id: Any
) -> None:
    """Not a notification (202, nothing): a request JSON-RPC refuses, -32600."""
    body = call({"input": "x"})
    refused = await post(client, {**body, "id": request_id})
    assert refused.status_code == 400
    assert refused.json()["id"] is None
    assert refused.json()["error"]["code"] == -32600
    assert "a string or an integer" in refused.json()["error"]["data"]
    assert await count(db, tasks) == 0
    # Ids that are ids are answered; a notification (no id) is still accepted.
    for good in ("a string", 0, -1):
        assert answer(await post(client, {"jsonrpc": "2.0", "id": good, "method": "ping"})) == {
            "jsonrpc": "2.0",
            "id": good,
            "result": {},
        }
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert (await post(client, note)).status_code == 202


@pytest.mark.parametrize(
    "task",
    [{"ttl": -1}, {"ttl": 1.5}, {"ttl": "60000"}, {"ttl": True}, "soon"],
    ids=["negative", "fraction", "text", "boolean", "not-an-object"],
)
async def test_a_task_s_ttl_is_a_duration(
    client: httpx.AsyncClient, db: AsyncEngine, task: Any
) -> None:
    refused = answer(await post(client, call({"input": "x"}, task=task)))
    assert refused["error"]["code"] == -32602
    assert "`params.task" in refused["error"]["message"]
    assert await count(db, tasks) == 0


async def test_a_ttl_is_kept_at_most_a_century(
    client: httpx.AsyncClient, db: AsyncEngine, store: TaskStore
) -> None:
    """Retention adds it to the task's creation: a time PostgreSQL can hold (a longer
    one failed every prune)."""
    made = []
    for ttl in (60_000, 2**63 - 1, 1e300):
        answered = answer(await post(client, call({"input": "x"}, task={"ttl": ttl})))
        made.append(uuid.UUID(answered["result"]["task"]["taskId"]))
    kept = [(await client.get(f"/v1/tasks/{m}")).json()["metadata"]["mcp"]["ttl_ms"] for m in made]
    assert kept == [60_000, MAX_TTL_MS, MAX_TTL_MS]
    for task_id in made:
        await age(db, task_id, days=10)
    pruned = await prune(RetentionStore(store.db), WEEK)
    assert pruned is not None
    assert pruned.tasks == 1  # its minute is over; the others have a century
