"""Query and header parameters that several routes share, bounded to what PostgreSQL
takes: an out-of-range value is a 422 before anything runs (and before a stream's
200 goes out), never a driver error."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Literal

from fastapi import Query
from pydantic import AfterValidator

INT32_MAX = 2**31 - 1  # integer columns: a task's event seq, a message's position
INT64_MAX = 2**63 - 1  # bigint columns: global event ids, tool call ids


def _representable(value: datetime) -> datetime:
    """An aware time must still be a time in UTC (`9999-12-31T23:59:59-23:59` is not)."""
    if value.tzinfo is not None:
        try:
            value.astimezone(UTC)
        except OverflowError:
            raise ValueError("out of range: in UTC it falls outside years 1 to 9999") from None
    return value


Timestamp = Annotated[datetime, AfterValidator(_representable)]

Count = Annotated[
    Literal["exact", "estimate"] | None,
    Query(
        description="Also answer `total`, the rows the filters match (whatever the cursor): "
        "`exact` counts them, under a time limit (past it `total` is null and "
        "`total_note` says why); `estimate` is the planner's estimate, read no rows. "
        "Without it, no count is made."
    ),
]
