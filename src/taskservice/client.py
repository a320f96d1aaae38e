"""`TaskClient`: the service's verbs over HTTP, for agents and scripts.

```python
async with TaskClient("http://127.0.0.1:8000", api_key=KEY) as client:
    task = await client.submit("Summarise the A2A protocol")
    async for event in client.stream(task["id"]):   # resumes by itself after drops
        print(event["type"], event["data"])
    done = await client.wait(task["id"])
```

`stream(..., deltas=True)` also yields the model's output as it is written, which
`LiveText` rebuilds.

Errors are raised as `TaskServiceError` carrying the problem document.
"""

from __future__ import annotations

import asyncio
import builtins
import json
import time
from collections.abc import AsyncIterator, Sequence
from types import TracebackType
from typing import Any

import httpx

SETTLED = frozenset({"completed", "failed", "cancelled", "input_required"})
TERMINAL = frozenset({"completed", "failed", "cancelled"})
RECONNECT_DELAY = 0.5  # seconds between stream reconnects
MAX_RECONNECTS = 1000


class TaskServiceError(Exception):
    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        super().__init__(f"{status} {problem.get('title', '')}: {problem.get('detail', '')}")
        self.status = status
        self.problem = problem


class LiveText:
    """The text of the message a model is writing, rebuilt from `delta` events (of
    kind `text`): `feed` each one; it answers the text the delta added."""

    def __init__(self) -> None:
        self.message: tuple[int, int] | None = None  # (attempt, position)
        self.parts: dict[int, str] = {}

    def feed(self, delta: dict[str, Any]) -> str:
        message = (int(delta["attempt"]), int(delta["position"]))
        if message != self.message:
            self.message, self.parts = message, {}
        part, offset, text = int(delta["part"]), int(delta["offset"]), str(delta["text"])
        self.parts[part] = self.parts.get(part, "")[:offset] + text
        return text

    @property
    def text(self) -> str:
        return "".join(self.parts[part] for part in sorted(self.parts))


