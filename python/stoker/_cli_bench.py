"""`stoker bench URI [loader options]`: stream the user's dataset with stoker for N batches or
S seconds, then print rows/s, MB/s, the per-stage breakdown from ``loader.stats()`` and a one-line
verdict naming the bottleneck."""

from __future__ import annotations

import time
from typing import Any, Dict, Optional, Tuple

__all__ = ["bottleneck", "run_bench", "stage_category"]

# Stage names (loader.stats()["stages"]) -> what limits the loader when that stage is saturated.
_CATEGORIES = (
    (("io", "fetch", "read", "download", "prefetch"), "I/O-bound"),
    (("decode", "decompress", "parse"), "decode-bound"),
    (("transform", "batch", "assemble", "collate", "augment", "image", "convert"), "transform-bound"),
)
_ADVICE = {
    "I/O-bound": "storage cannot deliver faster: more num_io_threads, a closer or faster store, "
                 "or a local cache",
    "decode-bound": "decompression and conversion use every worker: more num_threads/cores, a "
                    "cheaper codec (lz4/snappy over zstd/gzip), or fewer columns",
    "transform-bound": "assembling batches (one thread gathering rows into the batch arrays) "
                       "is the slowest step: fewer separate columns (stack them as features), a "
                       "smaller shuffle_window or shuffle=False (sequential gathers), larger "
                       "batches, or a cheaper list mode",
    "consumer": "the loader is ahead: your training step is the bottleneck, the accelerator "
                "does not wait for data",
}
# Below this share of wall time spent waiting for batches, the consumer is the bottleneck.
CONSUMER_BOUND_WAIT = 0.10


def stage_category(name: str) -> str:
    lower = name.lower()
    for keys, category in _CATEGORIES:
        if any(key in lower for key in keys):
            return category
    return "transform-bound"


def bottleneck(stats: Dict[str, Any], wall_s: float, num_threads: Optional[int] = None,
               num_io_threads: Optional[int] = None) -> Tuple[str, str]:
    """(one-line verdict, category) from loader.stats() and the wall time of the run.

    The consumer is the bottleneck when it rarely waited for a batch. Otherwise the limiting
    stage is the one whose threads were busy for the largest share of the run: its busy time
    divided by (its thread count x wall time). Decode stages run on ``num_threads`` workers
    (default: the cores), I/O stages on ``num_io_threads`` (default: max(4, num_threads)), the
    others (sequencing, batch assembly) on one thread.
    """
    import os

    stages = stats.get("stages", {})
    wait = float(stats.get("consumer_wait_s", 0.0))
    if wall_s <= 0:
        return "unknown: the run took no time", "unknown"
    if wait / wall_s < CONSUMER_BOUND_WAIT:
        return (f"consumer: the loop waited for batches only {100 * wait / wall_s:.0f}% of the "
                f"time; {_ADVICE['consumer']}", "consumer")
    workers = num_threads or os.cpu_count() or 1
    io_workers = num_io_threads or max(4, workers)
    threads = {"I/O-bound": io_workers, "decode-bound": workers, "transform-bound": 1}
    best, best_share = None, -1.0
    for name, st in stages.items():
        share = st["busy_s"] / (threads[stage_category(name)] * wall_s)
        if share > best_share:
            best, best_share = name, share
    if best is None:
        return "unknown: the loader reported no stages", "unknown"
    category = stage_category(best)
    n = threads[category]
    return (f"{category}: stage '{best}' was busy {100 * min(best_share, 1.0):.0f}% of the run on "
            f"{n} thread{'s' if n > 1 else ''}; the loop waited {100 * wait / wall_s:.0f}% of the "
            f"time; {_ADVICE[category]}", category)


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
    result["verdict"], result["bottleneck"] = bottleneck(
        stats, wall, loader_kwargs.get("num_threads"), loader_kwargs.get("num_io_threads"))
    out(format_result(result))
    return result


def _output_bytes(stats: Dict[str, Any]) -> int:
    stages = stats.get("stages", {})
    for name in ("batch", "assemble"):
        if name in stages:
            return int(stages[name]["bytes"])
    return 0


def format_result(r: Dict[str, Any]) -> str:
    first = f"{r['first_batch_s']:.3f} s" if r["first_batch_s"] is not None else "-"
    lines = [f"stoker bench: {r['rows']:,} rows in {r['batches']:,} batches, {r['wall_s']:.2f} s "
             f"(open {r['open_s']:.3f} s, first batch {first})",
             f"  rows/s   {r['rows_per_s']:,.0f}",
             f"  MB/s     {r['mb_per_s']:,.1f} (uncompressed Parquet), "
             f"{r['output_mb_per_s']:,.1f} (output arrays)",
             "  stages (seconds summed over each stage's threads):"]
    for name, st in r["stats"].get("stages", {}).items():
        lines.append(f"    {name:10s} busy {st['busy_s']:8.3f}  wait-input {st['wait_input_s']:8.3f}  "
                     f"wait-output {st['wait_output_s']:8.3f}  items {st['items']:>8,}  "
                     f"{st['bytes'] / 1e6:>10,.1f} MB")
    wait = r["stats"].get("consumer_wait_s", 0.0)
    share = 100 * wait / r["wall_s"] if r["wall_s"] else 0.0
    lines.append(f"    consumer   waited {wait:.3f} s ({share:.0f}% of wall time); peak in flight "
                 f"{r['stats'].get('peak_inflight_bytes', 0) / 2**20:,.1f} MiB")
    lines.append(f"verdict: {r['verdict']}")
    return "\n".join(lines)
