"""The benchmark suite: generate data, run every runner in fresh processes, repeat, aggregate."""

from __future__ import annotations

import os
import time
from typing import Dict, List, Optional

from . import generators, machine, metrics
from .jobs import run_job
from .runners import LABELS, load, names_for

HERE = os.path.dirname(os.path.abspath(__file__))

# Per profile: repeats of the throughput pass, of the stall pass, the stall pass's batch cap,
# and the timeout of one measurement.
PROFILE = {
    "smoke": {"repeats": 1, "stall_repeats": 1, "stall_batches": 4, "timeout": 180},
    "quick": {"repeats": 3, "stall_repeats": 2, "stall_batches": 30, "timeout": 300},
    "full": {"repeats": 5, "stall_repeats": 3, "stall_batches": 200, "timeout": 1800},
}
BATCH_SIZE = {"tabular": 4096, "images": 256}
# The stall meter's step time, as a multiple of stoker's own time per batch at full speed: the
# busy-waiting consumer takes one of the cores, so stoker should sustain about half its rate.
STEP_FACTOR = 2.5
MAX_STEP_S = 0.5


def _log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# The environment of a runner's process (set unless the caller's environment sets them).
WORKER_ENV = {
    "RAY_DEDUP_LOGS": "0",
    "RAY_AUTH_MODE": "disabled",  # a loopback-only cluster, started per run
    "RAY_USAGE_STATS_ENABLED": "0",
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_OFFLINE": "1",
    "PYTHONWARNINGS": "ignore",
}


# A measurement whose epoch ends early (Petastorm 0.13.1's thread pool sometimes stops after
# zero rows) is repeated, up to this many attempts; every short epoch is reported.
ATTEMPTS = 4


def measure(job: dict, timeout: float, expected_rows: Optional[int], short: List[str],
            module: str = "bench.worker", log=_log) -> dict:
    """Runs `job` in a fresh process (``python -m <module> JOB_JSON``, bench.jobs.run_job) and
    repeats it while its epoch ends short (rows other than `expected_rows`; no rows when that is
    None), up to ATTEMPTS runs. Every short epoch is appended to `short` and logged; ATTEMPTS
    short epochs in a row give a failed result naming them all."""
    for _ in range(ATTEMPTS):
        result = run_job(job, module, timeout=timeout, env=WORKER_ENV, timed=True)
        if result.get("status") != "ok":
            return result
        rows = result.get("rows", 0)
        if expected_rows is None:
            complete = rows > 0
        else:
            complete = rows == expected_rows
        if complete:
            return result
        want = expected_rows if expected_rows is not None else "> 0"
        short.append(f"delivered {rows} of {want} rows")
        log(f"  {job['runner']:18s} short epoch: delivered {rows} of {want} rows; repeating")
    return {**result, "status": "failed",
            "reason": f"{ATTEMPTS} attempts in a row ended early: " + "; ".join(short[-ATTEMPTS:])}


def _summarise(runs: List[dict], facts: dict) -> dict:
    ok = [r for r in runs if r.get("status") == "ok"]
    if not ok:
        first = runs[0] if runs else {"status": "failed", "reason": "not run"}
        return {"status": first.get("status", "failed"), "reason": first.get("reason", "")}
    bytes_per_row = facts["uncompressed_bytes"] / max(facts["rows"], 1)
    rows_per_s = [r["rows"] / r["wall_s"] for r in ok if r["wall_s"] > 0]
    steady = [(r["rows"]) / r["steady_s"] for r in ok if r.get("steady_s")]
    out = {
        "status": "ok",
        "repeats": len(ok),
        "rows": ok[0]["rows"],
        "rows_per_s": metrics.median(rows_per_s),
        "rows_per_s_all": rows_per_s,
        "steady_rows_per_s": metrics.median(steady),
        "best_rows_per_s": max(rows_per_s) if rows_per_s else float("nan"),
        "mb_per_s": metrics.median(rows_per_s) * bytes_per_row / 1e6,
        "cpu_s_per_mrows": metrics.median([r["cpu_s"] / r["rows"] * 1e6 for r in ok if r["rows"]]),
        "peak_rss_mb": metrics.median([r["peak_rss_bytes"] / 2**20 for r in ok]),
        "first_batch_s": metrics.median([r["first_batch_s"] for r in ok if r["first_batch_s"] is not None]),
        "batch_s": metrics.median([r["steady_s"] / max(r["batches"] - 1, 1) for r in ok]),
    }
    if len(ok) < len(runs):
        out["failed_repeats"] = [r.get("reason") for r in runs if r.get("status") != "ok"]
    from .report import median_run

    run = median_run(ok)
    if run is not None:
        out["loader_stats"] = run["loader_stats"]
        out["loader_stats_wall_s"] = run["wall_s"]
    return out


def workload_paths(data_root: str, profile: str, log=_log,
                   workloads: Optional[List[str]] = None) -> Dict[str, dict]:
    """Writes (or reuses) the datasets of `workloads` (all when None); returns their folders."""
    specs = generators.SPECS[profile]
    root = os.path.join(data_root, profile)
    os.makedirs(root, exist_ok=True)
    out = {}
    for compression in ("snappy", "zstd"):
        if not workloads or f"tabular-{compression}" in workloads:
            path = generators.ensure_tabular(root, specs["tabular"], compression, log=log)
            out[f"tabular-{compression}"] = path
    if not workloads or "images" in workloads:
        out["images"] = generators.ensure_images(root, specs["images"], log=log)
    return out


