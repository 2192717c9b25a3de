"""One module per system. Each exposes ``NAME``, ``WORKLOADS``, ``available() -> str | None``
(None when usable, else the reason), ``config(job) -> dict`` (how it is configured, for the
report) and ``batches(job) -> iterator`` of ``(rows_in_batch, batch)``.

``job`` is a dict: workload, path, batch_size, threads, seed, columns (the roles of
bench.generators.tabular_columns()).
"""

from __future__ import annotations

import importlib
from typing import Dict, List


class Unavailable(Exception):
    """Raised by a runner that finds, once running, that its system cannot run here (an optional
    native library missing): the suite reports it as unavailable with this reason, not a failure."""

ORDER = ["stoker", "stoker_noshuffle", "stoker_fill", "stoker_warm", "petastorm_default", "petastorm_fixed", "torch_dataloader",
         "torchvision_v2", "spdl_io", "dali_cpu", "ray_data", "hf_datasets", "limit", "memory_limit"]
LABELS = {
    "stoker": "stoker",
    "stoker_noshuffle": "stoker (shuffle=False)",
    "stoker_fill": "stoker (filling cache_dir)",
    "stoker_warm": "stoker (warm cache_dir)",
    "petastorm_default": "Petastorm (defaults)",
    "petastorm_fixed": "Petastorm (study's fixes)",
    "torch_dataloader": "PyTorch DataLoader + pyarrow",
    "torchvision_v2": "DataLoader + torchvision decode_jpeg + transforms.v2",
    "spdl_io": "SPDL pipeline",
    "dali_cpu": "DALI CPU pipeline",
    "ray_data": "Ray Data",
    "hf_datasets": "HF datasets",
    "limit": "the limit",
    "memory_limit": "memory limit (NumPy gather)",
}


def load(name: str):
    return importlib.import_module(f"bench.runners.{name}")


def all_runners() -> Dict[str, object]:
    return {name: load(name) for name in ORDER}


def names_for(workload: str) -> List[str]:
    return [n for n in ORDER if workload in load(n).WORKLOADS]
