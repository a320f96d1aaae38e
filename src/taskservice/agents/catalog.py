"""Agent profiles, tools and model resolution: the one place that knows pydantic-ai.

A profile names a system prompt, a model, the tools it may use, a request limit
and an output kind. A task names a profile (`default` unless it says otherwise) and
may override the system prompt and, from the operator's allow-list, the model.
Model names are pydantic-ai model strings (`openai-chat:gpt-4o`, `anthropic:…`,
`ollama:…`); with `TASKSERVICE_OPENAI_BASE_URL` set, `openai:`/`openai-chat:`
models go to that OpenAI-compatible server. `offline` is a deterministic model that
needs no API key, so the service works out of the box; `offline:<seconds>` answers
after a delay (`offline.py`); `demo` is the demo agent's model (`demo.py`).

Tools (`tools`) report to the worker through `RunHooks` (the run's `deps`), which
records every call in the step ledger. The OpenAI-compatible provider's retries
become `log` lines of the run that made the request (`ModelRequestLog`).
"""

from __future__ import annotations

import json
import logging
import os
import tomllib
import weakref
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx2
from pydantic_ai import Agent, RunContext, Tool
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models import Model, ModelRequestParameters, StreamedResponse
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import DeferredToolRequests
from pydantic_ai.usage import RequestUsage

from taskservice.agents.demo import (
    DEMO_DESCRIPTION,
    DEMO_MODEL,
    DEMO_PROFILE,
    DEMO_PROMPT,
    DEMO_TOOLS,
    demo_model,
)
from taskservice.agents.mcp_servers import McpServer, McpServerError, parse_servers, toolset
from taskservice.agents.offline import offline_delay, offline_model
from taskservice.agents.remote import (
    A2A_KIND,
    REMOTE_KEYS,
    RemoteAgent,
    RemoteAgentError,
    parse_remote,
)
from taskservice.agents.tools import (
    BUILTIN_TOOLS,
    CURRENT_RUN,
    LogLevel,
    RunHooks,
    ToolFunction,
    ledgered,
)
from taskservice.common.rate_limits import (
    CURRENT_GATE,
    REQUEST_BUDGETED,
    ModelGate,
    budget_keys,
    estimate_tokens,
)
from taskservice.common.tracing import Tracing
from taskservice.domain.errors import InvalidRequest
from taskservice.domain.models import AgentSpec
from taskservice.settings import OFFLINE_MODEL, Settings
from taskservice.webhooks.targets import AllowList, UnsafeTarget, check_as_written

log = logging.getLogger(__name__)

DEFAULT_PROFILE = "default"
_AGENT_CACHE_SIZE = 256  # built agents kept, per distinct (profile, model, prompt)
# Environment variables that make a hosted provider usable.
_PROVIDER_KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GROQ_API_KEY")

Output = Literal["text", "json"]


class ProfileError(ValueError):
    """The agent profiles file is invalid (found at start-up)."""


# -- the model client's retries ------------------------------------------------------

_MODEL_RETRIES = 2  # the OpenAI SDK's own default, made explicit
# What the OpenAI SDK (and other Stainless-made SDKs) retry, unless told not to.
_RETRIED_STATUSES = frozenset({408, 409, 429})


def _retries_taken(request: httpx2.Request) -> int:
    try:
        return int(request.headers.get("x-stainless-retry-count", "0"))
    except ValueError:
        return 0


