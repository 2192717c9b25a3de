"""examples/ray_train.py under Ray Train's TorchTrainer (a local Ray, 2 CPU workers, gloo):
a Loader made with no rank or world size takes both from Ray's process group; a worker killed
mid-epoch is restored by Ray from the last checkpoint and the order continues exactly; a run
restored on another number of workers resumes elastically (every row of the epoch once).
"""

from __future__ import annotations

import glob
import json
import os
import secrets
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

import stoker

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(REPO, "examples", "ray_train.py")
ROWS, BATCH, FEATURES = 1000, 50, ["f0", "f1", "f2"]

# Two Ray Train runs (about 35-140 s each on 2 shared cores): more than pytest's default 300 s.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    rng = np.random.default_rng(0)
    table = pa.table({"id": np.arange(ROWS), "label": rng.normal(size=ROWS),
                      **{f: rng.normal(size=ROWS).astype(np.float32) for f in FEATURES}})
    path = str(tmp_path_factory.mktemp("ray-data") / "data.parquet")
    pq.write_table(table, path, row_group_size=250)
    return path


# Ray Train's optional helpers, off: each is one more process (a Ray actor importing ray.train)
# that this test does not need. The preemption watcher (node drains) is about 10 s of CPU per run
# on the 2 CI cores; metrics, structured logs and the print patch are smaller. The controller
# polls the workers every 0.5 s instead of 2 s: it sees the killed worker and the end of training
# sooner, and the checkpoint rank 1 reported before dying is registered within its 3 s grace.
RAY_ENV = {"RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0", "RAY_USAGE_STATS_ENABLED": "0",
           "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0", "RAY_TRAIN_METRICS_ENABLED": "0",
           "RAY_TRAIN_ENABLE_CONTROLLER_STRUCTURED_LOGGING": "0",
           "RAY_TRAIN_ENABLE_WORKER_STRUCTURED_LOGGING": "0",
           "RAY_TRAIN_ENABLE_PRINT_PATCH": "0", "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.5"}


# One local Ray (2 CPUs) that both runs join (--address), instead of a Ray started and stopped by
# each: about 10 s of start and shutdown per run on 2 cores, and the cluster's own actors (Ray
# Train's autoscaling coordinator and state actor) start once. Its processes (the raylet, the
# controller and the training workers it starts) inherit RAY_ENV from this one. Ray's token
# authentication (on by default for a local cluster) with a token of this test's own, given to the
# head and to both runs, not one read from or written to ~/.ray.
AUTH_ENV = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
HEAD = """
import os, sys, ray
ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
print("GCS", ray.get_runtime_context().gcs_address, flush=True)
os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # nobody reads the pipe any more
sys.stdin.read()  # until the test closes it
ray.shutdown()
"""


@pytest.fixture(scope="module")
def cluster():
    head = subprocess.Popen([sys.executable, "-c", HEAD],
                            env=dict(os.environ, **RAY_ENV, **AUTH_ENV),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        address = None
        for line in head.stdout:
            if line.startswith("GCS "):
                address = line.split()[1]
                break
        assert address, f"the Ray head did not start (exit {head.poll()})"
        yield address
    finally:
        head.stdin.close()
        try:
            head.wait(60)
        except subprocess.TimeoutExpired:
            head.kill()
            head.wait()


def _run(data, storage, *extra, address):
    env = dict(os.environ, **RAY_ENV, **AUTH_ENV)
    cmd = [sys.executable, EXAMPLE, "--data", data, "--storage", storage, "--features", *FEATURES,
           "--batch-size", str(BATCH), "--seed", "11", "--ckpt-every", "5", "--address", address,
           *extra]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]


def _log(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def _expected(rank, world_size, epochs):
    loader = stoker.Loader(EXPECTED_SOURCE[0], columns=["id"], batch_size=BATCH, seed=11,
                           rank=rank, world_size=world_size)
    out = []
    for _ in range(epochs):
        out.extend(batch["id"].tolist() for batch in loader)
    loader.close()
    return out


EXPECTED_SOURCE: list = []


def test_ray_train_restores_a_killed_worker_exactly_and_elastically(data, cluster, tmp_path):
    EXPECTED_SOURCE[:] = [data]
    storage = str(tmp_path / "store")
    logs = str(tmp_path / "ids")
    _run(data, storage, "--workers", "2", "--epochs", "2", "--die-at", "7", "--log-ids", logs,
         address=cluster)
    steps_per_epoch = ROWS // 2 // BATCH
    for rank in (0, 1):
        lines = _log(f"{logs}.rank{rank}")
        steps = [line["step"] for line in lines]
        restart = next(i for i in range(1, len(steps)) if steps[i] <= steps[i - 1])
        assert steps[restart - 1] == 7 and steps[restart] == 6, steps  # restored at step 5
        by_step = {}
        for line in lines:  # a step run twice (before and after the restore) is the same batch
            assert by_step.setdefault(line["step"], line["ids"]) == line["ids"], line["step"]
        assert sorted(by_step) == list(range(1, 2 * steps_per_epoch + 1))
        assert [by_step[s] for s in sorted(by_step)] == _expected(rank, 2, 2)

    # The checkpoint of step 5, restored by a new TorchTrainer on ONE worker: the rest of epoch 0
    # (the rows neither rank had delivered), then epoch 1 at world size 1.
    checkpoints = {}
    for path in glob.glob(os.path.join(storage, "*", "checkpoint_*", "checkpoint.pt")):
        state = torch.load(path, weights_only=True)
        checkpoints[state["step"]] = os.path.dirname(path)
    assert 5 in checkpoints, sorted(checkpoints)
    elastic_logs = str(tmp_path / "elastic")
    _run(data, str(tmp_path / "store1"), "--workers", "1", "--epochs", "1",
         "--resume", checkpoints[5], "--log-ids", elastic_logs, "--name", "elastic",
         address=cluster)
    before = [i for rank in (0, 1) for ids in _expected(rank, 2, 1)[:5] for i in ids]
    after = [i for line in _log(f"{elastic_logs}.rank0") for i in line["ids"]]
    assert sorted(before + after) == list(range(ROWS))
