"""Measurements taken inside the worker process: wall time, CPU time (this process and its
children), peak RSS (this process plus live children, sampled), time to first batch, and the
stall meter (a consumer that busy-waits a fixed step time per batch)."""

from __future__ import annotations

import os
import resource
import statistics
import threading
import time
from typing import Dict, Iterable, List, Optional, Tuple

try:
    # Imported with this module, before any clock starts: importing it takes about 40 ms, which
    # RssSampler's first sample (on consume()'s clock) otherwise paid inside the measurement, half
    # of a 200,000-row warm epoch of the matrix.
    import psutil
except ImportError:  # pragma: no cover
    psutil = None

__all__ = ["RssSampler", "cpu_seconds", "consume", "median", "busy_wait"]


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and its reaped children."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _live_children_cpu() -> float:
    if psutil is None:
        return 0.0
    total = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            c = child.cpu_times()
            total += c.user + c.system
        except psutil.Error:
            pass
    return total


class RssSampler:
    """Samples RSS of this process plus all live descendants every `interval` seconds."""

    def __init__(self, interval: float = 0.05) -> None:
        self.interval = interval
        self.peak = 0
        self.children_cpu = {}  # pid -> last seen cpu seconds (children that are never reaped)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        if psutil is None:
            self.peak = max(self.peak, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
            return
        me = psutil.Process()
        total = me.memory_info().rss
        for child in me.children(recursive=True):
            try:
                total += child.memory_info().rss
                c = child.cpu_times()
                self.children_cpu[child.pid] = c.user + c.system
            except psutil.Error:
                pass
        self.peak = max(self.peak, total)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self) -> "RssSampler":
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
        self.peak = max(self.peak, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)


def busy_wait(seconds: float) -> None:
    """The model: holds the consumer thread (and the GIL) for `seconds`."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def consume(batches: Iterable[Tuple[int, object]], step_s: float = 0.0,
            max_batches: Optional[int] = None) -> Dict[str, float]:
    """Drains `batches` (an iterator of (rows, batch)), timing every wait for the next batch.

    The clock starts before the iterator's first `next()` (which is where lazy loaders build
    their readers), so `first_batch_s` includes start-up. `stall_fraction` is the share of wall
    time after the first batch spent waiting for the next one while the consumer busy-waits
    `step_s` per batch.
    """
    start = time.perf_counter()
    t_start = os.times()
    first = None
    waited = 0.0
    rows = batches_seen = 0
    iterator = iter(batches)
    with RssSampler() as rss:
        while True:
            t0 = time.perf_counter()
            try:
                n, _ = next(iterator)
            except StopIteration:
                break
            t1 = time.perf_counter()
            if first is None:
                first = t1 - start
                steady_start = t1
            else:
                waited += t1 - t0
            rows += n
            batches_seen += 1
            if step_s:
                busy_wait(step_s)
            if max_batches and batches_seen >= max_batches:
                break
        end = time.perf_counter()
        close = getattr(iterator, "close", None)
        if close:
            close()
    t_end = os.times()
    cpu_self = (t_end.user + t_end.system) - (t_start.user + t_start.system)
    reaped = (t_end.children_user + t_end.children_system) - (t_start.children_user +
                                                              t_start.children_system)
    # Children that are never reaped (e.g. Ray's raylet) are not in os.times(): take what the
    # sampler saw when that is larger.
    cpu = cpu_self + max(reaped, sum(rss.children_cpu.values()))
    wall = end - start
    steady = end - steady_start if first is not None else 0.0
    return {
        "rows": rows,
        "batches": batches_seen,
        "wall_s": wall,
        "first_batch_s": first if first is not None else float("nan"),
        "steady_s": steady,
        "wait_s": waited,
        "stall_fraction": waited / steady if steady > 0 else float("nan"),
        "cpu_s": cpu,
        "peak_rss_bytes": rss.peak,
    }


def median(values: List[float]) -> float:
    values = [v for v in values if v == v]
    return statistics.median(values) if values else float("nan")
