"""``python -m bench.pyworkers``: ``python_workers`` processes vs threads (issue 26).

Two measures, each run in fresh processes, repeats interleaved (threads, processes, threads, ...):

1. **GIL workload**: ``transform=`` does pure-Python work per row (a Python loop per row, about
   ``--us-per-row`` microseconds, calibrated in the parent; it never releases the GIL), so threads
   serialise on the GIL whatever ``num_threads``. Thread mode is ``num_threads=2,
   python_workers=0``; process mode ``num_threads=2, python_workers=2``. rows/s of the timed epoch
   and processes / threads (target >= 1.5x on 2 cores).
2. **Round trip**: an identity ``transform=`` (returns its input) on a ``[rows, W]`` float32 column
   at a few row-group byte sizes. What process mode adds over thread mode is the shared-memory round
   trip (copy into the worker's input arena, a pipe message each way, copy out of the output arena);
   ``s/MB`` is (process wall - thread wall) / MB of row groups transformed, and the same with the
   transform stage's ``busy_s`` (summed over the calling threads). A least-squares fit of the
   process-minus-thread busy time over (calls, MB) separates the per-call cost from the per-MB one.

Each run opens the loader (the worker processes start), runs epoch 0 (the warm-up: it waits for
the workers to boot) and times epoch 1 from ``iter()`` to its last batch. Every run digests the
delivered rows (ids and transform outputs, in order): both modes must deliver the same bytes.
The machine is shared: compare within one run; the load average is in the report.
Writes ``<out-dir>/<name>.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import sys
import time
from typing import Dict, List, Optional

import numpy as np

from .jobs import run_job

HERE = os.path.dirname(os.path.abspath(__file__))
TIMEOUT = 600
GENERATOR_VERSION = 1

# GIL workload: rows, rows per row group; batch size.
GIL_ROWS, GIL_RG = 48_000, 2_000
BATCH_SIZE = 1_024
# Round trip: rows, rows per row group, widths W of the float32 [rows, W] column.
RT_ROWS, RT_RG = 32_768, 4_096
RT_WIDTHS = [16, 256, 1024]
THREADS = 2
WORKERS = 2


def _log(msg: str) -> None:
    print(f"[pyworkers {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ------------------------------------------------------------ the user code (module level)

TRACE_ENV = "STOKER_BENCH_PYW_TRACE"


def _row_score(x: float, loop: int) -> float:
    acc = 0.0
    for j in range(loop):
        acc = acc * 0.5 + (x * j) % 7.0
    return acc


class GilTransform:
    """Pure-Python per-row work: a Python loop per row (holds the GIL throughout)."""

    def __init__(self, loop: int) -> None:
        self.loop = loop

    def __call__(self, arrays: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        loop = self.loop
        started, cpu = time.time(), time.thread_time()
        score = np.array([_row_score(x, loop) for x in arrays["a"].tolist()], dtype=np.float64)
        trace = os.environ.get(TRACE_ENV)
        if trace:  # one line per call: when it started, its wall and CPU seconds (any process)
            with open(os.path.join(trace, f"{os.getpid()}.txt"), "a") as f:
                f.write(f"{started!r} {time.time() - started!r} {time.thread_time() - cpu!r}\n")
        return {"id": arrays["id"], "score": score}


def _traced(trace: str, since: float, until: float) -> dict:
    """The calls of GilTransform that started in [since, until): count, wall and CPU seconds."""
    calls, wall, cpu = 0, 0.0, 0.0
    for name in os.listdir(trace):
        with open(os.path.join(trace, name)) as f:
            for line in f:
                start, w, c = (float(x) for x in line.split())
                if since <= start < until:
                    calls, wall, cpu = calls + 1, wall + w, cpu + c
    return {"fn_calls": calls, "fn_wall_s": wall, "fn_cpu_s": cpu}


def identity_transform(arrays: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    return dict(arrays)


def calibrate(us_per_row: float) -> dict:
    """The loop count that makes one row take about ``us_per_row`` microseconds here, now."""
    xs = np.random.default_rng(0).random(400).tolist()
    probe = 200
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for x in xs:
            _row_score(x, probe)
        best = min(best, (time.perf_counter() - started) / len(xs))
    loop = max(1, int(round(probe * us_per_row * 1e-6 / best)))
    return {"loop": loop, "us_per_row_estimated": best * loop / probe * 1e6}


# ------------------------------------------------------------------------------ data

def _manifest(path: str) -> Optional[dict]:
    try:
        with open(os.path.join(path, "manifest.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def ensure_data(root: str, kind: str, rows: int, rg_rows: int, width: int = 0) -> str:
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    path = os.path.join(root, f"pyworkers-{kind}-{rows}-{rg_rows}-{width}")
    wanted = {"version": GENERATOR_VERSION, "kind": kind, "rows": rows, "rg_rows": rg_rows,
              "width": width}
    if _manifest(path) == wanted:
        return path
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    rng = np.random.default_rng(5)
    with pq.ParquetWriter(os.path.join(path, "part-000.parquet"), _schema(width),
                          compression="snappy") as writer:
        for start in range(0, rows, rg_rows):
            n = min(rg_rows, rows - start)
            cols = {"id": pa.array(np.arange(start, start + n, dtype=np.int64)),
                    "a": pa.array(rng.random(n))}
            if width:
                flat = pa.array(rng.standard_normal(n * width).astype(np.float32))
                cols["v"] = pa.FixedSizeListArray.from_arrays(flat, width)
            writer.write_table(pa.table(cols, schema=_schema(width)), row_group_size=n)
    with open(os.path.join(path, "manifest.json"), "w") as f:
        json.dump(wanted, f)
    return path


def _schema(width: int):
    import pyarrow as pa

    fields = [pa.field("id", pa.int64()), pa.field("a", pa.float64())]
    if width:
        fields.append(pa.field("v", pa.list_(pa.float32(), width)))
    return pa.schema(fields)


# ---------------------------------------------------------------- in the child process

def _transform_stage(loader) -> dict:
    for stage in loader.stats()["stages"]:
        if stage["name"] == "transform":
            return dict(stage)
    return {}


def _child(job: dict) -> dict:
    import tempfile

    import stoker

    trace = tempfile.mkdtemp(prefix="pyw-trace-")
    os.environ[TRACE_ENV] = trace  # before the loader: the spawned workers inherit it

    if job["kind"] == "gil":
        fn, columns, tcols = GilTransform(job["loop"]), ["id", "score"], ["id", "a"]
    else:
        fn, columns, tcols = identity_transform, ["id", "a", "v"], ["id", "a", "v"]
    opening = time.perf_counter()
    loader = stoker.Loader(job["path"], columns=columns, transform=fn, transform_columns=tcols,
                           python_workers=job["python_workers"], num_threads=THREADS,
                           batch_size=job["batch_size"], seed=3, drop_last=False, rank=0,
                           world_size=1)
    open_s = time.perf_counter() - opening
    epochs = []
    try:
        for epoch in range(2):
            before = _transform_stage(loader)
            digest = hashlib.sha256()
            rows = batches = 0
            since = time.time()
            started = time.perf_counter()
            for batch in loader:
                for key in columns:
                    digest.update(np.ascontiguousarray(batch[key]).tobytes())
                rows += len(batch["id"])
                batches += 1
            wall = time.perf_counter() - started
            after = _transform_stage(loader)
            epochs.append({"epoch": epoch, "rows": rows, "batches": batches, "wall_s": wall,
                           "digest": digest.hexdigest(),
                           "transform_busy_s": after["busy_s"] - before.get("busy_s", 0.0),
                           "transform_calls": after["items"] - before.get("items", 0),
                           "transform_bytes": after["bytes"] - before.get("bytes", 0),
                           **_traced(trace, since, time.time())})
        stages = loader.stats()["stages"]
    finally:
        loader.close()
        import shutil

        shutil.rmtree(trace, ignore_errors=True)
    self_cpu = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"status": "ok", "epochs": epochs, "open_s": open_s, "stages": stages,
            "cpu_parent_s": self_cpu.ru_utime + self_cpu.ru_stime,
            "cpu_workers_s": kids.ru_utime + kids.ru_stime}


_STRIP_EDITABLE = (
    "import sys\n"
    "sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in type(f).__module__.lower()"
    " and 'scikit' not in type(f).__name__.lower()]\n")


def _build_path(stoker_path: Optional[str]) -> List[str]:
    """The PYTHONPATH entries that make a child (and its spawned workers) import the build in
    `stoker_path` (none for this build)."""
    if not stoker_path:
        return []
    # A sitecustomize drops the editable install's finder (it would win over sys.path), then
    # PATH comes first.
    import tempfile

    site = tempfile.mkdtemp(prefix="pyw-site-")
    with open(os.path.join(site, "sitecustomize.py"), "w") as f:
        f.write(_STRIP_EDITABLE)
    return [site, stoker_path]


# ------------------------------------------------------------------------ the parent

MODES = (("threads", 0), ("processes", WORKERS))
BEFORE = "processes (before)"


def _median(values: List[float]) -> float:
    values = [v for v in values if v == v]
    return statistics.median(values) if values else float("nan")


def _fit(points: List[tuple]) -> dict:
    """Least squares of y = a * calls + b * MB over (calls, MB, y) points (no intercept)."""
    if len(points) < 2:
        return {}
    x = np.array([[c, m] for c, m, _ in points], dtype=float)
    y = np.array([v for _, _, v in points], dtype=float)
    (a, b), *_ = np.linalg.lstsq(x, y, rcond=None)
    return {"s_per_call": float(a), "s_per_mb": float(b)}


def run(name: str, data_dir: str, out_dir: str, repeats: int, gil_rows: int, gil_rg: int,
        rt_rows: int, rt_rg: int, widths: List[int], us_per_row: float,
        before: Optional[str] = None) -> dict:
    from . import machine

    load_start = os.getloadavg()
    cal = calibrate(us_per_row)
    _log(f"calibrated: loop {cal['loop']} ~ {cal['us_per_row_estimated']:.1f} us/row; "
         f"load average {load_start[0]:.2f}")
    cases = [("gil", 0, ensure_data(data_dir, "gil", gil_rows, gil_rg))]
    cases += [("roundtrip", w, ensure_data(data_dir, "rt", rt_rows, rt_rg, w)) for w in widths]
    runs: Dict[str, Dict[str, List[dict]]] = {}
    for rep in range(repeats):
        for kind, width, path in cases:
            case = "gil" if kind == "gil" else f"roundtrip-w{width}"
            modes = [(m, w, None) for m, w in MODES] + ([(BEFORE, WORKERS, before)]
                                                         if before else [])
            for mode, workers, stoker_path in modes:
                job = {"kind": kind, "path": path, "python_workers": workers,
                       "batch_size": BATCH_SIZE, "loop": cal["loop"]}
                result = run_job(job, "bench.pyworkers", "--child", timeout=TIMEOUT,
                                 pythonpath=_build_path(stoker_path))
                runs.setdefault(case, {}).setdefault(mode, []).append(result)
                if result.get("status") == "ok":
                    e = result["epochs"][1]
                    _log(f"{case:18s} {mode:9s} rep {rep}: {e['rows'] / e['wall_s']:>10,.0f} rows/s"
                         f" (load {os.getloadavg()[0]:.2f})")
                else:
                    _log(f"{case:18s} {mode:9s} rep {rep}: FAILED {result.get('reason')}")
    load_end = os.getloadavg()

    def summary(results: List[dict]) -> dict:
        ok = [r for r in results if r.get("status") == "ok"]
        if len(ok) != len(results) or not ok:
            bad = [r for r in results if r.get("status") != "ok"]
            return {"status": "failed", "reason": bad[0].get("reason") if bad else "no run"}
        timed = [r["epochs"][1] for r in ok]
        return {"status": "ok", "rows": timed[0]["rows"],
                "rows_per_s": _median([e["rows"] / e["wall_s"] for e in timed]),
                "rows_per_s_all": [e["rows"] / e["wall_s"] for e in timed],
                "wall_s": _median([e["wall_s"] for e in timed]),
                "first_epoch_s": _median([r["epochs"][0]["wall_s"] for r in ok]),
                "transform_busy_s": _median([e["transform_busy_s"] for e in timed]),
                "transform_calls": timed[0]["transform_calls"],
                # Seconds inside the user's function (traced by GilTransform; 0 for identity):
                # CPU / epoch wall is how many cores the user code got.
                "fn_cpu_s": _median([e.get("fn_cpu_s", 0.0) for e in timed]),
                "fn_wall_s": _median([e.get("fn_wall_s", 0.0) for e in timed]),
                # Calls in flight on average (the transform's busy time over the epoch's wall).
                "in_flight": _median([e["transform_busy_s"] / e["wall_s"] for e in timed]),
                "user_cores": _median([e.get("fn_cpu_s", 0.0) / e["wall_s"] for e in timed]),
                # A call's time outside the user's function (the round trip, in process mode).
                "outside_fn_ms_per_call": _median(
                    [(e["transform_busy_s"] - e.get("fn_wall_s", 0.0)) / max(1, e["transform_calls"])
                     * 1e3 for e in timed]),
                "cpu_parent_s": _median([r["cpu_parent_s"] for r in ok]),
                "cpu_workers_s": _median([r["cpu_workers_s"] for r in ok]),
                # Per epoch: the digests of every run (one each when they all agree).
                "digests": [sorted({r["epochs"][i]["digest"] for r in ok}) for i in range(2)]}

    results: Dict[str, dict] = {}
    fit_points = []
    for case, by_mode in runs.items():
        entry = {mode: summary(results) for mode, results in by_mode.items()}
        t, p = entry["threads"], entry["processes"]
        if t["status"] == "ok" and p["status"] == "ok":
            entry["same_rows"] = (t["digests"] == p["digests"]
                                  and all(len(d) == 1 for d in t["digests"]))
            entry["ratio"] = p["rows_per_s"] / t["rows_per_s"]
            if case.startswith("roundtrip"):
                width = int(case.split("-w")[1])
                mb = t["rows"] * (width * 4 + 16) / 1e6  # v + id + a, per epoch
                entry["mb_per_epoch"] = mb
                entry["mb_per_call"] = mb / max(1, t["transform_calls"])
                entry["wall_s_per_mb"] = (p["wall_s"] - t["wall_s"]) / mb
                entry["busy_s_per_mb"] = (p["transform_busy_s"] - t["transform_busy_s"]) / mb
                fit_points.append((t["transform_calls"], mb,
                                   p["transform_busy_s"] - t["transform_busy_s"]))
                b = entry.get(BEFORE, {})
                if b.get("status") == "ok":
                    entry["before_wall_s_per_mb"] = (b["wall_s"] - t["wall_s"]) / mb
            b = entry.get(BEFORE, {})
            if b.get("status") == "ok":
                entry["before_ratio"] = b["rows_per_s"] / t["rows_per_s"]
                entry["same_rows"] = entry["same_rows"] and b["digests"] == t["digests"]
        results[case] = entry
    report = {"name": name, "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
              "machine": machine.describe(), "load_average_start": list(load_start),
              "load_average_end": list(load_end), "repeats": repeats, "threads": THREADS,
              "python_workers": WORKERS, "batch_size": BATCH_SIZE, "calibration": cal,
              "before": before,
              "gil": {"rows": gil_rows, "row_group_rows": gil_rg},
              "roundtrip": {"rows": rt_rows, "row_group_rows": rt_rg, "widths": widths,
                            "fit_busy": _fit(fit_points)},
              "results": results, "raw": runs}
    from .report import write_report

    write_report(report, out_dir, name, markdown(report))
    return report


def markdown(report: dict) -> str:
    res = report["results"]
    la, lb = report["load_average_start"], report["load_average_end"]
    lines = [f"# python_workers: processes vs threads ({report['name']})", "",
             f"Run {report['started']} on {report['machine']['cores']} cores, load average "
             f"{la[0]:.2f} / {la[1]:.2f} / {la[2]:.2f} at the start, {lb[0]:.2f} / {lb[1]:.2f} / "
             f"{lb[2]:.2f} at the end (the machine is shared: compare within this run). "
             f"threads: `num_threads={report['threads']}`; processes: `num_threads="
             f"{report['threads']}, python_workers={report['python_workers']}`. Timed epoch 1 "
             f"(epoch 0 warms up), medians of {report['repeats']} fresh processes per mode, "
             "interleaved.", "",
             f"## GIL workload: `transform=` loops over rows in Python "
             f"(~{report['calibration']['us_per_row_estimated']:.0f} us/row, "
             f"{report['gil']['rows']:,} rows, row groups of {report['gil']['row_group_rows']:,})",
             "",
             "| mode | rows/s (median) | runs | epoch s | calls in flight | cores the user code "
             "got | user code CPU us/row | call ms outside the user code | CPU s parent | "
             "CPU s workers | same rows |",
             "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    gil = res.get("gil", {})
    for mode in [m for m in ("threads", "processes", BEFORE) if m in gil]:
        s = gil.get(mode, {})
        if s.get("status") != "ok":
            lines.append(f"| {mode} | {s.get('status')}: {str(s.get('reason'))[:120]} "
                         "| | | | | | | | | |")
            continue
        runs = ", ".join(f"{r:,.0f}" for r in s["rows_per_s_all"])
        lines.append(f"| {mode} | {s['rows_per_s']:,.0f} | {runs} | {s['wall_s']:.2f} | "
                     f"{s['in_flight']:.2f} | {s['user_cores']:.2f} | {s['fn_cpu_s'] / s['rows'] * 1e6:.1f} | "
                     f"{s['outside_fn_ms_per_call']:.2f} | {s['cpu_parent_s']:.1f} | "
                     f"{s['cpu_workers_s']:.1f} | {gil.get('same_rows')} |")
    if "ratio" in gil:
        t, p = gil["threads"], gil["processes"]
        lines += ["", f"processes / threads = **{gil['ratio']:.2f}x** (target >= 1.5x"
                  + (f"; the build before this change: {gil['before_ratio']:.2f}x"
                     if "before_ratio" in gil else "") + "). The user "
                  f"code got {t['user_cores']:.2f} cores in thread mode and {p['user_cores']:.2f} "
                  "in process mode: on a shared machine the ratio follows the CPU the workers "
                  "get, and a call's time outside the user code is the pool's overhead (in "
                  "thread mode it includes waiting for the GIL)."]
    rt = report["roundtrip"]
    lines += ["", f"## Round trip: identity `transform=` on a float32 `[rows, W]` column "
              f"({rt['rows']:,} rows, row groups of {rt['row_group_rows']:,})", "",
              "| W | MB per call | threads rows/s | processes rows/s | processes / threads | "
              "wall s/MB (proc - thr) | busy s/MB (proc - thr) | same rows |"
              + (" before: processes / threads | before: wall s/MB (proc - thr) |"
                 if report.get("before") else ""),
              "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
              + (" ---: | ---: |" if report.get("before") else "")]
    for case, entry in res.items():
        if not case.startswith("roundtrip"):
            continue
        width = case.split("-w")[1]
        t, p = entry["threads"], entry["processes"]
        if t.get("status") != "ok" or p.get("status") != "ok":
            lines.append(f"| {width} | failed: {str(t.get('reason') or p.get('reason'))[:120]} "
                         "| | | | | | |")
            continue
        lines.append(f"| {width} | {entry['mb_per_call']:.2f} | {t['rows_per_s']:,.0f} | "
                     f"{p['rows_per_s']:,.0f} | {entry['ratio']:.2f}x | "
                     f"{entry['wall_s_per_mb'] * 1e3:.2f} ms | "
                     f"{entry['busy_s_per_mb'] * 1e3:.2f} ms | {entry['same_rows']} |"
                     + (f" {entry['before_ratio']:.2f}x | {entry['before_wall_s_per_mb'] * 1e3:.2f}"
                        " ms |" if "before_ratio" in entry else ""))
    big = [e for c, e in res.items() if c.startswith("roundtrip") and "wall_s_per_mb" in e]
    if big:
        top = max(big, key=lambda e: e["mb_per_call"])
        lines += ["", f"Round trip at {top['mb_per_call']:.1f} MB per call (the per-call cost "
                  f"amortised): **{top['wall_s_per_mb'] * 1e3:.2f} ms of wall per MB** "
                  f"({top['busy_s_per_mb'] * 1e3:.2f} ms of calling-thread time per MB, summed "
                  "over the 2 calling threads)."]
    fit = rt.get("fit_busy") or {}
    if fit:
        lines += ["", f"Fit of the process-minus-thread transform busy time: "
                  f"{fit['s_per_call'] * 1e3:.2f} ms per call + {fit['s_per_mb'] * 1e3:.2f} ms "
                  "per MB (busy time is summed over the 2 calling threads; on a loaded machine the small "
                  "sizes are noisy and the per-call term can come out negative)."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pyworkers", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--name", default="pyworkers")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tiny", action="store_true",
                        help="a few thousand rows (the smoke test)")
    parser.add_argument("--us-per-row", type=float, default=30.0)
    parser.add_argument("--widths", help=f"comma-separated (default {RT_WIDTHS}; 0: no round "
                        "trip measure)")
    parser.add_argument("--before", metavar="PATH",
                        help="also measure process mode with another build (PATH holds its "
                        "stoker package, with _stoker*.so), interleaved")
    parser.add_argument("--data-dir", default=os.path.join(HERE, "data"))
    parser.add_argument("--out-dir", default=os.path.join(HERE, "results"))
    args = parser.parse_args(argv)
    if args.child:
        result = _child(json.loads(args.child))
        print("@@RESULT@@" + json.dumps(result), flush=True)
        return 0
    widths = [int(w) for w in args.widths.split(",") if int(w)] if args.widths else RT_WIDTHS
    if args.tiny:
        sizes = dict(gil_rows=3_000, gil_rg=500, rt_rows=2_048, rt_rg=512)
    else:
        sizes = dict(gil_rows=GIL_ROWS, gil_rg=GIL_RG, rt_rows=RT_ROWS, rt_rg=RT_RG)
    report = run(args.name, args.data_dir, args.out_dir, args.repeats, widths=widths,
                 us_per_row=args.us_per_row, before=args.before, **sizes)
    print(markdown(report))
    ok = all(s.get("status") == "ok" for e in report["results"].values()
             for m, s in e.items() if m in ("threads", "processes", BEFORE))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
