"""Every live Loader of the process, for the process-wide hooks: at exit every loader is closed
(before S3 is finalised), and after fork() each one's locks are made anew in the child."""

from __future__ import annotations

import atexit
import os
import weakref
from typing import Any

from . import _pyworkers, _stoker  # noqa: F401  (its atexit hook first: ours runs before it)

# pyarrow.fs registers the S3 finaliser with atexit on import. atexit runs hooks last-in
# first-out, so importing it before registering ours stops every loader (and its S3 reads)
# before S3 is finalised.
import pyarrow.fs  # noqa: E402,F401

__all__ = ["add"]

_LIVE: "weakref.WeakSet[Any]" = weakref.WeakSet()


def add(loader: Any) -> None:
    """Registers an open loader (held weakly): it needs ``close()`` and
    ``_fresh_locks_after_fork()``."""
    _LIVE.add(loader)


def _stop_all_at_exit() -> None:
    for loader in list(_LIVE):
        loader.close()
    # Requests still under way (fetch-ahead reads of closed loaders, interrupted opens) stop
    # retrying; wait for them (bounded) while Arrow's S3 state and memory pools still exist.
    _stoker._stop_remote_requests()


def _fresh_locks_after_fork() -> None:
    # Another thread may have held a loader's locks at fork(): the child's copies would stay
    # held, and its iter() would wait forever instead of raising LoaderClosedError.
    for loader in list(_LIVE):
        loader._fresh_locks_after_fork()


atexit.register(_stop_all_at_exit)
os.register_at_fork(after_in_child=_fresh_locks_after_fork)
