"""Bodies of the REST API's messages to tasks: answers to a task's questions, a
follow-up for a task's run, and free text routed to a task."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, Field

from taskservice.api.schemas import NonEmptyText, Request
from taskservice.domain.models import Followup
from taskservice.domain.views import TaskOut


class Decision(Request):
    approve: bool = Field(description="Make the call (true) or not (false).")
    arguments: dict[str, Any] | None = Field(
        default=None,
        description="Approving: the arguments to make the call with instead of the model's "
        "(checked against the tool's `schema` in the request: a 422 otherwise).",
    )
    reason: str | None = Field(
        default=None,
        max_length=2_000,
        description="Denying: why; the model reads it as the call's result.",
    )


class InputGiven(Request):
    answers: dict[str, Annotated[str, Field(max_length=65_536)]] | None = Field(
        default=None, description="Answers by question id (see the task's `input_request`)."
    )
    answer: str | None = Field(
        default=None, max_length=65_536, description="The answer, when one question is asked."
    )
    approvals: dict[str, Decision] | None = Field(
        default=None,
        description="Decisions by tool call id on the calls the task waits on a person's "
        "approval of (`input_request.kind` `approvals`): all of them, or some now and the "
        "rest later; the task runs again once none is undecided.",
        examples=[{"call_1": {"approve": True}, "call_2": {"approve": False, "reason": "no"}}],
    )


class MessageIn(Request):
    text: str = Field(
        min_length=1,
        max_length=65_536,
        description="Free text; a leading `@<task id>` sends it to that task.",
    )
    context_id: str | None = Field(default=None, min_length=1, max_length=200)


class FollowupIn(Request):
    input: NonEmptyText | dict[str, Any] = Field(
        description="The message: text, or a JSON object (given to the agent as JSON). "
        "It answers the task's question if it waits for one; else its run reads it at "
        "its next model request.",
        examples=["Also list the open questions, please."],
    )


class FollowupOut(BaseModel):
    seq: int = Field(description="1, 2, … per task, in the order the task received them.")
    input: Any
    created_at: datetime

    @classmethod
    def of(cls, followup: Followup) -> Self:
        return cls(seq=followup.seq, input=followup.input, created_at=followup.created_at)


Delivery = Literal["answer", "followup", "new_task"]


class MessageSent(BaseModel):
    task: TaskOut
    delivery: Delivery = Field(
        description="`answer`: it answered the task's question, and the task runs again; "
        "`followup`: it is queued for the task's run, which reads it at its next model "
        "request; `new_task`: it started a new task."
    )
    followup: FollowupOut | None = Field(default=None, description="When queued: which one.")

    @classmethod
    def of(cls, task: TaskOut, followup: Followup | None, *, new: bool = False) -> Self:
        delivery: Delivery = "new_task" if new else "followup" if followup else "answer"
        return cls(task=task, delivery=delivery, followup=followup and FollowupOut.of(followup))


class RoutedOut(MessageSent):
    decision: str = Field(description="explicit, single, model or new.")
    confidence: float
    reason: str
