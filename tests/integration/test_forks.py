"""Forks (`POST /v1/tasks/{id}/fork`): a new task from a position of another's
ledger, whose run repeats no tool call recorded before that position."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import httpx
import pytest
from pydantic_ai import RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from tests.conftest import ClientFactory, wait_for
from tests.integration.helpers import QUICK_RECOVERY, until_state, worker_dies

# Executions of `effect` by step, across every task of a test.
effects: Counter[int] = Counter()
# Steps whose first execution blocks until the test lets it go.
held: dict[int, asyncio.Event] = {}


async def effect(ctx: RunContext[Any], step: int) -> str:
    """A tool with a side effect: counts its executions of each step."""
    effects[step] += 1
    gate = held.get(step)
    if gate is not None and effects[step] == 1:
        await gate.wait()
    return f"effect {step} done"


def prompts(messages: list[ModelMessage]) -> list[str]:
    return [
        str(part.content)
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, UserPromptPart)
    ]


def three_steps() -> FunctionModel:
    """Calls `effect` for steps 1, 2, 3 (a turn each), then answers with what it was
    told; after a fourth user message it answers that."""

    async def play(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn = sum(isinstance(m, ModelResponse) for m in messages)
        if turn < 3:
            return ModelResponse(parts=[ToolCallPart("effect", {"step": turn + 1}, f"c{turn + 1}")])
        said = prompts(messages)
        return ModelResponse(parts=[TextPart(f"answer {turn} to {said[-1]}")])

    return FunctionModel(play)


@pytest.fixture(autouse=True)
def _fresh_effects() -> None:
    effects.clear()
    held.clear()


def _client(make_client: ClientFactory, **overrides: Any) -> Any:
    return make_client(
        models={"steps": three_steps()},
        tools={"effect": effect},
        default_tools=["effect"],
        workers_enabled=True,
        **overrides,
    )


async def _source(client: httpx.AsyncClient) -> dict[str, Any]:
    """A completed task of 8 messages: (request, response calling effect) three times, the
    results' request, the answer."""
    task = (await client.post("/v1/tasks", json={"input": "go", "model": "steps"})).json()
    done = await until_state(client, task["id"], "completed", "failed")
    assert done["state"] == "completed", done
    assert effects == {1: 1, 2: 1, 3: 1}
    return done


async def _fork(client: httpx.AsyncClient, task_id: str, **body: Any) -> httpx.Response:
    return await client.post(f"/v1/tasks/{task_id}/fork", json=body)


async def _messages(client: httpx.AsyncClient, task_id: str) -> list[dict[str, Any]]:
    return (await client.get(f"/v1/tasks/{task_id}/messages")).json()["messages"]  # type: ignore[no-any-return]


async def test_a_fork_after_a_tool_result_repeats_no_call_before_it_and_runs_the_rest(
    make_client: ClientFactory,
) -> None:
    async with _client(make_client) as client:
        source = await _source(client)
        before = await _messages(client, source["id"])
        source_events = (await client.get(f"/v1/tasks/{source['id']}/events")).json()["events"]

        # Position 3: the prompt, the call of step 1 and its result: the model is
        # asked again from there.
        response = await _fork(client, source["id"], at=3)
        assert response.status_code == 201, response.text
        fork = response.json()
        assert response.headers["location"] == f"/v1/tasks/{fork['id']}"
        assert fork["forked_from"] == {"task_id": source["id"], "at": 3}
        assert fork["context_id"] == source["context_id"]
        assert fork["agent"] == source["agent"]
        assert fork["usage"] == {}
        done = await until_state(client, fork["id"], "completed", "failed")
        assert done["state"] == "completed", done
        assert effects == {1: 1, 2: 2, 3: 2}  # step 1 not again; 2 and 3 anew
        assert done["usage"]["requests"] == 3  # its own requests only

        copied = await _messages(client, fork["id"])
        assert [m["message"] for m in copied[:3]] == [m["message"] for m in before[:3]]
        assert [m["attempt"] for m in copied[:3]] == [0, 0, 0]
        assert len(copied) == 8
        calls = (await client.get(f"/v1/tasks/{fork['id']}/calls")).json()["calls"]
        assert [(c["tool_call_id"], c["status"], c["attempt"]) for c in calls] == [
            ("c1", "completed", 0),
            ("c2", "completed", 1),
            ("c3", "completed", 1),
        ]

        events = (await client.get(f"/v1/tasks/{fork['id']}/events")).json()["events"]
        assert events[0]["data"] == {"from": None, "to": "pending"}
        assert events[1]["type"] == "log"
        assert events[1]["data"]["forked_from"] == {"task_id": source["id"], "at": 3}
        assert f"forked from task {source['id']} at position 3" in events[1]["data"]["message"]
        lines = [e["data"]["message"] for e in events if e["type"] == "log"]
        assert any(f"3 messages copied from task {source['id']}" in line for line in lines)

        # The source is untouched.
        assert await _messages(client, source["id"]) == before
        after = (await client.get(f"/v1/tasks/{source['id']}/events")).json()["events"]
        assert after == source_events

        # Lineage.
        forks = (await client.get("/v1/tasks", params={"forked_from": source["id"]})).json()
        assert [t["id"] for t in forks["tasks"]] == [fork["id"]]
        assert (await client.get("/v1/tasks", params={"forked_from": fork["id"]})).json()[
            "tasks"
        ] == []


