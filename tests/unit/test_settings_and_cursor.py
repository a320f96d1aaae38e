from __future__ import annotations

import uuid

import pytest

from taskservice.domain.errors import InvalidRequest
from taskservice.domain.ids import decode_cursor, encode_cursor
from taskservice.settings import Settings, is_loopback_host


def test_settings_read_prefixed_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TASKSERVICE_PORT", "9123")
    monkeypatch.setenv("TASKSERVICE_ALLOWED_MODELS", "openai-chat:gpt-4o, anthropic:claude")
    settings = Settings()
    assert settings.port == 9123
    # The default model is always allowed, and comes first.
    assert settings.allowed_models == ["offline", "openai-chat:gpt-4o", "anthropic:claude"]


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.0.1", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("10.0.0.1", False),
        ("example.com", False),
    ],
)
def test_loopback_detection(host: str, loopback: bool) -> None:
    assert is_loopback_host(host) is loopback


def test_cursor_round_trips() -> None:
    task_id = uuid.uuid4()
    assert decode_cursor(encode_cursor(task_id)) == task_id


@pytest.mark.parametrize("cursor", ["", "garbage", "djE6bm90LWEtdXVpZA", "!!!"])
def test_foreign_cursors_are_rejected(cursor: str) -> None:
    with pytest.raises(InvalidRequest):
        decode_cursor(cursor)


@pytest.mark.parametrize(
    ("value", "rejected"),
    [
        ("a\x00b", True),
        ({"key\x00": 1}, True),
        (["ok", {"deep": "\x00"}], True),
        ("\\\x00", True),  # a backslash, then NUL
        ("C:\\u0000", False),  # a literal backslash-u-0000 is just text
        ("\\\\u0000", False),
        ("plain", False),
    ],
)
def test_nul_characters_are_found_anywhere_in_json(value: object, rejected: bool) -> None:
    from taskservice.domain.jsonvalues import encode

    if rejected:
        with pytest.raises(InvalidRequest, match="NUL"):
            encode(value)
    else:
        assert "\x00" not in encode(value)
