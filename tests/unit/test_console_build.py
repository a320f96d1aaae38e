"""The console the package serves was built from the sources committed beside it.

`npm run console` (frontend/console/build.mjs) writes `taskservice/ui/BUILD.json`: the
SHA-256 of every source and of every file it built. CI has no Node, so this is how a
change to the console's sources without a rebuild (or a hand edit of the bundle) fails.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONSOLE = ROOT / "frontend" / "console"
UI = ROOT / "src" / "taskservice" / "ui"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_bundle_was_built_from_the_committed_sources() -> None:
    build = json.loads((UI / "BUILD.json").read_text())
    files = [p for p in (CONSOLE / "src").rglob("*") if p.is_file()]
    sources = sorted([*files, CONSOLE / "index.html", CONSOLE / "build.mjs"])
    found = {str(p.relative_to(ROOT / "frontend")): digest(p) for p in sources}
    assert found == build["sources"], "run `npm run console` in frontend/ and commit the result"


def test_the_files_served_are_the_ones_built() -> None:
    build = json.loads((UI / "BUILD.json").read_text())
    served = {str(p.relative_to(UI)) for p in UI.rglob("*") if p.is_file()} - {"BUILD.json"}
    assert served == set(build["built"])
    for name, sha in build["built"].items():
        assert digest(UI / name) == sha, name


def test_the_bundle_is_built_from_the_locked_library_versions() -> None:
    build = json.loads((UI / "BUILD.json").read_text())
    lock = json.loads((ROOT / "frontend" / "package-lock.json").read_text())
    for name, version in build["versions"].items():
        assert lock["packages"][f"node_modules/{name}"]["version"] == version, name
