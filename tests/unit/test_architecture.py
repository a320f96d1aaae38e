"""The import contract (`[tool.importlinter]` in pyproject.toml) holds, and it would
catch an arrow against the direction."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT = str(Path(sys.executable).with_name("lint-imports"))


def lint(source: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(source)}
    return subprocess.run(
        [LINT, "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_imports_point_one_way() -> None:
    result = lint(ROOT / "src", ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("module", "arrow"),
    [
        (
            "worker/webhook_dispatcher.py",
            "from taskservice.api import schemas",
        ),  # runner → transport
        ("db/outage.py", "import taskservice.usecases.tasks"),  # storage → use case
        ("worker/pool.py", "import taskservice.worker.webhook_dispatcher"),  # runner → runner
        ("usecases/inbox.py", "import asyncpg"),  # the driver outside storage
        ("domain/models.py", "import pydantic_ai"),  # pydantic-ai in the domain
    ],
)
def test_an_arrow_against_the_direction_breaks_the_contract(
    tmp_path: Path, module: str, arrow: str
) -> None:
    source = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "taskservice", source / "taskservice")
    target = source / "taskservice" / module
    target.write_text(target.read_text() + f"\n{arrow}  # noqa\n")
    result = lint(source, tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "BROKEN" in result.stdout
