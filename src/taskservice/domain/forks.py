"""Where a task may be forked, read from its ledger's messages (the JSON pydantic-ai
messages are stored as: `kind` request or response, `parts` each with its
`part_kind`), and what a fork copies. Pure: `usecases/forks.py` reads the ledger and
asks these.

A position `at` is a number of messages: a fork at `at` begins with the source's
first `at` messages, then its run continues from there as a run resumed after a
crash does. So `at` may be

- 0: nothing is copied, the run starts over from the task's input (or the fork's);
- after a request (a prompt, tool results, a follow-up): the model is asked again;
- after a response that calls tools, only at the end of the ledger: the calls'
  recorded results are the ledger's tool call rows (a finished call returns its
  result, one that had not finished runs in the fork); earlier, the request after it
  carries the results, and a fork between a call and its result would have neither;
- after a response that calls no tool (the model's answer), only with a message for
  the model (`input`): without one the run would have nothing to do;
- never where the copy would hold the spawn of subtasks (`spawn_subtask`'s recorded
  result) without the wait that collects them (`wait_for_subtasks`): the fork has no
  such subtasks to wait for. Before the spawn, the fork spawns its own; after the
  wait, their outcomes are its history. (`ask_agent` spawns and collects in one call:
  any boundary works.)

A message (`input`) is added after the copied messages, as the user's next message:
at 0 it is the fork's prompt; after a response it continues the conversation (which
makes "edit the message at `at`" a fork at `at` with the new text); after a request,
which the model has not answered, it is refused.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from taskservice.domain.errors import InvalidRequest
from taskservice.domain.webhooks import WebhookRequest

_SHOWN = 12  # positions a 422's text names (the problem's `valid_positions` has all)
# The built-in tools (`agents/tools.py`) that spawn subtasks and that collect them.
SPAWN_SUBTASK = "spawn_subtask"
WAIT_FOR_SUBTASKS = "wait_for_subtasks"


@dataclass(frozen=True, slots=True, kw_only=True)
class ForkRequest:
    """What a fork asks for, whichever way it arrives (REST, A2A, the CLI): the
    source task (`task_id`, the caller's), the position (None: the end of its
    ledger), the message added there, and what the fork changes; a field left None
    is the source's (`webhooks`: the fork's own; none are copied)."""

    tenant: str
    task_id: str
    at: int | None = None
    input: Any = None
    system_prompt: str | None = None
    agent: str | None = None
    model: str | None = None
    metadata: dict[str, Any] | None = None
    max_attempts: int | None = None
    timeout_seconds: float | None = None
    webhooks: Sequence[WebhookRequest] = ()
    idempotency_key: str | None = None
    message_key: str | None = None  # the added message's, as its sender keys it
    # A larger (or smaller) budget than the source's: how a task that failed
    # `budget_exhausted` goes on (`domain/budgets.py`).
    max_cost: Decimal | None = None
    max_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class Fork:
    """A new task's fork of `source`: its first `at` messages (of the `ledger` it
    held), the tool calls among them whose rows are copied (`calls`, by tool call id),
    and `message`, the user's message added after them (None: none; at 0 it is the
    task's input instead), shown in events as `preview`."""

    source: uuid.UUID
    at: int
    ledger: int = 0
    calls: tuple[str, ...] = ()
    message: Any = None
    preview: str = ""
    key: str | None = None  # the message's sender's key (an A2A message's)

    @property
    def followup(self) -> bool:
        """Whether the message is the fork's first follow-up (added after copied
        messages) rather than its input (at 0), or there is none."""
        return self.at > 0 and self.message is not None

    def fingerprint(self) -> dict[str, Any]:
        """What an idempotency key holds a fork to, beside the task's fields."""
        return {"source": str(self.source), "at": self.at, "message": self.message}


def _is_response(message: dict[str, Any]) -> bool:
    return message.get("kind") == "response"


