"""The image's build context: what the Dockerfile installs goes in, a checkout's local
state (its venv, the embedded database's files, caches) stays out. Docker has no
engine here, so the context is computed as Docker does for these patterns (each a
path relative to the context, `**/` any depth, a trailing `/` a directory)."""

from __future__ import annotations

import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _patterns() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip().rstrip("/") for line in lines if line.strip() and not line.startswith("#")]


def ignored(path: str) -> bool:
    """Whether `path` (relative to the context) or a folder holding it is left out."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in _patterns():
        bare = pattern.removeprefix("**/")
        for prefix in prefixes:
            if fnmatch.fnmatchcase(prefix, pattern):
                return True
            tail = prefix.rsplit("/", 1)[-1]
            if pattern.startswith("**/") and fnmatch.fnmatchcase(tail, bare):
                return True
    return False


def test_a_checkouts_local_state_stays_out_of_the_image() -> None:
    for local in (
        ".venv/bin/python",
        ".test-pg/pgdata/PG_VERSION",
        ".taskservice/pgdata/PG_VERSION",
        "src/taskservice/__pycache__/cli.cpython-311.pyc",
        ".git/HEAD",
        ".mypy_cache/3.11/x.json",
        "frontend/node_modules/redoc/package.json",
    ):
        assert ignored(local), local


def test_what_the_dockerfile_installs_goes_in() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "pip install -e '.[embedded]'" in dockerfile  # needs these:
    for needed in (
        "pyproject.toml",
        "README.md",
        "alembic/env.py",
        "src/taskservice/cli.py",
        "src/taskservice/api/static/vendor/redoc/redoc.standalone.js",  # /redoc's
    ):
        assert (ROOT / needed).exists(), needed
        assert not ignored(needed), needed
