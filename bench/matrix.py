"""``python -m bench --matrix``: the shape matrix of issue 26, one table.

Rows are shapes (``bench.matrix_shapes``), columns the ratios of stoker against the strongest
limits (``bench.matrix_limits``):

- cold / decode limit: stoker's shuffled cold epoch (no cache) against the fastest decode reader
  that delivers the same arrays (checked equal to the NumPy reference);
- later cold / decode limit: the same loader's next epoch (no cache: every row group read and
  decoded again, in another order), as a training job without a cache runs every epoch after its
  first. Like for like with ``pyarrow-rg-pool-warm``, which times pyarrow's second pass in its
  process: the first epoch of a fresh process also pays its one-time costs (threads, the
  allocator's first touch of each page, lazy initialisation). Its limit may also be a reader
  that keeps what its first pass did (``matrix_limits.LATER_ONLY``: the strings' dictionary ids,
  as the loader keeps them), which the cold epoch is not compared with;
- fill / no cache: the epoch filling a fresh ``cache_dir`` against the cold epoch;
- warm / memory limit: a shuffled epoch from a warm ``cache_dir`` against the fastest in-memory
  gather (checked equal to fancy indexing);
- first batch in batch times: the cold epoch's time to its first batch (from before ``Loader(...)``)
  over its steady-state time per batch; and the same after the constructor returned (the epoch's
  own wait: a categorical shape's constructor builds its vocabularies);
- shuffled / unshuffled: the cold and the warm shuffled epoch against the same loader with
  ``shuffle=False`` (what the row shuffle costs; the target is >= 0.9);
- shuffled floor (narrow, wide, many: ``matrix_limits.floors``): ``parquet-cpp-shuffled``, the
  decode limit's own reader (``parquet-cpp-warm``) with the rows shuffled as the loader's shuffle
  demands (row groups in a random order, windows of at least ``shuffle_window`` rows, each
  window's rows uniformly permuted and gathered into the batches, in C), over the decode limit:
  the best a shuffled epoch could reach against the unshuffled limit; and stoker's cold epoch over
  it. Not a decode limit (it does more work than the unshuffled readers, so it never wins one);
  checked by ``check_shuffled`` (every row once, each window's rows at its places and permuted,
  the batch sizes); above 1.10 the floor is flagged weak.

Every measurement runs in a fresh process (``bench.jobs.run_job``, module ``bench.matrix``);
medians over the repeats. The in-memory gathers share one process per repeat (their arrays are
loaded once, untimed; the gathers run in a rotated order).
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import time
from typing import Dict, List, Optional

from . import machine, metrics
from . import matrix_shapes as ms

WEAK = 1.10  # a ratio above this says the limit is weak, not that stoker beat it
SHUFFLED_FLOOR = "parquet-cpp-shuffled"  # matrix_limits.SHUFFLED (imported by the workers only)
TIMEOUT = 600


def _log(msg: str) -> None:
    print(f"[matrix {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ------------------------------------------------------------------ in the worker process

def _stoker_batches(job, shape):
    """The measured epoch. cold and fill construct the loader inside the clock (start-up counts,
    as in the suite); warm constructs it and fills its cache_dir before the clock, until an epoch
    skips no write (at most 12 epochs), then flushes the write-behind queue (as the stoker_warm
    runner). The measured warm epoch's misses are recorded (``warm_misses``): a warm measure
    that decoded is flagged in the report, not counted as warm."""
    import tempfile

    import stoker

    opts = ms.stoker_options(shape, job["threads"], job["seed"])
    variant = job["variant"]
    if variant == "cold-next":  # the loader's second epoch, without a cache
        loader = job["_loader"] = stoker.Loader(job["path"], **opts)
        for _ in loader:
            pass
        loader.set_epoch(1)
    if variant.endswith("-ordered"):  # the same loader without the row shuffle
        opts["shuffle"] = False
        variant = variant[: -len("-ordered")]
    if variant in ("fill", "warm"):
        job["_cache_dir"] = opts["cache_dir"] = tempfile.mkdtemp(prefix=f"stoker-matrix-{variant}-")
    if variant == "warm":
        loader = job["_loader"] = stoker.Loader(job["path"], **opts)
        epoch = 0
        while True:
            loader.set_epoch(epoch)
            skipped = loader.stats()["cache"]["write_skipped"]
            for _ in loader:
                pass
            epoch += 1
            # Large entries outpace the disk: the large-images shape stores about a fifth of
            # its 1.2 GB an epoch, and a cap of 5 left entries for the measured epoch to decode.
            if loader.stats()["cache"]["write_skipped"] == skipped or epoch >= 12:
                break
        # An epoch ends before the write-behind queue does: without this the measured epoch
        # shared the cores with the writer storing the last entries (served from its queue).
        loader.flush_cache()
        job["_fill_epochs"] = epoch
        job["_misses_before"] = loader.stats()["cache"]["misses"]
        loader.set_epoch(epoch)

    def batches():
        loader = job.get("_loader")
        if loader is None:
            start = time.perf_counter()
            loader = job["_loader"] = stoker.Loader(job["path"], **opts)
            job["_open_s"] = time.perf_counter() - start
        for batch in loader:
            yield len(batch[shape.count]), batch

    return batches()


def _cleanup(job):
    import shutil

    loader = job.get("_loader")
    if loader is not None:
        loader.close()
    if job.get("_cache_dir"):
        shutil.rmtree(job["_cache_dir"], ignore_errors=True)


def _preimport(names):
    """Libraries load before the clock starts, as in bench.worker; so do the stoker modules that
    ``Loader(...)`` imports on first use (compiling one cost 8 ms of a 20 ms first construction
    where bytecode is not written, PYTHONDONTWRITEBYTECODE): that is a process's import, paid once,
    not the loader's open."""
    import concurrent.futures  # noqa: F401

    import stoker._device  # noqa: F401
    import stoker._distributed  # noqa: F401
    import stoker._petastorm  # noqa: F401
    import stoker._pyworkers  # noqa: F401
    import stoker._user_transform  # noqa: F401

    import pyarrow.compute  # noqa: F401
    import pyarrow.parquet  # noqa: F401
    from PIL import Image

    try:  # pyarrow imports pandas on the first Array.to_numpy() or pa.array(list): ~1 s of CPU
        import pandas  # noqa: F401  # inside a reader's clock otherwise; stoker never imports it
    except ImportError:
        pass

    Image.preinit()
    Image.init()
    for name in names:
        if name.startswith("polars"):
            import polars  # noqa: F401
        if name.startswith("duckdb"):
            import duckdb  # noqa: F401
        if name.endswith("cv2"):
            import cv2  # noqa: F401
        if "torch" in name:
            import torch  # noqa: F401


