"""Signatures verify with the reference `standardwebhooks` implementation."""

from __future__ import annotations

import json
import time

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from taskservice.webhooks.signing import headers, new_secret

BODY = json.dumps({"type": "task.completed", "data": {"id": "t1"}}).encode()


def test_a_signed_delivery_verifies_with_the_reference_implementation() -> None:
    secret = new_secret()
    signed = headers([secret], message_id="msg_1", timestamp=int(time.time()), body=BODY)
    assert Webhook(secret).verify(BODY, signed) == json.loads(BODY)


def test_during_rotation_both_secrets_verify() -> None:
    old, new = new_secret(), new_secret()
    signed = headers([new, old], message_id="msg_2", timestamp=int(time.time()), body=BODY)
    assert len(signed["webhook-signature"].split(" ")) == 2
    for secret in (old, new):
        Webhook(secret).verify(BODY, signed)


def test_a_tampered_body_or_another_secret_fails() -> None:
    secret = new_secret()
    signed = headers([secret], message_id="msg_3", timestamp=int(time.time()), body=BODY)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(BODY + b" ", signed)
    with pytest.raises(WebhookVerificationError):
        Webhook(new_secret()).verify(BODY, signed)


def test_a_delivery_needs_a_secret() -> None:
    with pytest.raises(ValueError, match="at least one"):
        headers([], message_id="m", timestamp=1, body=BODY)
