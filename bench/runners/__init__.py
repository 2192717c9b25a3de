"""One module per system. Each exposes ``NAME``, ``WORKLOADS``, ``available() -> str | None``
(None when usable, else the reason), ``config(job) -> dict`` (how it is configured, for the
report) and ``batches(job) -> iterator`` of ``(rows_in_batch, batch)``.

``job`` is a dict: workload, path, batch_size, threads, seed, columns (the roles of
bench.generators.tabular_columns()).
"""

from __future__ import annotations

import importlib
from typing import Dict, List

ORDER = ["stoker", "stoker_noshuffle", "petastorm_default", "petastorm_fixed", "torch_dataloader", "ray_data",
         "hf_datasets", "limit"]
LABELS = {
    "stoker": "stoker",
    "stoker_noshuffle": "stoker (shuffle=False)",
    "petastorm_default": "Petastorm (defaults)",
    "petastorm_fixed": "Petastorm (study's fixes)",
    "torch_dataloader": "PyTorch DataLoader + pyarrow",
    "ray_data": "Ray Data",
    "hf_datasets": "HF datasets",
    "limit": "the limit",
}


def load(name: str):
    return importlib.import_module(f"bench.runners.{name}")


def all_runners() -> Dict[str, object]:
    return {name: load(name) for name in ORDER}


def names_for(workload: str) -> List[str]:
    return [n for n in ORDER if workload in load(n).WORKLOADS]