def run(job: dict) -> dict:
    import numpy as np  # noqa: F401
    import pyarrow.parquet  # noqa: F401

    from . import matrix_limits as ml

    shape = ms.BY_NAME[job["shape"]]
    paths = ms.files(job["path"])
    with open(job["vocab"]) as f:
        job["vocab"] = json.load(f)
    if job["kind"] == "stoker":
        import stoker

        # Which stoker ran, relative to the repository (reports are committed).
        repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        result = {"stoker_file": os.path.relpath(stoker.__file__, repo)}
        _preimport([])
        try:
            result.update(metrics.consume(_stoker_batches(job, shape)))
            result["loader_stats"] = job["_loader"].stats()
            if job.get("_fill_epochs") is not None:
                result["fill_epochs"] = job["_fill_epochs"]
                result["warm_misses"] = (result["loader_stats"]["cache"]["misses"]
                                         - job["_misses_before"])
            if job.get("_open_s") is not None:
                result["open_s"] = job["_open_s"]
        finally:
            _cleanup(job)
        result["status"] = "ok"
        return result
    if job["kind"] == "decode":
        reason = ml.reader_available(job["reader"])
        if reason:
            return {"status": "unavailable", "reason": reason}
        os.environ["POLARS_MAX_THREADS"] = str(job["threads"])
        _preimport([job["reader"]])
        import pyarrow

        pyarrow.set_cpu_count(job["threads"])
        result = metrics.consume(ml.read(job["reader"], shape, paths, job["threads"], job["vocab"],
                                         seed=job.get("seed", 7)))
        result["status"] = "ok"
        return result
    if job["kind"] == "memory":
        canon = {}
        parts: Dict[str, list] = {}
        for _, out in ml.read("pyarrow-rg", shape, paths, job["threads"], job["vocab"]):
            for k, v in out.items():
                parts.setdefault(k, []).append(v)
        for k, v in parts.items():
            if k.endswith("_offsets"):
                base, acc = [], 0
                for o in v:
                    base.append(o[:-1] + acc)
                    acc += int(o[-1])
                canon[k] = np.concatenate(base + [np.array([acc], np.int64)])
            else:
                canon[k] = np.concatenate(v)
        arrays = ml.memory_arrays(canon, shape)
        kinds = ml.gathers_for(arrays)
        _preimport(kinds)
        rot = job.get("rotate", 0) % len(kinds)
        groups = ml.row_groups(paths)
        prepared = ml.prepare(kinds, arrays, shape.batch_size, job["threads"])  # before the clock
        results = {}
        for kind in kinds[rot:] + kinds[:rot]:
            r = metrics.consume(ml.gather(kind, arrays, shape.batch_size, job["threads"], job["seed"],
                                          groups=groups, prepared=prepared))
            results[kind] = r
        return {"status": "ok", "gathers": results, "rows": len(arrays[shape.count])}
    raise ValueError(job["kind"])