def run_suite(profile: str, name: str, data_root: str, out_dir: str,
              runners: Optional[List[str]] = None, workloads: Optional[List[str]] = None,
              repeats: Optional[int] = None, stall: bool = True, install: bool = True) -> dict:
    conf = dict(PROFILE[profile])
    if install:
        from .peers import ensure_nodeps_peers

        problem = ensure_nodeps_peers(log=_log)
        if problem:
            _log(problem)
    if repeats:
        conf["repeats"] = repeats
    started = time.time()
    paths = workload_paths(os.path.abspath(data_root), profile, workloads=workloads)
    report = {"name": name, "profile": profile, "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started)),
              "machine": machine.describe(), "settings": {**conf, "step_factor": STEP_FACTOR},
              "workloads": {}}
    threads = os.cpu_count() or 1
    for workload, path in paths.items():
        if workloads and workload not in workloads:
            continue
        kind = "images" if workload == "images" else "tabular"
        columns = ["image", "label"] if kind == "images" else \
            sum(generators.tabular_columns().values(), [])
        facts = generators.dataset_facts(path, columns)
        names = [n for n in names_for(workload) if not runners or n in runners]
        base = {"workload": workload, "path": path, "files": facts["files"],
                "batch_size": BATCH_SIZE[kind], "threads": threads, "seed": 7}
        _log(f"{workload}: {facts['rows']:,} rows, {facts['row_groups']} row groups, "
             f"{facts['uncompressed_bytes'] / 1e6:.0f} MB uncompressed; runners: {', '.join(names)}")
        runs: Dict[str, List[dict]] = {n: [] for n in names}
        short: Dict[str, List[str]] = {n: [] for n in names}
        skip = set()
        # Throughput: repeats interleaved across runners so that noise spreads evenly.
        for rep in range(conf["repeats"]):
            for n in names:
                if n in skip:
                    continue
                result = measure({**base, "runner": n}, conf["timeout"], facts["rows"], short[n])
                runs[n].append(result)
                if result.get("status") == "ok":
                    _log(f"  {n:18s} rep {rep}: {result['rows'] / result['wall_s']:>12,.0f} rows/s  "
                         f"first batch {result['first_batch_s']:.2f} s")
                else:
                    _log(f"  {n:18s} rep {rep}: {result.get('status')}: {result.get('reason')}")
                    if result.get("status") == "unavailable" or rep == 0:
                        skip.add(n)
        summary = {n: _summarise(runs[n], facts) for n in names}
        for n in names:
            if short[n]:
                summary[n]["short_epochs"] = short[n]
            summary[n]["label"] = LABELS[n]
            summary[n]["config"] = load(n).config(base)
        # Stall meter at one step time for every batching runner.
        ref = summary.get("stoker") if summary.get("stoker", {}).get("status") == "ok" else None
        if ref is None and summary.get("limit", {}).get("status") == "ok":
            ref = {"batch_s": BATCH_SIZE[kind] / summary["limit"]["rows_per_s"]}
        step = min(STEP_FACTOR * ref["batch_s"], MAX_STEP_S) if ref else 0.0
        if step > 0 and stall:
            for n in names:
                if n == "limit" or summary[n].get("status") != "ok":
                    continue
                stalls = []
                for _ in range(conf["stall_repeats"]):
                    r = measure({**base, "runner": n, "step_s": step,
                                  "max_batches": conf["stall_batches"]}, conf["timeout"],
                                 None, short[n])
                    if r.get("status") == "ok" and r.get("stall_fraction") is not None:
                        stalls.append(r["stall_fraction"])
                    else:
                        summary[n].setdefault("stall_errors", []).append(r.get("reason"))
                        _log(f"  {n:18s} stall run: {r.get('status')}: {r.get('reason')}")
                summary[n]["stall_fraction"] = metrics.median(stalls)
                _log(f"  {n:18s} stall at step {step * 1e3:.1f} ms: {summary[n]['stall_fraction']:.3f}")
        _add_ratios(summary)
        report["workloads"][workload] = {
            "dataset": {k: v for k, v in facts.items() if k != "files"},
            "batch_size": BATCH_SIZE[kind], "step_s": step,
            "step_basis": "stoker" if (ref and "rows_per_s" in ref) else "limit",
            "results": summary, "raw": runs}
    report["elapsed_s"] = time.time() - started
    try:
        report["machine"]["load_average_at_end"] = os.getloadavg()
    except OSError:
        pass
    from . import report as rep

    written = rep.write_all(report, out_dir, name)
    _log("wrote " + ", ".join(written))
    return report


def _add_ratios(summary: Dict[str, dict]) -> None:
    stoker = summary.get("stoker", {})
    noshuffle = summary.get("stoker_noshuffle", {})
    limit = summary.get("limit", {})
    for n, s in summary.items():
        if s.get("status") != "ok":
            continue
        if stoker.get("status") == "ok" and n != "stoker":
            s["stoker_speedup"] = stoker["rows_per_s"] / s["rows_per_s"]
        if noshuffle.get("status") == "ok" and n != "stoker_noshuffle":
            s["stoker_noshuffle_speedup"] = noshuffle["rows_per_s"] / s["rows_per_s"]
        if limit.get("status") == "ok":
            s["fraction_of_limit"] = s["rows_per_s"] / limit["rows_per_s"]
