"""The study's multi-epoch table and the transforms workload run end to end on tiny data."""

import json

import pytest

from bench_testing import check_study_systems, run_bench


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_study_bench_smoke(tmp_path):
    out = run_bench("bench.study", tmp_path, "--profile", "smoke", "--epochs", "2")
    report = json.load(open(out / "study-smoke.json"))
    check_study_systems(report)
    assert "| stoker (cache_dir) |" in (out / "study-smoke.md").read_text()


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_transforms_bench_smoke(tmp_path):
    out = run_bench("bench.transforms", tmp_path, "--profile", "smoke")
    report = json.load(open(out / "transforms-smoke.json"))
    assert len(report["results"]) == 6
    for name, result in report["results"].items():
        assert result["status"] == "ok", (name, result)
        assert result["rows_per_s"] > 0
