"""The third-party files `/docs` and `/redoc` load are in the package as
`frontend/`'s `npm run vendor` left them: the versions `frontend/package.json` pins,
the bytes `VENDORED.json` names, each library's licence beside them."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENDOR = ROOT / "src" / "taskservice" / "api" / "static" / "vendor"


def test_the_vendored_files_are_the_pinned_versions_bytes() -> None:
    manifest = json.loads((VENDOR / "VENDORED.json").read_text())
    pinned = json.loads((ROOT / "frontend" / "package.json").read_text())["devDependencies"]
    # The API reference's libraries (the console's are bundled: test_console_build.py).
    assert set(manifest) == {"swagger-ui-dist", "redoc"}
    assert {name: package["version"] for name, package in manifest.items()} == {
        name: pinned[name] for name in manifest
    }
    listed = {VENDOR / "VENDORED.json"}
    for name, package in manifest.items():
        assert "LICENSE" in package["files"], name
        for file, entry in package["files"].items():
            path = VENDOR / name / file
            assert hashlib.sha256(path.read_bytes()).hexdigest() == entry["sha256"], path
            listed.add(path)
    # Nothing else: a file left from an older version would ship unseen.
    assert {path for path in VENDOR.rglob("*") if path.is_file()} == listed


def test_the_lock_pins_what_package_json_names() -> None:
    lock = json.loads((ROOT / "frontend" / "package-lock.json").read_text())
    pinned = json.loads((ROOT / "frontend" / "package.json").read_text())["devDependencies"]
    for name, version in pinned.items():
        assert lock["packages"][f"node_modules/{name}"]["version"] == version, name
