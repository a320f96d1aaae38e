"""Remote agents: an agent profile of kind `a2a` names another A2A agent, to which
its tasks are delegated (`worker/delegation.py`).

```toml
[agents.researcher]
kind = "a2a"
card_url = "https://agents.example.com/.well-known/agent-card.json"
token_env = "RESEARCHER_TOKEN"  # optional: sent as `Authorization: Bearer …`
skill = "research"              # optional: asked for in the message's metadata
description = "Looks things up, on the research team's agent"
```

The card says which protocol version (1.0 or 0.3) and binding (JSON-RPC or
HTTP+JSON) to speak; the official A2A SDK's client speaks each. The URLs (the card's
and the interface it names) are checked like webhook targets (`webhooks.targets`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

A2A_KIND = "a2a"
REMOTE_KEYS = frozenset({"card_url", "token_env", "skill"})


class RemoteAgentError(ValueError):
    """A profile's remote agent is misconfigured (said at start-up)."""


@dataclass(frozen=True, slots=True)
class RemoteAgent:
    card_url: str  # the agent card; a base URL means its /.well-known/agent-card.json
    token_env: str | None = None  # the environment variable holding its bearer token
    skill: str | None = None

    @property
    def card(self) -> str:
        if urlsplit(self.card_url).path.endswith(".json"):
            return self.card_url
        return self.card_url.rstrip("/") + "/.well-known/agent-card.json"

    def token(self) -> str | None:
        """The bearer token, read when a call is made (rotated without a restart)."""
        return os.environ.get(self.token_env) if self.token_env else None


def parse_remote(profile: str, spec: dict[str, Any]) -> RemoteAgent:
    url = spec.get("card_url")
    if not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https"):
        raise RemoteAgentError(f"profile {profile!r}: kind 'a2a' needs an http(s) `card_url`")
    token_env, skill = spec.get("token_env"), spec.get("skill")
    for key, value in (("token_env", token_env), ("skill", skill)):
        if value is not None and (not isinstance(value, str) or not value):
            raise RemoteAgentError(f"profile {profile!r}: `{key}` must be a non-empty string")
    if token_env and token_env not in os.environ:
        raise RemoteAgentError(f"profile {profile!r}: `token_env` {token_env} is not set")
    return RemoteAgent(card_url=url, token_env=token_env, skill=skill)