def main() -> int:
    from .worker import measure as _  # noqa: F401  (same protocol as bench.worker)

    job = json.loads(sys.argv[1])
    try:
        result = run(job)
    except Exception as error:  # noqa: BLE001
        import traceback

        result = {"status": "failed", "reason": f"{type(error).__name__}: {error}",
                  "traceback": traceback.format_exc(limit=8)}

    def clean(v):
        if isinstance(v, float) and math.isnan(v):
            return None
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        return v

    sys.stdout.write("\n@@RESULT@@" + json.dumps(clean(result), default=str) + "\n")
    sys.stdout.flush()
    os._exit(0)


# ------------------------------------------------------------------------- the driver

def _ok(r):
    return r.get("status") == "ok" and r.get("wall_s")


def _rate(runs: List[dict]) -> dict:
    ok = [r for r in runs if _ok(r)]
    if not ok:
        bad = runs[0] if runs else {"reason": "not run"}
        return {"status": bad.get("status", "failed"), "reason": bad.get("reason", "")}
    rates = [r["rows"] / r["wall_s"] for r in ok]
    batch_s = [r["steady_s"] / max(r["batches"] - 1, 1) for r in ok if r["batches"] > 1]
    return {"status": "ok", "rows": ok[0]["rows"], "rows_per_s": metrics.median(rates),
            "rows_per_s_all": rates,
            "first_batch_s": metrics.median([r["first_batch_s"] for r in ok]),
            "open_s": metrics.median([r["open_s"] for r in ok if r.get("open_s") is not None]) if any(
                r.get("open_s") is not None for r in ok) else None,
            "batch_s": metrics.median(batch_s),
            "cpu_s_per_mrows": metrics.median([r["cpu_s"] / r["rows"] * 1e6 for r in ok if r["rows"]])}


