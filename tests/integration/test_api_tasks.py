"""The REST lifecycle: submit, get, list, cancel, events, idempotency."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice import __version__
from taskservice.db import migrate
from taskservice.db.tables import task_events, tasks
from tests.conftest import allow_any_state
from tests.integration.helpers import count


async def submit(client: httpx.AsyncClient, **body: object) -> dict[str, object]:
    response = await client.post("/v1/tasks", json={"input": "hello", **body})
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


async def test_submit_returns_201_with_location_and_the_stored_task(
    client: httpx.AsyncClient,
) -> None:
    response = await client.post(
        "/v1/tasks",
        json={
            "input": "Summarise A2A",
            "system_prompt": "Be terse.",
            "metadata": {"ticket": "T-1", "nested": {"x": [1, 2]}},
            "context_id": "ctx-1",
            "max_attempts": 5,
        },
    )
    assert response.status_code == 201
    task = response.json()
    assert response.headers["location"] == f"/v1/tasks/{task['id']}"
    assert task["state"] == "pending"
    assert task["input"] == "Summarise A2A"
    assert task["metadata"] == {"ticket": "T-1", "nested": {"x": [1, 2]}}
    assert task["agent"] == {"profile": "default", "model": "offline", "system_prompt": "Be terse."}
    assert (task["context_id"], task["max_attempts"], task["attempt"]) == ("ctx-1", 5, 0)
    assert task.pop("webhooks") == []  # only the create response lists them (with secrets)

    fetched = (await client.get(response.headers["location"])).json()
    assert fetched == task


async def test_structured_input_is_accepted_and_echoed(client: httpx.AsyncClient) -> None:
    task = await submit(client, input={"question": "2+2?", "format": "number"})
    assert task["input"] == {"question": "2+2?", "format": "number"}


async def test_list_is_newest_first_and_filters_by_state_context_and_parent(
    client: httpx.AsyncClient,
) -> None:
    parent = await submit(client, context_id="c1")
    child = await submit(client, parent_id=parent["id"], context_id="c1")
    other = await submit(client, context_id="c2")
    await client.post(f"/v1/tasks/{other['id']}/cancel")

    listed = (await client.get("/v1/tasks")).json()
    assert [t["id"] for t in listed["tasks"]] == [other["id"], child["id"], parent["id"]]
    assert listed["next_cursor"] is None

    by_context = (await client.get("/v1/tasks", params={"context_id": "c1"})).json()
    assert [t["id"] for t in by_context["tasks"]] == [child["id"], parent["id"]]
    by_parent = (await client.get("/v1/tasks", params={"parent_id": parent["id"]})).json()
    assert [t["id"] for t in by_parent["tasks"]] == [child["id"]]
    cancelled = (await client.get("/v1/tasks", params={"state": "cancelled"})).json()
    assert [t["id"] for t in cancelled["tasks"]] == [other["id"]]
    either = (
        await client.get("/v1/tasks", params=[("state", "cancelled"), ("state", "pending")])
    ).json()
    assert len(either["tasks"]) == 3


async def test_list_filters_by_agent_profile_with_a_count(client: httpx.AsyncClient) -> None:
    plain = await submit(client)
    demo = await submit(client, agent="demo")
    listed = (await client.get("/v1/tasks", params={"agent": "demo", "count": "exact"})).json()
    assert [t["id"] for t in listed["tasks"]] == [demo["id"]]
    assert listed["total"] == 1
    either = await client.get("/v1/tasks", params={"agent": "default", "state": "pending"})
    assert [t["id"] for t in either.json()["tasks"]] == [plain["id"]]
    nobody = (await client.get("/v1/tasks", params={"agent": "nobody"})).json()
    assert nobody["tasks"] == []


async def test_the_overview_counts_live_states_and_what_finished(
    client: httpx.AsyncClient,
) -> None:
    pending = await submit(client)
    cancelled = await submit(client)
    await client.post(f"/v1/tasks/{cancelled['id']}/cancel")
    await submit(client, run_at="2099-01-01T00:00:00Z")  # pending, but not waiting yet
    overview = (await client.get("/v1/overview", params={"minutes": 5})).json()
    assert overview["live"] == {"pending": 2, "running": 0, "input_required": 0}
    assert overview["scheduled"] == 1
    assert (overview["needs_input"], overview["waiting_for_subtasks"]) == (0, 0)
    assert overview["oldest_pending_at"] == pending["created_at"]
    [minute] = overview["finished"]
    assert (minute["state"], minute["tasks"]) == ("cancelled", 1)
    assert 0 <= minute["p50_seconds"] <= minute["p95_seconds"] < 60
    assert overview["workers"] == []
    assert overview["webhooks"] == {
        "pending": 0,
        "failing": 0,
        "oldest_due_at": None,
        "given_up": 0,
    }
    assert (await client.get("/v1/overview", params={"minutes": 0})).status_code == 422


async def test_the_overview_counts_tasks_asking_apart_from_parents_waiting(
    client: httpx.AsyncClient, db: AsyncEngine
) -> None:
    """`input_required` is two things to a person: a question waiting for someone to
    answer it, or a parent waiting for its subtasks (nobody need act)."""
    asking = await submit(client)
    parent = await submit(client)
    await submit(client)  # pending
    requests = {
        asking["id"]: {"kind": "questions", "questions": [{"id": "q1", "question": "?"}]},
        parent["id"]: {"kind": "subtasks", "call_id": "c1"},
    }
    async with db.begin() as conn:
        await allow_any_state(conn)
        for task_id, request in requests.items():
            await conn.execute(
                tasks.update()
                .where(tasks.c.id == task_id)
                .values(state="input_required", input_request=request)
            )
    overview = (await client.get("/v1/overview")).json()
    assert overview["live"] == {"pending": 1, "running": 0, "input_required": 2}
    assert (overview["needs_input"], overview["waiting_for_subtasks"]) == (1, 1)


async def test_list_filters_by_creation_time(client: httpx.AsyncClient) -> None:
    first = await submit(client)
    await asyncio.sleep(0.05)
    cut = datetime.now(UTC)
    await asyncio.sleep(0.05)
    second = await submit(client)
    after = (await client.get("/v1/tasks", params={"created_after": cut.isoformat()})).json()
    before = (await client.get("/v1/tasks", params={"created_before": cut.isoformat()})).json()
    assert [t["id"] for t in after["tasks"]] == [second["id"]]
    assert [t["id"] for t in before["tasks"]] == [first["id"]]
    future = (cut + timedelta(days=1)).isoformat()
    assert (await client.get("/v1/tasks", params={"created_after": future})).json()["tasks"] == []
    # The window is also an id range (ids are time-ordered): at the ends of time too.
    ends = {"created_after": "0001-01-01T00:00:00Z", "created_before": "9999-12-31T23:59:59Z"}
    every = (await client.get("/v1/tasks", params=ends)).json()
    assert [t["id"] for t in every["tasks"]] == [second["id"], first["id"]]


async def test_cursor_pagination_stays_correct_while_tasks_are_inserted(
    client: httpx.AsyncClient,
) -> None:
    originals = [(await submit(client, metadata={"i": i}))["id"] for i in range(25)]
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params: dict[str, object] = {"limit": 7}
        if cursor:
            params["cursor"] = cursor
        page = (await client.get("/v1/tasks", params=params)).json()
        seen += [t["id"] for t in page["tasks"]]
        pages += 1
        await submit(client, metadata={"inserted_during_paging": pages})  # lands before the cursor
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(originals))
    assert pages == 4


async def test_page_size_is_capped(make_client: object) -> None:
    async with make_client(max_page_size=3) as client:  # type: ignore[operator]
        for _ in range(5):
            await submit(client)
        page = (await client.get("/v1/tasks", params={"limit": 1000})).json()
        assert len(page["tasks"]) == 3
        assert page["next_cursor"] is not None


async def test_cancel_pending_then_again_is_a_noop_200(client: httpx.AsyncClient) -> None:
    task = await submit(client)
    first = await client.post(f"/v1/tasks/{task['id']}/cancel", json={"reason": "not needed"})
    assert first.status_code == 200
    assert first.json()["state"] == "cancelled"
    assert first.json()["cancel_reason"] == "not needed"
    assert first.json()["finished_at"] is not None
    again = await client.post(f"/v1/tasks/{task['id']}/cancel")
    assert again.status_code == 200
    assert again.json() == first.json()
    events = (await client.get(f"/v1/tasks/{task['id']}/events")).json()["events"]
    assert [e["data"]["to"] for e in events] == ["pending", "cancelled"]
    assert events[1]["data"]["reason"] == "not needed"


async def test_cancelling_a_completed_task_is_409_naming_the_state(
    client: httpx.AsyncClient, db: AsyncEngine
) -> None:
    task = await submit(client)
    async with db.begin() as conn:
        await allow_any_state(conn)
        await conn.execute(tasks.update().values(state="completed"))
    response = await client.post(f"/v1/tasks/{task['id']}/cancel")
    assert response.status_code == 409
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["state"] == "completed"
    assert "completed" in response.json()["detail"]


async def test_events_page_with_after_and_limit(client: httpx.AsyncClient) -> None:
    task = await submit(client)
    await client.post(f"/v1/tasks/{task['id']}/cancel")
    first = (await client.get(f"/v1/tasks/{task['id']}/events", params={"limit": 1})).json()
    assert [e["seq"] for e in first["events"]] == [1]
    assert first["next_after"] == 1
    rest = (
        await client.get(f"/v1/tasks/{task['id']}/events", params={"after": 1, "limit": 10})
    ).json()
    assert [(e["seq"], e["type"]) for e in rest["events"]] == [(2, "state_change")]
    assert rest["next_after"] is None
    assert rest["events"][0]["id"] > first["events"][0]["id"]


async def test_same_idempotency_key_and_body_return_the_same_task(
    client: httpx.AsyncClient, db: AsyncEngine
) -> None:
    headers = {"Idempotency-Key": "order-42"}
    body = {"input": "charge once", "metadata": {"n": 1}}
    first = await client.post("/v1/tasks", json=body, headers=headers)
    second = await client.post("/v1/tasks", json=body, headers=headers)
    assert first.status_code == 201
    assert second.status_code == 200
    assert second.headers["idempotent-replayed"] == "true"
    assert second.json()["id"] == first.json()["id"]
    assert second.headers["location"] == first.headers["location"]
    assert await count(db, tasks) == 1
    assert await count(db, task_events) == 1


async def test_same_idempotency_key_with_another_body_is_409(
    client: httpx.AsyncClient, db: AsyncEngine
) -> None:
    headers = {"Idempotency-Key": "order-43"}
    await client.post("/v1/tasks", json={"input": "a"}, headers=headers)
    response = await client.post("/v1/tasks", json={"input": "b"}, headers=headers)
    assert response.status_code == 409
    assert response.headers["content-type"] == "application/problem+json"
    assert await count(db, tasks) == 1


async def test_concurrent_retries_with_one_idempotency_key_create_one_task(
    client: httpx.AsyncClient, db: AsyncEngine
) -> None:
    responses = await asyncio.gather(
        *(
            client.post("/v1/tasks", json={"input": "x"}, headers={"Idempotency-Key": "k"})
            for _ in range(20)
        )
    )
    assert sorted(r.status_code for r in responses) == [200] * 19 + [201]
    assert len({r.json()["id"] for r in responses}) == 1
    assert await count(db, tasks) == 1


async def test_health_and_readiness(client: httpx.AsyncClient) -> None:
    assert (await client.get("/healthz")).json() == {"status": "ok", "version": __version__}
    ready = await client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["status"] == "ready"
    assert ready.json()["version"] == __version__
    assert ready.json()["schema_revision"] == migrate.head_revision()


async def test_cancelling_through_the_api_cancels_subtasks_and_closes_open_calls(
    client: httpx.AsyncClient, db: AsyncEngine
) -> None:
    parent = await submit(client)
    child = await submit(client, parent_id=parent["id"])
    grandchild = await submit(client, parent_id=child["id"])
    async with db.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO task_calls (task_id, tool_call_id, name, status, attempt) "
                "VALUES (:t, 'c1', 'lookup', 'in_progress', 1)"
            ),
            {"t": grandchild["id"]},
        )
    response = await client.post(f"/v1/tasks/{parent['id']}/cancel", json={"reason": "stop"})
    assert response.status_code == 200
    for task in (child, grandchild):
        current = (await client.get(f"/v1/tasks/{task['id']}")).json()
        assert current["state"] == "cancelled"
        assert current["cancel_reason"] == "stop"
    calls = (await client.get(f"/v1/tasks/{grandchild['id']}/calls")).json()["calls"]
    assert [(c["status"], c["error"]) for c in calls] == [("failed", "cancelled")]
