from __future__ import annotations

import itertools

import pytest

from taskservice.domain.states import (
    CANCELLABLE,
    TERMINAL,
    IllegalTransition,
    TaskState,
    can_transition,
    check_transition,
)

P, R, W, C, F, X = (
    TaskState.PENDING,
    TaskState.RUNNING,
    TaskState.INPUT_REQUIRED,
    TaskState.COMPLETED,
    TaskState.FAILED,
    TaskState.CANCELLED,
)
# Written out from DESIGN.md, independently of the table in states.py.
ALLOWED = {(P, R), (P, X), (R, C), (R, F), (R, W), (R, X), (W, R), (W, X)}
ALL_PAIRS = list(itertools.product(TaskState, TaskState))


def test_there_are_six_states_and_36_pairs() -> None:
    assert len(ALL_PAIRS) == 36


@pytest.mark.parametrize(("source", "target"), ALL_PAIRS)
def test_each_pair_is_allowed_exactly_when_the_design_says_so(
    source: TaskState, target: TaskState
) -> None:
    expected = (source, target) in ALLOWED
    assert can_transition(source, target) is expected
    if expected:
        check_transition(source, target)
    else:
        with pytest.raises(IllegalTransition):
            check_transition(source, target)


def test_terminal_states_are_final() -> None:
    assert {C, F, X} == TERMINAL
    for state in TERMINAL:
        assert state.is_terminal
        assert not any(can_transition(state, other) for other in TaskState)


def test_cancellable_states_are_the_live_ones() -> None:
    assert {P, R, W} == CANCELLABLE
