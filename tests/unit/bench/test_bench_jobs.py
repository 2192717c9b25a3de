"""The bench's job runner (bench/jobs.py run_job) and its short-epoch retry (bench/suite.py
measure) against a tiny child module: no loader, no Petastorm. The child counts its runs in a file
and ends its first `short_runs` epochs after zero rows, as Petastorm 0.13.1's thread pool
sometimes does."""

from __future__ import annotations

import json
import os
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from bench import jobs, suite  # noqa: E402

CHILD = '''
import json, os, sys, time

args = sys.argv[1:]
flag = args.pop(0) if args and args[0].startswith("--") else None
job = json.loads(sys.stdin.read() if not args or args[0] == "-" else args[0])
if job.get("sleep_s"):
    time.sleep(job["sleep_s"])
if job.get("crash"):
    print("some progress", flush=True)
    sys.exit("child crashed: " + job["crash"])
with open(job["counter"], "a") as f:
    f.write("x")
with open(job["counter"]) as f:
    run = len(f.read())
rows = 0 if run <= job.get("short_runs", 0) else job["rows"]
print("noise before the result")
print("@@RESULT@@" + json.dumps({"status": "ok", "rows": rows, "run": run, "flag": flag,
                                 "marker_env": os.environ.get("BENCH_JOBS_TEST")}))
'''


@pytest.fixture
def child(tmp_path, monkeypatch):
    """The name of the child module (importable by the job's interpreter) and a job for it."""
    (tmp_path / "bench_jobs_child.py").write_text(CHILD)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    return "bench_jobs_child", {"runner": "fake", "rows": 100,
                                "counter": str(tmp_path / "runs")}


def test_a_short_epoch_is_repeated_and_reported(child):
    module, job = child
    short, logged = [], []
    result = suite.measure({**job, "short_runs": 2}, 30, 100, short, module=module,
                           log=logged.append)
    assert result["status"] == "ok" and result["rows"] == 100
    assert result["run"] == 3  # two short epochs, then a full one
    assert result["process_s"] > 0
    assert short == ["delivered 0 of 100 rows"] * 2
    assert len(logged) == 2 and all("short epoch: delivered 0 of 100 rows" in m for m in logged)


def test_attempts_short_epochs_in_a_row_fail_with_every_reason(child):
    module, job = child
    short = ["delivered 7 of 100 rows"]  # an earlier repeat's short epoch stays listed
    result = suite.measure({**job, "short_runs": 99}, 30, 100, short, module=module,
                           log=lambda _: None)
    assert result["status"] == "failed"
    assert result["run"] == suite.ATTEMPTS
    assert result["reason"] == (f"{suite.ATTEMPTS} attempts in a row ended early: "
                                + "; ".join(["delivered 0 of 100 rows"] * suite.ATTEMPTS))
    assert short == ["delivered 7 of 100 rows"] + ["delivered 0 of 100 rows"] * suite.ATTEMPTS


def test_without_expected_rows_only_an_empty_epoch_is_short(child):
    module, job = child
    short = []
    result = suite.measure({**job, "rows": 5, "short_runs": 1}, 30, None, short, module=module,
                           log=lambda _: None)
    assert result["status"] == "ok" and result["rows"] == 5 and result["run"] == 2
    assert short == ["delivered 0 of > 0 rows"]


def test_run_job_flag_stdin_and_env(child):
    module, job = child
    on_argv = jobs.run_job(job, module, "--child", timeout=30, env={"BENCH_JOBS_TEST": "set"})
    assert on_argv["flag"] == "--child" and on_argv["marker_env"] == "set"
    assert "process_s" not in on_argv
    on_stdin = jobs.run_job(job, module, "--worker", timeout=30, stdin=True)
    assert on_stdin["flag"] == "--worker" and on_stdin["run"] == 2
    no_flag = jobs.run_job(job, module, timeout=30, stdin=True)
    assert no_flag["flag"] is None and no_flag["run"] == 3


def test_run_job_failures(child):
    module, job = child
    crashed = jobs.run_job({**job, "crash": "boom"}, module, timeout=30)
    assert crashed == {"status": "failed", "reason": "exit 1: child crashed: boom"}
    slow = jobs.run_job({**job, "sleep_s": 30}, module, timeout=0.5)
    assert slow["status"] == "failed" and slow["reason"].startswith("timed out after ")
    with pytest.raises(RuntimeError, match="child crashed: boom"):
        jobs.run_job({**job, "crash": "boom"}, module, "--child", timeout=30, check=True)
    # Another marker (bench.remote_worker prints "RESULT <json>"): ours is then not a result.
    other = jobs.run_job(job, module, timeout=30, marker="RESULT ")
    assert other["status"] == "failed" and other["reason"].startswith("exit 0: ")
    assert json.loads(other["reason"].split("@@RESULT@@", 1)[1])["rows"] == 100
