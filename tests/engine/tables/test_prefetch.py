"""engine/tables/prefetch.py: order, the two-item bound, errors, and closing early."""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Iterator

import pytest

from engine.tables.prefetch import Prefetched


class Item:
    def __init__(self, index: int) -> None:
        self.index = index


class Source:
    """A generator of :class:`Item` that records, whenever it starts on a new item, how many of
    its earlier items are still alive, and on which thread it runs."""

    def __init__(self, count: int, fail_at: int | None = None) -> None:
        self.count = count
        self.fail_at = fail_at
        self.alive: weakref.WeakSet[Item] = weakref.WeakSet()
        self.most_alive_at_start = 0
        self.threads: set[int] = set()
        self.produced = 0
        self.closed = threading.Event()

    def __iter__(self) -> Iterator[Item]:
        try:
            for index in range(self.count):
                self.threads.add(threading.get_ident())
                self.most_alive_at_start = max(self.most_alive_at_start, len(self.alive))
                if index == self.fail_at:
                    raise ValueError(f"failed at {index}")
                item = Item(index)
                self.alive.add(item)
                self.produced += 1
                yield item
                del item
        finally:
            self.closed.set()


def test_items_arrive_in_order_from_another_thread() -> None:
    source = Source(50)
    with Prefetched(iter(source)) as items:
        assert [item.index for item in items] == list(range(50))
    assert source.threads and threading.get_ident() not in source.threads
    assert source.closed.is_set()
    assert list(items) == []  # exhausted stays exhausted


def test_at_most_two_items_alive_when_the_caller_lets_go() -> None:
    # A slow caller gives the thread every chance to run ahead: a plain queue of one would
    # start a third item while the caller still holds one and another waits.
    source = Source(12)
    seen = []
    with Prefetched(iter(source)) as items:
        for item in items:
            time.sleep(0.01)
            seen.append(item.index)
            del item
    assert seen == list(range(12))
    # When the thread starts an item, only the one the caller holds can be alive.
    assert source.most_alive_at_start <= 1


def test_an_error_in_the_source_reaches_the_caller_at_its_item() -> None:
    source = Source(10, fail_at=4)
    got: list[int] = []

    def take_all(items: Prefetched[Item]) -> None:
        for item in items:
            got.append(item.index)

    with Prefetched(iter(source)) as items, pytest.raises(ValueError, match="failed") as err:
        take_all(items)
    assert got == [0, 1, 2, 3]
    # The traceback goes back to the source's frame.
    assert any(entry.name == "__iter__" for entry in err.traceback)
    assert list(items) == []


def test_closing_early_stops_the_thread_and_closes_the_source() -> None:
    source = Source(1000)
    items = Prefetched(iter(source))
    assert next(items).index == 0
    assert next(items).index == 1
    items.close()
    assert source.closed.is_set()  # the generator's finally ran before close returned
    assert source.produced <= 3  # the thread stopped after the item it was producing
    assert list(items) == []
    items.close()  # idempotent


def test_an_error_in_the_caller_closes_through_the_context_manager() -> None:
    source = Source(1000)

    def refuse_at_three() -> None:
        with Prefetched(iter(source)) as items:
            for item in items:
                if item.index == 3:
                    raise RuntimeError("the caller refuses")

    with pytest.raises(RuntimeError):
        refuse_at_three()
    assert source.closed.is_set()
    assert source.produced <= 5


def test_closing_before_the_first_item_closes_the_source_without_a_thread() -> None:
    source = Source(5)
    generator = iter(source)
    next_item = next(generator)  # started, so that close runs its finally
    items = Prefetched(generator)
    items.close()
    assert source.closed.is_set()
    assert next_item.index == 0
    assert list(items) == []
