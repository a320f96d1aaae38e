"""The task state machine: states, the terminal set and the transition table.

Every transition in the code base is checked against `TRANSITIONS`. In the database
each one is a single conditional UPDATE (`db.tasks.TaskStore.transition`); the few
written as SQL literals for speed (the claim, the reaper's, cascading cancel,
resuming parents) are checked against this table at the database in every test run
(`tests/conftest.py`, `TRANSITION_GUARD`), whatever process runs them.
"""

from __future__ import annotations

from enum import StrEnum


class TaskState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    INPUT_REQUIRED = "input_required"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL


TERMINAL: frozenset[TaskState] = frozenset(
    {TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELLED}
)

TRANSITIONS: dict[TaskState, frozenset[TaskState]] = {
    TaskState.PENDING: frozenset({TaskState.RUNNING, TaskState.CANCELLED}),
    TaskState.RUNNING: frozenset(
        {TaskState.COMPLETED, TaskState.FAILED, TaskState.INPUT_REQUIRED, TaskState.CANCELLED}
    ),
    TaskState.INPUT_REQUIRED: frozenset({TaskState.RUNNING, TaskState.CANCELLED}),
    TaskState.COMPLETED: frozenset(),
    TaskState.FAILED: frozenset(),
    TaskState.CANCELLED: frozenset(),
}

# States a client may cancel from: every state that can reach `cancelled`.
CANCELLABLE: frozenset[TaskState] = frozenset(
    state for state, targets in TRANSITIONS.items() if TaskState.CANCELLED in targets
)


class IllegalTransition(ValueError):
    """A transition the table does not allow: a bug in the caller, never user input."""

    def __init__(self, source: TaskState, target: TaskState) -> None:
        super().__init__(f"illegal transition {source} -> {target}")
        self.source = source
        self.target = target


def can_transition(source: TaskState, target: TaskState) -> bool:
    return target in TRANSITIONS[source]


def check_transition(source: TaskState, target: TaskState) -> None:
    if not can_transition(source, target):
        raise IllegalTransition(source, target)


def is_terminal(state: TaskState) -> bool:
    return state in TERMINAL
