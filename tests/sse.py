"""A minimal Server-Sent Events reader over an httpx stream (what browsers do)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass
class Event:
    event: str
    data: str
    id: str | None
    retry: int | None

    def json(self) -> Any:
        return json.loads(self.data)


async def read_events(response: httpx.Response) -> AsyncIterator[Event]:
    fields: dict[str, list[str]] = {}
    async for line in response.aiter_lines():
        if line == "":
            if "data" in fields or "event" in fields:
                retry = fields.get("retry", [None])[-1]
                yield Event(
                    event=fields.get("event", ["message"])[-1],
                    data="\n".join(fields.get("data", [])),
                    id=fields.get("id", [None])[-1],
                    retry=int(retry) if retry else None,
                )
            fields = {}
            continue
        if line.startswith(":"):
            continue  # a comment: keep-alive
        name, _, value = line.partition(":")
        fields.setdefault(name, []).append(value.removeprefix(" "))