class ModelRequestLog:
    """Event hooks of the model client: each retry of a model request becomes a
    `log` line of the run that made it (`tools.CURRENT_RUN`). A retried answer is
    told when it arrives, before the SDK's backoff; a request that got no answer
    (connection error, timeout) when it is sent again."""

    def __init__(self, max_retries: int) -> None:
        self.max_retries = max_retries
        self._told: weakref.WeakKeyDictionary[RunHooks, int] = weakref.WeakKeyDictionary()

    async def on_response(self, response: httpx2.Response) -> None:
        run = CURRENT_RUN.get()
        status = response.status_code
        budgeted = REQUEST_BUDGETED.get()
        if status == 429 and budgeted is not None:
            # The request's budgets are blocked and it waits for a new slot without
            # a worker (`BudgetedModel`): not retried by the SDK in the meantime.
            budgeted.append(_retry_after(response))
            response.headers["x-should-retry"] = "false"
            return
        if run is None or not (status in _RETRIED_STATUSES or status >= 500):
            return
        retry = _retries_taken(response.request) + 1
        if retry > self.max_retries or response.headers.get("x-should-retry") == "false":
            return  # the SDK gives up: the run fails and says why
        after = response.headers.get("retry-after")
        wait = f" (Retry-After: {after})" if after else ""
        self._told[run] = retry
        await _tell(
            run,
            "warning",
            f"the model provider answered HTTP {status} {response.reason_phrase}{wait}; "
            f"retry {retry} of {self.max_retries}",
        )

    async def on_request(self, request: httpx2.Request) -> None:
        run = CURRENT_RUN.get()
        retry = _retries_taken(request)
        if run is None or retry == 0 or self._told.get(run) == retry:
            return
        self._told[run] = retry
        await _tell(
            run,
            "warning",
            "the model request got no answer (connection error or timeout); "
            f"retry {retry} of {self.max_retries}",
        )


def _retry_after(response: httpx2.Response) -> float | None:
    """A 429's wait, in seconds (`retry-after-ms`, else `retry-after` in seconds)."""
    for header, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        try:
            return float(response.headers[header]) * scale
        except (KeyError, ValueError):
            continue
    return None


async def _tell(run: RunHooks, level: LogLevel, message: str) -> None:
    """A line from below the agent: never fails the model request. (A lost lease is
    found by the run's next write; a database error costs the line only.)"""
    try:
        await run.log(level, message)
    except Exception:
        log.info("could not write a log line of the run: %s", message, exc_info=True)


# -- rate limits -------------------------------------------------------------------


def _characters(messages: list[ModelMessage]) -> int:
    """The text a request sends, roughly: its messages' contents and tool arguments."""
    total = 0
    for message in messages:
        for part in message.parts:
            for value in (getattr(part, "content", None), getattr(part, "args", None)):
                if value is not None:
                    total += len(value) if isinstance(value, str) else len(str(value))
    return total


def _tokens_used(usage: RequestUsage) -> int:
    return int(usage.input_tokens or 0) + int(usage.output_tokens or 0)


class BudgetedModel(WrapperModel):
    """A model whose requests draw from the rate limit budgets `keys`
    (`rate_limits.py`), through the gate of the run in whose context they are made
    (`CURRENT_GATE`; none: not limited, as outside a worker)."""

    def __init__(self, wrapped: Model | str, keys: tuple[str, ...]) -> None:
        super().__init__(wrapped)
        self.keys = keys

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        gate = CURRENT_GATE.get()
        if gate is None:
            return await super().request(messages, model_settings, model_request_parameters)
        async with self._slot(gate, messages) as reserved:
            response = await super().request(messages, model_settings, model_request_parameters)
        await gate.settle(self.keys, reserved, _tokens_used(response.usage))
        return response

    @asynccontextmanager
    async def _slot(self, gate: ModelGate, messages: list[ModelMessage]) -> AsyncIterator[int]:
        """A slot for the request made in the block (yields the tokens reserved for
        it). A 429 from the provider gives its tokens back, blocks the budgets for its
        Retry-After (the model client's hook notes it, and keeps the SDK from retrying
        in place), and raises `Throttled`: the task waits for a new slot."""
        reserved = await gate.acquire(self.keys, estimate_tokens(_characters(messages)))
        refusal: list[float | None] = []
        token = REQUEST_BUDGETED.set(refusal)
        try:
            yield reserved
        except ModelHTTPError as exc:
            if exc.status_code == 429:
                await gate.settle(self.keys, reserved, 0)
                await gate.refused(self.keys, refusal[-1] if refusal else None)
            raise
        finally:
            REQUEST_BUDGETED.reset(token)

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncIterator[StreamedResponse]:
        gate = CURRENT_GATE.get()
        if gate is None:
            async with super().request_stream(
                messages, model_settings, model_request_parameters, run_context
            ) as stream:
                yield stream
            return
        async with (
            self._slot(gate, messages) as reserved,
            super().request_stream(
                messages, model_settings, model_request_parameters, run_context
            ) as stream,
        ):
            yield stream
        await gate.settle(self.keys, reserved, _tokens_used(stream.usage))


