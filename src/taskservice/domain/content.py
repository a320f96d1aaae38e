"""What a task's content must be to be stored, however it arrives (REST, A2A, MCP,
the client, a running agent's subtask): input that is text or a JSON object, JSON the
database can store and read back, within the size limits, texts without NUL and
within their lengths."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from taskservice.domain import jsonvalues
from taskservice.domain.errors import InvalidRequest, PayloadTooLarge
from taskservice.settings import Settings

_NUL_MESSAGE = "text must not contain NUL (\\u0000) characters"
CONTEXT_ID_MAX_LENGTH = 200
IDEMPOTENCY_KEY_MAX_LENGTH = 255


def canonical(value: Any) -> str:
    """`value` encoded with sorted keys: equal values, equal text (request hashes)."""
    return jsonvalues.encode(value, sort_keys=True)


def as_text(value: Any) -> str:
    """An input as a model reads it: text as it is, JSON encoded."""
    return value if isinstance(value, str) else json.dumps(value)


def field_json(name: str, value: Any) -> str:
    """`value` canonically encoded, or a 422 saying where in field `name` it cannot be
    stored."""
    try:
        return canonical(value)
    except jsonvalues.JsonRefused as exc:
        raise jsonvalues.JsonRefused(
            exc.reason, (name, *exc.path), kind=exc.kind, field=name, **exc.extensions
        ) from None


def _check_input(input: Any) -> None:
    if isinstance(input, str):
        if not input:
            raise InvalidRequest("input must not be empty", field="input")
    elif not isinstance(input, dict):
        raise InvalidRequest("input must be text or a JSON object", field="input")


def _check_size(name: str, encoded: str, limit: int) -> None:
    size = len(encoded.encode())
    if size > limit:
        raise PayloadTooLarge(
            f"{name} is {size} bytes encoded as JSON; the limit is {limit}",
            field=name,
            limit=limit,
        )


def check_length(name: str, text: str | None, *, most: int, least: int = 0) -> None:
    """A 422 naming field `name` when `text` (if given) is not `least` to `most`
    characters: the limit a transport's schema states, held on every transport."""
    if text is not None and not least <= len(text) <= most:
        span = f"{least} to {most}" if least else f"at most {most}"
        raise InvalidRequest(f"`{name}` has {span} characters", field=name, limit=most)


def check_new_task(
    input: Any, metadata: dict[str, Any], texts: Sequence[str | None], settings: Settings
) -> tuple[str, str]:
    """What any new task must satisfy. Returns the input and metadata encoded (once:
    for the limits and the checks alike)."""
    _check_input(input)
    input_json, metadata_json = field_json("input", input), field_json("metadata", metadata)
    if any(text and "\x00" in text for text in texts):
        raise InvalidRequest(_NUL_MESSAGE)
    _check_size("input", input_json, settings.max_input_bytes)
    _check_size("metadata", metadata_json, settings.max_metadata_bytes)
    return input_json, metadata_json


def check_message(input: Any, settings: Settings) -> str:
    """What a message to a task (a follow-up) must satisfy: what a task's input must.
    Returns it encoded."""
    _check_input(input)
    input_json = field_json("input", input)
    _check_size("input", input_json, settings.max_input_bytes)
    return input_json
