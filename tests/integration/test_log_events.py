"""`log` events: the lines a worker and its agent write for the people watching a run,
capped per task, filterable on streams and the firehose."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
from pydantic_ai import RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.db.leases import LeaseStore
from taskservice.db.steps import LedgerStore
from taskservice.db.tables import tasks
from taskservice.db.tasks import TaskStore
from taskservice.domain.states import TaskState
from taskservice.settings import Settings
from taskservice.worker.reaper import Reaper
from tests.conftest import ClientFactory, LiveFactory
from tests.integration.helpers import (
    QUICK_RECOVERY,
    asks_for_a_colour,
    event_types,
    expire,
    force_state,
    log_lines,
    new_task,
    until_state,
    worker_dies,
)
from tests.sse import read_events

STREAM = {"Accept": "text/event-stream"}


def turns(*calls: ToolCallPart | str) -> FunctionModel:
    """One tool call per turn, then the final text."""

    async def play(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step = calls[min(sum(isinstance(m, ModelResponse) for m in messages), len(calls) - 1)]
        return ModelResponse(parts=[TextPart(step) if isinstance(step, str) else step])

    return FunctionModel(play)


async def test_a_crash_resumed_attempt_leaves_a_log_line_saying_why(
    make_client: ClientFactory,
) -> None:
    """The worker dies inside a tool call (as after kill -9: no more renewals, no
    more writes). The next attempt says in lines that it resumes, from what, after
    whose lease expired, and which call was interrupted."""
    hanging = asyncio.Event()

    async def hang(ctx: RunContext[Any]) -> str:
        """Never returns."""
        hanging.set()
        await asyncio.sleep(3600)
        return "unreachable"

    model = turns(ToolCallPart("hang", {}, tool_call_id="h1"), "done")
    async with make_client(
        models={"scripted": model},
        tools={"hang": hang},
        default_tools=["hang"],
        workers_enabled=True,
        **QUICK_RECOVERY,
    ) as client:
        task = (await client.post("/v1/tasks", json={"input": "go", "model": "scripted"})).json()
        await asyncio.wait_for(hanging.wait(), 10)
        dead = worker_dies(client, task["id"])
        done = await until_state(client, task["id"], "completed", "failed")
        lines = await log_lines(client, task["id"])
    assert (done["state"], done["attempt"]) == ("completed", 2)
    assert lines == [
        (  # from the reaper, when it took the task back
            "warning",
            f"worker {dead} stopped renewing its lease on attempt 1 (it stopped, hung or lost "
            "the database); the task waits for another worker",
        ),
        (  # from the worker that resumed it
            "info",
            "attempt 2 resumes the run from 2 recorded messages: the lease of worker "
            f"{dead} on attempt 1 had expired",
        ),
        ("warning", "tool call hang (h1) was interrupted; the model is told it failed"),
    ]


async def test_the_log_tool_keeps_lines_up_to_the_cap_then_says_the_rest_were_dropped(
    make_client: ClientFactory, db: AsyncEngine
) -> None:
    model = turns(
        ToolCallPart("log", {"message": "x" * 500}),
        ToolCallPart("log", {"message": "found two sources", "level": "warning"}),
        ToolCallPart("log", {"message": "source two is down", "level": "error"}),
        ToolCallPart("log", {"message": "dropped one"}),
        ToolCallPart("log", {"message": "dropped two", "level": "debug"}),
        "finished",
    )
    async with make_client(
        models={"chatty": model},
        default_tools=["log"],
        workers_enabled=True,
        max_log_lines=3,
        max_log_chars=100,
    ) as client:
        task = (await client.post("/v1/tasks", json={"input": "go", "model": "chatty"})).json()
        done = await until_state(client, task["id"], "completed", "failed")
        lines = await log_lines(client, task["id"])
        calls = (await client.get(f"/v1/tasks/{task['id']}/calls")).json()["calls"]
    assert done["state"] == "completed", done
    dropped = "this task reached its limit of 3 log lines; later lines are dropped"
    assert lines == [
        ("info", "x" * 99 + "…"),
        ("warning", "found two sources"),
        ("error", "source two is down"),
        ("warning", dropped),
    ]
    assert [call["result"] for call in calls] == ["logged"] * 5  # the model is not bothered
    events = await event_types(db, uuid.UUID(task["id"]))
    assert [seq for seq, _, _ in events] == list(range(1, len(events) + 1))  # no gaps
    assert events[-1][2] == {"from": "running", "to": "completed"}
    assert [data for _, kind, data in events if kind == "log"][-1]["dropped"] is True


async def test_a_cap_of_zero_keeps_no_lines(make_client: ClientFactory, db: AsyncEngine) -> None:
    model = turns(ToolCallPart("log", {"message": "hello"}), "finished")
    async with make_client(
        models={"chatty": model}, default_tools=["log"], workers_enabled=True, max_log_lines=0
    ) as client:
        task = (await client.post("/v1/tasks", json={"input": "go", "model": "chatty"})).json()
        done = await until_state(client, task["id"], "completed", "failed")
        assert done["state"] == "completed"
        assert await log_lines(client, task["id"]) == []
    async with db.connect() as conn:
        offered = await conn.scalar(select(tasks.c.log_lines).where(tasks.c.id == task["id"]))
    assert offered == 1  # the line was offered, and dropped


async def test_the_cap_holds_when_writers_race(
    store: TaskStore, db: AsyncEngine, settings: Settings
) -> None:
    """Lines for a parent come from its own worker and from its subtasks' workers at
    once: the count on the task row, under its lock, keeps the cap exact."""
    task = await new_task(store)
    await force_state(db, task.id, TaskState.INPUT_REQUIRED)
    ledger = LedgerStore(store.db, log_cap=5, log_chars=settings.max_log_chars)
    written = await asyncio.gather(
        *(
            ledger.append_to_live(task.id, [ledger.log_event("info", f"line {n}")])
            for n in range(20)
        )
    )
    assert all(written)
    events = await event_types(db, task.id)
    lines = [data for _, kind, data in events if kind == "log"]
    assert len(lines) == 6
    assert [line.get("dropped", False) for line in lines] == [False] * 5 + [True]
    assert [seq for seq, _, _ in events] == list(range(1, len(events) + 1))
    async with db.connect() as conn:
        offered = await conn.scalar(select(tasks.c.log_lines).where(tasks.c.id == task.id))
    assert offered == 20
    # A finished task takes no more lines.
    await force_state(db, task.id, TaskState.COMPLETED)
    assert not await ledger.append_to_live(task.id, [ledger.log_event("info", "late")])


async def test_an_answer_delivered_is_a_log_line(make_client: ClientFactory) -> None:
    async with make_client(
        models={"painter": asks_for_a_colour()}, default_tools=["ask_user"], workers_enabled=True
    ) as client:
        task = (await client.post("/v1/tasks", json={"input": "paint", "model": "painter"})).json()
        await until_state(client, task["id"], "input_required")
        await client.post(f"/v1/tasks/{task['id']}/input", json={"answer": "red"})
        done = await until_state(client, task["id"], "completed", "failed")
        lines = await log_lines(client, task["id"])
    assert done["result"] == "painted red"
    assert lines == [
        ("info", "attempt 2 resumes the run from 2 recorded messages: its input arrived"),
        ("info", "answer delivered for 'Which colour?': red"),
    ]


async def test_subtasks_spawned_and_finished_are_log_lines_of_their_parent(
    make_client: ClientFactory,
) -> None:
    """One subtask completes, the other is cancelled by hand while the parent waits;
    the parent's log says each, then why it resumes."""
    cancelled = asyncio.Event()

    async def play(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if info.instructions == "child":
            prompt = messages[0].parts[-1].content  # type: ignore[union-attr]
            if prompt == "slow":
                await cancelled.wait()
            return ModelResponse(parts=[TextPart(f"did {prompt}")])
        done = sum(isinstance(m, ModelResponse) for m in messages)
        if done == 0:
            spawn = {"system_prompt": "child"}
            return ModelResponse(
                parts=[
                    ToolCallPart("spawn_subtask", {"input": "fast", **spawn}, "s1"),
                    ToolCallPart("spawn_subtask", {"input": "slow", **spawn}, "s2"),
                ]
            )
        if done == 1:
            return ModelResponse(parts=[ToolCallPart("wait_for_subtasks", {}, "w1")])
        return ModelResponse(parts=[TextPart("collected")])

    async with make_client(
        models={"planner": FunctionModel(play)},
        default_tools=["spawn_subtask", "wait_for_subtasks"],
        workers_enabled=True,
    ) as client:
        parent = (await client.post("/v1/tasks", json={"input": "plan", "model": "planner"})).json()
        await until_state(client, parent["id"], "input_required")
        children = {
            child["input"]: child["id"]
            for child in (await client.get("/v1/tasks", params={"parent_id": parent["id"]})).json()[
                "tasks"
            ]
        }
        await until_state(client, children["fast"], "completed")
        await client.post(f"/v1/tasks/{children['slow']}/cancel", json={"reason": "not needed"})
        cancelled.set()
        done = await until_state(client, parent["id"], "completed", "failed")
        lines = await log_lines(client, parent["id"])
    assert done["state"] == "completed", done
    # The fast subtask may finish before the slow one is spawned.
    assert sorted(lines[:3]) == sorted(
        [
            *(("info", f"spawned subtask {child}") for child in children.values()),
            ("info", f"subtask {children['fast']} completed"),
        ]
    )
    assert lines[3:] == [
        ("warning", f"subtask {children['slow']} cancelled: not needed"),
        ("info", "attempt 2 resumes the run from 4 recorded messages: its subtasks finished"),
    ]


async def test_a_subtask_failed_by_the_reaper_is_a_line_of_its_parent(
    store: TaskStore, db: AsyncEngine, settings: Settings
) -> None:
    parent = await new_task(store)
    await force_state(db, parent.id, TaskState.INPUT_REQUIRED)
    child = await new_task(store, parent_id=parent.id, max_attempts=1)
    leases = LeaseStore(store.db)
    [claimed] = await leases.claim(owner="dead-worker", limit=1, lease_seconds=30)
    assert claimed.id == child.id
    await expire(db, child.id)
    ledger = LedgerStore(store.db, log_cap=10, log_chars=settings.max_log_chars)
    await Reaper(leases=leases, ledger=ledger, tasks=store, settings=settings).pass_once()
    events = await event_types(db, child.id)
    assert [(kind, data.get("level"), data.get("to")) for _, kind, data in events[-2:]] == [
        ("log", "error", None),
        ("state_change", None, "failed"),
    ]
    lost = (
        "worker dead-worker stopped renewing its lease on attempt 1 (1 of 1 attempts lost); "
        "no attempts are left"
    )
    assert events[-2][2]["message"] == f"{lost}, so the task fails"
    lines = [data for _, kind, data in await event_types(db, parent.id) if kind == "log"]
    assert lines == [{"level": "warning", "message": f"subtask {child.id} failed: {lost}"}]


async def test_the_reapers_lines_count_against_the_cap(
    store: TaskStore, db: AsyncEngine, settings: Settings
) -> None:
    """A task whose lease keeps expiring: its lines stop at the cap, the one after
    says the rest were dropped, and its events stay numbered without gaps."""
    task = await new_task(store, max_attempts=5)
    leases = LeaseStore(store.db)
    for _ in range(5):
        [claimed] = await leases.claim(owner="flaky", limit=1, lease_seconds=30)
        assert claimed.id == task.id
        await expire(db, task.id)
        await leases.reap(log_cap=2)
    events = await event_types(db, task.id)
    assert [seq for seq, _, _ in events] == list(range(1, len(events) + 1))
    lines = [data for _, kind, data in events if kind == "log"]
    assert [line["level"] for line in lines] == ["warning", "warning", "warning"]
    assert [line.get("dropped", False) for line in lines] == [False, False, True]
    # The last attempt failed the task, its line spent: nothing but the state change.
    assert [(kind, data.get("to")) for _, kind, data in events[-2:]] == [
        ("claimed", "running"),
        ("state_change", "failed"),
    ]


async def test_request_limits_are_a_log_line(make_client: ClientFactory) -> None:
    forever = turns(ToolCallPart("report_progress", {"percent": 1}))
    async with make_client(
        models={"forever": forever},
        default_tools=["report_progress"],
        default_request_limit=2,
        workers_enabled=True,
    ) as client:
        task = (await client.post("/v1/tasks", json={"input": "x", "model": "forever"})).json()
        done = await until_state(client, task["id"], "failed", "completed")
        lines = await log_lines(client, task["id"])
    assert done["error"]["type"] == "max_iterations"
    assert lines == [("error", "the run reached its limit of 2 model requests")]


async def test_streams_and_the_firehose_filter_by_type(make_live: LiveFactory) -> None:
    model = turns(
        ToolCallPart("log", {"message": "one"}),
        ToolCallPart("log", {"message": "two"}),
        "finished",
    )
    async with (
        make_live(models={"chatty": model}, default_tools=["log"], workers_enabled=True) as live,
        httpx.AsyncClient(base_url=live.url, timeout=30) as client,
    ):
        task = (await client.post("/v1/tasks", json={"input": "go", "model": "chatty"})).json()
        path = f"/v1/tasks/{task['id']}/events"
        async with client.stream("GET", path, params={"type": "log"}, headers=STREAM) as response:
            # Ends by itself after the terminal state change, which it does not show.
            streamed = [e async for e in read_events(response)]
        assert [e.event for e in streamed] == ["snapshot", "log", "log"]
        assert [e.json()["data"]["message"] for e in streamed[1:]] == ["one", "two"]
        page = (await client.get(path, params={"limit": 200})).json()["events"]
        seqs = {e["seq"] for e in page if e["type"] == "log"}
        assert {int(e.id) for e in streamed[1:] if e.id} == seqs  # ids are the seqs

        async with client.stream(
            "GET", "/v1/events", params={"type": "log", "after": 0}, headers=STREAM
        ) as response:
            firehose = []
            async for event in read_events(response):
                if event.id is not None:
                    firehose.append(event)
                if len(firehose) == 2:
                    break
        assert [(e.event, e.json()["data"]["message"]) for e in firehose] == [
            ("log", "one"),
            ("log", "two"),
        ]

        for bad in (path, "/v1/events"):
            refused = await client.get(bad, params={"type": "logs"}, headers=STREAM)
            assert refused.status_code == 422
            assert refused.headers["content-type"] == "application/problem+json"
            assert "log" in refused.text  # the allowed types are named
