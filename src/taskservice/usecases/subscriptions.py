"""Webhook subscriptions and deliveries as the API sees them: validation, tenancy.

Every URL is checked (`webhooks/targets.resolve`) at registration, with the same rules
the dispatcher applies again at every attempt, so a caller learns at once that a target
is refused instead of from a delivery log.
"""

from __future__ import annotations

import base64
import binascii
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from taskservice.db.webhook_deliveries import DeliveryLog
from taskservice.db.webhook_subscriptions import SubscriptionStore
from taskservice.domain.errors import Conflict, InvalidRequest, NotFound
from taskservice.domain.ids import parse_uuid, uuid7
from taskservice.domain.states import TaskState
from taskservice.domain.webhooks import (
    BudgetEvent,
    Delivery,
    Subscription,
    WebhookEvent,
    WebhookRequest,
)
from taskservice.settings import Settings
from taskservice.webhooks import signing
from taskservice.webhooks.targets import AllowList, Resolver, UnsafeTarget, resolve, system_resolver

FILTER_KEYS = frozenset({"agents", "context_id", "metadata"})
MAX_URL_LENGTH = 2048
_SECRET_BYTES = (24, 64)


@dataclass(frozen=True, slots=True)
class Prepared:
    """A checked request, ready to insert."""

    id: uuid.UUID
    url: str
    states: tuple[str, ...]
    secret: str
    a2a: Mapping[str, Any] | None = None


def _states(states: Sequence[WebhookEvent], *, tenant_wide: bool) -> tuple[str, ...]:
    """Deduplicated, task states in state-machine order, then budget events. A
    budget event is the tenant's: a task's own webhook cannot ask for it."""
    if not states:
        raise InvalidRequest("a webhook needs at least one state", field="states")
    wanted = {str(s) for s in states}
    budget = [e.value for e in BudgetEvent if e.value in wanted]
    if budget and not tenant_wide:
        raise InvalidRequest(
            f"{', '.join(budget)}: budget events go to tenant-wide webhooks "
            "(POST /v1/webhooks), not to a task's own",
            field="states",
        )
    unknown = wanted - {s.value for s in TaskState} - {e.value for e in BudgetEvent}
    if unknown:
        raise InvalidRequest(f"unknown state(s) {sorted(unknown)}", field="states")
    return tuple(s.value for s in TaskState if s.value in wanted) + tuple(budget)


def check_secret(secret: str) -> str:
    try:
        if not secret.startswith(signing.SECRET_PREFIX):
            raise ValueError
        key = base64.b64decode(secret[len(signing.SECRET_PREFIX) :], validate=True)
    except (ValueError, binascii.Error):
        key = b""
    low, high = _SECRET_BYTES
    if not low <= len(key) <= high:
        raise InvalidRequest(
            f"a secret is whsec_ followed by base64 of {low} to {high} random bytes",
            field="secret",
        )
    return secret


def check_filters(filters: Mapping[str, Any]) -> dict[str, Any]:
    unknown = set(filters) - FILTER_KEYS
    if unknown:
        raise InvalidRequest(
            f"unknown filter(s) {sorted(unknown)}; known: {sorted(FILTER_KEYS)}", field="filters"
        )
    agents = filters.get("agents")
    if agents is not None and (
        not isinstance(agents, list) or not all(isinstance(a, str) and a for a in agents)
    ):
        raise InvalidRequest("filters.agents is a list of profile names", field="filters")
    context = filters.get("context_id")
    if context is not None and (not isinstance(context, str) or not context):
        raise InvalidRequest("filters.context_id is a non-empty string", field="filters")
    metadata = filters.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise InvalidRequest(
            "filters.metadata is an object that tasks' metadata must contain", field="filters"
        )
    return {key: value for key, value in filters.items() if value is not None}


