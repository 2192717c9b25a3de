"""Contract 4: a slow consumer never grows memory past prefetch_bytes + one window + a margin,
and the peak RSS stays within the formula of docs/user-guide.md ("Memory")."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stoker_testdata import jpeg_bytes, write_wide_dataset

MiB = 1 << 20


@pytest.fixture(scope="module")
def big_dataset(tmp_path_factory):
    # 48 row groups of ~5 MiB decoded: ~250 MiB, far above the 16 MiB prefetch budget.
    root = str(tmp_path_factory.mktemp("memory"))
    write_wide_dataset(root, files=4, rows_per_file=80_000, columns=16, row_group_size=20_000)
    return root


def test_slow_consumer_stays_within_budget(big_dataset):
    script = textwrap.dedent(f"""
        import resource, time
        import numpy as np
        import stoker

        def rss_mib():
            with open("/proc/self/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) / 1024

        loader = stoker.Loader({big_dataset!r}, batch_size=2048, seed=0,
                               prefetch_bytes="16MiB", shuffle_window=20_000, num_threads=2)
        # Warm up: one batch, so libraries and pools exist before the baseline.
        it = iter(loader)
        next(it)
        base = rss_mib()
        peak = base
        rows = 0
        for batch in it:
            rows += len(batch["id"])
            time.sleep(0.002)  # slower than the workers
            peak = max(peak, rss_mib())
        print(rows, base, peak, loader.stats()["peak_inflight_bytes"])
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=240)
    assert result.returncode == 0, result.stderr
    rows, base, peak, inflight = result.stdout.split()
    rows, base, peak, inflight = int(rows), float(base), float(peak), int(inflight)
    assert rows > 300_000
    window_mib = 20_000 * 17 * 4 / MiB  # rows x decoded row bytes
    budget_mib = 16 + window_mib + 100  # prefetch + window + fixed margin (pools, slabs)
    assert peak - base < budget_mib, (base, peak, budget_mib)
    # The engine's own accounting: in flight stays within prefetch plus one task.
    assert inflight <= 16 * MiB + 2 * MiB


# ------------------------------------------------------------------ the peak RSS formula
#
# docs/user-guide.md, "Memory": with a consumer slower than the loader,
#
#   peak RSS - baseline <= prefetch_bytes + num_threads * (task_decoded + task_read)
#                          + 2 * (window_rows + row_group_rows) * row_bytes
#                          + (num_threads + 2 + held) * 1.125 * batch_bytes
#                          + prefetch_bytes / 4
#                          + 16 MiB + 16 MiB * num_threads
#
# Each term comes from the loader's own options and stats (decode stage bytes per task) and the
# footers (task_read). The last line is the allowance for the allocator (Arrow's mimalloc keeps
# freed pages per thread for a while), thread stacks and Python objects, measured on this machine
# at up to 11 MiB per worker; it is the test's margin. The peak is the kernel's high-water mark
# (VmHWM, reset once the loader is open), not a sample, so it does not depend on when the test
# looks; every other term is a bound that holds whatever the timing.

PROBE = textwrap.dedent("""
    import json, sys, time
    import numpy as np
    import stoker

    def status(key):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1]) * 1024

    source, options, pause = json.loads(sys.argv[1])
    loader = stoker.Loader(source, **options)
    base = status("VmRSS")  # interpreter, libraries, footers
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # the high-water mark restarts here
        sampled = False
    except OSError:
        sampled = True  # no clear_refs: sample after every batch instead
    peak, batch_bytes = base, 0
    for batch in loader:  # holds this batch and, until it is assigned, the previous one
        batch_bytes = max(batch_bytes, sum(np.asarray(v).nbytes for v in batch.values()))
        time.sleep(pause)  # slower than the workers: every queue fills up
        if sampled:
            peak = max(peak, status("VmRSS"))
    if not sampled:
        peak = status("VmHWM")
    stats = loader.stats()
    decode = next(s for s in stats["stages"] if s["name"] == "decode")
    print(json.dumps(dict(base=base, peak=peak, batch_bytes=batch_bytes,
                          decode_bytes=decode["bytes"], decode_items=decode["items"],
                          peak_inflight=stats["peak_inflight_bytes"],
                          window_rows=loader.shuffle_window_rows, num_rows=loader.num_rows)))
""")


