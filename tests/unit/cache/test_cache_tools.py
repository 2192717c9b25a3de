"""`stoker cache stats` and `stoker cache clear`: what they print and remove on a real cache; `stats`
reads only; `stats` and `clear` refuse a folder that is not a stoker cache (issue 22.8).

Each test snapshots the folder tree (every path, its kind, size, mtime and content digest) before
and after, on a real cache written by a Loader, a data folder given by mistake, an empty folder and
a read-only folder (read by an unprivileged user when the tests run as root, since root writes
anywhere).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stoker
from stoker.__main__ import main
from stoker.errors import DatasetNotFoundError, InvalidOptionError

from stoker_testdata import write_uneven_dataset


def snapshot(root: str) -> dict:
    """path -> (kind, size, mtime_ns, sha256 of a file's bytes), the root folder included."""
    out = {}
    for folder, dirs, files in os.walk(root):
        for name in [""] + dirs + files if folder == root else dirs + files:
            path = os.path.join(folder, name) if name else folder
            info = os.lstat(path)
            digest = ""
            if stat.S_ISREG(info.st_mode):
                with open(path, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
            out[os.path.relpath(path, root)] = (stat.S_IFMT(info.st_mode), info.st_size,
                                                info.st_mtime_ns, digest)
    return out


# Root writes anywhere; without these capabilities a root process obeys file permissions like any
# user (the interpreter under /root stays reachable: root owns it).
_NO_OVERRIDE = ["setpriv", "--inh-caps=-dac_override,-dac_read_search",
                "--bounding-set=-dac_override,-dac_read_search"]


def run(args, unprivileged=False):
    prefix = _NO_OVERRIDE if unprivileged and os.geteuid() == 0 else []
    return subprocess.run(prefix + args, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))


def cli(*args, unprivileged=False):
    """`python -m stoker ARGS` in a subprocess, obeying file permissions when `unprivileged`."""
    return run([sys.executable, "-m", "stoker", *args], unprivileged)


@pytest.fixture
def cache(tmp_path):
    """A cache folder written by a real Loader (ready tensors), and its entry count."""
    data = str(tmp_path / "data")
    write_uneven_dataset(data)
    folder = str(tmp_path / "cache")
    with stoker.Loader(data, batch_size=100, cache_dir=folder) as loader:
        for _ in loader:
            pass
        loader.flush_cache()
        written = loader.stats()["cache"]["writes"]
    assert written > 0
    return folder, written


@pytest.fixture
def data_folder(tmp_path):
    folder = tmp_path / "dataset"
    folder.mkdir()
    pq.write_table(pa.table({"x": np.arange(10)}), str(folder / "part-0.parquet"))
    (folder / "notes").mkdir()
    (folder / "notes" / "README").write_text("mine")
    return str(folder)


def test_stats_on_a_real_cache_writes_nothing(cache):
    folder, written = cache
    before = snapshot(folder)
    assert main(["cache", "stats", folder]) == 0
    assert main(["cache", "stats", folder, "--json"]) == 0
    usage = stoker.cache_usage(folder)
    assert snapshot(folder) == before
    assert usage["tensors_entries"] == written and usage["bytes"] > 0


@pytest.mark.parametrize("command", ["stats", "clear"])
def test_a_data_folder_is_refused_and_left_alone(data_folder, command, capsys):
    before = snapshot(data_folder)
    assert main(["cache", command, data_folder]) == 2
    err = capsys.readouterr().err
    assert "is not a stoker cache folder" in err and "part-0.parquet" in err
    call = stoker.cache_usage if command == "stats" else stoker.clear_cache
    with pytest.raises(InvalidOptionError, match="not a stoker cache folder"):
        call(data_folder)
    assert snapshot(data_folder) == before
    assert not os.path.exists(os.path.join(data_folder, ".lock"))
    assert not os.path.exists(os.path.join(data_folder, ".tmp"))


@pytest.mark.parametrize("command", ["stats", "clear"])
def test_a_cache_with_foreign_files_is_refused(cache, command):
    """Even with a cache's .lock, a folder holding what a cache never holds (a user's file among
    entries named like a cache's) is not cleared: clear would remove only entries, but the folder
    is not one stoker made."""
    folder, _ = cache
    with open(os.path.join(folder, "results.csv"), "w") as f:
        f.write("1,2\n")
    before = snapshot(folder)
    with pytest.raises(InvalidOptionError, match="results.csv"):
        (stoker.cache_usage if command == "stats" else stoker.clear_cache)(folder)
    assert snapshot(folder) == before


def test_clear_still_clears_a_cache(cache):
    folder, written = cache
    assert main(["cache", "clear", folder]) == 0
    assert stoker.cache_usage(folder)["entries"] == 0
    # The folder is still a cache: a Loader fills it again, stats reads it.
    assert main(["cache", "stats", folder]) == 0


def test_empty_folder_is_an_empty_cache_and_stays_empty(tmp_path):
    folder = tmp_path / "empty"
    folder.mkdir()
    before = snapshot(str(folder))
    assert stoker.cache_usage(str(folder))["entries"] == 0
    stoker.clear_cache(str(folder))
    assert main(["cache", "stats", str(folder)]) == 0
    assert snapshot(str(folder)) == before
    # An empty folder still opens as a new cache through cache_dir=.
    data = str(tmp_path / "data")
    write_uneven_dataset(data)
    with stoker.Loader(data, batch_size=100, cache_dir=str(folder)) as loader:
        rows = sum(len(b["id"]) for b in loader)
        loader.flush_cache()
    assert rows > 0 and stoker.cache_usage(str(folder))["tensors_entries"] > 0


def test_missing_folder_is_not_created(tmp_path):
    missing = str(tmp_path / "nope")
    with pytest.raises(DatasetNotFoundError, match="does not exist"):
        stoker.cache_usage(missing)
    with pytest.raises(DatasetNotFoundError, match="does not exist"):
        stoker.clear_cache(missing)
    assert not os.path.exists(missing)


def test_stats_on_a_read_only_cache(cache):
    """A cache folder the user may read but not write (another user's, a read-only mount): stats
    works and writes nothing; clear fails with a clear error and removes nothing."""
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        pytest.skip("root without setpriv: no way to make a folder read-only to this process")
    folder, written = cache
    for path, dirs, files in os.walk(folder):
        for name in files:
            os.chmod(os.path.join(path, name), 0o444)
        for name in dirs:
            os.chmod(os.path.join(path, name), 0o555)
    os.chmod(folder, 0o555)
    try:
        probe = run([sys.executable, "-c", f"open({os.path.join(folder, 'probe')!r}, 'w')"],
                    unprivileged=True)
        assert probe.returncode != 0 and "Permission denied" in probe.stderr  # really read-only
        before = snapshot(folder)
        result = cli("cache", "stats", folder, "--json", unprivileged=True)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["tensors_entries"] == written
        assert snapshot(folder) == before
        result = cli("cache", "clear", folder, unprivileged=True)
        assert result.returncode == 2 and "stoker: error:" in result.stderr
        assert snapshot(folder) == before
    finally:
        for path, dirs, _ in os.walk(folder):
            os.chmod(path, 0o755)


# ------------------------------------------------------------------------------ stats and clear
# What the commands print and do on a real cache folder.

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
