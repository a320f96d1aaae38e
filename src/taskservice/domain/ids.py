"""Ids: time-ordered UUIDv7 (RFC 9562), monotonic within a process; the names a
process's workers and dispatchers hold leases under; and the opaque keyset cursors
pages hand out (an id, versioned)."""

from __future__ import annotations

import base64
import os
import socket
import threading
import time
import uuid
from datetime import datetime

from taskservice.domain.errors import InvalidRequest

_lock = threading.Lock()
_last_ms = 0
_counter = 0  # 12-bit rand_a used as a counter within one millisecond


def uuid7() -> uuid.UUID:
    global _last_ms, _counter
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms > _last_ms:
            _last_ms = ms
            _counter = int.from_bytes(os.urandom(2), "big") & 0x3FF  # leave room to count up
        else:
            _counter += 1
            if _counter > 0xFFF:  # counter exhausted: borrow the next millisecond
                _last_ms += 1
                _counter = 0
            ms = _last_ms
        rand_b = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
        value = (ms & ((1 << 48) - 1)) << 80
        value |= 0x7 << 76
        value |= _counter << 64
        value |= 0b10 << 62
        value |= rand_b
    return uuid.UUID(int=value)


def uuid7_floor(moment: datetime) -> uuid.UUID:
    """The least UUIDv7 of `moment`'s millisecond (of 1970 for earlier times): every
    id made at or after it sorts at or above it."""
    ms = max(0, int(moment.timestamp() * 1000))
    return uuid.UUID(int=(ms & ((1 << 48) - 1)) << 80)


def parse_uuid(text: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(text)
    except (ValueError, AttributeError, TypeError):
        return None


def new_worker_id() -> str:
    """A lease owner's name, fresh at every start: a restarted process never inherits
    old leases."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


_CURSOR_VERSION = "v1"


def encode_cursor(task_id: uuid.UUID) -> str:
    raw = f"{_CURSOR_VERSION}:{task_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> uuid.UUID:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        version, _, text = raw.partition(":")
    except (ValueError, UnicodeDecodeError):
        version, text = "", ""
    task_id = parse_uuid(text) if version == _CURSOR_VERSION else None
    if task_id is None:
        raise InvalidRequest("cursor is not one this service issued", field="cursor")
    return task_id


_STATUS_CURSOR = "s1"


def encode_status_cursor(at: datetime, task_id: uuid.UUID) -> str:
    """A page token of a list by status time: the last task's time and id."""
    raw = f"{_STATUS_CURSOR}|{at.isoformat()}|{task_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_status_cursor(token: str, field: str = "pageToken") -> tuple[datetime, uuid.UUID]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        version, at, text = raw.split("|")
        moment = datetime.fromisoformat(at) if version == _STATUS_CURSOR else None
    except (ValueError, UnicodeDecodeError):
        moment = None
    task_id = parse_uuid(text) if moment is not None else None
    if moment is None or task_id is None or moment.tzinfo is None:
        raise InvalidRequest(f"{field} is not one this service issued", field=field)
    return moment, task_id
