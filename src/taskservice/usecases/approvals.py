"""Decisions on the tool calls a task waits on a person's approval of: approve
(optionally with edited arguments, checked against the tool's schema) or deny (with
a reason the model reads as the call's result), all at once or one by one, from
every way a task is answered (`POST /v1/tasks/{id}/input`, A2A and MCP messages, the
console, the command line); and the deadline a profile may set, after which the
undecided calls are denied, or the task fails, as the profile says.

A task waits on approvals in `input_required`, its `input_request` of kind
`approvals`: each call's `id`, `tool`, `arguments`, argument `schema` and the
profile's `note` (and the questions asked in the same model response, which are
answered as ever, with the decisions or apart). A decision is recorded with who
made it, how (`via`) and when; the task runs again once no call is undecided and no
question unanswered (`db/approvals.py`).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import jsonschema

from taskservice.db.approvals import ApprovalStore
from taskservice.db.rows import task_from_row
from taskservice.domain.content import field_json
from taskservice.domain.errors import Conflict, InvalidRequest
from taskservice.domain.models import Task
from taskservice.domain.states import TaskState

Getter = Callable[..., Awaitable[Task]]

_ROUNDS = 8  # a decision re-read and tried again when the task moved under it
REASON_MAX = 2_000
DEADLINE = "deadline"  # who decides when nobody did in time


@dataclass(frozen=True, slots=True)
class Decision:
    """One call's decision as asked: approve (with `arguments` instead of the
    model's, if given) or deny (with a `reason`)."""

    approve: bool
    arguments: dict[str, Any] | None = None
    reason: str | None = None

    @classmethod
    def of(cls, call: str, raw: Any) -> Decision:
        """From JSON (`{"approve": true, "arguments": {…}}`, `{"approve": false,
        "reason": "…"}`, or a bare true/false), or the 422 saying what is wrong."""
        if isinstance(raw, bool):
            return cls(approve=raw)
        if not isinstance(raw, dict) or not isinstance(raw.get("approve"), bool):
            raise InvalidRequest(
                f"the decision on {call} is {{'approve': true|false, 'arguments'?, 'reason'?}}",
                field=f"approvals.{call}",
            )
        arguments, reason = raw.get("arguments"), raw.get("reason")
        if arguments is not None and not isinstance(arguments, dict):
            raise InvalidRequest(
                f"the arguments of {call} are a JSON object", field=f"approvals.{call}.arguments"
            )
        if reason is not None and (not isinstance(reason, str) or len(reason) > REASON_MAX):
            raise InvalidRequest(
                f"the reason for {call} is a text of at most {REASON_MAX} characters",
                field=f"approvals.{call}.reason",
            )
        if raw["approve"] and reason is not None:
            raise InvalidRequest(f"{call}: a reason is for a denial", field=f"approvals.{call}")
        if not raw["approve"] and arguments is not None:
            raise InvalidRequest(
                f"{call}: arguments are for an approval", field=f"approvals.{call}"
            )
        return cls(approve=raw["approve"], arguments=arguments, reason=reason)


def _checked(call: dict[str, Any], arguments: dict[str, Any]) -> None:
    """Edited arguments hold to the tool's schema, or the 422 listing what does not."""
    schema = call.get("schema")
    if not isinstance(schema, dict):
        return
    errors = sorted(
        jsonschema.Draft202012Validator(schema).iter_errors(arguments), key=lambda e: e.path
    )
    if errors:
        said = "; ".join(
            f"{'.'.join(map(str, e.absolute_path)) or '(arguments)'}: {e.message}"
            for e in errors[:5]
        )
        raise InvalidRequest(
            f"the arguments for {call.get('tool')} do not fit its schema: {said}",
            field=f"approvals.{call['id']}.arguments",
            schema=schema,
        )


