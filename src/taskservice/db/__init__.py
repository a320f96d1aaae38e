"""Everything that speaks SQL, and every database connection.

- `tables` (the schema, as SQLAlchemy Core; with `tables_base` and `tables_webhooks`),
  `migrate` (alembic), `embedded`.
- `engine` (SQLAlchemy's pool, for admin paths) and `sql` (`Database`: compiled
  statements on an asyncpg pool, for hot paths); `notify` (LISTEN/NOTIFY and the
  connections outside the pools); `outage` (one warning per fault).
- Stores, one per table family: `tasks` (`TaskStore`: tasks and their events, with
  `eventlog`, `rows`, `task_pages`, `counts`, `cancels`, `parents`), `submits`
  (batched submits), `leases` (claim, heartbeat, release, the reaper's; the claim's
  statement in `claims`), `steps` (the step ledger: a run's messages, tool calls and
  events), `followups`, `live` (the live output of streaming runs),
  `webhook_subscriptions`, `webhook_outbox` and `webhook_deliveries`, `schedules`,
  `budgets` (model rate limits), `spend_budgets` and `spend_alerts` (spend budgets
  and their 80% and 100% alerts), `retention`, `keys`, `overview` (a tenant at a
  glance).

What a write fires, besides its own rows: every INSERT into `task_events` runs two
triggers (see `notify`): `task_events_notify` NOTIFYs `taskservice_events`, and
`task_events_webhook_outbox` writes the matching `webhook_deliveries` rows (with the
task's snapshot) and NOTIFYs `taskservice_webhooks`. Every state change writes its
event in the same statement, so it notifies and queues its webhooks atomically.
Likewise a budget alert: the `spend_budgets` trigger writes it into `spend_alerts`
and NOTIFYs `taskservice_spend`, and the `spend_alerts` trigger writes its
`webhook_deliveries` rows (a tenant's budget only) and NOTIFYs `taskservice_webhooks`,
in the statement that reached the threshold.
"""

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from taskservice.db.outage import OUTAGE, REFUSED, refused
from taskservice.domain.errors import DatabaseUnavailable

# What a background loop may treat as "retry later" (it logs and carries on).
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    DatabaseUnavailable,
    SQLAlchemyError,
    OSError,
    *REFUSED,
)


def is_unavailable(exc: BaseException) -> bool:
    """The database cannot be reached right now (down, restarted, refusing connections,
    pool exhausted): the request did not happen and may be retried. Anything else is a
    bug."""
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    if refused(exc):
        return True
    return isinstance(
        exc, DatabaseUnavailable | OperationalError | InterfaceError | PoolTimeout | OSError
    )


T = TypeVar("T")

# Connections a process holds besides its main pool (`DB_POOL_SIZE`).
# SQLAlchemy's engine: API keys, readiness and service secrets, low-rate paths (key
# lookups are cached).
ENGINE_POOL_SIZE = 4
CLAIM_POOL_SIZE = 2  # sessions that keep generic plans: the worker's claims (`sql`)


def connections(pool_size: int, *, workers: bool, live_output: bool) -> dict[str, int]:
    """The most database connections one process opens, by what holds them: for an
    operator sizing `max_connections` (docs/guides/operations.md says the same; `serve` warns when
    its processes could exceed it). Each pool opens connections as load needs them
    and keeps them; a start also opens one for migrations, closed before serving."""
    held = {"pool": pool_size, "engine": ENGINE_POOL_SIZE, "listen": 1}
    if workers:
        held |= {"claims": CLAIM_POOL_SIZE, "heartbeat": 1}
        if live_output:
            held["live_output"] = 1
    return held


def unsent(exc: BaseException) -> bool:
    """No connection could be had: the statement never reached the database, so
    running it again cannot do anything twice (`DatabaseUnavailable.unsent`)."""
    return isinstance(exc, DatabaseUnavailable) and exc.unsent


async def retried(
    call: Callable[[], Awaitable[T]],
    *,
    where: str,
    within: float,
    when: Callable[[BaseException], bool] = is_unavailable,
) -> T:
    """`call()`, tried again with backoff (50 ms, doubling to 2 s) while it fails with
    a database fault that `when` accepts, for up to `within` seconds; then that
    fault is raised. Each failure is reported to `OUTAGE` as `where`'s."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    delay = 0.05
    while True:
        try:
            return await call()
        except TRANSIENT_ERRORS as exc:
            OUTAGE.failed(where, exc)
            if not when(exc) or loop.time() + delay > deadline:
                raise
        await asyncio.sleep(delay)
        delay = min(delay * 2, 2.0)
