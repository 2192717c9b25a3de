"""The study's table on the remote workload runs end to end on tiny data.

`python -m bench.study --remote --profile smoke` serves bench.remote's smoke dataset with rclone
through the delaying proxy (no namespaces, no privileges) and runs every system for 2 epochs from
s3://. No timing assertions: every system delivers every row of every epoch, or the run fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_study_remote_smoke(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "bench.study", "--remote", "--profile", "smoke", "--epochs", "2",
         "--emulation", "proxy", "--rate-mbit", "400", "--rtt-ms", "4",
         "--data-dir", str(tmp_path / "data"), "--out-dir", str(tmp_path / "out")],
        cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=390)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    report = json.load(open(tmp_path / "out" / "study-remote-smoke.json"))
    assert report["remote"]["emulation"] == "proxy"
    assert set(report["systems"]) == {"petastorm_default", "petastorm_study", "torch_dataloader",
                                      "stoker", "stoker_cache"}
    for name, system in report["systems"].items():
        assert system["status"] == "ok", (name, system)
        assert len(system["epoch_s"]) == 2 and 0 <= system["busy"] <= 1
        assert system["link_bytes"] > 0, name  # it really read through the link
        if name.startswith("stoker"):  # stoker never ends an epoch early
            assert system["rows"] == [report["rows"]] * 2
    # The secret never reaches the report.
    text = (tmp_path / "out" / "study-remote-smoke.json").read_text()
    assert "stoker-bench-secret" not in text
    md = (tmp_path / "out" / "study-remote-smoke.md").read_text()
    assert "| stoker (cache_dir) |" in md and "MB through the link" in md
