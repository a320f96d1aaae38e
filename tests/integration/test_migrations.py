"""The migrations produce exactly the schema the code declares, and undo cleanly."""

from __future__ import annotations

import asyncio
import os
import secrets
import sys
from collections.abc import AsyncIterator

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from taskservice.db import migrate
from taskservice.db.engine import create_engine
from taskservice.db.tables import metadata
from tests.conftest import admin_execute, with_database


@pytest.fixture
async def empty_database(server_url: str) -> AsyncIterator[str]:
    name = f"taskservice_migration_{secrets.token_hex(4)}"
    await admin_execute(server_url, f'CREATE DATABASE "{name}"')
    yield with_database(server_url, name)
    await admin_execute(server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def _diff(url: str) -> list[object]:
    engine = create_engine(url, pool_size=1)
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(
                lambda sync: compare_metadata(
                    MigrationContext.configure(sync, opts={"compare_type": True}), metadata
                )
            )
    finally:
        await engine.dispose()


async def _tables(url: str) -> set[str]:
    engine = create_engine(url, pool_size=1)
    try:
        async with engine.connect() as conn:
            return set(await conn.run_sync(lambda sync: inspect(sync).get_table_names()))
    finally:
        await engine.dispose()


async def test_upgrade_head_on_an_empty_database_matches_the_metadata_exactly(
    empty_database: str,
) -> None:
    await migrate.upgrade(empty_database)
    assert await _diff(empty_database) == []
    assert {t.name for t in metadata.sorted_tables} | {"alembic_version"} == await _tables(
        empty_database
    )


async def test_downgrade_to_base_removes_everything_and_upgrade_works_again(
    empty_database: str,
) -> None:
    await migrate.upgrade(empty_database)
    await migrate.downgrade(empty_database, "base")
    assert await _tables(empty_database) == {"alembic_version"}
    await migrate.upgrade(empty_database)
    assert await _diff(empty_database) == []


async def test_replicas_migrating_at_once_migrate_once(empty_database: str) -> None:
    env = {**os.environ, "TASKSERVICE_DATABASE_URL": empty_database}
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "taskservice.cli",
            "migrate",
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        for _ in range(4)
    ]
    outputs = await asyncio.gather(*(p.communicate() for p in procs))
    assert [p.returncode for p in procs] == [0, 0, 0, 0], outputs
    # Exactly one process ran the migration; the others found the schema at head.
    ran = [out for out, _ in outputs if b"migrations applied just now" in out]
    assert len(ran) == 1, outputs
    assert await _diff(empty_database) == []
    engine = create_engine(empty_database, pool_size=1)
    try:
        async with engine.connect() as conn:
            versions = (await conn.execute(text("SELECT version_num FROM alembic_version"))).all()
    finally:
        await engine.dispose()
    assert [v[0] for v in versions] == [migrate.head_revision()]
