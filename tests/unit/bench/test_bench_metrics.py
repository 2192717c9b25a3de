"""bench/metrics.py: what its measurements leave out of the clock."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def test_psutil_is_imported_with_the_module_not_on_a_measurements_clock():
    # consume() starts its clock, then RssSampler takes its first sample: importing psutil there
    # (about 40 ms) was half of the matrix's 200,000-row warm epoch.
    pytest.importorskip("psutil")
    code = "import sys; import bench.metrics; print('psutil' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": ROOT})
    assert out.stdout.strip() == "True"
