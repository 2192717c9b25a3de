"""`stoker bench URI [loader options]`: stream the user's dataset with stoker for N batches or
S seconds, then print rows/s, MB/s, the per-stage breakdown from ``loader.stats()`` and a one-line
verdict naming the bottleneck."""

from __future__ import annotations

import os
import time
from typing import Any, Dict, List, Optional, Tuple

__all__ = ["bottleneck", "figures", "run_bench", "verdict"]

# What to try when a stage limits the loader, by the stage names the engine reports. A stage
# without an entry gets the generic advice: the verdict still names it.
_ADVICE = {
    "fetch": "reading remote data is the limit: more num_io_threads, larger row groups, or a "
             "cache_dir so later epochs read locally",
    "decode": "reading, decompressing and converting use the workers: more num_threads/cores, a "
              "cheaper codec (lz4/snappy over zstd/gzip), fewer columns, or a cache_dir so later "
              "epochs skip it",
    "batch": "gathering rows into batch arrays is the largest share of worker time: fewer "
             "separate columns (stack them as features), a smaller shuffle_window or "
             "shuffle=False (sequential gathers), or a cheaper list mode",
    "sequence": "the single sequencer thread (window permutation, batch cutting) is saturated: "
                "larger batches or a smaller shuffle_window",
    "consumer": "the loader is ahead: your training step is the bottleneck, the accelerator "
                "does not wait for data",
    "startup": "the run is too short to measure the steady state: run longer (--seconds, "
               "--batches)",
    "I/O": "reading remote data is the limit: more num_io_threads, or a cache_dir so later "
           "epochs read locally",
    "starved": "the threads wait for input rather than work: more data in flight "
               "(prefetch_bytes), smaller tasks (task_bytes) or more row groups, or a faster disk",
    "contended": "other processes hold the cores: measure on an idle machine, or give stoker "
                 "fewer threads than the free cores",
}
_GENERIC_ADVICE = "give its pool more threads, or make the stage's work cheaper"
# The verdict's thresholds, on the whole percentages the report prints.
# Below this share of wall time spent waiting for batches, the consumer is the bottleneck.
CONSUMER_BOUND_WAIT_PCT = 10
# A pool busy at least this share of (threads x wall time) is saturated: it limits the loader.
SATURATED_PCT = 75
# A run whose first batch came after at least this share of its wall time measured the start.
STARTUP_PCT = 50


def _pct(part: float, whole: float) -> int:
    """A share as the whole percentage the report prints (clamped to 0..100)."""
    if whole <= 0:
        return 0
    return int(round(100 * min(max(part / whole, 0.0), 1.0)))


def figures(stats: Dict[str, Any]) -> Dict[str, Any]:
    """The figures the report prints and the verdict reads, from ``loader.stats()`` plus the
    run's ``wall_s`` (and ``first_batch_s``, ``open_s`` when known): ``wait_pct`` (share of the
    wall time the loop waited for batches), ``startup_pct`` (share before the first batch),
    ``pools`` (busiest first: ``pool``, ``threads``, ``busy_s``, ``busy_pct`` of threads x wall
    time, ``stages`` [(name, pct of the pool's busy time)], largest first)."""
    wall = float(stats.get("wall_s") or 0.0)
    wait = float(stats.get("consumer_wait_s", 0.0))
    first = stats.get("first_batch_s")
    startup = float(first if first is not None else stats.get("open_s") or 0.0)
    grouped: Dict[str, List[Dict[str, Any]]] = {}
    for stage in stats.get("stages", []):
        grouped.setdefault(stage.get("pool") or stage["name"], []).append(stage)
    pools = []
    for pool, members in grouped.items():
        threads = max(1, int(members[0].get("threads") or 1))
        busy = sum(float(m["busy_s"]) for m in members)
        ranked = sorted(members, key=lambda m: -float(m["busy_s"]))
        pools.append({"pool": pool, "threads": threads, "busy_s": busy,
                      "busy_pct": _pct(busy, threads * wall),
                      "stages": [(m["name"], _pct(float(m["busy_s"]), busy)) for m in ranked]})
    pools.sort(key=lambda p: (-p["busy_pct"], -p["busy_s"] / p["threads"]))
    load, cpus = stats.get("load_avg"), stats.get("cpus")
    return {"wall_s": wall, "wait_s": wait, "wait_pct": _pct(wait, wall),
            "startup_s": startup, "startup_pct": _pct(startup, wall), "pools": pools,
            "remote": any(s["name"] == "fetch" for s in stats.get("stages", [])),
            "load_avg": None if load is None else round(float(load), 1), "cpus": cpus}


def _threads(n: int) -> str:
    return f"{n} thread{'s' if n != 1 else ''}"


