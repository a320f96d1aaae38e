"""The A2A methods, on the use cases, independent of the transport.

A message starts a task (or, naming the task that waits for input, answers it); a
task is read, cancelled, or followed: the task, then a status update per state it
moves to (the result as an artifact before `completed`), until the final one
(terminal, or waiting for input). Following reads the task's event log through
`service.follower`, as the REST stream and the long poll do.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from taskservice.a2a.protocol import (
    INVALID_PARAMS,
    PUSH_NOT_SUPPORTED,
    TASK_NOT_CANCELABLE,
    A2AError,
    SendParams,
    a2a_task,
    artifact,
    content,
    context,
    pauses,
    status,
)
from taskservice.agent_options import METADATA_KEYS
from taskservice.errors import Conflict
from taskservice.follow import moved_to
from taskservice.models import Task
from taskservice.service import TaskService
from taskservice.states import TaskState

_CONTEXTS = uuid.UUID("5b0c2f0e-8d55-4b8a-9a57-3f6d2f1a2a00")  # names made-up contexts


class A2AHandler:
    """One caller's A2A requests: a tenant and the use cases it acts through."""

    def __init__(self, service: TaskService, tenant: str) -> None:
        self.service = service
        self.tenant = tenant

    async def deliver(self, params: SendParams) -> Task:
        """A message's task: a new one, or the waiting task the message answers."""
        message = params.message
        if message.role != "user":
            raise A2AError(INVALID_PARAMS, "a message to the agent has role 'user'")
        given = content(message.parts)
        if message.task_id is not None:
            # A reply to a task that waits for input answers its question.
            if not isinstance(given, str):
                raise A2AError(INVALID_PARAMS, "answer a question with text")
            return await self.service.provide_input(
                tenant=self.tenant, task_id=message.task_id, answer=given
            )
        options = {**(params.metadata or {}), **(message.metadata or {})}
        agent, model = options.get("agent"), options.get("model")
        task, _ = await self.service.submit(
            tenant=self.tenant,
            input=given,
            agent=agent if isinstance(agent, str) else None,
            model=model if isinstance(model, str) else None,
            # The original design's agent keys (`system_prompt`, `model_name`,
            # `config_name`) count as on REST: the use case applies them.
            metadata={
                "a2a": {"messageId": message.message_id},
                **{key: options[key] for key in METADATA_KEYS if key in options},
            },
            # A message without a context starts one, named after the message so
            # that a retry names the same one.
            context_id=message.context_id or str(uuid.uuid5(_CONTEXTS, message.message_id)),
            # A retried message (same messageId) finds the task it created.
            idempotency_key=f"a2a:{message.message_id}",
        )
        return task

    async def send(self, params: SendParams) -> dict[str, Any]:
        """`message/send`: the task (with `blocking`, once it settles or the wait cap
        has passed)."""
        task = await self.deliver(params)
        if params.configuration is not None and params.configuration.blocking:
            task = await self.service.wait(
                tenant=self.tenant,
                task_id=str(task.id),
                seconds=self.service.settings.max_wait_seconds,
            )
        return a2a_task(task)

    async def get(self, task_id: str) -> dict[str, Any]:
        return a2a_task(await self.find(task_id))

    async def find(self, task_id: str) -> Task:
        return await self.service.get(tenant=self.tenant, task_id=task_id)

    async def cancel(self, task_id: str) -> dict[str, Any]:
        try:
            task = await self.service.cancel(tenant=self.tenant, task_id=task_id)
        except Conflict as exc:
            raise A2AError(TASK_NOT_CANCELABLE, "Task cannot be canceled", exc.detail) from None
        return a2a_task(task)

    async def push_config(self) -> dict[str, Any]:
        raise A2AError(
            PUSH_NOT_SUPPORTED,
            "Push Notification is not supported",
            "register webhooks with POST /v1/webhooks instead",
        )

    async def updates(self, task: Task) -> AsyncIterator[dict[str, Any]]:
        """The task, then a status update for each state it moves to (the result as
        an artifact before `completed`); the last one is `final`."""
        follow = self.service.follower.follow(tenant=self.tenant, task_id=task.id)
        async with aclosing(follow) as changes:
            async for change in changes:
                if isinstance(change, Task):  # the snapshot, read once following
                    yield a2a_task(change)
                    if pauses(change.state):
                        return
                    continue
                state = moved_to(change) if change is not None else None
                if state is None:
                    continue
                current = await self.find(str(task.id))
                ids = {"taskId": str(current.id), "contextId": context(current)}
                if state is TaskState.COMPLETED and current.state is TaskState.COMPLETED:
                    update = {"kind": "artifact-update", **ids, "artifact": artifact(current)}
                    yield update | {"lastChunk": True}
                final = pauses(state)
                yield {
                    "kind": "status-update",
                    **ids,
                    "status": status(current, state),
                    "final": final,
                }
                if final:
                    return
