"""Soak test: epochs with random resumes, breaks and cache evictions for a given time, watching
the process's resources. Not part of `make test` or CI; run with `make soak`.

Each round opens a fresh loader (every 8th round) or reuses one, then runs a full epoch, a resumed
epoch (load_state_dict at a random batch) or a partial one (break at a random batch), through a
cache much smaller than the decoded dataset (so entries are evicted all the time); now and then
the cache is cleared. After every round it samples RSS (/proc/self/status), threads
(/proc/self/task) and open descriptors (/proc/self/fd). It fails (exit 1) when, after the warm-up,
the threads or descriptors ever exceed the warm-up's maximum, or RSS ends more than
`RSS_TOLERANCE` above it. Every full epoch must deliver each row exactly once, and a resumed
epoch exactly the rest.

Environment: SOAK_SECONDS (default 600), SOAK_SEED (default 1), SOAK_REPORT (a path: the JSON
summary is written there too).
"""

from __future__ import annotations

import json
import os
import random
import statistics
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import stoker

ROWS_PER_FILE = 40000
FILES = 6
COLUMNS = 12
BATCH = 512
CACHE_BYTES = 8 << 20  # the decoded dataset is ~13 MiB: constant eviction
RSS_TOLERANCE = 64 << 20  # bytes above the warm-up maximum
WARMUP_FRACTION = 0.15


def write_dataset(root: str) -> int:
    rng = np.random.default_rng(0)
    for f in range(FILES):
        data = {"id": np.arange(f * ROWS_PER_FILE, (f + 1) * ROWS_PER_FILE, dtype=np.int64)}
        for c in range(COLUMNS):
            data[f"c{c}"] = rng.standard_normal(ROWS_PER_FILE).astype(np.float32)
        data["tokens"] = pa.array([list(range(i % 7)) for i in range(ROWS_PER_FILE)],
                                  pa.list_(pa.int32()))
        pq.write_table(pa.table(data), os.path.join(root, f"part-{f}.parquet"),
                       row_group_size=5000)
    return FILES * ROWS_PER_FILE


def sample() -> dict:
    rss = 0
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
    return {"rss": rss, "threads": len(os.listdir("/proc/self/task")),
            "fds": len(os.listdir("/proc/self/fd"))}


def main() -> int:
    seconds = float(os.environ.get("SOAK_SECONDS", "600"))
    rng = random.Random(int(os.environ.get("SOAK_SEED", "1")))
    work = tempfile.mkdtemp(prefix="stoker-soak-")
    data_dir, cache_dir = os.path.join(work, "data"), os.path.join(work, "cache")
    os.makedirs(data_dir)
    rows = write_dataset(data_dir)
    options = dict(columns=["id", "tokens"], features=[f"c{c}" for c in range(COLUMNS)],
                   batch_size=BATCH, drop_last=False, shuffle_window=20000, num_threads=2,
                   seed=3, lists="padded", prefetch_bytes="16MiB", cache_dir=cache_dir,
                   cache_bytes=CACHE_BYTES, cache_min_free_bytes=0)

    start = time.monotonic()
    samples = []
    counts = {"full": 0, "resumed": 0, "partial": 0, "fresh_loaders": 0, "clears": 0,
              "batches": 0}
    evictions = 0
    loader = None
    round_ = 0
    failures = []
    while time.monotonic() - start < seconds:
        if loader is None or round_ % 8 == 0:
            if loader is not None:
                evictions += loader.stats()["cache"]["evictions"]
                loader.close()
            loader = stoker.Loader(data_dir, **options)
            counts["fresh_loaders"] += 1
        n = len(loader)
        kind = rng.choice(["full", "resumed", "partial"])
        if kind == "resumed":
            at = rng.randrange(0, n)
            state = loader.state_dict()
            loader.load_state_dict({**state, "batch": at})
            got = sum(1 for _ in loader)
            if got != n - at:
                failures.append(f"round {round_}: resumed at {at} gave {got} of {n - at} batches")
            counts["batches"] += got
        elif kind == "partial":
            stop = rng.randrange(1, n)
            for i, _ in enumerate(loader):
                if i + 1 == stop:
                    break
            counts["batches"] += stop
        else:
            ids = np.concatenate([np.asarray(b["id"]) for b in loader])
            if ids.size != rows or np.unique(ids).size != rows:
                failures.append(f"round {round_}: a full epoch gave {ids.size} rows, "
                                f"{np.unique(ids).size} distinct, of {rows}")
            counts["batches"] += n
        counts[kind] += 1
        if rng.random() < 0.05:
            stoker.clear_cache(cache_dir)
            counts["clears"] += 1
        s = sample()
        s["t"] = round(time.monotonic() - start, 1)
        samples.append(s)
        round_ += 1
    if loader is not None:
        evictions += loader.stats()["cache"]["evictions"]
        loader.close()

    warm = [s for s in samples if s["t"] <= seconds * WARMUP_FRACTION] or samples[:1]
    rest = samples[len(warm):] or samples[-1:]
    limit = {k: max(s[k] for s in warm) for k in ("rss", "threads", "fds")}
    last = samples[-5:]
    summary = {
        "seconds": round(time.monotonic() - start, 1), "rounds": round_, **counts,
        "cache_evictions": evictions,
        "warmup_max": limit,
        "after_warmup_max": {k: max(s[k] for s in rest) for k in ("rss", "threads", "fds")},
        "final_rss_median_of_last_5": int(statistics.median(s["rss"] for s in last)),
        "first": samples[0] if samples else None, "last": samples[-1] if samples else None,
    }
    if max(s["threads"] for s in rest) > limit["threads"]:
        failures.append(f"threads grew: {summary['after_warmup_max']['threads']} > "
                        f"{limit['threads']}")
    if max(s["fds"] for s in rest) > limit["fds"]:
        failures.append(f"open fds grew: {summary['after_warmup_max']['fds']} > {limit['fds']}")
    if summary["final_rss_median_of_last_5"] > limit["rss"] + RSS_TOLERANCE:
        failures.append(f"RSS grew: {summary['final_rss_median_of_last_5'] >> 20} MiB > "
                        f"{limit['rss'] >> 20} MiB + {RSS_TOLERANCE >> 20} MiB")
    summary["failures"] = failures
    # A coarse trace: one sample per tenth of the run.
    step = max(1, len(samples) // 10)
    summary["trace"] = [{"t": s["t"], "rss_mib": round(s["rss"] / 2**20, 1),
                         "threads": s["threads"], "fds": s["fds"]} for s in samples[::step]]
    text = json.dumps(summary, indent=1)
    print(text)
    if os.environ.get("SOAK_REPORT"):
        with open(os.environ["SOAK_REPORT"], "w") as f:
            f.write(text + "\n")
    import shutil
    shutil.rmtree(work, ignore_errors=True)
    print("SOAK " + ("FAILED: " + "; ".join(failures) if failures else "OK"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