async def test_a_fork_at_zero_runs_everything_again_and_may_replace_the_prompt(
    make_client: ClientFactory,
) -> None:
    async with _client(make_client) as client:
        source = await _source(client)
        fork = (await _fork(client, source["id"], at=0, input="again")).json()
        assert fork["input"] == "again"
        done = await until_state(client, fork["id"], "completed", "failed")
        assert done["result"] == "answer 3 to again"
        assert effects == {1: 2, 2: 2, 3: 2}
        assert await _messages(client, fork["id"]) != []
        first = (await _messages(client, fork["id"]))[0]
        assert first["attempt"] == 1


async def test_a_fork_after_the_answer_continues_the_conversation_with_a_message(
    make_client: ClientFactory,
) -> None:
    async with _client(make_client) as client:
        source = await _source(client)
        # The default position is the end of the ledger.
        fork = (await _fork(client, source["id"], input="and in French?")).json()
        assert fork["forked_from"] == {"task_id": source["id"], "at": 8}
        assert fork["input"] == source["input"]  # the prompt is in the copied messages
        assert fork["followups"] == 1
        done = await until_state(client, fork["id"], "completed", "failed")
        assert done["result"] == "answer 4 to and in French?"
        assert effects == {1: 1, 2: 1, 3: 1}  # nothing ran again
        assert done["usage"]["requests"] == 1


async def test_a_position_that_is_not_a_step_boundary_is_a_422_naming_the_valid_ones(
    make_client: ClientFactory,
) -> None:
    async with _client(make_client) as client:
        source = await _source(client)
        count = (await client.get("/v1/tasks", params={"count": "exact"})).json()["total"]
        cases = {
            # Between step 1's call (message 1) and its result (message 2).
            2: "between the tool calls of message 1 and their results",
            9: "its ledger holds 8 messages",
            # After the answer, without a message: nothing to run.
            8: "the model's answer",
        }
        for at, why in cases.items():
            response = await _fork(client, source["id"], at=at)
            assert response.status_code == 422, (at, response.text)
            problem = response.json()
            assert response.headers["content-type"].startswith("application/problem+json")
            assert why in problem["detail"], problem
            assert problem["valid_positions"] == [0, 1, 3, 5, 7]
        with_message = await _fork(client, source["id"], at=3, input="hm")
        assert with_message.status_code == 422
        assert with_message.json()["valid_positions"] == [0, 8]
        assert (await _fork(client, source["id"], at=-1)).status_code == 422
        unknown = await client.post("/v1/tasks/0190a1b2-0000-7000-8000-000000000000/fork", json={})
        assert unknown.status_code == 404
        # Nothing was created.
        after = (await client.get("/v1/tasks", params={"count": "exact"})).json()["total"]
        assert after == count


async def test_an_idempotency_key_makes_a_retried_fork_the_same_fork(
    make_client: ClientFactory,
) -> None:
    async with _client(make_client) as client:
        source = await _source(client)
        headers = {"Idempotency-Key": "fork-1"}
        url = f"/v1/tasks/{source['id']}/fork"
        first = await client.post(url, json={"at": 3}, headers=headers)
        again = await client.post(url, json={"at": 3}, headers=headers)
        assert (first.status_code, again.status_code) == (201, 200)
        assert again.json()["id"] == first.json()["id"]
        assert again.headers["idempotent-replayed"] == "true"
        other = await client.post(url, json={"at": 5}, headers=headers)
        assert other.status_code == 409
        forks = (await client.get("/v1/tasks", params={"forked_from": source["id"]})).json()
        assert len(forks["tasks"]) == 1


