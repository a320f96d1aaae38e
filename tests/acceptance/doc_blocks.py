"""The code blocks of the README and of docs/, and running them as a reader would.

Every ```sh and ```python block of a page is run against a live server, in the page's
order, unless the line before it says otherwise:

- `<!-- not run by the docs test: why -->`: left alone, for the reason given;
- `<!-- the docs test serves this page with these settings -->`: a
  `VAR=value … .venv/bin/taskservice serve` command; the page's blocks run against a
  server started with those variables instead of the defaults;
- `<!-- the docs test saves this as NAME -->`: the block is a file the page's later
  blocks use (a webhook receiver), written into their working folder.

Blocks between `<!-- --8<-- [start:NAME] -->` and `<!-- --8<-- [end:NAME] -->` are a
named region (the README's walkthrough and demo, which the docs include as snippets):
their own tests run them and check what they print.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.acceptance.conftest import cli_env, serve

ROOT = Path(__file__).resolve().parents[2]
NOT_RUN = "<!-- not run by the docs test: "
SERVES = "<!-- the docs test serves this page with these settings -->"
SAVED_AS = re.compile(r"<!-- the docs test saves this as ([\w.-]+) -->")
REGION = re.compile(r"<!-- --8<-- \[(start|end):(\w+)\] -->")
# toml blocks count only as files to save (agent profiles); others are examples.
BLOCK = re.compile(r"^```(sh|python|toml)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
# What a block must not print: an HTTP error's body, a JSON-RPC error.
PROBLEM = '"type":"https://taskservice.dev/problems/'
RPC_ERROR = '"error":{"code"'
BLOCK_TIMEOUT = 90  # seconds


@dataclass
class Block:
    page: str  # relative to the repository: README.md, docs/guides/webhooks.md
    language: str  # sh, python (or toml)
    code: str
    line: int
    region: str | None  # the named region it is in
    not_run: str | None  # why the test leaves it alone
    serves: bool = False  # the server the page's blocks run against
    saved_as: str | None = None  # a file for the page's other blocks

    @property
    def runs(self) -> bool:
        return (
            self.language in ("sh", "python")
            and self.region is None
            and self.not_run is None
            and not self.serves
            and not self.saved_as
        )

    @property
    def first_line(self) -> str:
        return self.code.splitlines()[0]


def pages() -> list[str]:
    """The README, then every page of docs/, by path."""
    docs = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))
    return ["README.md", *docs]


def blocks(page: str) -> list[Block]:
    text = (ROOT / page).read_text()
    found = []
    for match in BLOCK.finditer(text):
        before = text[: match.start()]
        marks = REGION.findall(before)
        open_regions = [name for kind, name in marks if kind == "start"]
        for kind, name in marks:
            if kind == "end" and name in open_regions:
                open_regions.remove(name)
        previous = before.rstrip("\n").rsplit("\n", 1)[-1]
        saved = SAVED_AS.fullmatch(previous)
        found.append(
            Block(
                page=page,
                language=match.group(1),
                code=match.group(2),
                line=before.count("\n") + 1,
                region=open_regions[-1] if open_regions else None,
                not_run=previous[len(NOT_RUN) : -4] if previous.startswith(NOT_RUN) else None,
                serves=previous == SERVES,
                saved_as=saved.group(1) if saved else None,
            )
        )
    return found


def region(page: str, name: str) -> str:
    """The shell block of a named region."""
    (found,) = [b for b in blocks(page) if b.region == name and b.language == "sh"]
    return found.code


def serve_settings(block: Block) -> dict[str, str]:
    """The variables of a `VAR=value … .venv/bin/taskservice serve` block."""
    words = shlex.split(block.code, comments=True)
    assert words[-2:] == [".venv/bin/taskservice", "serve"], block
    pairs = [word.split("=", 1) for word in words[:-2]]
    assert all(len(p) == 2 and p[0].startswith("TASKSERVICE_") for p in pairs), block
    return dict(pairs)  # type: ignore[arg-type]


@dataclass
class Ran:
    block: Block
    stdout: str
    stderr: str


def run_page(page: str, database_url: str, workdir: Path) -> list[Ran]:
    """Run the page's blocks in order, on one server of their own, from a folder with
    the install's `.venv` (as a reader runs them from the checkout); each must exit 0
    and print no HTTP problem and no JSON-RPC error."""
    every = blocks(page)
    settings: dict[str, str] = {}
    for block in every:
        if block.serves:
            settings.update(serve_settings(block))
        if block.saved_as:
            (workdir / block.saved_as).write_text(block.code)
    (workdir / ".venv").symlink_to(sys.prefix)
    ran = []
    env = cli_env(TASKSERVICE_DATABASE_URL=database_url, **settings)
    with serve(env, workdir / "serve.log", cwd=workdir) as server:
        for block in (b for b in every if b.runs):
            ran.append(run_block(block, server.port, database_url, workdir))
    return ran


def run_block(block: Block, port: int, database_url: str, workdir: Path) -> Ran:
    # The pages name port 8000; the test server has its own.
    code = block.code.replace("127.0.0.1:8000", f"127.0.0.1:{port}")
    if block.language == "sh":
        command = ["bash", "-euo", "pipefail", "-c", code]
    else:
        command = [sys.executable, "-c", code]
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT,
        check=False,
        cwd=workdir,
        env=cli_env(  # the same database, and the CLI's verbs to this server
            TASKSERVICE_DATABASE_URL=database_url,
            TASKSERVICE_URL=f"http://127.0.0.1:{port}",
        ),
    )
    where = f"{block.page}:{block.line}"
    assert result.returncode == 0, (where, result.stdout, result.stderr)
    printed = result.stdout.replace(" ", "")
    assert PROBLEM not in printed, (where, printed)
    assert RPC_ERROR not in printed, (where, printed)
    return Ran(block, result.stdout, result.stderr)