class TaskClient:
    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000",
        *,
        api_key: str | None = None,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(
            base_url=base_url, headers=headers, timeout=timeout, transport=transport
        )

    async def __aenter__(self) -> TaskClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = await self._http.request(method, path, **kwargs)
        if response.status_code >= 400:
            try:
                problem = response.json()
            except ValueError:
                problem = {"title": response.reason_phrase, "detail": response.text}
            raise TaskServiceError(response.status_code, problem)
        return response.json()

    # -- verbs ------------------------------------------------------------------

    async def submit(
        self, input: str | dict[str, Any], *, idempotency_key: str | None = None, **fields: Any
    ) -> dict[str, Any]:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        body = {"input": input, **{k: v for k, v in fields.items() if v is not None}}
        task: dict[str, Any] = await self._call("POST", "/v1/tasks", json=body, headers=headers)
        return task

    async def fork(
        self,
        task_id: str,
        *,
        at: int | None = None,
        input: str | dict[str, Any] | None = None,
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> dict[str, Any]:
        """A new task from the first `at` messages of `task_id`'s conversation (None:
        all of them), with `input` added as the user's next message; `fields`
        (`agent`, `model`, `system_prompt`, `metadata`, …) change what the fork keeps
        of its source."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        given = {"at": at, "input": input, **fields}
        body = {k: v for k, v in given.items() if v is not None}
        task: dict[str, Any] = await self._call(
            "POST", f"/v1/tasks/{task_id}/fork", json=body, headers=headers
        )
        return task

    async def get(self, task_id: str, *, wait: float | None = None) -> dict[str, Any]:
        params = {"wait": wait} if wait else {}
        task: dict[str, Any] = await self._call("GET", f"/v1/tasks/{task_id}", params=params)
        return task

    async def list(self, **filters: Any) -> dict[str, Any]:
        params = {k: v for k, v in filters.items() if v is not None}
        page: dict[str, Any] = await self._call("GET", "/v1/tasks", params=params)
        return page

    async def wait(self, task_id: str, *, within: float = 600.0) -> dict[str, Any]:
        """The task once finished or waiting for input, or as it is after `within`
        seconds (long polls; no busy loop)."""
        deadline = time.monotonic() + within
        while True:
            remaining = deadline - time.monotonic()
            task = await self.get(task_id, wait=max(0.1, min(remaining, 60)))
            if task["state"] in SETTLED or remaining <= 0:
                return task

    async def cancel(self, task_id: str, *, reason: str | None = None) -> dict[str, Any]:
        body = {"reason": reason} if reason else None
        task: dict[str, Any] = await self._call("POST", f"/v1/tasks/{task_id}/cancel", json=body)
        return task

    async def pause(self, task_id: str, *, reason: str | None = None) -> dict[str, Any]:
        """Hold the task (its `paused` field says who, when, why): not claimed while
        paused; a running one gives its worker back. A no-op on a paused task."""
        body = {"reason": reason} if reason else None
        task: dict[str, Any] = await self._call("POST", f"/v1/tasks/{task_id}/pause", json=body)
        return task

    async def resume(self, task_id: str) -> dict[str, Any]:
        """Let a paused task go: its run goes on from its ledger. A no-op otherwise."""
        task: dict[str, Any] = await self._call("POST", f"/v1/tasks/{task_id}/resume")
        return task

    async def usage(
        self,
        *,
        group_by: Sequence[str] = (),
        since: str | None = None,
        until: str | None = None,
        agent: str | None = None,
        model: str | None = None,
        limit: int | None = None,
    ) -> dict[str, Any]:
        """What the tenant's model requests spent from `since` to `until` (UTC days,
        `YYYY-MM-DD`, both included; default the last 30 days), in total and grouped
        by any of `agent`, `model`, `day`, `context`."""
        given = {"from": since, "to": until, "agent": agent, "model": model, "limit": limit}
        params = [("group_by", group) for group in group_by] + [
            (k, v) for k, v in given.items() if v is not None
        ]
        report: dict[str, Any] = await self._call("GET", "/v1/usage", params=params)
        return report

    async def agents(self) -> builtins.list[dict[str, Any]]:
        """The agent profiles, each with its brake for this tenant (`paused`)."""
        listed: dict[str, Any] = await self._call("GET", "/v1/agents")
        agents: builtins.list[dict[str, Any]] = listed["agents"]
        return agents

    async def pause_agent(self, name: str, *, reason: str | None = None) -> dict[str, Any]:
        """The operators' brake: pause every task of the agent profile, and hold the
        tasks submitted to it, until `resume_agent`."""
        body = {"reason": reason} if reason else None
        change: dict[str, Any] = await self._call("POST", f"/v1/agents/{name}/pause", json=body)
        return change

    async def resume_agent(self, name: str) -> dict[str, Any]:
        """Release the brake: the tasks it paused are resumed (not those paused alone)."""
        change: dict[str, Any] = await self._call("POST", f"/v1/agents/{name}/resume")
        return change

    async def provide_input(
        self,
        task_id: str,
        *,
        answer: str | None = None,
        answers: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        body = {"answer": answer} if answers is None else {"answers": answers}
        task: dict[str, Any] = await self._call("POST", f"/v1/tasks/{task_id}/input", json=body)
        return task

    async def approve(
        self,
        task_id: str,
        call_id: str | None = None,
        *,
        arguments: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Approve a tool call the task waits on (`call_id`: None when it waits on
        one), with `arguments` instead of the model's if given; the task as it is
        then (running again once no call is undecided)."""
        decision: dict[str, Any] = {"approve": True}
        if arguments is not None:
            decision["arguments"] = arguments
        return await self.decide(task_id, {await self._undecided(task_id, call_id): decision})

    async def deny(
        self, task_id: str, call_id: str | None = None, *, reason: str | None = None
    ) -> dict[str, Any]:
        """Deny a tool call the task waits on: not made; the model reads `reason`."""
        decision: dict[str, Any] = {"approve": False}
        if reason:
            decision["reason"] = reason
        return await self.decide(task_id, {await self._undecided(task_id, call_id): decision})

    async def decide(self, task_id: str, approvals: dict[str, Any]) -> dict[str, Any]:
        """Decisions on the task's tool calls, by call id (`{"approve": …}` each)."""
        body = {"approvals": approvals}
        task: dict[str, Any] = await self._call("POST", f"/v1/tasks/{task_id}/input", json=body)
        return task

    async def _undecided(self, task_id: str, call_id: str | None) -> str:
        if call_id is not None:
            return call_id
        task = await self.get(task_id)
        request = task.get("input_request") or {}
        undecided = [a["id"] for a in request.get("approvals", []) if "decision" not in a]
        if len(undecided) != 1:
            detail = (
                f"the task waits on {len(undecided)} tool calls' approval: name one of {undecided}"
                if undecided
                else f"the task is {task['state']}, not waiting for a tool call's approval"
            )
            raise TaskServiceError(409, {"title": "Conflict", "detail": detail})
        return str(undecided[0])

    async def stream(
        self, task_id: str, *, after: int = 0, deltas: bool = False
    ) -> AsyncIterator[dict[str, Any]]:
        """Every event after `after`, then live ones, until the task ends. A dropped
        connection is resumed from the last event received: none lost, none twice.

        With `deltas`, the model's output as it is written comes too, as
        `{"type": "delta", "data": {position, part, kind, offset, text, …}}`; append
        each `text` to its part (`LiveText` does). After a reconnect the message in
        progress comes again from offset 0 (`LiveText` starts it over)."""
        last = after
        for _ in range(MAX_RECONNECTS):
            ended_before = False  # a resumed stream with a finished snapshot and nothing else
            try:
                async for kind, event_id, data in self._events(task_id, last):
                    if kind == "snapshot":
                        ended_before = json.loads(data)["state"] in TERMINAL
                        continue
                    if kind == "delta":
                        if deltas:
                            yield {"type": "delta", "data": json.loads(data)}
                        continue
                    ended_before = False
                    event = json.loads(data)
                    last = int(event_id) if event_id else last
                    yield event
                    if kind == "state_change" and event["data"].get("to") in TERMINAL:
                        return
                if ended_before:
                    return
            except (httpx.TransportError, httpx.RemoteProtocolError):
                pass  # dropped: resume from `last`
            await asyncio.sleep(RECONNECT_DELAY)
        raise TaskServiceError(0, {"title": "stream", "detail": "too many reconnects"})

    async def _events(self, task_id: str, after: int) -> AsyncIterator[tuple[str, str, str]]:
        headers = {"Accept": "text/event-stream", "Last-Event-ID": str(after)}
        async with self._http.stream(
            "GET", f"/v1/tasks/{task_id}/events", headers=headers, timeout=None
        ) as response:
            if response.status_code >= 400:
                await response.aread()
                raise TaskServiceError(response.status_code, response.json())
            kind, event_id, data = "message", "", list[str]()
            async for line in response.aiter_lines():
                if not line:
                    if data:
                        yield kind, event_id, "\n".join(data)
                    kind, event_id, data = "message", "", list[str]()
                elif line.startswith("event:"):
                    kind = line[6:].strip()
                elif line.startswith("id:"):
                    event_id = line[3:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].removeprefix(" "))
