"""A stream's view of live output sends each character once, in order; and the
notices that carry deltas stay under PostgreSQL's payload limit."""

from __future__ import annotations

import uuid

from taskservice.db.live import notices, parse
from taskservice.domain.models import Delta
from taskservice.following.deltas import LiveView
from taskservice.following.hub import Flag

TASK = uuid.uuid4()


def d(offset: int, text: str, *, part: int = 0, position: int = 1, attempt: int = 1) -> Delta:
    return Delta(TASK, attempt, position, part, "text", offset, text)


def sent(view: LiveView) -> list[tuple[int, int, int, str]]:
    return [(x.attempt, x.position, x.offset, x.text) for x in view.take()]


def test_pieces_that_continue_each_other_are_merged_while_the_reader_is_away() -> None:
    view = LiveView(Flag())
    view.add([d(0, "he"), d(2, "ll"), d(4, "o")])
    assert sent(view) == [(1, 1, 0, "hello")]


def test_the_text_so_far_goes_before_pending_pieces_and_nothing_is_sent_twice() -> None:
    view = LiveView(Flag())
    view.add([d(0, "hel")])
    assert sent(view) == [(1, 1, 0, "hel")]
    view.add([d(5, " wor"), d(9, "ld")])  # notified before the text so far was read
    view.reread([d(0, "hello wor")])
    assert sent(view) == [(1, 1, 3, "lo wor"), (1, 1, 9, "ld")]
    assert not view.resync


def test_a_piece_past_what_was_sent_asks_for_the_text_so_far() -> None:
    view = LiveView(Flag())
    view.add([d(0, "a")])
    sent(view)
    view.add([d(4, "lost before")])  # a notice in between was lost
    assert sent(view) == []
    assert view.resync


def test_a_later_attempt_starts_the_message_over_and_an_earlier_one_is_dropped() -> None:
    view = LiveView(Flag())
    view.add([d(0, "first try", attempt=1)])
    view.add([d(0, "again", attempt=2)])
    view.add([d(9, " late", attempt=1)])
    assert sent(view) == [(1, 1, 0, "first try"), (2, 1, 0, "again")]


def test_pieces_of_a_persisted_message_are_dropped() -> None:
    view = LiveView(Flag())
    view.add([d(0, "done", position=1), d(0, "next", position=3)])
    view.persisted(1)
    assert sent(view) == [(1, 3, 0, "next")]


def test_a_tool_call_announced_without_arguments_is_sent_once() -> None:
    view = LiveView(Flag())
    call = Delta(TASK, 1, 1, 1, "tool_call", 0, "", tool="search")
    view.add([call])
    view.add([call])
    assert [(x.part, x.tool) for x in view.take()] == [(1, "search")]


def test_adding_wakes_the_stream_without_marking_its_task_dirty() -> None:
    flag = Flag()
    view = LiveView(flag)
    view.add([d(0, "x")])
    assert view.pending
    assert not flag.is_set()


def test_a_flush_of_many_runs_is_cut_into_notices_under_the_limit_and_parses_back() -> None:
    text = 'é€😀 json "quotes" \\ and more ' * 1500  # about 45,000 characters
    other = uuid.uuid4()
    deltas = [d(0, text), d(0, "small", part=1), Delta(other, 2, 5, 0, "text", 3, "abc")]
    sent = notices(deltas)
    assert len(sent) > 1
    assert all(len(n.encode()) < 8000 for n in sent)
    pieces = [x for n in sent for x in parse(n)]
    rebuilt: dict[tuple[uuid.UUID, int], str] = {}
    for piece in pieces:
        key = (piece.task_id, piece.part)
        assert piece.offset == len(rebuilt.get(key, "")) + (3 if piece.task_id == other else 0)
        rebuilt[key] = rebuilt.get(key, "") + piece.text
    assert rebuilt == {(TASK, 0): text, (TASK, 1): "small", (other, 0): "abc"}
    assert {(p.attempt, p.position) for p in pieces if p.task_id == other} == {(2, 5)}
