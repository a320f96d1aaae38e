"""Which JSON values the service takes in, stores and reads back.

PostgreSQL's jsonb refuses NaN and infinities, NUL characters and (encoded as UTF-8)
lone surrogates; the response serializer gives up beyond about 250 levels of nesting.
A value breaking one of these either fails a write halfway, or worse, is stored and
then breaks every read of it. Three gates keep that from happening:

- at the edge, `check_body` refuses such a request body before any route reads it,
  naming where the problem is (`api.limits.RequestGuard`, for every JSON body);
- on the way to the database, `encode` refuses such a value whatever path it took
  (`db.engine.dumps_json` is the one encoder of stored JSON): nothing is written
  that could not be read back;
- on the way back, `decode` clips what an earlier version stored deeper than
  `MAX_DEPTH`, so such a row still reads.

Every check is a scan of the text in C first; values are walked only when the text
shows a sign of trouble, so the common body costs a few substring searches.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from taskservice.domain.errors import InvalidRequest

# Nesting that is stored and read back: below the response serializer's own limit
# (pydantic gives up at 255 levels, and responses wrap a value in a few levels).
MAX_DEPTH = 200
CLIPPED = "(nested deeper than this service keeps)"

Path = tuple[str | int, ...]

# A JSON escape that decodes to NUL or to a surrogate (paired or lone: the walk tells).
_RISKY_ESCAPE = re.compile(r"\\u(?:0000|[dD][89a-fA-F][0-9a-fA-F]{2})")
# An exponent of three digits, or 309 digits in a row (from the start of the run):
# the only numbers that can overflow a float.
_RISKY_NUMBER = re.compile(r"[eE][+-]?\d{3}|(?<![\d.])\d{309}")
# Characters PostgreSQL cannot store in text or jsonb.
_UNSTORABLE_CHAR = re.compile("[\x00\ud800-\udfff]")
# How json.dumps writes NUL: \u0000 after an even number of backslashes (an odd number
# is a literal backslash followed by "u0000").
_NUL_ESCAPED = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
# For the depth of JSON text without parsing it (`_nests_deeper`): in the UTF-8
# bytes, escapes dropped, then all but brackets and quotes (one C pass each), then
# strings, then empty pairs, one level of nesting per pass.
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'[]{}"')
_QUOTED = re.compile(rb'"[^"]*"')
_INNERMOST = re.compile(rb"\[\]|\{\}")


def _where(path: Path) -> str:
    """A path for people: a deep one shows its first and last steps."""
    steps = [str(p) for p in path]
    if len(steps) > 12:
        steps = [*steps[:6], f"…({len(steps) - 10} more)…", *steps[-4:]]
    return ".".join(steps)


class JsonRefused(InvalidRequest):
    """A JSON value the service will not take: a 422 wherever it surfaces."""

    def __init__(self, reason: str, path: Path = (), *, kind: str, **extensions: Any) -> None:
        self.reason = reason
        self.path = path
        self.kind = kind
        where = _where(path)
        super().__init__(f"{where}: {reason}" if where else reason, **extensions)


class NotJson(ValueError):
    """The bytes are not a JSON text this service reads (RFC 8259): a 400."""


def _char_problem(text: str) -> str:
    return (
        "NUL (\\u0000) characters cannot be stored"
        if "\x00" in text
        else "lone surrogates (\\ud800-\\udfff) are not valid Unicode"
    )


def find_problem(value: Any, max_depth: int, path: Path = ()) -> JsonRefused | None:
    """The first reason `value` cannot be stored and read back, or None. Iterative,
    so a deep value cannot exhaust the stack."""
    stack: list[tuple[Any, Path, int]] = [(value, path, 0)]
    while stack:
        item, where, depth = stack.pop()
        if isinstance(item, str):
            if _UNSTORABLE_CHAR.search(item):
                return JsonRefused(_char_problem(item), where, kind="character")
        elif isinstance(item, float):
            if not math.isfinite(item):
                return JsonRefused(
                    "numbers must be finite (no NaN, Infinity or overflowing exponents)",
                    where,
                    kind="number",
                )
        elif isinstance(item, dict | list):
            if depth >= max_depth:
                return JsonRefused(
                    f"JSON may nest at most {max_depth} levels",
                    where,
                    kind="depth",
                    limit=max_depth,
                )
            if isinstance(item, dict):
                for key, child in item.items():
                    if isinstance(key, str) and _UNSTORABLE_CHAR.search(key):
                        return JsonRefused(_char_problem(key), (*where, key), kind="character")
                    stack.append((child, (*where, key), depth + 1))
            else:
                stack.extend((child, (*where, i), depth + 1) for i, child in enumerate(item))
    return None


def _refuse_constant(name: str) -> Any:
    raise NotJson(f"{name} is not JSON (RFC 8259 numbers are finite)")


def check_body(body: bytes, *, max_depth: int) -> JsonRefused | None:
    """Why a request body cannot be taken (`JsonRefused`, a 422), or None. Raises
    `NotJson` for bytes that are not UTF-8, or, when a closer look was needed, not
    JSON (NaN, Infinity, a malformed text, a number too long to read). Bodies that
    needed no closer look are parsed by their route, which answers malformed JSON."""
    try:
        text = body.decode("utf-8").removeprefix("\ufeff")  # RFC 8259 §8.1: a BOM may be ignored
    except UnicodeDecodeError as exc:
        raise NotJson(f"JSON must be encoded as UTF-8 (RFC 8259); byte {exc.start} is not") from exc
    suspicious = (
        text.count("{") + text.count("[") > max_depth
        or "NaN" in text
        or "Infinity" in text
        or _RISKY_ESCAPE.search(text) is not None
        or _RISKY_NUMBER.search(text) is not None
    )
    if not suspicious:
        return None
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:  # deeper than the parser goes: far beyond any limit
        return JsonRefused(
            f"JSON may nest at most {max_depth} levels", kind="depth", limit=max_depth
        )
    except NotJson:
        raise
    except ValueError as exc:  # malformed, or a number too long to read
        raise NotJson(f"the body is not valid JSON: {exc}") from None
    return find_problem(value, max_depth)


def encode(value: Any, *, max_depth: int = MAX_DEPTH, sort_keys: bool = False) -> str:
    """`value` as the service stores it (compact, UTF-8 kept), or `JsonRefused` when
    PostgreSQL could not store it or the service could not read it back."""
    try:
        text = json.dumps(
            value, separators=(",", ":"), ensure_ascii=False, allow_nan=False, sort_keys=sort_keys
        )
    except ValueError:
        problem = find_problem(value, max_depth)
        raise problem or JsonRefused("numbers must be finite", kind="number") from None
    except RecursionError:
        raise JsonRefused(
            f"JSON may nest at most {max_depth} levels", kind="depth", limit=max_depth
        ) from None
    # Each test is a C scan; the regexes run only past a cheap first sign.
    if (
        ("\\u0000" in text and _NUL_ESCAPED.search(text))
        # json.dumps leaves lone surrogates as they are (never ASCII)
        or (not text.isascii() and _UNSTORABLE_CHAR.search(text))
        or _nests_deeper(text, max_depth)
    ):
        problem = find_problem(value, max_depth)
        if problem is not None:
            raise problem
    return text


def clip(value: Any, max_depth: int = MAX_DEPTH) -> Any:
    """`value` with whatever nests deeper than `max_depth` replaced by `CLIPPED`."""

    def walk(item: Any, depth: int) -> Any:
        if not isinstance(item, dict | list):
            return item
        if depth >= max_depth:
            return CLIPPED
        if isinstance(item, dict):
            return {k: walk(v, depth + 1) for k, v in item.items()}
        return [walk(v, depth + 1) for v in item]

    return walk(value, 0)


def decode(text: str) -> Any:
    """Stored JSON back as values. What an earlier version stored too deep to read or
    answer with is clipped at `MAX_DEPTH` (the encoder refuses such values now)."""
    try:
        value = json.loads(text)
    except RecursionError:
        return CLIPPED
    if _nests_deeper(text, MAX_DEPTH):
        return clip(value)
    return value


def _nests_deeper(text: str, max_depth: int) -> bool:
    """Whether the JSON `text` nests deeper than `max_depth` levels: with its strings
    and everything but brackets removed, each pass of `_INNERMOST` peels one level
    off every branch (C passes only: a walk of the value costs ten times more)."""
    if text.count("{") + text.count("[") <= max_depth:
        return False
    try:
        data = text.encode()
    except UnicodeEncodeError:  # a lone surrogate: the caller's walk will say
        return True
    # Escaped backslashes, then escaped quotes: what is left of `"` delimits strings.
    unescaped = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    brackets = _QUOTED.sub(b"", unescaped.translate(None, _NOT_STRUCTURE))
    for _ in range(max_depth):
        if not brackets:
            return False
        brackets = _INNERMOST.sub(b"", brackets)
    return bool(brackets)
