"""Budget alerts counted and logged, in every process (like the reaper).

The `spend_budgets` trigger notes a budget reaching 80% and 100% in `spend_alerts`
and NOTIFYs `taskservice_spend`; a tenant's alert reaches its webhooks through the
outbox by itself (migration 0028). Here each process's event hub hears the notice,
and the process takes the alerts nobody counted yet (`db/spend_alerts.py`: one
statement marks them, `SKIP LOCKED`), counts each in
`taskservice_budget_alerts_total{scope, threshold}` and logs it: a tenant's at info,
a profile's (the operators', sent to no webhook) at warning. One process counts an
alert, once, so summing the processes' counters counts each alert once. A lost
notice is made up for at the next one, at a reconnect of the hub, and every
`POLL_INTERVAL`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from taskservice.common.aio import wait_until
from taskservice.common.metrics import BUDGET_ALERTS
from taskservice.db import TRANSIENT_ERRORS
from taskservice.db.outage import OUTAGE
from taskservice.db.spend_alerts import SPEND_CHANNEL, SpendAlertStore
from taskservice.domain.webhooks import BudgetAlert
from taskservice.following.hub import EventHub

log = logging.getLogger(__name__)

POLL_INTERVAL = 30.0  # seconds: the backstop for a lost notice
_RETRY_DELAY = 1.0  # seconds, after a database error


class BudgetAlerts:
    def __init__(self, store: SpendAlertStore, hub: EventHub) -> None:
        self.store = store
        self._due = asyncio.Event()
        self._due.set()  # alerts noted while no process looked
        self._loop: asyncio.Task[None] | None = None
        # Before the hub starts: it LISTENs on the channels registered by then.
        hub.on_channel(SPEND_CHANNEL, lambda _payload: self._due.set())
        hub.on_reconnect(self._due.set)

    def start(self) -> None:
        self._loop = asyncio.create_task(self._run(), name="budget-alerts")

    async def stop(self) -> None:
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop

    async def count_new(self) -> list[BudgetAlert]:
        """Count and log the alerts no process counted yet; returns them."""
        counted = []
        while alerts := await self.store.take_uncounted():
            for alert in alerts:
                BUDGET_ALERTS.labels(alert.scope, str(alert.threshold)).inc()
                _log(alert)
            counted += alerts
        return counted

    async def _run(self) -> None:
        while True:
            await wait_until(self._due.wait(), POLL_INTERVAL)
            self._due.clear()
            try:
                await self.count_new()
            except TRANSIENT_ERRORS as exc:
                OUTAGE.failed("budget alerts", exc)
                self._due.set()
                await asyncio.sleep(_RETRY_DELAY)


def _log(alert: BudgetAlert) -> None:
    spent = [f"{alert.spent_cost} of {alert.max_cost} USD"] if alert.max_cost is not None else []
    if alert.max_tokens is not None:
        spent.append(f"{alert.spent_tokens} of {alert.max_tokens} tokens")
    line = "budget %s reached %d%% of its %s (period from %s): spent %s"
    args = (
        alert.key,
        alert.threshold,
        alert.period,
        alert.period_start.isoformat() if alert.period_start else "-",
        ", ".join(spent) or "-",
    )
    if alert.tenant is None:  # a profile's: no tenant's webhook hears of it
        log.warning(line, *args)
    else:
        log.info(line, *args, extra={"tenant": alert.tenant})
