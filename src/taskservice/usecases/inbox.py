"""Messages to a task that exists: the answer to the question it waits on, or a
follow-up for its run.

```
input_required, asking questions   → the answers; the same conversation resumes
input_required, on approvals       → decisions (`usecases/approvals.py`): a JSON
                                        object, `{"approve": …}` or `{"approvals": …}`,
                                        or, for one call, `approve` / `deny: why`
pending, running, parked on subtasks → queued (`db/followups`); the run reads it at
                                        its next model request, as a user message
completed, failed, cancelled         → refused (409): a finished task takes no more
```

A follow-up is in the ledger before its 2xx: a worker that dies before its run
read it leaves it queued, and the run that resumes reads it. A run completes only
once it has read every follow-up queued (the outcome's statement checks), so a
message accepted a moment before the answer is not left unread: the run goes on.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any

from taskservice.db.approvals import ApprovalStore
from taskservice.db.followups import FollowupStore, KeyTaken
from taskservice.db.tasks import TaskStore
from taskservice.domain.content import as_text, check_message, field_json
from taskservice.domain.errors import Conflict, InvalidRequest
from taskservice.domain.models import Followup, Task
from taskservice.domain.states import TaskState
from taskservice.settings import Settings
from taskservice.usecases.approvals import ApprovalDesk, Getter

_PREVIEW_CHARS = 500
# A message re-reads and retries when the task moved under it (it began waiting for
# input, or finished): a handful of rounds always settles.
_SEND_ROUNDS = 4


@dataclass(frozen=True, slots=True)
class Sent:
    """Where a message went: `followup` is None when it answered the task's question;
    `replayed`: the sender's key had queued this message before."""

    task: Task
    followup: Followup | None
    replayed: bool = False


def _asks(task: Task) -> list[str] | None:
    """The ids of the questions a task waits on (None: it waits on none)."""
    return [question["id"] for question in task.questions] or None


_YES = frozenset({"approve", "approved", "yes", "y", "ok", "okay"})
_NO = re.compile(r"(?:deny|denied|no|reject|rejected)\b[\s:,.;-]*(.*)", re.IGNORECASE | re.DOTALL)


def said_decision(input: Any) -> dict[str, Any] | None:
    """A decision in words: `approve` or `yes` approves; `deny` or `no`, then a
    reason if any, denies. None: the text is not one."""
    if not isinstance(input, str):
        return None
    text = input.strip()
    if text.lower().rstrip(".!") in _YES:
        return {"approve": True}
    denied = _NO.fullmatch(text)
    if denied is None:
        return None
    reason = denied.group(1).strip()
    return {"approve": False, "reason": reason} if reason else {"approve": False}


def preview(input: Any) -> str:
    """A message as its `followup` event shows it."""
    text = as_text(input)
    return text if len(text) <= _PREVIEW_CHARS else text[:_PREVIEW_CHARS] + "…"


