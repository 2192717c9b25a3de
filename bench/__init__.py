"""stoker's benchmark harness: seeded workloads, one runner per system, side-by-side report.

Run ``python -m bench --quick`` (``make bench``), ``--smoke`` (seconds, for CI) or ``--full``.
The protocol is shared/BENCHMARKS.md: same files, same run, medians of repeats, ratios.
"""

PROFILES = ("smoke", "quick", "full")
