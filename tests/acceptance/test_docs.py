"""The documentation runs as written: every shell and Python block of the README and of
docs/ against a live server, page by page (`doc_blocks`), with checks of what some of
them print; the pages made from the code are made from it (`docs/_hooks/generated.py`);
and the site builds with `mkdocs build --strict`, offline."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from taskservice.domain.states import TRANSITIONS
from taskservice.settings import markdown_table
from tests.acceptance.doc_blocks import ROOT, Block, Ran, blocks, pages, run_page

# The blocks the docs test leaves alone, by page, each saying why on the page: the
# install (CI's own command), webhooks to the reader's receivers (names that do not
# resolve offline), the conformance kits' runs from their checkouts, and servers of
# other settings.
EXPECTED_NOT_RUN = {
    "README.md": [
        "# Install and serve (embedded PostgreSQL, offline model: no setup, no API key)",
    ],
    "docs/getting-started.md": [
        "# Install and serve (embedded PostgreSQL, offline model: no setup, no API key)",
    ],
    "docs/guides/webhooks.md": [
        "# A task's own webhook, registered with it: the secret is in the response, once.",
    ],
    "docs/conformance.md": [
        "TASKSERVICE_PLUGINS=taskservice.agents.conformance "
        "TASKSERVICE_DEFAULT_MODEL=conformance \\",
        "mitmdump --mode reverse:http://127.0.0.1:8931 --listen-host 127.0.0.1 -p 8932 \\",
        "TASKSERVICE_AUTH_MODE=open TASKSERVICE_PORT=8933 .venv/bin/taskservice serve",
    ],
    "docs/development.md": [
        "python3 -m venv .venv && .venv/bin/pip install -e '.[dev]' && .venv/bin/pytest",
        ".venv/bin/mkdocs serve",
    ],
    "docs/guides/models.md": [
        "# OpenAI, with the provider's usual key variable.",
    ],
}
RUN_PAGES = [page for page in pages() if any(b.runs for b in blocks(page))]


def test_every_block_is_run_or_says_why_not() -> None:
    every = [b for page in pages() for b in blocks(page)]
    not_run: dict[str, list[str]] = {}
    for b in every:
        if b.not_run is not None:
            assert b.not_run.strip(), f"{b.page}:{b.line} says no reason"
            not_run.setdefault(b.page, []).append(b.first_line)
    assert not_run == EXPECTED_NOT_RUN
    assert {b.region for b in every} == {None, "walkthrough", "demo"}
    assert len([b for b in every if b.runs]) >= 25
    # A key ends open mode for good: the block that creates one is its page's last.
    for page in RUN_PAGES:
        run = [b for b in blocks(page) if b.runs]
        assert not any("keys create" in b.code for b in run[:-1]), page


def stdout(ran: list[Ran], holding: str) -> str:
    """What the one block holding this text printed."""
    (found,) = [r for r in ran if holding in r.block.code]
    return found.stdout


def webhook_delivered(ran: list[Ran]) -> None:
    said = stdout(ran, "receiver.py 1").splitlines()
    assert re.fullmatch(r"verified \S+: task\.completed", said[0]), said
    assert re.fullmatch(r"  task [0-9a-f-]{36} completed: .+", said[1]), said
    assert said[2] == "completed succeeded [204]", said
    budget = stdout(ran, '"states": ["budget.80", "budget.100"]')
    assert budget == "['budget.80', 'budget.100']\n", budget


def subtasks_cancelled(ran: list[Ran]) -> None:
    said = stdout(ran, '"spawn 2, take 20s"').splitlines()
    assert said[0] == "input_required subtasks"
    assert said[1].count("'cancelled'") == 2, said


def client_rebuilt_the_answer(ran: list[Ran]) -> None:
    assert stdout(ran, "client.stream").splitlines()[-1] == "completed True"


def cli_says_what_it_does(ran: list[Ran]) -> None:
    (cli,) = [r for r in ran if r.block.code.startswith("TS=.venv/bin/taskservice")]
    assert "submitted" in cli.stderr
    assert "HTTP Request" not in cli.stderr  # the CLI does not log its own requests


def forks_went_as_said(ran: list[Ran]) -> None:
    said = stdout(ran, '"answer": "teal"').splitlines()
    assert said[:3] == ["completed", "written in teal", "[0, 1, 3, 5, 7]"], said
    assert said[3].startswith("{'task_id': "), said
    assert said[3].endswith("'at': 5}"), said
    assert "'Name three lakes.'" in stdout(ran, "client.fork")
    assert stdout(ran, "taskservice fork").strip() == "fork completed"
    approved = stdout(ran, "grep -o 'published to #ops'").splitlines()
    assert "'channel': '#demo'" in approved[0], approved
    assert approved[1:] == ["running", "published to #ops"], approved


def mcp_decided_the_call(ran: list[Ran]) -> None:
    said = stdout(ran, "elicitation_handler=decide").splitlines()
    assert said[0].startswith("approve publish {"), said
    assert "You approved publishing it: published to #demo" in said[1], said


def keys_end_open_mode(ran: list[Ran]) -> None:
    assert ran[-1].block.code.startswith("KEY=$(.venv/bin/taskservice keys create")
    assert "401 without a key" in ran[-1].stdout


CHECKS: dict[str, Callable[[list[Ran]], None]] = {
    "docs/guides/webhooks.md": webhook_delivered,
    "docs/concepts/states.md": subtasks_cancelled,
    "docs/guides/python-client.md": client_rebuilt_the_answer,
    "docs/reference/cli.md": cli_says_what_it_does,
    "docs/guides/deployment.md": keys_end_open_mode,
    "docs/guides/run-controls.md": forks_went_as_said,
    "docs/guides/mcp.md": mcp_decided_the_call,
}


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("page", RUN_PAGES)
def test_every_block_of_the_page_runs_as_written(
    page: str, tmp_path: Path, database_url: str, db: object
) -> None:
    """In the page's order, on a server of the page's own (empty tables), as a reader
    would paste them; each must exit 0 with no HTTP error and no JSON-RPC error."""
    ran = run_page(page, database_url, tmp_path)
    CHECKS.get(page, lambda _: None)(ran)


def test_the_pages_with_checks_have_blocks_to_check() -> None:
    assert set(CHECKS) <= set(RUN_PAGES)


# The generated pages.


def hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs/_hooks/generated.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def page_with(marker: str) -> str:
    (found,) = [p for p in pages() if marker in (ROOT / p).read_text()]
    return found


def test_the_configuration_page_is_the_settings_class() -> None:
    generated = hooks()
    assert page_with(generated.SETTINGS_MARKER) == "docs/reference/configuration.md"
    assert generated.settings_table() == markdown_table()
    filled = generated.on_page_markdown(f"x\n\n{generated.SETTINGS_MARKER}\ny")
    assert filled == f"x\n\n{markdown_table()}\ny"


def test_the_states_page_shows_the_transition_table() -> None:
    generated = hooks()
    assert page_with(generated.TRANSITIONS_MARKER) == "docs/concepts/states.md"
    rows = generated.transitions_table().splitlines()[2:]
    allowed = {
        (row.split("|")[1].strip(" `"), target.strip(" `"))
        for row in rows
        for target in row.split("|")[2].split(",")
    }
    assert allowed == {(a.value, b.value) for a, targets in TRANSITIONS.items() for b in targets}


def test_the_api_reference_has_every_operation_and_schema() -> None:
    generated = hooks()
    assert page_with(generated.OPENAPI_MARKER) == "docs/reference/api.md"
    spec = json.loads((ROOT / "openapi/openapi.json").read_text())
    markdown = generated.api_reference(spec)
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            assert f"`{method.upper()} {path}` · `{operation['operationId']}`" in markdown
    for name in spec["components"]["schemas"]:
        assert f"### {name} {{#schema-{name.lower()}}}" in markdown
    # Every link to a schema has its heading.
    linked = set(re.findall(r"\(#schema-([a-z0-9_]+)\)", markdown))
    assert linked <= {name.lower() for name in spec["components"]["schemas"]}


@pytest.mark.slow
def test_the_site_builds_strict_and_offline(tmp_path: Path) -> None:
    """`mkdocs build --strict` (CI runs it too): no broken link or anchor, no missing
    snippet; and the pages load nothing from another host (fonts, scripts, styles)."""
    mkdocs = Path(sys.prefix) / "bin" / "mkdocs"
    if not mkdocs.exists() and not shutil.which("mkdocs"):
        pytest.skip("mkdocs is not installed (the dev extra installs it)")
    site = tmp_path / "site"
    result = subprocess.run(
        [str(mkdocs if mkdocs.exists() else "mkdocs"), "build", "--strict", "-d", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    for html in site.rglob("*.html"):
        text = html.read_text()
        remote = re.findall(r"<(?:script|link|img)\b[^>]*(?:src|href)=\"(?:https?:)?//[^\"]+", text)
        assert not remote, (html, remote)
    api = (site / "reference/api/index.html").read_text()
    assert 'id="createTask"' in api
    configuration = (site / "reference/configuration/index.html").read_text()
    assert "WEBHOOK_ALLOW_TARGETS" in configuration


def test_blocks_know_their_markers() -> None:
    (serves,) = [b for b in blocks("docs/guides/webhooks.md") if b.serves]
    assert "TASKSERVICE_WEBHOOK_ALLOW_TARGETS=127.0.0.1" in serves.code
    (saved,) = [b for b in blocks("docs/guides/webhooks.md") if b.saved_as]
    assert (saved.saved_as, saved.language) == ("receiver.py", "python")
    assert isinstance(saved, Block)