# -- profiles ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AgentProfile:
    name: str
    system_prompt: str
    model: str
    tools: tuple[str, ...] = ()
    request_limit: int = 20
    output: Output = "text"
    description: str = ""
    mcp_servers: tuple[McpServer, ...] = ()  # whose tools it gets too (`agent_mcp`)
    remote: RemoteAgent | None = None  # kind `a2a`: its tasks are delegated there


_PROFILE_KEYS = {
    "kind",
    *REMOTE_KEYS,
    "system_prompt",
    "model",
    "tools",
    "request_limit",
    "output",
    "description",
    "mcp_servers",
}


def load_profiles(settings: Settings, *, known_tools: set[str]) -> dict[str, AgentProfile]:
    """The `default` profile from settings and the built-in `demo` (`demo.py`), then
    any from `TASKSERVICE_AGENTS_FILE` (TOML or JSON: a table per profile under
    `agents`; one named like a built-in replaces it)."""
    default = AgentProfile(
        name=DEFAULT_PROFILE,
        system_prompt=settings.default_system_prompt,
        model=settings.default_model,
        tools=tuple(settings.default_tools),
        request_limit=settings.default_request_limit,
    )
    demo = AgentProfile(
        name=DEMO_PROFILE,
        system_prompt=DEMO_PROMPT,
        model=DEMO_MODEL,
        tools=DEMO_TOOLS,
        request_limit=30,
        description=DEMO_DESCRIPTION,
    )
    profiles = {DEFAULT_PROFILE: default}
    if settings.demo_agent:
        profiles[DEMO_PROFILE] = demo
    if settings.agents_file is None:
        _check_tools(default, known_tools)
        return profiles
    path = Path(settings.agents_file)
    try:
        raw = path.read_text()
        document = json.loads(raw) if path.suffix == ".json" else tomllib.loads(raw)
    except (OSError, ValueError) as exc:
        raise ProfileError(f"cannot read agent profiles from {path}: {exc}") from exc
    for name, spec in dict(document.get("agents", {})).items():
        if not isinstance(spec, dict) or set(spec) - _PROFILE_KEYS:
            unknown = set(spec) - _PROFILE_KEYS if isinstance(spec, dict) else spec
            raise ProfileError(f"profile {name!r}: unknown keys {unknown}")
        base = profiles.get(name, default)
        kind = spec.get("kind", "local")
        if kind not in ("local", A2A_KIND):
            raise ProfileError(f"profile {name!r}: kind must be 'local' or 'a2a'")
        if kind == A2A_KIND:
            profiles[name] = _remote_profile(name, spec)
            continue
        if set(spec) & REMOTE_KEYS:
            raise ProfileError(f"profile {name!r}: {sorted(REMOTE_KEYS)} need kind 'a2a'")
        profiles[name] = AgentProfile(
            name=name,
            system_prompt=str(spec.get("system_prompt", base.system_prompt)),
            model=str(spec.get("model", base.model)),
            tools=tuple(spec.get("tools", base.tools)),
            request_limit=int(spec.get("request_limit", base.request_limit)),
            output=spec.get("output", base.output),
            description=str(spec.get("description", "")),
            mcp_servers=_servers(name, spec.get("mcp_servers", [])),
        )
    allow = AllowList.parse(settings.webhook_allow_targets)
    for profile in profiles.values():
        _check_tools(profile, known_tools)
        _check_urls(profile, allow, allow_http=settings.webhook_allow_http)
        if profile.output not in ("text", "json"):
            raise ProfileError(f"profile {profile.name!r}: output must be 'text' or 'json'")
        if profile.request_limit < 1:
            raise ProfileError(f"profile {profile.name!r}: request_limit must be at least 1")
    return profiles


def _remote_profile(name: str, spec: dict[str, Any]) -> AgentProfile:
    """A profile whose tasks are delegated to a remote A2A agent: no model, prompt
    or tools of its own."""
    local_only = set(spec) - REMOTE_KEYS - {"kind", "description"}
    if local_only:
        raise ProfileError(f"profile {name!r}: kind 'a2a' takes no {sorted(local_only)}")
    try:
        remote = parse_remote(name, spec)
    except RemoteAgentError as exc:
        raise ProfileError(str(exc)) from exc
    return AgentProfile(
        name=name,
        system_prompt="",
        model=f"a2a:{remote.card_url}",
        description=str(spec.get("description", "")),
        remote=remote,
    )


