"""Typed settings, read from `TASKSERVICE_*` environment variables.

Built by `get_settings()` (never at import time) so tests and the CLI can make their
own.
"""

from __future__ import annotations

import ipaddress
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from taskservice.common.pricing import (
    PriceSetting,
    SpendLimit,
    parse_model_prices,
    parse_spend_limit,
)
from taskservice.common.rate_limits import RateLimit, parse_rate_limits

OFFLINE_MODEL = "offline"


class Settings(BaseSettings):
    """Every setting, with what it means: the documentation's configuration page
    (docs/reference/configuration.md) is made from these descriptions at build time
    (`taskservice settings --markdown` prints the same table)."""

    model_config = SettingsConfigDict(env_prefix="TASKSERVICE_", extra="ignore")

    # Storage.
    database_url: str | None = Field(
        default=None,
        description="a PostgreSQL URL (`postgresql://user:pass@host/db`); unset: an embedded "
        "PostgreSQL in `DATA_DIR` (the `embedded` extra)",
    )
    data_dir: Path = Field(
        default=Path(".taskservice"), description="where the embedded PostgreSQL keeps its data"
    )
    db_pool_size: int = Field(
        default=20,
        description="connections per process for requests and workers (plus up to 4 for "
        "admin paths, 2 for claims, one each for LISTEN, the heartbeat and live output); "
        "also how many event streams are set up at once",
    )

    # HTTP.
    host: str = Field(default="127.0.0.1", description="where `serve` listens (also `--host`)")
    port: int = Field(default=8000, description="where `serve` listens (also `--port`)")
    processes: int | None = Field(
        default=None,
        ge=1,
        description="processes `serve` runs on its port, each with the API and workers "
        "(also `--processes`); unset: one per core",
    )
    public_url: str | None = Field(
        default=None,
        description="where clients reach the service, for the A2A card's URLs, e.g. "
        "`https://tasks.example.com`; unset: each request's scheme and host "
        "(`X-Forwarded-Proto`, `-Host` and `-Prefix` honoured)",
    )
    a2a_card_v03_fields: bool = Field(
        default=True,
        description="the A2A card carries the fields 0.3 clients read it by (`url`, "
        "`preferredTransport`, the scheme's `type`), as the official SDK's does; `false`: "
        "a strict 1.0 card (the 0.3 methods still work)",
    )
    auth_mode: Literal["auto", "required", "open"] = Field(
        default="auto",
        description="`auto`: open as tenant `default` on loopback until the first key is "
        "created; `required`: every request needs a key, even with none created yet; "
        "`open`: open on loopback even with keys",
    )
    auth_cache_seconds: float = Field(
        default=5.0,
        description="how long a key lookup is trusted; creating or revoking a key notifies "
        "every process, which looks again at once, so this bounds it only when a notice is "
        "lost",
    )
    otel: bool = Field(
        default=False,
        description="OpenTelemetry traces, to the globally configured providers: FastAPI's "
        "span per request (an event stream's ends once it is set up), and one trace per "
        "task from its submit through its claims, runs, model requests, tool calls and "
        "webhook attempts, `traceparent` going out on model and webhook requests",
    )
    otel_include_content: bool = Field(
        default=False,
        description="with `OTEL`, pydantic-ai's spans carry the prompts, answers and tool "
        "arguments too (off: they may hold what tenants would not have exported)",
    )
    cors_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="origins allowed by CORS (comma-separated)"
    )

    # Input limits.
    max_body_bytes: int = Field(default=1_048_576, description="request body limit (413 beyond)")
    max_json_depth: int = Field(
        default=64,
        ge=2,
        le=200,
        description="nesting allowed in a JSON body, REST and A2A (stored JSON never nests "
        "deeper than 200)",
    )
    max_input_bytes: int = Field(default=262_144, description="a task's input (413 beyond)")
    max_metadata_bytes: int = Field(default=16_384, description="a task's metadata (413 beyond)")
    max_page_size: int = Field(default=200, description="cap on `limit`")
    default_page_size: int = Field(default=50, description="`limit` when a list asks for none")
    count_timeout_ms: int = Field(
        default=1000,
        ge=1,
        le=60_000,
        description="`?count=exact` gives up past this: `total` is null, `total_note` says why",
    )

    # Observation.
    max_wait_seconds: float = Field(
        default=60.0, description="cap on `?wait=` (long polls) and on A2A blocking sends"
    )
    mcp_call_seconds: float = Field(
        default=60.0,
        description="how long a plain MCP `tools/call` waits for its task (at most "
        "`MAX_WAIT_SECONDS`)",
    )
    stream_poll_seconds: float = Field(
        default=10.0, description="event streams re-read the tables this often without NOTIFY"
    )
    stream_ping_seconds: float = Field(
        default=15.0, description="keep-alive comments on idle event streams (0: none)"
    )
    stream_send_timeout: float = Field(
        default=30.0, description="an event stream's reader stalled this long is disconnected"
    )
    stream_retry_ms: int = Field(
        default=2000, description="the reconnect delay suggested to SSE clients (`retry:`)"
    )
    stream_token_secret: str | None = Field(
        default=None,
        description="signs stream tokens (`POST /v1/stream-tokens`); unset: a key made once "
        "and shared by every replica through the database",
    )
    event_gap_timeout: float = Field(
        default=10.0,
        description="a missing event id (a transaction not yet committed) older than this is "
        "skipped by the firehose",
    )
    log_format: Literal["text", "json"] = Field(
        default="text",
        description="`text`: readable lines; `json`: one JSON object per line, with "
        "`task_id`, `tenant`, `worker`, `attempt` and the trace's ids wherever they apply",
    )
    log_level: str = Field(
        default="info", description="`debug`, `info`, `warning` or `error` (also `--log-level`)"
    )
    metrics_port: int | None = Field(
        default=None,
        description="also serve `GET /metrics` on this port, without authentication (for "
        "a scraper on a private network; the only way a `worker` process shows its "
        "metrics); unset: only on the API's port, protected like the API",
    )
    metrics_host: str = Field(default="127.0.0.1", description="where `METRICS_PORT` listens")
    metrics_cache_seconds: float = Field(
        default=5.0,
        ge=0,
        description="the queue's gauges (tasks by state, the webhook backlog …) are read "
        "from the database at most this often, however many scrapes",
    )
    delta_interval_ms: int = Field(
        default=40,
        ge=0,
        le=10_000,
        description="live output: a streaming model's deltas reach event streams at most "
        "once per this interval per task, within a quarter of it once due; 0: none (model "
        "requests are not streamed; complete messages only)",
    )

    # Agents. Model names are pydantic-ai model strings; "offline" needs no key.
    default_model: str = Field(
        default=OFFLINE_MODEL, description="the model of tasks that name none (see Models)"
    )
    allowed_models: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: [OFFLINE_MODEL],
        description="the models a request may ask for (comma-separated; the default model "
        "always is); `offline:<seconds>` too wherever `offline` is",
    )
    default_system_prompt: str = Field(
        default="You are a helpful sub-agent. Answer the task concisely.",
        description="the default profile's system prompt",
    )
    default_tools: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["report_progress", "ask_user"],
        description="the default profile's tools",
    )
    default_request_limit: int = Field(
        default=20,
        description="model requests per run for the default profile; beyond: failed, "
        "`maximum iterations`",
    )
    default_max_cost: Decimal | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        description="the default profile's budget per task in US dollars, for tasks that "
        "set no `max_cost` (unset: none; see Budgets)",
    )
    default_max_tokens: int | None = Field(
        default=None,
        gt=0,
        description="the default profile's budget of tokens per task (input + output), for "
        "tasks that set no `max_tokens` (unset: none)",
    )
    default_fallback_model: str | None = Field(
        default=None,
        description="the default profile's fallback model, an allowed model: a request its "
        "model has no budget left for goes there when it fits (unset: none)",
    )
    budget_output_tokens: int = Field(
        default=1024,
        ge=1,
        description="the output tokens a model request is taken to produce at most, for "
        "checking budgets before it is sent, when the request sets no `max_tokens`",
    )
    default_max_attempts: int = Field(
        default=3,
        description="attempts a task may lose to workers that stop (a lease expiring) "
        "before it fails, when it sets no `max_attempts`",
    )
    agents_file: Path | None = Field(
        default=None, description="more agent profiles (TOML or JSON; see Agents)"
    )
    demo_agent: bool = Field(
        default=True,
        description="offer the built-in offline `demo` profile (REST, A2A skills, MCP "
        "tools); `false` leaves it out",
    )
    plugins: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="modules adding `TOOLS` and `MODELS` (comma-separated)"
    )
    openai_base_url: str | None = Field(
        default=None,
        description="an OpenAI-compatible server for `openai:` and `openai-chat:` models",
    )
    openai_api_key: str | None = Field(default=None, description="its key; unset: `OPENAI_API_KEY`")
    rate_limits: Annotated[dict[str, RateLimit], NoDecode] = Field(
        default_factory=dict,
        description="model rate limits shared by every process through the database, e.g. "
        "`openai:gpt-4o=500rpm,30000tpm; anthropic=50rpm` (by model or by provider; units "
        "`rpm`, `rps`, `tpm`, `tps`): a request waits for room, the task `throttled` "
        "without a worker slot, instead of meeting the provider's 429 (see Rate limits)",
    )
    model_prices: Annotated[dict[str, PriceSetting], NoDecode] = Field(
        default_factory=dict,
        description="prices of models genai-prices does not know, or priced otherwise, in USD "
        'per million tokens, as JSON: `{"openai-chat:my-llama": {"input": 0.2, "output": 0.6, '
        '"cached_input": 0.05}}` (by the task\'s model or the name the provider answers with; '
        "`cached_input` unset: as `input`); a model priced by neither is counted as unpriced, "
        "never as free (see Cost)",
    )
    tenant_budget: Annotated[SpendLimit | None, NoDecode] = Field(
        default=None,
        description="every tenant's spend budget unless an admin set its own, as JSON: "
        '`{"period": "month", "max_cost": "100", "max_tokens": 50000000}` (USD and/or tokens '
        "per UTC day or month; unset: none): a model request that would pass it is not "
        "sent (the task fails with `budget_exhausted`), and once it is spent the tenant's "
        "submits are refused with a 429 until the period ends (see Budgets)",
    )
    router_model: str | None = Field(
        default=None,
        description="the model `POST /v1/messages` asks to pick among waiting tasks; unset: "
        "the offline router",
    )

    # Workers.
    workers_enabled: bool = Field(
        default=True, description="run workers in `serve` (also `serve --no-workers`)"
    )
    worker_concurrency: int = Field(
        default=100,
        ge=1,
        description="agent runs at once per process: runs mostly wait on their model, "
        "and a waiting run holds about 118 KiB and no database connection",
    )
    delegation_concurrency: int = Field(
        default=256,
        ge=0,
        description="delegated tasks (`a2a` profiles) followed at once per process besides "
        "`WORKER_CONCURRENCY`: each waits on its remote agent with one connection; beyond "
        "this, they take worker slots",
    )
    tenant_max_running: int | None = Field(
        default=None, description="running tasks per tenant across all workers; unset: no cap"
    )
    lease_seconds: float = Field(
        default=30.0, description="a claimed task's lease; renewed every third of it"
    )
    poll_interval: float = Field(
        default=2.0, description="seconds between claim polls when no notification arrives"
    )
    outcome_retry_seconds: float = Field(
        default=30.0,
        description="how long a worker retries its outcome write, and a run waits for a "
        "connection to record a step, through a database outage",
    )
    reap_interval: float = Field(
        default=5.0,
        description="most seconds between reaper passes (jittered; sooner when a lease lapses)",
    )
    task_timeout_seconds: float = Field(
        default=600.0, description="per attempt, unless the task sets `timeout_seconds`"
    )
    stall_seconds: float = Field(
        default=120.0, description="a running task quiet this long gets a `stalled` event"
    )
    max_log_lines: int = Field(
        default=200,
        ge=0,
        le=100_000,
        description="`log` lines kept per task (then one saying the rest were dropped; 0: none)",
    )
    max_log_chars: int = Field(
        default=2000,
        ge=80,
        le=100_000,
        description="characters per `log` line (longer ones are cut, with `…`)",
    )
    shutdown_grace_seconds: float = Field(
        default=20.0, description="for runs to finish on shutdown before they are released"
    )

    # Retention.
    retention_days: float | None = Field(
        default=None,
        gt=0,
        description="finished tasks are deleted this many days after they finished, with "
        "their events, messages and deliveries, once every webhook delivery of theirs is "
        "settled (subtasks with their root); unset: kept forever",
    )
    retention_days_by_tenant: Annotated[dict[str, float], NoDecode] = Field(
        default_factory=dict,
        description="per-tenant retention in days, overriding `RETENTION_DAYS`: `acme=30,trial=1`",
    )
    retention_interval_seconds: float = Field(
        default=300.0, gt=0, description="how often a process looks for tasks to delete"
    )

    # Webhooks.
    webhooks_enabled: bool = Field(
        default=True, description="run the webhook dispatcher (also `--no-webhooks`)"
    )
    webhook_concurrency: int = Field(default=32, description="attempts in flight per process")
    webhook_timeout_seconds: float = Field(
        default=15.0, description="a 2xx must arrive within this"
    )
    webhook_retry_schedule: Annotated[list[float], NoDecode] = Field(
        default_factory=lambda: [0.0, 5, 300, 1800, 7200, 18000, 36000, 36000],
        description="seconds before attempt 1, 2, 3 … (comma-separated); its length is the "
        "number of attempts",
    )
    webhook_jitter: float = Field(
        default=0.2, ge=0, le=1, description="each delay varies by ± this fraction"
    )
    webhook_max_retry_after_seconds: float = Field(
        default=86_400.0, description="a receiver's longer `Retry-After` is capped at this"
    )
    webhook_disable_after_seconds: float = Field(
        default=5 * 86_400.0, description="a webhook failing this long is disabled"
    )
    webhook_secret_overlap_seconds: float = Field(
        default=86_400.0, description="default overlap of a rotated secret"
    )
    webhook_allow_http: bool = Field(default=False, description="allow `http://` targets")
    webhook_allow_targets: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="CIDRs admitted although internal; host names, for their "
        "private-network addresses only (comma-separated)",
    )
    webhook_max_per_task: int = Field(default=10, description="webhooks per task")

    @field_validator("retention_days_by_tenant", mode="before")
    @classmethod
    def _split_pairs(cls, value: object) -> object:
        if isinstance(value, str):
            pairs = (part.split("=", 1) for part in value.split(",") if part.strip())
            return {tenant.strip(): float(days) for tenant, days in pairs}
        return value

    @field_validator("rate_limits", mode="before")
    @classmethod
    def _parse_rate_limits(cls, value: object) -> object:
        if isinstance(value, str):
            return parse_rate_limits(value)
        return value

    @field_validator("tenant_budget", mode="before")
    @classmethod
    def _parse_tenant_budget(cls, value: object) -> object:
        if isinstance(value, str):
            return parse_spend_limit(value) if value.strip() else None
        return value

    @field_validator("model_prices", mode="before")
    @classmethod
    def _parse_model_prices(cls, value: object) -> object:
        if isinstance(value, str):
            return parse_model_prices(value) if value.strip() else {}
        return value

    @field_validator("webhook_retry_schedule", mode="before")
    @classmethod
    def _split_schedule(cls, value: object) -> object:
        if isinstance(value, str):
            return [float(part) for part in value.split(",") if part.strip()]
        return value

    @field_validator("webhook_retry_schedule")
    @classmethod
    def _schedule_usable(cls, value: list[float]) -> list[float]:
        if not value or any(delay < 0 for delay in value):
            raise ValueError("the retry schedule needs at least one delay, none negative")
        return value

    @field_validator(
        "allowed_models",
        "default_tools",
        "plugins",
        "cors_origins",
        "webhook_allow_targets",
        mode="before",
    )
    @classmethod
    def _split_csv(cls, value: object) -> object:
        # Comma-separated lists are friendlier than JSON in an environment variable.
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @model_validator(mode="after")
    def _default_model_is_allowed(self) -> Settings:
        if self.default_model not in self.allowed_models:
            self.allowed_models = [self.default_model, *self.allowed_models]
        return self

    @property
    def binds_loopback(self) -> bool:
        return is_loopback_host(self.host)


def is_loopback_host(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def get_settings(**overrides: object) -> Settings:
    return Settings(**overrides)  # type: ignore[arg-type]


def _shown(value: object) -> str:
    """A default as its environment variable would spell it."""
    if value is None or value == [] or value == {}:
        return "unset"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, int | float):
        return str(int(value) if float(value).is_integer() else value)
    if isinstance(value, list):
        return "`" + ",".join(_shown(v).strip("`") for v in value) + "`"
    return f"`{value}`"


def markdown_table() -> str:
    """The configuration table of the docs, one row per setting, from the descriptions."""
    rows = ["| variable | default | meaning |", "| --- | --- | --- |"]
    for name, field in Settings.model_fields.items():
        default = field.get_default(call_default_factory=True)
        rows.append(f"| `{name.upper()}` | {_shown(default)} | {field.description} |")
    return "\n".join(rows) + "\n"
