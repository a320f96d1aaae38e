"""SQLAlchemy Core tables: the whole data model of DESIGN.md.

Alembic migrations create these; `tests/integration/test_migrations.py` proves the
migrated schema and this metadata are identical. Every table and the `metadata`
holding them are importable from here: the webhook tables are defined in
`tables_webhooks`, and what all tables share (the metadata, the timestamp type, the
`created_at` column) in `tables_base`.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Date,
    Float,
    ForeignKey,
    Identity,
    Index,
    Integer,
    Numeric,
    PrimaryKeyConstraint,
    SmallInteger,
    Table,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, UUID

from taskservice.db.tables_base import TZ, created, metadata
from taskservice.db.tables_webhooks import (
    webhook_attempts,
    webhook_deliveries,
    webhook_subscriptions,
)
from taskservice.domain.states import TaskState

__all__ = [
    "agent_pauses",
    "api_keys",
    "metadata",
    "rate_budgets",
    "retention_marks",
    "schedules",
    "service_secrets",
    "spend_alerts",
    "spend_budgets",
    "task_calls",
    "task_events",
    "task_followups",
    "task_live",
    "task_messages",
    "tasks",
    "usage_contexts",
    "usage_daily",
    "webhook_attempts",
    "webhook_deliveries",
    "webhook_subscriptions",
]

_STATES = ", ".join(f"'{s.value}'" for s in TaskState)


tasks = Table(
    "tasks",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("tenant", Text, nullable=False),
    Column("state", Text, nullable=False),
    Column("input", JSONB, nullable=False),
    Column("result", JSONB),
    Column("error", JSONB),
    Column("agent", JSONB, nullable=False),  # {profile, system_prompt, model}
    Column("metadata", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("parent_id", UUID(as_uuid=True), ForeignKey("tasks.id", ondelete="SET NULL")),
    # Spawned to outlive its parent: not cancelled when the parent fails or is cancelled.
    Column("detached", Boolean, nullable=False, server_default=text("false")),
    # W3C trace context headers of the span it continues (tracing on), else NULL.
    Column("trace_context", JSONB),
    # Claimed higher first (-1000 … 1000), then by run_at, then FIFO by id.
    Column("priority", SmallInteger, nullable=False, server_default=text("0")),
    # Not claimed before this; the submission time unless asked later. NULL only on
    # tasks finished before migration 0015 (read as their creation time).
    Column("run_at", TZ, server_default=func.now()),
    # Submitted for later and its time has not come yet: out of the claim index
    # until the scheduler clears it (worker/scheduler.py).
    Column("delayed", Boolean, nullable=False, server_default=text("false")),
    # When a delayed task becomes claimable: a pending task's run_at, a throttled
    # task's budget slot (migration 0018).
    Column("wake_at", TZ),
    # The model request budget a throttled task reserved for its next request
    # (`worker/budget.py`): {keys, tokens, slot}; taken by the claim that resumes it.
    Column("paid_slot", JSONB),
    # Submitted by a call that waits without a stream (A2A SendMessage, MCP): its
    # model requests are not streamed until a stream asks for its live output
    # (migration 0019).
    Column("quiet", Boolean, nullable=False, server_default=text("false")),
    # Delegated to a remote A2A agent (an `a2a` profile): {agent, message_id, task_id}
    # of the remote task, the message id written before it is sent (migration 0020).
    Column("remote", JSONB),
    # Forked from that task's first `forked_at` messages (migration 0022,
    # `usecases/forks.py`); NULL once the source is deleted (the fork keeps its copy).
    Column("forked_from", UUID(as_uuid=True), ForeignKey("tasks.id", ondelete="SET NULL")),
    Column("forked_at", Integer),
    # Held (migration 0023, `usecases/pauses.py`): {by, at, reason, scope} of the pause,
    # `scope` "task" (paused alone) or "agent" (its profile's brake); NULL: not held.
    # The claim never takes a paused task.
    Column("paused", JSONB),
    # Its budget (migration 0027, `domain/budgets.py`): US dollars (exact), and input +
    # output tokens of its own model requests; NULL: not limited.
    Column("max_cost", Numeric),
    Column("max_tokens", BigInteger),
    Column("context_id", Text),
    Column("idempotency_key", Text),
    Column("request_hash", Text),  # what the idempotency key was first used with
    Column("attempt", Integer, nullable=False, server_default=text("0")),  # claims so far
    # Leases that expired: when one expires with no attempt left, the task fails.
    Column("lost_attempts", Integer, nullable=False, server_default=text("0")),
    Column("max_attempts", Integer, nullable=False),
    Column("timeout_seconds", Float),  # per attempt; null: the worker's default
    Column("lease_owner", Text),
    Column("lease_expires_at", TZ),
    Column("cancel_reason", Text),
    Column("input_request", JSONB),
    Column("usage", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    # Last event sequence number; bumped by the same UPDATE that writes an event, so
    # sequences per task have no gaps and need no extra lock.
    Column("event_seq", Integer, nullable=False, server_default=text("0")),
    # `log` lines offered so far, written or not: at most settings.max_log_lines are
    # kept, then one saying the rest were dropped (db/eventlog.capped_events).
    Column("log_lines", Integer, nullable=False, server_default=text("0")),
    created(),
    Column("updated_at", TZ, nullable=False, server_default=func.now()),  # any event
    # When the state last changed (set by a trigger, migration 0007): A2A's status time.
    Column("status_at", TZ, nullable=False, server_default=func.now()),
    Column("started_at", TZ),
    Column("finished_at", TZ),
    # Follow-up messages queued for the task (`task_followups`), and how many of them
    # its runs have written into the conversation (migration 0009).
    Column("followups", Integer, nullable=False, server_default=text("0")),
    Column("followups_read", Integer, nullable=False, server_default=text("0")),
    CheckConstraint(f"state IN ({_STATES})", name="state_valid"),
    CheckConstraint("max_attempts >= 1", name="max_attempts_positive"),
    CheckConstraint("priority BETWEEN -1000 AND 1000", name="priority_range"),
    CheckConstraint("max_cost > 0", name="max_cost_positive"),
    CheckConstraint("max_tokens > 0", name="max_tokens_positive"),
    Index(
        "uq_tasks_tenant_idempotency_key",
        "tenant",
        "idempotency_key",
        unique=True,
        postgresql_where=text("idempotency_key IS NOT NULL"),
    ),
    # The claim query: pending tasks whose time has come, and running tasks without an
    # owner (input given, released, recovered, throttled and due), none of them paused,
    # walked per tenant so that one tenant's backlog cannot starve the others, in claim
    # order within it.
    Index(
        "ix_tasks_claimable",
        "tenant",
        text("priority DESC"),
        "run_at",
        "id",
        postgresql_where=text(
            "NOT delayed AND paused IS NULL"
            " AND (state = 'pending' OR (state = 'running' AND lease_owner IS NULL))"
        ),
    ),
    # The scheduler: tasks submitted for later and throttled tasks, by when they may run.
    Index(
        "ix_tasks_delayed",
        "wake_at",
        postgresql_where=text("delayed AND state IN ('pending', 'running')"),
    ),
    # The per-tenant cap: running tasks per tenant.
    Index(
        "ix_tasks_running_tenant",
        "tenant",
        postgresql_where=text("state = 'running' AND lease_owner IS NOT NULL"),
    ),
    # The queue's gauges (metrics, across tenants): the live tasks, by state, oldest
    # first; few rows whatever the number of finished tasks.
    Index(
        "ix_tasks_live_state",
        "state",
        "id",
        postgresql_where=text("state IN ('pending', 'running', 'input_required')"),
    ),
    # Retention: the roots of finished task trees, in id order (db/retention.py).
    Index(
        "ix_tasks_finished_roots",
        "id",
        postgresql_where=text(
            "parent_id IS NULL AND state IN ('completed', 'failed', 'cancelled')"
        ),
    ),
    # Approval deadlines: waiting tasks by when nobody answering decides for them
    # (migration 0024, `db/approvals.py`).
    Index(
        "ix_tasks_input_deadline",
        "wake_at",
        postgresql_where=text("state = 'input_required' AND wake_at IS NOT NULL"),
    ),
    # The reaper: running tasks ordered by lease expiry.
    Index(
        "ix_tasks_lease_expiry",
        "lease_expires_at",
        postgresql_where=text("state = 'running' AND lease_owner IS NOT NULL"),
    ),
    # Listing, newest first, per tenant and optionally per state / context / parent.
    Index("ix_tasks_tenant_id", "tenant", text("id DESC")),
    Index("ix_tasks_tenant_state_id", "tenant", "state", text("id DESC")),
    Index(
        "ix_tasks_tenant_context_id",
        "tenant",
        "context_id",
        text("id DESC"),
        postgresql_where=text("context_id IS NOT NULL"),
    ),
    Index("ix_tasks_parent_id", "parent_id", postgresql_where=text("parent_id IS NOT NULL")),
    # Lineage: the forks of a task, newest first (and the foreign key's deletes).
    Index(
        "ix_tasks_forked_from",
        "forked_from",
        text("id DESC"),
        postgresql_where=text("forked_from IS NOT NULL"),
    ),
    # Paused tasks, newest first (`GET /v1/tasks?paused=true`): few rows, whatever the
    # number of tasks.
    Index(
        "ix_tasks_tenant_paused_id",
        "tenant",
        text("id DESC"),
        postgresql_where=text("paused IS NOT NULL"),
    ),
    # By agent profile (migration 0017): a profile whose tasks are old is not a walk
    # through every newer task.
    Index("ix_tasks_tenant_agent_id", "tenant", text("(agent ->> 'profile')"), text("id DESC")),
    # A2A's ListTasks: by status time, newest first (scanned backwards).
    Index("ix_tasks_tenant_status_at", "tenant", "status_at", "id"),
)

# The operators' brake (migration 0023, `usecases/pauses.py`): an agent profile held
# for a tenant; its tasks are paused, and a task submitted to it is created paused.
agent_pauses = Table(
    "agent_pauses",
    metadata,
    Column("tenant", Text, primary_key=True),
    Column("profile", Text, primary_key=True),
    Column("paused_by", Text, nullable=False),
    Column("reason", Text),
    Column("at", TZ, nullable=False, server_default=func.now()),
)

# Model rate limits (migration 0018, `common/rate_limits.py`): each budget's GCRA state,
# shared by every process.
rate_budgets = Table(
    "rate_budgets",
    metadata,
    Column("key", Text, primary_key=True),  # a model or a provider
    Column("requests", Float),  # per requests_period seconds; null: not limited
    Column("requests_period", Float, nullable=False, server_default=text("60")),
    Column("tokens", Float),
    Column("tokens_period", Float, nullable=False, server_default=text("60")),
    # Theoretical arrival times: the budget is used up to these.
    Column("requests_tat", TZ, nullable=False, server_default=func.now()),
    Column("tokens_tat", TZ, nullable=False, server_default=func.now()),
    Column("blocked_until", TZ, nullable=False, server_default=func.now()),  # a 429's
    Column("updated_at", TZ, nullable=False, server_default=func.now()),
)

# Recurring schedules (migration 0016): each slot of `cron` in `timezone` starts a task
# from the `task` template, exactly once across replicas (worker/scheduler.py).
schedules = Table(
    "schedules",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("tenant", Text, nullable=False),
    Column("name", Text),  # optional, unique per tenant
    Column("cron", Text, nullable=False),
    Column("timezone", Text, nullable=False),
    Column("task", JSONB, nullable=False),  # the submit fields each slot's task gets
    Column("enabled", Boolean, nullable=False, server_default=text("true")),
    Column("missed", Text, nullable=False, server_default=text("'latest'")),
    # The next slot to fire (NULL while disabled): the scheduler's due index.
    Column("next_run_at", TZ),
    Column("last_slot", TZ),
    Column("last_task_id", UUID(as_uuid=True)),
    Column("last_error", JSONB),  # why the last slot started no task
    # Waiting for the tenant's spend budget (migration 0026): not due before this.
    Column("held_until", TZ),
    created(),
    Column("updated_at", TZ, nullable=False, server_default=func.now()),
    CheckConstraint("missed IN ('skip', 'latest', 'all')", name="missed_valid"),
    Index("ix_schedules_tenant_id", "tenant", text("id DESC")),
    Index(
        "uq_schedules_tenant_name",
        "tenant",
        "name",
        unique=True,
        postgresql_where=text("name IS NOT NULL"),
    ),
    Index("ix_schedules_due", "next_run_at", postgresql_where=text("enabled")),
)

task_events = Table(
    "task_events",
    metadata,
    # Global, monotonically increasing: the firehose cursor.
    Column("id", BigInteger, Identity(always=True), primary_key=True),
    Column(
        "task_id", UUID(as_uuid=True), ForeignKey("tasks.id", ondelete="CASCADE"), nullable=False
    ),
    Column("tenant", Text, nullable=False),
    Column("seq", Integer, nullable=False),
    Column("type", Text, nullable=False),
    Column("data", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    created(),
    UniqueConstraint("task_id", "seq"),
    Index("ix_task_events_tenant_id", "tenant", "id"),
)

task_messages = Table(
    "task_messages",
    metadata,
    Column("id", BigInteger, Identity(always=True), primary_key=True),
    Column(
        "task_id", UUID(as_uuid=True), ForeignKey("tasks.id", ondelete="CASCADE"), nullable=False
    ),
    Column("position", Integer, nullable=False),
    Column("kind", Text, nullable=False),  # request | response
    Column("message", JSONB, nullable=False),  # one complete pydantic-ai ModelMessage
    Column("attempt", Integer, nullable=False),
    created(),
    UniqueConstraint("task_id", "position"),
)

# The model response a run is streaming now, per part, as far as it has streamed
# (`db/live.py`): where a stream opened mid-message starts. UNLOGGED (ephemeral: the
# complete message is persisted in `task_messages`), and without a foreign key, so a
# flush never locks the task's row; the reaper sweeps rows of tasks no longer running.
task_live = Table(
    "task_live",
    metadata,
    Column("task_id", UUID(as_uuid=True), nullable=False),
    Column("part", Integer, nullable=False),  # the part's index in the response
    Column("attempt", Integer, nullable=False),
    Column("position", Integer, nullable=False),  # the response's, in task_messages
    Column("kind", Text, nullable=False),  # text | tool_call | thinking
    Column("tool", Text),  # a tool call's name
    Column("text", Text, nullable=False),
    PrimaryKeyConstraint("task_id", "part"),
    prefixes=["UNLOGGED"],
)

# Messages sent to a live task, queued for its run (1, 2, … per task); `key`: the
# sender's, so that a retry finds the message it sent (unique per task).
task_followups = Table(
    "task_followups",
    metadata,
    Column(
        "task_id", UUID(as_uuid=True), ForeignKey("tasks.id", ondelete="CASCADE"), nullable=False
    ),
    Column("seq", Integer, nullable=False),
    Column("input", JSONB, nullable=False),
    Column("key", Text),
    created(),
    PrimaryKeyConstraint("task_id", "seq"),
    UniqueConstraint("task_id", "key"),
)

task_calls = Table(
    "task_calls",
    metadata,
    Column("id", BigInteger, Identity(always=True), primary_key=True),
    Column(
        "task_id", UUID(as_uuid=True), ForeignKey("tasks.id", ondelete="CASCADE"), nullable=False
    ),
    Column("tool_call_id", Text, nullable=False),
    Column("name", Text, nullable=False),
    Column("arguments", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("status", Text, nullable=False),
    Column("result", JSONB),
    Column("error", Text),
    # A call that waited for a person's approval: the decision (approved, by, at,
    # arguments, reason), written as the task resumes (migration 0024).
    Column("approval", JSONB),
    Column("attempt", Integer, nullable=False),
    created(),
    Column("started_at", TZ),
    Column("finished_at", TZ),
    CheckConstraint(
        "status IN ('pending', 'in_progress', 'completed', 'failed')", name="status_valid"
    ),
    UniqueConstraint("task_id", "tool_call_id"),
)

# What the pruner leaves for readers: `events_pruned_before` (db/retention.py).
retention_marks = Table(
    "retention_marks",
    metadata,
    Column("name", Text, primary_key=True),
    Column("value", BigInteger, nullable=False),
)

api_keys = Table(
    "api_keys",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("tenant", Text, nullable=False),
    Column("name", Text),
    Column("prefix", Text, nullable=False),  # shown in listings; never the whole key
    Column("key_hash", Text, nullable=False, unique=True),
    created(),
    Column("revoked_at", TZ),
    # An operator's key (migration 0026; made by `taskservice keys create --admin`
    # only): it may also call the admin routes, e.g. set a tenant's spend budget.
    Column("admin", Boolean, nullable=False, server_default=text("false")),
)

service_secrets = Table(
    "service_secrets",
    metadata,
    # Secrets every replica shares (e.g. the stream-token signing key), made by a
    # migration so that no operator has to configure them.
    Column("name", Text, primary_key=True),
    Column("value", Text, nullable=False),
    created(),
)


def _sums() -> list[Column[object]]:
    return [
        Column(name, kind, nullable=False, server_default=text("0"))
        for name, kind in (
            ("input_tokens", BigInteger),
            ("output_tokens", BigInteger),
            ("requests", BigInteger),
            ("cost", Numeric),
            ("unpriced_requests", BigInteger),
        )
    ]


# Spend as it is written (migration 0025, `db/usage.py`): kept by a trigger on
# `tasks` from each change of a task's `usage`, per tenant, UTC day, profile and model.
usage_daily = Table(
    "usage_daily",
    metadata,
    Column("tenant", Text, primary_key=True),
    Column("day", Date, primary_key=True),
    Column("agent", Text, primary_key=True),  # the profile ('' when the task had none)
    Column("model", Text, primary_key=True),
    *_sums(),
)
# The same, per context as well ('' for tasks without one): read to group by context.
usage_contexts = Table(
    "usage_contexts",
    metadata,
    Column("tenant", Text, primary_key=True),
    Column("day", Date, primary_key=True),
    Column("context_id", Text, primary_key=True),
    Column("agent", Text, primary_key=True),
    Column("model", Text, primary_key=True),
    *_sums(),
)

# Spend budgets (migration 0026, `db/spend_budgets.py`): a tenant's or an agent
# profile's limits per UTC day or month, and what was spent (reserved, then settled)
# in the current period; shared by every process.
spend_budgets = Table(
    "spend_budgets",
    metadata,
    Column("key", Text, primary_key=True),  # tenant:<name> or agent:<profile>
    Column("tenant", Text),  # a tenant's budget: whose (null: a profile's)
    Column("period", Text, nullable=False),
    Column("max_cost", Numeric),  # USD; null: no limit in money
    Column("max_tokens", BigInteger),  # null: no limit in tokens
    Column("period_start", TZ, nullable=False, server_default=text("'-infinity'")),
    Column("spent_cost", Numeric, nullable=False, server_default=text("0")),
    Column("spent_tokens", BigInteger, nullable=False, server_default=text("0")),
    # A request was refused for want of room this period: submits are refused too.
    Column("exhausted", Boolean, nullable=False, server_default=text("false")),
    Column("alerted", SmallInteger, nullable=False, server_default=text("0")),  # 0, 80, 100
    Column("source", Text, nullable=False),  # settings (the default) or admin
    Column("set_by", Text),
    Column("updated_at", TZ, nullable=False, server_default=func.now()),
    CheckConstraint("period IN ('day', 'month')", name="period_valid"),
    CheckConstraint("source IN ('settings', 'admin')", name="source_valid"),
)
# A budget reaching 80% and 100% (or exhausted), once each per period: noted by the
# `spend_budgets` trigger, sent to the tenant's webhooks subscribed to them.
spend_alerts = Table(
    "spend_alerts",
    metadata,
    Column("id", BigInteger, Identity(always=True), primary_key=True),
    Column("key", Text, nullable=False),
    Column("tenant", Text),
    Column("period_start", TZ, nullable=False),
    Column("threshold", SmallInteger, nullable=False),
    Column("spent_cost", Numeric, nullable=False),
    Column("spent_tokens", BigInteger, nullable=False),
    Column("max_cost", Numeric),
    Column("max_tokens", BigInteger),
    Column("at", TZ, nullable=False, server_default=func.now()),
    # The budget's period as the alert was noted (migration 0028, a trigger fills it).
    Column("period", Text),
    # When a process counted it in the metrics and logged it (`db/spend_alerts.py`):
    # one process does, once.
    Column("counted_at", TZ),
    UniqueConstraint("key", "period_start", "threshold"),
    Index("ix_spend_alerts_id", "id", postgresql_where=text("counted_at IS NULL")),
)
