"""A run's step ledger: persists each complete message, tool call and step event as
the agent makes progress, and rebuilds the conversation to resume a run.

Resuming (after input arrived, or after a worker died) continues the persisted
conversation. Tool calls the last model response asked for are settled from the
ledger: a completed call returns its recorded result (never executed again), a call
that was in progress when its worker died is marked failed as "interrupted" and
reported to the model as such, an answered question returns its answer, and a
call that never started runs now.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic_ai.exceptions import ToolFailed
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelResponse,
    RetryPromptPart,
    ToolCallPart,
    ToolReturn,
    ToolReturnPart,
)
from pydantic_ai.tools import DeferredToolResults

from taskservice.db.sql import Row
from taskservice.db.steps import LedgerStore
from taskservice.models import Lease, Task
from taskservice.service import TaskService
from taskservice.states import TaskState
from taskservice.tools import ASK_USER, LogLevel, RunHooks

log = logging.getLogger(__name__)

INTERRUPTED = "interrupted: the worker running this tool call stopped before it reported back"
_PREVIEW_CHARS = 500
# A task's event_seq when its first claim has just written `running`: 1 `pending`, 2
# `running`.
_FIRST_CLAIM_SEQ = 2


def _complete_turns(new: list[ModelMessage]) -> list[ModelMessage]:
    """`new` without its trailing requests, and without a trailing turn whose
    response calls no tool."""
    end = len(new)
    while end and not isinstance(new[end - 1], ModelResponse):
        end -= 1
    last = new[end - 1] if end else None
    if isinstance(last, ModelResponse) and not any(
        isinstance(part, ToolCallPart) for part in last.parts
    ):
        end -= 1
        while end and not isinstance(new[end - 1], ModelResponse):
            end -= 1
    return new[:end]


def _merge(
    staged: dict[str, list[dict[str, Any]]] | None, rows: dict[str, list[dict[str, Any]]]
) -> dict[str, list[dict[str, Any]]]:
    if staged is None:
        return rows
    return {key: staged[key] + rows[key] for key in rows}


# How a released task was given back (`released` events' `reason`).
_RELEASED_BECAUSE = {
    "shutdown": "it was shutting down",
    "outcome_unwritten": "it could not record the outcome",
}


def _resumed(attempt: int, cause: Row | None, messages: int) -> tuple[LogLevel, str]:
    """The `log` line of a resumed attempt: from what, and why (`cause`: the event
    that gave the task back before this claim)."""
    line = (
        f"attempt {attempt} resumes the run from {messages} recorded messages"
        if messages
        else f"attempt {attempt} starts the run over (nothing was recorded)"
    )
    data: dict[str, Any] = cause["data"] if cause is not None else {}
    kind = cause["type"] if cause is not None else None
    if kind == "recovered":  # the reaper's line said so when it happened
        return "info", (
            f"{line}: the lease of worker {data.get('worker')} on attempt "
            f"{data.get('attempt')} had expired"
        )
    if kind == "released":
        reason = str(data.get("reason"))
        because = _RELEASED_BECAUSE.get(reason, reason)
        return "info", (
            f"{line}: worker {data.get('worker')} gave it back on attempt "
            f"{data.get('attempt')} ({because})"
        )
    if data.get("cause") == "subtasks_finished":
        return "info", f"{line}: its subtasks finished"
    if "answered" in data:
        return "info", f"{line}: its input arrived"
    return "info", line


class LeaseLost(Exception):
    """The task is no longer this worker's: stop the run and write nothing more."""


def _preview(value: Any) -> Any:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= _PREVIEW_CHARS else text[:_PREVIEW_CHARS] + "…"


def _summary(message: ModelMessage) -> list[dict[str, Any]]:
    parts = []
    for part in message.parts:
        entry: dict[str, Any] = {"kind": part.part_kind}
        if isinstance(part, ToolCallPart | ToolReturnPart | RetryPromptPart):
            entry["tool"] = part.tool_name
        content = getattr(part, "content", None)
        if content is not None:
            entry["content"] = _preview(content)
        parts.append(entry)
    return parts


def open_tool_calls(history: list[ModelMessage]) -> list[ToolCallPart]:
    """Calls in the last model response that no later message answers."""
    for index in range(len(history) - 1, -1, -1):
        message = history[index]
        if isinstance(message, ModelResponse):
            answered = {
                part.tool_call_id
                for later in history[index + 1 :]
                for part in later.parts
                if isinstance(part, ToolReturnPart | RetryPromptPart)
            }
            return [
                part
                for part in message.parts
                if isinstance(part, ToolCallPart) and part.tool_call_id not in answered
            ]
    return []


