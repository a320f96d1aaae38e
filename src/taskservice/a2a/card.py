"""The agent card, in the form of A2A 1.0 with the fields a 0.3 client reads beside
them (`url`, `preferredTransport`, `protocolVersion`, `security`, the security
scheme's `type`), so that clients of both versions find their interface: 1.0 clients
read `supportedInterfaces` (preferred first) and ignore the rest; 0.3 clients read
the main `url`. This is what the official SDK serves too; without `v03_fields` the
card is strict 1.0 (its schema admits no other keys). One skill per agent profile;
bearer API keys, declared only while they are required: in open development mode
(a request without a key is served) the card declares no security scheme, since
clients and conformance kits read a declared one as enforced.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from taskservice.agents.profiles import AgentProfile

JSONRPC, HTTP_JSON = "JSONRPC", "HTTP+JSON"


@dataclass(frozen=True, slots=True)
class Interface:
    path: str  # below the base URL
    binding: str  # JSONRPC, HTTP+JSON
    version: str  # 1.0, 0.3


def _skill(profile: AgentProfile, *, extended: bool) -> dict[str, Any]:
    tags = ["agent-profile"]
    if extended:  # what a caller with a key may know: how the profile runs
        tags += [f"model:{profile.model}", *(f"tool:{tool}" for tool in profile.tools)]
        tags.append(f"output:{profile.output}")
    return {
        "id": profile.name,
        "name": profile.name,
        "description": profile.description or f"the {profile.name} agent profile",
        "tags": tags,
        "inputModes": ["text/plain", "application/json"],
        "outputModes": ["application/json"] if profile.output != "text" else ["text/plain"],
    }


def agent_card(
    *,
    base_url: str,
    interfaces: Iterable[Interface],
    version: str,
    profiles: Iterable[AgentProfile],
    streaming: bool = True,
    push_notifications: bool = False,
    extended: bool = False,
    v03_fields: bool = True,
    secured: bool = True,
) -> dict[str, Any]:
    """The card for clients at `base_url` (the public card, or with `extended` the
    one an authenticated caller gets); `secured`: a key is required (not open
    mode)."""
    listed = [
        {"url": f"{base_url}{i.path}", "protocolBinding": i.binding, "protocolVersion": i.version}
        for i in interfaces
    ]
    card: dict[str, Any] = {
        "name": "taskservice",
        "description": "Runs LLM sub-agents as durable tasks. Pick a skill (an agent "
        "profile) with the message's `metadata.agent`, and a model with `metadata.model`.",
        "supportedInterfaces": listed,
        "version": version,
        "documentationUrl": f"{base_url}/docs",
        "capabilities": {
            "streaming": streaming,
            "pushNotifications": push_notifications,
            "extendedAgentCard": True,
        },
        "defaultInputModes": ["text/plain", "application/json"],
        "defaultOutputModes": ["text/plain", "application/json"],
        "skills": [_skill(profile, extended=extended) for profile in profiles],
    }
    if secured:
        bearer: dict[str, Any] = {
            "httpAuthSecurityScheme": {
                "scheme": "Bearer",
                "description": "an API key of the service (`taskservice keys create`)",
            },
        }
        card["securitySchemes"] = {"bearer": bearer}
        card["securityRequirements"] = [{"schemes": {"bearer": {"list": []}}}]
    if v03_fields:  # the main interface and its version, its security, the extended card
        legacy = next(i for i in listed if i["protocolVersion"] == "0.3")
        card.update(
            url=legacy["url"],
            preferredTransport=legacy["protocolBinding"],
            protocolVersion="0.3.0",
            supportsAuthenticatedExtendedCard=True,
        )
        if secured:
            bearer.update(type="http", scheme="bearer")
            card["security"] = [{"bearer": []}]
    return card


def etag(card: dict[str, Any]) -> str:
    """A strong validator for the card's content."""
    body = json.dumps(card, sort_keys=True, separators=(",", ":")).encode()
    return '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
