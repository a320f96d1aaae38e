"""Where a task may be forked (`domain/forks.py`), on ledgers as pydantic-ai stores
them: step boundaries only, and never between a spawn and the wait collecting it."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from taskservice.agents import tools
from taskservice.domain.errors import InvalidRequest
from taskservice.domain.forks import SPAWN_SUBTASK, WAIT_FOR_SUBTASKS, check_at, positions


def request(*kinds: str) -> dict[str, Any]:
    return {"kind": "request", "parts": [{"part_kind": kind} for kind in kinds]}


def response(*tools_called: str) -> dict[str, Any]:
    if not tools_called:
        return {"kind": "response", "parts": [{"part_kind": "text", "content": "done"}]}
    return {
        "kind": "response",
        "parts": [
            {"part_kind": "tool-call", "tool_name": name, "tool_call_id": f"{name}-{i}"}
            for i, name in enumerate(tools_called)
        ],
    }


def test_the_tool_names_are_the_built_in_tools() -> None:
    assert (SPAWN_SUBTASK, WAIT_FOR_SUBTASKS) == (tools.SPAWN_SUBTASK, tools.WAIT_FOR_SUBTASKS)


def test_step_boundaries_without_and_with_a_message() -> None:
    ledger = [
        request("user-prompt"),
        response("count"),
        request("tool-return"),
        response(),
    ]
    assert positions(ledger, with_message=False) == [0, 1, 3]
    assert positions(ledger, with_message=True) == [0, 4]
    open_calls = ledger[:2]  # a run stopped after asking for a call: its end is a boundary
    assert positions(open_calls, with_message=False) == [0, 1, 2]


def test_a_fork_may_not_hold_a_spawn_without_the_wait_that_collects_it() -> None:
    ledger = [
        request("user-prompt"),  # 0
        response(SPAWN_SUBTASK),  # 1
        request("tool-return"),  # 2: the child's id
        response("count"),  # 3
        request("tool-return"),  # 4
        response(WAIT_FOR_SUBTASKS),  # 5
        request("tool-return"),  # 6: the children's outcomes
        response(),  # 7
    ]
    assert positions(ledger, with_message=False) == [0, 1, 7]
    with pytest.raises(InvalidRequest) as refused:
        check_at(uuid.uuid4(), ledger, 5, None)
    assert "collected by the wait of message 5" in refused.value.detail
    assert refused.value.extensions["valid_positions"] == [0, 1, 7]
    # A parent parked on its subtasks (the wait open at the end) forks before the spawn.
    assert positions(ledger[:6], with_message=False) == [0, 1]
    # Spawned and never waited for: nothing of them is the fork's history.
    fire_and_forget = [request("user-prompt"), response(SPAWN_SUBTASK), request("tool-return")]
    assert positions(fire_and_forget, with_message=False) == [0, 1, 3]


def test_the_default_position_is_the_end_and_the_fork_lists_the_calls_copied() -> None:
    ledger = [request("user-prompt"), response("count"), request("tool-return"), response("a")]
    fork = check_at(uuid.uuid4(), ledger, None, None)
    assert (fork.at, fork.ledger, fork.calls) == (4, 4, ("count-0", "a-0"))
