"""MCP's view of a task waiting on tool calls for a person to approve: its status,
status message (with questions asked alongside, a deadline, a pause) and input
requests, and the decisions read from input responses."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from taskservice.domain.errors import InvalidRequest
from taskservice.domain.models import AgentSpec, Task
from taskservice.domain.states import TaskState
from taskservice.mcp import profile_tools
from taskservice.mcp import tasks as mcp_tasks

CALL = {"id": "r0", "tool": "refund", "arguments": {"order": "A-1"}, "note": "Ask Ann."}


def waiting(request: dict[str, Any], paused: dict[str, Any] | None = None) -> Task:
    now = datetime.now(UTC)
    unset = ("result", "error", "parent_id", "context_id", "idempotency_key")
    unset += ("request_hash", "timeout_seconds", "lease_owner", "lease_expires_at")
    return Task(
        id=uuid.UUID(int=1),
        tenant="t",
        state=TaskState.INPUT_REQUIRED,
        input="x",
        agent=AgentSpec(profile="billing", model="m", system_prompt=""),
        metadata={},
        attempt=1,
        max_attempts=3,
        cancel_reason=None,
        input_request=request,
        usage={},
        event_seq=1,
        created_at=now,
        updated_at=now,
        status_at=now,
        started_at=now,
        finished_at=None,
        paused=paused,
        **dict.fromkeys(unset),
    )


def test_calls_and_questions_each_have_an_input_request_until_decided_or_answered() -> None:
    decided = {**CALL, "id": "r1", "decision": {"approved": True}}
    task = waiting(
        {
            "kind": "approvals",
            "approvals": [CALL, decided],
            "questions": [{"id": "q1", "question": "Why?"}, {"id": "q2", "answer": "yes"}],
            "deadline": "2030-01-01T00:00:00+00:00",
            "on_timeout": "fail",
        },
        paused={"by": "open", "reason": "lunch", "scope": "task"},
    )
    shown = mcp_tasks.detailed(task)
    assert shown["status"] == "input_required"
    assert list(shown["inputRequests"]) == ["r0", "q1"]
    meta = shown["inputRequests"]["r0"]["params"]["_meta"]["taskservice/approval"]
    assert (meta["deadline"], meta["on_timeout"]) == ("2030-01-01T00:00:00+00:00", "fail")
    assert shown["statusMessage"].splitlines() == [
        'approve refund {"order": "A-1"}? (call r0) Ask Ann.',
        "Why?",
        "Undecided at 2030-01-01T00:00:00+00:00, the task fails.",
        "(paused: paused by open (lunch); it does not run until it is resumed)",
    ]
    legacy = mcp_tasks.task_2025(task)["statusMessage"].splitlines()
    assert legacy[2] == (
        f'Decide with POST /v1/tasks/{task.id}/input: {{"approvals": {{"r0": {{"approve": '
        'true}}}, or {"approve": false, "reason": "..."} to deny, the questions answered '
        'in the same body ("answers", by id).'
    )
    # Every call decided, a question left: the question alone, and no REST hint.
    rest = waiting(
        {
            "kind": "approvals",
            "approvals": [decided],
            "questions": [{"id": "q1", "question": "Why?"}],
        }
    )
    assert list(mcp_tasks.detailed(rest)["inputRequests"]) == ["q1"]
    assert mcp_tasks.task_2025(rest)["statusMessage"] == "Why?"
    # A plain call that gave up waiting says what the task waits on.
    gave_up = profile_tools.unfinished(task, 60)["content"][0]["text"]
    assert 'needs input before it can finish: approve refund {"order": "A-1"}?' in gave_up
    # On its subtasks: nothing to answer.
    assert mcp_tasks.status(waiting({"kind": "subtasks", "call_id": "w"})) == "working"


@pytest.mark.parametrize(
    ("response", "decision"),
    [
        ({"action": "accept", "content": {"approve": True}}, {"approve": True}),
        (
            {"action": "accept", "content": {"approve": True, "arguments": '{"a": 1}'}},
            {"approve": True, "arguments": {"a": 1}},
        ),
        (  # a form's fields that are not for the choice made are left out
            {"action": "accept", "content": {"approve": True, "reason": "ok", "arguments": ""}},
            {"approve": True},
        ),
        (
            {"action": "accept", "content": {"approve": False, "reason": "no", "arguments": "{}"}},
            {"approve": False, "reason": "no"},
        ),
        (
            {"action": "accept", "content": {"approve": False, "reason": ""}},
            {"approve": False, "reason": None},
        ),
        ({"action": "decline"}, {"approve": False}),
        ({"action": "cancel"}, None),
    ],
)
def test_a_decision_from_an_elicit_result(response: Any, decision: Any) -> None:
    assert mcp_tasks.decision_of("r0", response) == decision


@pytest.mark.parametrize(
    "response",
    [
        None,
        {"content": {"approve": True}},
        {"action": "accept"},
        {"action": "accept", "content": {"approve": "yes"}},
        {"action": "accept", "content": {"approve": True, "arguments": "[1]"}},
        {"action": "accept", "content": {"approve": True, "arguments": "{x"}},
        {"action": "accept", "content": {"approve": True, "arguments": 3}},
        {"action": "accept", "content": {"approve": False, "reason": 3}},
    ],
)
def test_an_input_response_that_is_no_decision_is_refused(response: Any) -> None:
    with pytest.raises(InvalidRequest, match="input response 'r0'"):
        mcp_tasks.decision_of("r0", response)
