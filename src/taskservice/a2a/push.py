"""A2A push notification configs, on the webhook machinery.

A config is a task's own webhook subscription (`usecases/subscriptions.py`): the outbox
writes a delivery in the transaction of each state change, the dispatcher retries it
and logs every attempt, the URL is checked against SSRF at registration and at every
attempt, and each body is signed as Standard Webhooks says. What A2A adds rides in
the subscription's `a2a` fields: the body is the task in the config's protocol
version (1.0: a StreamResponse, `{"task": …}`; 0.3: the Task), sent as
`application/a2a+json` with the config's `token` in `X-A2A-Notification-Token` and
its `authentication` as the `Authorization` header. Every state change is pushed.
Deleting a config deletes its pending deliveries with it.

A config set again under its id replaces the one before; one without an id gets a
new one. Configs are the caller's: another tenant's task is not found.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Callable, Mapping

from taskservice.a2a import v03, v10
from taskservice.a2a.conversation import PushConfig
from taskservice.a2a.errors import A2AError, Kind
from taskservice.a2a.shapes import View
from taskservice.domain.errors import NotFound
from taskservice.domain.models import Task
from taskservice.domain.states import TaskState
from taskservice.domain.webhooks import Subscription, WebhookRequest
from taskservice.usecases.subscriptions import WebhookService
from taskservice.usecases.tasks import TaskService


def _payload_10(task: Task) -> str:
    return json.dumps({"task": v10.task(View(task, []))}, separators=(",", ":"))


def _payload_03(task: Task) -> str:
    return json.dumps(v03.task(View(task, [])), separators=(",", ":"))


# The body of a push notification, by its config's version: the dispatcher's formats.
FORMATS: Mapping[str, Callable[[Task], str]] = {
    v10.VERSION: _payload_10,
    v03.VERSION: _payload_03,
}


def webhook_request(config: PushConfig) -> WebhookRequest:
    """The task webhook a config is: every state, and what A2A adds."""
    a2a = {
        "version": config.version,
        "id": config.id or str(uuid.uuid4()),
        "token": config.token,
        "authentication": {"scheme": config.scheme, "credentials": config.credentials}
        if config.scheme
        else None,
    }
    return WebhookRequest(url=config.url, states=tuple(TaskState), a2a=a2a)


def config_of(subscription: Subscription) -> PushConfig:
    a2a = subscription.a2a or {}
    authentication = a2a.get("authentication") or {}
    return PushConfig(
        a2a.get("version", v10.VERSION),
        subscription.url,
        id=a2a.get("id"),
        token=a2a.get("token"),
        scheme=authentication.get("scheme"),
        credentials=authentication.get("credentials"),
    )


class PushConfigs:
    """One caller's push notification configs."""

    def __init__(
        self, tenant: str, *, service: TaskService, webhooks: WebhookService | None, limit: int
    ) -> None:
        self.tenant = tenant
        self.service = service
        self.webhooks = webhooks
        self.limit = limit  # configs listed per task: at most as many as it may have

    def _webhooks(self) -> WebhookService:
        if self.webhooks is None:
            raise A2AError(
                Kind.PUSH_NOTIFICATION_NOT_SUPPORTED,
                detail="this service was built without webhooks",
            )
        return self.webhooks

    async def create(self, task_id: str, config: PushConfig) -> tuple[str, PushConfig]:
        """The task's id and the config as stored (with its id). The subscription's
        insert finds the caller's task itself: another's, or none, is not found."""
        made = await self._webhooks().subscribe_task(
            tenant=self.tenant, task_id=task_id, request=webhook_request(config)
        )
        return str(made.task_id), config_of(made)

    async def _configs(self, task_id: str) -> tuple[Task, list[Subscription]]:
        """The task, and its configs, oldest first (its plain webhooks left out)."""
        webhooks = self._webhooks()
        task = await self.service.get(tenant=self.tenant, task_id=task_id)
        subscriptions = await webhooks.subscriptions(
            tenant=self.tenant,
            task_id=task.id,
            before=None,
            limit=self.limit,
        )
        return task, [s for s in reversed(subscriptions) if s.a2a is not None]

    async def list(self, task_id: str) -> tuple[str, list[PushConfig]]:
        task, configs = await self._configs(task_id)
        return str(task.id), [config_of(s) for s in configs]

    async def _find(self, task_id: str, config_id: str | None) -> Subscription | None:
        """The task's config `config_id` (None: its only, or first, config)."""
        _, configs = await self._configs(task_id)
        if config_id is None:
            return configs[0] if configs else None
        return next((s for s in configs if (s.a2a or {}).get("id") == config_id), None)

    async def get(self, task_id: str, config_id: str | None) -> tuple[str, PushConfig]:
        found = await self._find(task_id, config_id)
        if found is None:  # the specification's answer for a config that is not there
            raise A2AError(
                Kind.TASK_NOT_FOUND,
                f"the task has no push notification config {config_id or ''}".rstrip(),
                taskId=task_id,
                configId=config_id or "",
            )
        return str(found.task_id), config_of(found)

    async def delete(self, task_id: str, config_id: str | None) -> None:
        """Remove the config and its pending deliveries; one that is not there (any
        more) is deleted already."""
        found = await self._find(task_id, config_id)
        if found is not None:
            with contextlib.suppress(NotFound):  # deleted meanwhile
                await self._webhooks().delete(tenant=self.tenant, subscription_id=str(found.id))
