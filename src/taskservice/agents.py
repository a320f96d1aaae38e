"""Agent profiles and model resolution: the one place that knows pydantic-ai.

A task names a profile (today: `default`) and may override the system prompt and,
from the allow-list, the model. Model names are pydantic-ai model strings
(`openai-chat:gpt-4o`, `anthropic:…`, `ollama:…`); `offline` is a deterministic
model that needs no API key, so the service works out of the box, and
`offline:<seconds>` is the same answering after a delay.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models import Model
from pydantic_ai.models.function import AgentInfo, FunctionModel

from taskservice.errors import InvalidRequest
from taskservice.models import AgentSpec
from taskservice.settings import OFFLINE_MODEL, Settings

log = logging.getLogger(__name__)

DEFAULT_PROFILE = "default"
_OFFLINE_ECHO_CHARS = 200
_AGENT_CACHE_SIZE = 256  # built agents kept, per distinct (profile, model, prompt)

# Environment variables that make a hosted provider usable.
_PROVIDER_KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GROQ_API_KEY")


def _answer_offline(messages: list[ModelMessage]) -> ModelResponse:
    prompt = ""
    for message in reversed(messages):
        for part in getattr(message, "parts", []):
            if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                prompt = part.content
                break
        if prompt:
            break
    shown = prompt[:_OFFLINE_ECHO_CHARS] + ("…" if len(prompt) > _OFFLINE_ECHO_CHARS else "")
    text = (
        f"[offline model] Task received ({len(prompt)} characters): {shown!r}. "
        "This deterministic answer comes from the built-in offline model; set "
        "TASKSERVICE_DEFAULT_MODEL and a provider API key for real answers."
    )
    return ModelResponse(parts=[TextPart(text)], model_name=OFFLINE_MODEL)


def offline_model(delay: float = 0.0) -> Model:
    """The deterministic offline model; `offline:<seconds>` answers after a delay
    (for demos, load tests and failure drills)."""

    # async on purpose: pydantic-ai runs a sync model function in a worker thread.
    async def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if delay:
            await asyncio.sleep(delay)
        return _answer_offline(messages)

    name = f"{OFFLINE_MODEL}:{delay:g}" if delay else OFFLINE_MODEL
    return FunctionModel(answer, model_name=name)


def _offline_delay(name: str) -> float | None:
    """The delay of an offline model name, or None when it is not one."""
    if name == OFFLINE_MODEL:
        return 0.0
    prefix, _, seconds = name.partition(":")
    if prefix != OFFLINE_MODEL:
        return None
    try:
        delay = float(seconds)
    except ValueError:
        return None
    return delay if 0 <= delay <= 3600 else None


class AgentCatalog:
    """Resolves what a request asks for into an `AgentSpec`, and specs into agents."""

    def __init__(self, settings: Settings, *, models: Mapping[str, Model] | None = None) -> None:
        self.settings = settings
        # Extra named models (tests register FunctionModels here).
        self._models = dict(models or {})
        self._agents: dict[AgentSpec, Agent[None, str]] = {}

    def resolve(
        self,
        *,
        profile: str | None = None,
        system_prompt: str | None = None,
        model: str | None = None,
    ) -> AgentSpec:
        name = profile or DEFAULT_PROFILE
        if name != DEFAULT_PROFILE:
            raise InvalidRequest(f"unknown agent profile {name!r}", field="agent")
        chosen = model or self.settings.default_model
        if chosen not in self.settings.allowed_models:
            allowed = ", ".join(self.settings.allowed_models)
            raise InvalidRequest(
                f"model {chosen!r} is not allowed; allowed: {allowed}",
                field="model",
            )
        return AgentSpec(
            profile=name,
            model=chosen,
            system_prompt=system_prompt or self.settings.default_system_prompt,
        )

    def model_for(self, name: str) -> Model | str:
        if name in self._models:
            return self._models[name]
        delay = _offline_delay(name)
        if delay is not None:
            return offline_model(delay)
        return name  # a pydantic-ai model string, resolved (and keyed) by pydantic-ai

    def build(self, spec: AgentSpec) -> Agent[None, str]:
        """Agents hold no per-run state: one per spec serves every run of it."""
        agent = self._agents.get(spec)
        if agent is None:
            if len(self._agents) >= _AGENT_CACHE_SIZE:
                self._agents.pop(next(iter(self._agents)))  # oldest first
            agent = Agent(
                self.model_for(spec.model), instructions=spec.system_prompt, output_type=str
            )
            self._agents[spec] = agent
        return agent

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
