"""The DDP training benchmark runs end to end on tiny data (every system trains, numbers sane)."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


@pytest.mark.slow
@pytest.mark.timeout(280)
def test_training_bench_smoke(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(
        [sys.executable, "-m", "bench.training", "--profile", "smoke", "--batch-size", "256",
         "--max-steps", "6", "--step-ms", "5", "--data-dir", str(tmp_path / "data"),
         "--out-dir", str(tmp_path / "out")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=270)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    report = json.load(open(tmp_path / "out" / "training-smoke.json"))
    assert set(report["systems"]) == {"stoker", "petastorm_fixed", "torch_dataloader"}
    for system in report["systems"].values():
        assert system["status"] == "ok"
        assert system["steps_per_s"] > 0 and 0 <= system["stall_fraction"] <= 1
    assert "| stoker |" in (tmp_path / "out" / "training-smoke.md").read_text()
