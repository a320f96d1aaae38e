"""Messages as A2A sees them, whatever the protocol version: what a message's parts
make of a task's input, and a task's history read from its ledger.

Parts → input (documented in docs/guides/a2a.md):

| parts               | the task's input                                       |
| ------------------- | ------------------------------------------------------ |
| text parts only     | their texts, joined by newlines                        |
| one data part only  | its data (an object, as on REST)                       |
| data parts only     | `{"data": [<each part's data>]}`                       |
| text and data parts | `{"text": <the texts joined>, "data": <the data, or a list of each>}` |
| a file part         | refused: `ContentTypeNotSupported`                     |

History: the message that started the task (its input), then from the ledger each
question the agent asked (`ask_user`) and its answer, each follow-up the user sent
and each text the agent wrote, in order, then the follow-ups queued that the run
has not read yet; tool calls and their results are not messages. A message's id is
the one it was sent with where the service knows it, else `<task id>:followup:<n>`
for a follow-up and `<task id>:<ledger position>` for the rest.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from taskservice.a2a.errors import A2AError, Kind
from taskservice.agents.tools import ASK_USER
from taskservice.domain.content import as_text, canonical
from taskservice.domain.models import Followup, Task

Role = Literal["user", "agent"]
# A message's key (a task's idempotency key, a follow-up's key) starts so.
MESSAGE_KEY = "a2a:"


@dataclass(frozen=True, slots=True)
class Part:
    kind: Literal["text", "data", "file"]
    value: Any


@dataclass(frozen=True, slots=True)
class Message:
    role: Role
    parts: list[Part]
    message_id: str
    task_id: str | None = None
    context_id: str | None = None
    metadata: dict[str, Any] | None = None
    # Tasks it refers to: a new task continuing one of them is a fork of it.
    reference_task_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PushConfig:
    """Where a task's updates are pushed (an A2A push notification config), and in
    which protocol version's shapes: the client's id for it, the token echoed in
    `X-A2A-Notification-Token`, and the credentials sent as `Authorization`."""

    version: str
    url: str
    id: str | None = None
    token: str | None = None
    scheme: str | None = None
    credentials: str | None = None


@dataclass(frozen=True, slots=True)
class SendRequest:
    """A message sent to the agent, with how to answer: wait for the task to settle
    (or not), how much history to show, and where to push the task's updates."""

    message: Message
    wait: bool
    history_length: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    push: PushConfig | None = None


def message_key(request: SendRequest) -> str:
    """The key a message is kept under: its id, after a digest of what it says (its
    parts, context and metadata) and of what the request asks with it (its
    `metadata` and push config). A retry of the same request finds what it made;
    another message under an id used before (which a client should not send, and
    the conformance kits do) is a message of its own."""
    message, push = request.message, request.push
    parts = [[part.kind, part.value] for part in message.parts]
    pushed = [push.url, push.id, push.token, push.scheme, push.credentials] if push else None
    said = canonical([parts, message.context_id, message.metadata, request.metadata, pushed])
    digest = hashlib.sha256(said.encode()).hexdigest()[:16]
    return f"{MESSAGE_KEY}{digest}:{message.message_id}"


def context(task: Task) -> str:
    """A2A requires a context: a task submitted over REST without one is its own."""
    return task.context_id or str(task.id)


def input_of(parts: list[Part]) -> Any:
    """The task input a message's parts make (the table above)."""
    if any(part.kind == "file" for part in parts):
        raise A2AError(
            Kind.CONTENT_TYPE_NOT_SUPPORTED,
            "file parts are not supported; send text or data parts",
        )
    texts = [part.value for part in parts if part.kind == "text"]
    data = [part.value for part in parts if part.kind == "data"]
    if not data:
        return "\n".join(texts)
    if not texts:
        return data[0] if len(data) == 1 else {"data": data}
    return {"text": "\n".join(texts), "data": data[0] if len(data) == 1 else data}


def parts_of(value: Any) -> list[Part]:
    """A task's input or result as parts: text, or data."""
    return [Part("text", value)] if isinstance(value, str) else [Part("data", value)]


def _question(part: Mapping[str, Any]) -> str:
    args = part.get("args")
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return args
    return as_text(args.get("question", args) if isinstance(args, dict) else args)


def _turn(row: Mapping[str, Any]) -> tuple[Role, list[Part]] | None:
    """The A2A message a ledger row holds, if any."""
    body = row["message"]
    parts: list[Part] = []
    for part in body.get("parts", []):
        kind, tool = part.get("part_kind"), part.get("tool_name")
        if body.get("kind") == "request":
            follow_up = kind == "user-prompt" and row["position"] > 0  # 0: the input
            if follow_up or (kind == "tool-return" and tool == ASK_USER):
                parts.append(Part("text", as_text(part.get("content"))))
        elif kind == "text" and part.get("content"):
            parts.append(Part("text", part["content"]))
        elif kind == "tool-call" and tool == ASK_USER:
            parts.append(Part("text", _question(part)))
    if not parts:
        return None
    return ("user" if body.get("kind") == "request" else "agent"), parts


def _followup_id(task_id: str, seq: Any, key: Any) -> str:
    if isinstance(key, str) and key.startswith(MESSAGE_KEY):
        return key.removeprefix(MESSAGE_KEY).split(":", 1)[-1]  # the sender's messageId
    return f"{task_id}:followup:{seq}"


def history(
    task: Task, rows: Iterable[Mapping[str, Any]], queued: Iterable[Followup] = ()
) -> list[Message]:
    """The task's conversation as A2A messages (see the module's docstring): the
    ledger's `rows`, then the follow-ups `queued` that no run has read."""
    task_id, context_id = str(task.id), context(task)
    sent = (task.metadata.get("a2a") or {}).get("messageId")
    first = Message("user", parts_of(task.input), sent or f"{task_id}:input", task_id, context_id)
    messages = [first]
    for row in rows:
        turn = _turn(row)
        if turn is not None:
            role, parts = turn
            read = row["message"].get("metadata") or {}  # a follow-up: its seq and key
            message_id = (
                _followup_id(task_id, read["followup"], read.get("key"))
                if "followup" in read
                else f"{task_id}:{row['position']}"
            )
            messages.append(Message(role, parts, message_id, task_id, context_id))
    for followup in queued:
        message_id = _followup_id(task_id, followup.seq, followup.key)
        messages.append(Message("user", parts_of(followup.input), message_id, task_id, context_id))
    return messages


def last(messages: list[Message], length: int | None) -> list[Message]:
    """The last `length` messages (all when None, none when 0)."""
    if length is None:
        return messages
    return messages[-length:] if length > 0 else []
