"""A decision in words, as a person answers a tool call's approval in a chat."""

from __future__ import annotations

import pytest

from taskservice.usecases.inbox import said_decision


@pytest.mark.parametrize("text", ["approve", "Yes", " ok! ", "approved."])
def test_words_that_approve(text: str) -> None:
    assert said_decision(text) == {"approve": True}


@pytest.mark.parametrize(
    ("text", "decision"),
    [
        ("deny", {"approve": False}),
        ("No", {"approve": False}),
        ("deny: not on a Friday", {"approve": False, "reason": "not on a Friday"}),
        ("rejected - too much", {"approve": False, "reason": "too much"}),
    ],
)
def test_words_that_deny_with_a_reason_if_any(text: str, decision: dict[str, object]) -> None:
    assert said_decision(text) == decision


@pytest.mark.parametrize("text", ["maybe", "yes please do it tomorrow", "nobody", {"x": 1}])
def test_anything_else_is_no_decision(text: object) -> None:
    assert said_decision(text) is None
