"""The study's multi-epoch table and the transforms workload run end to end on tiny data."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_study_bench_smoke(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "bench.study", "--profile", "smoke", "--epochs", "2",
         "--data-dir", str(tmp_path / "data"), "--out-dir", str(tmp_path / "out")],
        cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=390)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    report = json.load(open(tmp_path / "out" / "study-smoke.json"))
    assert set(report["systems"]) == {"petastorm_default", "petastorm_study", "torch_dataloader",
                                      "stoker", "stoker_cache"}
    for name, system in report["systems"].items():
        assert system["status"] == "ok", (name, system)
        assert len(system["epoch_s"]) == 2 and 0 <= system["busy"] <= 1
        if name.startswith("stoker"):  # stoker never ends an epoch early
            assert system["rows"] == [report["rows"]] * 2
    assert "| stoker (cache_dir) |" in (tmp_path / "out" / "study-smoke.md").read_text()


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_transforms_bench_smoke(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "bench.transforms", "--profile", "smoke",
         "--data-dir", str(tmp_path / "data"), "--out-dir", str(tmp_path / "out")],
        cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=390)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    report = json.load(open(tmp_path / "out" / "transforms-smoke.json"))
    assert len(report["results"]) == 6
    for name, result in report["results"].items():
        assert result["status"] == "ok", (name, result)
        assert result["rows_per_s"] > 0
