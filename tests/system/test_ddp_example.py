"""examples/train_ddp.py run as the README runs it: torchrun on a dataset written by
``pandas.DataFrame.to_parquet`` (float64 features and label, chosen with --label and a --features
glob), every worker SIGKILLed at a random step as a lost node would be, and the job resumed from
its checkpoint folder (which did not exist before the run) on 2, 1 and 3 ranks.

Checked on each resume: every row trains exactly once per epoch across the ranks (the rows before
the checkpoint from the killed job, the rest from the resumed one), every rank takes the same
number of steps, and on 2 -> 2 the final weights equal an uninterrupted run's bit for bit."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch")
pd = pytest.importorskip("pandas")
np = pytest.importorskip("numpy")

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
EXAMPLE = os.path.join(ROOT, "examples", "train_ddp.py")
ROWS, BATCH, EPOCHS, EVERY = 1001, 32, 2, 4  # 2 ranks: 16 steps per epoch, one padding row
STEPS = 2 * 16
ARGS = ["--label", "target", "--features", "x*", "--batch-size", str(BATCH), "--epochs",
        str(EPOCHS), "--shuffle-window", "300", "--seed", "5"]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> str:
    rng = np.random.default_rng(3)
    frame = pd.DataFrame({"id": np.arange(ROWS), "note": [f"row {i}" for i in range(ROWS)]})
    for i in range(5):
        frame[f"x{i}"] = rng.standard_normal(ROWS)  # float64, pandas' default
    frame["target"] = frame["x0"] - 2 * frame["x3"] + 0.1 * rng.standard_normal(ROWS)
    path = str(tmp_path_factory.mktemp("pandas") / "train.parquet")
    frame.to_parquet(path, row_group_size=100)
    return path


def _env() -> dict:
    env = dict(os.environ)
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                "MASTER_PORT", "TORCHELASTIC_RUN_ID"):
        env.pop(key, None)
    env["PYTHONPATH"] = os.path.join(ROOT, "python") + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _torchrun(nproc: int, args, **popen) -> subprocess.Popen:
    # --standalone: a rendezvous on a free port with a fresh run id, so parallel runs of this test
    # (or of other torchrun tests) never meet each other.
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={nproc}", EXAMPLE] + args
    return subprocess.Popen(cmd, env=_env(), text=True, **popen)


def _run(nproc: int, args, timeout=300) -> str:
    proc = _torchrun(nproc, args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out[-2000:] + err[-3000:]
    return out


def _children(pid: int) -> list[int]:
    """The processes torchrun started (any of its threads may have started them)."""
    out = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            out += [int(c) for c in f.read().split()]
    return out


def _log(prefix, rank: int) -> list[dict]:
    """One record per step of that rank; a line torn by SIGKILL is not a step."""
    records = []
    with open(f"{prefix}.rank{rank}") as f:
        for line in f:
            if line.endswith("\n"):
                records.append(json.loads(line))
    return records


def _check_epochs(per_rank: list[list[dict]]) -> None:
    for epoch in range(EPOCHS):
        ids = [i for log in per_rank for r in log if r["epoch"] == epoch for i in r["ids"]]
        assert sorted(ids) == list(range(ROWS)), f"epoch {epoch}: not every row exactly once"


@pytest.fixture(scope="module")
def reference(data, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("reference")
    _run(2, ["--data", data, "--out", str(tmp / "w"), "--log-ids", str(tmp / "ids")] + ARGS)
    logs = [_log(tmp / "ids", r) for r in range(2)]
    assert [len(log) for log in logs] == [STEPS, STEPS]
    _check_epochs(logs)
    return tmp


@pytest.fixture(scope="module")
def killed(data, tmp_path_factory):
    """A 2-rank job killed at a random step between two checkpoints: its folder and logs."""
    tmp = tmp_path_factory.mktemp("killed")
    rng = random.Random(2513)
    kill_at = rng.choice([s for s in range(EVERY + 1, STEPS - 2) if 0 < s % EVERY < EVERY - 1])
    ckpt = tmp / "ckpt" / "nested"  # does not exist: the example creates it
    proc = _torchrun(2, ["--data", data, "--ckpt-dir", str(ckpt), "--ckpt-every", str(EVERY),
                         "--log-ids", str(tmp / "ids"), "--step-sleep", "0.15"] + ARGS,
                     stdout=subprocess.PIPE, stderr=open(tmp / "stderr", "w"))
    workers = []
    try:
        for line in proc.stdout:
            if line.strip() == f"rank 0: step {kill_at}":
                # torchrun starts each worker in its own session: killing torchrun (or its
                # process group) would leave them training. A lost node loses them all at once.
                workers = _children(proc.pid)
                for pid in workers:
                    os.killpg(os.getpgid(pid), signal.SIGKILL)
                proc.send_signal(signal.SIGKILL)
                break
    finally:
        proc.kill()
        proc.wait(30)
    assert len(workers) == 2, f"never saw step {kill_at}: " + open(tmp / "stderr").read()[-3000:]
    deadline = time.monotonic() + 10
    while any(os.path.exists(f"/proc/{pid}") for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)  # reaped by init once their parent is gone
    assert sorted(os.listdir(ckpt)) == ["checkpoint.pt"], "a temporary file was left behind"
    return tmp, ckpt, kill_at - kill_at % EVERY


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 1, 3])
def test_resume_after_sigkill_on_another_number_of_ranks(data, reference, killed, world,
                                                         tmp_path):
    old, ckpt, resume_step = killed
    shutil.copytree(ckpt, tmp_path / "ckpt")  # each resume continues the same checkpoint
    out = _run(world, ["--data", data, "--ckpt-dir", str(tmp_path / "ckpt"), "--ckpt-every",
                       str(EVERY), "--out", str(tmp_path / "w"), "--log-ids",
                       str(tmp_path / "ids")] + ARGS)
    for rank in range(world):
        assert f"rank {rank}: resumed at step {resume_step}," in out, out[-2000:]

    before = [[r for r in _log(old / "ids", rank) if r["step"] <= resume_step]
              for rank in range(2)]
    assert [len(log) for log in before] == [resume_step, resume_step]
    after = [_log(tmp_path / "ids", rank) for rank in range(world)]
    steps = {log[-1]["step"] for log in after}
    assert len(steps) == 1 and {len(log) for log in after} == {steps.pop() - resume_step}, \
        "the ranks took different numbers of steps"
    assert all(log[0]["step"] == resume_step + 1 for log in after)
    _check_epochs(before + after)

    if world == 2:
        for rank in range(2):
            ref = torch.load(reference / f"w.rank{rank}", weights_only=True)
            got = torch.load(tmp_path / f"w.rank{rank}", weights_only=True)
            assert list(ref) == ["0.weight", "0.bias", "2.weight", "2.bias"]
            assert got.keys() == ref.keys()
            for key in ref:
                assert ref[key].dtype == torch.float64  # pandas' float64, trained as it is
                assert torch.equal(ref[key], got[key]), f"rank {rank}: {key} differs"
    # The checkpoint holds the plain model (no DDP "module." keys): plain torch loads it.
    state = torch.load(tmp_path / "ckpt" / "checkpoint.pt", weights_only=True)
    assert sorted(state["model"]) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    if state["step"] > resume_step:  # saved by the resumed job
        assert state["loader"]["world_size"] == world


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_ranks_that_find_different_checkpoints_refuse(data, killed, tmp_path):
    """Two nodes with node-local checkpoint folders, one of them empty: no rank trains."""
    _, ckpt, resume_step = killed
    shutil.copytree(ckpt, tmp_path / "node0")
    port, nodes = _free_port(), []
    for node in range(2):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=1",
               f"--node_rank={node}", "--master_addr=127.0.0.1", f"--master_port={port}",
               EXAMPLE, "--data", data, "--ckpt-dir", str(tmp_path / f"node{node}")] + ARGS
        nodes.append(subprocess.Popen(cmd, env=_env(), text=True, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE))
    outputs = [proc.communicate(timeout=300) for proc in nodes]
    for proc, (out, err) in zip(nodes, outputs):
        assert proc.returncode != 0
        assert (f"the ranks found different checkpoints (rank 0: step {resume_step} "
                "(epoch") in err, err[-3000:]
        assert "rank 1: no checkpoint" in err
        assert "step 1\n" not in out


# ------------------------------------------------------------------------------------ Lightning
LIGHTNING = os.path.join(ROOT, "examples", "lightning_train.py")
LIGHTNING_ARGS = ["--label", "target", "--features", "x*", "--batch-size", str(BATCH),
                  "--epochs", str(EPOCHS), "--shuffle-window", "300", "--seed", "5"]


def _lightning(devices: int, args, **popen) -> subprocess.Popen:
    # Lightning launches the other ranks itself (rank 0 runs this script and starts the others).
    cmd = [sys.executable, LIGHTNING, "--devices", str(devices)] + LIGHTNING_ARGS + args
    return subprocess.Popen(cmd, env=_env(), text=True, **popen)


def _lightning_run(devices: int, args, cwd) -> None:
    proc = _lightning(devices, args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-2000:] + err[-3000:]


@pytest.mark.slow
def test_lightning_resumes_after_sigkill(data, tmp_path):
    pytest.importorskip("lightning")
    _lightning_run(2, ["--data", data, "--weights", str(tmp_path / "ref"), "--log-ids",
                       str(tmp_path / "ref-ids")], tmp_path)
    reference = [_log(tmp_path / "ref-ids", r) for r in range(2)]
    assert [len(log) for log in reference] == [STEPS, STEPS]
    _check_epochs(reference)

    kill_at = random.Random(2514).choice(
        [s for s in range(EVERY + 1, STEPS - 2) if 0 < s % EVERY < EVERY - 1])
    ckpt = tmp_path / "ckpt"
    victim = _lightning(2, ["--data", data, "--ckpt-dir", str(ckpt), "--every-n-steps",
                            str(EVERY), "--log-ids", str(tmp_path / "ids"), "--step-sleep",
                            "0.15"], cwd=tmp_path, start_new_session=True,
                        stdout=subprocess.DEVNULL, stderr=open(tmp_path / "stderr", "w"))
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and victim.poll() is None:
            try:
                if any(r["step"] >= kill_at for r in _log(tmp_path / "ids", 0)):
                    break
            except FileNotFoundError:
                pass
            time.sleep(0.02)
        ranks = _children(victim.pid)
        os.killpg(victim.pid, signal.SIGKILL)  # rank 0 and the ranks it started: the whole job
        for pid in ranks:
            os.killpg(os.getpgid(pid), signal.SIGKILL) if os.path.exists(f"/proc/{pid}") else None
    finally:
        victim.kill()
        victim.wait(30)
    assert ranks, "never reached the kill step: " + open(tmp_path / "stderr").read()[-3000:]
    resume_step = kill_at - kill_at % EVERY
    assert os.path.exists(ckpt / f"step={resume_step}.ckpt"), sorted(os.listdir(ckpt))

    diffs = {}
    for world in (2, 1):
        run = tmp_path / f"on{world}"
        run.mkdir()
        shutil.copytree(ckpt, run / "ckpt")
        _lightning_run(world, ["--data", data, "--ckpt-dir", str(run / "ckpt"), "--resume",
                               str(run / "ckpt" / f"step={resume_step}.ckpt"), "--weights",
                               str(run / "w"), "--log-ids", str(run / "ids")], run)
        before = [[r for r in _log(tmp_path / "ids", rank) if r["step"] <= resume_step]
                  for rank in range(2)]
        after = [_log(run / "ids", rank) for rank in range(world)]
        assert all(log[0]["step"] == resume_step + 1 for log in after)
        assert len({len(log) for log in after}) == 1, "the ranks took different numbers of steps"
        _check_epochs(before + after)
        if world == 2:
            for rank in range(2):
                ref = torch.load(tmp_path / f"ref.rank{rank}", weights_only=True)
                got = torch.load(run / f"w.rank{rank}", weights_only=True)
                diffs[rank] = max((ref[k] - got[k]).abs().max().item() for k in ref)
    assert diffs == {0: 0.0, 1: 0.0}, f"2 -> 2: weights differ from an uninterrupted run's {diffs}"
