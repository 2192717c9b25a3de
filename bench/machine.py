"""The machine and library versions, recorded with every report."""

from __future__ import annotations

import os
import platform
from importlib import metadata

PACKAGES = ["stoker", "pyarrow", "numpy", "torch", "petastorm", "pandas", "ray", "datasets",
            "pillow", "matplotlib", "psutil"]


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0


def versions() -> dict:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_state() -> dict:
    """The commit measured, and how many engine/package files differed from it (an editable
    install runs the working tree)."""
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, text=True,
                                capture_output=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "cpp", "python", "CMakeLists.txt"],
                               cwd=root, text=True, capture_output=True, timeout=10).stdout.split("\n")
        return {"commit": commit or None, "uncommitted_engine_files": len([d for d in dirty if d.strip()])}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "uncommitted_engine_files": None}


def describe() -> dict:
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    return {"cores": os.cpu_count(), "cpu_model": cpu_model(), "memory_bytes": memory_bytes(),
            "platform": platform.platform(), "load_average_at_start": load, "git": git_state(),
            "versions": versions()}
