"""`stoker cache stats` and `stoker cache clear` on a real cache folder."""

import json
import subprocess
import sys

import stoker
from stoker_testdata import write_uneven_dataset


def cli(*args):
    return subprocess.run([sys.executable, "-m", "stoker", *args], capture_output=True, text=True,
                          timeout=120)


def test_stats_and_clear(tmp_path):
    root = str(tmp_path / "data")
    write_uneven_dataset(root)
    cache_dir = str(tmp_path / "cache")
    loader = stoker.Loader(root, batch_size=100, cache_dir=cache_dir)
    written = sum(1 for _ in loader)
    loader.flush_cache()  # entries are written behind the epoch
    written = loader.stats()["cache"]["writes"]
    assert written > 0

    result = cli("cache", "stats", cache_dir, "--json")
    assert result.returncode == 0, result.stderr
    usage = json.loads(result.stdout)
    assert usage["tensors_entries"] == written and usage["bytes"] > 0

    text = cli("cache", "stats", cache_dir)
    assert "ready tensors" in text.stdout and str(written) in text.stdout

    cleared = cli("cache", "clear", cache_dir)
    assert cleared.returncode == 0 and f"removed {written} entries" in cleared.stdout
    assert stoker.cache_usage(cache_dir)["entries"] == 0


def test_missing_folder_is_a_clear_error(tmp_path):
    result = cli("cache", "stats", str(tmp_path / "nope"))
    assert result.returncode == 2
    assert "nope" in result.stderr and "does not exist" in result.stderr
    usage = cli("cache")
    assert usage.returncode == 2 and "stats" in usage.stderr