class TaskInbox:
    def __init__(
        self, *, store: TaskStore, followups: FollowupStore, settings: Settings, get: Getter
    ) -> None:
        self.store = store
        self.followups = followups
        self.settings = settings
        self._get = get  # TaskService.get: the task, or NotFound
        # Decisions on the tool calls a task waits on a person's approval of.
        self.approvals = ApprovalDesk(store=ApprovalStore(store.db), get=get)

    async def send(
        self,
        *,
        tenant: str,
        task_id: str | uuid.UUID,
        input: Any,
        key: str | None = None,
        by: str | None = None,
    ) -> Sent:
        """A message to the task: the answer to its one question, a decision on its
        tool calls, or a follow-up for its run (the table above). `key` makes a
        retried follow-up find the first; `by`: who sends it (a decision records it)."""
        check_message(input, self.settings)
        task = await self._get(tenant=tenant, task_id=task_id)
        return await self.send_to(task, input=input, key=key, checked=True, by=by)

    async def send_to(
        self,
        task: Task,
        *,
        input: Any,
        key: str | None = None,
        checked: bool = False,
        via: str = "rest",
        by: str | None = None,
    ) -> Sent:
        """`send` to a task the caller has just read (`via`: which transport, and
        `by`: who, which a decision on a tool call records)."""
        if not checked:
            check_message(input, self.settings)
        if task.approvals:
            return Sent(await self._decide(task, input, via=via, by=by), None)
        tenant = task.tenant
        if key is not None:
            sent = await self.followups.by_key(task.id, key)
            if sent is not None:
                return self._replay(task, sent, input)
        for _ in range(_SEND_ROUNDS):
            asked = _asks(task)
            if asked is not None:
                if len(asked) != 1:
                    raise Conflict(
                        f"the task asks {len(asked)} questions: answer them by id "
                        f"(POST /v1/tasks/{task.id}/input)",
                        state=task.state.value,
                        questions=asked,
                    )
                return Sent(await self._answer(task, answers=None, answer=as_text(input)), None)
            if task.state.is_terminal:
                raise Conflict(
                    f"task is {task.state.value}: it takes no more messages",
                    state=task.state.value,
                )
            try:
                queued = await self.followups.queue(
                    task.id, tenant=tenant, input=input, key=key, preview=preview(input)
                )
            except KeyTaken as taken:  # the same key, sent at the same time
                return self._replay(task, taken.sent, input)
            if queued is not None:
                return Sent(*queued)
            task = await self._get(tenant=tenant, task_id=task.id)  # it moved meanwhile
        raise Conflict("the task kept changing state; retry the message")

    async def _decide(self, task: Task, input: Any, *, via: str, by: str | None) -> Task:
        """A message to a task waiting on approvals: the decisions it carries, as a
        JSON object: `{"approvals": {call id: decision}}`, or one decision
        (`{"approve": true|false, …}`) on the one undecided call, or, on that call, the
        words a person answers with (`approve`, `yes`; `deny`, `no`, and a reason)."""
        undecided = [a["id"] for a in task.approvals if "decision" not in a]
        said = said_decision(input) if len(undecided) == 1 else None
        if said is not None:
            input = said
        if isinstance(input, dict) and isinstance(input.get("approvals"), dict):
            decisions = input["approvals"]
            return await self.approvals.decide_on(task, approvals=decisions, via=via, by=by)
        if isinstance(input, dict) and "approve" in input and len(undecided) == 1:
            one = {undecided[0]: input}
            return await self.approvals.decide_on(task, approvals=one, via=via, by=by)
        raise Conflict(
            f"the task waits for a decision on {len(undecided)} tool call(s): send "
            '{"approve": true|false} for one, or {"approvals": {<call id>: {"approve": …}}}',
            state=task.state.value,
            undecided=undecided,
        )

    def _replay(self, task: Task, sent: Followup, input: Any) -> Sent:
        if field_json("input", sent.input) != field_json("input", input):
            raise Conflict(
                "this key was already used with a different message",
                task_id=str(task.id),
                seq=sent.seq,
            )
        return Sent(task, sent, replayed=True)

    async def answer(
        self,
        *,
        tenant: str,
        task_id: str | uuid.UUID,
        answers: dict[str, str] | None = None,
        answer: str | None = None,
    ) -> Task:
        """Answer the questions of a task in `input_required`; the same conversation
        resumes with the answers. `answer` alone answers a single question."""
        task = await self._get(tenant=tenant, task_id=task_id)
        return await self._answer(task, answers=answers, answer=answer)

    async def _answer(
        self, task: Task, *, answers: dict[str, str] | None, answer: str | None
    ) -> Task:
        if task.state is not TaskState.INPUT_REQUIRED:
            raise Conflict(
                f"task is {task.state.value}, not waiting for input", state=task.state.value
            )
        if task.approvals:  # questions asked with calls to approve: answered with them
            asked_with = [q["id"] for q in task.questions if "answer" not in q]
            if answer is not None and len(asked_with) == 1:
                answers = {asked_with[0]: answer}
            return await self.approvals.decide_on(task, approvals={}, answers=answers)
        asked = _asks(task)
        if asked is None:
            raise Conflict("task waits for its subtasks, not for input", state=task.state.value)
        if (answers is None) == (answer is None):
            raise InvalidRequest("give either `answers` (by question id) or `answer`")
        if answer is not None:
            if len(asked) != 1:
                raise InvalidRequest(
                    f"the task asks {len(asked)} questions: give `answers` by id",
                    questions=asked,
                )
            answers = {asked[0]: answer}
        assert answers is not None
        if set(answers) != set(asked):
            raise InvalidRequest("answers must answer exactly the questions asked", questions=asked)
        field_json("answers", answers)
        answered = await self.store.provide_input(task.id, tenant=task.tenant, answers=answers)
        if answered is None:  # it moved on meanwhile (cancelled, answered by someone else)
            current = await self._get(tenant=task.tenant, task_id=task.id)
            raise Conflict(
                f"task is {current.state.value}, not waiting for input",
                state=current.state.value,
            )
        return answered

    async def live(self, *, tenant: str, context_id: str | None) -> list[Task]:
        """Tasks in a context (or in none) that a message can reach: waiting for the
        answer to one question, or taking follow-ups."""
        return await self.store.live_in_context(tenant=tenant, context_id=context_id)

    async def after(self, task_id: uuid.UUID, seq: int) -> list[Followup]:
        """The task's follow-ups numbered above `seq`, in order: what its run is
        handed next (`worker/ledger.RunLedger.deliver`)."""
        return await self.followups.after(task_id, seq)

    async def unread(self, task: Task) -> list[Followup]:
        """The follow-ups queued for `task` that no run has read yet."""
        return await self.followups.after(task.id, task.followups_read) if task.unread else []
