"""`stoker bench URI [loader options]`: stream the user's dataset with stoker for N batches or
S seconds, then print rows/s, MB/s, the per-stage breakdown from ``loader.stats()`` and a one-line
verdict naming the bottleneck."""

from __future__ import annotations

import time
from typing import Any, Dict, Optional, Tuple

__all__ = ["bottleneck", "run_bench"]

# What to try when a stage limits the loader, by the stage names the engine reports. A stage
# without an entry gets the generic advice: the verdict still names it.
_ADVICE = {
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
}
_GENERIC_ADVICE = "give its pool more threads, or make the stage's work cheaper"
# Below this share of wall time spent waiting for batches, the consumer is the bottleneck.
CONSUMER_BOUND_WAIT = 0.10


def bottleneck(stats: Dict[str, Any], wall_s: float) -> Tuple[str, str]:
    """(one-line verdict, category) from loader.stats() and the wall time of the run.

    The consumer is the bottleneck when it rarely waited for a batch. Otherwise the limiting
    thread pool is the one busiest for the largest share of the run (the busy time of all its
    stages over its threads x wall time, as the engine reports them), and the verdict names the
    stage that took most of that pool's time: category ``"<stage>-bound"``.
    """
    stages: List[Dict[str, Any]] = list(stats.get("stages", []))
    wait = float(stats.get("consumer_wait_s", 0.0))
    if wall_s <= 0:
        return "unknown: the run took no time", "unknown"
    if wait / wall_s < CONSUMER_BOUND_WAIT:
        return (f"consumer: the loop waited for batches only {100 * wait / wall_s:.0f}% of the "
                f"time; {_ADVICE['consumer']}", "consumer")
    pools: Dict[str, List[Dict[str, Any]]] = {}
    for stage in stages:
        pools.setdefault(stage.get("pool") or stage["name"], []).append(stage)
    if not pools:
        return "unknown: the loader reported no stages", "unknown"

    def share(members: List[Dict[str, Any]]) -> float:
        threads = max(1, int(members[0].get("threads") or 1))
        return sum(m["busy_s"] for m in members) / (threads * wall_s)

    pool, members = max(pools.items(), key=lambda item: share(item[1]))
    top = max(members, key=lambda m: m["busy_s"])
    busy = sum(m["busy_s"] for m in members)
    n = max(1, int(members[0].get("threads") or 1))
    of_pool = f", {100 * top['busy_s'] / busy:.0f}% of it in '{top['name']}'" if len(members) > 1 and busy else ""
    return (f"{top['name']}-bound: the {pool} ({n} thread{'s' if n > 1 else ''}) were busy "
            f"{100 * min(share(members), 1.0):.0f}% of the run{of_pool}; the loop waited "
            f"{100 * wait / wall_s:.0f}% of the time; {_ADVICE.get(top['name'], _GENERIC_ADVICE)}",
            f"{top['name']}-bound")


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
    from ._describe import describe
    from .loader import Loader

    # The files, footers and column sizes, read once; also a clear error for a bad URI before
    # the engine starts.
    description = describe(uri, **loader_kwargs)
    if batches is None and seconds is None:
        seconds = 10.0
    start = time.perf_counter()
    # An explicit single-process shard: no probing of torch.distributed or RANK for a CLI run.
    loader = Loader(uri, rank=0, world_size=1, **loader_kwargs)
    open_s = time.perf_counter() - start
    bar = None
    if progress:
        try:
            from tqdm import tqdm

            bar = tqdm(total=batches, unit="batch", desc="stoker bench", leave=False,
                       mininterval=0.25)
        except ImportError:
            bar = None
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
                if first is None:
                    first = time.perf_counter() - start
                rows += _batch_rows(batch)
                n += 1
                if bar is not None:
                    bar.update(1)
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
        if bar is not None:
            bar.close()
        loader.close()
    bytes_per_row = _uncompressed_bytes_per_row(description)
    result = {"rows": rows, "batches": n, "epochs_started": epoch + 1, "wall_s": wall,
              "open_s": open_s, "first_batch_s": first, "rows_per_s": rows / wall if wall else 0.0,
              "mb_per_s": rows * bytes_per_row / wall / 1e6 if wall else 0.0,
              "output_mb_per_s": _output_bytes(stats) / wall / 1e6 if wall else 0.0,
              "stats": stats}
    result["verdict"], result["bottleneck"] = bottleneck(stats, wall)
    out(format_result(result))
    return result


def _output_bytes(stats: Dict[str, Any]) -> int:
    """Bytes of the delivered arrays: what the engine's last stage produced."""
    stages = stats.get("stages", [])
    return int(stages[-1]["bytes"]) if stages else 0


def format_result(r: Dict[str, Any]) -> str:
    first = f"{r['first_batch_s']:.3f} s" if r["first_batch_s"] is not None else "-"
    lines = [f"stoker bench: {r['rows']:,} rows in {r['batches']:,} batches, {r['wall_s']:.2f} s "
             f"(open {r['open_s']:.3f} s, first batch {first})",
             f"  rows/s   {r['rows_per_s']:,.0f}",
             f"  MB/s     {r['mb_per_s']:,.1f} (uncompressed Parquet), "
             f"{r['output_mb_per_s']:,.1f} (output arrays)",
             "  stages (seconds summed over each stage's threads):"]
    for st in r["stats"].get("stages", []):
        lines.append(f"    {st['name']:10s} busy {st['busy_s']:8.3f}  wait-in {st['wait_in_s']:8.3f}  "
                     f"wait-out {st['wait_out_s']:8.3f}  items {st['items']:>8,}  "
                     f"{st['bytes'] / 1e6:>10,.1f} MB  ({st['threads']} {st['pool']})")
    wait = r["stats"].get("consumer_wait_s", 0.0)
    share = 100 * wait / r["wall_s"] if r["wall_s"] else 0.0
    lines.append(f"    consumer   waited {wait:.3f} s ({share:.0f}% of wall time); peak in flight "
                 f"{r['stats'].get('peak_inflight_bytes', 0) / 2**20:,.1f} MiB")
    lines.append(f"verdict: {r['verdict']}")
    return "\n".join(lines)
