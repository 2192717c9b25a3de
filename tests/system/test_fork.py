"""Contract 7 (safe to hold) across fork(): the fork matrix.

Every scenario runs as a script in a fresh interpreter (so a crash or a hang fails one test, not
pytest), which forks with os.fork(), multiprocessing (fork, forkserver, spawn) or a torch
DataLoader. Checked each time: a loader inherited mid-epoch raises LoaderClosedError in the child
(saying to create the loader there), the child exits 0 (no crash, no hang: every wait has a
timeout), a loader created in the child delivers the right batches, and the parent's iteration
continues with exactly the batches of an undisturbed run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap

import numpy as np
import pytest

import stoker
from stoker_testdata import TESTS, digest, write_labelled_features

HERE = TESTS  # child scripts import stoker_testdata
FEATS = [f"f{i}" for i in range(4)]
ROWS = 12000
OPTIONS = dict(columns=["label"], features=FEATS, batch_size=100, seed=5, num_threads=2,
               shuffle_window=2000)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return write_labelled_features(str(tmp_path_factory.mktemp("fork")), ROWS, FEATS, seed=1)


@pytest.fixture(scope="module")
def reference(dataset):
    """Undisturbed digests: the whole epoch, and each of two ranks."""
    with stoker.Loader(dataset, **OPTIONS) as loader:
        ref = {"all": digest(loader)}
    for rank in range(2):
        with stoker.Loader(dataset, **OPTIONS, rank=rank, world_size=2) as loader:
            ref[f"rank{rank}"] = digest(loader)
    return ref


PRELUDE = """
import json, os, sys, time
sys.path.insert(0, {here!r})
import stoker
from stoker.errors import LoaderClosedError
from stoker_testdata import digest

ROOT = {root!r}
OPTIONS = {options!r}

def make(**extra):
    return stoker.Loader(ROOT, **{{**OPTIONS, **extra}})

def wait(pid, timeout=30):
    # The child's exit code, or 'hang' (then killed) / 'signal N'.
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return "hang"

def child(body):
    # Runs body() in a forked child; the child reports through a pipe and exits 0 unless
    # body raised. Returns (exit code, report).
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        code = 0
        try:
            report = body()
        except BaseException as e:
            report, code = repr(e), 1
        os.write(w, json.dumps(report).encode())
        os.close(w)
        os._exit(code)
    os.close(w)
    code = wait(pid)
    data = b""
    while True:
        chunk = os.read(r, 1 << 16)
        if not chunk:
            break
        data += chunk
    os.close(r)
    return code, json.loads(data) if data else None

def inherited_error(call):
    try:
        call()
    except LoaderClosedError as e:
        return str(e)
    return "no error"

