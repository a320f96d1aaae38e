"""Agent profiles, as loaded at start-up: the `default` profile from settings, the
built-in `demo`, and those of `TASKSERVICE_AGENTS_FILE` (TOML or JSON), each checked
(its tools known, its URLs allowed as written, its output and request limit valid)
so that a bad profile stops the start (`ProfileError`), naming it; and the plugin
modules that add models and tools (`load_plugins`).
"""

from __future__ import annotations

import json
import logging
import tomllib
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError
from pydantic_ai.models import Model

from taskservice.agents.approvals import APPROVAL_KEYS, ApprovalConfigError, Approvals
from taskservice.agents.demo import (
    DEMO_APPROVALS,
    DEMO_DESCRIPTION,
    DEMO_MODEL,
    DEMO_PROFILE,
    DEMO_PROMPT,
    DEMO_TOOL_FUNCTIONS,
    DEMO_TOOLS,
)
from taskservice.agents.mcp_servers import McpServer, McpServerError, parse_servers
from taskservice.agents.offline import offline_delay
from taskservice.agents.remote import (
    A2A_KIND,
    REMOTE_KEYS,
    RemoteAgent,
    RemoteAgentError,
    parse_remote,
)
from taskservice.agents.tools import ToolFunction
from taskservice.common.pricing import SpendLimit
from taskservice.domain.budgets import check_max_cost, check_max_tokens
from taskservice.domain.errors import InvalidRequest
from taskservice.settings import OFFLINE_MODEL, Settings
from taskservice.webhooks.targets import AllowList, UnsafeTarget, check_as_written

log = logging.getLogger(__name__)

DEFAULT_PROFILE = "default"

Output = Literal["text", "json"]


class ProfileError(ValueError):
    """The agent profiles file is invalid (found at start-up)."""


@dataclass(frozen=True, slots=True)
class AgentProfile:
    name: str
    system_prompt: str
    model: str
    tools: tuple[str, ...] = ()
    request_limit: int = 20
    output: Output = "text"
    description: str = ""
    mcp_servers: tuple[McpServer, ...] = ()  # whose tools it gets too (`mcp_servers.py`)
    remote: RemoteAgent | None = None  # kind `a2a`: its tasks are delegated there
    approvals: Approvals = field(default_factory=Approvals)  # calls that wait for a person
    # The budget of its tasks that set none (`domain/budgets.py`; None: none).
    max_cost: Decimal | None = None
    max_tokens: int | None = None
    # Where a request goes that its model has no budget left for, when it fits there
    # (`agents/spending.py`): an allowed model.
    fallback_model: str | None = None
    # What all its tasks together may spend per UTC day or month (`usecases/spend.py`:
    # shared by every process; None: no total).
    budget: SpendLimit | None = None


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
    "max_cost",
    "max_tokens",
    "fallback_model",
    "budget",
    *APPROVAL_KEYS,
}


def load_profiles(settings: Settings, *, known_tools: set[str]) -> dict[str, AgentProfile]:
    """The `default` profile from settings and the built-in `demo` (`demo.py`), then
    any from `TASKSERVICE_AGENTS_FILE` (TOML or JSON: a table per profile under
    `agents`; one named like a built-in replaces it)."""
    known_tools = known_tools | set(DEMO_TOOL_FUNCTIONS)  # the catalog always has them
    default = AgentProfile(
        name=DEFAULT_PROFILE,
        system_prompt=settings.default_system_prompt,
        model=settings.default_model,
        tools=tuple(settings.default_tools),
        request_limit=settings.default_request_limit,
        max_cost=settings.default_max_cost,
        max_tokens=settings.default_max_tokens,
        fallback_model=(
            None
            if settings.default_fallback_model == settings.default_model
            else settings.default_fallback_model
        ),
    )
    demo = AgentProfile(
        name=DEMO_PROFILE,
        system_prompt=DEMO_PROMPT,
        model=DEMO_MODEL,
        tools=DEMO_TOOLS,
        request_limit=30,
        description=DEMO_DESCRIPTION,
        approvals=DEMO_APPROVALS,
    )
    profiles = {DEFAULT_PROFILE: default}
    if settings.demo_agent:
        profiles[DEMO_PROFILE] = demo
    if settings.agents_file is None:
        _check_tools(default, known_tools)
        _check_fallback(default, settings)
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
            approvals=_approvals(name, spec, base.approvals),
            **_budget(name, spec, base, model=str(spec.get("model", base.model))),
            budget=_total(name, spec.get("budget")),
        )
    allow = AllowList.parse(settings.webhook_allow_targets)
    for profile in profiles.values():
        _check_tools(profile, known_tools)
        _check_urls(profile, allow, allow_http=settings.webhook_allow_http)
        if profile.output not in ("text", "json"):
            raise ProfileError(f"profile {profile.name!r}: output must be 'text' or 'json'")
        if profile.request_limit < 1:
            raise ProfileError(f"profile {profile.name!r}: request_limit must be at least 1")
        _check_fallback(profile, settings)
    return profiles


def _budget(
    profile: str, spec: dict[str, Any], base: AgentProfile, *, model: str
) -> dict[str, Any]:
    """A profile's default budget and fallback model (unset: its base's; a fallback
    it would inherit that is its own model is none)."""
    try:
        max_cost = check_max_cost(spec.get("max_cost", base.max_cost))
        max_tokens = check_max_tokens(spec.get("max_tokens", base.max_tokens))
    except InvalidRequest as exc:
        raise ProfileError(f"profile {profile!r}: {exc.detail}") from exc
    fallback = spec.get("fallback_model", base.fallback_model)
    if fallback is not None and not isinstance(fallback, str):
        raise ProfileError(f"profile {profile!r}: fallback_model must be a model's name")
    if fallback == model:
        if "fallback_model" in spec:
            raise ProfileError(f"profile {profile!r}: fallback_model is its model itself")
        fallback = None
    return {"max_cost": max_cost, "max_tokens": max_tokens, "fallback_model": fallback}


def _total(profile: str, spec: Any) -> SpendLimit | None:
    """A profile's own total per period (not inherited: each profile's is its own)."""
    if spec is None:
        return None
    try:
        return SpendLimit.model_validate(spec)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error['loc']) or 'budget'}: {error['msg']}"
            for error in exc.errors()
        )
        raise ProfileError(
            f"profile {profile!r}: budget: {problems} (expected period day or month, and "
            "max_cost in USD and/or max_tokens)"
        ) from None


def _check_fallback(profile: AgentProfile, settings: Settings) -> None:
    """A fallback model is an allowed model, as a task's own model is."""
    fallback = profile.fallback_model
    if fallback is None:
        return
    allowed = fallback in settings.allowed_models or (
        OFFLINE_MODEL in settings.allowed_models and offline_delay(fallback) is not None
    )
    if not allowed:
        raise ProfileError(
            f"profile {profile.name!r}: fallback_model {fallback!r} is not an allowed model; "
            f"allowed: {', '.join(settings.allowed_models)} (TASKSERVICE_ALLOWED_MODELS)"
        )


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


def _approvals(profile: str, spec: dict[str, Any], base: Approvals) -> Approvals:
    if not set(spec) & APPROVAL_KEYS:
        return base
    try:
        return Approvals.parse(profile, spec)
    except ApprovalConfigError as exc:
        raise ProfileError(str(exc)) from exc


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
