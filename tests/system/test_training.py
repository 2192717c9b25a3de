"""Training integration: torchrun/DDP with default options, exact restarts after SIGKILL, the
epoch rule, rank-aware states, the DataLoader adaptor and the default thread count."""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
import subprocess
import sys

import numpy as np
import pytest

import stoker
from stoker.errors import InvalidOptionError, StateMismatchError
from stoker_testdata import digest, write_training_dataset

torch = pytest.importorskip("torch")

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
EXAMPLE = os.path.join(ROOT, "examples", "train_ddp.py")
ROWS = 1280  # 2 ranks x 10 batches of 64: every row reaches exactly one rank per epoch
FEATURES = 8


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> str:
    return write_training_dataset(str(tmp_path_factory.mktemp("train")), ROWS, FEATURES)


def _env() -> dict:
    env = dict(os.environ)
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    env["PYTHONPATH"] = os.path.join(ROOT, "python") + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _torchrun(args, nproc=2, timeout=240):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={nproc}", EXAMPLE] + args
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_env())


@pytest.mark.slow
def test_torchrun_ddp_with_default_seed(data, tmp_path):
    out, ids = str(tmp_path / "w"), str(tmp_path / "ids")
    proc = _torchrun(["--data", data, "--epochs", "2", "--out", out, "--ids-out", ids])
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    runs = [json.load(open(f"{ids}.rank{r}")) for r in range(2)]
    assert runs[0]["steps"] == runs[1]["steps"] == 20  # equal steps: no collective can hang
    for epoch in ("0", "1"):
        a, b = (np.array(run["ids"][epoch]) for run in runs)
        assert len(a) == len(b) == ROWS // 2
        assert not set(a) & set(b), f"epoch {epoch}: a row reached both ranks"
        assert sorted(np.concatenate([a, b]).tolist()) == list(range(ROWS))
    assert runs[0]["ids"]["0"] != runs[0]["ids"]["1"]  # epochs are shuffled differently
    w0, w1 = (torch.load(f"{out}.rank{r}", weights_only=True) for r in range(2))
    assert w0.keys() == w1.keys()
    for key in w0:
        assert torch.equal(w0[key], w1[key]), f"ranks disagree on {key}"
    assert "waited for data" in proc.stdout


def _train(data, args, timeout=180):
    cmd = [sys.executable, EXAMPLE, "--data", data] + args
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env())


@pytest.mark.slow
def test_sigkill_and_restart_is_bit_identical(data, tmp_path):
    common = ["--epochs", "2", "--shuffle-window", "500", "--seed", "7"]
    reference = _train(data, common + ["--out", str(tmp_path / "ref")])
    assert reference.wait(180) == 0, reference.stderr.read()
    # Kill at a random step (not on a checkpoint boundary, inside a shuffle window), restart.
    kill_at = random.Random(1234).randrange(8, 36)
    while kill_at % 3 == 0:
        kill_at += 1
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    args = common + ["--ckpt-dir", str(ckpt), "--ckpt-every", "3", "--out", str(tmp_path / "run")]
    victim = _train(data, args + ["--step-sleep", "0.05"])
    for line in victim.stdout:
        if line.strip() == f"rank 0: step {kill_at}":
            victim.send_signal(signal.SIGKILL)
            break
    assert victim.wait(60) == -signal.SIGKILL
    restarted = _train(data, args)
    out, err = restarted.communicate(timeout=180)
    assert restarted.returncode == 0, err
    assert f"resumed at step {kill_at - kill_at % 3}" in out
    ref = torch.load(str(tmp_path / "ref.rank0"), weights_only=True)
    got = torch.load(str(tmp_path / "run.rank0"), weights_only=True)
    for key in ref:
        assert torch.equal(ref[key], got[key]), f"{key} differs after the restart"


def test_seed_none_with_several_ranks_needs_a_shared_seed(data):
    with pytest.raises(InvalidOptionError, match="seed="):
        stoker.Loader(data, columns=["id"], batch_size=64, rank=0, world_size=2)
    # With a seed every rank gets the same plan: the shards are disjoint.
    shards = [np.concatenate([b["id"] for b in stoker.Loader(
        data, columns=["id"], batch_size=64, rank=r, world_size=2, seed=9)]) for r in range(2)]
    assert not set(shards[0]) & set(shards[1])


