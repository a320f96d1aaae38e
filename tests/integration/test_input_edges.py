"""Input at the edges of what PostgreSQL and the service can hold: JSON nested too deep,
numbers that are not finite, NUL and lone surrogates, other encodings, parameters out
of the columns' range. Each is a 4xx (a JSON-RPC error on /a2a) that changes nothing,
never a 500, and never a 500 after a commit."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from sqlalchemy import text, update
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.db.tables import task_events, tasks, webhook_subscriptions
from taskservice.domain import jsonvalues
from taskservice.domain.requests import TaskRequest
from tests.conftest import ClientFactory, LiveFactory
from tests.integration.helpers import count

DEPTH = 8
HOOKS = {"webhook_allow_http": True, "webhook_allow_targets": ["127.0.0.1/32"]}
HOOK_URL = "http://127.0.0.1:9/hook"
JSON = {"content-type": "application/json"}


def nested(levels: int, leaf: Any = "x") -> Any:
    """A value `levels` containers deep."""
    value = leaf
    for _ in range(levels):
        value = {"a": value}
    return value


def nested_json(levels: int) -> bytes:
    """`nested(levels)` as JSON text, for depths the encoder would not write."""
    return b'{"a":' * levels + b'"x"' + b"}" * levels


@pytest.fixture
async def client(make_client: ClientFactory) -> AsyncIterator[httpx.AsyncClient]:
    async with make_client(max_json_depth=DEPTH, **HOOKS) as client:
        yield client


async def nothing_written(engine: AsyncEngine) -> None:
    assert await count(engine, tasks) == 0
    assert await count(engine, task_events) == 0
    assert await count(engine, webhook_subscriptions) == 0


async def assert_refused(
    response: httpx.Response, engine: AsyncEngine, status: int = 422
) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem: dict[str, Any] = response.json()
    assert problem["status"] == status
    assert problem["detail"]
    await nothing_written(engine)
    return problem


async def rpc_error(client: httpx.AsyncClient, body: bytes) -> dict[str, Any]:
    response = await client.post("/a2a", content=body, headers=JSON)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    assert "result" not in answer
    return answer["error"]  # type: ignore[no-any-return]


def a2a_send(parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "message/send",
        "params": {
            "message": {"kind": "message", "role": "user", "messageId": "m1", "parts": parts}
        },
    }


# -- nesting depth ------------------------------------------------------------------


async def test_json_up_to_the_depth_limit_is_taken(client: httpx.AsyncClient) -> None:
    # The body object is the first level: input may nest DEPTH - 1 levels more.
    response = await client.post("/v1/tasks", json={"input": nested(DEPTH - 1)})
    assert response.status_code == 201, response.text
    assert response.json()["input"] == nested(DEPTH - 1)


@pytest.mark.parametrize("levels", [DEPTH, 300, 5000])
async def test_input_nested_too_deep_is_a_422_naming_the_limit(
    client: httpx.AsyncClient, db: AsyncEngine, levels: int
) -> None:
    body = b'{"input": %s}' % nested_json(levels)
    response = await client.post("/v1/tasks", content=body, headers=JSON)
    problem = await assert_refused(response, db)
    assert problem["limit"] == DEPTH
    assert f"at most {DEPTH} levels" in problem["detail"]
    assert problem["errors"][0]["type"] == "json_depth"


@pytest.mark.parametrize("method", ["POST", "PATCH"])
async def test_webhook_filters_nested_too_deep_are_a_422(
    client: httpx.AsyncClient, db: AsyncEngine, method: str
) -> None:
    path = "/v1/webhooks"
    if method == "PATCH":
        made = await client.post(path, json={"url": HOOK_URL})
        assert made.status_code == 201, made.text
        path = f"{path}/{made.json()['id']}"
    response = await client.request(
        method, path, json={"url": HOOK_URL, "filters": {"metadata": nested(400)}}
    )
    assert response.status_code == 422, response.text
    assert response.json()["limit"] == DEPTH
    assert (await client.get("/v1/webhooks")).status_code == 200
    assert await count(db, webhook_subscriptions) == (1 if method == "PATCH" else 0)


async def test_a2a_refuses_deep_json_with_a_parse_error(
    client: httpx.AsyncClient, db: AsyncEngine
) -> None:
    deep = json.dumps(a2a_send([{"kind": "data", "data": 0}])).encode()
    deep = deep.replace(b'"data": 0', b'"data": %s' % nested_json(1000))
    error = await rpc_error(client, deep)
    assert error["code"] == -32700
    assert error["data"]["limit"] == DEPTH
    await nothing_written(db)


async def test_a_value_too_deep_to_read_back_is_never_stored(
    make_client: ClientFactory, db: AsyncEngine
) -> None:
    """Behind the edge (the client library, A2A, a plugin all end in `submit`), the
    encoder of stored JSON refuses what could not be answered with, before writing."""
    async with make_client() as client:
        service = client.app.state.runtime.service  # type: ignore[attr-defined]
        with pytest.raises(jsonvalues.JsonRefused) as refused:
            await service.submit(
                TaskRequest(tenant="default", input=nested(jsonvalues.MAX_DEPTH + 50))
            )
    assert refused.value.kind == "depth"
    await nothing_written(db)


async def test_rows_stored_too_deep_by_an_earlier_version_still_read(
    client: httpx.AsyncClient, db: AsyncEngine
) -> None:
    """An earlier version stored whatever came in. Such a row must not break a get or
    a list for its tenant: what nests beyond what the service keeps is clipped."""
    task = (await client.post("/v1/tasks", json={"input": "x"})).json()
    hook = (await client.post("/v1/webhooks", json={"url": HOOK_URL})).json()
    too_deep = nested_json(600).decode()
    async with db.begin() as conn:
        await conn.execute(
            text("UPDATE tasks SET input = CAST(:v AS jsonb), metadata = CAST(:m AS jsonb)"),
            {"v": too_deep, "m": f'{{"k": {too_deep}}}'},
        )
        await conn.execute(
            update(webhook_subscriptions).values(
                filters=text("CAST(:f AS jsonb)").bindparams(f=f'{{"metadata": {too_deep}}}')
            )
        )
    got = await client.get(f"/v1/tasks/{task['id']}")
    assert got.status_code == 200, got.text
    value, depth = got.json()["input"], 0
    while isinstance(value, dict):
        value, depth = value["a"], depth + 1
    assert value == jsonvalues.CLIPPED
    assert depth == jsonvalues.MAX_DEPTH
    listed = await client.get("/v1/tasks")
    assert listed.status_code == 200, listed.text
    assert [t["id"] for t in listed.json()["tasks"]] == [task["id"]]
    hooks = await client.get("/v1/webhooks")
    assert hooks.status_code == 200, hooks.text
    assert [h["id"] for h in hooks.json()["webhooks"]] == [hook["id"]]


# -- numbers, characters, encodings ---------------------------------------------------

NOT_FINITE = [b"1e999", b"-1e999", b"NaN", b"Infinity", b"-Infinity"]


@pytest.mark.parametrize("number", NOT_FINITE, ids=lambda n: n.decode())
@pytest.mark.parametrize(
    "template",
    [b'{"input": {"n": %s}}', b'{"input": "x", "metadata": {"n": [%s]}}'],
    ids=["input", "metadata"],
)
async def test_numbers_that_are_not_finite_are_refused(
    client: httpx.AsyncClient, db: AsyncEngine, number: bytes, template: bytes
) -> None:
    response = await client.post("/v1/tasks", content=template % number, headers=JSON)
    # 1e999 is JSON that overflows (422); NaN and Infinity are not JSON at all (400).
    await assert_refused(response, db, 422 if number.endswith(b"e999") else 400)


async def test_not_finite_numbers_in_webhook_filters_are_refused(
    client: httpx.AsyncClient, db: AsyncEngine
) -> None:
    body = b'{"url": "%s", "filters": {"metadata": {"n": 1e999}}}' % HOOK_URL.encode()
    problem = await assert_refused(
        await client.post("/v1/webhooks", content=body, headers=JSON), db
    )
    assert problem["errors"][0]["loc"] == ["body", "filters", "metadata", "n"]


@pytest.mark.parametrize(
    "body",
    [
        b'{"input": "\\udfff"}',
        b'{"input": {"\\ud800": 1}}',
        b'{"input": "x", "metadata": {"k": "a\\udc00b"}}',
    ],
    ids=["string", "key", "metadata"],
)
async def test_lone_surrogates_are_refused(
    client: httpx.AsyncClient, db: AsyncEngine, body: bytes
) -> None:
    problem = await assert_refused(await client.post("/v1/tasks", content=body, headers=JSON), db)
    assert "surrogates" in problem["detail"]


async def test_a_surrogate_pair_is_one_character_and_taken(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/tasks", content=b'{"input": "\\ud83d\\ude00"}', headers=JSON)
    assert response.status_code == 201, response.text
    assert response.json()["input"] == "\U0001f600"


async def test_a2a_refuses_what_rest_refuses(client: httpx.AsyncClient, db: AsyncEngine) -> None:
    for part in (b'{"kind": "data", "data": {"n": 1e999}}', b'{"kind": "text", "text": "\\udfff"}'):
        body = json.dumps(a2a_send([])).encode().replace(b'"parts": []', b'"parts": [%s]' % part)
        assert (await rpc_error(client, body))["code"] == -32600
    nan = json.dumps(a2a_send([{"kind": "data", "data": {"n": 0}}])).encode()
    assert (await rpc_error(client, nan.replace(b'"n": 0', b'"n": NaN')))["code"] == -32700
    await nothing_written(db)


@pytest.mark.parametrize("data", [None, 5, [1, 2]], ids=["null", "number", "list"])
async def test_a2a_takes_a_task_input_only_as_rest_does(
    client: httpx.AsyncClient, db: AsyncEngine, data: Any
) -> None:
    error = await rpc_error(client, json.dumps(a2a_send([{"kind": "data", "data": data}])).encode())
    assert error["code"] == -32602
    empty = a2a_send([{"kind": "text", "text": ""}])
    assert (await rpc_error(client, json.dumps(empty).encode()))["code"] == -32602
    await nothing_written(db)


async def test_json_is_utf8_a_bom_is_ignored_other_encodings_are_400(
    client: httpx.AsyncClient, db: AsyncEngine
) -> None:
    utf16 = '{"input": "hi"}'.encode("utf-16")  # with its BOM
    problem = await assert_refused(
        await client.post("/v1/tasks", content=utf16, headers=JSON), db, 400
    )
    assert "UTF-8" in problem["detail"]
    with_bom = "\ufeff" + '{"input": "hi"}'
    response = await client.post("/v1/tasks", content=with_bom.encode(), headers=JSON)
    assert response.status_code == 201, response.text


async def test_a_number_too_long_to_read_is_a_400(
    client: httpx.AsyncClient, db: AsyncEngine
) -> None:
    body = b'{"input": {"n": 1%s}}' % (b"0" * 5000)
    await assert_refused(await client.post("/v1/tasks", content=body, headers=JSON), db, 400)


# -- NUL in fields not checked before ---------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/messages", {"text": "x", "context_id": "a\u0000b"}),
        ("/v1/webhooks", {"url": HOOK_URL + "/a\u0000"}),
        ("/v1/webhooks", {"url": HOOK_URL, "filters": {"context_id": "c\u0000"}}),
        ("/v1/webhooks", {"url": HOOK_URL, "filters": {"agents": ["a\u0000"]}}),
        ("/v1/webhooks", {"url": HOOK_URL, "filters": {"metadata": {"k": "\u0000"}}}),
    ],
    ids=["message-context", "webhook-url", "filter-context", "filter-agents", "filter-metadata"],
)
async def test_nul_anywhere_in_a_body_is_a_422_naming_where(
    client: httpx.AsyncClient, db: AsyncEngine, path: str, body: dict[str, Any]
) -> None:
    problem = await assert_refused(await client.post(path, json=body), db)
    assert "NUL" in problem["detail"]
    assert problem["errors"][0]["loc"][0] == "body"


async def test_nul_in_a_webhook_patch_changes_nothing(
    client: httpx.AsyncClient, db: AsyncEngine
) -> None:
    hook = (await client.post("/v1/webhooks", json={"url": HOOK_URL})).json()
    patched = await client.patch(
        f"/v1/webhooks/{hook['id']}", json={"filters": {"agents": ["a\u0000"]}}
    )
    assert patched.status_code == 422, patched.text
    assert (await client.get(f"/v1/webhooks/{hook['id']}")).json()["filters"] == hook["filters"]


@pytest.mark.parametrize(
    "path",
    ["/v1/tasks?context_id=a%00b", "/v1/events?type=a%00", "/v1/events?agent=%00"],
)
async def test_nul_in_a_query_is_a_422_even_on_a_stream(
    client: httpx.AsyncClient, db: AsyncEngine, path: str
) -> None:
    response = await client.get(path, headers={"accept": "text/event-stream"})
    problem = await assert_refused(response, db)
    assert problem["errors"][0]["loc"][0] == "query"


# -- parameters out of the columns' range ---------------------------------------------


async def test_positions_beyond_the_columns_are_422_before_a_stream_starts(
    client: httpx.AsyncClient, db: AsyncEngine
) -> None:
    task = (await client.post("/v1/tasks", json={"input": "x"})).json()
    base = f"/v1/tasks/{task['id']}"
    sse = {"accept": "text/event-stream"}
    cases = [
        (f"{base}/events?after={2**31}", {}),
        (f"{base}/events?after={2**31}", sse),
        (f"{base}/events", {**sse, "last-event-id": str(2**31)}),
        (f"{base}/messages?after={2**31}", {}),
        (f"{base}/calls?after={2**63}", {}),
        (f"/v1/events?after={2**63}", sse),
        ("/v1/events", {**sse, "last-event-id": str(2**63)}),
    ]
    for path, headers in cases:
        response = await client.get(path, headers=headers)
        assert response.status_code == 422, (path, headers, response.text)
        assert response.headers["content-type"] == "application/problem+json"
    # The largest values the columns hold are fine: empty pages.
    assert (await client.get(f"{base}/events?after={2**31 - 1}")).json()["events"] == []
    assert (await client.get(f"{base}/calls?after={2**63 - 1}")).json()["calls"] == []


@pytest.mark.parametrize(
    "params",
    [
        {"created_after": "9999-12-31T23:59:59-23:59"},
        {"created_before": "0001-01-01T00:00:00+23:59"},
    ],
    ids=["after", "before"],
)
async def test_times_outside_what_utc_can_hold_are_422(
    client: httpx.AsyncClient, db: AsyncEngine, params: dict[str, str]
) -> None:
    await assert_refused(await client.get("/v1/tasks", params=params), db)


@pytest.mark.parametrize("wait", ["inf", "1e999", "nan", "-1"])
async def test_a_long_poll_must_wait_a_finite_time(client: httpx.AsyncClient, wait: str) -> None:
    task = (await client.post("/v1/tasks", json={"input": "x"})).json()
    response = await client.get(f"/v1/tasks/{task['id']}", params={"wait": wait}, timeout=5)
    assert response.status_code == 422, response.text


# -- oversized bodies -------------------------------------------------------------------


async def test_a_client_that_writes_its_whole_body_first_reads_the_413(
    make_live: LiveFactory, db: AsyncEngine
) -> None:
    """urllib sends all 5 MB before it reads: answered without draining, it got a
    reset connection instead of the 413."""
    body = json.dumps({"input": "x" * 5_000_000}).encode()

    def post(url: str) -> tuple[int, dict[str, Any]]:
        request = urllib.request.Request(url, data=body, headers=JSON, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=30):
                raise AssertionError("a 5 MB body was accepted")
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())

    async with make_live() as live:
        for _ in range(3):  # not a lucky race: every time
            status, problem = await asyncio.to_thread(post, f"{live.url}/v1/tasks")
            assert status == 413
            assert problem["type"].endswith("/payload-too-large")
    await nothing_written(db)


async def test_ids_are_uuid_shaped_everywhere(client: httpx.AsyncClient) -> None:
    """A NUL can also come in a path segment: it is no id, so a 404, not a 500."""
    response = await client.get(f"/v1/tasks/{uuid.uuid4()}%00")
    assert response.status_code == 404, response.text