class ApprovalDesk:
    def __init__(self, *, store: ApprovalStore, get: Getter) -> None:
        self.store = store
        self._get = get  # TaskService.get: the task, or NotFound

    async def decide(
        self,
        *,
        tenant: str,
        task_id: str | uuid.UUID,
        approvals: Mapping[str, Any],
        answers: Mapping[str, str] | None = None,
        by: str | None = None,
        via: str = "rest",
    ) -> Task:
        """Decide on the task's calls (`approvals`: call id → decision) and answer
        its questions (`answers`, all of them, if it asks any); the task as it is
        then (running again once nothing is left to decide or answer)."""
        task = await self._get(tenant=tenant, task_id=task_id)
        return await self.decide_on(task, approvals=approvals, answers=answers, by=by, via=via)

    async def decide_on(
        self,
        task: Task,
        *,
        approvals: Mapping[str, Any],
        answers: Mapping[str, str] | None = None,
        by: str | None = None,
        via: str = "rest",
        fails: bool = False,
    ) -> Task:
        """`decide` on a task the caller has just read. `fails`: the denials end the
        run, which fails the task with `approval_timeout` (a deadline's, when its
        profile says so: the task leaves `input_required` for `running`, as the
        state machine has it, and its run fails at once)."""
        decisions = {call: Decision.of(call, raw) for call, raw in approvals.items()}
        if answers is not None:
            field_json("answers", dict(answers))
        for _ in range(_ROUNDS):
            if await self._decide(task, decisions, answers, by=by, via=via, fails=fails):
                return await self._get(tenant=task.tenant, task_id=task.id)
            task = await self._get(tenant=task.tenant, task_id=task.id)  # it moved meanwhile
        raise Conflict("the task kept changing; retry the decision")

    async def _decide(
        self,
        task: Task,
        decisions: Mapping[str, Decision],
        answers: Mapping[str, str] | None,
        *,
        by: str | None,
        via: str,
        fails: bool = False,
    ) -> bool:
        if task.state is not TaskState.INPUT_REQUIRED or not task.approvals:
            raise Conflict(
                f"task is {task.state.value}, not waiting for a tool call's approval",
                state=task.state.value,
            )
        calls = {call["id"]: call for call in task.approvals}
        undecided = [call for call, entry in calls.items() if "decision" not in entry]
        unknown = sorted(set(decisions) - set(calls))
        if unknown:
            raise InvalidRequest(
                f"no call {', '.join(unknown)} waits for approval; undecided: "
                f"{', '.join(undecided) or 'none'}",
                field="approvals",
                undecided=undecided,
            )
        again = sorted(set(decisions) - set(undecided))
        if again:
            raise Conflict(f"already decided: {', '.join(again)}", decided=again)
        questions = {q["id"]: q for q in task.questions}
        if answers is not None and set(answers) != {
            q for q, entry in questions.items() if "answer" not in entry
        }:
            raise InvalidRequest(
                "answers must answer exactly the questions asked", questions=sorted(questions)
            )
        now = datetime.now(UTC).isoformat()
        made: dict[str, dict[str, Any]] = {}
        events: list[dict[str, Any]] = []
        for call, decision in decisions.items():
            entry = calls[call]
            if decision.arguments is not None:
                _checked(entry, decision.arguments)
            record: dict[str, Any] = {"approved": decision.approve, "by": by, "via": via, "at": now}
            if decision.approve:
                edited = decision.arguments is not None and decision.arguments != entry["arguments"]
                record["arguments"] = decision.arguments if edited else entry["arguments"]
                record["edited"] = edited
            else:
                record["reason"] = decision.reason
                if fails:
                    record["fails"] = True
            made[call] = record
            events.append(
                {
                    "type": "approval",
                    "data": {"tool_call_id": call, "tool": entry["tool"], **record},
                }
            )
        request = dict(task.input_request)
        request["approvals"] = [
            {**entry, "decision": made[entry["id"]]} if entry["id"] in made else entry
            for entry in task.approvals
        ]
        if answers:
            request["questions"] = [
                {**q, "answer": answers[q["id"]]} if q["id"] in answers else q
                for q in questions.values()
            ]
        left = [call for call in undecided if call not in made]
        unanswered = [q["id"] for q in request.get("questions", []) if "answer" not in q]
        if left or unanswered:
            wake = task.wake_at if left else None  # the deadline is the approvals'
            return await self.store.note(task, request=request, events=events, wake_at=wake)
        every = {entry["id"]: entry["decision"] for entry in request["approvals"]}
        given = {q["id"]: q["answer"] for q in request.get("questions", [])}
        change: dict[str, Any] = {"from": "input_required", "to": "running"}
        change["decided"] = sorted(every)
        if given:
            change["answered"] = sorted(given)
        events.append({"type": "state_change", "data": change})
        return await self.store.resume(task, decisions=every, answers=given, events=events)

    async def expire(self, *, limit: int = 20) -> int:
        """Apply the deadline to waiting tasks past it: their undecided calls are
        denied (the run goes on), or the task fails with `approval_timeout`, as their
        profile said when they began to wait. How many were handled."""
        handled = 0
        for row in await self.store.due(limit=limit):
            task = task_from_row(row)
            request = task.input_request if isinstance(task.input_request, dict) else {}
            undecided = [a["id"] for a in task.approvals if "decision" not in a]
            if not undecided:
                continue
            denied = {"approve": False, "reason": "nobody decided before the deadline"}
            try:
                await self.decide_on(
                    task,
                    approvals=dict.fromkeys(undecided, denied),
                    by=DEADLINE,
                    via=DEADLINE,
                    fails=request.get("on_timeout") == "fail",
                )
            except (Conflict, InvalidRequest):
                continue  # decided, cancelled or answered meanwhile
            handled += 1
        return handled