def bottleneck_of(stats: Dict[str, Any]) -> Tuple[str, str]:
    """(one-line verdict, category) from the figures of :func:`figures`.

    In order: ``startup`` (the first batch came after half the run or more: the numbers
    measure opening, not streaming); ``consumer`` (the loop waited for batches less than 10% of
    the time); ``<stage>-bound`` (the busiest pool was busy at least 75% of its threads x wall
    time: the stage that took most of its time); ``contended`` (no pool saturated, and the
    machine's load average exceeds its CPUs: other processes hold the cores); ``I/O-bound`` (no
    pool saturated, remote source); ``starved`` (no pool saturated, the loop waited all the
    same); ``unknown``.
    """
    f = figures(stats)
    if f["wall_s"] <= 0:
        return "unknown: the run took no time", "unknown"
    wait = f"the loop waited {f['wait_pct']}% of the time"
    if f["startup_pct"] >= STARTUP_PCT:
        return (f"startup: the first batch came after {f['startup_s']:.3f} s, "
                f"{f['startup_pct']}% of the run; {_ADVICE['startup']}", "startup")
    if f["wait_pct"] < CONSUMER_BOUND_WAIT_PCT:
        return (f"consumer: the loop waited for batches only {f['wait_pct']}% of the time; "
                f"{_ADVICE['consumer']}", "consumer")
    if not f["pools"]:
        return f"unknown: {wait}, and the loader reported no stages", "unknown"
    top = f["pools"][0]
    stage, stage_pct = top["stages"][0]
    verb = "were" if top["pool"].endswith("s") else "was"
    busy = (f"the {top['pool']} ({_threads(top['threads'])}) {verb} busy {top['busy_pct']}% "
            f"of the run")
    if top["busy_pct"] >= SATURATED_PCT:
        of_pool = f", {stage_pct}% of it in '{stage}'" if len(top["stages"]) > 1 else ""
        return (f"{stage}-bound: {busy}{of_pool}; {wait}; "
                f"{_ADVICE.get(stage, _GENERIC_ADVICE)}", f"{stage}-bound")
    if f["load_avg"] is not None and f["cpus"] and f["load_avg"] > f["cpus"]:
        return (f"contended: {wait}, yet no pool was saturated (busiest: {busy}), and the "
                f"load average was {f['load_avg']:.1f} on {f['cpus']} CPUs; "
                f"{_ADVICE['contended']}", "contended")
    category = "I/O-bound" if f["remote"] else "starved"
    return (f"{category}: {wait}, yet no pool was saturated (busiest: {busy}); "
            f"{_ADVICE['I/O' if f['remote'] else 'starved']}", category)


def verdict(stats: Dict[str, Any]) -> str:
    """The report's one-line verdict from ``loader.stats()`` plus the run's ``wall_s`` (and
    ``first_batch_s``/``open_s``): see :func:`bottleneck_of`."""
    return bottleneck_of(stats)[0]


def bottleneck(stats: Dict[str, Any], wall_s: float) -> Tuple[str, str]:
    """(verdict, category) of a run of ``wall_s`` seconds (bench/report.py's entry point)."""
    return bottleneck_of(dict(stats, wall_s=wall_s))


def _uncompressed_bytes_per_row(description) -> float:
    """Uncompressed Parquet bytes per row of the described columns (from the footers)."""
    total = sum(column.uncompressed_bytes for column in description.columns)
    return total / description.rows if description.rows else 0.0


def _batch_rows(batch: Dict[str, Any]) -> int:
    for value in batch.values():
        try:
            return len(value)
        except TypeError:
            continue
    return 0