def run_shape(shape: ms.Shape, data_root: str, threads: int, repeats: int, full: bool,
              tiny: Optional[int] = None, seed: int = 7) -> dict:
    from . import matrix_limits as ml
    from .jobs import run_job
    from .suite import WORKER_ENV

    if shape.not_run:
        return {"title": shape.title, "status": "not run", "reason": shape.not_run}
    path = ms.ensure(shape, data_root, full, tiny, log=_log)
    cols = ms.raw(shape, full, tiny)
    vocab = ms.vocabularies(shape, cols)
    ref = ms.reference(shape, cols)
    del cols
    paths = ms.files(path)
    rows = len(ref[shape.count])
    out = {"title": shape.title, "status": "ok", "rows": rows, "batch_size": shape.batch_size,
           "path": path, "dataset": {"files": len(paths), "row_group_rows": min(shape.row_group_rows, rows),
                                     "bytes_on_disk": sum(os.path.getsize(p) for p in paths)},
           "stoker_options": {k: (v if k != "transforms" else repr(v)) for k, v in
                              ms.stoker_options(shape, threads, seed).items()
                              if k not in ("columns", "features", "categories")}}
    # The checks: every limit's output against the NumPy reference (not timed).
    checks = {}
    for name in ml.readers(shape):
        reason = ml.reader_available(name)
        checks[name] = (False, reason) if reason else ml.check_reader(name, shape, paths, threads, vocab, ref)
    for name in ml.floors(shape):  # the shuffled floor: every row once, in the windows, permuted
        reason = ml.reader_available(name)
        checks[name] = (False, reason) if reason else ml.check_shuffled(name, shape, paths, threads, ref,
                                                                        seed)
    arrays = ml.memory_arrays(ref, shape)
    groups = ml.row_groups(paths)
    for kind in ml.gathers_for(arrays):
        checks[kind] = ml.check_gather(kind, arrays, shape.batch_size, threads, seed, groups=groups)
    # stoker's own values (a measure is only worth its rows if they are right): unshuffled batch
    # by batch, and a shuffled cache's filling and warm epochs.
    with tempfile.TemporaryDirectory(prefix="stoker-matrix-check-") as check_dir:
        checks["stoker"] = ml.check_stoker(shape, path, threads, seed, arrays, check_dir)
    del arrays, ref
    out["checks"] = {k: {"equal": ok, "detail": why} for k, (ok, why) in checks.items()}
    for k, (ok, why) in checks.items():
        if not ok:
            _log(f"  {shape.name}: {k} not checked equal: {why}")
    vocab_path = path.rstrip("/") + ".vocab.json"  # too long for a command line
    with open(vocab_path, "w") as f:
        json.dump(vocab, f)
    base = {"shape": shape.name, "path": path, "threads": threads, "seed": seed,
            "vocab": vocab_path}
    runs: Dict[str, List[dict]] = {}
    stoker_variants = ["cold", "fill", "warm", "cold-ordered", "warm-ordered", "cold-next"]
    decoders = [n for n in ml.readers(shape) if checks[n][0]]
    floors = [n for n in ml.floors(shape) if checks[n][0]]
    for rep in range(repeats):
        for v in stoker_variants:
            r = run_job({**base, "kind": "stoker", "variant": v}, "bench.matrix", timeout=TIMEOUT,
                        env=WORKER_ENV, timed=True)
            if _ok(r) and r["rows"] != rows:
                r = {"status": "failed", "reason": f"stoker delivered {r['rows']} of {rows} rows"}
            runs.setdefault(f"stoker-{v}", []).append(r)
        for n in decoders + floors:
            r = run_job({**base, "kind": "decode", "reader": n}, "bench.matrix", timeout=TIMEOUT,
                        env=WORKER_ENV, timed=True)
            if _ok(r) and r["rows"] != rows:
                r = {"status": "failed", "reason": f"{r['rows']} of {rows} rows"}
            runs.setdefault(n, []).append(r)
        r = run_job({**base, "kind": "memory", "rotate": rep}, "bench.matrix", timeout=TIMEOUT,
                    env=WORKER_ENV, timed=True)
        for kind in ml.GATHERS:
            if kind not in checks:
                continue
            if r.get("status") == "ok" and kind in r["gathers"]:
                g = r["gathers"][kind]
                g["status"] = "ok" if checks[kind][0] else "failed"
                runs.setdefault(kind, []).append(g)
            else:
                runs.setdefault(kind, []).append({"status": "failed", "reason": r.get("reason", "")})
        line = []
        for k, v in runs.items():
            last = v[-1]
            line.append(f"{k} {last['rows'] / last['wall_s']:,.0f}" if _ok(last)
                        else f"{k} {last.get('status')}: {str(last.get('reason'))[:80]}")
        _log(f"  {shape.name} rep {rep}: " + "; ".join(line))
    summary = {k: _rate(v) for k, v in runs.items()}
    from .report import median_run

    for v in stoker_variants:  # the median run's per-stage stats and the stage that bounded it
        run = median_run(runs.get(f"stoker-{v}", []))
        if run is not None:
            summary[f"stoker-{v}"]["loader_stats"] = run["loader_stats"]
            try:
                from stoker._cli_bench import bottleneck

                summary[f"stoker-{v}"]["bottleneck"] = bottleneck(run["loader_stats"], run["wall_s"])[1]
            except Exception as error:  # noqa: BLE001
                summary[f"stoker-{v}"]["bottleneck"] = f"unknown ({type(error).__name__})"
    out["results"] = summary
    out["raw"] = {k: [{x: y for x, y in r.items() if x != "loader_stats"} for r in v]
                  for k, v in runs.items()}
    cold, fill, warm, cold_ordered, warm_ordered, cold_next = (
        summary[f"stoker-{v}"] for v in stoker_variants)

    def best(names):
        ok = [(summary[n]["rows_per_s"], n) for n in names
              if n in summary and summary[n].get("status") == "ok" and checks.get(n, (False,))[0]]
        return max(ok) if ok else (float("nan"), None)

    dec_rate, dec_name = best([n for n in decoders if n not in ml.LATER_ONLY])
    later_rate, later_name = best(decoders)  # a later epoch's limit may keep what it did before
    mem_rate, mem_name = best([k for k in ml.GATHERS if k in checks])
    ratio = lambda a, b: a["rows_per_s"] / b if a.get("status") == "ok" and b == b and b else None  # noqa: E731
    out["decode_limit"] = {"reader": dec_name, "rows_per_s": dec_rate}
    out["decode_limit_later"] = {"reader": later_name, "rows_per_s": later_rate}
    out["memory_limit"] = {"gather": mem_name, "rows_per_s": mem_rate}
    out["cold_vs_decode"] = ratio(cold, dec_rate)
    out["cold_next_vs_decode"] = ratio(cold_next, later_rate)
    out["fill_vs_nocache"] = ratio(fill, cold["rows_per_s"]) if cold.get("status") == "ok" else None
    out["warm_vs_memory"] = ratio(warm, mem_rate)
    ordered = lambda a, b: ratio(a, b["rows_per_s"]) if b.get("status") == "ok" else None  # noqa: E731
    out["cold_vs_ordered"] = ordered(cold, cold_ordered)
    out["warm_vs_ordered"] = ordered(warm, warm_ordered)
    floor_rate, floor_name = best(floors)
    out["shuffled_floor"] = ({"reader": floor_name, "rows_per_s": floor_rate,
                              "vs_decode": floor_rate / dec_rate if dec_rate == dec_rate else None}
                             if floor_name else None)
    out["cold_vs_shuffled_floor"] = ratio(cold, floor_rate) if floor_name else None
    out["first_batch_batches"] = (cold["first_batch_s"] / cold["batch_s"]
                                  if cold.get("status") == "ok" and cold.get("batch_s") else None)
    out["first_after_open_batches"] = (
        (cold["first_batch_s"] - cold["open_s"]) / cold["batch_s"]
        if cold.get("status") == "ok" and cold.get("batch_s") and cold.get("open_s") is not None else None)
    decode_best = max((v for v in (out["cold_vs_decode"], out["cold_next_vs_decode"]) if v is not None),
                      default=None)
    out["weak_limits"] = [n for n, v in (("decode", decode_best), ("memory", out["warm_vs_memory"]),
                                         ("shuffled floor", out["cold_vs_shuffled_floor"]))
                          if v is not None and v > WEAK]
    out["warm_misses"] = [r.get("warm_misses") for r in runs.get("stoker-warm", []) if _ok(r)]
    return out


