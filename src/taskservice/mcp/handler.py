"""What an MCP client asks of the task service, independent of the transport: the
tools (a page of agent profiles) and a plain call (submit the task, wait for it).

A call is an ordinary task of the caller's tenant, on the tool's profile: it shows on
REST, SSE, webhooks and A2A like any other, and outlives the call that made it.

Two modules are named `handler`, one per protocol binding, each the protocol's
operations on the same use cases with no transport: this one is MCP's; `a2a/handler.py`
is A2A's.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from taskservice.domain.errors import Conflict, InvalidRequest, NotFound
from taskservice.domain.models import EventType, Task, TaskEvent, TaskFilter
from taskservice.domain.requests import TaskRequest
from taskservice.mcp import profile_tools as tools
from taskservice.mcp import tasks as mcp_tasks
from taskservice.settings import Settings
from taskservice.usecases.inbox import TaskInbox
from taskservice.usecases.tasks import TaskService

Progress = Callable[[float, str | None], Awaitable[None]]  # percent of 100, a note
PAGE_SIZE = 100  # tools per tools/list page
TASK_PAGE_SIZE = 50  # tasks per tasks/list page (2025-11-25)
_ARGUMENTS = {"input", "context_id"}
# The longest `ttl` kept: a receiver may shorten what is asked (2025-11-25), and
# retention adds it to a time, which PostgreSQL holds only to the year 294276.
MAX_TTL_MS = 100 * 365 * 86_400_000  # a century


def requested_ttl(task: Any) -> int | None:
    """The `ttl` a task-augmented call asks for (`params.task`, 2025-11-25), in
    milliseconds, at most `MAX_TTL_MS`; None when it asks for none. One that is
    negative or not a whole number is refused, before anything is written."""
    if not isinstance(task, dict):
        raise InvalidRequest("`params.task` must be an object", field="task")
    ttl = task.get("ttl")
    if ttl is None:
        return None
    whole = isinstance(ttl, int) or (isinstance(ttl, float) and ttl.is_integer())
    if isinstance(ttl, bool) or not whole or ttl < 0:
        raise InvalidRequest(
            f"`params.task.ttl` is how long to keep the task, in milliseconds: a whole "
            f"number of 0 or more, not {json.dumps(ttl)[:100]}",
            field="task.ttl",
        )
    return min(int(ttl), MAX_TTL_MS)


def _cursor(offset: int) -> str:
    return base64.urlsafe_b64encode(f"tools:{offset}".encode()).decode()


def _offset(cursor: str | None) -> int:
    if not cursor:
        return 0
    try:
        kind, _, offset = base64.urlsafe_b64decode(cursor.encode()).decode().partition(":")
        if kind == "tools" and offset.isdigit():
            return int(offset)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        pass
    raise InvalidRequest("the cursor is not one this server gave", field="cursor")


@dataclass
class MCPHandler:
    service: TaskService
    inbox: TaskInbox  # answers to a task's question
    settings: Settings
    tenant: str
    who: str = "open"  # who acts, as a decision records it: `key:<id>`, or open mode

    @property
    def _wait_seconds(self) -> float:
        """How long a call waits for its task (`settle` waits no longer than this)."""
        settings = self.settings
        return min(settings.mcp_call_seconds, settings.max_wait_seconds)

    def list_tools(self, cursor: str | None) -> tuple[list[dict[str, Any]], str | None]:
        """A page of tools, one per agent profile (by name), and the cursor of the
        next page, if there is one."""
        start = _offset(cursor)
        profiles = self.service.profiles()
        page = profiles[start : start + PAGE_SIZE]
        more = start + PAGE_SIZE < len(profiles)
        return [tools.tool(p) for p in page], _cursor(start + PAGE_SIZE) if more else None

    async def start(
        self, name: str, arguments: dict[str, Any] | None, *, ttl_ms: int | None = None
    ) -> Task:
        """Submit the task of a call to tool `name` (committed: a `tasks/get` finds it
        at once). Bad arguments are refused before anything is written. A `ttl_ms` the
        client asked for (2025-11-25) is kept in the task's `metadata.mcp`, for
        retention to honour."""
        if self.service.profile(name) is None:
            raise InvalidRequest(f"no tool {name!r}; tools/list lists them", field="name")
        arguments = arguments or {}
        unknown = sorted(set(arguments) - _ARGUMENTS)
        if unknown:
            raise InvalidRequest(
                f"unknown arguments {unknown}; the tool takes `input` and `context_id`",
                field="arguments",
            )
        if "input" not in arguments:
            raise InvalidRequest("`input` is required: the task for the agent", field="input")
        context_id = arguments.get("context_id")
        if context_id is not None and not isinstance(context_id, str):
            raise InvalidRequest("`context_id` must be a string", field="context_id")
        new = TaskRequest(
            tenant=self.tenant,
            input=arguments["input"],
            agent=name,
            context_id=context_id,
            metadata={"mcp": {"tool": name, **({"ttl_ms": ttl_ms} if ttl_ms else {})}},
            quiet=True,  # MCP carries no live output: streamed once a stream asks
        )
        return (await self.service.submit(new)).task

    async def call(
        self, name: str, arguments: dict[str, Any] | None, progress: Progress | None = None
    ) -> dict[str, Any]:
        """Run the tool `name`'s agent on the arguments as a task and answer with its
        result; a task still unfinished when the wait is over goes on, and the answer
        says so (`profile_tools.unfinished`). `progress` hears the agent's progress
        reports (percent of 100, note) meanwhile."""
        task = await self.start(name, arguments)
        waited = self._wait_seconds

        async def reported(event: TaskEvent) -> None:
            if progress is not None and event.type == EventType.PROGRESS:
                note = event.data.get("note")
                await progress(float(event.data.get("percent", 0)), str(note) if note else None)

        task = await self.service.settle(task, waited, on_event=reported)
        if task.state.is_terminal:
            return tools.call_result(task)
        return tools.unfinished(task, waited)

    async def task(self, task_id: str) -> Task:
        """A task of the caller's tenant by its MCP task id, which is its id."""
        try:
            return await self.service.get(tenant=self.tenant, task_id=task_id)
        except NotFound:
            raise NotFound(f"Failed to retrieve task: task {task_id} not found") from None

    async def update(self, task_id: str, responses: dict[str, Any]) -> None:
        """Answer the questions and decide on the tool calls a task waits on, from
        the input responses keyed by the questions' and the calls' ids. Keys not (or
        no longer) pending are ignored, as the extension says; a task that waits on
        none any more is left as it is. Calls are decided together or one by one;
        questions are answered together."""
        task = await self.task(task_id)
        asked = {q["id"] for q in tools.unanswered(task)}
        calls = {c["id"] for c in tools.undecided(task)}
        answers: dict[str, str] = {}
        decisions: dict[str, Any] = {}
        for key, response in responses.items():
            if key in calls:
                decision = mcp_tasks.decision_of(key, response)
                if decision is not None:  # cancelled: no choice made, still undecided
                    decisions[key] = decision
                continue
            if key not in asked:
                continue
            answer = mcp_tasks.answer_of(response)
            if answer is None:
                raise InvalidRequest(
                    f"input response {key!r}: an ElicitResult whose accepted content has "
                    "a string `answer`",
                    field="inputResponses",
                )
            answers[key] = answer
        if not answers and not decisions:
            return
        if answers and set(answers) != asked:
            missing = sorted(asked - set(answers))
            raise InvalidRequest(
                f"answer the task's questions together; missing: {missing}",
                field="inputResponses",
            )
        try:
            if task.approvals:
                await self.inbox.approvals.decide_on(
                    task, approvals=decisions, answers=answers or None, by=self.who, via="mcp"
                )
            else:
                await self.inbox.answer(tenant=self.tenant, task_id=task.id, answers=answers)
        except Conflict:
            return  # answered, decided or cancelled meanwhile: superseded, ignored
        except InvalidRequest as exc:
            if {"undecided", "questions"} & set(exc.extensions):
                return  # the task moved on to other calls or questions meanwhile: ignored
            raise  # edited arguments that do not fit the tool's schema

    async def finished(self, task_id: str) -> Task:
        """The task once it has ended, waiting up to `TASKSERVICE_MCP_CALL_SECONDS`
        (through waits for input) for that; as it is then, if it has not."""
        task = await self.task(task_id)
        return await self.service.settle(task, self._wait_seconds, finished=True)

    async def tasks(self, cursor: str | None) -> tuple[list[Task], str | None]:
        """A page of the caller's tasks, newest first: every task `task` finds."""
        page = await self.service.list_tasks(  # a cursor it did not give is InvalidRequest
            tenant=self.tenant, filter=TaskFilter(), cursor=cursor, limit=TASK_PAGE_SIZE
        )
        return page.tasks, page.next_cursor

    async def cancel(self, task_id: str) -> Task:
        """Cancel the task; one that has already finished stays as it is."""
        task = await self.task(task_id)
        if task.state.is_terminal:
            return task
        try:
            return await self.service.cancel(tenant=self.tenant, task_id=str(task.id))
        except Conflict:  # it finished meanwhile
            return await self.task(task_id)