def run_bench(uri: str, loader_kwargs: Dict[str, Any], batches: Optional[int],
              seconds: Optional[float], step_ms: float = 0.0, progress: bool = True,
              out=print) -> Dict[str, Any]:
    from ._cli_progress import Progress
    from ._describe import describe
    from .loader import Loader

    if batches is None and seconds is None:
        seconds = 10.0
    # The files, footers and column sizes, read once; also a clear error for a bad URI before
    # the engine starts.
    with Progress("stoker bench: reading footers", enabled=progress, tick=True):
        description = describe(uri, **loader_kwargs)
    start = time.perf_counter()
    # An explicit single-process shard unless the options name one: no probing of
    # torch.distributed or RANK for a CLI run.
    kwargs = {"rank": 0, "world_size": 1, **loader_kwargs}
    with Progress("stoker bench: opening", enabled=progress, tick=True):
        loader = Loader(uri, **kwargs)
    open_s = time.perf_counter() - start
    bar = Progress("stoker bench", enabled=progress)
    rows = n = 0
    first = None
    epoch = 0
    deadline = start + seconds if seconds else None
    step_s = step_ms / 1e3
    try:
        done = False
        while not done:
            loader.set_epoch(epoch)
            got_any = False
            for batch in loader:
                got_any = True
                now = time.perf_counter()
                if first is None:
                    first = now - start
                rows += _batch_rows(batch)
                n += 1
                if bar.enabled:
                    done_text = f"{n:,}/{batches:,} batches" if batches else \
                        f"{n:,} batches, {now - start:.1f}/{seconds:g} s"
                    bar.update(f"{done_text}, epoch {epoch}, {rows / (now - start):,.0f} rows/s")
                if step_s:
                    end = time.perf_counter() + step_s
                    while time.perf_counter() < end:
                        pass
                if (batches is not None and n >= batches) or \
                        (deadline is not None and time.perf_counter() >= deadline):
                    done = True
                    break
            if not got_any:
                break  # an epoch with no batches (fewer rows than batch_size with drop_last)
            epoch += 1
        wall = time.perf_counter() - start
        stats = loader.stats()
    finally:
        bar.close()
        loader.close()
    bytes_per_row = _uncompressed_bytes_per_row(description)
    result = {"rows": rows, "batches": n, "epochs_started": epoch + 1, "wall_s": wall,
              "open_s": open_s, "first_batch_s": first, "rows_per_s": rows / wall if wall else 0.0,
              "mb_per_s": rows * bytes_per_row / wall / 1e6 if wall else 0.0,
              "output_mb_per_s": _output_bytes(stats) / wall / 1e6 if wall else 0.0,
              "cache_dir": kwargs.get("cache_dir"), "stats": stats}
    measured = dict(stats, wall_s=wall, open_s=open_s, first_batch_s=first,
                    load_avg=_load_average(), cpus=_cpus())
    result["figures"] = figures(measured)
    result["verdict"], result["bottleneck"] = bottleneck_of(measured)
    out(format_result(result))
    return result


def _load_average() -> Optional[float]:
    """The machine's 1-minute load average at the end of the run (None where unknown)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _output_bytes(stats: Dict[str, Any]) -> int:
    """Bytes of the delivered arrays: what the engine's last stage produced."""
    stages = stats.get("stages", [])
    return int(stages[-1]["bytes"]) if stages else 0


def _cache_line(cache: Dict[str, Any]) -> str:
    hits, misses = int(cache.get("hits", 0)), int(cache.get("misses", 0))
    rate = f" (hit rate {_pct(hits, hits + misses)}%)" if hits + misses else ""
    return (f"  cache    hits {hits:,}, misses {misses:,}{rate}; writes "
            f"{int(cache.get('writes', 0)):,}; read {cache.get('bytes_read', 0) / 1e6:,.1f} MB, "
            f"written {cache.get('bytes_written', 0) / 1e6:,.1f} MB")


def format_result(r: Dict[str, Any]) -> str:
    f = r.get("figures") or figures(dict(r["stats"], wall_s=r["wall_s"], open_s=r["open_s"],
                                         first_batch_s=r["first_batch_s"]))
    first = f"{r['first_batch_s']:.3f} s" if r["first_batch_s"] is not None else "-"
    lines = [f"stoker bench: {r['rows']:,} rows in {r['batches']:,} batches, {r['wall_s']:.2f} s "
             f"(open {r['open_s']:.3f} s, first batch {first}, {f['startup_pct']}% of the run)",
             f"  rows/s   {r['rows_per_s']:,.0f}",
             f"  MB/s     {r['mb_per_s']:,.1f} (uncompressed Parquet), "
             f"{r['output_mb_per_s']:,.1f} (output arrays)"]
    cache = r["stats"].get("cache") or {}
    if r.get("cache_dir") or any(cache.get(k) for k in ("hits", "misses", "writes")):
        lines.append(_cache_line(cache))
    lines.append("  stages (seconds summed over each stage's threads):")
    for st in r["stats"].get("stages", []):
        lines.append(f"    {st['name']:10s} busy {st['busy_s']:8.3f}  "
                     f"wait-in {st['wait_in_s']:8.3f}  "
                     f"wait-out {st['wait_out_s']:8.3f}  items {st['items']:>8,}  "
                     f"{st['bytes'] / 1e6:>10,.1f} MB  ({st['threads']} {st['pool']})")
    lines.append("  pools (busy share of threads x wall time):")
    for p in f["pools"]:
        split = ", ".join(f"{name} {pct}%" for name, pct in p["stages"])
        lines.append(f"    {p['pool']:10s} busy {p['busy_pct']:3d}% of {_threads(p['threads'])}"
                     f"  ({split})")
    lines.append(f"    consumer   waited {f['wait_s']:.3f} s ({f['wait_pct']}% of wall time); "
                 f"peak in flight {r['stats'].get('peak_inflight_bytes', 0) / 2**20:,.1f} MiB")
    if f.get("load_avg") is not None:
        lines.append(f"  machine  load average {f['load_avg']:.1f} on {f['cpus']} CPUs")
    lines.append(f"verdict: {r['verdict']}")
    return "\n".join(lines)
