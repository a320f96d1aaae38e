"""MkDocs hook: the pages made from the code, at build time, so they cannot drift.

A page holds a marker where generated Markdown goes:

- `<!-- generated:settings -->`: the table of every setting,
  `taskservice.settings.markdown_table()` (what `taskservice settings --markdown`
  prints), made from the settings class's descriptions;
- `<!-- generated:transitions -->`: the state machine's table of allowed
  transitions, `taskservice.domain.states.TRANSITIONS`;
- `<!-- generated:openapi -->`: every operation of the committed OpenAPI document
  (`openapi/openapi.json`, which a test keeps equal to the app's), grouped by tag,
  then every schema, rendered to Markdown here: no plugin, no script in the page,
  nothing fetched.

`mkdocs.yml` names this file under `hooks:`; `tests/acceptance/test_docs.py` calls
the functions directly too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
OPENAPI = ROOT / "openapi" / "openapi.json"
SETTINGS_MARKER = "<!-- generated:settings -->"
OPENAPI_MARKER = "<!-- generated:openapi -->"
TRANSITIONS_MARKER = "<!-- generated:transitions -->"
# The order tags appear in; a tag not listed comes after these, by name.
TAG_ORDER = [
    "tasks",
    "messages",
    "agents",
    "streams",
    "webhooks",
    "schedules",
    "overview",
    "operations",
    "health",
    "a2a",
]
TAG_TITLES = {"a2a": "A2A", "operations": "Metrics", "health": "Health"}
METHODS = ("get", "post", "put", "patch", "delete")


def settings_table() -> str:
    from taskservice.settings import markdown_table

    return markdown_table()


def transitions_table() -> str:
    from taskservice.domain.states import TRANSITIONS

    rows = ["| from | to |", "| --- | --- |"]
    for source, targets in TRANSITIONS.items():
        if targets:
            ordered = [s for s in TRANSITIONS if s in targets]  # in the states' order
            rows.append(f"| `{source}` | {', '.join(f'`{t}`' for t in ordered)} |")
    return "\n".join(rows) + "\n"


def api_reference(spec: dict[str, Any]) -> str:
    """The operations by tag, then the schemas, as Markdown."""
    by_tag: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for path, item in spec["paths"].items():
        for method in METHODS:
            if method in item:
                operation = item[method]
                tag = (operation.get("tags") or ["other"])[0]
                by_tag.setdefault(tag, []).append((method, path, operation))
    order = [t for t in TAG_ORDER if t in by_tag] + sorted(set(by_tag) - set(TAG_ORDER))
    out: list[str] = []
    for tag in order:
        out.append(f"### {TAG_TITLES.get(tag, tag.capitalize())}\n")
        for method, path, operation in by_tag[tag]:
            out.append(_operation(method, path, operation))
    schemas = spec.get("components", {}).get("schemas", {})
    out.append("## Schemas\n")
    out.extend(_schema(name, schema) for name, schema in schemas.items())
    return "\n".join(out)


def _operation(method: str, path: str, operation: dict[str, Any]) -> str:
    op_id = operation["operationId"]
    lines = [
        f"#### {_inline(operation.get('summary') or op_id)} {{#{op_id}}}\n",
        f"`{method.upper()} {path}` · `{op_id}`\n",
    ]
    if operation.get("description"):
        lines.append(operation["description"].strip() + "\n")
    parameters = operation.get("parameters", [])
    if parameters:
        lines += [
            "| parameter | in | type | required | meaning |",
            "| --- | --- | --- | --- | --- |",
        ]
        for p in parameters:
            lines.append(
                f"| `{p['name']}` | {p['in']} | {_type(p.get('schema', {}))} | "
                f"{'yes' if p.get('required') else 'no'} | {_cell(p.get('description', ''))} |"
            )
        lines.append("")
    body = operation.get("requestBody")
    if body:
        kinds = ", ".join(
            f"`{kind}` {_type(media.get('schema', {}))}" for kind, media in body["content"].items()
        )
        required = "required" if body.get("required") else "optional"
        lines.append(f"Body ({required}): {kinds}\n")
    lines += ["| status | meaning | body |", "| --- | --- | --- |"]
    for status, response in operation["responses"].items():
        content = response.get("content", {})
        shapes = sorted({_type(media.get("schema", {})) for media in content.values()} - {"any"})
        lines.append(
            f"| {status} | {_cell(response.get('description', ''))} | {', '.join(shapes)} |"
        )
    return "\n".join(lines) + "\n"


def _schema(name: str, schema: dict[str, Any]) -> str:
    lines = [f"### {name} {{#schema-{name.lower()}}}\n"]
    if schema.get("description"):
        lines.append(schema["description"].strip() + "\n")
    if "enum" in schema:
        lines.append("One of " + ", ".join(f"`{v}`" for v in schema["enum"]) + ".\n")
    properties = schema.get("properties", {})
    if properties:
        required = set(schema.get("required", []))
        lines += ["| field | type | required | meaning |", "| --- | --- | --- | --- |"]
        for field, spec in properties.items():
            meaning = _cell(spec.get("description", ""))
            if "default" in spec and spec["default"] not in (None, [], {}):
                meaning += f" (default `{json.dumps(spec['default'])}`)"
            lines.append(
                f"| `{field}` | {_type(spec)} | {'yes' if field in required else 'no'} | "
                f"{meaning.strip()} |"
            )
    elif schema.get("type") and "enum" not in schema:
        lines.append(f"A {_type(schema)}.")
    return "\n".join(lines) + "\n"


def _type(schema: dict[str, Any]) -> str:
    """A schema as a short type: a link to a named schema, `string (uuid)`, `integer
    or null`, `array of X`."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[`{name}`](#schema-{name.lower()})"
    for combined in ("anyOf", "oneOf", "allOf"):
        if combined in schema:
            return " or ".join(dict.fromkeys(_type(s) for s in schema[combined]))
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    if "enum" in schema:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
    kind = schema.get("type")
    if isinstance(kind, list):
        return " or ".join(kind)
    if kind == "array":
        return f"array of {_type(schema.get('items', {}))}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"object of {_type(schema['additionalProperties'])}"
    if kind and schema.get("format"):
        return f"{kind} ({schema['format']})"
    return str(kind or "any")


def _cell(text: str) -> str:
    """Text that stays in one table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def _inline(text: str) -> str:
    return " ".join(text.split())


def on_page_markdown(markdown: str, **_: Any) -> str:
    """MkDocs event: fill the markers of the page being built."""
    if SETTINGS_MARKER in markdown:
        markdown = markdown.replace(SETTINGS_MARKER, settings_table())
    if TRANSITIONS_MARKER in markdown:
        markdown = markdown.replace(TRANSITIONS_MARKER, transitions_table())
    if OPENAPI_MARKER in markdown:
        spec = json.loads(OPENAPI.read_text())
        markdown = markdown.replace(OPENAPI_MARKER, api_reference(spec))
    return markdown
