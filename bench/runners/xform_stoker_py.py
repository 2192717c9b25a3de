"""stoker ``transform=`` running the peers' numpy code in the engine's worker threads."""

from __future__ import annotations

from ._xform_common import columns, numpy_transform
from .xform_stoker_plain import available  # noqa: F401

NAME = "xform_stoker_py"
WORKLOADS = ("tabular-xform",)
PYTHON_WORKERS = 0


def options(job, python_workers=PYTHON_WORKERS):
    return dict(transform=numpy_transform, transform_columns=columns(),
                columns=["features", "ids", "tags", "tags_lengths", "label"],
                python_workers=python_workers, batch_size=job["batch_size"], seed=job["seed"],
                drop_last=False, num_threads=job["threads"], output="torch", rank=0, world_size=1)


def config(job, python_workers=PYTHON_WORKERS):
    return {"api": "stoker.Loader(transform=numpy_transform)",
            "transform": "bench/runners/_xform_common.py numpy_transform, per row group",
            **{k: v for k, v in options(job, python_workers).items()
               if k not in ("transform", "transform_columns", "columns")}}


def batches(job, python_workers=PYTHON_WORKERS):
    import stoker

    with stoker.Loader(job["path"], **options(job, python_workers)) as loader:
        for batch in loader:
            yield len(batch["label"]), batch
