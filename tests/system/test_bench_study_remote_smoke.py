"""The study's table on the remote workload runs end to end on tiny data.

`python -m bench.study --remote --profile smoke` serves bench.remote's smoke dataset with rclone
through the delaying proxy (no namespaces, no privileges) and runs every system for 2 epochs from
s3://. No timing assertions: every system delivers every row of every epoch, or the run fails.
"""

from __future__ import annotations

import json

import pytest

from bench_testing import check_study_systems, run_bench


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_study_remote_smoke(tmp_path):
    out = run_bench("bench.study", tmp_path, "--remote", "--profile", "smoke", "--epochs", "2",
                    "--emulation", "proxy", "--rate-mbit", "400", "--rtt-ms", "4")
    report = json.load(open(out / "study-remote-smoke.json"))
    assert report["remote"]["emulation"] == "proxy"
    check_study_systems(report)
    for name, system in report["systems"].items():
        assert system["link_bytes"] > 0, name  # it really read through the link
    # The secret never reaches the report.
    text = (out / "study-remote-smoke.json").read_text()
    assert "stoker-bench-secret" not in text
    md = (out / "study-remote-smoke.md").read_text()
    assert "| stoker (cache_dir) |" in md and "MB through the link" in md
