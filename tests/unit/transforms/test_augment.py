"""augment=: a per-batch callable after the engine, keyed by (seed, epoch, global batch index).

Checked by bytes: the loader's output equals the callable applied by hand to the plain loader's
batches with the documented key, whatever the threads, processes or resume.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import stoker
from stoker._pyworkers import augment_rng
from stoker.errors import (InvalidOptionError, LoaderClosedError, TransformError,
                           WorkerCrashedError)
from stoker_testdata import TESTS, write_uneven_dataset

# Child scripts import this module (its folder) and, through it, stoker_testdata (TESTS).
HERE = [os.path.dirname(os.path.abspath(__file__)), TESTS]
OPTIONS = dict(columns=["id", "x", "emb", "flag"], batch_size=128, seed=11, shuffle_window=1000)


# ------------------------------------------------------------------- callables (module level)

def jitter(batch, rng):
    out = dict(batch)
    out["x"] = batch["x"] + rng.standard_normal(batch["x"].shape).astype(np.float32)
    out["emb"] = np.flip(batch["emb"], axis=1) if rng.random() < 0.5 else batch["emb"]
    out["draw"] = rng.integers(0, 1 << 40, size=(len(batch["id"]), 2))
    return out


def python_rows(batch, rng):
    # Pure Python per row (GIL-bound), plus a draw.
    ids = batch["id"].tolist()
    return {"id": batch["id"], "h": np.array([(i * 2654435761 + int(rng.integers(1 << 20))) % 997
                                              for i in ids], dtype=np.int64)}


FAIL_ID = [-1]


def fail_on_id(batch, rng):
    if int(batch["id"][0]) == FAIL_ID[0]:
        raise ValueError("no third batch")
    return {"id": batch["id"]}


MARK = [-1]  # the first id of the batch the schema tests make different (thread mode)


def marked(batch):
    return int(batch["id"][0]) == MARK[0]


def drop_key_late(batch, rng):
    out = {"id": batch["id"], "x": batch["x"]}
    if marked(batch):
        del out["x"]
    return out


def cast_late(batch, rng):
    x = batch["x"]
    return {"x": x.astype(np.float64) if marked(batch) else x}


def reshape_late(batch, rng):
    emb = batch["emb"]
    return {"emb": emb[:, :2] if marked(batch) else emb}


def extra_key_late(batch, rng):
    out = {"id": batch["id"]}
    if marked(batch):
        out["more"] = batch["id"]
    return out


def slow(batch, rng):
    time.sleep(0.3)
    return {"id": batch["id"]}


def keep_strings(batch, rng):
    return {"name": batch["name"], "n": batch["n"] * 2}


def return_list(batch, rng):
    return {"id": batch["id"].tolist()}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("augment"))
    write_uneven_dataset(root)
    return root


def by_hand(dataset, fn, epoch=0, rank=0, world_size=1, **options):
    """The plain loader's batches with ``fn`` applied using the documented key."""
    opts = {**OPTIONS, **options}
    with stoker.Loader(dataset, rank=rank, world_size=world_size, **opts) as loader:
        loader.set_epoch(epoch)
        return [fn(batch, augment_rng((opts["seed"], epoch, i * world_size + rank)))
                for i, batch in enumerate(loader)]


def run(dataset, fn, epoch=0, **options):
    with stoker.Loader(dataset, **{**OPTIONS, "augment": fn, **options}) as loader:
        loader.set_epoch(epoch)
        return list(loader)


def as_bytes(batches):
    out = []
    for batch in batches:
        row = {}
        for key, value in batch.items():
            value = np.asarray(value)
            row[key] = (value.dtype.str, value.shape, np.ascontiguousarray(value).tobytes())
        out.append(row)
    return out


# ----------------------------------------------------------------------------- determinism

def test_equals_fn_applied_with_documented_key(dataset):
    got = run(dataset, jitter)
    assert len(got) > 10
    assert as_bytes(got) == as_bytes(by_hand(dataset, jitter))


