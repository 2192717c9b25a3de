"""Contract 5 (no hangs): every way of leaving a loop stops the engine's threads promptly.

Each scenario runs in a fresh interpreter with its own timeout, so a hang fails one test instead
of the whole run, and so the process's native threads can be counted.
"""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from stoker_testdata import write_wide_dataset

HERE = os.path.dirname(__file__)

PRELUDE = """
import os, signal, sys, time
# Python keeps SIGINT ignored when it starts with it ignored (a test run launched in the
# background by a non-interactive shell): Ctrl-C must raise KeyboardInterrupt here.
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path.insert(0, {here!r})
import stoker

def threads():
    return len(os.listdir("/proc/self/task"))

base = threads()
loader = stoker.Loader({root!r}, batch_size=256, num_threads=4, prefetch_bytes="8MiB", seed=1)
"""


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("shutdown"))
    write_wide_dataset(root, files=4, rows_per_file=20000, columns=16, row_group_size=4000)
    return root


def run_script(dataset, body, timeout=60):
    script = PRELUDE.format(here=HERE, root=dataset) + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=timeout)


def check(result):
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK" in result.stdout, result.stdout + result.stderr


def test_exhaustion_joins_threads(dataset):
    check(run_script(dataset, """
        n = sum(1 for _ in loader)
        assert n == len(loader)
        assert threads() == base, (threads(), base)
        print("OK")
    """))


def test_break_stops_threads(dataset):
    check(run_script(dataset, """
        for i, batch in enumerate(loader):
            if i == 2:
                break
        assert threads() == base, (threads(), base)
        print("OK")
    """))


def test_exception_in_loop_stops_threads(dataset):
    check(run_script(dataset, """
        try:
            for i, batch in enumerate(loader):
                if i == 3:
                    raise RuntimeError("boom")
        except RuntimeError:
            pass
        assert threads() == base, (threads(), base)
        print("OK")
    """))


def test_del_mid_iteration_stops_threads(dataset):
    check(run_script(dataset, """
        it = iter(loader)
        next(it)
        assert threads() > base
        del it, loader
        assert threads() == base, (threads(), base)
        print("OK")
    """))


def test_unstarted_iterator_dropped_stops_threads(dataset):
    """iter() starts the epoch (it prefetches); dropping or closing the iterator before its first
    next() stops it too, with the loader still alive and usable."""
    check(run_script(dataset, """
        import time
        it = iter(loader)
        time.sleep(0.2)
        assert threads() > base
        del it
        assert threads() == base, (threads(), base)
        it = iter(loader)
        it.close()
        assert threads() == base, (threads(), base)
        assert sum(1 for _ in loader) == len(loader)
        assert threads() == base, (threads(), base)
        print("OK")
    """))


def test_batches_outlive_the_loader(dataset):
    check(run_script(dataset, """
        import numpy as np
        it = iter(loader)
        batch = next(it)
        expected = batch["id"].copy()
        del it, loader
        assert np.array_equal(batch["id"], expected)
        print("OK")
    """))


def test_interpreter_exit_mid_iteration(dataset):
    result = run_script(dataset, """
        it = iter(loader)
        next(it)
        print("OK", flush=True)
        sys.exit(0)
    """, timeout=30)
    check(result)


def test_keyboard_interrupt_while_waiting(dataset):
    body = """
        print("READY", flush=True)
        try:
            for batch in loader:
                time.sleep(0.05)  # a slow consumer: the signal lands in either place
        except KeyboardInterrupt:
            assert threads() == base, (threads(), base)
            print("OK", flush=True)
    """
    script = PRELUDE.format(here=HERE, root=dataset) + textwrap.dedent(body)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "READY"
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, out + err
    assert "OK" in out, out + err


def test_error_mid_epoch_stops_threads(tmp_path):
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    values = pa.array([1.0] * 5000 + [None] + [1.0] * 4999)
    pq.write_table(pa.table({"v": values}), tmp_path / "n.parquet", row_group_size=1000)
    script = f"""
import os, sys
import stoker
base = len(os.listdir("/proc/self/task"))
loader = stoker.Loader({str(tmp_path)!r}, batch_size=100, shuffle=False, num_threads=3)
got = 0
try:
    for batch in loader:
        got += 1
except stoker.errors.NullValueError as e:
    assert "row group 5" in str(e), e
    assert len(os.listdir("/proc/self/task")) == base
    print("OK", got)
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=60)
    check(result)
