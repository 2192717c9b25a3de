"""Installs the peers that pip cannot resolve next to torch (see requirements-nodeps.txt)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
NODEPS = os.path.join(HERE, "requirements-nodeps.txt")


def ensure_nodeps_peers(log=print) -> str:
    """Returns '' when every peer imports, else why not (after one `pip install --no-deps`)."""
    if importlib.util.find_spec("petastorm") is not None:
        return ""
    log(f"installing Petastorm without its unresolvable pins: pip install --no-deps -r {NODEPS}")
    try:
        proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "-r", NODEPS],
                              capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"pip install --no-deps -r {NODEPS} failed: {error}"
    if proc.returncode != 0:
        return f"pip install --no-deps -r {NODEPS} failed: {proc.stderr.strip()[-300:]}"
    importlib.invalidate_caches()
    return ""