def _peak_and_formula(source, options, pause, row_group_rows, task_read):
    result = subprocess.run([sys.executable, "-c", PROBE, json.dumps([source, options, pause])],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    m = json.loads(result.stdout)
    threads, prefetch, held = options["num_threads"], options["prefetch_bytes"], 2
    task_decoded = m["decode_bytes"] / m["decode_items"]  # one task per row group here
    row_bytes = task_decoded / row_group_rows
    window_rows = min(m["window_rows"], m["num_rows"])
    terms = {
        "decoding": prefetch + threads * (task_decoded + task_read),
        "windows": 2 * (window_rows + row_group_rows) * row_bytes,
        "slabs": (threads + 2 + held) * 1.125 * m["batch_bytes"],
        "recycled": prefetch / 4,
        "allocator": 16 * MiB + 16 * MiB * threads,
    }
    # The engine's own accounting: in flight within prefetch plus each worker's task growth.
    assert m["peak_inflight"] <= prefetch + threads * task_decoded, (m, terms)
    return m["peak"] - m["base"], terms


def _report(rss, terms):
    return (f"peak RSS over baseline {rss / MiB:.1f} MiB, formula {sum(terms.values()) / MiB:.1f}"
            f" MiB: " + ", ".join(f"{k} {v / MiB:.1f}" for k, v in terms.items()))


def _task_read(path, columns, row_group=0):
    meta = pq.ParquetFile(path).metadata.row_group(row_group)
    return sum(meta.column(i).total_uncompressed_size for i in range(meta.num_columns)
               if meta.column(i).path_in_schema in columns)


def test_peak_rss_within_the_formula_wide_table(big_dataset):
    options = dict(batch_size=2048, seed=0, prefetch_bytes=16 * MiB, shuffle_window=20_000,
                   num_threads=2)
    columns = ["id"] + [f"c{c}" for c in range(16)]
    rss, terms = _peak_and_formula(big_dataset, options, 0.005, 20_000,
                                   _task_read(os.path.join(big_dataset, "part-0.parquet"),
                                              columns))
    print(_report(rss, terms))
    assert rss <= sum(terms.values()), _report(rss, terms)


@pytest.fixture(scope="module")
def image_dataset(tmp_path_factory):
    # 1,600 JPEGs of 256 x 256 (about 30 KB each, 196,608 bytes decoded) in row groups of 100.
    root = str(tmp_path_factory.mktemp("memory_images"))
    rng = np.random.default_rng(0)
    images = [jpeg_bytes(rng, 256, 256) for _ in range(32)]
    rows = 1600
    pq.write_table(pa.table({"id": np.arange(rows, dtype=np.int64),
                             "image": pa.array([images[i % 32] for i in range(rows)],
                                               pa.binary())}),
                   os.path.join(root, "images.parquet"), row_group_size=100)
    return root


def test_peak_rss_within_the_formula_images(image_dataset):
    options = dict(batch_size=32, seed=0, prefetch_bytes=16 * MiB, shuffle_window=300,
                   num_threads=2, columns=["id", "image"],
                   transforms={"image": [{"op": "decode_image"},
                                         {"op": "resize", "size": [256, 256]}]})
    rss, terms = _peak_and_formula(image_dataset, options, 0.1, 100,
                                   _task_read(os.path.join(image_dataset, "images.parquet"),
                                              ["id", "image"]))
    print(_report(rss, terms))
    assert rss <= sum(terms.values()), _report(rss, terms)
    # The windows dominate: the formula is not just a large allowance.
    assert terms["windows"] > 0.3 * rss, _report(rss, terms)
