"""The webhook dispatcher: claims due deliveries and makes one attempt at each.

Runs in every process that has it enabled; all of them share the outbox through
`SKIP LOCKED` claims. An attempt: take the delivery's body, or render it from the task
as it was at the state change (the snapshot the outbox trigger stored), or from the
budget alert (`spend_alerts`, never changed once noted), and save it before sending
anything, so every attempt of a `webhook-id` sends the same bytes, even
after a dispatcher died mid-attempt; check the target again (SSRF: DNS answers
change), sign with every secret in force, POST to a checked address, then log the
attempt and settle the delivery in one transaction. A 2xx within the timeout
succeeds; 410 disables the subscription; anything else is retried on the schedule, or
later if the receiver said so with `Retry-After`. A dispatcher that dies mid-attempt
leaves a lease that runs out, and another dispatcher makes the next attempt: delivery
is at-least-once, and receivers deduplicate on `webhook-id`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import ssl
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import httpcore
from opentelemetry.trace import SpanKind

from taskservice.common import logs
from taskservice.common.metrics import WEBHOOK_ATTEMPTS, WEBHOOK_DURATION
from taskservice.common.tracing import Tracing, failed
from taskservice.db import TRANSIENT_ERRORS
from taskservice.db.notify import WEBHOOKS_CHANNEL
from taskservice.db.outage import OUTAGE
from taskservice.db.tasks import TaskStore
from taskservice.db.webhook_outbox import Claimed, OutboxStore, Outcome
from taskservice.domain.ids import new_worker_id
from taskservice.domain.models import Task
from taskservice.domain.views import TaskOut
from taskservice.domain.webhooks import BudgetAlert
from taskservice.following.hub import EventHub
from taskservice.settings import Settings
from taskservice.webhooks import signing
from taskservice.webhooks.http import Answer, Sender
from taskservice.webhooks.targets import AllowList, Resolver, UnsafeTarget, resolve, system_resolver
from taskservice.worker.claims import ClaimLoop

log = logging.getLogger(__name__)

LEASE_MARGIN = 30.0  # seconds an attempt's lease outlasts the HTTP timeout
_TRANSPORT_ERRORS = (
    httpcore.TimeoutException,
    httpcore.NetworkError,
    httpcore.ProtocolError,
    httpcore.UnsupportedProtocol,
    ssl.SSLError,
    OSError,
)


# An A2A push notification's body, by the protocol version of its config: the task
# in that version's shapes (given by the transport that owns them, `a2a.push`).
PushFormats = Mapping[str, Callable[[Task], str]]
A2A_JSON = "application/a2a+json"


def render(claimed: Claimed, task: TaskOut) -> str:
    """The body: what happened, when, and the task as the API shows it."""
    body = {
        "type": f"task.{claimed.state}",
        "timestamp": claimed.occurred_at.astimezone(UTC).isoformat(),
        "data": {
            "delivery_id": str(claimed.id),
            "subscription_id": str(claimed.subscription_id),
            "state": claimed.state,
            "event_seq": claimed.event_seq,
            "task": task.model_dump(mode="json"),
        },
    }
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False)


def render_alert(claimed: Claimed, alert: BudgetAlert) -> str:
    """A budget alert's body: the event, when it was noted, and the budget's figures
    then (money as exact decimal strings, in USD)."""
    body = {
        "type": alert.event.value,
        "timestamp": alert.at.astimezone(UTC).isoformat(),
        "data": {
            "delivery_id": str(claimed.id),
            "subscription_id": str(claimed.subscription_id),
            "alert_id": alert.id,
            "threshold": alert.threshold,
            "budget": alert.budget(),
        },
    }
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False)


def a2a_headers(config: Mapping[str, Any]) -> dict[str, str]:
    """The config's token, echoed for the receiver to check, and its credentials."""
    headers = {}
    if config.get("token"):
        headers["X-A2A-Notification-Token"] = str(config["token"])
    authentication = config.get("authentication") or {}
    if authentication.get("scheme"):
        credentials = authentication.get("credentials") or ""
        headers["Authorization"] = f"{authentication['scheme']} {credentials}".strip()
    return headers


def describe(answer: Answer) -> str | None:
    """The delivery log's error for an answer; None for a success."""
    code = answer.status_code
    if 200 <= code < 300:
        return None
    if 300 <= code < 400:
        return f"HTTP {code}: redirect to {answer.location!r} not followed"
    if code == 410:
        return "HTTP 410 Gone: the receiver asked for no more deliveries"
    return f"HTTP {code}"


