"""Contract 4: a slow consumer never grows memory past prefetch_bytes + one window + a margin."""

import os
import subprocess
import sys
import textwrap

import pytest

from stoker_testdata import write_wide_dataset

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
