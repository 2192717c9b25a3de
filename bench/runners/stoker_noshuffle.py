"""stoker with ``shuffle=False``: the same work as the peers, which shuffle row-group order at
most and never rows. Everything else as in the ``stoker`` runner."""

from __future__ import annotations

from . import stoker as _base

NAME = "stoker_noshuffle"
WORKLOADS = _base.WORKLOADS
available = _base.available
stats = _base.stats


def _job(job):
    return {**job, "shuffle": False}


def config(job):
    conf = _base.config(_job(job))
    conf.pop("shuffle_window", None)
    return conf


def batches(job):
    return _base.batches(job, shuffle=False)