def _servers(profile: str, raw: Any) -> tuple[McpServer, ...]:
    try:
        return parse_servers(profile, raw)
    except McpServerError as exc:
        raise ProfileError(str(exc)) from exc


def _check_urls(profile: AgentProfile, allow: AllowList, *, allow_http: bool) -> None:
    """The URLs a profile's runs would call, checked as written (the rules of webhook
    targets: https unless allowed, no internal address written in them unless
    allow-listed), so that a profile whose every run would be refused stops the
    start, naming it, rather than failing its tasks later. Names are checked again,
    resolved, at each connection."""
    urls = [("MCP server", server.url) for server in profile.mcp_servers]
    if profile.remote is not None:
        urls.append(("agent card", profile.remote.card_url))
    for what, url in urls:
        try:
            check_as_written(url, allow=allow, allow_http=allow_http)
        except UnsafeTarget as exc:
            raise ProfileError(
                f"profile {profile.name!r}: {what} URL {url} is refused: {exc} "
                "(TASKSERVICE_WEBHOOK_ALLOW_HTTP and TASKSERVICE_WEBHOOK_ALLOW_TARGETS "
                "admit http and internal addresses)"
            ) from exc


def _check_tools(profile: AgentProfile, known: set[str]) -> None:
    unknown = set(profile.tools) - known
    if unknown:
        raise ProfileError(
            f"profile {profile.name!r}: unknown tools {sorted(unknown)}; known: {sorted(known)}"
        )


def load_plugins(modules: list[str]) -> tuple[dict[str, Model], dict[str, ToolFunction]]:
    """Import plugin modules; each may define `TOOLS` and `MODELS` (name → object)."""
    import importlib

    models: dict[str, Model] = {}
    tools: dict[str, ToolFunction] = {}
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            raise ProfileError(f"cannot import plugin {name!r}: {exc}") from exc
        models.update(getattr(module, "MODELS", {}))
        tools.update(getattr(module, "TOOLS", {}))
        log.info("plugin %s: tools %s, models %s", name, sorted(tools), sorted(models))
    return models, tools


def streams(agent: Agent[Any, Any]) -> bool:
    """Whether the agent's model can stream its responses (a function model needs a
    stream function for that; every provider's model can)."""
    model = agent.model
    if isinstance(model, WrapperModel):
        model = model.wrapped
    return not isinstance(model, FunctionModel) or model.stream_function is not None