class WebhookService:
    def __init__(
        self,
        store: SubscriptionStore,
        deliveries: DeliveryLog,
        settings: Settings,
        *,
        resolver: Resolver = system_resolver,
    ) -> None:
        self.store = store
        self.delivery_log = deliveries
        self.settings = settings
        self._allow = AllowList.parse(settings.webhook_allow_targets)
        self._resolver = resolver

    async def check_url(self, url: str) -> str:
        if len(url) > MAX_URL_LENGTH:
            raise InvalidRequest(
                f"a webhook URL has at most {MAX_URL_LENGTH} characters", field="url"
            )
        try:
            await resolve(
                url,
                allow=self._allow,
                allow_http=self.settings.webhook_allow_http,
                resolver=self._resolver,
            )
        except UnsafeTarget as exc:
            raise InvalidRequest(f"webhook URL refused: {exc}", field="url", url=url) from exc
        return url

    async def prepare(self, request: WebhookRequest, *, tenant_wide: bool = False) -> Prepared:
        return Prepared(
            id=uuid7(),
            url=await self.check_url(request.url),
            states=_states(request.states, tenant_wide=tenant_wide),
            secret=check_secret(request.secret) if request.secret else signing.new_secret(),
            a2a=request.a2a,
        )

    async def prepare_all(self, requests: Sequence[WebhookRequest]) -> list[Prepared]:
        limit = self.settings.webhook_max_per_task
        if len(requests) > limit:
            raise InvalidRequest(f"at most {limit} webhooks per task", field="webhooks")
        return [await self.prepare(request) for request in requests]

    async def insert_for_task(
        self, conn: Any | None, *, tenant: str, task_id: uuid.UUID, prepared: Sequence[Prepared]
    ) -> list[Subscription]:
        """A task's webhooks, on `conn` in the submit's transaction, or (None) each
        committed by itself."""
        made = []
        for p in prepared:
            sub = await self.store.create_for_task(
                conn,
                tenant=tenant,
                task_id=task_id,
                subscription_id=p.id,
                url=p.url,
                secret=p.secret,
                states=p.states,
                a2a=p.a2a,
            )
            if sub is None:
                raise NotFound(f"task {task_id} not found")
            made.append(sub)
        return made

    async def subscribe_task(
        self, *, tenant: str, task_id: str, request: WebhookRequest
    ) -> Subscription:
        parsed = self._id(task_id, "task")
        limit = self.settings.webhook_max_per_task
        # The task first: another tenant's is not found, whatever the request (its
        # URL refused or not would tell that the task exists).
        existing = await self.store.count_for_task(tenant=tenant, task_id=parsed)
        if existing is None:
            raise NotFound(f"task {task_id} not found")
        if existing >= limit:
            raise Conflict(f"task {task_id} has {limit} webhooks already, the most it may have")
        prepared = await self.prepare(request)
        (sub,) = await self.insert_for_task(
            None, tenant=tenant, task_id=parsed, prepared=[prepared]
        )
        return sub

    async def subscribe_tenant(self, *, tenant: str, request: WebhookRequest) -> Subscription:
        prepared = await self.prepare(request, tenant_wide=True)
        return await self.store.create_global(
            tenant=tenant,
            subscription_id=prepared.id,
            url=prepared.url,
            secret=prepared.secret,
            states=prepared.states,
            filters=check_filters(request.filters),
        )

    async def get(self, *, tenant: str, subscription_id: str) -> Subscription:
        sub = await self.store.get(tenant=tenant, subscription_id=self._id(subscription_id))
        if sub is None:
            raise NotFound(f"webhook {subscription_id} not found")
        return sub

    async def subscriptions(
        self, *, tenant: str, task_id: uuid.UUID | None, before: uuid.UUID | None, limit: int
    ) -> list[Subscription]:
        return await self.store.subscriptions(
            tenant=tenant, task_id=task_id, before=before, limit=limit
        )

    async def delete(self, *, tenant: str, subscription_id: str) -> None:
        if not await self.store.delete(tenant=tenant, subscription_id=self._id(subscription_id)):
            raise NotFound(f"webhook {subscription_id} not found")

    async def update(
        self,
        *,
        tenant: str,
        subscription_id: str,
        url: str | None,
        states: Sequence[WebhookEvent] | None,
        filters: Mapping[str, Any] | None,
        enabled: bool | None,
    ) -> Subscription:
        current = await self.get(tenant=tenant, subscription_id=subscription_id)
        if filters is not None and current.task_id is not None:
            raise InvalidRequest("a task's own webhook has no filters", field="filters")
        sub = await self.store.update(
            tenant=tenant,
            subscription_id=current.id,
            url=await self.check_url(url) if url is not None else None,
            states=(
                _states(states, tenant_wide=current.task_id is None) if states is not None else None
            ),
            filters=check_filters(filters) if filters is not None else None,
            enabled=enabled,
        )
        if sub is None:
            raise NotFound(f"webhook {subscription_id} not found")
        return sub

    async def rotate(
        self,
        *,
        tenant: str,
        subscription_id: str,
        secret: str | None,
        overlap_seconds: float | None,
    ) -> Subscription:
        sub = await self.store.rotate(
            tenant=tenant,
            subscription_id=self._id(subscription_id),
            secret=check_secret(secret) if secret else signing.new_secret(),
            overlap_seconds=(
                self.settings.webhook_secret_overlap_seconds
                if overlap_seconds is None
                else overlap_seconds
            ),
        )
        if sub is None:
            raise NotFound(f"webhook {subscription_id} not found")
        return sub

    async def deliveries(
        self,
        *,
        tenant: str,
        subscription_id: str | None = None,
        task_id: uuid.UUID | None = None,
        status: str | None = None,
        before: uuid.UUID | None,
        limit: int,
    ) -> list[Delivery]:
        sub_id = None
        if subscription_id is not None:
            sub_id = (await self.get(tenant=tenant, subscription_id=subscription_id)).id
        return await self.delivery_log.deliveries(
            tenant=tenant,
            subscription_id=sub_id,
            task_id=task_id,
            status=status,
            before=before,
            limit=limit,
        )

    async def delivery(self, *, tenant: str, delivery_id: str) -> Delivery:
        found = await self.delivery_log.delivery(tenant=tenant, delivery_id=self._id(delivery_id))
        if found is None:
            raise NotFound(f"delivery {delivery_id} not found")
        return found

    async def redeliver(self, *, tenant: str, delivery_id: str) -> Delivery:
        current = await self.delivery(tenant=tenant, delivery_id=delivery_id)
        if not await self.delivery_log.redeliver(tenant=tenant, delivery_id=current.id):
            again = await self.delivery(tenant=tenant, delivery_id=delivery_id)
            if again.in_flight:
                raise Conflict(f"delivery {delivery_id} has an attempt in flight; try later")
            raise Conflict(
                f"the webhook of delivery {delivery_id} is disabled; enable it first "
                f"(PATCH /v1/webhooks/{again.subscription_id})"
            )
        return await self.delivery(tenant=tenant, delivery_id=delivery_id)

    @staticmethod
    def _id(value: str | uuid.UUID, kind: str = "webhook") -> uuid.UUID:
        parsed = value if isinstance(value, uuid.UUID) else parse_uuid(value)
        if parsed is None:
            raise NotFound(f"{kind} {value} not found")
        return parsed
