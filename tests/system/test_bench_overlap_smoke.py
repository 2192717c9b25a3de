"""The consumer-overlap measure (`python -m bench.overlap`, issue 26) on a tiny dataset.

No timing assertions: the report has its structure, every shape asked for is a row with a ratio
per step fraction, and every epoch (loader-only, each sleeping step, the paused one) delivered
every row.
"""

from __future__ import annotations

import json

from bench_testing import run_bench


def test_overlap_report_structure_and_every_row(tmp_path):
    out_dir = run_bench("bench.overlap", tmp_path, "--tiny", "20000", "--repeats", "1",
                        "--shapes", "narrow,strings", "--name", "overlap-test", timeout=170)
    report = json.loads((out_dir / "overlap-test.json").read_text())
    md = (out_dir / "overlap-test.md").read_text()

    assert list(report["shapes"]) == ["narrow", "strings"]
    assert report["fractions"] == [0.5, 1.0, 2.0]
    assert report["builds"] == ["this"]
    lines = md.splitlines()
    header = next(line for line in lines if line.startswith("| shape | build | rows |"))
    cells = [c.strip() for c in header.strip("|").split("|")]
    assert cells == ["shape", "build", "rows", "batches", "L s", "first batch s",
                     "ratio 0.5L (floor)", "ratio 1.0L (floor)", "ratio 2.0L (floor)",
                     "ready after a pause", "every row"]
    assert " best 1.0L | stall 1.0L s | slept 1.0L |" in md
    for name, s in report["shapes"].items():
        assert s["rows"] == 20000
        o = s["builds"]["this"]
        assert f"| {name} | this | 20,000 |" in md
        assert o["all_rows"], (name, o)
        runs = list(o["loader_only"]) + [o["pause"]]
        for f in ("0.5", "1.0", "2.0"):
            st = o["steps"][f]
            assert st["rows"] == [20000], (name, f, st["rows"])
            # s was chosen so that batches * s is f * L.
            assert abs(o["batches"] * st["step_s"] - float(f) * o["L_s"]) < 1e-9
            assert st["ratio"] > 0 and st["floor_ratio"] >= 1.0 and st["ratio_best"] > 0
            # time.sleep never returns early: the steps slept at least batches * s.
            assert st["overshoot"] >= 0.99, (name, f, st["overshoot"])
            assert [x["name"] for x in st["stages"]] == ["decode", "sequence", "batch"]
        for r in runs:
            assert r["rows"] == 20000 and r["batches"] == o["batches"], (name, r)
        assert 0 <= o["pause"]["ready_after_pause"] < o["batches"]