def test_key_uses_global_batch_index_across_ranks(dataset):
    for rank in range(2):
        got = run(dataset, jitter, rank=rank, world_size=2, epoch=1)
        assert as_bytes(got) == as_bytes(by_hand(dataset, jitter, epoch=1, rank=rank,
                                                 world_size=2))


def test_same_across_threads_and_processes(dataset):
    reference = as_bytes(run(dataset, python_rows, num_threads=1))
    assert as_bytes(run(dataset, python_rows, num_threads=2)) == reference
    assert as_bytes(run(dataset, python_rows, num_threads=2, python_workers=2)) == reference


def test_epochs_differ(dataset):
    first = as_bytes(run(dataset, python_rows, epoch=0, shuffle=False))
    second = as_bytes(run(dataset, python_rows, epoch=1, shuffle=False))
    assert [b["id"] for b in first] == [b["id"] for b in second]  # the same rows ...
    assert [b["h"] for b in first] != [b["h"] for b in second]  # ... augmented differently


@pytest.mark.parametrize("python_workers", [0, 2])
def test_mid_epoch_resume(dataset, python_workers):
    options = {**OPTIONS, "augment": jitter, "python_workers": python_workers}
    whole = as_bytes(run(dataset, jitter, epoch=1, python_workers=python_workers))
    with stoker.Loader(dataset, **options) as loader:
        loader.set_epoch(1)
        head = []
        for batch in loader:
            head.append(batch)
            if len(head) == 7:
                break
        state = loader.state_dict()
    with stoker.Loader(dataset, **options) as loader:
        loader.load_state_dict(state)
        tail = list(loader)
    assert as_bytes(head + tail) == whole


def test_cache_state_does_not_matter(dataset, tmp_path):
    cold = as_bytes(run(dataset, jitter, cache_dir=tmp_path))
    warm = as_bytes(run(dataset, jitter, cache_dir=tmp_path))
    assert cold == warm == as_bytes(run(dataset, jitter))


# ---------------------------------------------------------------------------------- schema

@pytest.mark.parametrize("fn, pattern", [
    (drop_key_late, r"augment= output is missing key 'x', which the first batch's output had"),
    (extra_key_late, r"augment= output has key 'more', which the first batch's output did not"),
    (cast_late, r"augment= output 'x' has dtype float64, rows of shape \(\); the first batch's "
                r"had dtype float32"),
    (reshape_late, r"augment= output 'emb' has dtype float32, rows of shape \(2,\); the first "
                   r"batch's had dtype float32, rows of shape \(4,\)"),
])
def test_schema_mismatch_names_key_and_batch(dataset, fn, pattern):
    MARK[0] = int(by_hand(dataset, lambda b, rng: b)[3]["id"][0])
    with pytest.raises(TransformError, match=rf"^epoch 0, batch 3: {pattern}"):
        run(dataset, fn)


def test_short_last_batch_is_allowed(dataset):
    got = run(dataset, jitter, drop_last=False)
    assert len(got[-1]["id"]) < OPTIONS["batch_size"]
    assert as_bytes(got) == as_bytes(by_hand(dataset, jitter, drop_last=False))


def test_non_array_output(dataset):
    with pytest.raises(TransformError, match=r"^epoch 0, batch 0: augment= returned list for "
                                             r"key 'id'; it must return numpy arrays"):
        run(dataset, return_list)


def test_exception_names_the_batch(dataset):
    plain = by_hand(dataset, lambda b, rng: b)
    FAIL_ID[0] = int(plain[2]["id"][0])
    with pytest.raises(TransformError, match=r"^epoch 0, batch 2: augment= raised ValueError: "
                                             r"no third batch"):
        run(dataset, fail_on_id)


def fail_in_worker(batch, rng):
    if int(batch["id"].min()) % 2 == 1:
        raise ValueError(f"odd batch starting at {int(batch['id'].min())}")
    return {"id": batch["id"]}


