"""Contract 7 (safe to hold): a loader used from one thread and disturbed from another.

A second thread closes the loader, drops it, changes its epoch, loads a state or reads its state at
random (seeded) moments while the first one iterates. Every trial checks: no hang (joins with a
timeout), a typed error (LoaderClosedError / LoaderStateError) or a clean end, and batches that are
exactly those of an undisturbed run up to the interruption. Also: no abort and no nanobind leak
reports when a daemon thread still iterates at interpreter exit (issue 9, defect 5).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import stoker
from stoker.errors import LoaderClosedError, LoaderStateError
from stoker_testdata import digest, write_labelled_features

FEATS = [f"f{i}" for i in range(8)]
ROWS = 12000
BATCH = 100
OPTIONS = dict(columns=["label"], features=FEATS, batch_size=BATCH, seed=5, num_threads=2,
               shuffle_window=2000)
JOIN_S = 15


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return write_labelled_features(str(tmp_path_factory.mktemp("threads")), ROWS, FEATS, seed=0)


@pytest.fixture(scope="module")
def reference(dataset):
    """Undisturbed digests of epochs 0 and 1."""
    with stoker.Loader(dataset, **OPTIONS) as loader:
        epoch0 = digest(loader)
        loader.set_epoch(1)
        epoch1 = digest(loader)
    assert len(epoch0) == ROWS // BATCH and epoch0 != epoch1
    return {0: epoch0, 1: epoch1}


def native_threads() -> int:
    return len(os.listdir("/proc/self/task"))


class Consumer(threading.Thread):
    """Iterates `loader` once, recording each batch's digest and how the iteration ended."""

    def __init__(self, loader, stop_after=None):
        super().__init__(daemon=True)
        self.loader = loader
        self.stop_after = stop_after  # break after this many batches
        self.digests = []
        self.error = None
        self.completed = False
        self.progress = threading.Event()

    def run(self):
        try:
            for batch in self.loader:
                self.digests.extend(digest([batch]))
                self.progress.set()
                if self.stop_after is not None and len(self.digests) >= self.stop_after:
                    return
            self.completed = True
        except BaseException as e:  # noqa: BLE001 - the test inspects it
            self.error = e
        finally:
            self.progress.set()


def test_issue_repro_close_while_another_thread_iterates(dataset):
    """The issue's reproduction, 40 times: the thread ends, with the whole epoch or
    LoaderClosedError, never silently short and never hanging."""
    outcomes = {"completed": 0, "closed": 0}
    for _ in range(40):
        L = stoker.Loader(dataset, columns=["label"], features=FEATS, batch_size=100, seed=5,
                          num_threads=2)
        n = len(L)
        result = {}

        def target():
            try:
                result["sums"] = [np.asarray(b["features"]).sum() for b in L]
            except BaseException as e:  # noqa: BLE001
                result["error"] = e

        t = threading.Thread(target=target)
        t.start()
        time.sleep(0.001)
        L.close()
        t.join(JOIN_S)
        assert not t.is_alive(), "the iterating thread hangs after close()"
        if "error" in result:
            assert isinstance(result["error"], LoaderClosedError), repr(result["error"])
            outcomes["closed"] += 1
        else:
            assert len(result["sums"]) == n, "a silently short epoch"
            outcomes["completed"] += 1
        with pytest.raises(LoaderClosedError):
            iter(L)
    assert sum(outcomes.values()) == 40
    assert outcomes["closed"] > 0, outcomes  # the race is exercised, not always won by the epoch


ACTIONS = ["close", "del", "break", "set_epoch", "load_state_dict", "state_dict", "stats"]


