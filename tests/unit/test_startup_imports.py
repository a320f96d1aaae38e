"""What a process loads at start: the A2A SDK (about 8 MiB of every process) only
where an agent profile delegates to a remote agent; the MCP client (pydantic-ai's,
FastMCP's: over a second to import) only when a profile's MCP servers are used;
alembic only where the schema is migrated (not in `serve`'s processes: their
supervisor migrates)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from taskservice.agents.catalog import AgentCatalog
from taskservice.runtime import _delegator
from taskservice.settings import Settings

_LOADED = """
import sys
import taskservice.api.app, taskservice.runtime, taskservice.worker.executor
print(sorted({m.split('.')[0] for m in sys.modules if m == 'a2a' or m.startswith('a2a.')}))
print(sorted(m for m in sys.modules if m in ('fastmcp', 'pydantic_ai.mcp')))
print(sorted(m for m in sys.modules if m == 'alembic'))
"""


def test_the_app_and_its_workers_load_no_a2a_sdk() -> None:
    loaded = subprocess.run(
        [sys.executable, "-c", _LOADED], capture_output=True, text=True, check=True
    ).stdout
    assert loaded.split("\n")[0] == "[]"


def test_the_app_and_its_workers_load_no_mcp_client() -> None:
    loaded = subprocess.run(
        [sys.executable, "-c", _LOADED], capture_output=True, text=True, check=True
    ).stdout
    assert loaded.split("\n")[1] == "[]"


def test_the_app_loads_no_migration_tool() -> None:
    loaded = subprocess.run(
        [sys.executable, "-c", _LOADED], capture_output=True, text=True, check=True
    ).stdout
    assert loaded.split("\n")[2] == "[]"


def test_a_delegator_only_where_a_profile_delegates(tmp_path: Path) -> None:
    local = AgentCatalog(Settings(database_url=None))
    assert _delegator(local) is None
    agents = tmp_path / "agents.toml"
    agents.write_text('[agents.helper]\nkind = "a2a"\ncard_url = "https://agents.example"\n')
    remote = AgentCatalog(Settings(database_url=None, agents_file=str(agents)))
    delegator = _delegator(remote)
    assert delegator is not None
    assert type(delegator).__module__ == "taskservice.worker.delegation"
