from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from taskservice.domain.ids import parse_uuid, uuid7, uuid7_floor


def test_uuid7_has_version_7_and_rfc_variant() -> None:
    value = uuid7()
    assert value.version == 7
    assert value.variant == "specified in RFC 4122"


def test_uuid7_is_strictly_increasing_within_a_process() -> None:
    values = [uuid7() for _ in range(20_000)]
    assert values == sorted(values)
    assert len(set(values)) == len(values)


def test_parse_uuid_rejects_what_is_not_a_uuid() -> None:
    assert parse_uuid("nope") is None
    assert parse_uuid("01a20226-d2ef-72e0-bc5b-a4dfc7390b6") is None
    assert parse_uuid(str(uuid7())) is not None


def test_uuid7_floor_bounds_the_ids_of_its_millisecond() -> None:
    time.sleep(0.05)  # past any millisecond a burst of ids borrowed ahead
    before = datetime.now(UTC)
    made = uuid7()
    after = datetime.now(UTC) + timedelta(milliseconds=1)
    assert uuid7_floor(before) <= made < uuid7_floor(after)
    assert uuid7_floor(datetime(1, 1, 1, tzinfo=UTC)).int == 0
