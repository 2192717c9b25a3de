"""Keyword arguments a loader does not take: the nearest parameter, or stoker's equivalent of a
``torch.utils.data.DataLoader`` argument, instead of Python's bare ``TypeError``."""

from __future__ import annotations

import difflib
import functools
import inspect
from typing import Any, Callable, Iterable, Mapping

from .errors import UnknownOptionError

__all__ = ["check_names", "nearest", "parameters", "suggest_unknown_options"]

# DataLoader (and DistributedSampler) arguments: what stoker does instead.
DATALOADER_EQUIVALENTS = {
    "num_workers": "num_threads= (stoker's C++ worker threads; python_workers= runs Python "
                   "callables in processes)",
    "collate_fn": "augment= (a function of each whole batch); batches are already collated",
    "sampler": "rank=, world_size= and seed= (stoker shards and shuffles itself)",
    "batch_sampler": "batch_size= with rank=, world_size= and seed=",
    "prefetch_factor": "prefetch_bytes= (how much decoded data is kept ready)",
    "persistent_workers": "nothing: a Loader keeps its threads across epochs",
    "worker_init_fn": "nothing: worker threads need no set-up; per-batch code goes in augment=",
    "generator": "seed=",
    "multiprocessing_context": "python_start_method=",
    "timeout": "max_retries= and retry_base_delay= (storage retries)",
    "pin_memory_device": "device=",
    "num_replicas": "world_size=",
}


def _message(unknown: Iterable[str], accepted: Iterable[str], where: str) -> str:
    accepted = sorted(accepted)
    lines = []
    for name in unknown:
        if name in DATALOADER_EQUIVALENTS:
            lines.append(f"{where} got {name}=, a torch DataLoader argument; stoker's "
                         f"equivalent: {DATALOADER_EQUIVALENTS[name]}")
            continue
        close = nearest(name, accepted)
        hint = f"; did you mean {' or '.join(c + '=' for c in close)}?" if close else ""
        lines.append(f"{where} got an unexpected keyword argument {name!r}{hint}")
    return "\n".join(lines) + f"\n(parameters: {', '.join(accepted)})"


def nearest(name: str, accepted: Iterable[str]) -> list:
    """The accepted names closest to ``name``, best first (none when nothing is close)."""
    return difflib.get_close_matches(name, sorted(accepted), n=3, cutoff=0.6)


def check_names(given: Mapping[str, Any], accepted: Iterable[str], where: str) -> None:
    """Raises UnknownOptionError for the keys of ``given`` not in ``accepted``."""
    accepted = set(accepted)
    unknown = [name for name in given if name not in accepted]
    if unknown:
        raise UnknownOptionError(_message(unknown, accepted, where))


def parameters(function: Callable[..., Any]) -> list:
    """The keyword names ``function`` takes (``self`` and ``**kwargs`` left out)."""
    return [name for name, p in inspect.signature(function).parameters.items()
            if name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]


def suggest_unknown_options(where: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorates ``__init__``: an unknown keyword raises UnknownOptionError naming the nearest
    parameter. The signature seen by ``inspect`` and IDEs stays the decorated function's."""
    def decorate(init: Callable[..., Any]) -> Callable[..., Any]:
        accepted = set(parameters(init))

        @functools.wraps(init)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> None:
            if not accepted.issuperset(kwargs):
                check_names(kwargs, accepted, where)
            init(self, *args, **kwargs)
        return wrapper
    return decorate
