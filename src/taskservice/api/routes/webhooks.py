"""Webhooks: a task's own (`/v1/tasks/{id}/webhooks`), tenant-wide (`/v1/webhooks`),
and the delivery log (`…/deliveries`, `/v1/deliveries/{id}`)."""

from __future__ import annotations

import uuid
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Response, status

from taskservice.api.deps import Caller
from taskservice.api.errors import problem_responses
from taskservice.api.schemas import (
    DeliveryOut,
    DeliveryPage,
    SecretRotation,
    WebhookCreate,
    WebhookIn,
    WebhookList,
    WebhookOut,
    WebhookUpdate,
    WebhookWithSecret,
)
from taskservice.domain.ids import decode_cursor, encode_cursor

router = APIRouter(tags=["webhooks"])

Limit = Annotated[int | None, Query(ge=1, description="Capped by the server.")]
Cursor = Annotated[str | None, Query(description="`next_cursor` of the previous page.")]
DeliveryStatus = Literal["pending", "succeeded", "failed"]


def _cursor(items: list[WebhookOut] | list[DeliveryOut], size: int) -> str | None:
    return encode_cursor(items[-1].id) if len(items) == size else None


@router.post(
    "/v1/tasks/{task_id}/webhooks",
    operation_id="createTaskWebhook",
    status_code=status.HTTP_201_CREATED,
    response_model=WebhookWithSecret,
    responses=problem_responses(401, 404, 409, 422),
    summary="Register a webhook for one task",
    description="If the task is already in one of the states, that state is delivered "
    "at once: registering late never misses the state the task is in.",
)
async def create_task_webhook(
    task_id: str, body: WebhookIn, caller: Caller, response: Response
) -> WebhookWithSecret:
    sub = await caller.webhooks.subscribe_task(
        tenant=caller.tenant, task_id=task_id, request=body.request()
    )
    response.headers["Location"] = f"/v1/webhooks/{sub.id}"
    return WebhookWithSecret.of(sub)


@router.get(
    "/v1/tasks/{task_id}/webhooks",
    operation_id="listTaskWebhooks",
    response_model=WebhookList,
    responses=problem_responses(401, 404),
    summary="List a task's own webhooks",
)
async def list_task_webhooks(
    task_id: str, caller: Caller, cursor: Cursor = None, limit: Limit = None
) -> WebhookList:
    task = await caller.service.get(tenant=caller.tenant, task_id=task_id)
    return await _list(caller, task.id, cursor, limit)


@router.get(
    "/v1/tasks/{task_id}/deliveries",
    operation_id="listTaskDeliveries",
    response_model=DeliveryPage,
    responses=problem_responses(401, 404, 422),
    summary="A task's webhook deliveries (all its webhooks and the tenant's), newest first",
)
async def list_task_deliveries(
    task_id: str,
    caller: Caller,
    delivery_status: Annotated[DeliveryStatus | None, Query(alias="status")] = None,
    cursor: Cursor = None,
    limit: Limit = None,
) -> DeliveryPage:
    task = await caller.service.get(tenant=caller.tenant, task_id=task_id)
    return await _deliveries(caller, delivery_status, cursor, limit, task_id=task.id)


async def _deliveries(
    caller: Caller,
    delivery_status: str | None,
    cursor: str | None,
    limit: int | None,
    *,
    task_id: uuid.UUID | None = None,
    webhook_id: str | None = None,
) -> DeliveryPage:
    size = caller.service.page_size(limit)
    found = await caller.webhooks.deliveries(
        tenant=caller.tenant,
        subscription_id=webhook_id,
        task_id=task_id,
        status=delivery_status,
        before=decode_cursor(cursor) if cursor else None,
        limit=size,
    )
    items = [DeliveryOut.of(d) for d in found]
    return DeliveryPage(deliveries=items, next_cursor=_cursor(items, size))


@router.post(
    "/v1/webhooks",
    operation_id="createWebhook",
    status_code=status.HTTP_201_CREATED,
    response_model=WebhookWithSecret,
    responses=problem_responses(401, 422),
    summary="Register a tenant-wide webhook",
    description="Called for every task of the tenant that reaches one of `states` and "
    "matches `filters`. The secret is shown in this response only.",
)
async def create_webhook(
    body: WebhookCreate, caller: Caller, response: Response
) -> WebhookWithSecret:
    filters = body.filters.model_dump(exclude_none=True) if body.filters else None
    sub = await caller.webhooks.subscribe_tenant(
        tenant=caller.tenant, request=body.request(filters)
    )
    response.headers["Location"] = f"/v1/webhooks/{sub.id}"
    return WebhookWithSecret.of(sub)


