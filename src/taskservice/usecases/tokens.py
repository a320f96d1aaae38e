"""Short-lived, read-only stream tokens for clients that cannot send headers.

A browser's EventSource cannot set `Authorization`, and a long-lived API key must
never travel in a URL. A stream token is minted with an API key, names one tenant
and either one task or the whole tenant, expires within an hour, and only opens
event streams. It also names the key that minted it: revoking that key ends its
tokens within `auth_cache_seconds`, and the streams they opened at their next poll. It
is stateless (HMAC-SHA256 over its claims) with a key every replica reads from the
database, so any replica verifies any other's tokens.

Two modules are named `tokens`: this one mints and checks stream tokens (the use case);
`api/routes/tokens.py` is the REST route that hands them out.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import uuid
from dataclasses import dataclass

from taskservice.domain.errors import Unauthorized

PREFIX = "tst_"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True, slots=True)
class StreamGrant:
    tenant: str
    task_id: uuid.UUID | None  # None: every task of the tenant
    key_id: uuid.UUID | None  # the minting key; None: minted in open mode
    expires_at: float

    def allows(self, task_id: uuid.UUID | None) -> bool:
        return self.task_id is None or self.task_id == task_id


class StreamTokens:
    def __init__(self, secret: str) -> None:
        self._key = hashlib.sha256(secret.encode()).digest()

    def _sign(self, payload: bytes) -> str:
        return _b64(hmac.new(self._key, payload, hashlib.sha256).digest())

    def mint(
        self,
        *,
        tenant: str,
        task_id: uuid.UUID | None,
        key_id: uuid.UUID | None,
        ttl_seconds: float,
    ) -> tuple[str, float]:
        expires_at = time.time() + ttl_seconds
        claims = {
            "t": tenant,
            "k": str(task_id) if task_id else None,
            "i": str(key_id) if key_id else None,
            "e": int(expires_at),
        }
        payload = json.dumps(claims, separators=(",", ":")).encode()
        return f"{PREFIX}{_b64(payload)}.{self._sign(payload)}", float(int(expires_at))

    def verify(self, token: str) -> StreamGrant:
        if not token.startswith(PREFIX):
            raise Unauthorized("not a stream token; API keys are never accepted in a URL")
        body, _, signature = token[len(PREFIX) :].partition(".")
        try:
            payload = _unb64(body)
            # A signature is ASCII (base64url); compare_digest refuses other text.
            valid = signature.isascii() and hmac.compare_digest(self._sign(payload), signature)
            claims = json.loads(payload) if valid else None
        except ValueError:
            claims = None
        if not claims:
            raise Unauthorized("the stream token is invalid")
        if claims["e"] < time.time():
            raise Unauthorized("the stream token has expired")
        task = uuid.UUID(claims["k"]) if claims["k"] else None
        # Tokens from before key ids were signed name none: they hold in open mode only.
        key = uuid.UUID(claims["i"]) if claims.get("i") else None
        return StreamGrant(tenant=claims["t"], task_id=task, key_id=key, expires_at=claims["e"])