class Dispatcher:
    def __init__(
        self,
        *,
        store: OutboxStore,
        tasks: TaskStore,
        hub: EventHub,
        settings: Settings,
        resolver: Resolver = system_resolver,
        push_formats: PushFormats | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self.tracing = tracing or Tracing(False)
        self.store = store
        self.tasks = tasks
        self.settings = settings
        self.push_formats = push_formats or {}
        self.dispatcher_id = new_worker_id()
        self._resolver = resolver
        self._allow = AllowList.parse(settings.webhook_allow_targets)
        self._sender = Sender(
            timeout=settings.webhook_timeout_seconds,
            max_idle_per_origin=settings.webhook_concurrency,
        )
        self._lease = settings.webhook_timeout_seconds + LEASE_MARGIN
        self._inflight: dict[uuid.UUID, tuple[asyncio.Task[None], Claimed]] = {}
        self._claims = ClaimLoop(
            "webhook claim",
            capacity=settings.webhook_concurrency,
            busy=lambda: len(self._inflight),
            claim=self._claim,
            start=self._start,
            poll_interval=settings.poll_interval,
        )
        # Before the hub starts: it LISTENs on the channels registered by then.
        hub.on_channel(WEBHOOKS_CHANNEL, lambda _payload: self._claims.wake())
        hub.on_reconnect(self._claims.wake)

    async def start(self) -> None:
        self._claims.start()
        log.info(
            "webhook dispatcher %s started: %d in flight, timeout %.0fs",
            self.dispatcher_id,
            self.settings.webhook_concurrency,
            self.settings.webhook_timeout_seconds,
            extra=logs.STARTUP,
        )

    async def stop(self) -> None:
        """Stop claiming; give attempts in flight a little time; release the rest."""
        await self._claims.stop()
        inflight = dict(self._inflight)
        if inflight:
            grace = min(self.settings.shutdown_grace_seconds, self.settings.webhook_timeout_seconds)
            _, unfinished = await asyncio.wait([t for t, _ in inflight.values()], timeout=grace)
            for attempt, claimed in inflight.values():
                if attempt in unfinished:
                    attempt.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await attempt
                    with contextlib.suppress(*TRANSIENT_ERRORS):
                        await self.store.release(claimed, dispatcher=self.dispatcher_id)
        await self._sender.aclose()

    async def _claim(self, limit: int) -> tuple[list[tuple[Claimed, str | None]], bool]:
        """Up to `limit` due deliveries, each with its body (None: the task is gone,
        and its deliveries with it); and whether to claim again at once (when some
        were claimed: a delivery falls due without an announcement)."""
        claimed = await self.store.claim(
            dispatcher=self.dispatcher_id, limit=limit, lease_seconds=self._lease
        )
        try:
            payloads = await self._render(claimed)
        except TRANSIENT_ERRORS:
            # Claimed but not attempted: the leases run out, and they are retried.
            log.info("could not prepare the bodies of %d deliveries", len(claimed))
            raise
        return [(delivery, payloads.get(delivery.id)) for delivery in claimed], bool(claimed)

    def _start(self, claimed: tuple[Claimed, str | None]) -> None:
        delivery, payload = claimed
        if payload is not None:
            attempt = asyncio.create_task(
                self._attempt(delivery, payload), name=f"hook-{delivery.id}"
            )
            self._inflight[delivery.id] = (attempt, delivery)

    async def _attempt(self, claimed: Claimed, payload: str) -> None:
        logs.annotate(task_id=claimed.task_id, tenant=claimed.tenant, worker=self.dispatcher_id)
        try:
            about: dict[str, str | int] = {
                "taskservice.delivery_id": str(claimed.id),
                "taskservice.attempt": claimed.attempt,
                "url.full": claimed.url,
            }
            if claimed.task_id is not None:
                about["taskservice.task_id"] = str(claimed.task_id)
            attempt = self.tracing.span(
                "webhook.attempt", claimed.trace_context, kind=SpanKind.CLIENT, attributes=about
            )
            with attempt as span:
                outcome = await self._send(claimed, payload)
                if span is not None:
                    if outcome.status_code is not None:
                        span.set_attribute("http.response.status_code", outcome.status_code)
                    if outcome.error is not None:
                        failed(span, outcome.error)
            WEBHOOK_DURATION.observe(outcome.duration_ms / 1000)
            WEBHOOK_ATTEMPTS.labels(_attempt_outcome(outcome)).inc()
            won = await self.store.record(
                claimed,
                outcome,
                dispatcher=self.dispatcher_id,
                disable_after_seconds=self.settings.webhook_disable_after_seconds,
            )
            if not won:
                log.warning(
                    "delivery %s: attempt %d was settled elsewhere", claimed.id, claimed.attempt
                )
            elif not outcome.succeeded:
                _log_failure(claimed, outcome)
        except TRANSIENT_ERRORS as exc:
            # Not recorded: the lease runs out and the delivery is attempted again.
            OUTAGE.failed(f"delivery {claimed.id}", exc)
            log.info("delivery %s: could not record attempt %d", claimed.id, claimed.attempt)
        finally:
            self._inflight.pop(claimed.id, None)
            self._claims.wake()  # a slot is free, and a later state may now be due

    async def _render(self, claimed: list[Claimed]) -> dict[uuid.UUID, str]:
        """Each delivery's body, saved before its first send. A new one is rendered
        from the task as it was at the state change, or from the budget alert; a
        delivery queued before snapshots existed (migration 0005) from the task as it
        is now, once."""
        payloads = {c.id: c.payload for c in claimed if c.payload is not None}
        fresh = [c for c in claimed if c.payload is None]
        if not fresh:
            return payloads
        rendered: dict[uuid.UUID, str] = {}
        alerted = [c for c in fresh if c.alert_id is not None]
        if alerted:
            alerts = await self.store.alerts([c.id for c in alerted])
            rendered |= {c.id: render_alert(c, alerts[c.id]) for c in alerted if c.id in alerts}
        fresh = [c for c in fresh if c.task_id is not None]
        tasks = await self.store.snapshots([c.id for c in fresh if c.has_snapshot])
        legacy = [c.task_id for c in fresh if c.task_id is not None and not c.has_snapshot]
        if legacy:
            current = await self.tasks.get_many(list(set(legacy)))
            tasks |= {
                c.id: current[c.task_id]
                for c in fresh
                if not c.has_snapshot and c.task_id in current
            }
        rendered |= {c.id: self._body(c, tasks[c.id]) for c in fresh if c.id in tasks}
        payloads |= await self.store.fix_payloads(rendered)
        return payloads

    def _body(self, claimed: Claimed, task: Task) -> str:
        push = self.push_formats.get(claimed.a2a["version"]) if claimed.a2a else None
        return push(task) if push is not None else render(claimed, TaskOut.of(task))

    async def _send(self, claimed: Claimed, payload: str) -> Outcome:
        started_at = datetime.now(UTC)
        clock = time.perf_counter()
        answer: Answer | None = None
        error: str | None
        try:
            target = await resolve(
                claimed.url,
                allow=self._allow,
                allow_http=self.settings.webhook_allow_http,
                resolver=self._resolver,
            )
            body = payload.encode()
            headers = signing.headers(
                claimed.secrets, message_id=str(claimed.id), timestamp=int(time.time()), body=body
            )
            self.tracing.inject(headers)  # the attempt's span: the receiver's trace goes on
            content_type = "application/json"
            if claimed.a2a is not None:  # what A2A asks of a push notification
                headers |= a2a_headers(claimed.a2a)
                content_type = A2A_JSON
            answer = await self._sender.post(target, body, headers, content_type=content_type)
            error = describe(answer)
        except UnsafeTarget as exc:
            error = f"target refused: {exc}"
        except TimeoutError:
            error = f"no answer within {self.settings.webhook_timeout_seconds:g} s"
        except _TRANSPORT_ERRORS as exc:
            error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        except Exception as exc:
            log.exception(
                "delivery %s: attempt %d failed unexpectedly", claimed.id, claimed.attempt
            )
            error = f"internal error: {type(exc).__name__}"
        duration_ms = (time.perf_counter() - clock) * 1000
        succeeded = error is None
        gone = answer is not None and answer.status_code == 410
        retry_in = None
        if not succeeded and not gone:
            retry_in = self.next_delay(
                claimed.schedule_step + 1, answer.retry_after if answer else None
            )
        return Outcome(
            started_at=started_at,
            duration_ms=duration_ms,
            status_code=answer.status_code if answer else None,
            error=error,
            succeeded=succeeded,
            retry_in=retry_in,
            disable_reason="the receiver answered 410 Gone" if gone else None,
        )

    def next_delay(self, failures: int, retry_after: float | None) -> float | None:
        """Seconds before the next attempt after `failures` failed ones; None when the
        schedule is used up."""
        schedule = self.settings.webhook_retry_schedule
        if failures >= len(schedule):
            return None
        jitter = self.settings.webhook_jitter
        delay = schedule[failures] * random.uniform(1 - jitter, 1 + jitter)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.settings.webhook_max_retry_after_seconds))
        return delay


def _log_failure(claimed: Claimed, outcome: Outcome) -> None:
    """A failed attempt, one line: what came back, and what follows (the line carries
    the task, tenant and dispatcher: `logs.annotate` in `_attempt`)."""
    what = f"HTTP {outcome.status_code}" if outcome.status_code is not None else outcome.error
    kind = _attempt_outcome(outcome)
    if kind == "retrying":
        log.info(
            "delivery %s: attempt %d failed (%s); next in %.0fs",
            claimed.id,
            claimed.attempt,
            what,
            outcome.retry_in,
        )
    elif kind == "gone":
        log.warning("delivery %s: the receiver is gone (%s): webhook disabled", claimed.id, what)
    else:
        log.warning(
            "delivery %s: attempt %d failed (%s); given up", claimed.id, claimed.attempt, what
        )


def _attempt_outcome(outcome: Outcome) -> str:
    """The webhook attempts metric's label."""
    if outcome.succeeded:
        return "delivered"
    if outcome.disable_reason is not None:
        return "gone"
    return "retrying" if outcome.retry_in is not None else "given_up"
