"""The heap of a serving process: what start-up built is frozen out of the collector's
passes, and young collections wait for garbage, not for the work in flight."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from taskservice.serving import YOUNG_COLLECTION_THRESHOLD, freeze_heap


@pytest.fixture
def collector() -> Iterator[None]:
    thresholds = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


@pytest.mark.usefixtures("collector")
def test_start_up_is_frozen_and_young_collections_wait_for_garbage() -> None:
    gc.set_threshold(700, 10, 10)  # Python's defaults
    freeze_heap()
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == (YOUNG_COLLECTION_THRESHOLD, 10, 10)
    # Objects allocated after start-up are not frozen; a collection still finds a cycle.
    cycle: list[object] = []
    cycle.append(cycle)
    del cycle
    assert gc.collect(0) >= 1
