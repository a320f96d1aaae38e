"""`jsonvalues`: what the service takes in, stores and reads back, decided without a
database (the integration tests show the same answers over HTTP)."""

from __future__ import annotations

import json
import math

import pytest

from taskservice.domain import jsonvalues
from taskservice.domain.jsonvalues import CLIPPED, JsonRefused, NotJson, check_body, decode, encode


def deep(levels: int) -> str:
    return '{"a":' * levels + "1" + "}" * levels


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        (deep(9).encode(), "depth"),
        (b"[" * 100_000 + b"]" * 100_000, "depth"),  # beyond the parser's recursion
        (b'{"n": 1e999}', "number"),
        (b'{"n": -1E+400}', "number"),
        (b'{"s": "\\u0000"}', "character"),
        (b'{"\\uDFFF": 1}', "character"),
        (b'["\\ud800x"]', "character"),
    ],
)
def test_bodies_the_service_cannot_store_are_refused_with_their_kind(
    body: bytes, kind: str
) -> None:
    refused = check_body(body, max_depth=8)
    assert refused is not None
    assert refused.kind == kind


@pytest.mark.parametrize(
    "body",
    [
        deep(8).encode(),
        b'{"s": "\\\\u0000"}',  # a backslash, then the text u0000
        b'{"pair": "\\ud83d\\ude00", "n": 1e308, "big": 123456789012345678901234567890}',
        b'{"text": "NaN and Infinity are fine inside strings"}',
    ],
)
def test_bodies_the_service_can_store_pass(body: bytes) -> None:
    assert check_body(body, max_depth=8) is None


@pytest.mark.parametrize(
    "body",
    [b'{"n": NaN}', b"[Infinity]", b'{"n": -Infinity}', '{"a": 1}'.encode("utf-16"), b"\xff"],
)
def test_what_is_not_json_in_utf8_is_not_json(body: bytes) -> None:
    with pytest.raises(NotJson):
        check_body(body, max_depth=8)


def test_a_utf8_bom_is_ignored() -> None:
    assert check_body(b'\xef\xbb\xbf{"n": 1e999}', max_depth=8) is not None  # read, not refused
    assert check_body(b'\xef\xbb\xbf{"a": 1}', max_depth=8) is None


def test_the_path_to_a_problem_is_named_and_shortened_when_long() -> None:
    refused = check_body(b'{"a": [0, {"b": "\\u0000"}]}', max_depth=8)
    assert refused is not None
    assert refused.path == ("a", 1, "b")
    assert refused.detail.startswith("a.1.b: NUL")
    deep_problem = jsonvalues.find_problem(json.loads(deep(50)), max_depth=40)
    assert deep_problem is not None
    assert "more" in deep_problem.detail
    assert len(deep_problem.detail) < 120


@pytest.mark.parametrize("value", [math.nan, math.inf, {"k": [-math.inf]}, "\udfff", {"\x00": 1}])
def test_the_encoder_of_stored_json_refuses_what_postgresql_refuses(value: object) -> None:
    with pytest.raises(JsonRefused):
        encode(value)


def test_the_encoder_refuses_what_could_not_be_read_back() -> None:
    too_deep = json.loads(deep(jsonvalues.MAX_DEPTH + 1))
    with pytest.raises(JsonRefused) as refused:
        encode(too_deep)
    assert refused.value.kind == "depth"
    assert encode(json.loads(deep(jsonvalues.MAX_DEPTH))) == deep(jsonvalues.MAX_DEPTH)


def test_stored_json_too_deep_reads_back_clipped() -> None:
    value = decode(deep(jsonvalues.MAX_DEPTH + 5))
    depth = 0
    while isinstance(value, dict):
        value, depth = value["a"], depth + 1
    assert value == CLIPPED
    assert depth == jsonvalues.MAX_DEPTH
    assert decode("[" * 100_000 + "]" * 100_000) == CLIPPED
    assert decode('{"a": [1, "x"]}') == {"a": [1, "x"]}


@pytest.mark.parametrize(
    ("value", "limit", "deeper"),
    [
        ({"a": "[[[[[[{{{", "b": [1]}, 3, False),  # brackets inside strings do not nest
        ({"a": "[[[[é", "b": [1]}, 3, False),  # an escape (\u00e9) just before a quote
        ({"a": 'x\\"[[[[', "b": {"c": [1]}}, 3, False),  # escaped backslash, then quote
        ({"a": 'x\\"[[[[', "b": {"c": [1]}}, 2, True),
        ({"k": "x\\", "b": [[[[1]]]]}, 3, True),
        ([[1]] * 300, 200, False),  # many brackets, shallow
    ],
)
def test_depth_is_read_from_the_text_without_being_fooled_by_strings(
    value: object, limit: int, deeper: bool
) -> None:
    for ascii_only in (True, False):
        text = json.dumps(value, ensure_ascii=ascii_only)
        assert jsonvalues._nests_deeper(text, limit) is deeper
    # The walk agrees.
    assert (jsonvalues.find_problem(value, limit) is not None) is deeper