@router.get(
    "/v1/webhooks",
    operation_id="listWebhooks",
    response_model=WebhookList,
    responses=problem_responses(401, 422),
    summary="List tenant-wide webhooks, newest first",
)
async def list_webhooks(caller: Caller, cursor: Cursor = None, limit: Limit = None) -> WebhookList:
    return await _list(caller, None, cursor, limit)


async def _list(
    caller: Caller, task_id: uuid.UUID | None, cursor: str | None, limit: int | None
) -> WebhookList:
    size = caller.service.page_size(limit)
    found = await caller.webhooks.subscriptions(
        tenant=caller.tenant,
        task_id=task_id,
        before=decode_cursor(cursor) if cursor else None,
        limit=size,
    )
    items = [WebhookOut.of(s) for s in found]
    return WebhookList(webhooks=items, next_cursor=_cursor(items, size))


@router.get(
    "/v1/webhooks/{webhook_id}",
    operation_id="getWebhook",
    response_model=WebhookOut,
    responses=problem_responses(401, 404),
    summary="Get a webhook (tenant-wide or a task's)",
)
async def get_webhook(webhook_id: str, caller: Caller) -> WebhookOut:
    sub = await caller.webhooks.get(tenant=caller.tenant, subscription_id=webhook_id)
    return WebhookOut.of(sub)


@router.patch(
    "/v1/webhooks/{webhook_id}",
    operation_id="updateWebhook",
    response_model=WebhookOut,
    responses=problem_responses(401, 404, 422),
    summary="Change a webhook's URL, states or filters, or enable/disable it",
)
async def update_webhook(webhook_id: str, body: WebhookUpdate, caller: Caller) -> WebhookOut:
    sub = await caller.webhooks.update(
        tenant=caller.tenant,
        subscription_id=webhook_id,
        url=body.url,
        states=body.states,
        filters=body.filters.model_dump(exclude_none=True) if body.filters else None,
        enabled=body.enabled,
    )
    return WebhookOut.of(sub)


@router.delete(
    "/v1/webhooks/{webhook_id}",
    operation_id="deleteWebhook",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses=problem_responses(401, 404),
    summary="Delete a webhook and its delivery log",
)
async def delete_webhook(webhook_id: str, caller: Caller) -> Response:
    await caller.webhooks.delete(tenant=caller.tenant, subscription_id=webhook_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    "/v1/webhooks/{webhook_id}/rotate-secret",
    operation_id="rotateWebhookSecret",
    response_model=WebhookWithSecret,
    responses=problem_responses(401, 404, 422),
    summary="Replace the signing secret; the old one keeps signing during the overlap",
)
async def rotate_webhook_secret(
    webhook_id: str, caller: Caller, body: SecretRotation | None = None
) -> WebhookWithSecret:
    body = body or SecretRotation()
    sub = await caller.webhooks.rotate(
        tenant=caller.tenant,
        subscription_id=webhook_id,
        secret=body.secret,
        overlap_seconds=body.overlap_seconds,
    )
    return WebhookWithSecret.of(sub)


@router.get(
    "/v1/webhooks/{webhook_id}/deliveries",
    operation_id="listWebhookDeliveries",
    response_model=DeliveryPage,
    responses=problem_responses(401, 404, 422),
    summary="A webhook's deliveries with their attempts, newest first",
)
async def list_webhook_deliveries(
    webhook_id: str,
    caller: Caller,
    delivery_status: Annotated[DeliveryStatus | None, Query(alias="status")] = None,
    cursor: Cursor = None,
    limit: Limit = None,
) -> DeliveryPage:
    return await _deliveries(caller, delivery_status, cursor, limit, webhook_id=webhook_id)


@router.get(
    "/v1/deliveries/{delivery_id}",
    operation_id="getDelivery",
    response_model=DeliveryOut,
    responses=problem_responses(401, 404),
    summary="One delivery with every attempt",
)
async def get_delivery(delivery_id: str, caller: Caller) -> DeliveryOut:
    found = await caller.webhooks.delivery(tenant=caller.tenant, delivery_id=delivery_id)
    return DeliveryOut.of(found)


@router.post(
    "/v1/deliveries/{delivery_id}/redeliver",
    operation_id="redeliver",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=DeliveryOut,
    responses=problem_responses(401, 404, 409),
    summary="Send a delivery again, now, with a fresh retry schedule",
    description="Same `webhook-id` and body as before, so receivers can deduplicate. "
    "409 while an attempt is in flight or when the webhook is disabled.",
)
async def redeliver(delivery_id: str, caller: Caller) -> DeliveryOut:
    again = await caller.webhooks.redeliver(tenant=caller.tenant, delivery_id=delivery_id)
    return DeliveryOut.of(again)
