"""The README runs as written: every shell and Python block against a live server
(the walkthrough and the demo with checks of what they print), and its table of
settings is the settings class's."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from taskservice.agents.demo import QUESTION
from taskservice.settings import markdown_table
from tests.acceptance.conftest import cli_env, serve

pytestmark = pytest.mark.slow

README = Path(__file__).resolve().parents[2] / "README.md"
ROOT = README.parent
NOT_RUN = "<!-- not run by the README test: "
# Blocks the README test leaves alone, each saying why in the README: the install
# (it is CI's own command), webhooks to the reader's receivers (names that do not
# resolve offline), and the conformance kits' runs, from their checkouts.
EXPECTED_NOT_RUN = [
    "# Install and serve (embedded PostgreSQL, offline model: no setup, no API key)",
    "# A task's own webhook, registered with it: the secret is in the response, once.",
    "TASKSERVICE_PLUGINS=taskservice.agents.conformance TASKSERVICE_DEFAULT_MODEL=conformance \\",
    "mitmdump --mode reverse:http://127.0.0.1:8931 --listen-host 127.0.0.1 -p 8932 \\",
    "TASKSERVICE_AUTH_MODE=open TASKSERVICE_PORT=8933 .venv/bin/taskservice serve",
]
# What a block must not print: an HTTP error's body, a JSON-RPC error.
PROBLEM = '"type":"https://taskservice.dev/problems/'
RPC_ERROR = '"error":{"code"'


@dataclass
class Block:
    language: str  # sh or python
    code: str
    line: int
    region: str | None  # the named region (walkthrough, demo) it is in
    not_run: str | None  # why the test leaves it alone


def blocks() -> list[Block]:
    text = README.read_text()
    found = []
    for match in re.finditer(r"^```(sh|python)\n(.*?)^```$", text, re.MULTILINE | re.DOTALL):
        before = text[: match.start()]
        line = before.count("\n") + 1
        starts = re.findall(r"<!-- (\w+):start -->", before)
        ends = re.findall(r"<!-- (\w+):end -->", before)
        region = starts[-1] if len(starts) > len(ends) else None
        previous = before.rstrip("\n").rsplit("\n", 1)[-1]
        not_run = previous[len(NOT_RUN) : -4] if previous.startswith(NOT_RUN) else None
        found.append(Block(match.group(1), match.group(2), line, region, not_run))
    return found


def block(name: str) -> str:
    """The shell block between `<!-- name:start -->` and `<!-- name:end -->`."""
    text = README.read_text()
    marked = text.split(f"<!-- {name}:start -->")[1].split(f"<!-- {name}:end -->")[0]
    return marked.split("```sh\n", 1)[1].rsplit("```", 1)[0]


def test_every_block_is_run_or_says_why_not() -> None:
    every = blocks()
    assert [b.code.splitlines()[0] for b in every if b.not_run] == EXPECTED_NOT_RUN
    assert all(b.not_run for b in every if b.not_run is not None)
    assert {b.region for b in every} == {None, "walkthrough", "demo"}
    assert len([b for b in every if b.region is None and not b.not_run]) >= 12


def test_the_settings_table_is_the_settings_class() -> None:
    text = README.read_text()
    table = text.split("<!-- settings:start -->\n")[1].split("<!-- settings:end -->")[0]
    assert table == markdown_table(), "regenerate: .venv/bin/taskservice settings --markdown"


def test_every_other_block_runs_as_written(tmp_path: Path, database_url: str, db: object) -> None:
    """In the README's order, on one server, as a reader would paste them (the key
    block, which ends open mode, comes last); each must exit 0 with no HTTP error and
    no JSON-RPC error."""
    todo = [b for b in blocks() if b.region is None and not b.not_run]
    outputs: dict[int, str] = {}
    errors: dict[int, str] = {}
    with serve(cli_env(TASKSERVICE_DATABASE_URL=database_url), tmp_path / "serve.log") as server:
        for block in todo:
            code = block.code.replace("127.0.0.1:8000", f"127.0.0.1:{server.port}")
            if block.language == "sh":
                command = ["bash", "-euo", "pipefail", "-c", code]
            else:
                command = [sys.executable, "-c", code]
            result = subprocess.run(
                command,
                capture_output=True,
                text=True,
                timeout=90,
                check=False,
                cwd=ROOT,
                env=cli_env(  # the same database, and the CLI's verbs to this server
                    TASKSERVICE_DATABASE_URL=database_url,
                    TASKSERVICE_URL=f"http://127.0.0.1:{server.port}",
                ),
            )
            assert result.returncode == 0, (block.line, result.stdout, result.stderr)
            printed = result.stdout.replace(" ", "")
            assert PROBLEM not in printed, (block.line, printed)
            assert RPC_ERROR not in printed, (block.line, printed)
            outputs[block.line], errors[block.line] = result.stdout, result.stderr
    assert todo[-1].code.startswith("KEY=$(.venv/bin/taskservice keys create")
    assert "401 without a key" in outputs[todo[-1].line]
    said = outputs[next(b.line for b in todo if "client.stream" in b.code)].splitlines()
    assert said[-1] == "completed True"  # the client rebuilt the answer from the deltas
    cli = next(b.line for b in todo if b.code.startswith("TS=.venv/bin/taskservice"))
    assert "submitted" in errors[cli]
    assert "HTTP Request" not in errors[cli]  # the CLI does not log its own requests


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
