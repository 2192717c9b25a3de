"""python_workers: the process runner gives ThreadRunner's results, fails loudly, never hangs and
leaves no shared memory behind.

The callables live at module level: spawned workers import this module to unpickle them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from stoker import Ragged
from stoker._pyworkers import ProcessRunner, ThreadRunner, make_runner
from stoker.errors import InvalidOptionError, LoaderClosedError, TransformError, WorkerCrashedError

HERE = os.path.dirname(__file__)


# --------------------------------------------------------------------------- worker callables

def double(arrays):
    out = {}
    for key, value in arrays.items():
        if isinstance(value, np.ndarray) and value.dtype.kind in "iuf":
            out[key] = value * 2
        else:
            out[key] = value
    out["pid"] = np.array([os.getpid()])
    return out


def identity(arrays):
    return arrays


def noisy(arrays, rng):
    return {"x": arrays["x"] + rng.standard_normal(arrays["x"].shape).astype(np.float32),
            "draw": rng.integers(0, 1 << 30, size=3)}


def fail(arrays):
    raise ValueError(f"bad value {int(arrays['x'][0])}")


def kill_self(arrays):
    if int(arrays["x"][0]) == 13:
        os.kill(os.getpid(), signal.SIGKILL)
    return {"x": arrays["x"] + 1}


def exit_self(arrays):
    os._exit(7)


def scale_in_place_pass_rest(arrays):
    arrays["x"] *= 3  # the input view, modified in place and returned
    return {**arrays, "sum": np.array([arrays["x"].sum()])}


def not_a_dict(arrays):
    return [1, 2]


def grow(arrays):
    n = int(arrays["n"][0])
    return {"big": np.arange(n, dtype=np.int64)}


def slow(arrays):
    time.sleep(float(arrays["s"][0]))
    return {"s": arrays["s"]}


def rendezvous(arrays):
    folder = arrays["dir"][0]
    open(os.path.join(folder, str(os.getpid())), "w").close()
    deadline = time.monotonic() + 30
    while len(os.listdir(folder)) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    return {"seen": np.array([len(os.listdir(folder))])}


def python_loop(arrays):
    # Pure Python per-row work: holds the GIL the whole time.
    values = arrays["v"].tolist()
    return {"v": np.array([(v * 31 + 7) % 1000003 for v in values], dtype=np.int64)}


def shm_segments():
    return {name for name in os.listdir("/dev/shm") if name.startswith(f"stoker_{os.getpid()}_")}


def sample_arrays():
    rng = np.random.default_rng(0)
    return {
        "f32": rng.standard_normal((7, 3, 2)).astype(np.float32),
        "i64": rng.integers(-1000, 1000, size=11),
        "u8": rng.integers(0, 255, size=(5, 4), dtype=np.uint8),
        "bool": rng.random(9) > 0.5,
        "f16_strided": rng.standard_normal((6, 8)).astype(np.float16)[:, ::3],
        "empty": np.zeros((0, 4), np.float64),
        "big_endian": np.arange(5, dtype=">i4"),
        "strings": np.array(["a", "bcd", "", "é"], dtype=object),
        "unicode": np.array(["xy", "z"]),
        "bytes_ragged": Ragged(np.frombuffer(b"hello world", np.uint8).copy(),
                               np.array([0, 5, 11], np.int64), "utf8"),
        "scalar": 3.5,
    }


def same(a, b):
    assert a.keys() == b.keys()
    for key in a:
        x, y = a[key], b[key]
        if isinstance(x, Ragged):
            assert isinstance(y, Ragged) and x.kind == y.kind, key
            same({"v": x.values, "o": x.offsets}, {"v": y.values, "o": y.offsets})
        elif isinstance(x, np.ndarray):
            assert isinstance(y, np.ndarray), key
            assert (x.dtype, x.shape) == (y.dtype, y.shape), key
            if x.dtype.hasobject:
                assert x.tolist() == y.tolist(), key
            else:
                assert np.ascontiguousarray(x).tobytes() == np.ascontiguousarray(y).tobytes(), key
        else:
            assert type(x) is type(y) and x == y, key


@pytest.fixture
def runner():
    made = []

    def make(functions, workers=2, start_method="spawn"):
        r = make_runner(functions, workers, start_method)
        made.append(r)
        return r

    yield make
    for r in made:
        r.close()


# ---------------------------------------------------------------------------------- results

@pytest.mark.parametrize("fn", [double, identity])
def test_results_match_thread_runner(runner, fn):
    procs = runner({"t": fn})
    assert isinstance(procs, ProcessRunner)
    arrays = sample_arrays()
    expected = ThreadRunner({"t": fn}).call("t", arrays, "here")
    got = procs.call("t", arrays, "here")
    if fn is double:
        assert int(got.pop("pid")[0]) in procs.pids
        expected.pop("pid")
    same(expected, got)
    # The inputs are untouched, and the outputs own their memory (the arena is reused).
    same(arrays, sample_arrays())
    again = procs.call("t", {"f32": np.ones(3, np.float32)}, "here")
    same(expected, got)
    assert again["f32"].tolist() == ([2.0] * 3 if fn is double else [1.0] * 3)


def test_passed_through_inputs_skip_the_output_arena(runner):
    # Columns returned as they came (the input views themselves) are read back from the input
    # arena: the output arena holds only what the function made (here: nothing).
    procs = runner({"t": identity}, workers=1)
    arrays = {"x": np.arange(1_000_000, dtype=np.int64), "r": Ragged(
        np.arange(500_000, dtype=np.int32), np.array([0, 10, 500_000], np.int64), "list")}
    got = procs.call("t", arrays, "here")
    same(arrays, got)
    assert len(shm_segments()) == 1  # the input arena only
    second = procs.call("t", {"x": np.full(1_000_000, 9, np.int64)}, "here")
    # The first results own their memory: the second call overwrote the input arena.
    assert got["x"][5] == 5 and second["x"][5] == 9 and got["r"].values[-1] == 499_999
    # Large results are copied into Arrow-allocated memory: writable, aligned, independent.
    assert got["x"].flags.writeable and got["x"].ctypes.data % 64 == 0
    got["x"][:] = -1
    assert second["x"][5] == 9 and got["r"].values[5] == 5


def test_passed_through_inputs_modified_in_place(runner):
    procs = runner({"t": scale_in_place_pass_rest}, workers=1)
    arrays = {"x": np.arange(10, dtype=np.float64), "y": np.ones(4, np.float32)}
    got = procs.call("t", arrays, "here")
    assert got["x"].tolist() == [3.0 * i for i in range(10)]  # the modified bytes come back
    assert got["y"].tolist() == [1.0] * 4 and float(got["sum"][0]) == 135.0
    assert arrays["x"].tolist() == list(range(10))  # the caller's arrays were never shared


def test_rng_key_gives_thread_mode_draws(runner):
    arrays = {"x": np.arange(10, dtype=np.float32)}
    procs = runner({"augment": noisy})
    for key in [(1, 0, 0), (1, 0, 5), (2**64 - 1, 3, 7)]:
        same(ThreadRunner({"augment": noisy}).call("augment", arrays, "b", rng_key=key),
             procs.call("augment", arrays, "b", rng_key=key))


def test_output_arena_grows(runner):
    procs = runner({"g": grow}, workers=1)
    for n in (10, 3_000_000, 100, 5_000_000):
        out = procs.call("g", {"n": np.array([n])}, "here")
        assert out["big"].shape == (n,) and int(out["big"][-1]) == n - 1


def test_parallel_calls_from_threads(runner):
    procs = runner({"t": double}, workers=3)
    results = {}
    errors = []

    def work(i):
        try:
            x = np.full((1000, 3), i, np.int32)
            for _ in range(5):
                out = procs.call("t", {"x": x}, f"call {i}")
                assert np.array_equal(out["x"], x * 2)
            results[i] = int(out["pid"][0])
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert len(results) == 8
    assert set(results.values()) <= set(procs.pids)


def test_calls_run_at_once(runner, tmp_path):
    # Three calls from three threads meet inside three workers (each waits for the others): the
    # waits release the GIL and the calls do not queue behind one another.
    procs = runner({"r": rendezvous}, workers=3)
    results = []
    threads = [threading.Thread(target=lambda: results.append(
        procs.call("r", {"dir": np.array([str(tmp_path)], dtype=object)}, "w")))
        for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(int(r["seen"][0]) for r in results) == [3, 3, 3]


# ----------------------------------------------------------------------------------- errors

def test_user_exception_becomes_transform_error(runner):
    procs = runner({"transform": fail})
    with pytest.raises(TransformError) as info:
        procs.call("transform", {"x": np.array([42])}, "file 'a.parquet', row group 3")
    message = str(info.value)
    assert not isinstance(info.value, WorkerCrashedError)
    assert message.startswith(
        "file 'a.parquet', row group 3: transform= raised ValueError: bad value 42")
    assert "Traceback" in message and "in fail" in message  # the worker's traceback
    with pytest.raises(TransformError) as thread_info:
        ThreadRunner({"transform": fail}).call("transform", {"x": np.array([42])},
                                                "file 'a.parquet', row group 3")
    assert message.startswith(str(thread_info.value))
    # The worker survives a user error.
    procs2 = runner({"transform": identity}, workers=1)
    pid = procs2.pids[0]
    procs2.call("transform", {"x": np.array([1])}, "w")
    assert procs2.pids == [pid]


def test_not_a_dict(runner):
    procs = runner({"transform": not_a_dict}, workers=1)
    with pytest.raises(TransformError, match=r"^rg 1: transform= must return a dict of arrays, "
                                             r"got list"):
        procs.call("transform", {"x": np.array([1])}, "rg 1")


@pytest.mark.timeout(60)
def test_killed_worker_raises_and_is_replaced(runner):
    before = shm_segments()
    procs = runner({"transform": kill_self}, workers=2)
    assert procs.call("transform", {"x": np.array([1])}, "rg 0")["x"].tolist() == [2]
    old = set(procs.pids)
    with pytest.raises(WorkerCrashedError) as info:
        procs.call("transform", {"x": np.array([13])}, "file 'b.parquet', row group 13")
    message = str(info.value)
    assert message.startswith("file 'b.parquet', row group 13: the python_workers process (pid ")
    assert "killed by signal SIGKILL" in message
    dead = int(message.split("(pid ")[1].split(")")[0])
    assert dead in old and dead not in procs.pids
    assert len(shm_segments() - before) <= 2  # the dead worker's arenas are gone at once
    # Documented: the pool replaces the dead worker, later calls work.
    for i in range(4):
        assert procs.call("transform", {"x": np.array([i])}, "rg")["x"].tolist() == [i + 1]
    assert len(procs.pids) == 2 and dead not in procs.pids
    procs.close()
    assert shm_segments() <= before


@pytest.mark.timeout(60)
def test_exit_in_worker_names_exit_code(runner):
    procs = runner({"transform": exit_self}, workers=1)
    with pytest.raises(WorkerCrashedError, match=r"^batch 4: .*\(exit code 7\)"):
        procs.call("transform", {"x": np.array([1])}, "batch 4")


def test_lambda_and_nested_refused():
    with pytest.raises(InvalidOptionError, match=r"python_workers=4 needs transform= to be "
                                                 r"picklable"):
        make_runner({"transform": lambda a: a}, 4)

    def nested(a):
        return a

    with pytest.raises(InvalidOptionError,
                       match=r"python_workers=2 needs augment= to be picklable"):
        make_runner({"augment": nested}, 2)


def test_bad_options():
    with pytest.raises(InvalidOptionError, match=r"python_start_method must be 'spawn' or "
                                                 r"'forkserver', got 'fork'"):
        make_runner({"t": identity}, 2, "fork")
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(InvalidOptionError, match=r"python_workers must be a non-negative"):
            make_runner({"t": identity}, bad)


def test_forkserver(runner):
    procs = runner({"t": double}, workers=1, start_method="forkserver")
    got = procs.call("t", {"x": np.arange(4)}, "here")
    assert got["x"].tolist() == [0, 2, 4, 6]


# -------------------------------------------------------------------------------- lifecycle

@pytest.mark.timeout(60)
def test_close_prompt_idempotent_and_releases_memory():
    before = shm_segments()
    procs = make_runner({"t": double, "s": slow}, 3)
    for i in range(3):
        procs.call("t", {"x": np.zeros(100_000)}, "w")
    assert len(shm_segments() - before) >= 2
    pids = procs.pids
    assert len(pids) == 3
    # A call in flight when close() comes raises LoaderClosedError (not a crash error).
    raised = []

    def long_call():
        try:
            procs.call("s", {"s": np.array([30.0])}, "w")
        except BaseException as error:  # reported below
            raised.append(error)

    caller = threading.Thread(target=long_call)
    caller.start()
    time.sleep(0.5)
    procs.close()
    procs.close()
    caller.join(10)
    assert not caller.is_alive()
    assert len(raised) == 1 and isinstance(raised[0], LoaderClosedError), raised
    assert not wait_gone(pids, 1.0)  # close() reaped them
    assert shm_segments() <= before
    with pytest.raises(LoaderClosedError):
        procs.call("t", {"x": np.zeros(3)}, "w")


AFTER_FORK = """
import os, sys
sys.path.insert(0, {here!r})
import numpy as np
from stoker._pyworkers import make_runner
from stoker.errors import LoaderClosedError
from test_python_workers import double

