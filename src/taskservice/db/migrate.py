"""Apply and inspect alembic migrations from code (`taskservice migrate`)."""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass, field
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


log = logging.getLogger(__name__)


@dataclass
class Upgraded:
    """What an upgrade did: the steps it ran (alembic's "Running upgrade a -> b, why"
    lines), and the revision the schema is at."""

    steps: list[str] = field(default_factory=list)
    revision: str | None = None

    def describe(self) -> str:
        if not self.steps:
            return f"schema {self.revision}, up to date"
        one = "migration" if len(self.steps) == 1 else "migrations"
        return f"schema {self.revision}, {len(self.steps)} {one} applied just now"


class _Steps(logging.Handler):
    """Collects alembic's step lines; at debug level they are also logged as they run."""

    def __init__(self, upgraded: Upgraded) -> None:
        super().__init__(logging.INFO)
        self.upgraded = upgraded

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("Running upgrade"):
            self.upgraded.steps.append(message.removeprefix("Running upgrade").strip())


def _upgrade_sync(url: str, revision: str) -> Upgraded:
    upgraded = Upgraded()
    steps = _Steps(upgraded)
    alembic_log = logging.getLogger("alembic.runtime.migration")
    quiet = not logging.getLogger().isEnabledFor(logging.DEBUG)
    with _alembic_lock:
        alembic_log.addHandler(steps)
        level, propagate = alembic_log.level, alembic_log.propagate
        alembic_log.setLevel(logging.INFO)
        # One line for the whole upgrade (the caller's), unless debug asks for each step.
        alembic_log.propagate = not quiet
        try:
            command.upgrade(alembic_config(url), revision)
        finally:
            alembic_log.removeHandler(steps)
            alembic_log.setLevel(level)
            alembic_log.propagate = propagate
    upgraded.revision = head_revision() if revision == "head" else revision
    return upgraded


def _downgrade_sync(url: str, revision: str) -> None:
    with _alembic_lock:
        command.downgrade(alembic_config(url), revision)


async def upgrade(url: str, revision: str = "head") -> Upgraded:
    # alembic's env.py runs its own event loop; keep it off ours.
    return await asyncio.to_thread(_upgrade_sync, url, revision)


async def downgrade(url: str, revision: str) -> None:
    await asyncio.to_thread(_downgrade_sync, url, revision)


async def current_revision(engine: AsyncEngine) -> str | None:
    async with engine.connect() as conn:
        return await conn.run_sync(
            lambda sync_conn: MigrationContext.configure(sync_conn).get_current_revision()
        )
