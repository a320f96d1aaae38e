"""What the handler answers with, whatever the protocol version writes it as: a task
seen with its history (`View`), a change a stream tells (`TaskUpdate`); and how a
version's parameters are read (`params`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from taskservice.a2a.conversation import Message, Part, context, parts_of
from taskservice.a2a.errors import A2AError, Kind
from taskservice.domain.models import Task
from taskservice.domain.states import TaskState

# historyLength: absent = all the history, 0 = none, N = the last N messages.
HistoryLength = Annotated[int | None, Field(ge=0, le=2**31 - 1)]


@dataclass(frozen=True, slots=True)
class View:
    """A task as an answer shows it: with the part of its history asked for."""

    task: Task
    history: list[Message]


@dataclass(frozen=True, slots=True)
class TaskUpdate:
    """A change of a followed task: the state it moved to (`task` as read after the
    change), or, with `artifact`, its result just before it is `completed`."""

    task: Task
    state: TaskState
    artifact: bool = False


@dataclass(frozen=True, slots=True)
class ArtifactChunk:
    """A piece of the answer as the model writes it (live output of the task's
    result artifact): `append` adds it to the chunks before it; a chunk that does not
    append starts the artifact over (a new model response, or a new attempt). The
    complete result follows, not appended, as the last chunk, before `completed`."""

    task: Task
    text: str
    append: bool


Update = View | TaskUpdate | ArtifactChunk


def ends_stream(state: TaskState) -> bool:
    """The states that end a message stream: terminal, or waiting for the client."""
    return state.is_terminal or state is TaskState.INPUT_REQUIRED


def _approval_parts(task: Task) -> list[Part]:
    """What a task waiting on approvals says: each undecided call in words, then as
    data (`kind: approval`: the calls, their arguments, the profile's note, and how
    to answer: a message whose data part is `{"approve": true|false}`, or
    `{"approvals": {<id>: {"approve": …}}}` for several)."""
    undecided = [a for a in task.approvals if "decision" not in a]
    lines = [
        f"approve {a.get('tool')} {json.dumps(a.get('arguments'), ensure_ascii=False)}?"
        + (f" {a['note']}" if a.get("note") else "")
        for a in undecided
    ]
    lines += [str(q.get("question") or "") for q in task.questions if "answer" not in q]
    data: dict[str, Any] = {
        "kind": "approval",
        "approvals": [
            {key: a[key] for key in ("id", "tool", "arguments", "note", "schema") if key in a}
            for a in undecided
        ],
        "answer": {"approve": True} if len(undecided) == 1 else {"approvals": {}},
    }
    deadline = task.input_request.get("deadline") if isinstance(task.input_request, dict) else None
    if deadline:
        data["deadline"] = deadline
    return [Part("text", "\n".join(lines)), Part("data", data)]


def agent_says(update: TaskUpdate) -> Message | None:
    """The status message of a task in the state it is in now: the question it waits
    on, the tool calls it waits on a person's approval of, the error it failed with,
    or that it is paused (and, waiting, what for)."""
    task = update.task
    if update.state is not task.state:
        return None
    paused = task.pause_note
    if task.state is TaskState.INPUT_REQUIRED and task.approvals:
        parts = _approval_parts(task)
    elif task.state is TaskState.INPUT_REQUIRED:
        questions = [str(q.get("question") or "") for q in task.questions]
        parts = [Part("text", "\n".join(questions) if questions else "waiting for its subtasks")]
    elif task.state is TaskState.FAILED and task.error:
        parts = [Part("text", str(task.error.get("message", task.error)))]
    elif paused:
        parts = [Part("text", paused)]
    else:
        return None
    if paused and task.state is TaskState.INPUT_REQUIRED:  # it waits, and is held too
        parts[0] = Part("text", f"{parts[0].value}\n({paused})")
    return Message(
        "agent",
        parts,
        f"{task.id}:{task.event_seq}",
        task_id=str(task.id),
        context_id=context(task),
    )


def own_metadata(task: Task) -> dict[str, Any]:
    """What a task's `metadata.taskservice` holds: its own state, and its pause (who,
    when, why) while it is paused."""
    ours: dict[str, Any] = {"state": task.state.value}
    if task.paused is not None:
        ours["paused"] = task.paused
    return ours


def result_parts(task: Task) -> list[Part]:
    """A completed task's result: a text part, or a data part holding an object."""
    result = task.result
    if isinstance(result, str | dict):
        return parts_of(result)
    return [Part("data", {"result": result})]


class Params(BaseModel):
    """A request's parameters. Fields are read by their JSON name (`messageId`) or, as
    ProtoJSON parsers must accept too, by the proto field name (`message_id`)."""

    model_config = ConfigDict(extra="ignore", validate_by_alias=True, validate_by_name=True)


P = TypeVar("P", bound=Params)


def params(model: type[P], raw: Any) -> P:
    """`raw` validated as `model`, or INVALID_PARAMS naming each wrong field."""
    try:
        return model.model_validate(raw if raw is not None else {})
    except ValidationError as exc:
        violations = [(tuple(e["loc"]), e["msg"]) for e in exc.errors(include_url=False)]
        raise A2AError(Kind.INVALID_PARAMS, violations=violations) from None


class TaskId(Params):
    id: str = Field(min_length=1)


class TaskQuery(TaskId):
    history_length: HistoryLength = Field(default=None, alias="historyLength")