@dataclass
class AgentCatalog:
    """Resolves requests into `AgentSpec`s, and specs into (cached) agents."""

    settings: Settings
    models: Mapping[str, Model] = field(default_factory=dict)
    tools: Mapping[str, ToolFunction] = field(default_factory=dict)
    tracing: Tracing = field(default_factory=lambda: Tracing(False))

    def __post_init__(self) -> None:
        self._http: httpx2.AsyncClient | None = None  # for OpenAI-compatible providers
        self._tools = {**BUILTIN_TOOLS, **self.tools}
        self.profiles = load_profiles(self.settings, known_tools=set(self._tools))
        self._agents: dict[AgentSpec, Agent[RunHooks, Any]] = {}

    def resolve(
        self,
        *,
        profile: str | None = None,
        system_prompt: str | None = None,
        model: str | None = None,
    ) -> AgentSpec:
        name = profile or DEFAULT_PROFILE
        chosen = self.profiles.get(name)
        if chosen is None:
            known = ", ".join(sorted(self.profiles))
            raise InvalidRequest(f"unknown agent profile {name!r}; known: {known}", field="agent")
        if model is not None and not self.allowed(model):
            allowed = ", ".join(self.settings.allowed_models)
            raise InvalidRequest(
                f"model {model!r} is not allowed; allowed: {allowed}", field="model"
            )
        return AgentSpec(
            profile=name,
            model=model or chosen.model,
            system_prompt=system_prompt or chosen.system_prompt,
        )

    def allowed(self, model: str) -> bool:
        """On the allow-list; `offline:<seconds>` is wherever `offline` is."""
        allowed = self.settings.allowed_models
        if model in allowed:
            return True
        return OFFLINE_MODEL in allowed and offline_delay(model) is not None

    def profile(self, name: str) -> AgentProfile | None:
        return self.profiles.get(name)

    def model_for(self, name: str) -> Model | str:
        if name in self.models:
            return self.models[name]
        if name == DEMO_MODEL:
            return demo_model()
        delay = offline_delay(name)
        if delay is not None:
            return offline_model(delay)
        provider, _, model_name = name.partition(":")
        if self.settings.openai_base_url and provider in ("openai", "openai-chat"):
            from openai import AsyncOpenAI
            from pydantic_ai.models.openai import OpenAIChatModel
            from pydantic_ai.providers.openai import OpenAIProvider

            api_key = self.settings.openai_api_key or os.environ.get("OPENAI_API_KEY") or "none"
            if self._http is None:
                retries = ModelRequestLog(_MODEL_RETRIES)
                self._http = httpx2.AsyncClient(
                    timeout=httpx2.Timeout(600, connect=10),
                    event_hooks={
                        "request": [retries.on_request, self._trace_request],
                        "response": [retries.on_response],
                    },
                )
            client = AsyncOpenAI(
                base_url=self.settings.openai_base_url,
                api_key=api_key,
                http_client=self._http,
                max_retries=_MODEL_RETRIES,
            )
            return OpenAIChatModel(model_name, provider=OpenAIProvider(openai_client=client))
        return name  # a pydantic-ai model string, resolved (and keyed) by pydantic-ai

    async def _trace_request(self, request: httpx2.Request) -> None:
        """A model request carries the trace it belongs to (the model request's span)."""
        self.tracing.inject(request.headers)

    def _instrumentation(self) -> list[Any]:
        """pydantic-ai's own spans (the agent run, each model request and tool call),
        when tracing is on; prompts and answers in them only if asked for."""
        if not self.tracing.enabled:
            return []
        from pydantic_ai.capabilities import Instrumentation
        from pydantic_ai.models.instrumented import InstrumentationSettings

        content = self.settings.otel_include_content
        return [Instrumentation(settings=InstrumentationSettings(include_content=content))]

    def build(self, spec: AgentSpec) -> Agent[RunHooks, Any]:
        """Agents hold no per-run state: one per spec serves every run of it."""
        agent = self._agents.get(spec)
        if agent is not None:
            return agent
        profile = self.profiles[spec.profile]
        output: Any = str if profile.output == "text" else dict[str, Any]
        model = self.model_for(spec.model)
        keys = budget_keys(spec.model, self.settings.rate_limits)
        agent = Agent(
            BudgetedModel(model, keys) if keys else model,
            instructions=spec.system_prompt,
            output_type=[output, DeferredToolRequests],
            deps_type=RunHooks,
            tools=[
                Tool(ledgered(name, self._tools[name]), takes_ctx=True, name=name)
                for name in profile.tools
            ],
            toolsets=[toolset(server, self.settings) for server in profile.mcp_servers],
            capabilities=self._instrumentation(),
            name=spec.profile,  # the agent's spans are named after its profile
        )
        if len(self._agents) >= _AGENT_CACHE_SIZE:
            self._agents.pop(next(iter(self._agents)))  # oldest first
        self._agents[spec] = agent
        return agent

    async def aclose(self) -> None:
        """Close the HTTP connections to model providers."""
        if self._http is not None:
            await self._http.aclose()
            self._http = None
        self._agents.clear()

    def announce(self) -> None:
        if self.settings.default_model == OFFLINE_MODEL:
            configured = [key for key in _PROVIDER_KEYS if os.environ.get(key)]
            hint = f" ({', '.join(configured)} is set but unused)" if configured else ""
            log.warning(
                "agents run on the built-in OFFLINE model, which answers deterministically "
                "without any LLM%s; set TASKSERVICE_DEFAULT_MODEL (and "
                "TASKSERVICE_ALLOWED_MODELS) to use a real provider",
                hint,
            )
        else:
            log.info("default model: %s", self.settings.default_model)
