"""Everything that speaks SQL, and every database connection.

- `tables` (the schema, as SQLAlchemy Core), `migrate` (alembic), `embedded`.
- `engine` (SQLAlchemy's pool, for admin paths) and `sql` (`Database`: compiled
  statements on an asyncpg pool, for hot paths); `notify` (LISTEN/NOTIFY and the
  connections outside the pools); `outage` (one warning per fault).
- Stores, one per table family: `store` (tasks and their events), `submits` (batched
  submits), `leases` (claim, heartbeat, release, reaper), `ledger` (a run's messages
  and tool calls), `webhooks` (subscriptions and the delivery outbox), `keys`,
  `live` (the live output of streaming runs), `overview` (a tenant at a glance).

What a write fires, besides its own rows: every INSERT into `task_events` runs two
triggers (see `notify`): `task_events_notify` NOTIFYs `taskservice_events`, and
`task_events_webhook_outbox` writes the matching `webhook_deliveries` rows (with the
task's snapshot) and NOTIFYs `taskservice_webhooks`. Every state change writes its
event in the same statement, so it notifies and queues its webhooks atomically.
"""

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from taskservice.errors import DatabaseUnavailable

# What a background loop may treat as "retry later" (it logs and carries on).
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    DatabaseUnavailable,
    SQLAlchemyError,
    OSError,
)


def is_unavailable(exc: BaseException) -> bool:
    """The database cannot be reached right now (down, restarted, pool exhausted): the
    request did not happen and may be retried. Anything else is a bug."""
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    return isinstance(
        exc, DatabaseUnavailable | OperationalError | InterfaceError | PoolTimeout | OSError
    )
