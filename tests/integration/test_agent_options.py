"""The original design's agent configuration in `metadata` (`system_prompt`,
`model_name`, `config_name`): honoured when the field is absent, checked as the
field is, a 422 naming both when they disagree; on REST, A2A and the client."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from taskservice.client import TaskClient
from tests.conftest import ClientFactory, LiveFactory, wait_for


def recording() -> tuple[FunctionModel, list[str | None]]:
    """A model that answers with the instructions it was given, and records them."""
    seen: list[str | None] = []

    async def play(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(info.instructions)
        return ModelResponse(parts=[TextPart(f"told: {info.instructions}")])

    return FunctionModel(play), seen


@pytest.fixture
def profiles_file(tmp_path: Path) -> Path:
    path = tmp_path / "agents.toml"
    path.write_text('[agents.researcher]\nsystem_prompt = "You research."\nmodel = "offline"\n')
    return path


async def test_a_task_configured_in_metadata_runs_with_that_prompt_and_model(
    make_client: ClientFactory,
) -> None:
    model, seen = recording()
    async with make_client(models={"recorder": model}, workers_enabled=True) as client:
        metadata = {"system_prompt": "You are terse.", "model_name": "recorder", "team": "x"}
        created = await client.post("/v1/tasks", json={"input": "hi", "metadata": metadata})
        assert created.status_code == 201, created.text
        task = created.json()

        async def finished() -> dict[str, Any] | None:
            current = (await client.get(f"/v1/tasks/{task['id']}")).json()
            return current if current["state"] in ("completed", "failed") else None

        done = await wait_for(finished, timeout=20)
    assert task["agent"] == {
        "profile": "default",
        "model": "recorder",
        "system_prompt": "You are terse.",
    }
    assert task["metadata"] == metadata  # stored as given
    assert done["state"] == "completed", done
    assert done["result"] == "told: You are terse."
    assert seen == ["You are terse."]


async def test_config_name_chooses_the_profile_and_the_same_value_twice_is_fine(
    make_client: ClientFactory, profiles_file: Path
) -> None:
    async with make_client(agents_file=profiles_file) as client:
        by_metadata = await client.post(
            "/v1/tasks", json={"input": "x", "metadata": {"config_name": "researcher"}}
        )
        both = await client.post(
            "/v1/tasks",
            json={"input": "x", "agent": "researcher", "metadata": {"config_name": "researcher"}},
        )
    assert by_metadata.status_code == 201, by_metadata.text
    assert by_metadata.json()["agent"] == {
        "profile": "researcher",
        "model": "offline",
        "system_prompt": "You research.",
    }
    assert both.status_code == 201, both.text
    assert both.json()["agent"]["profile"] == "researcher"


@pytest.mark.parametrize(
    ("body", "named"),
    [
        (
            {"model": "offline", "metadata": {"model_name": "offline-slow"}},
            ["model", "metadata.model_name"],
        ),
        (
            {"system_prompt": "A", "metadata": {"system_prompt": "B"}},
            ["system_prompt", "metadata.system_prompt"],
        ),
        (
            {"agent": "default", "metadata": {"config_name": "researcher"}},
            ["agent", "metadata.config_name"],
        ),
    ],
)
async def test_a_field_and_a_different_metadata_value_are_a_422_naming_both(
    make_client: ClientFactory, profiles_file: Path, body: dict[str, Any], named: list[str]
) -> None:
    async with make_client(agents_file=profiles_file) as client:
        refused = await client.post("/v1/tasks", json={"input": "x", **body})
        listed = (await client.get("/v1/tasks")).json()["tasks"]
    assert refused.status_code == 422, refused.text
    assert refused.headers["content-type"] == "application/problem+json"
    problem = refused.json()
    assert problem["fields"] == named
    assert all(name in problem["detail"] for name in named)
    assert listed == []  # nothing written


@pytest.mark.parametrize(
    ("metadata", "field"),
    [
        ({"model_name": "gpt-unlisted"}, "model"),
        ({"config_name": "nobody"}, "agent"),
        ({"model_name": 7}, "metadata.model_name"),
        ({"system_prompt": ""}, "metadata.system_prompt"),
        ({"system_prompt": "p" * 32_769}, "metadata.system_prompt"),
    ],
)
async def test_metadata_values_get_the_checks_of_the_fields(
    make_client: ClientFactory, metadata: dict[str, Any], field: str
) -> None:
    async with make_client() as client:
        refused = await client.post("/v1/tasks", json={"input": "x", "metadata": metadata})
    assert refused.status_code == 422, refused.text
    assert refused.json()["field"] == field


async def test_a2a_message_metadata_and_the_client_configure_the_agent_the_same_way(
    make_live: LiveFactory,
) -> None:
    model, _ = recording()
    async with make_live(models={"recorder": model}) as live:
        async with TaskClient(live.url) as client:
            task = await client.submit("hi", metadata={"model_name": "recorder"})
        message = {
            "kind": "message",
            "role": "user",
            "messageId": str(uuid.uuid4()),
            "parts": [{"kind": "text", "text": "hi"}],
            "metadata": {"system_prompt": "Over A2A.", "model_name": "recorder"},
        }
        async with httpx.AsyncClient(base_url=live.url) as http:
            answer = (
                await http.post(
                    "/a2a",
                    json={
                        "jsonrpc": "2.0",
                        "id": 1,
                        "method": "message/send",
                        "params": {"message": message},
                    },
                )
            ).json()
            a2a_task = (await http.get(f"/v1/tasks/{answer['result']['id']}")).json()
    assert task["agent"]["model"] == "recorder"
    assert a2a_task["agent"]["model"] == "recorder"
    assert a2a_task["agent"]["system_prompt"] == "Over A2A."
