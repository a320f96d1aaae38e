"""Typed settings, read from `TASKSERVICE_*` environment variables.

Built by `get_settings()` (never at import time) so tests and the CLI can make their
own.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

OFFLINE_MODEL = "offline"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TASKSERVICE_", extra="ignore")

    # Storage. Without a URL an embedded PostgreSQL runs in `data_dir`.
    database_url: str | None = None
    data_dir: Path = Path(".taskservice")
    db_pool_size: int = 20

    # HTTP.
    host: str = "127.0.0.1"
    port: int = 8000
    # Where clients reach the service (the agent card's URLs), e.g. https://tasks.example.com;
    # else each request's scheme and host (X-Forwarded-Proto, -Host and -Prefix honoured).
    public_url: str | None = None
    # The agent card carries the fields 0.3 clients read it by (`url`,
    # `preferredTransport`, the scheme's `type`), as the official SDK's does; off: a
    # strict 1.0 card, for deployments without 0.3 clients (the 0.3 methods still work).
    a2a_card_v03_fields: bool = True
    # `auto`: open as tenant "default" while no API key exists, on loopback only.
    # `required`: every request needs a key, even with none created yet.
    auth_mode: Literal["auto", "required", "open"] = "auto"
    auth_cache_seconds: float = 5.0  # how long a key lookup is trusted (revocation delay)
    # FastAPI's native OpenTelemetry (spans and metrics to the global providers). Off
    # unless asked for: looking the providers up costs every request.
    otel: bool = False

    # Input limits.
    max_body_bytes: int = 1_048_576
    # JSON bodies may nest this deep (`jsonvalues`; stored JSON never nests deeper
    # than jsonvalues.MAX_DEPTH, so this is capped there).
    max_json_depth: int = Field(default=64, ge=2, le=200)
    max_input_bytes: int = 262_144
    max_metadata_bytes: int = 16_384
    max_page_size: int = 200
    default_page_size: int = 50
    # `?count=exact` gives up past this (the total is then null, with a note).
    count_timeout_ms: int = Field(default=1000, ge=1, le=60_000)

    # Observation.
    max_wait_seconds: float = 60.0  # cap on GET /v1/tasks/{id}?wait=
    # A plain MCP tools/call waits this long (at most max_wait_seconds) for its task.
    mcp_call_seconds: float = 60.0
    stream_poll_seconds: float = 10.0  # streams re-read the table this often without NOTIFY
    stream_ping_seconds: float = 15.0  # keep-alive comments on idle streams
    stream_send_timeout: float = 30.0  # a reader stalled this long is disconnected
    stream_retry_ms: int = 2000  # the reconnect delay suggested to SSE clients
    event_gap_timeout: float = 10.0  # a missing event id older than this is skipped
    stream_token_secret: str | None = None  # else a key shared through the database
    # Live output: a streaming model response's deltas reach event streams at most once
    # per this interval per task (0: no deltas; complete messages only).
    delta_interval_ms: int = Field(default=40, ge=0, le=10_000)
    cors_origins: Annotated[list[str], NoDecode] = Field(default_factory=list)

    # Agents. Model names are pydantic-ai model strings; "offline" needs no key.
    default_model: str = OFFLINE_MODEL
    allowed_models: Annotated[list[str], NoDecode] = Field(default_factory=lambda: [OFFLINE_MODEL])
    default_system_prompt: str = "You are a helpful sub-agent. Answer the task concisely."
    default_tools: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["report_progress", "ask_user"]
    )
    default_request_limit: int = 20  # model requests per run; beyond: "maximum iterations"
    agents_file: Path | None = None  # TOML or JSON agent profiles
    demo_agent: bool = True  # the built-in offline `demo` profile (demo.py)
    # Modules whose TOOLS and MODELS dicts add named tools and models.
    plugins: Annotated[list[str], NoDecode] = Field(default_factory=list)
    openai_base_url: str | None = None  # an OpenAI-compatible server for openai: models
    openai_api_key: str | None = None  # else OPENAI_API_KEY
    router_model: str | None = None  # picks among waiting tasks; None: the offline router
    default_max_attempts: int = 3

    # Workers.
    workers_enabled: bool = True
    worker_concurrency: int = 8
    tenant_max_running: int | None = None  # per tenant, across all workers; None: no cap
    lease_seconds: float = 30.0  # renewed every third of it
    poll_interval: float = 2.0  # seconds; fallback when no NOTIFY arrives
    outcome_retry_seconds: float = 30.0  # a worker retries its outcome write this long
    reap_interval: float = 5.0  # seconds between reaper passes (jittered)
    task_timeout_seconds: float = 600.0  # per attempt, unless the task sets its own
    stall_seconds: float = 120.0  # a running task quiet this long gets a `stalled` event
    # `log` events: lines kept per task (then one saying the rest were dropped; 0:
    # none), and characters per line (longer ones are cut, with "…").
    max_log_lines: int = Field(default=200, ge=0, le=100_000)
    max_log_chars: int = Field(default=2000, ge=80, le=100_000)
    shutdown_grace_seconds: float = 20.0  # for runs to finish before they are released

    # Webhooks.
    webhooks_enabled: bool = True  # run the dispatcher in this process
    webhook_concurrency: int = 32  # attempts in flight per process
    webhook_timeout_seconds: float = 15.0  # a 2xx must arrive within this
    # Delay before attempt 1, 2, 3 … of a delivery; its length is the number of
    # attempts. Each delay gets +/- webhook_jitter of itself.
    webhook_retry_schedule: Annotated[list[float], NoDecode] = Field(
        default_factory=lambda: [0.0, 5, 300, 1800, 7200, 18000, 36000, 36000]
    )
    webhook_jitter: float = Field(default=0.2, ge=0, le=1)
    webhook_max_retry_after_seconds: float = 86_400.0  # a longer Retry-After is capped
    webhook_disable_after_seconds: float = 5 * 86_400.0  # failing this long: disabled
    webhook_secret_overlap_seconds: float = 86_400.0  # old secret still signs this long
    webhook_allow_http: bool = False  # https only unless set
    # Hosts and CIDRs admitted although private/loopback (internal alerting systems).
    webhook_allow_targets: Annotated[list[str], NoDecode] = Field(default_factory=list)
    webhook_max_per_task: int = 10

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