def test_a_state_saved_on_rank_0_serves_every_rank(data):
    """The save-on-rank-0 habit: ranks of one job are at the same step, so rank 0's state is
    rank 1's position too, and rank 1 resumes with its own rows."""
    make = lambda rank: stoker.Loader(data, columns=["id"], batch_size=64, rank=rank,  # noqa: E731
                                      world_size=2, seed=1, shuffle_window=300)
    rank0, rank1 = make(0), make(1)
    list(itertools.islice(rank0, 4))
    full1 = digest(make(1))
    rank1.load_state_dict(rank0.state_dict())
    assert digest(rank1) == full1[4:]
    other = stoker.Loader(data, columns=["id"], batch_size=32, rank=1, world_size=2, seed=1)
    with pytest.raises(StateMismatchError, match="other options"):
        other.load_state_dict(rank0.state_dict())


def test_state_dict_survives_torch_save_with_weights_only(data, tmp_path):
    loader = stoker.Loader(data, columns=["id"], batch_size=64, seed=1)
    it = iter(loader)
    next(it)
    torch.save(loader.state_dict(), tmp_path / "s.pt")
    state = torch.load(tmp_path / "s.pt", weights_only=True)
    assert state == loader.state_dict() and state["batch"] == 1


def test_epoch_advances_after_a_completed_epoch(data):
    options = dict(columns=["id"], batch_size=64, seed=4, shuffle_window=300)
    loader = stoker.Loader(data, **options)
    first, second = digest(loader), digest(loader)  # no set_epoch: what Lightning does
    explicit = stoker.Loader(data, **options)
    explicit.set_epoch(1)
    assert second == digest(explicit) and first != second
    assert loader.epoch == 2
    state = loader.state_dict()
    assert (state["epoch"], state["batch"]) == (2, 0)  # what the next iteration delivers
    # set_epoch wins over the rule; a resumed state continues its own epoch.
    loader.set_epoch(0)
    assert digest(loader) == first
    it = iter(loader)
    for _ in range(3):
        next(it)
    state = loader.state_dict()
    assert (state["epoch"], state["batch"]) == (1, 3)
    it.close()
    resumed = stoker.Loader(data, **options)
    resumed.load_state_dict(state)
    assert digest(resumed) == second[3:]
    assert resumed.epoch == 2


def test_an_unfinished_iteration_restarts_its_epoch(data):
    loader = stoker.Loader(data, columns=["id"], batch_size=64, seed=4)
    head = [b["id"].copy() for _, b in zip(range(2), loader)]
    again = [b["id"].copy() for _, b in zip(range(2), loader)]
    assert all(np.array_equal(a, b) for a, b in zip(head, again))
    assert loader.epoch == 0


def test_iterable_dataset_under_dataloader_workers(data):
    def epoch_ids():
        dataset = stoker.IterableDataset(data, columns=["id"], batch_size=32, seed=5)
        dl = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2)
        return [b["id"].clone() for b in dl]

    batches = epoch_ids()
    ids = torch.cat(batches).tolist()
    assert sorted(ids) == list(range(ROWS)), "every row exactly once across the workers"
    assert [b.tolist() for b in batches] == [b.tolist() for b in epoch_ids()]  # deterministic
    with pytest.raises(InvalidOptionError, match="seed="):
        dl = torch.utils.data.DataLoader(stoker.IterableDataset(data, columns=["id"]),
                                         batch_size=None, num_workers=2)
        next(iter(dl))


def test_stall_meter(data):
    loader = stoker.Loader(data, columns=["id"], batch_size=64, seed=1)
    for _ in loader:
        pass
    stats = loader.stats()
    assert 0.0 <= stats["stall_fraction"] <= 1.0 and stats["loop_s"] > 0


_THREADS_SCRIPT = """
import os, sys, stoker
os.sched_setaffinity(0, {cpus})
loader = stoker.Loader(sys.argv[1], columns=["id"], batch_size=64, seed=1)
print(loader.stats()["stages"][0]["threads"], stoker._stoker.usable_cpus())
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs to restrict")
@pytest.mark.parametrize("cpus,local_world,expected", [({0}, None, 1), ({0, 1}, None, 2),
                                                       ({0, 1}, "2", 1)])
def test_default_threads_follow_affinity_and_local_world_size(data, cpus, local_world, expected):
    env = _env()
    env.pop("LOCAL_WORLD_SIZE", None)
    if local_world:
        env["LOCAL_WORLD_SIZE"] = local_world
    script = _THREADS_SCRIPT.format(cpus=sorted(cpus))
    proc = subprocess.run([sys.executable, "-c", script, data], capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    threads, usable = map(int, proc.stdout.split())
    assert usable == len(cpus)
    assert threads == expected
