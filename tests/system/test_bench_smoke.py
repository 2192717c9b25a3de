"""Every benchmark runner still works: `python -m bench --smoke` on tiny data, in a subprocess.

No timing assertions: each runner must deliver exactly the dataset's rows, or say clearly why it
is unavailable.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def test_every_runner_delivers_every_row_or_says_why(tmp_path):
    out_dir = tmp_path / "results"
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--no-stall", "--name", "smoke-test",
         "--workloads", "tabular-zstd,images", "--data-dir", str(tmp_path / "data"),
         "--out-dir", str(out_dir)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((out_dir / "smoke-test.json").read_text())
    assert (out_dir / "smoke-test.md").exists()

    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    from bench.runners import ORDER, names_for

    seen = set()
    for workload in ("tabular-zstd", "images"):
        w = report["workloads"][workload]
        rows = w["dataset"]["rows"]
        assert rows > 0
        assert set(w["results"]) == set(names_for(workload))
        for name, result in w["results"].items():
            seen.add(name)
            if result["status"] == "ok":
                assert result["rows"] == rows, (workload, name, result["rows"], rows)
                assert result["rows_per_s"] > 0
            else:
                assert result["status"] == "unavailable", (workload, name, result)
                assert result["reason"], (workload, name)
    assert seen == set(ORDER)
    # stoker and the limit have no optional dependency: they must run.
    assert report["workloads"]["tabular-zstd"]["results"]["stoker"]["status"] == "ok"
    assert report["workloads"]["images"]["results"]["limit"]["status"] == "ok"
    for name in ("stoker_warm", "memory_limit"):
        assert report["workloads"]["tabular-zstd"]["results"][name]["status"] == "ok", name
    md = (out_dir / "smoke-test.md").read_text()
    assert "| stoker |" in md and "fraction of limit" in md
    assert "warm cache:" in md and "of the memory limit" in md


def test_a_runner_that_cannot_run_here_is_unavailable_not_failed(monkeypatch):
    """An optional peer that imports but cannot run (a native library missing) says why."""
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    import types

    from bench import runners, worker

    def batches(job):
        raise runners.Unavailable("libexample.so.1: cannot open shared object file")
        yield  # pragma: no cover

    fake = types.SimpleNamespace(available=lambda: None, batches=batches)
    monkeypatch.setattr(runners, "load", lambda name: fake)
    result = worker.measure({"runner": "fake"})
    assert result == {"status": "unavailable",
                      "reason": "libexample.so.1: cannot open shared object file"}
    def crashes(job):
        raise RuntimeError("a real bug")

    broken = types.SimpleNamespace(available=lambda: None, batches=crashes)
    monkeypatch.setattr(runners, "load", lambda name: broken)
    assert worker.measure({"runner": "broken"})["status"] == "failed"
    missing = types.SimpleNamespace(available=lambda: "import example failed: No module named 'x'")
    monkeypatch.setattr(runners, "load", lambda name: missing)
    assert worker.measure({"runner": "missing"}) == {
        "status": "unavailable", "reason": "import example failed: No module named 'x'"}