def run_trial(dataset, reference, action, rng):
    ref = reference[0]
    n = len(ref)
    loader = stoker.Loader(dataset, **OPTIONS)
    stop_after = rng.randrange(1, n) if action == "break" else None
    consumer = Consumer(loader, stop_after=stop_after)
    consumer.start()
    # The moment: a random delay, or a random number of batches delivered.
    if rng.random() < 0.5:
        time.sleep(rng.uniform(0, 0.03))
    else:
        target = rng.randrange(0, n)
        deadline = time.monotonic() + JOIN_S
        while len(consumer.digests) < target and consumer.is_alive() and \
                time.monotonic() < deadline:
            consumer.progress.wait(0.05)
            consumer.progress.clear()
    seen_before = len(consumer.digests)
    state = None
    if action == "close":
        loader.close()
    elif action == "del":
        del loader  # the iteration keeps what it needs: it completes
        loader = None
    elif action == "set_epoch":
        loader.set_epoch(1)
    elif action == "load_state_dict":
        resume_at = rng.randrange(0, n)
        loader.load_state_dict({**loader.state_dict(), "epoch": 0, "batch": resume_at})
    elif action == "state_dict":
        state = loader.state_dict()
        seen_after = len(consumer.digests)
    elif action == "stats":
        stats = loader.stats()
        assert stats["batches"] >= seen_before
    consumer.join(JOIN_S)
    assert not consumer.is_alive(), f"{action}: the iterating thread hangs"
    got = consumer.digests
    # Whatever happened, what was delivered is a prefix of the undisturbed epoch.
    assert got == ref[:len(got)], f"{action}: batches differ from an undisturbed run"
    error = consumer.error
    if action == "close":
        assert consumer.completed or isinstance(error, LoaderClosedError), repr(error)
    elif action in ("set_epoch", "load_state_dict"):
        assert consumer.completed or isinstance(error, LoaderStateError), repr(error)
        # When the consumer is inside the engine's next() at that moment, loader.py re-raises
        # the engine's LoaderClosedError ("the loader was closed"), a LoaderStateError subclass,
        # instead of its "ended by set_epoch(...)" LoaderStateError (reported, not fixed here).
    elif action == "break":
        assert error is None and len(got) == stop_after
    else:
        assert error is None and consumer.completed, repr(error)
    if consumer.completed:
        assert got == ref

    # After the disturbance the loader (when still open) is in the state the action describes.
    if action == "set_epoch":
        assert loader.state_dict()["epoch"] == 1 and loader.state_dict()["batch"] == 0
        assert digest(b for b, _ in zip(loader, range(3))) == reference[1][:3]
    elif action == "load_state_dict":
        st = loader.state_dict()
        assert (st["epoch"], st["batch"]) == (0, resume_at)
        assert digest(b for b, _ in zip(loader, range(3))) == ref[resume_at:resume_at + 3]
    elif action == "state_dict":
        # Read from another thread mid-iteration: at most one batch ahead of what the consumer
        # had recorded (one may be between its yield and the record).
        # A finished epoch reads as the start of the next one.
        if state["epoch"] == 1:
            # The last batch may be handed out but not yet recorded when seen_after is read.
            assert state["batch"] == 0 and consumer.completed and seen_after >= n - 1, state
        else:
            assert state["epoch"] == 0, state
            assert seen_before <= state["batch"] <= seen_after + 1, (seen_before, state,
                                                                    seen_after)
        with stoker.Loader(dataset, **OPTIONS) as resumed:
            resumed.load_state_dict(state)
            k = state["batch"]
            expected = reference[state["epoch"]][k:k + 3]
            assert digest(b for b, _ in zip(resumed, range(3))) == expected
    if loader is not None:
        loader.close()
    if consumer.completed:
        return "completed"
    return type(error).__name__ if error else "break"


def test_random_disturbances_from_another_thread(dataset, reference):
    rng = random.Random(20261130)
    base = native_threads()
    outcomes = {}
    start = time.monotonic()
    trials = 0
    while trials < 140 and time.monotonic() - start < 30:
        action = ACTIONS[trials % len(ACTIONS)]
        outcome = run_trial(dataset, reference, action, rng)
        outcomes.setdefault(action, {}).setdefault(outcome, 0)
        outcomes[action][outcome] += 1
        trials += 1
    print(f"{trials} trials: {outcomes}")
    assert trials >= 2 * len(ACTIONS), trials
    # The interrupting actions did interrupt some iterations (the test is not vacuous).
    assert outcomes["close"].get("LoaderClosedError", 0) > 0, outcomes
    assert outcomes["set_epoch"].get("LoaderStateError", 0) > 0, outcomes
    # No engine thread outlives its loader.
    deadline = time.monotonic() + 5
    while native_threads() > base and time.monotonic() < deadline:
        time.sleep(0.05)
    assert native_threads() <= base, (native_threads(), base)


def test_close_from_many_threads_at_once(dataset, reference):
    """close() racing with itself and with the iteration: every call returns, once."""
    for trial in range(10):
        loader = stoker.Loader(dataset, **OPTIONS)
        consumer = Consumer(loader)
        consumer.start()
        time.sleep(0.002 * trial)
        closers = [threading.Thread(target=loader.close) for _ in range(4)]
        for t in closers:
            t.start()
        for t in closers + [consumer]:
            t.join(JOIN_S)
            assert not t.is_alive()
        assert consumer.completed or isinstance(consumer.error, LoaderClosedError)
        assert consumer.digests == reference[0][:len(consumer.digests)]


# ------------------------------------------------------------------------------ exit (defect 5)

EXIT_PRELUDE = """
import threading, time
import numpy as np
import stoker
L = stoker.Loader({root!r}, columns=["label"], features={feats!r}, batch_size=100, seed=5,
                  num_threads=2)
"""