def test_exception_in_worker_process_names_the_batch(dataset):
    plain = by_hand(dataset, lambda b, rng: b)
    first_odd = next(i for i, b in enumerate(plain) if int(b["id"].min()) % 2 == 1)
    with pytest.raises(TransformError) as info:
        run(dataset, fail_in_worker, python_workers=2)
    message = str(info.value)
    assert message.startswith(f"epoch 0, batch {first_odd}: augment= raised ValueError: odd batch")
    assert "Traceback in the python_workers process" in message


def kill_on_odd(batch, rng):
    if int(batch["id"].min()) % 2 == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return {"id": batch["id"]}


@pytest.mark.timeout(120)
def test_worker_crash_stops_the_epoch(dataset):
    plain = by_hand(dataset, lambda b, rng: b)
    first_odd = next(i for i, b in enumerate(plain) if int(b["id"].min()) % 2 == 1)
    with stoker.Loader(dataset, **OPTIONS, augment=kill_on_odd, python_workers=2) as loader:
        got = []
        with pytest.raises(WorkerCrashedError) as info:
            for batch in loader:
                got.append(batch)
        assert str(info.value).startswith(
            f"epoch 0, batch {first_odd}: the python_workers process (pid ")
        assert "killed by signal SIGKILL" in str(info.value)
        assert len(got) == first_odd  # every batch before it was delivered
        # The pool replaced the dead worker: the loader can run again (and fails the same way).
        with pytest.raises(WorkerCrashedError, match=rf"^epoch 0, batch {first_odd}: "):
            list(loader)


def test_strings_and_torch_output(write_parquet):
    torch = pytest.importorskip("torch")
    path = write_parquet({"name": ["a", "bb", "", "dddd"] * 50, "n": list(range(200))},
                         row_group_size=50)
    for workers in (0, 2):
        with stoker.Loader(path, batch_size=32, seed=1, augment=keep_strings,
                           python_workers=workers, output="torch") as loader:
            batches = list(loader)
        with stoker.Loader(path, batch_size=32, seed=1) as loader:
            plain = list(loader)
        assert len(batches) == len(plain)
        for got, want in zip(batches, plain):
            assert isinstance(got["n"], torch.Tensor)
            assert got["n"].tolist() == (want["n"] * 2).tolist()
            assert isinstance(got["name"], stoker.Ragged)
            assert isinstance(got["name"].values, torch.Tensor)
            assert got["name"].tolist() == want["name"].tolist()


def flip_rows(batch, rng):
    return {"emb": batch["emb"][:, ::-1]}  # negative strides: torch needs a copy


def test_torch_after_augment_handles_negative_strides(dataset):
    torch = pytest.importorskip("torch")
    got = run(dataset, flip_rows, output="torch")
    want = by_hand(dataset, flip_rows)
    for g, w in zip(got, want):
        assert isinstance(g["emb"], torch.Tensor)
        assert np.array_equal(g["emb"].numpy(), w["emb"])


def test_iterable_dataset_passes_augment_through(dataset):
    torch = pytest.importorskip("torch")
    ds = stoker.IterableDataset(dataset, augment=jitter, **OPTIONS)
    got = list(torch.utils.data.DataLoader(ds, batch_size=None))
    assert as_bytes(got) == as_bytes(by_hand(dataset, jitter))


# --------------------------------------------------------------------------------- options

def test_bad_options(dataset):
    with pytest.raises(InvalidOptionError, match=r"python_workers must be a non-negative"):
        stoker.Loader(dataset, augment=jitter, python_workers=-1)
    with pytest.raises(InvalidOptionError, match=r"python_start_method must be 'spawn' or "
                                                 r"'forkserver', got 'fork'"):
        stoker.Loader(dataset, augment=jitter, python_workers=2, python_start_method="fork")
    with pytest.raises(InvalidOptionError, match=r"augment must be a callable"):
        stoker.Loader(dataset, augment="flip")
    with pytest.raises(InvalidOptionError, match=r"python_workers=2 has nothing to run"):
        stoker.Loader(dataset, python_workers=2)
    with pytest.raises(InvalidOptionError, match=r"python_workers=2 needs augment= to be "
                                                 r"picklable"):
        stoker.Loader(dataset, augment=lambda b, rng: b, python_workers=2)


