"""Orphan cleanup: a parent that fails, times out or is cancelled takes its live
subtasks with it (cause `parent_failed`, `parent_timeout`, `parent_cancelled`), but
not those spawned detached; the reaper finds the ones a parent left behind."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.db.leases import LeaseStore
from taskservice.db.steps import LedgerStore
from taskservice.db.tasks import TaskStore
from taskservice.domain.states import TaskState
from taskservice.settings import Settings
from taskservice.worker.reaper import Reaper
from tests.conftest import ClientFactory
from tests.integration.helpers import event_types, force_state, new_task
from tests.integration.test_agents import until_state

SPAWN = [
    ToolCallPart("spawn_subtask", {"input": "attached", "system_prompt": "child"}, "s1"),
    ToolCallPart(
        "spawn_subtask", {"input": "detached", "system_prompt": "child", "detached": True}, "s2"
    ),
]


def parent_then(after_spawning: str) -> tuple[FunctionModel, asyncio.Event]:
    """A parent that spawns an attached and a detached child, then `hang`s or
    `raise`s; children run until the event is set."""
    children_go = asyncio.Event()

    async def play(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if info.instructions == "child":
            await children_go.wait()
            return ModelResponse(parts=[TextPart("child done")])
        if not any(isinstance(m, ModelResponse) for m in messages):
            return ModelResponse(parts=SPAWN)
        if after_spawning == "hang":
            await asyncio.sleep(3600)
        raise RuntimeError("the parent's model broke")

    return FunctionModel(play), children_go


async def children(client: httpx.AsyncClient, parent_id: str) -> dict[str, dict[str, Any]]:
    listed = (await client.get("/v1/tasks", params={"parent_id": parent_id})).json()["tasks"]
    return {child["input"]: child for child in listed}


async def cancelled_by(client: httpx.AsyncClient, task_id: str) -> dict[str, Any]:
    events = (await client.get(f"/v1/tasks/{task_id}/events")).json()["events"]
    return events[-1]["data"]  # type: ignore[no-any-return]


async def run_parent(
    make_client: ClientFactory, after_spawning: str, **task: Any
) -> tuple[dict[str, Any], dict[str, dict[str, Any]], dict[str, Any]]:
    """The parent's end, its children once the attached one is cancelled (the
    detached one completed, if it had no timeout to outlive), and why the attached
    one was cancelled."""
    model, children_go = parent_then(after_spawning)
    async with make_client(
        models={"parent": model},
        default_tools=["spawn_subtask"],
        workers_enabled=True,
        worker_concurrency=4,
        reap_interval=3600,  # the worker's own doing, not the reaper's backstop
    ) as client:
        parent = (
            await client.post("/v1/tasks", json={"input": "plan", "model": "parent", **task})
        ).json()
        ended = await until_state(client, parent["id"], "failed")
        kids = await children(client, parent["id"])
        attached = await until_state(client, kids["attached"]["id"], "cancelled")
        cause = await cancelled_by(client, attached["id"])
        detached = (await client.get(f"/v1/tasks/{kids['detached']['id']}")).json()
        assert detached["state"] != "cancelled", detached
        if "timeout_seconds" not in task:  # children inherit the parent's timeout
            children_go.set()
            detached = await until_state(client, kids["detached"]["id"], "completed")
        assert detached["detached"] is True
        assert attached["detached"] is False
    return ended, {"attached": attached, "detached": detached}, cause


async def test_a_parent_that_times_out_cancels_its_subtasks_but_the_detached(
    make_client: ClientFactory,
) -> None:
    ended, _, cause = await run_parent(make_client, "hang", timeout_seconds=1, max_attempts=1)
    assert ended["error"]["type"] == "timeout"
    assert cause["cause"] == "parent_timeout"
    assert cause["from"] in ("pending", "running")


async def test_a_parent_that_fails_cancels_its_subtasks_but_the_detached(
    make_client: ClientFactory,
) -> None:
    ended, kids, cause = await run_parent(make_client, "raise", max_attempts=1)
    assert ended["error"]["type"] == "internal_error"
    assert cause["cause"] == "parent_failed"
    assert kids["attached"]["cancel_reason"] == "its parent task failed"


async def test_cancelling_a_parent_spares_its_detached_subtasks(
    make_client: ClientFactory, store: TaskStore
) -> None:
    parent = await new_task(store)
    attached = await new_task(store, parent_id=parent.id)
    detached = await new_task(store, parent_id=parent.id, detached=True)
    below_detached = await new_task(store, parent_id=detached.id)
    async with make_client() as client:
        cancel = await client.post(f"/v1/tasks/{parent.id}/cancel", json={"reason": "stop"})
        assert cancel.status_code == 200
        states = {
            name: (await client.get(f"/v1/tasks/{task.id}")).json()["state"]
            for name, task in [
                ("attached", attached),
                ("detached", detached),
                ("below_detached", below_detached),
            ]
        }
        cause = await cancelled_by(client, str(attached.id))
    assert states == {"attached": "cancelled", "detached": "pending", "below_detached": "pending"}
    assert (cause["cause"], cause["reason"]) == ("parent_cancelled", "stop")


async def test_the_reaper_cancels_subtasks_their_parent_left_behind(
    store: TaskStore, db: AsyncEngine, settings: Settings
) -> None:
    """Parents that ended while no process was up to take their subtasks along."""
    failed, cancelled, completed = [await new_task(store) for _ in range(3)]
    orphan = await new_task(store, parent_id=failed.id)
    grandchild = await new_task(store, parent_id=orphan.id)
    of_cancelled = await new_task(store, parent_id=cancelled.id)
    detached = await new_task(store, parent_id=failed.id, detached=True)
    of_completed = await new_task(store, parent_id=completed.id)
    await force_state(db, failed.id, TaskState.FAILED)
    await force_state(db, cancelled.id, TaskState.CANCELLED)
    await force_state(db, completed.id, TaskState.COMPLETED)
    leases = LeaseStore(store.db)
    ledger = LedgerStore(store.db, log_cap=10, log_chars=settings.max_log_chars)
    await Reaper(leases=leases, ledger=ledger, tasks=store, settings=settings).pass_once()

    async def state(task_id: Any) -> str:
        found = await store.get(task_id, tenant="default")
        assert found is not None
        return found.state.value

    assert await state(orphan.id) == "cancelled"
    assert await state(grandchild.id) == "cancelled"
    assert await state(of_cancelled.id) == "cancelled"
    assert await state(detached.id) == "pending"
    assert await state(of_completed.id) == "pending"
    causes = [(await event_types(db, t.id))[-1][2]["cause"] for t in (orphan, grandchild)]
    assert causes == ["parent_failed", "parent_cancelled"]
    assert (await event_types(db, of_cancelled.id))[-1][2]["cause"] == "parent_cancelled"


async def test_detached_without_a_parent_is_refused(client: httpx.AsyncClient) -> None:
    refused = await client.post("/v1/tasks", json={"input": "x", "detached": True})
    assert refused.status_code == 422
    assert refused.json()["field"] == "detached"
