"""What the benchmark smoke tests share: a bench module run end to end in a subprocess on tiny
data, and the checks every row of the study's table must pass."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STUDY_SYSTEMS = {"petastorm_default", "petastorm_study", "torch_dataloader", "stoker",
                 "stoker_cache"}


def run_bench(module: str, tmp_path: pathlib.Path, *args: str,
              timeout: float = 390) -> pathlib.Path:
    """Runs ``python -m <module> <args> --data-dir <tmp>/data --out-dir <tmp>/out`` from the
    repository root (killed after `timeout` seconds), asserts it succeeded (its output tails
    otherwise) and returns the out dir."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(
        [sys.executable, "-m", module, *args,
         "--data-dir", str(tmp_path / "data"), "--out-dir", str(tmp_path / "out")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return tmp_path / "out"


def check_study_systems(report: dict) -> None:
    """Every system of a 2-epoch study ran: an epoch time per epoch, busy a fraction, and stoker
    delivers every row of every epoch (it never ends an epoch early)."""
    assert set(report["systems"]) == STUDY_SYSTEMS
    for name, system in report["systems"].items():
        assert system["status"] == "ok", (name, system)
        assert len(system["epoch_s"]) == 2 and 0 <= system["busy"] <= 1
        if name.startswith("stoker"):  # stoker never ends an epoch early
            assert system["rows"] == [report["rows"]] * 2
