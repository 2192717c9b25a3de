"""bench/runners/_petastorm_compat.py's fix of Petastorm 0.13.1's end-of-epoch race, with the
interleaving that loses an epoch forced rather than waited for."""

from __future__ import annotations

import pytest

import petastorm_fixtures as pf

pytestmark = pytest.mark.skipif(bool(pf.missing()), reason=pf.missing() or "ok")


class _Worker:
    """Publishes each ventilated item back as its result."""

    def __init__(self, worker_id, publish_func, args):
        self.publish_func = publish_func

    def process(self, item):
        self.publish_func(item)

    def shutdown(self):
        pass


class _LateVentilator:
    """Hands out every item inside the first completed() call: what Petastorm's ventilator thread
    does when it runs between get_results' two questions (workers done? ventilator done?)."""

    def __init__(self, items):
        self._items = items
        self._pool = None
        self._done = False

    def start(self):
        pass

    def completed(self):
        if not self._done:
            for item in self._items:
                self._pool.ventilate(item=item)
            self._done = True
        return True

    def processed_item(self):
        pass

    def stop(self):
        pass


def _epoch(pool_class, items):
    from petastorm.workers_pool import EmptyResultError

    pool = pool_class(2)
    ventilator = _LateVentilator(items)
    ventilator._pool = pool
    pool.start(_Worker, ventilator=ventilator)
    got = []
    try:
        while True:
            got.append(pool.get_results())
    except EmptyResultError:
        pass
    finally:
        pool.stop()
        pool.join()
    return got


def test_an_epoch_ventilated_between_the_two_checks_is_still_read():
    pf.apply_compat()
    from petastorm.workers_pool.thread_pool import ThreadPool

    assert sorted(_epoch(ThreadPool, [0, 1, 2])) == [0, 1, 2]


def test_without_the_shim_petastorm_loses_that_epoch():
    """The race the shim fixes is Petastorm's own: its all_workers_done ends the epoch empty."""
    pf.apply_compat()
    from petastorm.workers_pool.thread_pool import ThreadPool

    class Unpatched(ThreadPool):
        all_workers_done = ThreadPool.all_workers_done.original

    assert _epoch(Unpatched, [0, 1, 2]) == []
