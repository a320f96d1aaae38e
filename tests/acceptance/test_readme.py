"""The README's walkthrough works verbatim against a live server."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.acceptance.conftest import cli_env, serve

pytestmark = pytest.mark.slow

README = Path(__file__).resolve().parents[2] / "README.md"


def walkthrough() -> str:
    text = README.read_text()
    block = text.split("<!-- walkthrough:start -->")[1].split("<!-- walkthrough:end -->")[0]
    return block.split("```sh\n", 1)[1].rsplit("```", 1)[0]


def test_the_readme_walkthrough_runs_as_written(
    tmp_path: Path, database_url: str, db: object
) -> None:
    script = walkthrough()
    with serve(cli_env(TASKSERVICE_DATABASE_URL=database_url), tmp_path / "serve.log") as server:
        # The walkthrough names port 8000; the test server has its own.
        script = script.replace("127.0.0.1:8000", f"127.0.0.1:{server.port}")
        result = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
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
