"""How a task names its agent: top-level fields, or the keys of its `metadata` that
the original design used.

| field           | metadata key             | limit          |
| --------------- | ------------------------ | -------------- |
| `system_prompt` | `metadata.system_prompt` | 32,768 chars   |
| `model`         | `metadata.model_name`    | 200 chars      |
| `agent`         | `metadata.config_name`   | 100 chars      |

A metadata key counts when its field is absent; the two together must agree (else a 422
naming both). Whichever way a value comes, the same checks follow (the model allow-list,
the known profiles: `agents/catalog.AgentCatalog.resolve`), on every transport: the rule
lives in the use case (`usecases/submission.NewTasks.prepare`). The metadata itself is
stored as given.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from taskservice.domain.errors import InvalidRequest


@dataclass(frozen=True, slots=True)
class Option:
    field: str
    metadata_key: str
    max_length: int


SYSTEM_PROMPT = Option("system_prompt", "system_prompt", 32_768)
MODEL = Option("model", "model_name", 200)
AGENT = Option("agent", "config_name", 100)
OPTIONS = (SYSTEM_PROMPT, MODEL, AGENT)
METADATA_KEYS = frozenset(option.metadata_key for option in OPTIONS)


@dataclass(frozen=True, slots=True)
class AgentOptions:
    system_prompt: str | None = None
    model: str | None = None
    agent: str | None = None


def effective(given: AgentOptions, metadata: Mapping[str, Any]) -> AgentOptions:
    """`given` completed from `metadata`'s keys where a field is absent."""
    chosen = {option.field: getattr(given, option.field) for option in OPTIONS}
    for option in OPTIONS:
        if option.metadata_key not in metadata:
            continue
        key = f"metadata.{option.metadata_key}"
        value = metadata[option.metadata_key]
        if not isinstance(value, str) or not value:
            raise InvalidRequest(f"{key} must be non-empty text", field=key)
        if len(value) > option.max_length:
            raise InvalidRequest(
                f"{key} has at most {option.max_length} characters",
                field=key,
                limit=option.max_length,
            )
        field = chosen[option.field]
        if field is None:
            chosen[option.field] = value
        elif field != value:
            raise InvalidRequest(
                f"`{option.field}` ({field!r}) and `{key}` ({value!r}) disagree: "
                "give one of them, or the same value in both",
                field=option.field,
                fields=[option.field, key],
            )
    return AgentOptions(**chosen)
