"""Inspect and clear a node-local cache folder (``cache_dir=`` of :class:`stoker.Loader`)."""

from __future__ import annotations

import os
from typing import Dict, Union

from . import _stoker

__all__ = ["cache_usage", "clear_cache"]


def cache_usage(cache_dir: Union[str, os.PathLike]) -> Dict[str, int]:
    """Entries and bytes per namespace (``tensors``: decoded row groups; ``blocks``: raw bytes of
    remote objects) and in total. Also removes temporary files left by killed processes."""
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
