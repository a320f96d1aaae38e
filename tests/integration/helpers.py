"""Helpers for integration tests: make tasks, put them in a given state."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from sqlalchemy import func, select, text, update
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.db.tables import task_events, tasks
from taskservice.db.tasks import TaskStore
from taskservice.domain.models import AgentSpec, NewTask, Task
from taskservice.domain.states import TaskState
from tests.conftest import allow_any_state, wait_for
from tests.sse import Event, read_events

SPEC = AgentSpec(profile="default", model="offline", system_prompt="be brief")
STREAM = {"Accept": "text/event-stream"}


async def new_task(store: TaskStore, *, tenant: str = "default", **fields: Any) -> Task:
    task, created = await store.create(
        NewTask(
            tenant=tenant,
            input=fields.pop("input", "hello"),
            agent=fields.pop("agent", SPEC),
            metadata=fields.pop("metadata", {}),
            max_attempts=fields.pop("max_attempts", 3),
            **fields,
        )
    )
    assert created
    return task


async def force_state(engine: AsyncEngine, task_id: uuid.UUID, state: TaskState) -> None:
    """Set a state directly (test setup only: bypasses the state machine)."""
    owner = "test-worker" if state is TaskState.RUNNING else None
    async with engine.begin() as conn:
        await allow_any_state(conn)
        await conn.execute(
            update(tasks)
            .where(tasks.c.id == task_id)
            .values(state=state.value, lease_owner=owner, attempt=1)
        )


async def expire(engine: AsyncEngine, task_id: uuid.UUID) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            update(tasks)
            .where(tasks.c.id == task_id)
            .values(lease_expires_at=text("now() - interval '1 second'"))
        )


async def event_types(engine: AsyncEngine, task_id: uuid.UUID) -> list[tuple[int, str, Any]]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(task_events.c.seq, task_events.c.type, task_events.c.data)
            .where(task_events.c.task_id == task_id)
            .order_by(task_events.c.seq)
        )
        return [(r.seq, r.type, r.data) for r in rows]


async def count(engine: AsyncEngine, table: Any) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(select(func.count()).select_from(table))).scalar_one())


def asks_for_a_colour() -> FunctionModel:
    """A model that asks the user (`ask_user`) which colour, then paints with the
    answer: "painted <answer>"."""

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        replies = [
            part.content
            for message in messages
            for part in message.parts
            if getattr(part, "tool_name", None) == "ask_user" and hasattr(part, "content")
        ]
        if not replies:
            call = ToolCallPart("ask_user", {"question": "Which colour?"}, tool_call_id="q1")
            return ModelResponse(parts=[call])
        return ModelResponse(parts=[TextPart(f"painted {replies[-1]}")])

    return FunctionModel(answer)


async def log_lines(client: Any, task_id: str) -> list[tuple[str, str]]:
    """A task's `log` lines as (level, message), read through the `type` filter."""
    response = await client.get(f"/v1/tasks/{task_id}/events", params={"type": "log", "limit": 200})
    assert response.status_code == 200, response.text
    events = response.json()["events"]
    assert {event["type"] for event in events} <= {"log"}
    return [(event["data"]["level"], event["data"]["message"]) for event in events]


# Settings that take a dead worker's task back within about a second.
# A lease of a second, renewed every third: recovery within about a second, and a
# heartbeat thread delayed by a busy machine (the whole suite, a browser) for up to
# 0.6 s keeps its lease (0.6 s leases were lost under load, and a scripted model run
# a third time failed the task).
QUICK_RECOVERY: dict[str, Any] = {"lease_seconds": 1.0, "reap_interval": 0.1, "poll_interval": 0.2}


def worker_dies(client: Any, task_id: str) -> str:
    """The in-process worker running `task_id` dies as after kill -9: its run stops,
    its lease is no longer renewed, and it writes nothing more. Returns its id."""
    pool = client.app.state.runtime.pool
    pool.heartbeat.drop(uuid.UUID(task_id))
    pool._runs[uuid.UUID(task_id)].cancel()
    return str(pool.worker_id)


async def until_state(
    client: httpx.AsyncClient, task_id: str, *states: str, timeout: float = 30.0
) -> dict[str, Any]:
    """The task once it is in one of `states` (polled, for at most `timeout` s)."""

    async def check() -> dict[str, Any] | None:
        task = (await client.get(f"/v1/tasks/{task_id}")).json()
        return task if task["state"] in states else None

    return await wait_for(check, timeout=timeout)  # type: ignore[no-any-return]


# -- task event streams -------------------------------------------------------------


def rebuild(events: list[Event]) -> dict[tuple[int, int], dict[int, str]]:
    """What a client rebuilds from the deltas: per (attempt, position), each part's
    text; every delta must extend its part exactly where it ends."""
    messages: dict[tuple[int, int], dict[int, str]] = {}
    for event in events:
        if event.event != "delta":
            continue
        assert event.id is None  # ephemeral: a reconnect resumes after the last event
        delta = event.json()
        parts = messages.setdefault((delta["attempt"], delta["position"]), {})
        so_far = parts.get(delta["part"], "")
        assert delta["offset"] == len(so_far), (delta, so_far)
        parts[delta["part"]] = so_far + delta["text"]
    return messages


async def stream(
    client: httpx.AsyncClient,
    task_id: str,
    *,
    last_event_id: str | None = None,
    deltas_before_leaving: int | None = None,
) -> list[Event]:
    headers = dict(STREAM)
    if last_event_id is not None:
        headers["Last-Event-ID"] = last_event_id
    events: list[Event] = []
    async with client.stream("GET", f"/v1/tasks/{task_id}/events", headers=headers) as response:
        assert response.status_code == 200
        async for event in read_events(response):
            events.append(event)
            deltas = sum(e.event == "delta" for e in events)
            if deltas_before_leaving is not None and deltas >= deltas_before_leaving:
                break
    return events
