"""PyTorch Lightning drives a stoker Loader: examples/lightning_train.py on Lightning's CPU
trainer, 2 processes (DDP on gloo), its checkpoints carrying the loader state."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from stoker_testdata import write_training_dataset

pytest.importorskip("lightning")

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
EXAMPLE = os.path.join(ROOT, "examples", "lightning_train.py")
ROWS, BATCH = 1280, 64  # 2 ranks x 10 steps per epoch


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> str:
    return write_training_dataset(str(tmp_path_factory.mktemp("lightning")), ROWS)


def _run(args, cwd):
    env = dict(os.environ)
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                "MASTER_PORT"):
        env.pop(key, None)
    proc = subprocess.run([sys.executable, EXAMPLE] + args, cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]


def _seen(prefix):
    return [json.load(open(f"{prefix}.rank{r}")) for r in range(2)]


@pytest.mark.slow
def test_lightning_ddp_epochs_and_restores(data, tmp_path):
    ckpt = tmp_path / "ckpt"
    _run(["--data", data, "--out", str(tmp_path / "full"), "--ckpt-dir", str(ckpt),
          "--every-n-steps", "7"], tmp_path)
    full = _seen(tmp_path / "full")
    for epoch in ("0", "1"):
        a, b = full[0][epoch], full[1][epoch]
        assert len(a) == len(b) == ROWS // 2, "equal steps on both ranks"
        assert sorted(a + b) == list(range(ROWS)), f"epoch {epoch}: every row once"
    assert full[0]["0"] != full[0]["1"], "Lightning never calls set_epoch: the loader advances"
    state = __import__("torch").load(str(ckpt / "step=7.ckpt"), weights_only=False)
    loader_state = state["loops"]["fit_loop"]["state_dict"]["combined_loader"][0]
    assert (loader_state["epoch"], loader_state["batch"]) == (0, 7)

    # Mid-epoch checkpoint (rank 0's, as Lightning saves): the data continues at step 8.
    _run(["--data", data, "--out", str(tmp_path / "mid"), "--resume", str(ckpt / "step=7.ckpt")],
         tmp_path)
    for rank, seen in enumerate(_seen(tmp_path / "mid")):
        assert seen["0"] == full[rank]["0"][7 * BATCH:]
        assert seen["1"] == full[rank]["1"]
    # End-of-epoch checkpoint (Lightning restores no loader state there): epoch 1 as before.
    _run(["--data", data, "--out", str(tmp_path / "end"), "--resume",
          str(ckpt / "epoch=0-step=10.ckpt")], tmp_path)
    for rank, seen in enumerate(_seen(tmp_path / "end")):
        assert list(seen) == ["1"] and seen["1"] == full[rank]["1"]
