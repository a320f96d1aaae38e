"""The built-in demo agent: no configuration, every feature watchable, over real HTTP."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import httpx

from taskservice.agents.demo import QUESTION, Plan
from tests.conftest import LiveFactory, wait_for
from tests.integration.test_live_output import rebuild, stream


async def submit(client: httpx.AsyncClient, text: str) -> dict[str, Any]:
    response = await client.post("/v1/tasks", json={"input": text, "agent": "demo"})
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


async def settled(client: httpx.AsyncClient, task_id: str) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        task = (await client.get(f"/v1/tasks/{task_id}?wait=5")).json()
        asks = task["state"] == "input_required" and task["input_request"]["kind"] == "questions"
        return task if asks or task["state"] in ("completed", "failed") else None

    return await wait_for(check, timeout=30)  # type: ignore[no-any-return]


def test_the_input_says_what_the_demo_does() -> None:
    assert Plan.of("hello") == Plan(seconds=6.0, ask=False, subtasks=0)
    assert Plan.of("take 20s, ask me, spawn 3") == Plan(seconds=20.0, ask=True, subtasks=3)
    assert Plan.of("for 2.5 seconds with a subtask") == Plan(seconds=2.5, subtasks=1)
    assert Plan.of("spawn 99 and take 9999 seconds") == Plan(seconds=600.0, subtasks=5)
    # A subtask's own input asks for no subtasks and no question.
    assert Plan.of("subtask 1 of 3: take 10s") == Plan(seconds=10.0)


async def test_the_demo_reports_progress_and_streams_its_answer(make_live: LiveFactory) -> None:
    async with (
        make_live(workers_enabled=True) as live,
        httpx.AsyncClient(base_url=live.url, timeout=30) as client,
    ):
        agents = (await client.get("/v1/agents")).json()
        assert "demo" in [a["name"] for a in agents["agents"]]
        task = await submit(client, "show me, take 2s")
        events = await stream(client, task["id"])
        done = (await client.get(f"/v1/tasks/{task['id']}")).json()
    assert done["state"] == "completed"
    assert done["result"].startswith("This is the demo agent")
    progress = [e.json()["data"]["percent"] for e in events if e.event == "progress"]
    assert progress == [10, 70]
    deltas = [e for e in events if e.event == "delta" and e.json()["kind"] == "text"]
    assert len(deltas) >= 5
    answer_position = max(position for (_, position) in rebuild(events))
    assert rebuild(events)[(1, answer_position)] == {0: done["result"]}
    changes = {
        e.json()["data"]["to"]: datetime.fromisoformat(e.json()["created_at"])
        for e in events
        if e.event == "state_change"
    }
    took = (changes["completed"] - changes["running"]).total_seconds()
    assert 1.5 <= took < 10, took  # "take 2s"


async def test_the_demo_asks_when_told_to_and_goes_on_with_the_answer(
    make_live: LiveFactory,
) -> None:
    async with (
        make_live(workers_enabled=True) as live,
        httpx.AsyncClient(base_url=live.url, timeout=30) as client,
    ):
        task = await submit(client, "ask me something, take 1s")
        waiting = await settled(client, task["id"])
        assert waiting["state"] == "input_required"
        assert [q["question"] for q in waiting["input_request"]["questions"]] == [QUESTION]
        answered = await client.post(f"/v1/tasks/{task['id']}/input", json={"answer": "teal"})
        assert answered.status_code == 200, answered.text
        done = await settled(client, task["id"])
    assert done["state"] == "completed"
    assert "written in teal" in done["result"]


async def test_the_demo_spawns_subtasks_and_waits_for_them(make_live: LiveFactory) -> None:
    async with (
        make_live(workers_enabled=True) as live,
        httpx.AsyncClient(base_url=live.url, timeout=30) as client,
    ):
        task = await submit(client, "spawn 2, take 1s")
        done = await settled(client, task["id"])
        children = (await client.get(f"/v1/tasks?parent_id={task['id']}")).json()["tasks"]
    assert done["state"] == "completed", done
    assert "spawned 2 subtasks" in done["result"]
    assert "completed, completed" in done["result"]
    assert sorted(c["input"] for c in children) == [
        "subtask 1 of 2: take 0.5s",
        "subtask 2 of 2: take 0.5s",
    ]
    assert {c["state"] for c in children} == {"completed"}
