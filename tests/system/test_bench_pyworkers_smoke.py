"""The python_workers measure (`python -m bench.pyworkers`, issue 26) on tiny sizes.

No timing assertions: the report has its structure, both modes of every case delivered every row,
and the same rows (the digests of the delivered batches agree between threads and processes).
"""

from __future__ import annotations

import json

from bench_testing import run_bench


def test_pyworkers_report_structure_and_same_rows(tmp_path):
    out_dir = run_bench("bench.pyworkers", tmp_path, "--tiny", "--repeats", "1", "--widths",
                        "8,64", "--us-per-row", "5", "--name", "pyworkers-test", timeout=170)
    report = json.loads((out_dir / "pyworkers-test.json").read_text())
    md = (out_dir / "pyworkers-test.md").read_text()

    assert list(report["results"]) == ["gil", "roundtrip-w8", "roundtrip-w64"]
    assert report["threads"] == 2 and report["python_workers"] == 2
    assert len(report["load_average_start"]) == 3 and report["calibration"]["loop"] >= 1
    expected_rows = {"gil": report["gil"]["rows"], "roundtrip-w8": report["roundtrip"]["rows"],
                     "roundtrip-w64": report["roundtrip"]["rows"]}
    for case, entry in report["results"].items():
        assert entry["same_rows"] is True, case
        assert entry["ratio"] > 0
        for mode in ("threads", "processes"):
            s = entry[mode]
            assert s["status"] == "ok", (case, mode, s)
            assert s["rows"] == expected_rows[case], (case, mode)
            # One digest per epoch, the same in both modes (checked by same_rows above).
            assert [len(d) for d in s["digests"]] == [1, 1]
            assert s["transform_calls"] == -(-s["rows"] // (
                report["gil"]["row_group_rows"] if case == "gil"
                else report["roundtrip"]["row_group_rows"]))
        for run in report["raw"][case]["threads"] + report["raw"][case]["processes"]:
            assert [e["rows"] for e in run["epochs"]] == [expected_rows[case]] * 2
    gil = report["results"]["gil"]
    # The traced user code ran once per row group in each timed epoch, in either mode.
    assert gil["threads"]["fn_cpu_s"] > 0 and gil["processes"]["fn_cpu_s"] > 0
    assert gil["processes"]["cpu_workers_s"] > 0
    for case in ("roundtrip-w8", "roundtrip-w64"):
        assert report["results"][case]["mb_per_call"] > 0
    assert "processes / threads = **" in md
    header = next(line for line in md.splitlines() if line.startswith("| W |"))
    assert [c.strip() for c in header.strip("|").split("|")] == [
        "W", "MB per call", "threads rows/s", "processes rows/s", "processes / threads",
        "wall s/MB (proc - thr)", "busy s/MB (proc - thr)", "same rows"]
    assert "| 8 |" in md and "| 64 |" in md