class RunLedger(RunHooks):
    """The worker's adapter of the `RunHooks` port (`tools.RunHooks`, what tools call):
    one run's ledger, written through fenced statements."""

    def __init__(self, store: LedgerStore, service: TaskService, task: Task, lease: Lease) -> None:
        self.store = store
        self.service = service  # subtasks are created as any task is
        self.task = task
        self.lease = lease
        self.position = 0  # of the next message to persist
        self.base_usage = {k: int(v) for k, v in (task.usage or {}).items()}
        self.usage = dict(self.base_usage)
        # The last rows of the run, written with its outcome (`finish`).
        self.staged: dict[str, list[dict[str, Any]]] | None = None

    def _check(self, written: bool) -> None:
        if not written:
            raise LeaseLost(str(self.task.id))

    # -- resume -----------------------------------------------------------------

    async def resume_state(self) -> tuple[list[ModelMessage], DeferredToolResults | None]:
        """The conversation to go on from, and the settled results of the tool calls
        its last response asked for; says in `log` lines why and how it resumes."""
        if self.task.attempt == 1 and self.task.event_seq == _FIRST_CLAIM_SEQ:
            # Its only events are its creation and this claim: no run has written a
            # message, a tool call or anything else to resume from. (Every such
            # write adds an event, so this never skips a history that exists.)
            return [], None
        rows = await self.store.all_messages(self.task.id)
        history = ModelMessagesTypeAdapter.validate_python([row["message"] for row in rows])
        self.position = len(history)
        cause = await self.store.resume_cause(self.task.id, claim_seq=self.task.event_seq)
        lines = [_resumed(self.task.attempt, cause, len(history))]
        pending = open_tool_calls(history)
        calls = await self.store.all_calls(self.task.id) if pending else {}
        results: dict[str, Any] = {}
        interrupted: list[ToolCallPart] = []
        for part in pending:
            row = calls.get(part.tool_call_id)
            status = row["status"] if row is not None else "pending"
            if row is not None and status == "completed":
                results[part.tool_call_id] = ToolReturn(row["result"])
                if part.tool_name == ASK_USER:
                    question = part.args_as_dict().get("question")
                    lines.append(("info", f"answer delivered for {question!r}: {row['result']}"))
            elif status == "in_progress":
                interrupted.append(part)
                results[part.tool_call_id] = ToolFailed(INTERRUPTED)
                lines.append(
                    (
                        "warning",
                        f"tool call {part.tool_name} ({part.tool_call_id}) was interrupted; "
                        "the model is told it failed",
                    )
                )
            elif row is not None and status == "failed":
                results[part.tool_call_id] = ToolFailed(row["error"] or "failed")
            # pending: it never started, so this run executes it
        await self._write([self.store.log_event(level, message) for level, message in lines])
        for part in interrupted:
            await self._call(
                part.tool_call_id, part.tool_name, part.args, "failed", error=INTERRUPTED
            )
        return history, DeferredToolResults(calls=results) if results else None

    # -- progress ---------------------------------------------------------------

    async def sync(
        self, messages: list[ModelMessage], run_usage: Any, *, final: bool = False
    ) -> None:
        """Persist the complete messages not yet in the ledger, in one statement.

        A request is written together with the response that answers it (one write
        per model turn, not two), so until `final` a trailing request waits; so does
        a trailing response that calls no tool (an answer: the run is about to end,
        or to ask again). `final` writes nothing: what is left is staged for
        `finish`, which writes it with the run's outcome in one statement. Nothing is
        lost if the run stops in between: a resumed run rebuilds the request from
        what the ledger has (the prompt, or the recorded results of the tool calls
        the last response asked for) and asks the model again.
        """
        self.usage = {
            "input_tokens": self.base_usage.get("input_tokens", 0)
            + int(run_usage.input_tokens or 0),
            "output_tokens": self.base_usage.get("output_tokens", 0)
            + int(run_usage.output_tokens or 0),
            "requests": self.base_usage.get("requests", 0) + int(run_usage.requests or 0),
        }
        new = messages[self.position :]
        if not final:
            new = _complete_turns(new)
        if not new:
            return
        rows = self._rows(new)
        self.position += len(new)
        if final:
            self.staged = _merge(self.staged, rows)
            return
        self._check(
            await self.store.append_messages(
                self.task.id, lease=self.lease, usage=self.usage, **rows
            )
        )

    def _rows(self, new: list[ModelMessage]) -> dict[str, list[dict[str, Any]]]:
        """The ledger rows of `new` (messages, their tool calls, their events)."""
        encoded = ModelMessagesTypeAdapter.dump_python(new, mode="json")
        rows: list[dict[str, Any]] = []
        events: list[dict[str, Any]] = []
        calls: list[dict[str, Any]] = []
        for position, (message, body) in enumerate(zip(new, encoded, strict=True), self.position):
            rows.append({"position": position, "kind": message.kind, "message": body})
            summary = {"position": position, "kind": message.kind, "parts": _summary(message)}
            events.append({"type": "message", "data": summary})
            if isinstance(message, ModelResponse):
                events.append({"type": "usage", "data": dict(self.usage)})
                calls += [
                    {
                        "id": part.tool_call_id,
                        "name": part.tool_name,
                        "arguments": part.args_as_dict(),
                    }
                    for part in message.parts
                    if isinstance(part, ToolCallPart)
                ]
        return {"messages": rows, "calls": calls, "events": events}

    async def finish(self, target: TaskState, values: dict[str, Any]) -> bool:
        """Write the run's outcome (`running` → `target`, with `values`) together
        with what `sync(final=True)` staged. False: the task is no longer ours and
        nothing was written."""
        staged = self.staged or {"messages": [], "calls": [], "events": []}
        written = await self.store.finish(
            self.task.id, lease=self.lease, target=target, values=values, **staged
        )
        self.staged = None  # only now: a failed write is retried with the same rows
        return written

    async def _call(
        self,
        call_id: str,
        name: str,
        arguments: Any,
        status: str,
        *,
        result: Any = None,
        error: str | None = None,
    ) -> None:
        kind = "tool_result" if status in ("completed", "failed") else "tool_call"
        data: dict[str, Any] = {"tool_call_id": call_id, "name": name, "status": status}
        if kind == "tool_call":
            data["arguments"] = arguments
        elif error is not None:
            data["error"] = error
        else:
            data["result"] = _preview(result)
        self._check(
            await self.store.update_call(
                self.task.id,
                lease=self.lease,
                call_id=call_id,
                name=name,
                arguments=arguments,
                status=status,
                result=result,
                error=error,
                event={"type": kind, "data": data},
            )
        )

    # -- RunHooks ---------------------------------------------------------------

    async def tool_started(self, call_id: str, name: str, arguments: Any) -> None:
        await self._call(call_id, name, arguments, "in_progress")

    async def tool_finished(
        self,
        call_id: str,
        name: str,
        arguments: Any,
        *,
        result: Any = None,
        error: str | None = None,
    ) -> None:
        status = "failed" if error is not None else "completed"
        await self._call(call_id, name, arguments, status, result=result, error=error)

    async def tool_deferred(self, call_id: str, name: str, arguments: Any) -> None:
        await self._call(call_id, name, arguments, "pending")

    async def spawn(self, call_id: str, input: str, system_prompt: str | None) -> str:
        child = await self.service.spawn(
            self.task, call_id=call_id, input=input, system_prompt=system_prompt
        )
        await self.log("info", f"spawned subtask {child.id}")
        return str(child.id)

    async def subtasks(self) -> list[dict[str, Any]] | None:
        rows = await self.store.children(self.task.id)
        if any(not TaskState(row["state"]).is_terminal for row in rows):
            return None
        return [
            {"id": str(r["id"]), "state": r["state"], "result": r["result"], "error": r["error"]}
            for r in rows
        ]

    async def progress(self, percent: float, note: str) -> None:
        await self._write([{"type": "progress", "data": {"percent": percent, "note": note}}])

    async def log(self, level: LogLevel, message: str) -> None:
        await self._write([self.store.log_event(level, message)])

    def stage_log(self, level: LogLevel, message: str) -> None:
        """A `log` line written with the run's outcome (`finish`)."""
        self.staged = _merge(
            self.staged,
            {"messages": [], "calls": [], "events": [self.store.log_event(level, message)]},
        )

    async def _write(self, events: list[dict[str, Any]]) -> None:
        self._check(await self.store.append_events(self.task.id, lease=self.lease, events=events))
