"""Apply and inspect alembic migrations from code (`taskservice migrate`)."""

from __future__ import annotations

import asyncio
import threading
from importlib import resources
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.ext.asyncio import AsyncEngine


def migrations_path() -> Path:
    """`alembic/` at the repository root, or its copy inside an installed wheel."""
    packaged = Path(str(resources.files("taskservice"))) / "_alembic"
    if packaged.is_dir():
        return packaged
    source = Path(__file__).resolve().parents[3] / "alembic"
    if source.is_dir():
        return source
    raise RuntimeError(f"migrations not found (looked in {packaged} and {source})")


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(migrations_path()))
    config.attributes["url"] = url
    return config


def head_revision() -> str | None:
    script = ScriptDirectory.from_config(alembic_config("postgresql://unused"))
    return script.get_current_head()


# alembic keeps its migration context in module globals: one run per process at a
# time. Across processes the advisory lock in env.py does the same job.
_alembic_lock = threading.Lock()


def _upgrade_sync(url: str, revision: str) -> None:
    with _alembic_lock:
        command.upgrade(alembic_config(url), revision)


def _downgrade_sync(url: str, revision: str) -> None:
    with _alembic_lock:
        command.downgrade(alembic_config(url), revision)


async def upgrade(url: str, revision: str = "head") -> None:
    # alembic's env.py runs its own event loop; keep it off ours.
    await asyncio.to_thread(_upgrade_sync, url, revision)


async def downgrade(url: str, revision: str) -> None:
    await asyncio.to_thread(_downgrade_sync, url, revision)


async def current_revision(engine: AsyncEngine) -> str | None:
    async with engine.connect() as conn:
        return await conn.run_sync(
            lambda sync_conn: MigrationContext.configure(sync_conn).get_current_revision()
        )