if __name__ == "__main__":
    runner = make_runner({{"t": double}}, 1)
    assert runner.call("t", {{"x": np.arange(3)}}, "w")["x"].tolist() == [0, 2, 4]
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            runner.call("t", {{"x": np.arange(3)}}, "w")
        except LoaderClosedError as error:
            code = 0 if "inherited through fork()" in str(error) else 2
        runner.close()  # must not stop the parent's worker
        sys.exit(code)  # a normal exit: multiprocessing's exit hook must leave it alone too
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, status
    assert runner.call("t", {{"x": np.arange(3)}}, "w")["x"].tolist() == [0, 2, 4]
    print("OK")
"""

EXIT_WITHOUT_CLOSE = """
import os, sys
sys.path.insert(0, {here!r})
import numpy as np
from stoker._pyworkers import make_runner
from test_python_workers import double

if __name__ == "__main__":
    runner = make_runner({{"t": double}}, 2)
    runner.call("t", {{"x": np.zeros(1000)}}, "w")
    print(os.getpid(), " ".join(str(p) for p in runner.pids), flush=True)
    sys.exit(0)  # no close(): the exit hook stops the workers and unlinks the segments
"""

PARENT_KILLED = """
import os, sys, time
sys.path.insert(0, {here!r})
import numpy as np
from stoker._pyworkers import make_runner
from test_python_workers import double

