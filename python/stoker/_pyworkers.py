"""Runs the user's Python callables (``transform=``, ``augment=``) for the engine's workers.

Contract shared by the thread and process modes (same order, same results):

- ``runner.call(name, arrays, where, rng_key=None)`` runs ``functions[name]`` on ``arrays`` (a dict
  of numpy arrays, one row group's columns or one batch) and returns its dict of numpy arrays.
  With ``rng_key`` (a tuple of ints) the callable is called as ``fn(arrays, augment_rng(rng_key))``.
- A user exception becomes :class:`~stoker.errors.TransformError` whose message starts with
  ``where`` (e.g. "file 'x.parquet', row group 3") and names the callable and the exception; a
  worker process that dies becomes :class:`~stoker.errors.WorkerCrashedError` naming ``where``.
- ``close()`` stops every worker promptly; calls after it raise ``LoaderClosedError``.

``ThreadRunner`` calls in the caller's thread (the engine's worker thread holding the GIL).
``ProcessRunner`` (``python_workers=N``) runs the callables in N spawned processes and moves the
arrays through shared memory.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Mapping, Optional, Tuple

import numpy as np

from .errors import LoaderClosedError, TransformError

__all__ = ["ThreadRunner", "make_runner", "augment_rng"]

Arrays = Dict[str, np.ndarray]


def augment_rng(key: Tuple[int, ...]) -> np.random.Generator:
    """The ``numpy.random.Generator`` an ``augment=`` call receives: Philox keyed by ``key``
    (seed, epoch, global batch index); the same key always gives the same stream."""
    seed, epoch, batch = (int(k) for k in key)
    return np.random.Generator(np.random.Philox(key=[seed & (2**64 - 1), 0x5354_4F4B_4552],
                                                counter=[batch, epoch, 0, 0]))


def _user_error(name: str, where: str, error: BaseException) -> TransformError:
    return TransformError(f"{where}: {name}= raised {type(error).__name__}: {error}")


class ThreadRunner:
    """Calls the callables in the calling thread."""

    def __init__(self, functions: Mapping[str, Callable[..., Any]]) -> None:
        self._functions = dict(functions)
        self._closed = False

    def call(self, name: str, arrays: Arrays, where: str,
             rng_key: Optional[Tuple[int, ...]] = None) -> Arrays:
        if self._closed:
            raise LoaderClosedError("the loader is closed")
        fn = self._functions[name]
        try:
            out = fn(arrays) if rng_key is None else fn(arrays, augment_rng(rng_key))
        except Exception as error:  # the user's code: any exception is theirs to name
            raise _user_error(name, where, error) from error
        if not isinstance(out, Mapping):
            raise TransformError(f"{where}: {name}= must return a dict of arrays, got "
                                 f"{type(out).__name__}")
        return dict(out)

    def close(self) -> None:
        self._closed = True


def make_runner(functions: Mapping[str, Callable[..., Any]], python_workers: int = 0):
    """``python_workers=0``: a :class:`ThreadRunner`; N > 0: a process pool of N workers."""
    if python_workers == 0:
        return ThreadRunner(functions)
    raise NotImplementedError("python_workers > 0 (process mode) is not built yet")
