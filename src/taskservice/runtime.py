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

from taskservice.agents.catalog import AgentCatalog
from taskservice.agents.profiles import load_plugins
from taskservice.agents.tools import ToolFunction
from taskservice.common import logs, metrics
from taskservice.common.tracing import Tracing
from taskservice.db import ENGINE_POOL_SIZE
from taskservice.db.budgets import BudgetStore
from taskservice.db.embedded import describe_database, resolve_database_url
from taskservice.db.engine import Engine, create_engine
from taskservice.db.eventlog import EventLog
from taskservice.db.followups import FollowupStore
from taskservice.db.keys import ApiKeyStore, service_secret
from taskservice.db.leases import LeaseStore
from taskservice.db.live import ASKED_CHANNEL, LiveStore
from taskservice.db.notify import KEYS_CHANNEL
from taskservice.db.retention import RetentionStore, retention_policy
from taskservice.db.schedules import ScheduleStore
from taskservice.db.spend_alerts import SpendAlertStore
from taskservice.db.spend_budgets import SpendBudgetStore
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
from taskservice.usecases.inbox import TaskInbox
from taskservice.usecases.routing import MessageRouter
from taskservice.usecases.schedules import ScheduleService
from taskservice.usecases.spend import SpendControl
from taskservice.usecases.submission import NewTasks
from taskservice.usecases.subscriptions import WebhookService
from taskservice.usecases.tasks import TaskService
from taskservice.usecases.tokens import StreamTokens
from taskservice.worker.executor import Executor
from taskservice.worker.live_output import LiveWriter, QuietRuns
from taskservice.worker.pool import WorkerPool
from taskservice.worker.pruner import Pruner
from taskservice.worker.reaper import Reaper
from taskservice.worker.scheduler import Scheduler
from taskservice.worker.spend_alerts import BudgetAlerts
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
class _Storage:
    """The database's side: the connections and every store made on them."""

    url: str
    engine: Engine  # migrations and admin paths; the hot paths run on `db`
    db: Database
    tasks: TaskStore
    events: EventLog
    ledger: LedgerStore
    live: LiveStore
    retention: RetentionStore
    keys: ApiKeyStore

    @classmethod
    async def open(cls, stack: AsyncExitStack, url: str, settings: Settings) -> _Storage:
        engine = create_engine(url, pool_size=ENGINE_POOL_SIZE)
        stack.push_async_callback(engine.dispose)
        db = await stack.enter_async_context(Database(url, pool_size=settings.db_pool_size))
        return cls(
            url=url,
            engine=engine,
            db=db,
            tasks=TaskStore(db),
            events=EventLog(db),
            ledger=LedgerStore(
                db, log_cap=settings.max_log_lines, log_chars=settings.max_log_chars
            ),
            live=LiveStore(db),
            retention=RetentionStore(db),
            keys=ApiKeyStore(engine),
        )


def _upkeep(stack: AsyncExitStack, storage: _Storage, settings: Settings) -> None:
    """The reaper, first, so that a process that lives only briefly still reaps; the
    pruner, when retention is on."""
    reaper = Reaper(
        leases=LeaseStore(storage.db),
        ledger=storage.ledger,
        tasks=storage.tasks,
        settings=settings,
        live=storage.live,
    )
    reaper.start()
    stack.push_async_callback(reaper.stop)
    policy = retention_policy(settings)
    if policy.prunes:
        pruner = Pruner(storage.retention, policy, interval=settings.retention_interval_seconds)
        pruner.start()
        stack.push_async_callback(pruner.stop)


async def _authenticator(
    storage: _Storage, settings: Settings, *, api: bool
) -> tuple[Authenticator, str | None]:
    """The authenticator, and why requests without a key are served, if they are."""
    auth = Authenticator(storage.keys, settings)
    if not (api and await auth.check_startup()):
        return auth, None
    why = (
        "TASKSERVICE_AUTH_MODE=open"
        if settings.auth_mode == "open"
        else "no API key has been created yet"
    )
    open_mode = (
        f"OPEN development mode ({why}): requests without a key act as tenant 'default' "
        f"(listening on {settings.host} only)"
    )
    log.warning("%s", open_mode, extra=logs.STARTUP)
    return auth, open_mode


