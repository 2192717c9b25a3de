"""Inspect and clear a node-local cache folder (``cache_dir=`` of :class:`stoker.Loader`).

Both refuse, with :class:`stoker.errors.InvalidOptionError` and without changing anything, a
folder that is not a stoker cache (one holding anything a cache never holds, such as a data
file); an empty folder is an empty cache. A missing folder raises
:class:`stoker.errors.DatasetNotFoundError`."""

from __future__ import annotations

import os
from typing import Dict, Union

from . import _stoker

__all__ = ["cache_usage", "clear_cache"]


def cache_usage(cache_dir: Union[str, os.PathLike]) -> Dict[str, int]:
    """Entries and bytes per namespace (``tensors``: decoded row groups; ``blocks``: raw bytes of
    remote objects) and in total. Reads only: nothing in the folder is written or removed (a read-only
    folder works too)."""
    usage = _stoker.inspect_cache(os.path.abspath(os.fspath(cache_dir)))
    out = {
        "tensors_entries": usage.tensors_entries,
        "tensors_bytes": usage.tensors_bytes,
        "blocks_entries": usage.blocks_entries,
        "blocks_bytes": usage.blocks_bytes,
    }
    out["entries"] = usage.tensors_entries + usage.blocks_entries
    out["bytes"] = usage.tensors_bytes + usage.blocks_bytes
    return out


def clear_cache(cache_dir: Union[str, os.PathLike]) -> None:
    """Removes every entry. Safe while loaders use the folder: their open entries stay valid."""
    _stoker.clear_cache(os.path.abspath(os.fspath(cache_dir)))
