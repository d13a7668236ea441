"""The read-ahead thread: items in order, made by another thread, errors in their place, and a
consumer that stops early stops the thread after at most the items it held ahead."""

from __future__ import annotations

import threading

import pytest

from ddai.pipelines.adapters.read_ahead import read_ahead


def test_items_in_order_made_by_one_other_thread():
    makers: list[int] = []

    def items():
        for i in range(50):
            makers.append(threading.get_ident())
            yield i

    assert list(read_ahead(items())) == list(range(50))
    assert len(set(makers)) == 1 and makers[0] != threading.get_ident()


def test_the_next_item_is_made_while_the_consumer_holds_one():
    second = threading.Event()

    def items():
        yield 0
        second.set()
        yield 1

    got = read_ahead(items())
    assert next(got) == 0
    # the consumer has not asked for item 1: the thread makes it anyway (a deadline, not a time)
    assert second.wait(timeout=60)
    assert list(got) == [1]


def test_an_error_comes_after_the_items_before_it():
    def items():
        yield from range(3)
        raise OSError("corrupt page")

    got = []
    with pytest.raises(OSError, match="corrupt page"):
        for x in read_ahead(items(), depth=2):
            got.append(x)
    assert got == [0, 1, 2]


@pytest.mark.parametrize("depth", [1, 3])
def test_closing_early_stops_the_thread(depth):
    made = []

    def items():
        i = 0
        while True:  # endless: only the stop ends the thread
            made.append(i)
            yield i
            i += 1

    ahead = read_ahead(items(), depth=depth, name="ahead-test")
    assert [next(ahead) for _ in range(4)] == [0, 1, 2, 3]
    ahead.close()
    assert not any(t.name == "ahead-test" for t in threading.enumerate())
    # taken 4, at most ``depth`` queued, one more put after the drain, one being made
    assert 4 <= len(made) <= 4 + depth + 2


def test_depth_must_be_positive():
    with pytest.raises(ValueError, match="depth must be at least 1"):
        list(read_ahead(iter([1]), depth=0))