# ------------------------------------------------------------------------------- lifecycle

def augment_threads():
    return [t for t in threading.enumerate() if t.name.startswith("stoker-augment")]


def wait_until(predicate, seconds=10.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not predicate():
        time.sleep(0.02)
    return predicate()


@pytest.mark.timeout(60)
def test_break_stops_background_work(dataset):
    with stoker.Loader(dataset, **OPTIONS, augment=slow) as loader:
        for i, _ in enumerate(loader):
            if i == 1:
                break
        # The pool's threads finish the call they are in and exit; nothing waits for them.
        assert wait_until(lambda: not augment_threads())
        assert len(list(loader)) == len(loader)  # a new iteration works


@pytest.mark.timeout(60)
@pytest.mark.parametrize("python_workers", [0, 2])
def test_close_from_another_thread(dataset, python_workers):
    loader = stoker.Loader(dataset, **OPTIONS, augment=slow, python_workers=python_workers)
    it = iter(loader)
    next(it)
    pids = loader._runner.pids if python_workers else []
    threading.Timer(0.1, loader.close).start()
    with pytest.raises(LoaderClosedError):
        for _ in it:
            pass
    assert wait_until(lambda: not augment_threads())
    for pid in pids:
        assert wait_until(lambda: not os.path.exists(f"/proc/{pid}") or
                          open(f"/proc/{pid}/stat").read().split(") ")[1][0] == "Z")


@pytest.mark.timeout(60)
def test_del_mid_iteration_stops_workers(dataset):
    loader = stoker.Loader(dataset, **OPTIONS, augment=slow, python_workers=2)
    it = iter(loader)
    next(it)
    pids = loader._runner.pids
    del it, loader
    for pid in pids:
        assert wait_until(lambda: not os.path.exists(f"/proc/{pid}") or
                          open(f"/proc/{pid}/stat").read().split(") ")[1][0] == "Z")


CTRL_C = """
import signal, sys, time
# Python keeps SIGINT ignored when it starts with it ignored (a test run launched in the
# background by a non-interactive shell): Ctrl-C must raise KeyboardInterrupt here.
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path[:0] = {here!r}
import stoker
from test_augment import slow, OPTIONS

if __name__ == "__main__":
    # Batches of 16 rows (0.3 s each on 2 workers): the epoch lasts long past the signal.
    loader = stoker.Loader({root!r}, **dict(OPTIONS, batch_size=16), augment=slow,
                           python_workers=2)
    pids = loader._runner.pids
    print("READY", flush=True)
    try:
        for batch in loader:
            pass
    except KeyboardInterrupt:
        loader.close()
        print("OK", " ".join(map(str, pids)), flush=True)
"""


EXIT_MID_EPOCH = """
import sys
sys.path[:0] = {here!r}
import stoker
from test_augment import slow, OPTIONS

if __name__ == "__main__":
    loader = stoker.Loader({root!r}, **OPTIONS, augment=slow, python_workers=2)
    it = iter(loader)
    next(it)
    print(" ".join(map(str, loader._runner.pids)), flush=True)
    sys.exit(0)  # no close(), calls in flight: the exit hooks stop everything
"""


@pytest.mark.timeout(90)
def test_interpreter_exit_mid_epoch_with_workers(dataset, tmp_path):
    script = tmp_path / "exit.py"
    script.write_text(EXIT_MID_EPOCH.format(here=HERE, root=dataset))
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    for pid in map(int, result.stdout.split()):
        assert wait_until(lambda: not os.path.exists(f"/proc/{pid}"))
    assert "Traceback" not in result.stderr, result.stderr


@pytest.mark.timeout(90)
def test_ctrl_c_with_worker_processes(dataset, tmp_path):
    script = tmp_path / "ctrl_c.py"
    script.write_text(CTRL_C.format(here=HERE, root=dataset))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "READY"
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)  # only the parent: as `kill -INT`
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, out + err
    assert out.startswith("OK"), out + err
    for pid in map(int, out.split()[1:]):
        assert wait_until(lambda: not os.path.exists(f"/proc/{pid}"))
