"""The first worker: claims pending tasks, runs the agent, records the outcome."""

from __future__ import annotations

import asyncio

from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from taskservice.settings import Settings
from tests.conftest import ClientFactory, wait_for
from tests.integration.helpers import until_state


async def test_a_task_runs_on_the_offline_model_and_completes(make_client: ClientFactory) -> None:
    async with make_client(workers_enabled=True) as client:
        task = (await client.post("/v1/tasks", json={"input": "What is 2+2?"})).json()
        done = await until_state(client, task["id"], "completed", "failed")
        assert done["state"] == "completed"
        assert "What is 2+2?" in done["result"]
        assert "[offline model]" in done["result"]
        assert done["agent"]["model"] == "offline"
        assert done["usage"]["requests"] == 1
        assert done["attempt"] == 1
        assert done["started_at"]
        assert done["finished_at"]
        events = (await client.get(f"/v1/tasks/{task['id']}/events")).json()["events"]
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        assert [(e["type"], e["data"].get("to") or e["data"].get("kind")) for e in events] == [
            ("state_change", "pending"),
            ("state_change", "running"),
            ("message", "request"),
            ("message", "response"),
            ("usage", None),
            ("state_change", "completed"),
        ]
        assert events[1]["data"]["attempt"] == 1
        assert events[4]["data"]["requests"] == 1


async def test_the_system_prompt_reaches_the_model(
    make_client: ClientFactory, settings: Settings
) -> None:
    seen: list[str | None] = []

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(info.instructions)
        return ModelResponse(parts=[TextPart("ok")])

    models = {"scripted": FunctionModel(answer)}
    async with make_client(
        models=models,
        workers_enabled=True,
    ) as client:
        task = (
            await client.post(
                "/v1/tasks",
                json={"input": "hi", "model": "scripted", "system_prompt": "Be a pirate."},
            )
        ).json()
        done = await until_state(client, task["id"], "completed", "failed")
        assert done["result"] == "ok"
        assert done["agent"]["model"] == "scripted"
        assert seen == ["Be a pirate."]


async def test_a_model_error_fails_the_task_with_the_error(
    make_client: ClientFactory, settings: Settings
) -> None:
    def broken(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise RuntimeError("provider exploded")

    async with make_client(
        models={"broken": FunctionModel(broken)},
        workers_enabled=True,
    ) as client:
        task = (await client.post("/v1/tasks", json={"input": "x", "model": "broken"})).json()
        done = await until_state(client, task["id"], "completed", "failed")
        assert done["state"] == "failed"
        assert "provider exploded" in done["error"]["message"]
        assert done["error"]["type"]
        assert done["result"] is None


async def test_cancelling_a_running_task_stops_the_run_and_it_stays_cancelled(
    make_client: ClientFactory, settings: Settings
) -> None:
    started = asyncio.Event()
    stopped = asyncio.Event()

    async def slow(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            stopped.set()
            raise
        return ModelResponse(parts=[TextPart("too late")])

    async with make_client(
        models={"slow": FunctionModel(slow)},
        workers_enabled=True,
    ) as client:
        task = (await client.post("/v1/tasks", json={"input": "x", "model": "slow"})).json()
        await asyncio.wait_for(started.wait(), 10)
        cancelled = await client.post(f"/v1/tasks/{task['id']}/cancel", json={"reason": "stop"})
        assert cancelled.json()["state"] == "cancelled"
        await asyncio.wait_for(stopped.wait(), 2)  # the notification stopped the agent
        await asyncio.sleep(0.2)
        final = (await client.get(f"/v1/tasks/{task['id']}")).json()
        assert final["state"] == "cancelled"
        assert final["result"] is None
        events = (await client.get(f"/v1/tasks/{task['id']}/events")).json()["events"]
        assert [e["data"].get("to") for e in events] == ["pending", "running", "cancelled"]


async def test_many_tasks_all_complete_once(make_client: ClientFactory) -> None:
    async with make_client(workers_enabled=True, worker_concurrency=4) as client:
        ids = [
            (await client.post("/v1/tasks", json={"input": f"task {i}"})).json()["id"]
            for i in range(40)
        ]

        async def all_done() -> bool:
            page = (
                await client.get("/v1/tasks", params={"state": "completed", "limit": 100})
            ).json()
            return len(page["tasks"]) == 40

        await wait_for(all_done, timeout=20)
        for task_id in ids:
            events = (await client.get(f"/v1/tasks/{task_id}/events")).json()["events"]
            states = [e["data"]["to"] for e in events if e["type"] == "state_change"]
            assert states == ["pending", "running", "completed"]


async def test_under_a_tenant_cap_a_finished_run_lets_the_next_task_of_its_tenant_run(
    make_client: ClientFactory,
) -> None:
    """No notice says a tenant's cap lifted: the run ending does. With the poll an hour
    away, the capped tenant's tasks still run one after another at once."""
    async with make_client(
        workers_enabled=True, worker_concurrency=4, tenant_max_running=1, poll_interval=3600
    ) as client:
        ids = [
            (await client.post("/v1/tasks", json={"input": f"capped {i}"})).json()["id"]
            for i in range(3)
        ]

        async def all_done() -> bool:
            states = [(await client.get(f"/v1/tasks/{i}")).json()["state"] for i in ids]
            return states == ["completed"] * 3

        await wait_for(all_done, timeout=10)
