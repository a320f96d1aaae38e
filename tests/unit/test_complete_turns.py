"""Which messages a run writes as it goes, and which wait for the next write."""

from __future__ import annotations

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from taskservice.worker.turns import complete_turns

PROMPT = ModelRequest(parts=[UserPromptPart("go")])
CALLS = ModelResponse(parts=[TextPart("let me see"), ToolCallPart("t", {}, tool_call_id="c1")])
RESULTS = ModelRequest(parts=[ToolReturnPart("t", "ok", tool_call_id="c1")])
ANSWER = ModelResponse(parts=[TextPart("done")])
# What matters is that a request follows the answer (pydantic-ai words retries in
# parts of its own, which change between releases).
RETRY = ModelRequest(parts=[UserPromptPart("that was not valid JSON; try again")])


def test_a_request_waits_for_its_response() -> None:
    assert complete_turns([PROMPT]) == []


def test_a_turn_that_calls_tools_is_written_before_they_run() -> None:
    assert complete_turns([PROMPT, CALLS]) == [PROMPT, CALLS]
    assert complete_turns([PROMPT, CALLS, RESULTS]) == [PROMPT, CALLS]


def test_an_answer_waits_to_be_written_with_the_outcome() -> None:
    assert complete_turns([PROMPT, ANSWER]) == []
    assert complete_turns([PROMPT, CALLS, RESULTS, ANSWER]) == [PROMPT, CALLS]


def test_an_answer_the_run_rejected_is_written_once_it_asks_again() -> None:
    # Output validation failed: a retry prompt follows; the rejected answer is
    # written with the next write, and only the latest answer waits.
    assert complete_turns([PROMPT, ANSWER, RETRY]) == []
    messages: list[ModelMessage] = [PROMPT, ANSWER, RETRY, ANSWER]
    assert complete_turns(messages) == [PROMPT, ANSWER]
    assert complete_turns([PROMPT, ANSWER, RETRY, CALLS]) == [PROMPT, ANSWER, RETRY, CALLS]
