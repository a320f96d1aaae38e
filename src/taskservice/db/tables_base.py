"""What every table of the schema shares: the `MetaData` they are defined on (with
the naming convention of their constraints and indexes), the timestamp type and the
`created_at` column. The tables themselves are in `tables` (and, for webhooks,
`tables_webhooks`); `tables.metadata` is this one, holding them all.
"""

from __future__ import annotations

from sqlalchemy import Column, MetaData, func
from sqlalchemy.dialects.postgresql import TIMESTAMP

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

TZ = TIMESTAMP(timezone=True)


def created() -> Column[object]:
    return Column("created_at", TZ, nullable=False, server_default=func.now())