def _f(v, spec=".2f"):
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def markdown(report: dict) -> str:
    m = report["machine"]
    lines = [f"# stoker shape matrix: {report['name']} ({report['size']})", "",
             f"Run {report['started']}, {report.get('elapsed_s', 0):.0f} s in all; "
             f"{report['threads']} threads everywhere; medians of {report['repeats']} fresh-process "
             "runs per measure. Machine: "
             f"{m['cores']} cores, {m['cpu_model']}; load average at start "
             f"{'/'.join(f'{x:.1f}' for x in m.get('load_average_at_start') or [])}, at end "
             f"{'/'.join(f'{x:.1f}' for x in m.get('load_average_at_end') or [])} (shared machine: "
             "compare ratios within this run).", "",
             "Ratios are stoker's rows/s over the limit's (higher is better; > 1.10 means the limit "
             "is weak, flagged). Each limit is the fastest of its candidates whose output equals the "
             "NumPy reference; the winner is named.", "",
             "| shape | rows | cold / decode limit | later cold / decode limit | fill / no cache | "
             "warm / memory limit | first batch (batch times) | after open | "
             "shuffled / unshuffled: cold, warm | shuffled floor / decode limit, cold / shuffled floor | "
             "decode limit won | memory limit won | flags |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- |"]
    for name, s in report["shapes"].items():
        if s["status"] != "ok":
            lines.append(f"| {s['title']} | - | {s['status']}: {s['reason']} | | | | | | | | | | |")
            continue
        flags = ", ".join(f"{w} limit weak" for w in s["weak_limits"])
        unchecked = [k for k, c in s["checks"].items() if not c["equal"] and k != "stoker"]
        if unchecked:
            flags = (flags + "; " if flags else "") + "not equal (excluded): " + ", ".join(unchecked)
        stoker_check = s["checks"].get("stoker")
        if stoker_check and not stoker_check["equal"]:
            flags = (flags + "; " if flags else "") + "stoker NOT equal: " + stoker_check["detail"][:120]
        missed = [m for m in s.get("warm_misses") or [] if m]
        if missed:
            flags = ((flags + "; " if flags else "") + f"warm epoch not all cached in {len(missed)} "
                     f"of its runs ({', '.join(map(str, missed))} entries decoded)")
        d, mm = s["decode_limit"], s["memory_limit"]
        later = s.get("decode_limit_later") or d
        won = f"{d['reader'] or '-'} ({_f(d['rows_per_s'], ',.0f')} rows/s)"
        if later["reader"] != d["reader"]:
            won += f"; later: {later['reader']} ({_f(later['rows_per_s'], ',.0f')} rows/s)"
        floor = s.get("shuffled_floor")
        floor_cell = (f"{_f(floor.get('vs_decode'))}, {_f(s.get('cold_vs_shuffled_floor'))}"
                      if floor else "-")
        lines.append(
            f"| {s['title']} | {s['rows']:,} | {_f(s['cold_vs_decode'])} | "
            f"{_f(s.get('cold_next_vs_decode'))} | {_f(s['fill_vs_nocache'])} | "
            f"{_f(s['warm_vs_memory'])} | {_f(s['first_batch_batches'], '.1f')} | "
            f"{_f(s.get('first_after_open_batches'), '.1f')} | "
            f"{_f(s.get('cold_vs_ordered'))}, {_f(s.get('warm_vs_ordered'))} | {floor_cell} | "
            f"{won} | "
            f"{mm['gather'] or '-'} ({_f(mm['rows_per_s'], ',.0f')} rows/s) | {flags} |")
    lines += ["", "## Rows/s of every measure (medians)", "",
              "| shape | measure | rows/s | first batch s | batch s | CPU s / M rows | checked / stoker's bound |",
              "| --- | --- | ---: | ---: | ---: | ---: | --- |"]
    for name, s in report["shapes"].items():
        if s["status"] != "ok":
            continue
        for k, r in s["results"].items():
            check = s["checks"].get("stoker" if k.startswith("stoker-") else k, {}).get("equal")
            mark = "equal" if check else "NOT equal"
            if k == SHUFFLED_FLOOR:  # its rows checked as multisets, per window, not in order
                mark = "shuffled floor: rows checked" if check else "shuffled floor: NOT checked"
            if check is None:
                mark = r.get("bottleneck", "-")
            elif k.startswith("stoker-"):
                mark += f", {r.get('bottleneck', '-')}"
            if r.get("status") != "ok":
                lines.append(f"| {name} | {k} | {r.get('status')}: {r.get('reason', '')[:120]} | | | | {mark} |")
                continue
            lines.append(f"| {name} | {k} | {r['rows_per_s']:,.0f} | {_f(r['first_batch_s'], '.3f')} | "
                         f"{_f(r['batch_s'], '.4f')} | {_f(r['cpu_s_per_mrows'], '.2f')} | {mark} |")
    lines.append("")
    return "\n".join(lines)


