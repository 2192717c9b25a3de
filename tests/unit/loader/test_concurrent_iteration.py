"""One loader iterated from several threads at once (issue 23, item 3).

Each thread runs ``for batch in loader``. Only the newest iteration may run: every loop either
delivers a whole epoch, byte-equal to an undisturbed run of that epoch (every batch once, the
right count), or raises ``LoaderStateError`` after a prefix of some epoch. Before the fix a loop
could "complete" with duplicated batches (101 batches, 100 distinct) or with one missing.

Each thread count runs 50 trials in a subprocess with a timeout (a hang fails the test, not the
run); inside, every join has a timeout too, so a stuck thread is reported with its trial.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ROWS = 640
BATCH = 16  # 40 batches an epoch
TRIALS = 50

SCENARIO = textwrap.dedent("""
    import hashlib, json, sys, threading
    import numpy as np
    import stoker
    from stoker.errors import LoaderStateError

    root, threads, trials, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    OPTIONS = dict(batch_size=16, seed=3, shuffle_window=64, num_threads=2)
    if mode == "augment":
        OPTIONS["augment"] = lambda batch, rng: batch

    def digest(batch):
        h = hashlib.sha256()
        for key in sorted(batch):
            h.update(key.encode() + np.ascontiguousarray(batch[key]).tobytes())
        return h.hexdigest()

    with stoker.Loader(root, **OPTIONS) as loader:
        reference = []
        for epoch in range(threads + 1):
            loader.set_epoch(epoch)
            reference.append([digest(b) for b in loader])
    n = len(reference[0])

    def epoch_of(got):
        # The epoch whose undisturbed run starts with these batches (None: none does).
        for epoch, ref in enumerate(reference):
            if got == ref[:len(got)]:
                return epoch
        return None

    report = {"complete": 0, "errors": {}, "bad": []}
    for trial in range(trials):
        loader = stoker.Loader(root, **OPTIONS)
        results = [None] * threads
        start = threading.Barrier(threads)
        made = threading.Barrier(threads)

        def run(i):
            got = []
            try:
                start.wait()
                if mode == "iter_first":  # every iterator exists before any takes a batch
                    it = iter(loader)
                    made.wait()
                else:
                    it = iter(loader)
                for batch in it:
                    got.append(digest(batch))
                results[i] = ("complete", got)
            except LoaderStateError as error:
                results[i] = (type(error).__name__, got)
            except BaseException as error:
                results[i] = ("unexpected " + repr(error), got)

        workers = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(30)
        if any(w.is_alive() for w in workers):
            report["bad"].append(f"trial {trial}: a thread still runs after 30 s")
            break
        complete = [got for outcome, got in results if outcome == "complete"]
        report["complete"] += len(complete)
        seen = []
        for outcome, got in results:
            epoch = epoch_of(got)
            if outcome == "complete":
                if epoch is None or len(got) != n or len(set(got)) != n:
                    report["bad"].append(
                        f"trial {trial}: a loop completed with {len(got)} batches, "
                        f"{len(set(got))} distinct, epoch {epoch} (want {n}, an undisturbed epoch)")
                elif epoch in seen:
                    report["bad"].append(f"trial {trial}: epoch {epoch} completed twice")
                seen.append(epoch)
            else:
                report["errors"][outcome] = report["errors"].get(outcome, 0) + 1
                if not outcome.startswith("LoaderStateError"):
                    report["bad"].append(f"trial {trial}: {outcome}")
                elif epoch is None:
                    report["bad"].append(
                        f"trial {trial}: an ended loop got {len(got)} batches that are no "
                        "undisturbed epoch's first ones")
                if mode == "iter_first" and got:
                    report["bad"].append(f"trial {trial}: an older iterator got {len(got)} batches")
        if not complete:
            report["bad"].append(f"trial {trial}: no loop completed")
        if mode == "iter_first" and (len(complete) != 1 or complete[0] != reference[0]):
            report["bad"].append(f"trial {trial}: {len(complete)} loops completed (want exactly "
                                 "the newest iterator's, epoch 0)")
        loader.close()
    print(json.dumps(report))
""")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("concurrent")
    rng = np.random.default_rng(1)
    table = pa.table({"id": np.arange(ROWS, dtype=np.int64),
                      "x": rng.standard_normal(ROWS).astype(np.float32)})
    pq.write_table(table, str(root / "part.parquet"), row_group_size=160)
    (root / "scenario.py").write_text(SCENARIO)
    return str(root)


def run_scenario(dataset: str, threads: int, trials: int, mode: str) -> dict:
    script = os.path.join(dataset, "scenario.py")
    proc = subprocess.run([sys.executable, script, dataset, str(threads), str(trials), mode],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("threads", range(2, 9))
def test_threads_each_running_a_for_loop(dataset, threads):
    """The issue's case: every loop is a whole undisturbed epoch or a LoaderStateError."""
    report = run_scenario(dataset, threads, TRIALS, "race")
    assert report["bad"] == [], report
    assert report["complete"] >= TRIALS
    # The threads did interfere (the test is not vacuous).
    assert report["errors"].get("LoaderStateError", 0) > 0, report


@pytest.mark.parametrize("threads", [2, 5, 8])
def test_only_the_newest_iterator_delivers(dataset, threads):
    """Every thread creates its iterator, then all take batches: exactly the newest iterator
    delivers epoch 0; the others end at their first step."""
    report = run_scenario(dataset, threads, 20, "iter_first")
    assert report["bad"] == [], report
    assert report["errors"] == {"LoaderStateError": 20 * (threads - 1)}, report


def test_threads_racing_with_augment(dataset):
    """The augment stage takes batches ahead of the loop: the same rule holds."""
    report = run_scenario(dataset, 4, 20, "augment")
    assert report["bad"] == [], report


FORK_SCENARIO = textwrap.dedent("""
    import os, sys, threading, time
    import stoker
    from stoker.errors import LoaderClosedError

    loader = stoker.Loader(sys.argv[1], batch_size=16, seed=3, num_threads=2)
    held, release = threading.Event(), threading.Event()

    def hold():  # what an iterating thread does while it waits in the engine's next()
        with loader._handover:
            held.set()
            release.wait(30)

    threading.Thread(target=hold, daemon=True).start()
    held.wait(30)
    pid = os.fork()
    if pid == 0:
        try:
            iter(loader)
            os._exit(2)
        except LoaderClosedError:
            os._exit(0)
        except BaseException:
            os._exit(3)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.01)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        print("hang")
        sys.exit(0)
    release.set()
    print("exit", os.waitstatus_to_exitcode(status))
""")


def test_fork_while_another_thread_holds_the_hand_over(dataset):
    """A child forked while another thread held the loader's hand-over lock gets fresh locks:
    its iter() raises LoaderClosedError (an inherited loader) instead of waiting forever."""
    script = os.path.join(dataset, "fork_scenario.py")
    with open(script, "w") as f:
        f.write(FORK_SCENARIO)
    proc = subprocess.run([sys.executable, script, dataset], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "exit 0", proc.stdout + proc.stderr[-3000:]