async def test_a_fork_may_change_the_agent_and_keeps_what_it_does_not_change(
    make_client: ClientFactory,
) -> None:
    seen: list[str | None] = []

    async def other(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(info.instructions)
        return ModelResponse(parts=[TextPart(f"other model after {len(messages)} messages")])

    async with make_client(
        models={"steps": three_steps(), "other": FunctionModel(other)},
        tools={"effect": effect},
        default_tools=["effect"],
        workers_enabled=True,
    ) as client:
        source = await _source(client)
        fork = (
            await _fork(
                client,
                source["id"],
                at=7,
                model="other",
                system_prompt="Be brief.",
                metadata={"ticket": "T-42"},
                max_attempts=5,
            )
        ).json()
        assert fork["agent"]["model"] == "other"
        assert fork["agent"]["system_prompt"] == "Be brief."
        assert fork["agent"]["profile"] == source["agent"]["profile"]
        assert (fork["metadata"], fork["max_attempts"]) == ({"ticket": "T-42"}, 5)
        done = await until_state(client, fork["id"], "completed", "failed")
        assert done["result"] == "other model after 7 messages"
        assert seen == ["Be brief."]
        refused = await _fork(client, source["id"], at=7, model="not-allowed")
        assert refused.status_code == 422


async def test_a_fork_of_a_running_task_copies_what_finished_and_runs_the_rest(
    make_client: ClientFactory,
) -> None:
    """Step 2 is still running in the source: the fork at the end of the source's
    ledger copies step 1 (finished) and makes step 2's call itself."""
    held[2] = asyncio.Event()
    async with _client(make_client) as client:
        task = (await client.post("/v1/tasks", json={"input": "go", "model": "steps"})).json()

        async def step_two_running() -> bool:
            calls = (await client.get(f"/v1/tasks/{task['id']}/calls")).json()["calls"]
            return any(c["tool_call_id"] == "c2" and c["status"] == "in_progress" for c in calls)

        await wait_for(step_two_running, timeout=20)
        fork = (await _fork(client, task["id"])).json()
        assert fork["forked_from"] == {"task_id": task["id"], "at": 4}
        done = await until_state(client, fork["id"], "completed", "failed")
        assert done["state"] == "completed", done
        assert effects == {1: 1, 2: 2, 3: 1}  # step 2: the source's (held) and the fork's
        calls = (await client.get(f"/v1/tasks/{fork['id']}/calls")).json()["calls"]
        assert [(c["tool_call_id"], c["attempt"]) for c in calls] == [
            ("c1", 0),
            ("c2", 1),
            ("c3", 1),
        ]
        held[2].set()
        source = await until_state(client, task["id"], "completed", "failed")
        assert source["state"] == "completed"
        assert effects == {1: 1, 2: 2, 3: 2}


async def test_a_fork_of_a_recovered_task_keeps_the_interrupted_call_failed(
    make_client: ClientFactory,
) -> None:
    """The source's worker died mid step 2; recovered, the run told the model the
    call was interrupted. A fork after that result repeats neither step."""
    held[2] = asyncio.Event()  # never set: the first step 2 hangs until its worker dies
    async with _client(make_client, **QUICK_RECOVERY) as client:
        task = (await client.post("/v1/tasks", json={"input": "go", "model": "steps"})).json()
        await wait_for(lambda: effects[2] > 0, timeout=20)
        worker_dies(client, task["id"])
        source = await until_state(client, task["id"], "completed", "failed")
        assert source["state"] == "completed", source
        assert source["attempt"] == 2
        assert effects == {1: 1, 2: 1, 3: 1}
        fork = (await _fork(client, task["id"], at=5)).json()
        done = await until_state(client, fork["id"], "completed", "failed")
        assert done["state"] == "completed", done
        assert effects == {1: 1, 2: 1, 3: 2}
        calls = (await client.get(f"/v1/tasks/{fork['id']}/calls")).json()["calls"]
        assert [(c["tool_call_id"], c["status"]) for c in calls] == [
            ("c1", "completed"),
            ("c2", "failed"),
            ("c3", "completed"),
        ]


async def test_recorded_subtasks_are_history_and_a_fork_before_the_spawn_spawns_its_own(
    make_client: ClientFactory,
) -> None:
    async with make_client(workers_enabled=True) as client:
        task = (
            await client.post("/v1/tasks", json={"agent": "demo", "input": "spawn 1, take 1s"})
        ).json()
        source = await until_state(client, task["id"], "completed", "failed")
        assert source["state"] == "completed", source
        messages = await _messages(client, source["id"])
        spawn = next(
            m["position"]
            for m in messages
            if any(p.get("tool_name") == "spawn_subtask" for p in m["message"]["parts"])
        )
        wait = next(
            m["position"]
            for m in messages
            if any(p.get("tool_name") == "wait_for_subtasks" for p in m["message"]["parts"])
        )

        between = await _fork(client, source["id"], at=spawn + 2)
        assert between.status_code == 422
        assert "fork before the spawn" in between.json()["detail"]

        after = (await _fork(client, source["id"], at=wait + 2)).json()
        before = (await _fork(client, source["id"], at=spawn)).json()
        for fork in (after, before):
            done = await until_state(client, fork["id"], "completed", "failed")
            assert done["state"] == "completed", done
        children = {
            fork["id"]: (await client.get("/v1/tasks", params={"parent_id": fork["id"]})).json()[
                "tasks"
            ]
            for fork in (after, before)
        }
        source_children = (
            await client.get("/v1/tasks", params={"parent_id": source["id"]})
        ).json()["tasks"]
    assert children[after["id"]] == []  # their outcomes are its history
    assert len(children[before["id"]]) == 1  # spawned by the fork itself
    assert len(source_children) == 1
    assert "they ended completed" in done["result"]
