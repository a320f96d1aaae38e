"""Resuming a run (after input arrived, or after a worker died): the `log` line that
says from what and why it resumes (`resumed`), and how the tool calls the last
model response asked for are settled from the ledger (`settled`): a completed call
returns its recorded result (never executed again), a call that was in progress
when its worker died is failed as "interrupted" and reported to the model as such,
an answered question returns its answer, and a call that never started runs now.
`worker.ledger.RunLedger.resume_state` reads the ledger and writes what these say.
"""

from __future__ import annotations

from typing import Any

from pydantic_ai.exceptions import ToolFailed
from pydantic_ai.messages import ToolCallPart, ToolReturn
from pydantic_ai.tools import ToolApproved, ToolDenied

from taskservice.agents.tools import ASK_AGENT, ASK_USER, LogLevel, asked_outcome
from taskservice.db.approvals import denial
from taskservice.db.sql import Row

INTERRUPTED = "interrupted: the worker running this tool call stopped before it reported back"

# How a released task was given back (`released` events' `reason`).
_RELEASED_BECAUSE = {
    "shutdown": "it was shutting down",
    "outcome_unwritten": "it could not record the outcome",
    "ledger_unwritten": "it could not record the run's progress",
    "paused": "the task was paused",
}


def resumed(
    attempt: int, cause: Row | None, messages: int, *, forked_from: Any = None
) -> tuple[LogLevel, str]:
    """The `log` line of a resumed attempt: from what, and why (`cause`: the event
    that gave the task back before this claim; `forked_from`: the task a fork's
    ledger was copied from)."""
    kind = cause["type"] if cause is not None else None
    data: dict[str, Any] = cause["data"] if cause is not None else {}
    if forked_from is not None and kind == "state_change" and data.get("to") == "pending":
        # The fork's first run: nothing gave it back since it was created.
        if not messages:
            return "info", f"attempt {attempt} starts the fork's run from its input"
        return "info", (
            f"attempt {attempt} continues the run from the {messages} messages copied from "
            f"task {forked_from}"
        )
    line = (
        f"attempt {attempt} resumes the run from {messages} recorded messages"
        if messages
        else f"attempt {attempt} starts the run over (nothing was recorded)"
    )
    if kind == "recovered":  # the reaper's line said so when it happened
        return "info", (
            f"{line}: the lease of worker {data.get('worker')} on attempt "
            f"{data.get('attempt')} had expired"
        )
    if kind == "released" and data.get("reason") == "paused":
        return "info", (
            f"{line} after a pause: worker {data.get('worker')} gave it back on attempt "
            f"{data.get('attempt')} when the task was paused, and it was resumed"
        )
    if kind == "released":
        reason = str(data.get("reason"))
        because = _RELEASED_BECAUSE.get(reason, reason)
        return "info", (
            f"{line}: worker {data.get('worker')} gave it back on attempt "
            f"{data.get('attempt')} ({because})"
        )
    if kind == "throttled":
        return "info", f"{line}: its model request's rate limit slot has come"
    if data.get("cause") == "subtasks_finished":
        return "info", f"{line}: its subtasks finished"
    if "decided" in data:
        return "info", f"{line}: its tool calls were decided"
    if "answered" in data:
        return "info", f"{line}: its input arrived"
    return "info", line


class ApprovalTimedOut(Exception):
    """Nobody decided on these calls before their deadline, and their profile fails
    the task then: the run ends before it begins."""

    def __init__(self, tools: list[str]) -> None:
        super().__init__(
            f"nobody decided on the {', '.join(tools)} call(s) before the approval deadline"
        )


def decided(approval: dict[str, Any]) -> ToolApproved | ToolDenied:
    """A person's decision on a call that waited for it, as the run is handed it: an
    approved call is made (with the arguments they edited, if they did); a denied
    one returns its reason to the model."""
    if approval.get("approved"):
        edited = approval.get("arguments") if approval.get("edited") else None
        return ToolApproved(override_args=edited)
    return ToolDenied(denial(approval) or "denied")


def settled(
    pending: list[ToolCallPart], calls: dict[str, Row]
) -> tuple[dict[str, Any], dict[str, Any], list[ToolCallPart], list[tuple[LogLevel, str]]]:
    """The tool calls the last response asked for (`pending`), settled from the
    ledger's rows of them (`calls`): the results to hand the run, the decisions on
    the calls that waited for approval (and are not made yet), the calls that were
    interrupted (to be marked failed), and the `log` lines saying so."""
    said: list[tuple[LogLevel, str]] = []
    results: dict[str, Any] = {}
    approvals: dict[str, Any] = {}
    interrupted: list[ToolCallPart] = []
    # Denials that end the run (a deadline's, on a profile that fails the task).
    fails = [
        part.tool_name
        for part in pending
        if (row := calls.get(part.tool_call_id)) is not None
        and (row["approval"] or {}).get("fails")
    ]
    if fails:
        raise ApprovalTimedOut(fails)
    for part in pending:
        row = calls.get(part.tool_call_id)
        status = row["status"] if row is not None else "pending"
        approval = row["approval"] if row is not None else None
        if approval is not None and (status == "pending" or not approval.get("approved")):
            # Decided, and not made yet (or denied): the decision goes to the run,
            # which makes an approved call now, once.
            approvals[part.tool_call_id] = decided(approval)
            verb = "approved" if approval.get("approved") else "denied"
            said.append(("info", f"tool call {part.tool_name} ({part.tool_call_id}) was {verb}"))
        elif row is not None and status == "completed":
            result = row["result"]
            if part.tool_name == ASK_AGENT and isinstance(result, list):
                # Completed with every subtask's outcome: it answers with its own.
                result = asked_outcome(result, call=part.tool_call_id)
            results[part.tool_call_id] = ToolReturn(result)
            if part.tool_name == ASK_USER:
                question = part.args_as_dict().get("question")
                said.append(("info", f"answer delivered for {question!r}: {row['result']}"))
        elif status == "in_progress":
            interrupted.append(part)
            results[part.tool_call_id] = ToolFailed(INTERRUPTED)
            said.append(
                (
                    "warning",
                    f"tool call {part.tool_name} ({part.tool_call_id}) was interrupted; "
                    "the model is told it failed",
                )
            )
        elif row is not None and status == "failed":
            results[part.tool_call_id] = ToolFailed(row["error"] or "failed")
        # pending: it never started, so this run executes it
    return results, approvals, interrupted, said
