"""Builds the concrete objects from settings, starts them, stops them in reverse.

The app factory and the CLI are the only callers: this is the composition root.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pydantic_ai.models import Model
from sqlalchemy.ext.asyncio import AsyncEngine

from taskservice.agents.catalog import AgentCatalog, load_plugins
from taskservice.agents.tools import ToolFunction
from taskservice.common import metrics
from taskservice.common.tracing import Tracing
from taskservice.db import ENGINE_POOL_SIZE, migrate
from taskservice.db.budgets import BudgetStore
from taskservice.db.embedded import resolve_database_url
from taskservice.db.engine import create_engine
from taskservice.db.eventlog import EventLog
from taskservice.db.keys import ApiKeyStore, service_secret
from taskservice.db.leases import LeaseStore
from taskservice.db.live import ASKED_CHANNEL, LiveStore
from taskservice.db.notify import KEYS_CHANNEL
from taskservice.db.retention import RetentionStore, retention_policy
from taskservice.db.schedules import ScheduleStore
from taskservice.db.sql import Database
from taskservice.db.steps import LedgerStore
from taskservice.db.tasks import TaskStore
from taskservice.db.webhook_deliveries import DeliveryLog
from taskservice.db.webhook_outbox import OutboxStore
from taskservice.db.webhook_subscriptions import SubscriptionStore
from taskservice.following.deltas import LiveFeed
from taskservice.following.hub import EventHub, TaskWatchers, Watermark
from taskservice.settings import Settings
from taskservice.usecases.auth import Authenticator
from taskservice.usecases.routing import MessageRouter
from taskservice.usecases.schedules import ScheduleService
from taskservice.usecases.subscriptions import WebhookService
from taskservice.usecases.tasks import TaskService
from taskservice.usecases.tokens import StreamTokens
from taskservice.worker.executor import Executor
from taskservice.worker.live_output import LiveWriter, QuietRuns
from taskservice.worker.pool import WorkerPool
from taskservice.worker.pruner import Pruner
from taskservice.worker.reaper import Reaper
from taskservice.worker.scheduler import Scheduler
from taskservice.worker.webhook_dispatcher import Dispatcher, PushFormats

if TYPE_CHECKING:  # loaded only where a profile delegates (`_delegator`)
    from taskservice.worker.delegation import Delegator

log = logging.getLogger(__name__)


def _delegator(catalog: AgentCatalog) -> Delegator | None:
    """What runs the tasks of remote (`a2a`) profiles, when there are any: only then
    is the A2A SDK loaded, about 8 MiB of every process that does."""
    if all(profile.remote is None for profile in catalog.profiles.values()):
        return None
    from taskservice.worker.delegation import Delegator

    return Delegator(catalog.settings)


@dataclass
class Runtime:
    settings: Settings
    database_url: str
    engine: AsyncEngine
    store: TaskStore
    keys: ApiKeyStore
    auth: Authenticator
    catalog: AgentCatalog
    service: TaskService
    router: MessageRouter
    tokens: StreamTokens
    hub: EventHub
    watermark: Watermark
    pool: WorkerPool | None
    webhooks: WebhookService
    dispatcher: Dispatcher | None
    schedules: ScheduleService
    started_at: float = field(default_factory=time.time)  # what this process serves dates from

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        settings: Settings,
        *,
        api: bool = True,
        workers: bool = True,
        models: Mapping[str, Model] | None = None,
        tools: Mapping[str, ToolFunction] | None = None,
        migrate_schema: bool = True,
        push_formats: PushFormats | None = None,
    ) -> AsyncIterator[Runtime]:
        """`push_formats`: how the dispatcher writes A2A push notifications (given by
        the A2A transport, `a2a.push.FORMATS`, which sits above the runtime)."""
        url = await resolve_database_url(settings)
        if migrate_schema:
            await migrate.upgrade(url)
        async with AsyncExitStack() as stack:
            # The engine serves migrations and admin paths; the hot paths run on `db`.
            engine = create_engine(url, pool_size=ENGINE_POOL_SIZE)
            stack.push_async_callback(engine.dispose)
            db = await stack.enter_async_context(Database(url, pool_size=settings.db_pool_size))
            store = TaskStore(db)
            event_log = EventLog(db)
            ledger = LedgerStore(
                db, log_cap=settings.max_log_lines, log_chars=settings.max_log_chars
            )
            live = LiveStore(db)
            # First, so that a process that lives only briefly still reaps.
            reaper = Reaper(
                leases=LeaseStore(db), ledger=ledger, tasks=store, settings=settings, live=live
            )
            reaper.start()
            stack.push_async_callback(reaper.stop)
            policy = retention_policy(settings)
            retention = RetentionStore(db)
            if policy.prunes:
                pruner = Pruner(retention, policy, interval=settings.retention_interval_seconds)
                pruner.start()
                stack.push_async_callback(pruner.stop)
            keys = ApiKeyStore(engine)
            plugin_models, plugin_tools = load_plugins(settings.plugins)
            tracing = Tracing(settings.otel)
            catalog = AgentCatalog(
                settings,
                models={**plugin_models, **(models or {})},
                tools={**plugin_tools, **(tools or {})},
                tracing=tracing,
            )
            stack.push_async_callback(catalog.aclose)
            auth = Authenticator(keys, settings)
            if api and await auth.check_startup():
                log.warning(
                    "OPEN development mode (%s): requests without a key act as tenant 'default' "
                    "(listening on %s only)",
                    "TASKSERVICE_AUTH_MODE=open"
                    if settings.auth_mode == "open"
                    else "no API key has been created yet",
                    settings.host,
                )
            hub = EventHub(url)
            # A key created or revoked anywhere holds at once here (and after a
            # reconnect, whatever happened meanwhile).
            hub.on_channel(KEYS_CHANNEL, lambda _payload: auth.forget())
            hub.on_reconnect(auth.forget)
            dispatcher: Dispatcher | None = None
            if settings.webhooks_enabled:
                # Made before the hub starts, which then LISTENs on its channel too.
                dispatcher = Dispatcher(
                    store=OutboxStore(db),
                    tasks=store,
                    hub=hub,
                    settings=settings,
                    push_formats=push_formats,
                    tracing=tracing,
                )
            feed = LiveFeed(hub, live)  # before the hub starts: it LISTENs for deltas too
            quiet_runs: QuietRuns | None = None
            if workers and settings.delta_interval_ms > 0:
                # A stream's ask for a quiet task's output reaches the run, wherever.
                quiet_runs = QuietRuns()
                hub.on_channel(ASKED_CHANNEL, quiet_runs.heard)
                hub.on_reconnect(quiet_runs.all_asked)
            await hub.start()
            stack.push_async_callback(hub.stop)
            watchers = TaskWatchers(hub)
            watermark = Watermark(
                hub,
                event_log.ids_after,
                gap_timeout=settings.event_gap_timeout,
                poll_interval=settings.stream_poll_seconds,
            )
            # Start a little back, so events still in flight at start are not skipped.
            # Ids below what retention pruned are gaps for good, not commits to wait for.
            pruned_before = await retention.events_pruned_before()
            await watermark.start(max(0, await event_log.latest_id() - 1000, pruned_before - 1))
            stack.push_async_callback(watermark.stop)
            webhooks = WebhookService(SubscriptionStore(db), DeliveryLog(db), settings)
            service = TaskService(
                store=store,
                log=event_log,
                ledger=ledger,
                catalog=catalog,
                settings=settings,
                watchers=watchers,
                webhooks=webhooks,
                live=feed,
                tracing=tracing,
            )
            # Tasks for later become claimable when their time comes; schedules fire.
            schedule_store = ScheduleStore(db)
            schedules = ScheduleService(schedule_store, service.new_tasks)
            scheduler = Scheduler(schedule_store, fire=schedules.fire_due)
            scheduler.start()
            stack.push_async_callback(scheduler.stop)
            pool: WorkerPool | None = None
            if workers:
                writer = None
                if settings.delta_interval_ms > 0:
                    # A connection of its own: live output never waits behind the
                    # pool's queue when every connection is taken (a burst of runs
                    # and streams starting), nor makes the pool's users wait.
                    own = await stack.enter_async_context(Database(url, pool_size=1))
                    writer = LiveWriter(
                        LiveStore(own),
                        interval=settings.delta_interval_ms / 1000,
                        quiet=quiet_runs,
                    )
                    stack.push_async_callback(writer.stop)  # after the pool stopped
                catalog.announce()
                budgets = None
                if settings.rate_limits:
                    budgets = BudgetStore(db)
                    await budgets.configure(settings.rate_limits.values())
                    for limit in settings.rate_limits.values():
                        log.info("rate limit %s", limit.describe())
                pool = WorkerPool(
                    service=service,
                    leases=LeaseStore(db),
                    ledger=ledger,
                    executor=Executor(
                        catalog, live=writer, budgets=budgets, delegator=_delegator(catalog)
                    ),
                    hub=hub,
                    settings=settings,
                    database_url=url,
                    tracing=tracing,
                )
                await pool.start()
                stack.push_async_callback(pool.stop)
                scheduler.on_due(pool.wake)
            if dispatcher is not None:
                await dispatcher.start()
                stack.push_async_callback(dispatcher.stop)
            if settings.metrics_port is not None:
                await stack.enter_async_context(
                    metrics.serving(
                        settings.metrics_host,
                        settings.metrics_port,
                        service.queue,
                        within=settings.metrics_cache_seconds,
                    )
                )
            router_model = (
                catalog.model_for(settings.router_model) if settings.router_model else None
            )
            yield cls(
                settings=settings,
                database_url=url,
                engine=engine,
                store=store,
                keys=keys,
                auth=auth,
                catalog=catalog,
                service=service,
                router=MessageRouter(service, model=router_model),
                tokens=StreamTokens(
                    settings.stream_token_secret or await service_secret(engine, "stream_tokens")
                ),
                hub=hub,
                watermark=watermark,
                pool=pool,
                webhooks=webhooks,
                schedules=schedules,
                dispatcher=dispatcher,
            )