@dataclass
class _Following:
    """The process's event hub and what hangs on it: the task watchers, the
    firehose's watermark, the live output's feed (and the quiet runs' asks)."""

    hub: EventHub
    watchers: TaskWatchers
    watermark: Watermark
    feed: LiveFeed
    quiet_runs: QuietRuns | None

    @classmethod
    async def open(
        cls,
        stack: AsyncExitStack,
        hub: EventHub,
        storage: _Storage,
        settings: Settings,
        *,
        auth: Authenticator,
        workers: bool,
    ) -> _Following:
        """Starts `hub`: everything that LISTENs through it is made before (the
        webhook dispatcher, given it, too)."""
        # A key created or revoked anywhere holds at once here (and after a
        # reconnect, whatever happened meanwhile).
        hub.on_channel(KEYS_CHANNEL, lambda _payload: auth.forget())
        hub.on_reconnect(auth.forget)
        feed = LiveFeed(hub, storage.live)
        quiet_runs: QuietRuns | None = None
        if workers and settings.delta_interval_ms > 0:
            # A stream's ask for a quiet task's output reaches the run, wherever.
            quiet_runs = QuietRuns()
            hub.on_channel(ASKED_CHANNEL, quiet_runs.heard)
            hub.on_reconnect(quiet_runs.all_asked)
        await hub.start()
        stack.push_async_callback(hub.stop)
        watermark = Watermark(
            hub,
            storage.events.ids_after,
            gap_timeout=settings.event_gap_timeout,
            poll_interval=settings.stream_poll_seconds,
        )
        # Start a little back, so events still in flight at start are not skipped.
        # Ids below what retention pruned are gaps for good, not commits to wait for.
        pruned_before = await storage.retention.events_pruned_before()
        await watermark.start(max(0, await storage.events.latest_id() - 1000, pruned_before - 1))
        stack.push_async_callback(watermark.stop)
        return cls(hub, TaskWatchers(hub), watermark, feed, quiet_runs)


def _catalog(
    stack: AsyncExitStack,
    settings: Settings,
    *,
    models: Mapping[str, Model] | None,
    tools: Mapping[str, ToolFunction] | None,
    tracing: Tracing,
) -> AgentCatalog:
    """The agent profiles, with the plugins' models and tools and those given."""
    plugin_models, plugin_tools = load_plugins(settings.plugins)
    catalog = AgentCatalog(
        settings,
        models={**plugin_models, **(models or {})},
        tools={**plugin_tools, **(tools or {})},
        tracing=tracing,
    )
    stack.push_async_callback(catalog.aclose)
    return catalog


@dataclass
class _UseCases:
    """What the transports and the runners act through."""

    service: TaskService
    inbox: TaskInbox
    webhooks: WebhookService
    schedules: ScheduleService
    schedule_store: ScheduleStore  # the scheduler's
    spend: SpendControl  # the spend budgets: submits refused, runs reserving

    @classmethod
    def make(
        cls,
        storage: _Storage,
        settings: Settings,
        catalog: AgentCatalog,
        following: _Following,
        tracing: Tracing,
    ) -> _UseCases:
        webhooks = WebhookService(SubscriptionStore(storage.db), DeliveryLog(storage.db), settings)
        spend = SpendControl(
            SpendBudgetStore(storage.db),
            default=settings.tenant_budget,
            profiles={p.name: p.budget for p in catalog.profiles.values() if p.budget},
        )
        # What a new task is made of, checked: for submits and schedules' slots alike.
        new_tasks = NewTasks(
            store=storage.tasks, catalog=catalog, settings=settings, tracing=tracing, spend=spend
        )
        service = TaskService(
            store=storage.tasks,
            log=storage.events,
            ledger=storage.ledger,
            catalog=catalog,
            settings=settings,
            watchers=following.watchers,
            webhooks=webhooks,
            live=following.feed,
            tracing=tracing,
            new_tasks=new_tasks,
        )
        # Messages to a task: answers to its questions, follow-ups for its run.
        inbox = TaskInbox(
            store=storage.tasks,
            followups=FollowupStore(storage.db),
            settings=settings,
            get=service.get,
        )
        schedule_store = ScheduleStore(storage.db)
        return cls(
            service=service,
            inbox=inbox,
            webhooks=webhooks,
            schedules=ScheduleService(schedule_store, new_tasks),
            schedule_store=schedule_store,
            spend=spend,
        )


async def _worker_pool(
    stack: AsyncExitStack,
    storage: _Storage,
    settings: Settings,
    *,
    service: TaskService,
    inbox: TaskInbox,
    catalog: AgentCatalog,
    following: _Following,
    tracing: Tracing,
    spend: SpendControl,
) -> WorkerPool:
    writer = None
    if settings.delta_interval_ms > 0:
        # A connection of its own: live output never waits behind the pool's queue
        # when every connection is taken (a burst of runs and streams starting), nor
        # makes the pool's users wait.
        own = await stack.enter_async_context(Database(storage.url, pool_size=1))
        writer = LiveWriter(
            LiveStore(own),
            interval=settings.delta_interval_ms / 1000,
            quiet=following.quiet_runs,
        )
        stack.push_async_callback(writer.stop)  # after the pool stopped
    catalog.announce()
    budgets = None
    if settings.rate_limits:
        budgets = BudgetStore(storage.db)
        await budgets.configure(settings.rate_limits.values())
        for limit in settings.rate_limits.values():
            log.info("rate limit %s", limit.describe(), extra=logs.STARTUP)
    pool = WorkerPool(
        service=service,
        inbox=inbox,
        leases=LeaseStore(storage.db),
        ledger=storage.ledger,
        executor=Executor(
            catalog, live=writer, budgets=budgets, delegator=_delegator(catalog), spend=spend
        ),
        hub=following.hub,
        settings=settings,
        database_url=storage.url,
        tracing=tracing,
    )
    await pool.start()
    stack.push_async_callback(pool.stop)
    return pool


