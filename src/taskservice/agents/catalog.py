"""Agent resolution and building: where the pydantic-ai agents that run tasks are
built. pydantic-ai is not this module's alone: the runners that run the agents
(`worker/`), the message router (`usecases/routing.py`, an agent itself) and, for its
`Model` type, `runtime.py` and `api/app.py` import it too (ARCHITECTURE.md, Layers).

A profile (`profiles.py`) names a system prompt, a model, the tools it may use, a
request limit and an output kind. A task names a profile (`default` unless it says
otherwise) and may override the system prompt and, from the operator's allow-list,
the model. Model names are pydantic-ai model strings (`openai-chat:gpt-4o`,
`anthropic:…`, `ollama:…`); with `TASKSERVICE_OPENAI_BASE_URL` set,
`openai:`/`openai-chat:` models go to that OpenAI-compatible server. `offline` is a
deterministic model that needs no API key, so the service works out of the box;
`offline:<seconds>` answers after a delay (`offline.py`); `demo` is the demo agent's
model (`demo.py`).

Tools (`tools`) report to the worker through `RunHooks` (the run's `deps`), which
records every call in the step ledger. The OpenAI-compatible provider's retries
become `log` lines of the run that made the request (`model_client.py`); a model
with rate limit budgets is wrapped to wait for them (`budgeted.py`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx2
from pydantic_ai import Agent, Tool
from pydantic_ai.models import Model
from pydantic_ai.models.fallback import FallbackModel
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.tools import DeferredToolRequests
from pydantic_ai.toolsets import AbstractToolset, FunctionToolset

from taskservice.agents.approvals import with_approvals
from taskservice.agents.budgeted import BudgetedModel
from taskservice.agents.demo import DEMO_MODEL, DEMO_TOOL_FUNCTIONS, demo_model
from taskservice.agents.mcp_servers import toolset
from taskservice.agents.model_client import MODEL_RETRIES, ModelRequestLog
from taskservice.agents.offline import offline_delay, offline_model
from taskservice.agents.profiles import DEFAULT_PROFILE, AgentProfile, load_profiles
from taskservice.agents.spending import SpendCheckedModel, fallback_chain
from taskservice.agents.tools import BUILTIN_TOOLS, RunHooks, ToolFunction, ledgered
from taskservice.common.logs import STARTUP
from taskservice.common.rate_limits import budget_keys
from taskservice.common.tracing import Tracing
from taskservice.domain.errors import InvalidRequest
from taskservice.domain.models import AgentSpec
from taskservice.settings import OFFLINE_MODEL, Settings

log = logging.getLogger(__name__)

_AGENT_CACHE_SIZE = 256  # built agents kept, per distinct (profile, model, prompt)
# Environment variables that make a hosted provider usable.
_PROVIDER_KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GROQ_API_KEY")


def streams(agent: Agent[Any, Any]) -> bool:
    """Whether the agent's model can stream its responses (a function model needs a
    stream function for that; every provider's model can)."""
    model = agent.model
    while isinstance(model, WrapperModel | FallbackModel):
        model = model.models[0] if isinstance(model, FallbackModel) else model.wrapped
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
        self._tools = {**BUILTIN_TOOLS, **DEMO_TOOL_FUNCTIONS, **self.tools}
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

    def fallback_of(self, spec: AgentSpec) -> str | None:
        """The model a run of `spec` falls back on when its own has no budget left."""
        profile = self.profiles.get(spec.profile)
        fallback = profile.fallback_model if profile is not None else None
        return fallback if fallback != spec.model else None

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
                retries = ModelRequestLog(MODEL_RETRIES)
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
                max_retries=MODEL_RETRIES,
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
        primary = self._checked(spec.model)
        model: Model = primary
        if profile.fallback_model is not None and profile.fallback_model != spec.model:
            model = fallback_chain(primary, self._checked(profile.fallback_model, fallback=True))
        builtin: AbstractToolset[RunHooks] = FunctionToolset(
            [
                Tool(ledgered(name, self._tools[name]), takes_ctx=True, name=name)
                for name in profile.tools
            ]
        )
        servers = [toolset(server, self.settings) for server in profile.mcp_servers]
        agent = Agent(
            model,
            instructions=spec.system_prompt,
            output_type=[output, DeferredToolRequests],
            deps_type=RunHooks,
            toolsets=[with_approvals(tools, profile.approvals) for tools in (builtin, *servers)],
            capabilities=self._instrumentation(),
            name=spec.profile,  # the agent's spans are named after its profile
        )
        if len(self._agents) >= _AGENT_CACHE_SIZE:
            self._agents.pop(next(iter(self._agents)))  # oldest first
        self._agents[spec] = agent
        return agent

    def _checked(self, name: str, *, fallback: bool = False) -> SpendCheckedModel:
        """The model `name`, waiting for its rate limits' slots if it has any
        (`budgeted.py`), each request checked against the run's budgets first
        (`spending.py`)."""
        model = self.model_for(name)
        keys = budget_keys(name, self.settings.rate_limits)
        return SpendCheckedModel(
            BudgetedModel(model, keys) if keys else model,
            name=name,
            output_tokens=self.settings.budget_output_tokens,
            fallback=fallback,
        )

    async def aclose(self) -> None:
        """Close the HTTP connections to model providers."""
        if self._http is not None:
            await self._http.aclose()
            self._http = None
        self._agents.clear()

    def describe_model(self) -> str:
        """The default model, as the start-up says it."""
        if self.settings.default_model != OFFLINE_MODEL:
            return self.settings.default_model
        configured = [key for key in _PROVIDER_KEYS if os.environ.get(key)]
        hint = f" ({', '.join(configured)} is set but unused)" if configured else ""
        return (
            f"the built-in OFFLINE model, which answers deterministically without any "
            f"LLM{hint}; set TASKSERVICE_DEFAULT_MODEL (and TASKSERVICE_ALLOWED_MODELS) "
            "to use a real provider"
        )

    def announce(self) -> None:
        if self.settings.default_model == OFFLINE_MODEL:
            log.warning("agents run on %s", self.describe_model(), extra=STARTUP)
        else:
            log.info("default model: %s", self.describe_model(), extra=STARTUP)
