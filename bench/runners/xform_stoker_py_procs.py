"""stoker ``transform=`` in ``python_workers`` processes (one per core)."""

from __future__ import annotations

from . import xform_stoker_py as threads
from .xform_stoker_plain import available  # noqa: F401

NAME = "xform_stoker_py_procs"
WORKLOADS = ("tabular-xform",)


def config(job):
    return threads.config(job, python_workers=job["threads"])


def batches(job):
    return threads.batches(job, python_workers=job["threads"])
