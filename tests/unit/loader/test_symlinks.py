"""Symbolic links in local sources: followed, but every file is read once (issue 23.4).

Arrow's local listing follows a link back to a parent folder at every depth, so `ln -s . again`
multiplied a folder's rows 41 times, and `[dir, link_to_dir]` read every file twice. stoker lists
local folders itself (cpp/src/io/local_listing.cc): links to files and folders are followed,
inside or outside the source folder, a real folder is entered once, and a file reached through
several paths is read once, under the first of its paths in sorted order. A broken link that
would be read (a Parquet name) is an error naming it. Real links on the real file system.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

# Before the fix, listing two links back up ran for minutes: every scenario runs in a subprocess.
PROBE = textwrap.dedent("""
    import json, sys
    import numpy as np
    import stoker
    source, columns = json.loads(sys.argv[1])
    try:
        files = [f.path for f in stoker.describe(source).files]
        with stoker.Loader(source, columns=columns, batch_size=7, shuffle=False,
                           drop_last=False) as loader:
            head = repr(loader)
            batches = list(loader)
        out = {"repr": head, "files": files}
        for name in columns:
            out[name] = np.concatenate([np.asarray(b[name]) for b in batches]).tolist()
    except Exception as e:
        out = {"error": type(e).__name__, "message": str(e)}
    print(json.dumps(out))
""")


def _open(source, columns=("id",)):
    """What a loader over `source` reads: repr, files (stoker.describe) and each column's values
    in order, or the error it raises."""
    result = subprocess.run([sys.executable, "-c", PROBE, json.dumps([source, list(columns)])],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _write(path, start, rows=100):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(pa.table({"id": np.arange(start, start + rows, dtype=np.int64)}), path,
                   row_group_size=40)


def _ids(source):
    got = _open(source)
    assert "error" not in got, got
    return np.asarray(got["id"])


def _files(source):
    return _open(source)["files"]


def _error(source):
    got = _open(source)
    assert "error" in got, got
    return got["error"], got["message"]


@pytest.fixture
def data(tmp_path):
    root = tmp_path / "data"
    _write(str(root / "a.parquet"), 0)
    return root


def test_link_to_its_own_folder_is_entered_once(data):
    os.symlink(".", data / "again")
    got = _open(str(data))
    assert got.get("repr", "").startswith("Loader(files=1, rows=100,"), got
    np.testing.assert_array_equal(got["id"], np.arange(100))


def test_link_to_a_parent_folder_is_a_loop(data):
    os.makedirs(data / "sub")
    _write(str(data / "sub" / "b.parquet"), 100)
    os.symlink("..", data / "sub" / "up")
    os.symlink("../sub", data / "sub" / "self")
    np.testing.assert_array_equal(_ids(str(data)), np.arange(200))
    assert _files(str(data)) == [str(data / "a.parquet"), str(data / "sub" / "b.parquet")]


def test_glob_through_a_loop_matches_once(data):
    os.symlink(".", data / "again")
    np.testing.assert_array_equal(_ids(str(data) + "/**.parquet"), np.arange(100))


def test_folder_and_a_link_to_it_are_read_once(tmp_path, data):
    link = tmp_path / "link"
    os.symlink(data, link)
    for sources in ([str(data), str(link)], [str(link), str(data)]):
        np.testing.assert_array_equal(_ids(sources), np.arange(100))
        # The first path in sorted order names the file, whatever the order of the sources.
        assert _files(sources) == [str(data / "a.parquet")]


def _links_to_a_folder(tmp_path, *names):
    """tmp_path/root holding only links `names` to one folder elsewhere (100 ids in s.parquet)."""
    shared = tmp_path / "elsewhere"
    _write(str(shared / "s.parquet"), 0)
    root = tmp_path / "root"
    os.makedirs(root)
    for name in names:
        os.symlink(shared, root / name)
    return root


def test_two_links_to_one_folder_are_read_once(tmp_path):
    root = _links_to_a_folder(tmp_path, "x", "y")
    np.testing.assert_array_equal(_ids(str(root)), np.arange(100))
    assert _files(str(root)) == [str(root / "x" / "s.parquet")]


def test_link_to_a_file_in_the_same_folder_is_read_once(data):
    os.symlink("a.parquet", data / "b.parquet")
    np.testing.assert_array_equal(_ids(str(data)), np.arange(100))
    assert _files(str(data)) == [str(data / "a.parquet")]
    # The file itself and the folder as two sources: read once too.
    np.testing.assert_array_equal(_ids([str(data / "b.parquet"), str(data)]), np.arange(100))


def test_links_pointing_outside_the_folder_are_followed(tmp_path, data):
    outside = tmp_path / "outside"
    _write(str(outside / "o.parquet"), 100)
    _write(str(outside / "deeper" / "p.parquet"), 200)
    os.symlink(outside / "o.parquet", data / "o.parquet")
    os.symlink(outside / "deeper", data / "more")
    # Files in sorted path order: a.parquet, more/p.parquet, o.parquet.
    np.testing.assert_array_equal(_ids(str(data)), np.r_[0:100, 200:300, 100:200])
    assert _files(str(data)) == [str(data / "a.parquet"), str(data / "more" / "p.parquet"),
                                 str(data / "o.parquet")]


def test_hive_folders_come_from_the_path_through_the_link(tmp_path):
    root = _links_to_a_folder(tmp_path, "part=7")
    got = _open(str(root), columns=("id", "part"))
    np.testing.assert_array_equal(got["part"], np.full(100, 7))
    np.testing.assert_array_equal(got["id"], np.arange(100))


def test_a_broken_link_that_would_be_read_is_an_error_naming_it(data):
    os.symlink("gone.parquet", data / "lost.parquet")
    kind, message = _error(str(data))
    assert kind == "DatasetNotFoundError", (kind, message)
    assert str(data / "lost.parquet") in message and "broken symbolic link" in message, message
    assert "'gone.parquet'" in message, message


def test_a_link_to_itself_is_an_error_naming_it(data):
    os.symlink("self.parquet", data / "self.parquet")
    kind, message = _error(str(data))
    assert kind == "DatasetNotFoundError", (kind, message)
    assert str(data / "self.parquet") in message and "broken symbolic link" in message, message


def test_broken_links_that_are_never_read_are_ignored(data):
    os.symlink("nowhere", data / "notes.txt")
    os.symlink("nowhere.parquet", data / ".hidden.parquet")
    os.symlink("nowhere", data / "old_folder")
    np.testing.assert_array_equal(_ids(str(data)), np.arange(100))