def run_matrix(data_root: str, out_dir: str, name: str = "matrix", shapes: Optional[List[str]] = None,
               repeats: int = 3, full: bool = False, tiny: Optional[int] = None,
               threads: Optional[int] = None) -> dict:
    from .report import write_report

    threads = threads or min(os.cpu_count() or 1, 2)
    started = time.time()
    mach = machine.describe()
    report = {"name": name, "size": "tiny" if tiny else ("full" if full else "small"),
              "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started)),
              "machine": mach, "threads": threads, "repeats": repeats, "weak_above": WEAK,
              "shapes": {}}
    root = os.path.join(os.path.abspath(data_root), "matrix")
    os.makedirs(root, exist_ok=True)
    for shape in ms.SHAPES:
        if shapes and shape.name not in shapes:
            continue
        _log(f"{shape.name}: {shape.title}")
        report["shapes"][shape.name] = run_shape(shape, root, threads, repeats, full, tiny)
        s = report["shapes"][shape.name]
        if s["status"] == "ok":
            _log(f"  {shape.name}: cold/decode {_f(s['cold_vs_decode'])} fill/nocache "
                 f"{_f(s['fill_vs_nocache'])} warm/memory {_f(s['warm_vs_memory'])} first batch "
                 f"{_f(s['first_batch_batches'], '.1f')} batch times"
                 + (f" shuffled floor/decode {_f(s['shuffled_floor']['vs_decode'])} cold/floor "
                    f"{_f(s['cold_vs_shuffled_floor'])}" if s.get("shuffled_floor") else ""))
    report["elapsed_s"] = time.time() - started
    try:
        report["machine"]["load_average_at_end"] = list(os.getloadavg())
    except OSError:
        pass
    base = write_report(report, out_dir, name, markdown(report))
    _log(f"wrote {base}.json, {base}.md")
    return report


if __name__ == "__main__":
    main()
