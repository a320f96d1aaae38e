"""Standard Webhooks signatures (https://www.standardwebhooks.com).

A delivery carries `webhook-id` (the same on every retry), `webhook-timestamp`
(seconds) and `webhook-signature`: space-separated `v1,<base64 HMAC-SHA256>` over
`{id}.{timestamp}.{body}`, one per active secret, so receivers keep verifying while a
secret is rotated. Secrets are `whsec_` + base64 of 24 random bytes.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Iterable

SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(24)).decode()


def _key(secret: str) -> bytes:
    if not secret.startswith(SECRET_PREFIX):
        raise ValueError("webhook secrets start with whsec_")
    return base64.b64decode(secret[len(SECRET_PREFIX) :])


def sign(secret: str, *, message_id: str, timestamp: int, body: bytes) -> str:
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def headers(
    secrets_in_force: Iterable[str], *, message_id: str, timestamp: int, body: bytes
) -> dict[str, str]:
    """The three Standard Webhooks headers; one signature per secret in force."""
    signatures = [
        sign(secret, message_id=message_id, timestamp=timestamp, body=body)
        for secret in secrets_in_force
    ]
    if not signatures:
        raise ValueError("a delivery needs at least one signing secret")
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": " ".join(signatures),
    }
