"""readers.read_ahead: the items in order from a thread of their own, the thread's exception raised in the caller,
and a caller that stops early stops the thread."""

import threading
import time

import pytest

from slipway.components.batch_predict import readers


def test_items_come_in_order_from_another_thread_and_its_failure_is_raised_here():
    made_in = []

    def items():
        for i in range(50):
            made_in.append(threading.current_thread().name)
            yield i
        raise ValueError("chunk 50: broken")

    got = []
    with pytest.raises(ValueError, match="chunk 50: broken"):
        for item in readers.read_ahead(items()):
            got.append(item)
    assert got == list(range(50))
    assert set(made_in) == {"batch-predict-read-ahead"}


def test_a_caller_that_stops_early_stops_the_thread():
    made = []

    def endless():
        while True:
            made.append(1)
            yield len(made)

    ahead = readers.read_ahead(endless(), depth=2)
    assert [next(ahead) for _ in range(3)] == [1, 2, 3]
    ahead.close()
    time.sleep(0.3)
    assert not any(t.name == "batch-predict-read-ahead" for t in threading.enumerate())
    assert len(made) <= 3 + 2 + 1  # what was taken, what the queue held, and the one being put