def _call_parts(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool calls a response asks for (none in a request)."""
    if not _is_response(message):
        return []
    return [
        part
        for part in message.get("parts", [])
        if isinstance(part, dict) and part.get("part_kind") == "tool-call"
    ]


def _calls(message: dict[str, Any]) -> list[str]:
    """The ids of the tool calls a response asks for."""
    return [str(part.get("tool_call_id")) for part in _call_parts(message)]


def _tools(message: dict[str, Any]) -> list[str]:
    """The names of the tools a response calls."""
    return [str(part.get("tool_name")) for part in _call_parts(message)]


def _uncollected(messages: Sequence[dict[str, Any]]) -> dict[int, tuple[int, int]]:
    """The positions whose copy holds a spawn's result but not the result of the wait
    that collects its subtasks: position → (the spawning message, the waiting one)."""
    end = len(messages)
    refused: dict[int, tuple[int, int]] = {}
    for spawn, message in enumerate(messages):
        if SPAWN_SUBTASK not in _tools(message):
            continue
        wait = next(
            (j for j in range(spawn + 1, end) if WAIT_FOR_SUBTASKS in _tools(messages[j])), None
        )
        if wait is None:  # never waited for: nothing of them is in the history
            continue
        collected = wait + 2  # the copy holds the wait's result from there on
        for at in range(spawn + 2, min(collected, end + 1)):
            refused.setdefault(at, (spawn, wait))
    return refused


def positions(messages: Sequence[dict[str, Any]], *, with_message: bool) -> list[int]:
    """Every position a fork may take in `messages` (with a message added or not)."""
    end = len(messages)
    valid = [0]
    refused = _uncollected(messages)
    for at in range(1, end + 1):
        before = messages[at - 1]
        if at in refused:
            continue
        if not _is_response(before):
            if not with_message:  # the model is asked again
                valid.append(at)
        elif _calls(before):
            if at == end:  # the calls' results are the tool call rows
                valid.append(at)
        elif with_message:  # an answer: a message continues the conversation
            valid.append(at)
    return valid


def _listed(valid: list[int]) -> str:
    shown = ", ".join(str(p) for p in valid[:_SHOWN])
    return shown + (f", … ({len(valid)} in all)" if len(valid) > _SHOWN else "")


def check_at(
    source: uuid.UUID,
    messages: Sequence[dict[str, Any]],
    at: int | None,
    message: Any,
    *,
    preview: str = "",
    key: str | None = None,
) -> Fork:
    """The fork of `source` at `at` (None: the end of its ledger) adding `message`
    (None: none), or the 422 that says why not and which positions are valid."""
    end = len(messages)
    at = end if at is None else at
    with_message = message is not None
    valid = positions(messages, with_message=with_message)
    if at not in valid:
        why = _why(messages, at, with_message=with_message)
        raise InvalidRequest(
            f"task {source} cannot be forked at {at}: {why}; valid positions "
            f"{'with' if with_message else 'without'} `input`: {_listed(valid)}",
            field="at",
            valid_positions=valid,
            messages=end,
        )
    calls = tuple(call for m in messages[:at] for call in _calls(m))
    return Fork(
        source=source,
        at=at,
        ledger=end,
        calls=calls,
        message=message,
        preview=preview,
        key=key,
    )


def _why(messages: Sequence[dict[str, Any]], at: int, *, with_message: bool) -> str:
    end = len(messages)
    if not 0 <= at <= end:
        return f"its ledger holds {end} messages (positions 0 to {end})"
    split = _uncollected(messages).get(at)
    if split is not None:
        spawn, wait = split
        return (
            f"the subtasks message {spawn} spawned are collected by the wait of message "
            f"{wait}, which the fork would not have: fork before the spawn (the fork then "
            f"spawns its own) or after the wait's result (message {wait + 1})"
        )
    before = messages[at - 1]
    if not _is_response(before):
        return (
            f"message {at - 1} is a request the model has not answered there; "
            "a message may be added at 0 or after a response"
        )
    if _calls(before):
        return (
            f"position {at} is between the tool calls of message {at - 1} and "
            f"their results (message {at})"
        )
    assert not with_message
    return (
        f"message {at - 1} is the model's answer, after which the run has nothing to do: "
        f"fork at {at - 1} to ask the model again, or give `input` to continue"
    )
