"""``python -m bench.fill_stability``: does filling the cache ever slow the epoch (issue 26)?

The filling epoch (a fresh ``cache_dir``) against the epoch without a cache, on the matrix's wide
shape at a size whose entries are several hundred MB, ``--runs`` times each, alternating which of
the two goes first. Each epoch runs in a fresh process; the clock covers the loader's construction
and every batch, as in the matrix (``bench.matrix``); ``close()`` is timed apart, and so is the
process's CPU time. While an epoch runs, a thread samples ``/proc/vmstat`` (``nr_dirty``,
``nr_writeback``) and ``/proc/meminfo`` (``Dirty``) every 20 ms, and the system call each other
thread of the process sleeps in uninterruptibly (``D``): the kernel's dirty-page throttling
(``balance_dirty_pages``) puts a writer that dirties pages faster than the disk drains them to
sleep inside ``writev``.

Every ratio is reported, with min / median / max: the issue asks for the spread, not the best.

``--dirty-bytes N`` sets ``/proc/sys/vm/dirty_bytes`` to N (and ``dirty_background_bytes`` to N/2)
for the measurement and restores both afterwards: a machine with less memory throttles at a few
hundred MB of dirty pages, which this one (24 GB) reaches only at ~4 GB. Needs root.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

from .jobs import MARKER, run_job

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
# One epoch in a fresh process: run_job(job, **CHILD) (a failed child raises).
CHILD = dict(module="bench.fill_stability", flag="--child", timeout=600, check=True)


def _vm() -> dict:
    out = {}
    with open("/proc/vmstat") as f:
        for line in f:
            k, v = line.split()
            if k in ("nr_dirty", "nr_writeback"):
                out[k] = int(v) * 4096
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("Dirty:"):
                out["meminfo_dirty"] = int(line.split()[1]) * 1024
    return out


# x86_64 numbers of the system calls a cache fill may sleep in.
_SYSCALLS = {0: "read", 1: "write", 17: "pread64", 20: "writev", 82: "rename", 257: "openat",
             277: "sync_file_range", 285: "fallocate", 75: "fdatasync", 74: "fsync",
             72: "fcntl", 73: "flock", 2: "open"}


def _blocked() -> list:
    """The system calls in which threads of this process (other than the caller) sleep
    uninterruptibly now ('D': disk I/O, the dirty-page throttle, a journal wait)."""
    out = []
    me = str(threading.get_native_id())
    for tid in os.listdir("/proc/self/task"):
        if tid == me:
            continue
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
            if state != "D":
                continue
            with open(f"/proc/self/task/{tid}/syscall") as f:
                nr = f.read().split()[0]
        except (OSError, IndexError):
            continue
        out.append(_SYSCALLS.get(int(nr), nr) if nr.lstrip("-").isdigit() else nr)
    return out


class VmSampler:
    """Peaks of the dirty-page counters, and in which system calls the threads of this process
    slept uninterruptibly, per sample (the dirty-page throttle, ``balance_dirty_pages``, sleeps
    in the writer's ``writev``)."""

    def __init__(self, interval: float = 0.02) -> None:
        self.interval = interval
        self.peak = {}
        self.samples = 0
        self.wchan = {}
        self.start = _vm()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            for k, v in _vm().items():
                self.peak[k] = max(self.peak.get(k, 0), v)
            self.samples += 1
            for w in _blocked():
                self.wchan[w] = self.wchan.get(w, 0) + 1

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def child(job: dict) -> dict:
    """One epoch, in this process."""
    import stoker

    sys.path.insert(0, REPO)
    from bench import matrix_shapes as ms

    shape = ms.BY_NAME["wide"]
    opts = ms.stoker_options(shape, job["threads"], seed=7)
    cache_dir = None
    if job["variant"] == "fill":
        cache_dir = opts["cache_dir"] = tempfile.mkdtemp(prefix="stoker-fill-", dir=job["cache_root"])
    rows = 0
    with VmSampler() as vm:
        t0 = time.perf_counter()
        c0 = time.process_time()
        loader = stoker.Loader(job["path"], **opts)
        for batch in loader:
            rows += len(batch[shape.count])
        wall = time.perf_counter() - t0
        cpu = time.process_time() - c0
        stats = loader.stats()
        t1 = time.perf_counter()
        loader.close()
        close_s = time.perf_counter() - t1
    if cache_dir:
        shutil.rmtree(cache_dir, ignore_errors=True)
    cache = stats.get("cache", {})
    return {"variant": job["variant"], "rows": rows, "wall_s": wall, "cpu_s": cpu, "close_s": close_s,
            "vm_start": vm.start, "vm_peak": vm.peak, "samples": vm.samples, "wchan": vm.wchan,
            "cache": {k: cache.get(k) for k in ("misses", "writes", "write_skipped", "bytes_written",
                                                "write_throttled")}}


def _set_dirty(dirty_bytes: int):
    names = ("dirty_bytes", "dirty_background_bytes", "dirty_ratio", "dirty_background_ratio")
    saved = {}
    for n in names:
        with open(f"/proc/sys/vm/{n}") as f:
            saved[n] = f.read().strip()
    with open("/proc/sys/vm/dirty_bytes", "w") as f:
        f.write(str(dirty_bytes))
    with open("/proc/sys/vm/dirty_background_bytes", "w") as f:
        f.write(str(dirty_bytes // 2))
    return saved


def _restore_dirty(saved: dict) -> None:
    # A ratio written back resets its *_bytes twin to 0 (and the other way round): restore the one
    # that was in force (non-zero) last.
    for base in ("dirty", "dirty_background"):
        if int(saved[f"{base}_bytes"]) > 0:
            value, name = saved[f"{base}_bytes"], f"{base}_bytes"
        else:
            value, name = saved[f"{base}_ratio"], f"{base}_ratio"
        with open(f"/proc/sys/vm/{name}", "w") as f:
            f.write(value)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fill_stability", description=__doc__)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--rows", type=int, default=480_000,
                        help="rows of the wide set (1,200 B of entry per row; default 480,000)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--data-dir", default=os.path.join(tempfile.gettempdir(), "stoker-fill-data"))
    parser.add_argument("--cache-root", default=tempfile.gettempdir(),
                        help="where the filling epochs make their cache_dir (same disk as the data)")
    parser.add_argument("--dirty-bytes", type=int, default=0)
    parser.add_argument("--label", default="")
    parser.add_argument("--json", help="append the result to this file")
    args = parser.parse_args(argv)
    if args.child:
        print(MARKER + json.dumps(child(json.loads(args.child))), flush=True)
        return 0

    sys.path.insert(0, REPO)
    from bench import matrix_shapes as ms

    shape = dataclasses.replace(ms.BY_NAME["wide"], rows=args.rows)
    os.makedirs(args.data_dir, exist_ok=True)
    path = ms.ensure(shape, args.data_dir)
    data_bytes = sum(os.path.getsize(p) for p in ms.files(path))
    print(f"dataset {path}: {data_bytes / 1e6:.0f} MB of Parquet, "
          f"~{args.rows * (ms.WIDE_F * 4 + 8) / 1e6:.0f} MB of entries", flush=True)
    saved = _set_dirty(args.dirty_bytes) if args.dirty_bytes else None
    runs = []
    try:
        job = {"path": path, "threads": args.threads, "cache_root": args.cache_root}
        run_job({**job, "variant": "none"}, **CHILD)  # warms the page cache with the dataset
        for i in range(args.runs):
            order = ("none", "fill") if i % 2 == 0 else ("fill", "none")
            pair = {v: run_job({**job, "variant": v}, **CHILD) for v in order}
            ratio = pair["none"]["wall_s"] / pair["fill"]["wall_s"]
            f = pair["fill"]
            peak = f["vm_peak"]
            print(f"run {i + 1}: none {pair['none']['wall_s']:.2f} s, fill {f['wall_s']:.2f} s "
                  f"(close {f['close_s']:.2f} s) -> fill/none {ratio:.2f}; writes "
                  f"{f['cache']['writes']}, skipped {f['cache']['write_skipped']}, peak dirty "
                  f"{peak.get('nr_dirty', 0) / 1e6:.0f} MB, writeback "
                  f"{peak.get('nr_writeback', 0) / 1e6:.0f} MB; cpu none {pair['none']['cpu_s']:.1f} s, "
                  f"fill {f['cpu_s']:.1f} s; load {os.getloadavg()[0]:.1f}; blocked (D) in "
                  f"{f['wchan']} of {f['samples']} samples", flush=True)
            runs.append({"none": pair["none"], "fill": f, "ratio": ratio})
    finally:
        if saved:
            _restore_dirty(saved)
    ratios = [r["ratio"] for r in runs]
    summary = {"label": args.label, "rows": args.rows, "threads": args.threads,
               "dirty_bytes": args.dirty_bytes, "ratios": ratios, "min": min(ratios),
               "median": statistics.median(ratios), "max": max(ratios),
               "load_after": os.getloadavg()[0], "runs": runs}
    print(f"fill/none over {len(ratios)} runs: " + ", ".join(f"{r:.2f}" for r in ratios) +
          f" (min {min(ratios):.2f}, median {statistics.median(ratios):.2f}, max {max(ratios):.2f})")
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(summary) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