EXIT_SCRIPTS = {
    # A daemon thread still iterating the module-level loader when the program ends.
    "daemon_iterating": """
        t = threading.Thread(target=lambda: [np.asarray(b["features"]).sum() for b in L],
                             daemon=True)
        t.start()
    """,
    # The same, with a consumer that is mostly busy outside the engine.
    "daemon_slow_consumer": """
        def consume():
            try:
                for b in L:
                    time.sleep(0.01)
            except stoker.errors.LoaderClosedError:
                pass
        t = threading.Thread(target=consume, daemon=True)
        t.start()
        time.sleep(0.2)
    """,
    # A thread that threading did not start (as Ray's task threads): threading knows it as a
    # dummy thread, which cannot be joined (the exit hook raised on it).
    "foreign_thread_iterating": """
        import _thread
        def consume():
            threading.current_thread()  # registers the dummy thread
            try:
                for b in L:
                    time.sleep(0.01)
            except stoker.errors.LoaderClosedError:
                pass
        _thread.start_new_thread(consume, ())
        time.sleep(0.3)
    """,
    # No thread: a module-level iterator mid-epoch.
    "module_iterator": """
        it = iter(L)
        next(it)
    """,
}


@pytest.mark.parametrize("name", sorted(EXIT_SCRIPTS))
def test_exit_with_a_module_level_loader_reports_no_leaks(dataset, name):
    script = EXIT_PRELUDE.format(root=dataset, feats=FEATS) + textwrap.dedent(EXIT_SCRIPTS[name])
    for _ in range(4):  # the daemon cases were timing-dependent: abort or leaks in most runs
        start = time.monotonic()
        result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                                timeout=60)
        elapsed = time.monotonic() - start
        assert result.returncode == 0, result.stderr[-3000:]
        assert "nanobind: leaked" not in result.stderr, result.stderr[-3000:]
        assert "terminate called" not in result.stderr, result.stderr[-3000:]
        if name == "foreign_thread_iterating":  # (daemon_iterating's lambda raises on close)
            assert "Traceback" not in result.stderr, result.stderr[-3000:]
        assert elapsed < 20, elapsed


def test_the_batch_waited_for_is_assembled_while_every_worker_is_busy(tmp_path):
    """The consumer assembles the batch it waits for when every worker is in a decode task: the
    epoch's first batch (its head) used to wait behind whole row groups. One worker, held inside
    the transform of the next segment until the first batch has come: without this it never comes
    (the test would see the hold time out)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = str(tmp_path / "two.parquet")
    pq.write_table(pa.table({"id": np.arange(2000, dtype=np.int64)}), path, row_group_size=1000)
    held, release, timed_out, calls = threading.Event(), threading.Event(), [], []

    def fn(cols):
        if len(cols["id"]) == 1000 and cols["id"][0] == 0:  # row group 0 (the probe has 64 rows)
            calls.append(1)
            if len(calls) == 2:  # the head was the first: this is the rest of row group 0
                held.set()
                if not release.wait(10):
                    timed_out.append(1)
        return {"id2": cols["id"] * 2}

    with stoker.Loader(path, transform=fn, batch_size=100, shuffle=False, num_threads=1) as loader:
        it = iter(loader)
        assert held.wait(JOIN_S), "the worker never reached the second segment"
        first = next(it)
        release.set()
        rest = [b["id2"] for b in it]
    assert not timed_out, "the first batch waited for the worker"
    np.testing.assert_array_equal(first["id2"], np.arange(100) * 2)
    np.testing.assert_array_equal(np.concatenate(rest), np.arange(100, 2000) * 2)


def test_the_windows_after_the_head_are_split_among_the_workers(tmp_path):
    """The window after the head holds the rest of the head's row group: decoded as one task, the
    second batch waited for one worker to decode most of a row group while the consumer idled.
    The head is split into 4 tasks per worker (at most one per column); the next two windows'
    segments into one per worker; later row groups (under task_bytes) are one task each. The
    decode stage counts tasks."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = str(tmp_path / "eight.parquet")
    rng = np.random.default_rng(5)
    pq.write_table(pa.table({f"f{i}": rng.random(6000).astype(np.float32) for i in range(8)}),
                   path, row_group_size=1000)
    digests = set()
    for threads in (1, 2, 3):
        with stoker.Loader(path, batch_size=100, num_threads=threads, seed=1) as loader:
            batches = list(loader)
            decode = next(s for s in loader.stats()["stages"] if s["name"] == "decode")
        digests.add(b"".join(np.asarray(b[f"f{i}"]).tobytes() for b in batches for i in range(8)))
        # Windows: the head (100 rows), the rest of its row group, the next row group, then four
        # row groups of one task each.
        assert decode["items"] == min(8, 4 * threads) + 2 * threads + 4, (threads, decode)
    assert len(digests) == 1  # the split does not change the batches
