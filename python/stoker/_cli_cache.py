"""`stoker cache stats DIR` and `stoker cache clear DIR`.

`stats` writes nothing; both refuse a folder that is not a stoker cache (stoker.cache)."""

from __future__ import annotations

import json
import os

from ._cli_inspect import CliError
from ._cli_progress import Progress
from .cache import cache_usage, clear_cache

__all__ = ["run_cache"]


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def run_cache(command: str, cache_dir: str, as_json: bool = False, progress: bool = False) -> int:
    if not os.path.isdir(cache_dir):
        raise CliError(f"cache folder {cache_dir!r} does not exist")
    # The scans are engine calls that report no counts: the progress line shows the time.
    if command == "clear":
        with Progress("stoker cache clear: scanning", enabled=progress, tick=True) as bar:
            before = cache_usage(cache_dir)
            bar.label = f"stoker cache clear: removing {before['entries']:,} entries"
            clear_cache(cache_dir)
        print(f"removed {before['entries']} entries ({_size(before['bytes'])}) from {cache_dir}")
        return 0
    with Progress("stoker cache stats: scanning", enabled=progress, tick=True):
        usage = cache_usage(cache_dir)
    if as_json:
        print(json.dumps(usage, indent=2))
        return 0
    print(f"cache folder: {os.path.abspath(cache_dir)}")
    print(f"  ready tensors  {usage['tensors_entries']:8d} entries  {_size(usage['tensors_bytes'])}")
    print(f"  remote blocks  {usage['blocks_entries']:8d} entries  {_size(usage['blocks_bytes'])}")
    print(f"  total          {usage['entries']:8d} entries  {_size(usage['bytes'])}")
    return 0
