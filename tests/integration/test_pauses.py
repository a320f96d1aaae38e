"""Pause and resume: a hold on a task (not a state), the operators' brake on an agent
profile, and a running task's run given back mid model request or once its tool call
is recorded, then resumed from the ledger without repeating a finished call."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import httpx
from pydantic_ai import RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.db.keys import ApiKeyStore
from taskservice.db.leases import LeaseStore
from taskservice.db.pauses import PauseStore
from taskservice.db.submits import create_many
from taskservice.db.tasks import TaskStore, task_params
from taskservice.domain.models import NewTask
from tests.conftest import ClientFactory, LiveFactory, wait_for
from tests.integration.helpers import (
    QUICK_RECOVERY,
    SPEC,
    asks_for_a_colour,
    expire,
    log_lines,
    new_task,
    until_state,
)


async def submit(client: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    response = await client.post("/v1/tasks", json={"input": "hello", **body})
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


async def events(client: httpx.AsyncClient, task_id: str, *types: str) -> list[dict[str, Any]]:
    params: dict[str, Any] = {"limit": 500}
    if types:
        params["type"] = list(types)
    response = await client.get(f"/v1/tasks/{task_id}/events", params=params)
    assert response.status_code == 200, response.text
    return response.json()["events"]  # type: ignore[no-any-return]


async def read(client: httpx.AsyncClient, task_id: str) -> dict[str, Any]:
    return (await client.get(f"/v1/tasks/{task_id}")).json()  # type: ignore[no-any-return]


# -- the API's semantics -------------------------------------------------------------


async def test_pause_holds_a_pending_task_and_resume_lets_it_go_each_once(
    client: httpx.AsyncClient,
) -> None:
    task = await submit(client)
    assert task["paused"] is None
    paused = await client.post(f"/v1/tasks/{task['id']}/pause", json={"reason": "look first"})
    assert paused.status_code == 200, paused.text
    held = paused.json()
    assert held["state"] == "pending"  # a hold, not a state
    assert held["paused"]["by"] == "open"
    assert held["paused"]["reason"] == "look first"
    assert held["paused"]["scope"] == "task"
    assert held["paused"]["at"]
    # Again: a no-op answering the task as it is (the first pause's time and reason).
    again = await client.post(f"/v1/tasks/{task['id']}/pause", json={"reason": "other"})
    assert again.status_code == 200
    assert again.json()["paused"] == held["paused"]
    # Without a body too.
    assert (await client.post(f"/v1/tasks/{task['id']}/pause")).status_code == 200

    resumed = await client.post(f"/v1/tasks/{task['id']}/resume")
    assert resumed.status_code == 200, resumed.text
    assert resumed.json()["paused"] is None
    assert resumed.json()["state"] == "pending"
    assert (await client.post(f"/v1/tasks/{task['id']}/resume")).json()["paused"] is None

    logged = await events(client, task["id"], "paused", "resumed")
    assert [(e["type"], e["data"]) for e in logged] == [
        ("paused", {"by": "open", "reason": "look first", "scope": "task"}),
        ("resumed", {"by": "open"}),
    ]


async def test_a_finished_task_cannot_be_paused_or_resumed_and_a_paused_one_can_be_cancelled(
    client: httpx.AsyncClient,
) -> None:
    task = await submit(client)
    await client.post(f"/v1/tasks/{task['id']}/pause", json={"reason": "hold"})
    cancelled = await client.post(f"/v1/tasks/{task['id']}/cancel", json={"reason": "no"})
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["state"] == "cancelled"
    assert cancelled.json()["cancel_reason"] == "no"
    for verb in ("pause", "resume"):
        response = await client.post(f"/v1/tasks/{task['id']}/{verb}")
        assert response.status_code == 409, response.text
        assert response.headers["content-type"].startswith("application/problem+json")
        assert response.json()["state"] == "cancelled"
        assert "cancelled" in response.json()["detail"]
    missing = await client.post(f"/v1/tasks/{uuid.uuid4()}/pause")
    assert missing.status_code == 404


async def test_another_tenants_task_is_not_found(
    make_client: ClientFactory, db: AsyncEngine
) -> None:
    mine, _ = await ApiKeyStore(db).create(tenant="acme")
    theirs, record = await ApiKeyStore(db).create(tenant="globex")
    async with make_client() as client:
        created = await client.post(
            "/v1/tasks", json={"input": "x"}, headers={"Authorization": f"Bearer {theirs}"}
        )
        task_id = created.json()["id"]
        for verb in ("pause", "resume"):
            response = await client.post(
                f"/v1/tasks/{task_id}/{verb}", headers={"Authorization": f"Bearer {mine}"}
            )
            assert response.status_code == 404, response.text
        own = await client.post(
            f"/v1/tasks/{task_id}/pause", headers={"Authorization": f"Bearer {theirs}"}
        )
        assert own.json()["paused"]["by"] == f"key:{record.id}"


async def test_lists_filter_paused_tasks(client: httpx.AsyncClient) -> None:
    held = [await submit(client) for _ in range(2)]
    free = await submit(client)
    for task in held:
        await client.post(f"/v1/tasks/{task['id']}/pause")
    paused = (await client.get("/v1/tasks", params={"paused": "true", "count": "exact"})).json()
    assert [t["id"] for t in paused["tasks"]] == [held[1]["id"], held[0]["id"]]
    assert paused["total"] == 2
    running = (await client.get("/v1/tasks", params={"paused": "false"})).json()
    assert [t["id"] for t in running["tasks"]] == [free["id"]]
    pending = await client.get("/v1/tasks", params={"paused": "true", "state": "pending"})
    assert len(pending.json()["tasks"]) == 2
    bad = await client.get("/v1/tasks", params={"paused": "maybe"})
    assert bad.status_code == 422


async def test_the_claim_never_takes_a_paused_task(store: TaskStore) -> None:
    """Pending, and running without an owner (given back): neither is claimed while
    paused; resumed, each is."""
    leases = LeaseStore(store.db)
    pauses = PauseStore(store.db)
    task = await new_task(store)
    assert await pauses.pause(task.id, tenant="default", by="test", reason=None)
    assert await leases.claim(owner="w", limit=10, lease_seconds=30) == []
    assert await pauses.resume(task.id, tenant="default", by="test")
    [claimed] = await leases.claim(owner="w", limit=10, lease_seconds=30)
    assert claimed.lease is not None
    # Running: paused, then given back as a paused run is: not claimed again.
    assert await pauses.pause(task.id, tenant="default", by="test", reason=None)
    assert await leases.release(task.id, lease=claimed.lease, reason="paused", ran_seconds=1.5)
    assert await leases.claim(owner="w", limit=10, lease_seconds=30) == []
    assert await pauses.resume(task.id, tenant="default", by="test")
    [again] = await leases.claim(owner="w", limit=10, lease_seconds=30)
    assert again.attempt == 2
    # Another tenant's task: neither paused nor resumed.
    assert await pauses.pause(task.id, tenant="other", by="test", reason=None) is None


async def test_the_reaper_recovers_a_paused_task_whose_worker_died_into_the_hold(
    store: TaskStore, db: AsyncEngine
) -> None:
    """Paused while running, its worker dead before it gave the task back: the reaper
    takes the task back (running, no owner, still paused) and nobody claims it."""
    leases = LeaseStore(store.db)
    task = await new_task(store)
    [claimed] = await leases.claim(owner="dead", limit=1, lease_seconds=30)
    assert claimed.id == task.id
    assert await PauseStore(store.db).pause(task.id, tenant="default", by="t", reason=None)
    await expire(db, task.id)
    recovered, failed = await leases.reap(log_cap=100)
    assert (recovered, failed) == (1, [])
    now = await store.get(task.id)
    assert now is not None
    assert (now.state.value, now.lease_owner, now.paused is not None) == ("running", None, True)
    assert await leases.claim(owner="w", limit=10, lease_seconds=30) == []


# -- a running task paused -----------------------------------------------------------

calls = {"count": 0}


async def count(ctx: RunContext[Any], step: int) -> str:
    """Counts its own executions (a side effect)."""
    calls["count"] += 1
    return f"counted step {step}"


def one_call_then(call: ToolCallPart, answer: str) -> FunctionModel:
    """A model that makes one tool call, then answers."""

    def play(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not any(isinstance(m, ModelResponse) for m in messages):
            return ModelResponse(parts=[call])
        return ModelResponse(parts=[TextPart(answer)])

    return FunctionModel(play)


def _pool(client: httpx.AsyncClient) -> Any:
    return client.app.state.runtime.pool  # type: ignore[attr-defined]


async def _given_back(client: httpx.AsyncClient, task_id: str) -> dict[str, Any]:
    """Waits until the task was released because it was paused; the task then."""

    async def released() -> bool:
        logged = await events(client, task_id, "released")
        return any(e["data"].get("reason") == "paused" for e in logged)

    await wait_for(released, timeout=5)
    return await read(client, task_id)


async def test_a_task_paused_mid_model_request_gives_its_slot_back_and_resumes_from_the_ledger(
    make_client: ClientFactory, store: TaskStore
) -> None:
    """The model request in flight is abandoned (nothing of it persisted); the slot
    and the lease are given back within about a second; resumed, the run goes on from
    the ledger and the finished tool call is not made again."""
    calls["count"] = 0
    blocking = asyncio.Event()
    unblock = asyncio.Event()
    requests: list[int] = []

    async def play(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turns = sum(isinstance(m, ModelResponse) for m in messages)
        requests.append(turns)
        if turns == 0:
            return ModelResponse(parts=[ToolCallPart("count", {"step": 1}, tool_call_id="c1")])
        if not unblock.is_set():
            blocking.set()
            await asyncio.sleep(3600)  # the request in flight when the task is paused
        return ModelResponse(parts=[TextPart("done")])

    async with make_client(
        models={"slow": FunctionModel(play)},
        tools={"count": count},
        default_tools=["count"],
        workers_enabled=True,
        worker_concurrency=1,
    ) as client:
        task = await submit(client, model="slow")
        await asyncio.wait_for(blocking.wait(), 10)
        await client.post(f"/v1/tasks/{task['id']}/pause", json={"reason": "inspect"})
        # Released by the pause (reason `paused`), the model request still in flight
        # (it sleeps an hour): not by its end, nor by a lease expiring (30 s here).
        held = await _given_back(client, task["id"])
        assert not unblock.is_set()
        await wait_for(lambda: _pool(client).running == 0, timeout=2)
        assert held["state"] == "running"
        row = await store.get(uuid.UUID(task["id"]))
        assert row is not None
        assert row.lease_owner is None
        assert row.lease_expires_at is None
        # The abandoned request wrote nothing: the ledger holds the first turn only.
        messages = (await client.get(f"/v1/tasks/{task['id']}/messages")).json()["messages"]
        assert [m["kind"] for m in messages] == ["request", "response"]
        # Not claimed while paused, though a slot is free.
        await asyncio.sleep(0.5)
        assert (await read(client, task["id"]))["attempt"] == 1

        unblock.set()
        await client.post(f"/v1/tasks/{task['id']}/resume")
        done = await until_state(client, task["id"], "completed", "failed")
        lines = await log_lines(client, task["id"])
    assert done["state"] == "completed", done
    assert done["result"] == "done"
    assert done["attempt"] == 2
    assert calls["count"] == 1  # the finished call was not made again
    assert any("after a pause" in message for _, message in lines), lines


async def test_a_task_paused_mid_tool_call_lets_the_call_finish_and_be_recorded_first(
    make_client: ClientFactory, store: TaskStore
) -> None:
    calls["count"] = 0
    in_tool = asyncio.Event()
    finish_tool = asyncio.Event()

    async def slow_count(ctx: RunContext[Any], step: int) -> str:
        """Counts its executions, slowly."""
        calls["count"] += 1
        in_tool.set()
        await finish_tool.wait()
        return f"slowly counted {step}"

    async with make_client(
        models={"tooling": one_call_then(ToolCallPart("slow_count", {"step": 7}, "s1"), "done")},
        tools={"slow_count": slow_count},
        default_tools=["slow_count"],
        workers_enabled=True,
    ) as client:
        task = await submit(client, model="tooling")
        await asyncio.wait_for(in_tool.wait(), 10)
        await client.post(f"/v1/tasks/{task['id']}/pause")
        await asyncio.sleep(0.5)
        # The tool call is not cut short: the run still holds the task.
        row = await store.get(uuid.UUID(task["id"]))
        assert row is not None
        assert row.lease_owner is not None
        finish_tool.set()
        await _given_back(client, task["id"])
        recorded = (await client.get(f"/v1/tasks/{task['id']}/calls")).json()["calls"]
        assert [(c["name"], c["status"]) for c in recorded] == [("slow_count", "completed")]
        await asyncio.sleep(0.3)
        assert (await read(client, task["id"]))["state"] == "running"
        await client.post(f"/v1/tasks/{task['id']}/resume")
        done = await until_state(client, task["id"], "completed", "failed")
    assert done["state"] == "completed", done
    assert calls["count"] == 1


async def test_a_resumed_run_gets_only_what_was_left_of_its_timeout(
    make_client: ClientFactory,
) -> None:
    """Time run counts against `timeout_seconds` across a pause, time paused does not:
    at least 2 s run, then paused for longer than the whole timeout (4 s), then at
    most 2 s left for a model request of 2.5 s, which a fresh timeout would fit."""
    in_tool = asyncio.Event()

    async def nap(ctx: RunContext[Any]) -> str:
        """Sleeps a while."""
        in_tool.set()
        await asyncio.sleep(2)
        return "rested"

    async def play(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not any(isinstance(m, ModelResponse) for m in messages):
            return ModelResponse(parts=[ToolCallPart("nap", {}, "n1")])
        await asyncio.sleep(2.5)  # with a fresh timeout this would fit
        return ModelResponse(parts=[TextPart("awake")])

    async with make_client(
        models={"napping": FunctionModel(play)},
        tools={"nap": nap},
        default_tools=["nap"],
        workers_enabled=True,
    ) as client:
        task = await submit(client, model="napping", timeout_seconds=4)
        await asyncio.wait_for(in_tool.wait(), 10)
        await client.post(f"/v1/tasks/{task['id']}/pause")
        held = await _given_back(client, task["id"])
        [released] = await events(client, task["id"], "released")
        assert released["data"]["ran_seconds"] >= 2  # the tool's time, counted
        await asyncio.sleep(4.5)  # paused longer than the timeout: it does not count
        assert (await read(client, held["id"]))["state"] == "running"
        await client.post(f"/v1/tasks/{task['id']}/resume")
        done = await until_state(client, task["id"], "completed", "failed")
    assert done["state"] == "failed", done
    assert done["error"]["type"] == "timeout"


async def test_a_waiting_task_paused_and_answered_runs_only_once_resumed(
    make_client: ClientFactory,
) -> None:
    async with make_client(
        models={"asker": asks_for_a_colour()}, default_tools=["ask_user"], workers_enabled=True
    ) as client:
        task = await submit(client, model="asker")
        waiting = await until_state(client, task["id"], "input_required")
        await client.post(f"/v1/tasks/{task['id']}/pause")
        answered = await client.post(
            f"/v1/tasks/{task['id']}/input", json={"answers": {"q1": "blue"}}
        )
        assert answered.status_code in (200, 202), answered.text
        await asyncio.sleep(0.6)
        now = await read(client, task["id"])
        assert (now["state"], now["attempt"]) == ("running", waiting["attempt"])
        assert now["paused"] is not None
        await client.post(f"/v1/tasks/{task['id']}/resume")
        done = await until_state(client, task["id"], "completed", "failed")
    assert done["result"] == "painted blue"


# -- the operators' brake ------------------------------------------------------------


async def test_the_brake_holds_every_task_of_a_profile_and_lets_go_of_them_all(
    make_client: ClientFactory, tmp_path: Any
) -> None:
    agents = tmp_path / "agents.toml"
    agents.write_text('[agents.flaky]\nmodel = "gate"\n')
    gate = asyncio.Event()
    started: list[str] = []

    async def play(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        started.append("x")
        await gate.wait()
        return ModelResponse(parts=[TextPart("through")])

    async with make_client(
        models={"gate": FunctionModel(play)},
        agents_file=agents,
        workers_enabled=True,
        worker_concurrency=1,
    ) as client:
        running = await submit(client, agent="flaky")
        await wait_for(lambda: started, timeout=10)
        queued = await submit(client, agent="flaky")
        alone = await submit(client, agent="flaky")
        other = await submit(client, input="not flaky")  # the default profile: not held
        await client.post(f"/v1/tasks/{alone['id']}/pause", json={"reason": "mine"})

        pulled = await client.post("/v1/agents/flaky/pause", json={"reason": "model is off"})
        assert pulled.status_code == 200, pulled.text
        assert pulled.json()["tasks"] == 2  # running and queued (alone was paused already)
        assert pulled.json()["paused"]["reason"] == "model is off"
        again = await client.post("/v1/agents/flaky/pause")
        assert again.json()["tasks"] == 0
        listed = {a["name"]: a for a in (await client.get("/v1/agents")).json()["agents"]}
        assert listed["flaky"]["paused"]["reason"] == "model is off"
        assert listed["default"]["paused"] is None

        await _given_back(client, running["id"])
        # A new task of the held profile is accepted, and waits.
        late = await submit(client, agent="flaky")
        assert late["paused"]["scope"] == "agent"
        assert late["paused"]["reason"] == "model is off"
        gate.set()
        await until_state(client, other["id"], "completed")
        for task in (running, queued, late, alone):
            now = await read(client, task["id"])
            assert now["state"] in ("pending", "running"), now
            assert now["paused"], now
        assert (await read(client, running["id"]))["paused"]["scope"] == "agent"

        released = await client.post("/v1/agents/flaky/resume")
        assert released.status_code == 200, released.text
        assert released.json() == {"name": "flaky", "paused": None, "tasks": 3}
        assert (await client.post("/v1/agents/flaky/resume")).json()["tasks"] == 0
        for task in (running, queued, late):
            done = await until_state(client, task["id"], "completed", "failed")
            assert done["result"] == "through"
        # Paused on its own: it stays paused when the brake is released.
        assert (await read(client, alone["id"]))["paused"]["reason"] == "mine"
        unknown = await client.post("/v1/agents/nobody/pause")
        assert unknown.status_code == 404


async def test_a_submit_racing_the_brake_is_held(store: TaskStore) -> None:
    """A submit committing while the brake is pulled: its INSERT did not see the brake,
    so the brake waits for it and pauses it (without the brake's lock, its sweep
    would miss the task, and the task would run)."""
    pauses = PauseStore(store.db)
    new = NewTask(tenant="default", input="x", agent=SPEC, metadata={}, max_attempts=3)
    async with store.db.connection() as conn:
        submitting = conn.transaction()
        await submitting.start()
        [created] = await create_many(conn, [task_params(new)])
        assert created["paused"] is None
        pulling = asyncio.create_task(
            pauses.pull_brake(tenant="default", profile="default", by="test", reason=None)
        )
        await asyncio.sleep(0.3)
        assert not pulling.done()  # it waits for the submit under way
        await submitting.commit()
    _, swept = await asyncio.wait_for(pulling, 5)
    assert swept == 1
    task = await store.get(created["id"])
    assert task is not None
    assert task.paused is not None
    assert task.paused["scope"] == "agent"
    # A submit after the brake: created paused, its first event saying so.
    later, _ = await store.create(new)
    assert later.paused is not None
    assert await LeaseStore(store.db).claim(owner="w", limit=10, lease_seconds=30) == []


async def test_a_run_whose_paused_notice_was_lost_is_given_back_by_the_heartbeat(
    make_client: ClientFactory, db: AsyncEngine
) -> None:
    """The flag written without its event (so without a NOTIFY): the heartbeat, which
    reads it as it renews the lease, stops the run and gives the task back."""
    blocking = asyncio.Event()

    async def play(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        blocking.set()
        await asyncio.sleep(3600)
        return ModelResponse(parts=[TextPart("never")])

    async with make_client(
        models={"stuck": FunctionModel(play)}, workers_enabled=True, **QUICK_RECOVERY
    ) as client:
        task = await submit(client, model="stuck")
        await asyncio.wait_for(blocking.wait(), 10)
        async with db.begin() as conn:
            await conn.execute(
                text("""UPDATE tasks SET paused = jsonb_build_object(
                            'by', 'test', 'at', now(), 'scope', 'task')
                        WHERE id = :id"""),
                {"id": task["id"]},
            )
        held = await _given_back(client, task["id"])
        assert held["state"] == "running"
        assert held["lost_attempts"] == 0  # released, not expired
        await wait_for(lambda: _pool(client).running == 0, timeout=2)


# -- A2A and MCP ---------------------------------------------------------------------


async def test_a2a_and_mcp_show_a_paused_task_unfinished_saying_it_is_paused(
    client: httpx.AsyncClient,
) -> None:
    task = await submit(client)
    await client.post(f"/v1/tasks/{task['id']}/pause", json={"reason": "checking the tool"})
    a2a = await client.post(
        "/a2a",
        json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task["id"]}},
        headers={"A2A-Version": "1.0"},
    )
    shown = a2a.json()["result"]
    assert shown["status"]["state"] == "TASK_STATE_SUBMITTED"
    [said] = shown["status"]["message"]["parts"]
    assert said["text"].startswith("paused: paused by open (checking the tool)")
    assert shown["metadata"]["taskservice"]["paused"]["reason"] == "checking the tool"
    legacy = await client.post(
        "/a2a",
        json={"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"id": task["id"]}},
    )
    assert legacy.json()["result"]["status"]["state"] == "submitted"
    assert "paused" in legacy.json()["result"]["status"]["message"]["parts"][0]["text"]

    mcp = await client.post(
        "/mcp",
        json={"jsonrpc": "2.0", "id": 3, "method": "tasks/get", "params": {"taskId": task["id"]}},
        headers={
            "Host": "127.0.0.1",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2025-11-25",
        },
    )
    body = mcp.text
    [line] = [x for x in body.splitlines() if x.startswith("data:")] or [f"data:{body}"]
    result = json.loads(line[5:])["result"]
    assert result["status"] == "working"
    assert result["statusMessage"].startswith("paused: paused by open")

    await client.post(f"/v1/tasks/{task['id']}/resume")
    again = await client.post(
        "/a2a",
        json={"jsonrpc": "2.0", "id": 4, "method": "GetTask", "params": {"id": task["id"]}},
        headers={"A2A-Version": "1.0"},
    )
    assert "message" not in again.json()["result"]["status"]
    assert "paused" not in again.json()["result"]["metadata"]["taskservice"]


async def test_an_a2a_subscription_hears_the_pause_and_the_resume(
    make_live: LiveFactory,
) -> None:
    async with (
        make_live() as live,
        httpx.AsyncClient(base_url=live.url, timeout=20) as client,
    ):
        task = await submit(client)
        body = {
            "jsonrpc": "2.0",
            "id": 8,
            "method": "SubscribeToTask",
            "params": {"id": task["id"]},
        }
        seen: list[dict[str, Any]] = []

        async def subscribe() -> None:
            async with client.stream(
                "POST", "/a2a", json=body, headers={"A2A-Version": "1.0"}
            ) as response:
                async for line in response.aiter_lines():
                    if line.startswith("data: "):
                        seen.append(json.loads(line[len("data: ") :])["result"])

        subscription = asyncio.create_task(subscribe())
        await wait_for(lambda: seen, timeout=10)
        await client.post(f"/v1/tasks/{task['id']}/pause")
        await wait_for(lambda: len(seen) >= 2, timeout=10)
        await client.post(f"/v1/tasks/{task['id']}/resume")
        await wait_for(lambda: len(seen) >= 3, timeout=10)
        await client.post(f"/v1/tasks/{task['id']}/cancel")
        await asyncio.wait_for(subscription, 10)
    updates = [s["statusUpdate"]["status"] for s in seen[1:]]
    assert "paused" in updates[0]["message"]["parts"][0]["text"]
    assert updates[0]["state"] == "TASK_STATE_SUBMITTED"
    assert "message" not in updates[1]
    assert updates[-1]["state"] == "TASK_STATE_CANCELED"


async def test_a_task_cancelled_while_paused_keeps_the_flag_but_is_not_listed_as_held(
    client: httpx.AsyncClient,
) -> None:
    task = await submit(client)
    await client.post(f"/v1/tasks/{task['id']}/pause", json={"reason": "r"})
    cancelled = (await client.post(f"/v1/tasks/{task['id']}/cancel")).json()
    assert cancelled["paused"]["reason"] == "r"  # what held it when it ended
    assert (await client.get("/v1/tasks", params={"paused": "true"})).json()["tasks"] == []
    others = (await client.get("/v1/tasks", params={"paused": "false"})).json()["tasks"]
    assert [t["id"] for t in others] == [task["id"]]


async def test_a_task_resumed_before_its_tool_call_ended_runs_on_without_a_release(
    make_client: ClientFactory,
) -> None:
    in_tool = asyncio.Event()
    finish_tool = asyncio.Event()

    async def slow(ctx: RunContext[Any]) -> str:
        """Waits to be let go."""
        in_tool.set()
        await finish_tool.wait()
        return "ok"

    async with make_client(
        models={"tooling": one_call_then(ToolCallPart("slow", {}, "s1"), "went on")},
        tools={"slow": slow},
        default_tools=["slow"],
        workers_enabled=True,
    ) as client:
        task = await submit(client, model="tooling")
        await asyncio.wait_for(in_tool.wait(), 10)
        await client.post(f"/v1/tasks/{task['id']}/pause")
        await client.post(f"/v1/tasks/{task['id']}/resume")
        await asyncio.sleep(0.3)  # the notices heard
        finish_tool.set()
        done = await until_state(client, task["id"], "completed", "failed")
        released = await events(client, task["id"], "released")
    assert (done["state"], done["attempt"]) == ("completed", 1)
    assert released == []
