"""Alembic environment: async engine, and one migrator at a time.

Replicas starting together each run `upgrade head`; a transaction-scoped advisory
lock makes the second wait for the first and then find nothing to do.
"""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy import pool, text
from sqlalchemy.engine import Connection

from taskservice.db.engine import create_engine
from taskservice.db.tables import metadata

MIGRATION_LOCK_KEY = 0x7A5C_5E71  # arbitrary, stable: "taskservice migrations"

config = context.config


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        compare_type=True,
        transaction_per_migration=False,
    )
    with context.begin_transaction():
        connection.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": MIGRATION_LOCK_KEY})
        context.run_migrations()


async def _run_async() -> None:
    url = config.get_main_option("sqlalchemy.url") or config.attributes.get("url")
    if not url:
        raise RuntimeError(
            "no database URL: set TASKSERVICE_DATABASE_URL or use `taskservice migrate`"
        )
    engine = create_engine(url, poolclass=pool.NullPool)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_run)
    finally:
        await engine.dispose()


def _from_environment() -> None:
    if config.get_main_option("sqlalchemy.url") or config.attributes.get("url"):
        return
    from taskservice.settings import get_settings

    settings = get_settings()
    if settings.database_url:
        config.attributes["url"] = settings.database_url


if context.is_offline_mode():
    raise RuntimeError("offline (SQL script) migrations are not supported")

_from_environment()
connection = config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    asyncio.run(_run_async())
