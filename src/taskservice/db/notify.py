"""LISTEN/NOTIFY: the channels, what sends on them, and the connections outside the
pools (the LISTEN connection, the heartbeat's).

Nothing in Python sends the task events' notices: triggers do, in the transaction
that writes the row, so a notice exists exactly when its row committed.

- `taskservice_events` (`EVENTS_CHANNEL`): trigger `task_events_notify`, AFTER
  INSERT ON task_events (migration 0001), payload
  `<event id>,<task id>,<seq>,<type>,<from>,<to>,<tenant>` (`from`/`to` set on state
  changes). Every write that appends a task event therefore notifies: a submit, a
  claim, a step, an outcome, a cancel, the reaper's `recovered`.
- `taskservice_webhooks` (`WEBHOOKS_CHANNEL`): trigger `task_events_webhook_outbox`,
  AFTER INSERT ON task_events (migrations 0004, 0005), which also writes the
  `webhook_deliveries` rows (the outbox, with the task's snapshot) for every
  subscription the state change matches; `db.webhook_subscriptions` sends it too when it makes a
  delivery due by other means (a late registration, a redelivery). The
  `spend_alerts` trigger sends it as well (migration 0028), with the deliveries of a
  tenant's budget alert.
- `taskservice_spend` (`db.spend_alerts.SPEND_CHANNEL`): the `spend_budgets` trigger
  (migration 0026), payload the budget's key, when it noted an alert: every
  process's `worker/spend_alerts.BudgetAlerts` looks for alerts to count.

- `taskservice_keys` (`KEYS_CHANNEL`): an API key was created or revoked
  (`db.keys`, in that transaction): every process drops its cached key lookups, so
  a revocation, or the first key ending open mode, holds at once on every replica.
- `taskservice_deltas` (`db.live.DELTAS_CHANNEL`): live output, sent by the
  worker's flush statement itself (`db/live.py`), with the pieces in the payload;
  readers catch up from `task_live`.
- `taskservice_live_asked` (`db.live.ASKED_CHANNEL`): a stream asked for the live
  output of a quiet task (`db.live`, in the statement that clears `tasks.quiet`),
  payload the task's id: the worker running it streams its next model response.

A notice is a hint: readers catch up from the tables, so a lost one costs latency.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import asyncpg

from taskservice.db.engine import asyncpg_dsn

EVENTS_CHANNEL = "taskservice_events"
WEBHOOKS_CHANNEL = "taskservice_webhooks"
KEYS_CHANNEL = "taskservice_keys"

Callback = Callable[[Any, int, str, str], None]  # asyncpg's: (conn, pid, channel, payload)


async def connect(database_url: str) -> asyncpg.Connection:
    """A connection of its own, outside the pools (LISTEN needs one for its whole
    life; the heartbeat one that no busy pool can starve)."""
    dsn, kwargs = asyncpg_dsn(database_url)
    # Cancelled mid-handshake, asyncpg leaves a future failing unseen ("Future
    # exception was never retrieved"): let the connect finish aside, then close it.
    connecting = asyncio.ensure_future(asyncpg.connect(dsn, **kwargs))
    try:
        return await asyncio.shield(connecting)
    except asyncio.CancelledError:
        connecting.add_done_callback(_close_unwanted)
        raise


def _close_unwanted(connecting: asyncio.Future[asyncpg.Connection]) -> None:
    if not connecting.cancelled() and connecting.exception() is None:
        connecting.result().terminate()


async def listen(
    database_url: str, channels: dict[str, Callback], on_lost: Callable[[], None]
) -> asyncpg.Connection:
    """A connection LISTENing on `channels`; `on_lost` runs when it closes.

    Cancelled or failed part way (the hub stopped while it re-LISTENs after a blip),
    the new connection is closed here: nothing else holds it yet."""
    conn = await connect(database_url)
    try:
        conn.add_termination_listener(lambda _conn: on_lost())
        for channel, callback in channels.items():
            await conn.add_listener(channel, callback)
    except BaseException:
        conn.terminate()
        raise
    return conn


async def check(conn: asyncpg.Connection) -> None:
    """A round trip: finds a connection that died without a word."""
    await conn.fetchval("SELECT 1", timeout=5)
