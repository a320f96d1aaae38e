"""Sub-agent execution: profiles, the step ledger, input_required, limits, resume."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.agents.profiles import ProfileError
from taskservice.db.steps import LedgerStore
from tests.conftest import ClientFactory
from tests.integration.helpers import QUICK_RECOVERY, until_state, worker_dies


def tool_results(messages: list[ModelMessage]) -> dict[str, Any]:
    """Everything the model has been told about tool calls, by call id."""
    seen: dict[str, Any] = {}
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, ToolReturnPart | RetryPromptPart):
                    seen[part.tool_call_id] = part.content
    return seen


def scripted(*turns: list[ToolCallPart] | str) -> FunctionModel:
    """A model that plays the given turns: tool calls, then a final text."""

    async def play(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn = turns[min(sum(isinstance(m, ModelResponse) for m in messages), len(turns) - 1)]
        if isinstance(turn, str):
            return ModelResponse(parts=[TextPart(turn.format(results=tool_results(messages)))])
        return ModelResponse(parts=list(turn))

    return FunctionModel(play)


@pytest.fixture
def profiles_file(tmp_path: Path) -> Path:
    path = tmp_path / "agents.toml"
    path.write_text(
        """
[agents.researcher]
description = "Looks things up"
system_prompt = "You research."
model = "offline"
tools = ["report_progress", "count"]
request_limit = 3
"""
    )
    return path


counter = {"count": 0}


async def count(ctx: RunContext[Any], step: int) -> str:
    """Counts its own executions."""
    counter["count"] += 1
    return f"counted step {step}"


async def test_profiles_are_listed_and_used(
    make_client: ClientFactory, profiles_file: Path
) -> None:
    async with make_client(agents_file=profiles_file, tools={"count": count}) as client:
        agents = (await client.get("/v1/agents")).json()["agents"]
        assert [a["name"] for a in agents] == ["default", "demo", "researcher"]
        researcher = agents[2]
        assert researcher["tools"] == ["report_progress", "count"]
        assert (researcher["request_limit"], researcher["description"]) == (3, "Looks things up")
        task = (await client.post("/v1/tasks", json={"input": "x", "agent": "researcher"})).json()
        assert task["agent"] == {
            "profile": "researcher",
            "model": "offline",
            "system_prompt": "You research.",
        }
        unknown = await client.post("/v1/tasks", json={"input": "x", "agent": "nobody"})
        assert unknown.status_code == 422
        assert "researcher" in unknown.json()["detail"]


async def test_a_profile_naming_an_unknown_tool_stops_the_start(
    make_client: ClientFactory, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[agents.x]\ntools = ["rm_rf"]\n')
    with pytest.raises(ProfileError, match="rm_rf"):
        async with make_client(agents_file=bad):
            pass


async def test_every_step_is_in_the_ledger_and_usage_accumulates(
    make_client: ClientFactory,
) -> None:
    counter["count"] = 0
    model = scripted(
        [ToolCallPart("report_progress", {"percent": 50, "note": "half way"}, tool_call_id="p1")],
        [ToolCallPart("count", {"step": 1}, tool_call_id="c1")],
        "done: {results}",
    )
    async with make_client(
        models={"scripted": model},
        tools={"count": count},
        default_tools=["report_progress", "ask_user", "count"],
        workers_enabled=True,
    ) as client:
        task = (await client.post("/v1/tasks", json={"input": "go", "model": "scripted"})).json()
        done = await until_state(client, task["id"], "completed", "failed")
        assert done["state"] == "completed", done
        assert "counted step 1" in done["result"]
        assert done["usage"]["requests"] == 3
        assert done["usage"]["input_tokens"] > 0

        messages = (await client.get(f"/v1/tasks/{task['id']}/messages")).json()["messages"]
        assert [(m["position"], m["kind"]) for m in messages] == [
            (0, "request"),
            (1, "response"),
            (2, "request"),
            (3, "response"),
            (4, "request"),
            (5, "response"),
        ]
        calls = (await client.get(f"/v1/tasks/{task['id']}/calls")).json()["calls"]
        assert [(c["tool_call_id"], c["name"], c["status"]) for c in calls] == [
            ("p1", "report_progress", "completed"),
            ("c1", "count", "completed"),
        ]
        assert calls[1]["arguments"] == {"step": 1}
        assert calls[1]["result"] == "counted step 1"
        assert calls[1]["started_at"] <= calls[1]["finished_at"]

        events = (await client.get(f"/v1/tasks/{task['id']}/events", params={"limit": 100})).json()
        kinds = [e["type"] for e in events["events"]]
        for kind in ("message", "tool_call", "tool_result", "progress", "usage"):
            assert kind in kinds, kind
        progress = next(e for e in events["events"] if e["type"] == "progress")
        assert progress["data"] == {"percent": 50, "note": "half way"}
        assert counter["count"] == 1


async def test_the_last_turn_is_written_with_the_outcome_and_earlier_turns_before(
    make_client: ClientFactory, db: AsyncEngine
) -> None:
    """A turn that calls tools is written before the tools run (their calls must be on
    record); the answer and the outcome commit together, in one statement."""
    model = scripted(
        [ToolCallPart("report_progress", {"percent": 50}, tool_call_id="p1")], "all done"
    )
    async with make_client(models={"scripted": model}, workers_enabled=True) as client:
        task = (await client.post("/v1/tasks", json={"input": "go", "model": "scripted"})).json()
        done = await until_state(client, task["id"], "completed", "failed")
        assert done["result"] == "all done"
    async with db.connect() as conn:
        params = {"id": task["id"]}
        task_xmin = (
            await conn.execute(text("SELECT xmin::text FROM tasks WHERE id = :id"), params)
        ).scalar_one()
        messages = (
            await conn.execute(
                text(
                    "SELECT position, xmin::text AS x FROM task_messages "
                    "WHERE task_id = :id ORDER BY position"
                ),
                params,
            )
        ).all()
        events = (
            await conn.execute(
                text(
                    "SELECT seq, type, data, xmin::text AS x FROM task_events "
                    "WHERE task_id = :id ORDER BY seq"
                ),
                params,
            )
        ).all()
    assert [m.position for m in messages] == [0, 1, 2, 3]
    assert [m.x == task_xmin for m in messages] == [False, False, True, True]
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    last = [(e.type, e.data.get("position", e.data.get("to"))) for e in events if e.x == task_xmin]
    assert last == [("message", 2), ("message", 3), ("usage", None), ("state_change", "completed")]
    assert events[-1].data == {"from": "running", "to": "completed"}


async def test_an_agent_asks_for_input_and_resumes_the_same_conversation(
    make_client: ClientFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    history_reads: list[uuid.UUID] = []
    read_history = LedgerStore.all_messages

    async def counted(self: LedgerStore, task_id: uuid.UUID) -> Any:
        history_reads.append(task_id)
        return await read_history(self, task_id)

    monkeypatch.setattr(LedgerStore, "all_messages", counted)
    model = scripted(
        [ToolCallPart("ask_user", {"question": "Which colour?"}, tool_call_id="q1")],
        "you chose {results}",
    )
    async with make_client(models={"asker": model}, workers_enabled=True) as client:
        task = (await client.post("/v1/tasks", json={"input": "paint", "model": "asker"})).json()
        waiting = await until_state(client, task["id"], "input_required")
        assert waiting["input_request"] == {
            "kind": "questions",
            "questions": [{"id": "q1", "tool": "ask_user", "question": "Which colour?"}],
        }
        wrong = await client.post(f"/v1/tasks/{task['id']}/input", json={"answers": {"q9": "red"}})
        assert wrong.status_code == 422
        assert wrong.json()["questions"] == ["q1"]
        both = await client.post(
            f"/v1/tasks/{task['id']}/input", json={"answer": "red", "answers": {"q1": "red"}}
        )
        assert both.status_code == 422
        still = (await client.get(f"/v1/tasks/{task['id']}")).json()
        assert still["state"] == "input_required"

        answered = await client.post(f"/v1/tasks/{task['id']}/input", json={"answer": "red"})
        assert answered.status_code == 200
        assert answered.json()["state"] == "running"
        assert answered.json()["input_request"] is None
        done = await until_state(client, task["id"], "completed", "failed")
        assert done["state"] == "completed", done
        assert "red" in done["result"]
        assert done["usage"]["requests"] == 2  # across both runs
        calls = (await client.get(f"/v1/tasks/{task['id']}/calls")).json()["calls"]
        assert [(c["name"], c["status"], c["result"]) for c in calls] == [
            ("ask_user", "completed", "red")
        ]
        messages = (await client.get(f"/v1/tasks/{task['id']}/messages")).json()["messages"]
        assert [m["kind"] for m in messages] == ["request", "response", "request", "response"]
        # The first run had no history to read; the resumed one read it, once.
        assert history_reads == [uuid.UUID(task["id"])]
        again = await client.post(f"/v1/tasks/{task['id']}/input", json={"answer": "blue"})
        assert again.status_code == 409
        assert again.json()["state"] == "completed"


async def test_running_past_the_request_limit_fails_with_maximum_iterations(
    make_client: ClientFactory, profiles_file: Path
) -> None:
    forever = scripted([ToolCallPart("report_progress", {"percent": 1})])
    async with make_client(
        models={"forever": forever},
        tools={"count": count},
        agents_file=profiles_file,
        workers_enabled=True,
    ) as client:
        task = (
            await client.post(
                "/v1/tasks", json={"input": "x", "agent": "researcher", "model": "forever"}
            )
        ).json()
        done = await until_state(client, task["id"], "failed", "completed")
        assert done["error"]["type"] == "max_iterations"
        assert "maximum iterations reached" in done["error"]["message"]
        assert done["usage"]["requests"] == 3


async def test_a_task_resumes_after_its_worker_died_between_two_tool_calls(
    make_client: ClientFactory,
) -> None:
    """Worker A completes `count`, then dies inside `hang`. The task is recovered and
    resumed: `count` is not executed again, `hang` is reported as interrupted."""
    counter["count"] = 0
    hanging = asyncio.Event()

    async def hang(ctx: RunContext[Any]) -> str:
        """Never returns."""
        hanging.set()
        await asyncio.sleep(3600)
        return "unreachable"

    model = scripted(
        [ToolCallPart("count", {"step": 1}, tool_call_id="c1")],
        [ToolCallPart("hang", {}, tool_call_id="c2")],
        "after recovery: {results}",
    )
    async with make_client(
        models={"scripted": model},
        tools={"count": count, "hang": hang},
        default_tools=["count", "hang"],
        workers_enabled=True,
        **QUICK_RECOVERY,
    ) as client:
        task = (await client.post("/v1/tasks", json={"input": "go", "model": "scripted"})).json()
        await asyncio.wait_for(hanging.wait(), 10)
        worker_dies(client, task["id"])
        done = await until_state(client, task["id"], "completed", "failed")
    assert done["state"] == "completed", done
    assert done["attempt"] == 2
    assert counter["count"] == 1  # never executed twice
    assert "counted step 1" in done["result"]
    assert "interrupted" in done["result"]


async def test_a_parent_parks_on_its_subtasks_without_holding_a_worker_slot(
    make_client: ClientFactory,
) -> None:
    """One worker slot: a parent waiting in the slot would deadlock its children."""
    release_children = asyncio.Event()

    async def play(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if info.instructions == "child":
            await release_children.wait()
            prompt = messages[0].parts[-1].content  # type: ignore[union-attr]
            return ModelResponse(parts=[TextPart(f"child did {prompt}")])
        turns = sum(isinstance(m, ModelResponse) for m in messages)
        if turns == 0:
            return ModelResponse(
                parts=[
                    ToolCallPart("spawn_subtask", {"input": "a", "system_prompt": "child"}, "s1"),
                    ToolCallPart("spawn_subtask", {"input": "b", "system_prompt": "child"}, "s2"),
                ]
            )
        if turns == 1:
            return ModelResponse(parts=[ToolCallPart("wait_for_subtasks", {}, "w1")])
        outcomes = tool_results(messages)["w1"]
        return ModelResponse(
            parts=[TextPart("collected " + ", ".join(o["result"] for o in outcomes))]
        )

    async with make_client(
        models={"planner": FunctionModel(play)},
        default_tools=["spawn_subtask", "wait_for_subtasks"],
        workers_enabled=True,
        worker_concurrency=1,
    ) as client:
        parent = (await client.post("/v1/tasks", json={"input": "plan", "model": "planner"})).json()
        parked = await until_state(client, parent["id"], "input_required")
        assert parked["input_request"]["kind"] == "subtasks"
        refused = await client.post(f"/v1/tasks/{parent['id']}/input", json={"answer": "x"})
        assert refused.status_code == 409
        children = (await client.get("/v1/tasks", params={"parent_id": parent["id"]})).json()[
            "tasks"
        ]
        assert len(children) == 2
        release_children.set()
        done = await until_state(client, parent["id"], "completed", "failed")
        log = (await client.get(f"/v1/tasks/{parent['id']}/events", params={"limit": 200})).json()
    assert done["state"] == "completed", done
    # The two spawn calls run concurrently, so the children's order is not fixed.
    collected = done["result"].removeprefix("collected ").split(", ")
    assert sorted(collected) == ["child did a", "child did b"]
    assert done["attempt"] == 2
    changes = [
        (e["data"]["from"], e["data"]["to"], e["data"].get("cause"))
        for e in log["events"]
        if e["type"] == "state_change"
    ]
    assert changes == [
        (None, "pending", None),
        ("pending", "running", None),
        ("running", "input_required", None),
        ("input_required", "running", "subtasks_finished"),
        ("running", "completed", None),
    ]


async def test_a_subtask_goes_through_the_checks_of_any_submit(
    make_client: ClientFactory,
) -> None:
    """Over the input limit or empty, a subtask is refused to the model (which can
    fix its call) and nothing is created; a good one is created as any task is."""
    model = scripted(
        [
            ToolCallPart("spawn_subtask", {"input": "x" * 300}, "big"),
            ToolCallPart("spawn_subtask", {"input": ""}, "empty"),
            ToolCallPart("spawn_subtask", {"input": "small"}, "good"),
        ],
        "told: {results}",
    )
    async with make_client(
        models={"planner": model},
        default_tools=["spawn_subtask"],
        workers_enabled=True,
        max_input_bytes=200,
    ) as client:
        parent = (await client.post("/v1/tasks", json={"input": "plan", "model": "planner"})).json()
        done = await until_state(client, parent["id"], "completed", "failed")
        children = (await client.get("/v1/tasks", params={"parent_id": parent["id"]})).json()[
            "tasks"
        ]
    assert done["state"] == "completed", done
    assert "the subtask was refused: input is 302 bytes" in done["result"]
    assert "the subtask was refused: input must not be empty" in done["result"]
    assert [child["input"] for child in children] == ["small"]
    assert children[0]["metadata"]["spawned_by"]["tool_call_id"] == "good"
