"""The README's walkthrough works verbatim against a live server."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from taskservice.demo import QUESTION
from tests.acceptance.conftest import cli_env, serve

pytestmark = pytest.mark.slow

README = Path(__file__).resolve().parents[2] / "README.md"


def block(name: str) -> str:
    """The shell block between `<!-- name:start -->` and `<!-- name:end -->`."""
    text = README.read_text()
    marked = text.split(f"<!-- {name}:start -->")[1].split(f"<!-- {name}:end -->")[0]
    return marked.split("```sh\n", 1)[1].rsplit("```", 1)[0]


def run_block(name: str, database_url: str, log: Path) -> str:
    """Run the block as written against a live server; its standard output."""
    script = block(name)
    with serve(cli_env(TASKSERVICE_DATABASE_URL=database_url), log) as server:
        # The README names port 8000; the test server has its own.
        script = script.replace("127.0.0.1:8000", f"127.0.0.1:{server.port}")
        result = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_readme_walkthrough_runs_as_written(
    tmp_path: Path, database_url: str, db: object
) -> None:
    lines = run_block("walkthrough", database_url, tmp_path / "serve.log").splitlines()
    assert re.fullmatch(r"/v1/tasks/[0-9a-f-]{36}", lines[0])
    task = json.loads(lines[1])
    assert task["state"] == "completed"
    assert task["metadata"] == {"ticket": "T-1"}
    events = json.loads(lines[2])["events"]
    states = [e["data"]["to"] for e in events if e["type"] == "state_change"]
    assert states == ["pending", "running", "completed"]
    listed = json.loads(lines[3])
    assert task["id"] in [t["id"] for t in listed["tasks"]]
    problem = json.loads(lines[4])
    assert (problem["status"], problem["state"]) == (409, "completed")
    first, second = lines[5].split(), lines[6].split()
    assert (first[0], second[0]) == ("201", "200")
    assert first[1] == second[1]


def test_the_readme_demo_shows_every_state_as_written(
    tmp_path: Path, database_url: str, db: object
) -> None:
    lines = run_block("demo", database_url, tmp_path / "serve.log").splitlines()
    counted = [line.split(maxsplit=1) for line in lines[:-5]]
    kinds = [(kind, int(n)) for n, kind in counted]
    assert [kind for kind, _ in kinds] == [
        "event: state_change",
        "event: progress",
        "event: delta",
        "event: state_change",
    ], lines
    assert kinds[2][1] >= 10  # the answer came in many pieces
    cancelled, waiting, answered, completed, children = map(json.loads, lines[-5:])
    assert (cancelled["state"], cancelled["cancel_reason"]) == ("cancelled", "enough")
    assert waiting["state"] == "input_required"
    assert waiting["input_request"]["questions"][0]["question"] == QUESTION
    assert answered["state"] == "running"
    assert completed["state"] == "completed"
    assert "written in teal" in completed["result"]
    assert [t["state"] for t in children["tasks"]] == ["completed", "completed"]
