"""Bad input gets a clear problem+json error, never a 500, and changes nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from urllib.parse import quote

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.db.tables import task_events, tasks
from tests.conftest import ClientFactory, LiveFactory
from tests.integration.helpers import count

LIMITS = {"max_body_bytes": 4096, "max_input_bytes": 1024, "max_metadata_bytes": 256}


@pytest.fixture
async def client(make_client: ClientFactory) -> AsyncIterator[httpx.AsyncClient]:
    async with make_client(**LIMITS) as client:
        yield client


async def assert_problem(response: httpx.Response, status: int, engine: AsyncEngine) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["status"] == status
    assert body["title"]
    assert body["detail"]
    assert await count(engine, tasks) == 0
    assert await count(engine, task_events) == 0
    return body  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    "raw",
    [b'{"input": ', b"not json", b'{"input": "x",}', b"\xff\xfe"],
    ids=["truncated", "text", "trailing-comma", "not-utf8"],
)
async def test_malformed_json_is_400(
    client: httpx.AsyncClient, db: AsyncEngine, raw: bytes
) -> None:
    response = await client.post(
        "/v1/tasks", content=raw, headers={"content-type": "application/json"}
    )
    await assert_problem(response, 400, db)


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({}, "body.input"),
        ({"input": ""}, "body.input"),
        ({"input": 42}, "body.input"),
        ({"input": None}, "body.input"),
        ({"input": "x", "metadata": "not an object"}, "body.metadata"),
        ({"input": "x", "max_attempts": 0}, "body.max_attempts"),
        ({"input": "x", "max_attempts": "three"}, "body.max_attempts"),
        ({"input": "x", "parent_id": "not-a-uuid"}, "body.parent_id"),
        ({"input": "x", "inptu": "typo"}, "body.inptu"),
        ([{"input": "x"}], "body"),
    ],
    ids=[
        "missing-input",
        "empty-input",
        "number-input",
        "null-input",
        "metadata-type",
        "zero-attempts",
        "string-attempts",
        "bad-parent",
        "unknown-field",
        "array-body",
    ],
)
async def test_wrong_types_and_unknown_fields_are_422_naming_the_field(
    client: httpx.AsyncClient, db: AsyncEngine, body: object, where: str
) -> None:
    problem = await assert_problem(await client.post("/v1/tasks", json=body), 422, db)
    assert where in problem["detail"]
    assert problem["errors"]


@pytest.mark.parametrize("given", ["", 42, None, [], True], ids=str)
async def test_an_input_that_is_neither_text_nor_object_is_one_error_a_person_reads(
    client: httpx.AsyncClient, db: AsyncEngine, given: object
) -> None:
    """Not one error per member of the field's union (`constrained-str: …;
    dict[str,any]: …`): one, saying what an input may be."""
    problem = await assert_problem(await client.post("/v1/tasks", json={"input": given}), 422, db)
    assert problem["detail"] == "body.input: input must be a non-empty text or a JSON object"
    assert [error["loc"] for error in problem["errors"]] == [["body", "input"]]


async def test_a_body_over_the_request_limit_is_413(
    client: httpx.AsyncClient, db: AsyncEngine
) -> None:
    response = await client.post("/v1/tasks", json={"input": "x" * 5000})
    await assert_problem(response, 413, db)


async def test_a_chunked_body_over_the_limit_is_413(
    client: httpx.AsyncClient, db: AsyncEngine
) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"input": "'
        for _ in range(10):
            yield b"x" * 1000
        yield b'"}'

    response = await client.post(
        "/v1/tasks", content=chunks(), headers={"content-type": "application/json"}
    )
    await assert_problem(response, 413, db)


@pytest.mark.parametrize(
    "body",
    [
        {"input": "x" * 2000},
        {"input": {"blob": "y" * 2000}},
        {"input": "x", "metadata": {"k": "v" * 300}},
    ],
    ids=["input-text", "input-object", "metadata"],
)
async def test_input_or_metadata_over_their_limits_is_413(
    client: httpx.AsyncClient, db: AsyncEngine, body: object
) -> None:
    problem = await assert_problem(await client.post("/v1/tasks", json=body), 413, db)
    assert problem["limit"] in (LIMITS["max_input_bytes"], LIMITS["max_metadata_bytes"])


@pytest.mark.parametrize(
    "body",
    [
        {"input": "a\u0000b"},
        {"input": {"k": "a\u0000"}},
        {"input": "x", "metadata": {"k\u0000": 1}},
        {"input": "x", "metadata": {"k": ["ok", "n\u0000"]}},
        {"input": "x", "system_prompt": "\u0000"},
        {"input": "x", "context_id": "c\u0000"},
    ],
    ids=["input", "input-object", "metadata-key", "metadata-list", "system-prompt", "context"],
)
async def test_nul_characters_are_a_clear_422(
    client: httpx.AsyncClient, db: AsyncEngine, body: object
) -> None:
    problem = await assert_problem(await client.post("/v1/tasks", json=body), 422, db)
    assert "NUL" in problem["detail"]


async def test_nul_in_a_cancel_reason_is_422_and_the_task_stays_pending(
    client: httpx.AsyncClient,
) -> None:
    task = (await client.post("/v1/tasks", json={"input": "x"})).json()
    response = await client.post(f"/v1/tasks/{task['id']}/cancel", json={"reason": "\u0000"})
    assert response.status_code == 422
    assert (await client.get(f"/v1/tasks/{task['id']}")).json()["state"] == "pending"


@pytest.mark.parametrize("key", ["", "x" * 256], ids=["empty", "too-long"])
async def test_an_idempotency_key_of_the_wrong_length_is_rejected(
    client: httpx.AsyncClient, db: AsyncEngine, key: str
) -> None:
    response = await client.post("/v1/tasks", json={"input": "x"}, headers={"Idempotency-Key": key})
    body = await assert_problem(response, 422, db)
    assert body["errors"][0]["loc"] == ["header", "idempotency-key"]


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/tasks/not-a-uuid"),
        ("GET", "/v1/tasks/123"),
        ("POST", "/v1/tasks/not-a-uuid/cancel"),
        ("GET", "/v1/tasks/not-a-uuid/events"),
        ("GET", "/v1/tasks/0193a1c2-0000-7000-8000-000000000000"),
    ],
)
async def test_ids_that_are_not_tasks_are_404(
    client: httpx.AsyncClient, db: AsyncEngine, method: str, path: str
) -> None:
    await assert_problem(await client.request(method, path), 404, db)


async def test_a_model_outside_the_allow_list_is_422(
    client: httpx.AsyncClient, db: AsyncEngine
) -> None:
    response = await client.post("/v1/tasks", json={"input": "x", "model": "openai-chat:gpt-5"})
    problem = await assert_problem(response, 422, db)
    assert "not allowed" in problem["detail"]
    assert problem["field"] == "model"


async def test_offline_with_a_delay_is_allowed_wherever_offline_is(
    make_client: ClientFactory, db: AsyncEngine
) -> None:
    async with make_client(default_model="openai-chat:gpt-4o", allowed_models=[]) as client:
        response = await client.post("/v1/tasks", json={"input": "x", "model": "offline:1"})
        assert (await assert_problem(response, 422, db))["field"] == "model"
    async with make_client() as client:
        for odd in ("offline:-1", "offline:soon", "offline:99999"):
            response = await client.post("/v1/tasks", json={"input": "x", "model": odd})
            assert (await assert_problem(response, 422, db))["field"] == "model"
        allowed = await client.post("/v1/tasks", json={"input": "x", "model": "offline:2.5"})
        assert allowed.status_code == 201, allowed.text
        assert allowed.json()["agent"]["model"] == "offline:2.5"


async def test_an_unknown_agent_profile_is_422(client: httpx.AsyncClient, db: AsyncEngine) -> None:
    response = await client.post("/v1/tasks", json={"input": "x", "agent": "nope"})
    await assert_problem(response, 422, db)


async def test_a_missing_parent_is_422(client: httpx.AsyncClient, db: AsyncEngine) -> None:
    response = await client.post(
        "/v1/tasks",
        json={"input": "x", "parent_id": "0193a1c2-0000-7000-8000-000000000000"},
    )
    await assert_problem(response, 422, db)


@pytest.mark.parametrize(
    "params",
    [{"cursor": "garbage"}, {"limit": 0}, {"state": "sleeping"}, {"created_after": "yesterday"}],
    ids=["cursor", "limit", "state", "date"],
)
async def test_bad_list_parameters_are_422(
    client: httpx.AsyncClient, db: AsyncEngine, params: dict[str, object]
) -> None:
    await assert_problem(await client.get("/v1/tasks", params=params), 422, db)


async def test_a_non_json_content_type_is_415(client: httpx.AsyncClient, db: AsyncEngine) -> None:
    response = await client.post(
        "/v1/tasks",
        content=b"input=x",
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    await assert_problem(response, 415, db)


async def test_unknown_routes_are_problem_404s(client: httpx.AsyncClient, db: AsyncEngine) -> None:
    await assert_problem(await client.get("/v2/whatever"), 404, db)


async def test_wrong_method_is_a_problem_405_allowing_every_method_of_the_path(
    client: httpx.AsyncClient, db: AsyncEngine
) -> None:
    response = await client.delete("/v1/tasks")
    await assert_problem(response, 405, db)
    assert response.headers["allow"] == "GET, POST"
    response = await client.put("/v1/webhooks/0193a1c2-0000-7000-8000-000000000000")
    assert response.headers["allow"] == "DELETE, GET, PATCH"


TASK_EVENTS = "/v1/tasks/0193a1c2-0000-7000-8000-000000000000/events"


@pytest.mark.parametrize(
    "token",
    ["é", "tst_é", "tst_eyJ0IjoxfQ.é", "tst_eyJ0IjoxfQ.\U0001f600"],
    ids=["text", "body", "signature", "emoji-signature"],
)
@pytest.mark.parametrize("path", [TASK_EVENTS, "/v1/events"], ids=["task", "firehose"])
async def test_a_stream_token_that_is_not_ascii_is_a_401_problem(
    client: httpx.AsyncClient, db: AsyncEngine, token: str, path: str
) -> None:
    """Not a 500: a signature of other text than base64url's is simply not valid."""
    response = await client.get(path, params={"token": token})
    await assert_problem(response, 401, db)


async def _raw(url: str, target: bytes) -> tuple[int, str, bytes]:
    """Status, content type and body of a GET of `target` sent byte for byte."""
    reader, writer = await asyncio.open_connection("127.0.0.1", int(url.rsplit(":")[-1]))
    writer.write(b"GET " + target + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    answer = await reader.read()
    writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    [content_type] = [
        line.split(b":", 1)[1].strip().decode()
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-type:")
    ]
    return status, content_type, body


async def test_what_uvicorn_refuses_is_its_own_and_the_rest_is_problem_json(
    make_live: LiveFactory, db: AsyncEngine
) -> None:
    """uvicorn refuses a request line that is not ASCII or is too long with a
    plain-text 400 before the application sees it (as the README says); the same
    requests percent-encoded, or shorter, reach the service and are answered by it."""
    many = b"&".join([b"state=pending"] * 20_000)
    some = b"&".join([b"state=pending"] * 1_000)
    token = "tst_eyJ0IjoxfQ.é"
    async with make_live() as live:
        server = [
            await _raw(live.url, b"/v1/tasks/\xff"),
            await _raw(live.url, TASK_EVENTS.encode() + b"?token=" + token.encode()),
            await _raw(live.url, b"/v1/events?token=" + token.encode()),
            await _raw(live.url, b"/v1/tasks?" + many),
        ]
        service = [
            await _raw(live.url, b"/v1/tasks/%FF"),
            await _raw(live.url, TASK_EVENTS.encode() + b"?token=" + quote(token).encode()),
            await _raw(live.url, b"/v1/events?token=" + quote(token).encode()),
        ]
        listed = await _raw(live.url, b"/v1/tasks?" + some)
    for status, content_type, body in server:
        assert (status, content_type) == (400, "text/plain; charset=utf-8")
        assert body == b"Invalid HTTP request received."
    assert [(s, t) for s, t, _ in service] == [
        (404, "application/problem+json"),
        (401, "application/problem+json"),
        (401, "application/problem+json"),
    ]
    assert listed[:2] == (200, "application/json")
    assert await count(db, tasks) == 0
