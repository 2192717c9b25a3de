"""``python -m bench.overlap``: consumer overlap (issue 26). Does the loader keep working while the
training step runs?

For each shape of ``bench.matrix_shapes`` (default narrow, wide, many, strings; small sizes), in
fresh processes:

1. L: the loader-only epoch (shuffled, no cache), from ``iter()`` to the last batch; median of
   the repeats.
2. Epochs whose consumer sleeps ``s`` seconds after each batch (``time.sleep`` releases the GIL
   and the CPU, as a GPU step does), with ``s`` chosen so that ``batches * s`` is 0.5 L, 1.0 L
   and 2.0 L.

ratio = wall / max(L, batches * s) (median wall over the repeats); the target is <= 1.10.
A ratio cannot go below the floor max(L + s, first batch + batches * s) / max(L, batches * s)
(the consumer cannot sleep before its first batch arrives, nor finish before the loader's last
batch plus one step); ``vs floor`` is wall over that floor, the part that overlap can fix.

The time the steps actually slept is reported beside it (over ``batches * s``): ``time.sleep``
returns late when the workers hold every core, and a ratio includes that as well as the loader's
share. ``--full`` uses the shapes' full sizes (8x the rows), where the epoch's start (the first
batch, and the second, which waits for the rest of the head's row group) weighs 8x less.

Loader construction (opening the footers) is outside the clock: it happens once, not per epoch;
the epoch's start-up (first window) is inside. ``--stoker NAME=PATH`` (repeatable) measures
other builds in the same run, interleaved (PATH holds a ``stoker`` package with its
``_stoker*.so``, and a ``pyarrow`` link beside it), for before/after comparisons under the same
load. Writes ``<out-dir>/<name>.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Dict, List, Optional

from . import machine
from . import matrix_shapes as ms
from .jobs import MARKER, run_job

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_SHAPES = ["narrow", "wide", "many", "strings"]
FRACTIONS = [0.5, 1.0, 2.0]
TARGET = 1.10
TIMEOUT = 300
# One epoch in a fresh process: run_job(job, **CHILD) (a failed child raises).
CHILD = dict(module="bench.overlap", flag="--child", timeout=TIMEOUT, check=True)


def _log(msg: str) -> None:
    print(f"[overlap {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ------------------------------------------------------------------ in the child process

def _child(job: dict) -> dict:
    if job.get("stoker_path"):
        # Another build: the editable install's finder would win over sys.path, so drop it.
        sys.meta_path[:] = [f for f in sys.meta_path
                            if "editable" not in (getattr(f, "__module__", "") or "").lower()
                            and "editable" not in type(f).__module__.lower()]
        sys.path.insert(0, job["stoker_path"])
    import numpy as np  # noqa: F401
    import pyarrow.parquet  # noqa: F401

    import stoker

    shape = ms.BY_NAME[job["shape"]]
    opts = ms.stoker_options(shape, job["threads"], job["seed"])
    t0 = time.perf_counter()
    loader = stoker.Loader(job["path"], **opts)
    open_s = time.perf_counter() - t0
    step = job["step_s"]
    pause = job.get("pause_s", 0.0)
    instant = 0  # after the pause: batches whose next() returned at once (built meanwhile)
    counting = False
    rows = batches = 0
    first = None
    wait = 0.0
    slept = 0.0  # time.sleep(s) returns late when every core is busy: the step's own overshoot
    start = time.perf_counter()
    it = iter(loader)
    while True:
        w0 = time.perf_counter()
        try:
            batch = next(it)
        except StopIteration:
            break
        now = time.perf_counter()
        wait += now - w0
        if first is None:
            first = now - start
        elif counting:
            if now - w0 < 0.002:
                instant += 1
            else:
                counting = False
        rows += len(batch[shape.count])
        batches += 1
        del batch
        if pause > 0 and batches == 1:
            time.sleep(pause)
            counting = True
        elif step > 0:
            s0 = time.perf_counter()
            time.sleep(step)
            slept += time.perf_counter() - s0
    wall = time.perf_counter() - start
    st = loader.stats()
    loader.close()
    return {"wall_s": wall, "first_batch_s": first, "open_s": open_s, "rows": rows,
            "batches": batches, "consumer_wait_s": wait, "step_s": step, "pause_s": pause,
            "slept_s": slept,
            "ready_after_pause": instant,
            "stoker_file": os.path.relpath(stoker.__file__, ROOT),
            "stages": st.get("stages"), "peak_inflight_bytes": st.get("peak_inflight_bytes")}


# ------------------------------------------------------------------ in the parent

def _median_run(runs: List[dict]) -> dict:
    walls = sorted(r["wall_s"] for r in runs)
    mid = walls[len(walls) // 2]
    return next(r for r in runs if r["wall_s"] == mid)


def run_shape(shape: ms.Shape, root: str, builds: Dict[str, Optional[str]], threads: int,
              repeats: int, tiny: Optional[int], fractions: List[float], seed: int = 7,
              full: bool = False) -> dict:
    path = ms.ensure(shape, root, full, tiny=tiny, log=_log)
    expected = min(tiny, shape.rows) if tiny else ms.shape_rows(shape, full)
    base = {"shape": shape.name, "path": path, "threads": threads, "seed": seed}
    out = {"title": shape.title, "rows": expected, "builds": {}}
    loader_only: Dict[str, List[dict]] = {b: [] for b in builds}
    for _ in range(repeats):  # repeats interleaved across builds
        for b, p in builds.items():
            loader_only[b].append(run_job(dict(base, step_s=0.0, stoker_path=p), **CHILD))
    steps: Dict[str, Dict[float, float]] = {}
    for b in builds:
        L = statistics.median(r["wall_s"] for r in loader_only[b])
        n = loader_only[b][0]["batches"]
        steps[b] = {f: f * L / n for f in fractions}
        out["builds"][b] = {"L_s": L, "batches": n, "loader_only": loader_only[b],
                            "first_batch_s": statistics.median(r["first_batch_s"]
                                                               for r in loader_only[b]),
                            "steps": {}}
    for b, p in builds.items():
        # One step as long as the loader-only epoch after the first batch: how many batches were
        # finished meanwhile (the base engine stops at num_threads + 2).
        o = out["builds"][b]
        o["pause"] = run_job(dict(base, step_s=0.0, pause_s=o["L_s"], stoker_path=p), **CHILD)
    sleeps: Dict[str, Dict[float, List[dict]]] = {b: {f: [] for f in fractions} for b in builds}
    for _ in range(repeats):
        for f in fractions:
            for b, p in builds.items():
                sleeps[b][f].append(run_job(dict(base, step_s=steps[b][f], stoker_path=p), **CHILD))
    for b in builds:
        o = out["builds"][b]
        L, n, fb = o["L_s"], o["batches"], o["first_batch_s"]
        for f in fractions:
            runs = sleeps[b][f]
            s = steps[b][f]
            wall = statistics.median(r["wall_s"] for r in runs)
            bound = max(L, n * s)
            floor = max(L + s, fb + n * s)
            med = _median_run(runs)
            o["steps"][str(f)] = {
                "step_s": s, "wall_s": wall, "ratio": wall / bound, "floor_ratio": floor / bound,
                # Best of the repeats against the best loader-only epoch: the least loaded runs.
                "ratio_best": min(r["wall_s"] for r in runs) / max(
                    min(r["wall_s"] for r in loader_only[b]), n * s),
                # The consumer's wait after its first batch (0 when the loader keeps ahead).
                "stall_after_first_s": statistics.median(
                    r["consumer_wait_s"] - r["first_batch_s"] for r in runs),
                # Time slept over batches * s (median): what the steps took beyond their length.
                "overshoot": statistics.median(r["slept_s"] / (n * s) for r in runs),
                "vs_floor": wall / floor, "consumer_wait_s": med["consumer_wait_s"],
                "first_batch_s": med["first_batch_s"], "stages": med["stages"],
                "peak_inflight_bytes": med["peak_inflight_bytes"],
                "rows": [r["rows"] for r in runs], "walls": [r["wall_s"] for r in runs]}
        o["all_rows"] = o["pause"]["rows"] == expected and all(
            r["rows"] == expected for r in loader_only[b]) and all(
            r["rows"] == expected for f in fractions for r in sleeps[b][f])
    return out


def _stage_line(stages: Optional[List[dict]]) -> str:
    if not stages:
        return ""
    parts = []
    for s in stages:
        parts.append(f"{s['name']} busy {s['busy_s']:.2f} in {s['wait_in_s']:.2f} "
                     f"out {s['wait_out_s']:.2f}")
    return "; ".join(parts)


def render(report: dict) -> str:
    lines = [f"# Consumer overlap: {report['name']} ({report['size']})", "",
             f"Run {report['started']}, {report['elapsed_s']:.0f} s in all; {report['threads']} "
             f"threads; medians of {report['repeats']} fresh-process runs. Machine: "
             f"{report['machine'].get('cores')} cores; load average at start "
             f"{'/'.join(f'{x:.1f}' for x in report['machine'].get('load_average_at_start') or [])} "
             "(shared machine: compare ratios within one run).", "",
             "L: loader-only shuffled cold epoch, `iter()` to last batch. Step runs sleep `s` "
             "after each batch, `batches * s` = 0.5, 1.0, 2.0 L. ratio = wall / max(L, batches * s) "
             f"(target <= {TARGET:.2f}). floor = max(L + s, first batch + batches * s) / "
             "max(L, batches * s): what the ratio cannot go below. ready after a pause: one run whose "
             "consumer, after its first batch, sleeps L seconds once: the batches then delivered "
             "at once (next() under 2 ms), i.e. finished while it slept.",
             ""]
    builds = report["builds"]
    head = "| shape | build | rows | batches | L s | first batch s |"
    sep = "| --- | --- | ---: | ---: | ---: | ---: |"
    for f in report["fractions"]:
        head += f" ratio {f}L (floor) |"
        sep += " ---: |"
    head += " ready after a pause | every row |"
    sep += " ---: | --- |"
    lines += [head, sep]
    for name, s in report["shapes"].items():
        for b in builds:
            o = s["builds"][b]
            row = (f"| {name} | {b} | {s['rows']:,} | {o['batches']} | {o['L_s']:.3f} | "
                   f"{o['first_batch_s']:.3f} |")
            for f in report["fractions"]:
                st = o["steps"][str(f)]
                flag = " **>1.10**" if st["ratio"] > TARGET else ""
                row += f" {st['ratio']:.2f}{flag} ({st['floor_ratio']:.2f}) |"
            row += f" {o['pause']['ready_after_pause']} | {'yes' if o['all_rows'] else 'NO'} |"
            lines.append(row)
    lines += ["", "Best of the repeats (min wall / max(min L, batches * s): the least loaded runs), "
              "the consumer's wait after its first batch (median; ~0 when the loader keeps ahead "
              "of a step slower than it), and the time the steps slept over batches * s (median; "
              "`time.sleep` returns late when the workers hold every core, so a ratio includes "
              "it beside the loader's share):", ""]
    head = "| shape | build |" + "".join(f" best {f}L | stall {f}L s | slept {f}L |"
                                        for f in report["fractions"])
    lines += [head, "| --- | --- |" + " ---: | ---: | ---: |" * len(report["fractions"])]
    for name, s in report["shapes"].items():
        for b in builds:
            o = s["builds"][b]
            lines.append(f"| {name} | {b} |" + "".join(
                f" {o['steps'][str(f)]['ratio_best']:.2f} | "
                f"{o['steps'][str(f)]['stall_after_first_s']:.3f} | "
                f"{o['steps'][str(f)]['overshoot']:.2f} |" for f in report["fractions"]))
    lines += ["", "## Per-stage stats of the median run (seconds, summed over threads)", "",
              "| shape | build | run | wall s | consumer wait s | stages |",
              "| --- | --- | --- | ---: | ---: | --- |"]
    for name, s in report["shapes"].items():
        for b in builds:
            o = s["builds"][b]
            lo = _median_run(o["loader_only"])
            lines.append(f"| {name} | {b} | loader only | {lo['wall_s']:.3f} | "
                         f"{lo['consumer_wait_s']:.3f} | {_stage_line(lo['stages'])} |")
            for f in report["fractions"]:
                st = o["steps"][str(f)]
                lines.append(f"| {name} | {b} | {f}L (s = {st['step_s'] * 1000:.1f} ms) | "
                             f"{st['wall_s']:.3f} | {st['consumer_wait_s']:.3f} | "
                             f"{_stage_line(st['stages'])} |")
    return "\n".join(lines) + "\n"


def run_overlap(data_root: str, out_dir: str, name: str = "overlap",
                shapes: Optional[List[str]] = None, repeats: int = 3, tiny: Optional[int] = None,
                threads: Optional[int] = None, builds: Optional[Dict[str, Optional[str]]] = None,
                fractions: Optional[List[float]] = None, full: bool = False) -> dict:
    threads = threads or min(os.cpu_count() or 1, 2)
    builds = builds or {"this": None}
    fractions = fractions or FRACTIONS
    started = time.time()
    report = {"name": name, "size": "tiny" if tiny else ("full" if full else "small"),
              "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started)),
              "machine": machine.describe(), "threads": threads, "repeats": repeats,
              "fractions": fractions, "target": TARGET, "builds": list(builds), "shapes": {}}
    root = os.path.join(os.path.abspath(data_root), "matrix")
    os.makedirs(root, exist_ok=True)
    for shape_name in shapes or DEFAULT_SHAPES:
        shape = ms.BY_NAME[shape_name]
        _log(f"{shape_name}: {shape.title}")
        s = report["shapes"][shape_name] = run_shape(shape, root, builds, threads, repeats, tiny,
                                                     fractions, full=full)
        for b, o in s["builds"].items():
            ratios = " ".join(f"{f}L {o['steps'][str(f)]['ratio']:.2f}" for f in fractions)
            _log(f"  {b}: L {o['L_s']:.3f} s, {o['batches']} batches, first batch "
                 f"{o['first_batch_s']:.3f} s; {ratios}")
    report["elapsed_s"] = time.time() - started
    from .report import write_report

    base = write_report(report, out_dir, name, render(report))
    _log(f"wrote {base}.md ({report['elapsed_s']:.0f} s)")
    return report


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.overlap", description=__doc__.split("\n")[0])
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--shapes", default=",".join(DEFAULT_SHAPES))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--tiny", type=int, default=None, help="rows per dataset (tests)")
    p.add_argument("--full", action="store_true",
                   help="the shapes' full sizes (8x: epochs of hundreds of batches)")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--fractions", default=",".join(str(f) for f in FRACTIONS))
    p.add_argument("--stoker", action="append", default=[], metavar="NAME=PATH",
                   help="another build to measure in the same run (PATH holds its stoker package)")
    p.add_argument("--data-dir", default=os.path.join(HERE, "data"))
    p.add_argument("--out-dir", default=os.path.join(HERE, "results"))
    p.add_argument("--name", default="overlap")
    args = p.parse_args(argv)
    if args.child:
        print(MARKER + json.dumps(_child(json.loads(args.child))), flush=True)
        return 0
    builds: Dict[str, Optional[str]] = {}
    for spec in args.stoker:
        bname, _, path = spec.partition("=")
        builds[bname] = os.path.abspath(path) if path else None
    if not builds or all(v is not None for v in builds.values()):
        builds["this"] = None
    run_overlap(args.data_dir, args.out_dir, args.name, [s for s in args.shapes.split(",") if s],
                args.repeats, args.tiny, args.threads, builds,
                [float(f) for f in args.fractions.split(",")], full=args.full)
    return 0


if __name__ == "__main__":
    sys.exit(main())
