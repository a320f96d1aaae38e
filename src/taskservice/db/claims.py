"""The claim: which tasks a worker takes, and in what order. Claimable tasks are
shared out fairly across tenants (each tenant's share within its free slots under
the per-tenant cap), in claim order within a tenant (priority, then `run_at`, then
age), and each becomes `running` under a new (owner, attempt) lease. `LeaseStore`
(`leases.py`) runs the statement; a claim under a per-tenant cap holds `CLAIM_LOCK`.

Two modules are named `claims`, one claim seen from two layers: this one is the claim's
SQL (storage); `worker/claims.py` is the loop that runs claims, of tasks (through
`LeaseStore`) and of webhook deliveries (`db/webhook_outbox.py`).
"""

from __future__ import annotations

from sqlalchemy import bindparam, text
from sqlalchemy.types import Integer, Interval, Text

from taskservice.db.eventlog import NEXT_SEQ, append_events
from taskservice.db.sql import Statement


def _claimable(alias: str = "") -> str:
    """Must match the predicate of the ix_tasks_claimable index."""
    p = f"{alias}." if alias else ""
    return (
        f"(NOT {p}delayed AND {p}paused IS NULL AND ({p}state = 'pending'"
        f" OR ({p}state = 'running' AND {p}lease_owner IS NULL)))"
    )


# Claim up to :p_limit tasks, fairly across tenants: walk the tenants that have
# claimable tasks (a loose index scan over ix_tasks_claimable), give each a share of
# :p_limit within its free slots under the per-tenant cap, and lock that many of its
# first tasks in claim order (highest priority, then earliest run_at, then oldest),
# skipping rows other claimers hold — a tenant with a deep backlog gets its share
# like everyone else, whatever the priorities within it. A claim may return fewer
# than :p_limit while work remains (a tenant had less than its share): the pool
# claims again. Tasks submitted for later are out of it until their time (`delayed`),
# paused tasks until they are resumed (`paused`: `db/pauses.py`).
# Pending tasks become running; running tasks without an owner (input arrived, or
# a lease expired, throttled and due) are taken over. Attempt grows. A throttled
# task's reserved model request slot (`paid_slot`) goes to the run that claims it,
# once (returned as `paid`, cleared in the row).
# Every tenant with claimable work is visited per claim: fine for tens of tenants
# with backlogs at once; thousands would want a rotating window.
_CLAIMED_EVENT = append_events(
    type="CASE WHEN t.prior_state = 'pending' THEN 'state_change' ELSE 'claimed' END",
    data="""jsonb_build_object('from', t.prior_state, 'to', 'running',
                              'worker', t.lease_owner, 'attempt', t.attempt)""",
)
CLAIM = Statement(
    text(f"""
WITH RECURSIVE tenants AS (
    (SELECT tenant FROM tasks WHERE {_claimable()} ORDER BY tenant LIMIT 1)
    UNION ALL
    SELECT (SELECT t.tenant FROM tasks t
            WHERE {_claimable("t")}
              AND t.tenant > tenants.tenant
            ORDER BY t.tenant LIMIT 1)
    FROM tenants WHERE tenants.tenant IS NOT NULL
),
free AS (
    SELECT tenant,
           CASE WHEN CAST(:p_cap AS integer) IS NULL THEN :p_limit
                ELSE :p_cap - (SELECT count(*) FROM tasks r
                               WHERE r.tenant = tenants.tenant AND r.state = 'running'
                                 AND r.lease_owner IS NOT NULL)
           END AS slots
    FROM tenants WHERE tenant IS NOT NULL
),
budget AS (
    -- :p_limit shared out as evenly as it goes, the remainder to tenants in random
    -- order (so no tenant is always last); never more than a tenant's free slots.
    SELECT tenant, slots,
           least(slots, :p_limit / count(*) OVER ()
                        + CASE WHEN row_number() OVER (ORDER BY random())
                                    <= :p_limit % count(*) OVER () THEN 1 ELSE 0 END
           ) AS quota
    FROM free
),
picks AS (
    -- Locked per tenant, so the scan skips rows other claimers hold and goes on.
    SELECT p.id, p.prior_state, p.paid, p.ready_at, b.tenant
    FROM budget b CROSS JOIN LATERAL (
        -- ready_at: since when it is claimable (pending since its last change of
        -- state or its run_at; released: since its last event), for the claim latency.
        SELECT id, state AS prior_state, paid_slot AS paid,
               CASE WHEN state = 'pending' THEN greatest(status_at, run_at)
                    ELSE greatest(updated_at, wake_at) END AS ready_at
        FROM tasks
        WHERE tasks.tenant = b.tenant AND {_claimable("tasks")}
        ORDER BY priority DESC, run_at, id
        LIMIT greatest(b.quota, 0)
        FOR UPDATE SKIP LOCKED
    ) p
),
c AS (
    SELECT id, prior_state, paid, ready_at FROM picks
),
t AS (
    UPDATE tasks SET
        state = 'running',
        lease_owner = :p_owner,
        lease_expires_at = now() + :p_lease,
        attempt = tasks.attempt + 1,
        paid_slot = NULL,
        {NEXT_SEQ},
        started_at = coalesce(tasks.started_at, now()),
        updated_at = now()
    FROM c WHERE tasks.id = c.id
      -- The rows by their key: `c` is estimated at :p_limit rows, and on a table of
      -- up to some 10,000 tasks the planner would join it by reading every task.
      AND tasks.id = ANY(ARRAY(SELECT id FROM c))
    RETURNING tasks.*, c.prior_state, c.paid, extract(epoch FROM now() - c.ready_at) AS waited
),
e AS (
{_CLAIMED_EVENT}
),
filled AS (
    -- Whether another claim now may find more: some tenant got its whole share,
    -- which its cap did not bound. Otherwise every tenant's claimable tasks were
    -- taken (or are being taken by other claimers), and what becomes claimable
    -- later is announced.
    SELECT coalesce(bool_or(n.picked >= b.quota AND b.quota > 0
                            AND (CAST(:p_cap AS integer) IS NULL OR b.quota < b.slots)),
                    false) AS more
    FROM budget b JOIN (SELECT tenant, count(*) AS picked FROM picks GROUP BY tenant) n
         ON n.tenant = b.tenant
)
SELECT t.*, filled.more FROM t JOIN e ON e.task_id = t.id CROSS JOIN filled
ORDER BY t.priority DESC, t.run_at, t.id
""").bindparams(
        bindparam("p_cap", type_=Integer),
        bindparam("p_limit", type_=Integer),
        bindparam("p_owner", type_=Text),
        bindparam("p_lease", type_=Interval),
    ),
    # Planned afresh on every claim, it cost more to plan than to run.
    generic_plan=True,
)

# Claims that must respect a per-tenant cap exactly run one at a time: the count
# of running tasks must be read after the previous claimer committed.
CLAIM_LOCK = 0x7A5C_C1A1  # arbitrary, stable: "taskservice claim"