@dataclass(frozen=True)
class Startup:
    """What a process's start found: `serve` says it in one block (`serving`)."""

    database: str  # the embedded server, or the configured URL without its password
    schema: str | None  # what the migration did, when this process migrated
    open_mode: str | None  # why requests without a key are served, when they are
    model: str  # the default model
    workers: int  # how many runs at once; 0: no workers in this process
    webhooks: bool  # whether this process delivers webhooks
    rate_limits: tuple[str, ...] = ()  # the model rate limits in force, described


@dataclass
class Runtime:
    settings: Settings
    database_url: str
    engine: Engine
    store: TaskStore
    keys: ApiKeyStore
    auth: Authenticator
    catalog: AgentCatalog
    service: TaskService
    inbox: TaskInbox
    router: MessageRouter
    tokens: StreamTokens
    hub: EventHub
    watermark: Watermark
    pool: WorkerPool | None
    webhooks: WebhookService
    dispatcher: Dispatcher | None
    schedules: ScheduleService
    spend: SpendControl
    startup: Startup
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
        """Storage, upkeep (reaper, pruner), the agents, access, the event hub and
        following, the use cases, then the runners; each stopped in reverse.
        `push_formats`: how the dispatcher writes A2A push notifications (given by
        the A2A transport, `a2a.push.FORMATS`, which sits above the runtime)."""
        url = await resolve_database_url(settings)
        schema = None
        if migrate_schema:
            # alembic is imported here, not with the app: `serve`'s processes, which
            # the supervisor migrated for, never load it (0.15-0.25 s of each start).
            from taskservice.db import migrate

            schema = (await migrate.upgrade(url)).describe()
            log.info("database %s", schema, extra=logs.STARTUP)
        async with AsyncExitStack() as stack:
            storage = await _Storage.open(stack, url, settings)
            _upkeep(stack, storage, settings)
            tracing = Tracing(settings.otel)
            catalog = _catalog(stack, settings, models=models, tools=tools, tracing=tracing)
            auth, open_mode = await _authenticator(storage, settings, api=api)
            hub = EventHub(url)
            dispatcher: Dispatcher | None = None
            if settings.webhooks_enabled:
                dispatcher = Dispatcher(
                    store=OutboxStore(storage.db),
                    tasks=storage.tasks,
                    hub=hub,
                    settings=settings,
                    push_formats=push_formats,
                    tracing=tracing,
                )
            # Every process counts and logs the budget alerts it is first to see.
            budget_alerts = BudgetAlerts(SpendAlertStore(storage.db), hub)
            following = await _Following.open(
                stack, hub, storage, settings, auth=auth, workers=workers
            )
            budget_alerts.start()
            stack.push_async_callback(budget_alerts.stop)
            cases = _UseCases.make(storage, settings, catalog, following, tracing)
            await cases.spend.start()
            # Tasks for later become claimable when their time comes; schedules fire.
            scheduler = Scheduler(
                cases.schedule_store,
                fire=cases.schedules.fire_due,
                expire=cases.inbox.approvals.expire,
            )
            scheduler.start()
            stack.push_async_callback(scheduler.stop)
            pool: WorkerPool | None = None
            if workers:
                pool = await _worker_pool(
                    stack,
                    storage,
                    settings,
                    service=cases.service,
                    inbox=cases.inbox,
                    catalog=catalog,
                    following=following,
                    tracing=tracing,
                    spend=cases.spend,
                )
                scheduler.on_due(pool.wake)
            if dispatcher is not None:
                await dispatcher.start()
                stack.push_async_callback(dispatcher.stop)
            if settings.metrics_port is not None:
                await stack.enter_async_context(
                    metrics.serving(
                        settings.metrics_host,
                        settings.metrics_port,
                        cases.service.queue,
                        within=settings.metrics_cache_seconds,
                    )
                )
            router_model = (
                catalog.model_for(settings.router_model) if settings.router_model else None
            )
            yield cls(
                settings=settings,
                database_url=url,
                engine=storage.engine,
                store=storage.tasks,
                keys=storage.keys,
                auth=auth,
                catalog=catalog,
                service=cases.service,
                inbox=cases.inbox,
                router=MessageRouter(cases.service, cases.inbox, model=router_model),
                tokens=StreamTokens(
                    settings.stream_token_secret
                    or await service_secret(storage.engine, "stream_tokens")
                ),
                hub=following.hub,
                watermark=following.watermark,
                pool=pool,
                webhooks=cases.webhooks,
                schedules=cases.schedules,
                spend=cases.spend,
                dispatcher=dispatcher,
                startup=Startup(
                    database=describe_database(settings, url),
                    schema=schema,
                    open_mode=open_mode,
                    model=catalog.describe_model(),
                    workers=settings.worker_concurrency if workers else 0,
                    rate_limits=tuple(
                        limit.describe() for limit in (settings.rate_limits or {}).values()
                    ),
                    webhooks=dispatcher is not None,
                ),
            )