out = {{}}
"""


def run(dataset, body, timeout=90):
    script = PRELUDE.format(here=HERE, root=dataset, options=OPTIONS) + textwrap.dedent(body)
    script += "\nif __name__ == '__main__':\n    print('RESULT ' + json.dumps(out))\n"
    # A file, not -c: spawn and forkserver children import the main module by path.
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "fork_scenario.py")
        with open(path, "w") as f:
            f.write(script)
        result = subprocess.run([sys.executable, path], capture_output=True, text=True,
                                timeout=timeout)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "nanobind: leaked" not in result.stderr, result.stderr[-3000:]
    line = [x for x in result.stdout.splitlines() if x.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def assert_inherited_message(text):
    assert "inherited through fork()" in text, text
    assert "create the loader in this process" in text, text


def test_fork_before_open(dataset, reference):
    out = run(dataset, """
        out["child"] = child(lambda: digest(make()))
        out["parent"] = digest(make())
    """)
    assert out["child"] == [0, reference["all"]]
    assert out["parent"] == reference["all"]


def test_fork_after_open_before_iterating(dataset, reference):
    out = run(dataset, """
        L = make()
        def body():
            return {"inherited": inherited_error(lambda: list(L)), "own": digest(make())}
        out["child"] = child(body)
        out["parent"] = digest(L)
    """)
    code, report = out["child"]
    assert code == 0
    assert_inherited_message(report["inherited"])
    assert report["own"] == reference["all"]
    assert out["parent"] == reference["all"]


@pytest.mark.parametrize("cache", [False, True], ids=["nocache", "cache"])
def test_fork_mid_epoch(dataset, reference, tmp_path, cache):
    extra = {"cache_dir": str(tmp_path / "cache"), "cache_bytes": "64MiB",
             "cache_min_free_bytes": 0} if cache else {}
    out = run(dataset, f"""
        EXTRA = {extra!r}
        L = make(**EXTRA)
        it = iter(L)
        first = digest(next(it) for _ in range(7))
        # The child uses the inherited loader in three ways, then exits in two ways.
        out["list"] = child(lambda: inherited_error(lambda: list(L)))
        out["next"] = child(lambda: inherited_error(lambda: next(it)))
        out["state"] = child(lambda: L.state_dict()["batch"])
        def own():
            # A loader created in the child (same cache folder) works.
            return digest(make(**EXTRA))
        out["own"] = child(own)
        # A child that just ends through sys.exit(): atexit hooks and finalizers run there.
        pid = os.fork()
        if pid == 0:
            sys.exit(0)
        out["sys_exit"] = wait(pid)
        # A child that ends mid-iteration of the inherited iterator, from sys.exit in a thread.
        pid = os.fork()
        if pid == 0:
            import threading
            threading.Thread(target=lambda: inherited_error(lambda: next(it))).start()
            sys.exit(0)
        out["thread_exit"] = wait(pid)
        out["parent"] = first + digest(it)
        if EXTRA:
            L.flush_cache()  # entries are written behind the epoch
        out["cache"] = L.stats()["cache"] if EXTRA else None
    """)
    for key in ("list", "next"):
        code, text = out[key]
        assert code == 0, out[key]
        assert_inherited_message(text)
    assert out["state"] == [0, 7]  # plain Python state needs no threads
    assert out["own"] == [0, reference["all"]]
    assert out["sys_exit"] == 0
    assert out["thread_exit"] == 0
    assert out["parent"] == reference["all"]
    if cache:
        assert out["cache"]["writes"] > 0


@pytest.mark.parametrize("method", ["fork", "forkserver", "spawn"])
def test_multiprocessing(dataset, reference, method):
    out = run(dataset, f"""
        import multiprocessing as mp

        def shard(rank):
            return digest(make(rank=rank, world_size=2))

        def use_inherited(_):
            return inherited_error(lambda: list(L))

        if __name__ == "__main__":
            ctx = mp.get_context({method!r})
            L = make()
            it = iter(L)
            first = digest(next(it) for _ in range(5))
            with ctx.Pool(2) as pool:
                out["shards"] = pool.map_async(shard, [0, 1], chunksize=1).get(60)
                if {method!r} == "fork":
                    out["inherited"] = pool.map_async(use_inherited, [0, 1], chunksize=1).get(60)
            out["parent"] = first + digest(it)
    """)
    assert out["shards"] == [reference["rank0"], reference["rank1"]]
    if method == "fork":
        for text in out["inherited"]:
            assert_inherited_message(text)
    assert out["parent"] == reference["all"]


def test_torch_dataloader_workers_each_create_a_loader(dataset, reference):
    pytest.importorskip("torch")
    out = run(dataset, """
        import numpy as np
        import torch
        import torch.utils.data as tud

        class Shards(tud.IterableDataset):
            def __iter__(self):
                info = tud.get_worker_info()
                loader = make(rank=info.id, world_size=info.num_workers, output="torch",
                              num_threads=1)
                for batch in loader:
                    yield batch

        # A parent loader mid-epoch while the DataLoader forks its workers.
        L = make()
        it = iter(L)
        first = digest(next(it) for _ in range(3))
        dl = tud.DataLoader(Shards(), batch_size=None, num_workers=2, timeout=60)
        labels = []
        batches = {0: [], 1: []}
        for i, batch in enumerate(dl):
            labels.append(batch["label"].numpy().copy())
            # The DataLoader alternates workers: batch i comes from worker i % 2.
            batches[i % 2].append({k: v.numpy() for k, v in batch.items()})
        labels = np.concatenate(labels)
        out["rows"] = int(labels.size)
        out["unique"] = int(np.unique(labels).size)
        out["min"], out["max"] = int(labels.min()), int(labels.max())
        out["worker_digests"] = [digest(batches[0]), digest(batches[1])]
        out["parent"] = first + digest(it)
    """)
    assert out["rows"] == ROWS and out["unique"] == ROWS  # every row exactly once
    assert (out["min"], out["max"]) == (0, ROWS - 1)
    assert out["worker_digests"] == [reference["rank0"], reference["rank1"]]
    assert out["parent"] == reference["all"]