if __name__ == "__main__":
    runner = make_runner({{"t": double}}, 2)
    runner.call("t", {{"x": np.zeros(10)}}, "w")
    runner.call("t", {{"x": np.zeros(10)}}, "w")
    print(os.getpid(), " ".join(str(p) for p in runner.pids), flush=True)
    time.sleep(60)
"""


def run_script(path, text):
    with open(path, "w") as f:
        f.write(text.format(here=HERE))
    return subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=60)


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie (exited, not yet reaped) is gone too
        return f.read().split(") ")[1][0] != "Z"


def wait_gone(pids, seconds=10.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if pid_alive(p)]


@pytest.mark.timeout(90)
def test_fork_child_does_not_use_parents_pool(tmp_path):
    result = run_script(tmp_path / "fork.py", AFTER_FORK)
    assert result.returncode == 0 and "OK" in result.stdout, result.stdout + result.stderr


@pytest.mark.timeout(90)
def test_interpreter_exit_stops_workers_and_frees_memory(tmp_path):
    result = run_script(tmp_path / "exit.py", EXIT_WITHOUT_CLOSE)
    assert result.returncode == 0, result.stderr
    parent, *pids = [int(p) for p in result.stdout.split()]
    assert len(pids) == 2 and not wait_gone(pids)
    assert not [n for n in os.listdir("/dev/shm") if n.startswith(f"stoker_{parent}_")]
    assert "leaked" not in result.stderr, result.stderr


@pytest.mark.timeout(90)
def test_workers_exit_when_parent_dies(tmp_path):
    path = tmp_path / "killed.py"
    path.write_text(PARENT_KILLED.format(here=HERE))
    proc = subprocess.Popen([sys.executable, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        parent, *pids = [int(p) for p in proc.stdout.readline().split()]
        assert len(pids) == 2
        assert [n for n in os.listdir("/dev/shm") if n.startswith(f"stoker_{parent}_")]
        proc.kill()
        proc.wait(10)
        assert not wait_gone(pids), "worker processes outlived their parent"
        # multiprocessing's resource tracker unlinks what a killed parent registered.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and \
                [n for n in os.listdir("/dev/shm") if n.startswith(f"stoker_{parent}_")]:
            time.sleep(0.1)
        assert not [n for n in os.listdir("/dev/shm") if n.startswith(f"stoker_{parent}_")]
    finally:
        proc.kill()


@pytest.mark.timeout(90)
def test_workers_ignore_sigint(runner):
    procs = runner({"t": double}, workers=1)
    procs.call("t", {"x": np.zeros(3)}, "w")
    os.kill(procs.pids[0], signal.SIGINT)
    time.sleep(0.3)
    assert procs.call("t", {"x": np.ones(3)}, "w")["x"].tolist() == [2.0] * 3


def test_python_loop_parallel_results(runner):
    # The workload of the measurement in the report: same results in both modes.
    arrays = {"v": np.arange(20_000, dtype=np.int64)}
    same(ThreadRunner({"t": python_loop}).call("t", arrays, "w"),
         runner({"t": python_loop}).call("t", arrays, "w"))


def test_augment_rng_full_seed_range():
    from stoker._pyworkers import augment_rng

    draws = {tuple(augment_rng(key).integers(0, 1 << 62, size=4))
             for key in [(2**64 - 1, 0, 0), (0, 0, 0), (2**63, 0, 0), (5, 1, 0), (5, 0, 1)]}
    assert len(draws) == 5  # the top seeds are not folded onto seed 0


def test_worker_that_cannot_load_the_callable_fails_fast(runner, tmp_path, monkeypatch):
    (tmp_path / "only_in_parent.py").write_text(textwrap.dedent("""
        import multiprocessing
        if multiprocessing.parent_process() is not None:
            raise ImportError("this module refuses to load in a worker")

        def fn(arrays):
            return arrays
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    import only_in_parent

    procs = runner({"transform": only_in_parent.fn}, workers=2)
    for _ in range(3):  # the first call finds out; later calls fail at once, without respawning
        with pytest.raises(InvalidOptionError, match=r"python_workers=2: a worker process could "
                                                     r"not load transform=") as info:
            procs.call("transform", {"x": np.arange(3)}, "w")
        assert "refuses to load in a worker" in str(info.value)
