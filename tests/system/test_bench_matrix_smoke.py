"""The shape matrix (`python -m bench --matrix`, issue 26) on a tiny dataset of two shapes.

No timing assertions: the table has its structure, every shape asked for is a row, stoker
delivered every row in each measure, and every limit candidate's output was checked equal to the
NumPy reference (the limits named as winners among them).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def test_matrix_table_rows_and_checked_limits(tmp_path):
    out_dir = tmp_path / "results"
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--matrix", "--tiny", "3000", "--repeats", "1",
         "--shapes", "wide,ragged,remote", "--name", "matrix-test", "--data-dir",
         str(tmp_path / "data"), "--out-dir", str(out_dir)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=170)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((out_dir / "matrix-test.json").read_text())
    md = (out_dir / "matrix-test.md").read_text()

    assert list(report["shapes"]) == ["wide", "ragged", "remote"]
    assert report["shapes"]["remote"]["status"] == "not run"
    assert report["shapes"]["remote"]["reason"]
    header = [c.strip() for c in md.splitlines()[md.splitlines().index(next(
        line for line in md.splitlines() if line.startswith("| shape | rows |")))].strip("|").split("|")]
    assert header == ["shape", "rows", "cold / decode limit", "later cold / decode limit",
                      "fill / no cache",
                      "warm / memory limit", "first batch (batch times)", "after open",
                      "shuffled / unshuffled: cold, warm",
                      "shuffled floor / decode limit, cold / shuffled floor", "decode limit won",
                      "memory limit won", "flags"]
    for name in ("wide", "ragged"):
        s = report["shapes"][name]
        assert s["status"] == "ok", s
        assert f"| {s['title']} | 3,000 |" in md
        # Every candidate limit ran its check against the reference, and every one is equal.
        assert {"pyarrow-rg", "pyarrow-rg-pool", "pyarrow-rg-pool-warm", "pyarrow-table",
                "batch-take", "split-take-fresh", "window-take", "window-torch"} <= set(s["checks"])
        for cand, check in s["checks"].items():
            if "not installed" in check["detail"]:
                continue
            assert check["equal"], (name, cand, check)
        # stoker's own values were checked (unshuffled, and a shuffled cache's two epochs).
        assert s["checks"]["stoker"]["equal"], s["checks"]["stoker"]
        # The winners are checked candidates, and stoker delivered every row in each measure.
        assert s["checks"][s["decode_limit"]["reader"]]["equal"]
        assert s["checks"][s["memory_limit"]["gather"]]["equal"]
        for variant in ("stoker-cold", "stoker-fill", "stoker-warm", "stoker-cold-ordered",
                        "stoker-warm-ordered", "stoker-cold-next"):
            r = s["results"][variant]
            assert r["status"] == "ok" and r["rows"] == 3000, (name, variant, r)
        for key in ("cold_vs_decode", "cold_next_vs_decode", "fill_vs_nocache", "warm_vs_memory",
                    "cold_vs_ordered", "warm_vs_ordered"):
            assert s[key] is not None and s[key] > 0, (name, key)
        # The shuffle's cost compares the same loader with and without it.
        assert s["cold_vs_ordered"] == pytest.approx(
            s["results"]["stoker-cold"]["rows_per_s"] / s["results"]["stoker-cold-ordered"]["rows_per_s"])
        # The warm measure records what its epoch decoded (the report flags any): one count a run.
        assert len(s["warm_misses"]) == len(s["raw"]["stoker-warm"]), name
        assert all(isinstance(m, int) and m >= 0 for m in s["warm_misses"]), name
        # The later cold epoch is the loader's second epoch: no cache, so nothing is read from one.
        assert s["cold_next_vs_decode"] == pytest.approx(
            s["results"]["stoker-cold-next"]["rows_per_s"] / s["decode_limit"]["rows_per_s"])
        assert "cache" not in s["results"]["stoker-cold-next"]["loader_stats"] or \
            s["results"]["stoker-cold-next"]["loader_stats"]["cache"]["hits"] == 0
        # The constructor's time is measured, and the first batch after it is part of the first.
        assert 0 < s["results"]["stoker-cold"]["open_s"] < s["results"]["stoker-cold"]["first_batch_s"]
        if s["first_batch_batches"] == s["first_batch_batches"]:  # NaN with one batch (3,000 rows)
            assert 0 < s["first_after_open_batches"] < s["first_batch_batches"], s
        assert isinstance(s["weak_limits"], list)
    # The shuffled floor: the wide set's (a fixed-width shape), checked, beside the decode limit
    # (never it), as its own column; the ragged lists have none ("-").
    wide, ragged = report["shapes"]["wide"], report["shapes"]["ragged"]
    floor = wide["shuffled_floor"]
    assert floor["reader"] == "parquet-cpp-shuffled" != wide["decode_limit"]["reader"]
    assert wide["checks"]["parquet-cpp-shuffled"]["equal"], wide["checks"]["parquet-cpp-shuffled"]
    assert floor["rows_per_s"] == wide["results"]["parquet-cpp-shuffled"]["rows_per_s"]
    assert floor["vs_decode"] == pytest.approx(floor["rows_per_s"] / wide["decode_limit"]["rows_per_s"])
    assert wide["cold_vs_shuffled_floor"] == pytest.approx(
        wide["results"]["stoker-cold"]["rows_per_s"] / floor["rows_per_s"])
    assert ragged["shuffled_floor"] is None and ragged["cold_vs_shuffled_floor"] is None
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")]
            for line in md.splitlines() if line.startswith("| ")}
    column = header.index("shuffled floor / decode limit, cold / shuffled floor")
    assert rows[wide["title"]][column] == f"{floor['vs_decode']:.2f}, {wide['cold_vs_shuffled_floor']:.2f}"
    assert rows[ragged["title"]][column] == "-"


def test_limits_equal_the_reference_and_a_wrong_one_is_caught(tmp_path):
    """The checks compare values: a reader whose output differs by one value fails its check."""
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    from bench import matrix_limits as ml
    from bench import matrix_shapes as ms

    shape = ms.BY_NAME["strings"]
    path = ms.ensure(shape, str(tmp_path), tiny=1500, log=lambda m: None)
    cols = ms.raw(shape, False, 1500)
    vocab = ms.vocabularies(shape, cols)
    ref = ms.reference(shape, cols)
    paths = ms.files(path)
    assert ml.check_reader("pyarrow-rg", shape, paths, 2, vocab, ref)[0]
    bad = dict(ref)
    bad["s03"] = ref["s03"].copy()
    bad["s03"][700] += 1
    ok, why = ml.check_reader("pyarrow-rg", shape, paths, 2, vocab, bad)
    assert not ok and "s03" in why
    arrays = ml.memory_arrays(ref, shape)
    for kind in ml.gathers_for(arrays):
        assert ml.check_gather(kind, arrays, 256, 2, 7)[0], kind
    # stoker's check: equal on the reference, and the one wrong value caught.
    ok, why = ml.check_stoker(shape, path, 2, 7, arrays, str(tmp_path / "cache-1"))
    assert ok, why
    ok, why = ml.check_stoker(shape, path, 2, 7, ml.memory_arrays(bad, shape),
                              str(tmp_path / "cache-2"))
    assert not ok and "s03" in why, why
    groups = ml.row_groups(paths)
    assert sum(groups) == 1500 and len(groups) > 2
    windowed = [k for k in ml.gathers_for(arrays) if k.startswith("window-")]
    assert {"window-take", "window-torch"} <= set(windowed)
    for kind in windowed:
        assert ml.check_gather(kind, arrays, 256, 2, 7, groups=groups)[0], kind


def test_window_order_keeps_batches_inside_few_row_groups():
    """The window gathers' order: every row once, the head one batch of one row group, and each
    batch's rows from the row groups of at most two consecutive windows (a global permutation
    would draw every batch from nearly all row groups)."""
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    import numpy as np

    from bench import matrix_limits as ml

    groups = [1000] * 40
    order = ml.window_order(groups, 256, 4096, seed=3)
    assert np.array_equal(np.sort(order), np.arange(40_000))
    assert len(np.unique(order[:256] // 1000)) == 1  # the head
    spans = [len(np.unique(order[lo:lo + 256] // 1000)) for lo in range(0, 40_000, 256)]
    assert max(spans) <= 10 and np.median(spans) <= 5, spans
    glob = np.random.default_rng(3).permutation(40_000)
    assert np.median([len(np.unique(glob[lo:lo + 256] // 1000)) for lo in range(0, 40_000, 256)]) > 30
    assert not np.array_equal(order, ml.window_order(groups, 256, 4096, seed=4))


def test_row_hashes_see_every_value_of_rows_wide_and_narrow():
    """The check's row hashes (``row_hashes``), on rows of many values (images, hashed row by
    row) and of few (hashed value position by position): a part of the rows hashes as in the
    whole; one bit of one value changes that row's hash only; rows whose images are swapped while
    their labels stay change both."""
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    import numpy as np

    from bench import matrix_limits as ml

    rng = np.random.default_rng(5)
    arrays = {"image": rng.integers(0, 256, (12, 8, 8, 3), dtype=np.uint8),
              "features": rng.standard_normal((12, 3)).astype(np.float32),
              "label": np.arange(12)}
    keys = list(arrays)
    whole = ml.row_hashes(arrays, keys)
    parts = [ml.row_hashes({k: v[lo:lo + 5] for k, v in arrays.items()}, keys)
             for lo in range(0, 12, 5)]
    assert np.array_equal(whole, np.concatenate(parts))
    assert len(np.unique(whole)) == 12
    for key, index in (("image", (4, 7, 2, 1)), ("features", (4, 2))):
        changed = {k: v.copy() for k, v in arrays.items()}
        changed[key].view(np.uint8)[index] ^= 1  # one bit of one value of row 4
        differ = np.flatnonzero(ml.row_hashes(changed, keys) != whole)
        assert differ.tolist() == [4], (key, differ)
    swapped = {k: v.copy() for k, v in arrays.items()}
    swapped["image"][[2, 9]] = swapped["image"][[9, 2]]
    assert np.flatnonzero(ml.row_hashes(swapped, keys) != whole).tolist() == [2, 9]


def test_prepared_native_gathers_equal_the_reference_and_a_wrong_one_is_caught():
    """The layout-prepared gathers (``window-c-columns``, ``-narrow``, ``-packed``: ids stored
    narrow and widened, rows packed, padded lists from values + offsets to the batch's longest)
    deliver what fancy indexing of stoker's arrays does, on strings, padded and ragged lists; the
    check catches a gather whose narrowing loses a value."""
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    import numpy as np

    from bench import matrix_limits as ml
    from bench import matrix_shapes as ms

    if ml._c_lib() is None:
        import pytest

        pytest.skip("no C compiler: the native gathers are left out")
    groups = [250] * 8
    for name in ("strings", "padded", "ragged"):
        shape = ms.BY_NAME[name]
        arrays = ml.memory_arrays(ms.reference(shape, ms.raw(shape, False, 2000)), shape)
        assert set(ml.PREPARED_GATHERS) <= set(ml.gathers_for(arrays)), name
        prepared = ml.prepare(list(ml.PREPARED_GATHERS), arrays, 256, 2)
        for kind in ml.PREPARED_GATHERS:
            ok, why = ml.check_gather(kind, arrays, 256, 2, 7, batches=8, groups=groups)
            assert ok, (name, kind, why)
            # The prepared input (as the matrix times it) yields every row once, equal to the
            # reference, batch by batch.
            seen = 0
            for n, out, idx in ml.gather(kind, arrays, 256, 2, 7, with_index=True, groups=groups,
                                         prepared=prepared):
                seen += n
                for key, a in arrays.items():
                    if key.endswith("_offsets"):
                        continue
                    if key in ml._ragged(arrays):
                        off = arrays[f"{key}_offsets"]
                        want = np.concatenate([a[off[i]:off[i + 1]] for i in idx])
                    else:
                        want = a[idx]
                    if key == "tokens" and shape.lists == "padded":
                        width = out[key].shape[1]
                        assert width == arrays["tokens_lengths"][idx].max(), (kind, width)
                        assert not want[:, width:].any()
                        want = want[:, :width]
                    assert ml.same(out[key], want), (name, kind, key)
            assert seen == 2000, (name, kind, seen)
        if name == "strings":
            # Narrowed as promised: the 4-value column to one byte, the 40,000-value one to two.
            narrow = prepared["window-c-narrow"]
            widths = dict(zip(narrow.dense, narrow.sw))
            assert widths["s00"] == 1 and widths["s04"] <= 2 and widths["label"] == 1, widths
    # A narrowing that drops the high byte is caught by the check.
    shape = ms.BY_NAME["strings"]
    arrays = ml.memory_arrays(ms.reference(shape, ms.raw(shape, False, 2000)), shape)
    real = ml._narrowest
    try:
        ml._narrowest = lambda a: a.astype(np.uint8) if a.dtype.kind in "iu" and a.ndim == 1 else a
        ok, why = ml.check_gather("window-c-narrow", arrays, 256, 2, 7, groups=groups)
    finally:
        ml._narrowest = real
    assert not ok and "differs" in why, why



def _bench_modules():
    sys.path.insert(0, ROOT)
    try:
        from bench import matrix_limits as ml
        from bench import matrix_shapes as ms
    finally:
        sys.path.remove(ROOT)
    return ml, ms


@pytest.mark.parametrize("shape_name, reader", [("images-small", "pyarrow-rg-pool+tj"),
                                                ("strings", "pyarrow-rg-pool-memo")])
def test_the_stronger_limits_deliver_the_reference(tmp_path, shape_name, reader):
    """The TurboJPEG range decoder (images) and the later-epoch reader that keeps each
    dictionary's ids (strings) deliver the reference's values, checked as the matrix checks
    every limit before it may win."""
    ml, ms = _bench_modules()
    shape = ms.BY_NAME[shape_name]
    path = ms.ensure(shape, str(tmp_path), tiny=400, log=lambda *a: None)
    cols = ms.raw(shape, False, 400)
    vocab = ms.vocabularies(shape, cols)
    assert ml.reader_available(reader) is None
    assert ml.check_reader(reader, shape, ms.files(path), 2, vocab, ms.reference(shape, cols)) == (
        True, "values equal to the reference")


def test_the_turbojpeg_limit_refuses_a_corrupt_jpeg():
    import pyarrow as pa

    ml, ms = _bench_modules()
    converter = ml.Converter(ms.BY_NAME["images-small"], {}, "tj")
    with pytest.raises(ValueError, match="could not decode row 0"):
        converter.images(pa.array([b"\xff\xd8 not a jpeg"], pa.binary()))


def test_the_memo_maps_each_dictionary_once_by_its_bytes():
    import pyarrow as pa

    ml, ms = _bench_modules()
    vocab = ml.Vocab({"s00": ["a", "b", "c"]})
    vocab.memo = {}
    converter = ml.Converter(ms.BY_NAME["strings"], vocab)

    def chunk(values, indices):
        return pa.DictionaryArray.from_arrays(pa.array(indices, pa.int32()), pa.array(values))

    first = converter.ids("s00", chunk(["c", "a"], [0, 1, 1]))
    again = converter.ids("s00", chunk(["c", "a"], [1, 0]))  # equal bytes, another object
    other = converter.ids("s00", chunk(["b", "z"], [0, 1]))  # "z": not in the vocabulary
    assert first.tolist() == [3, 1, 1] and again.tolist() == [1, 3] and other.tolist() == [2, 0]
    assert len(vocab.memo) == 2


@pytest.mark.parametrize("shape_name, rows", [("narrow", 3000), ("wide", 5000), ("many", 3000)])
def test_the_parquet_column_reader_delivers_the_reference(tmp_path, shape_name, rows):
    """``parquet-cpp`` (Parquet's column reader in C++, the loader's way for fixed-width columns)
    and its warm variant deliver the reference's values; on the wide set with row groups of 1,250
    rows, more than one block of the stacked features (``_PQ_BLOCK``). Batches kept by the
    consumer stay as delivered: the reader's reused buffers are not written while held."""
    import numpy as np

    ml, ms = _bench_modules()
    shape = ms.BY_NAME[shape_name]
    path = ms.ensure(shape, str(tmp_path), tiny=rows, log=lambda *a: None)
    ref = ms.reference(shape, ms.raw(shape, False, rows))
    paths = ms.files(path)
    assert ml.reader_available("parquet-cpp") is None
    assert {"parquet-cpp", "parquet-cpp-warm"} <= set(ml.readers(shape))
    if shape_name == "wide":
        assert ml.row_groups(paths)[0] > ml._PQ_BLOCK
    for reader in ("parquet-cpp", "parquet-cpp-warm"):
        assert ml.check_reader(reader, shape, paths, 2, {}, ref) == (
            True, "values equal to the reference"), reader
    # Every batch kept: no buffer is reused, and the kept batches stay equal to the reference.
    outputs = ml._Outputs()
    kept = list(ml.read_parquet_cpp(shape, paths, 1, {}, outputs=outputs))
    made = len(outputs._buffers)
    assert made == sum(len(out) for _, out in kept)
    for key, want in ref.items():
        assert ml.same(np.concatenate([out[key] for _, out in kept]), want), key
    # Every batch dropped: the next pass reuses those buffers.
    del kept
    assert sum(n for n, _ in ml.read_parquet_cpp(shape, paths, 1, {}, outputs=outputs)) == rows
    assert len(outputs._buffers) == made


def test_the_parquet_column_reader_only_for_fixed_width_shapes():
    ml, ms = _bench_modules()
    for shape in ms.SHAPES:
        assert ("parquet-cpp" in ml.readers(shape)) == (shape.name in ("narrow", "wide", "many"))


def test_the_parquet_column_reader_refuses_nulls(tmp_path):
    """A null is an error, not a value: in a 1-D output (narrow's c) and in a stacked feature
    (wide's f007), through the reader and through the check that would let it win."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    ml, ms = _bench_modules()
    n = 40
    narrow = {"a": pa.array(np.arange(n)), "b": pa.array(np.arange(n)),
              "c": pa.array([None if i == 5 else float(i) for i in range(n)], pa.float32()),
              "d": pa.array(np.arange(n, dtype=np.float64))}
    wide = {f"f{j:03d}": pa.array([None if (j, i) == (7, 23) else float(i) for i in range(n)],
                                  pa.float32()) for j in range(ms.WIDE_F)}
    wide["label"] = pa.array(np.arange(n))
    for name, columns, column, group in (("narrow", narrow, "c", 0), ("wide", wide, "f007", 1)):
        path = str(tmp_path / f"{name}.parquet")
        pq.write_table(pa.table(columns), path, row_group_size=20)
        shape = ms.BY_NAME[name]
        with pytest.raises(ValueError, match=f"row group {group}: column {column} holds a null"):
            for _ in ml.read("parquet-cpp", shape, [path], 2, {}):
                pass
        ref = {k: c.to_numpy(zero_copy_only=False) for k, c in columns.items()}
        if name == "wide":
            ref = {"features": np.stack([ref[f"f{j:03d}"] for j in range(ms.WIDE_F)], axis=1)
                   .astype(np.float32), "label": ref["label"]}
        ok, why = ml.check_reader("parquet-cpp", shape, [path], 1, {}, ref)
        assert not ok and "holds a null" in why, why


def test_the_parquet_column_reader_reuses_only_buffers_nobody_holds():
    import numpy as np

    ml, _ = _bench_modules()
    outputs = ml._Outputs()
    first = outputs.take(10, np.int64)
    held = outputs.take(10, np.int64)[2:]  # a view of a view holds the buffer too
    address = first.ctypes.data
    del first
    again = outputs.take(8, np.int64)  # the released buffer, cut to 8 rows
    assert again.ctypes.data == address and len(again) == 8
    assert outputs.take(10, np.int64).ctypes.data not in (address, held.ctypes.data - 16)
    assert len(outputs._buffers) == 3
    assert outputs.take(10, np.float32, 3).shape == (10, 3)


def test_the_parquet_column_reader_that_does_not_build_is_unavailable(monkeypatch):
    """A reader that does not compile is left out with a reason (in the matrix's checks), not
    a crash."""
    ml, _ = _bench_modules()
    monkeypatch.setattr(ml, "_PQ_SOURCE", "#error not C++\n")
    monkeypatch.setattr(ml, "_PQ_LIB", [])
    assert "C++20 compiler" in ml.reader_available("parquet-cpp-warm")


def _small_row_groups(ms, shape, tmp_path, rows, group_rows):
    """A tiny set of `shape` rewritten with row groups of `group_rows` rows (more row groups, so
    more windows, than ``ensure``'s tiny sets have), and its reference."""
    import pyarrow.parquet as pq

    path = ms.ensure(shape, str(tmp_path / "data"), tiny=rows, log=lambda *a: None)
    out = tmp_path / "small-groups"
    out.mkdir()
    for p in ms.files(path):
        pq.write_table(pq.read_table(p), str(out / os.path.basename(p)), row_group_size=group_rows)
    return ms.files(str(out)), ms.reference(shape, ms.raw(shape, False, rows))


@pytest.mark.parametrize("shape_name, packed", [("narrow", False), ("narrow", True), ("wide", None),
                                                ("many", False), ("many", True)])
def test_the_shuffled_floor_delivers_every_row_once_inside_its_windows(tmp_path, shape_name, packed,
                                                                      monkeypatch):
    """``parquet-cpp-shuffled`` (the decode limit's reader, then the loader's shuffle: row groups
    in a random order, windows of whole row groups, each window's rows permuted and gathered into
    the batches), with both gathers (per column, and from packed rows): every reference row once;
    the rows at each window's places in the epoch are that window's row groups' rows, and not in
    their order in the files; batches of batch_size rows but the last (batches that span two
    windows); the row groups not in the files' order. Checked here from the rows' hashes, and by
    ``check_shuffled``, the matrix's check."""
    import dataclasses
    import functools

    import numpy as np

    ml, ms = _bench_modules()
    monkeypatch.setattr(ml, "read_parquet_cpp_shuffled",
                        functools.partial(ml.read_parquet_cpp_shuffled, packed=packed))
    shape = dataclasses.replace(ms.BY_NAME[shape_name], batch_size=256)  # batches across windows
    paths, ref = _small_row_groups(ms, ms.BY_NAME[shape_name], tmp_path, 3000, 250)
    groups = ml.row_groups(paths)
    assert len(groups) == 12 and ml.reader_available(ml.SHUFFLED) is None
    keys = list(ref)
    want = ml.row_hashes(ref, keys)
    assert len(np.unique(want)) == 3000  # every row its own hash: positions can be traced
    sizes, got = [], []
    for n, out in ml.read(ml.SHUFFLED, shape, paths, 2, {}, seed=5, window=600):
        assert set(out) == set(keys) and all(len(v) == n for v in out.values())
        for key, v in out.items():
            assert v.dtype == ref[key].dtype and v.shape[1:] == ref[key].shape[1:], key
        sizes.append(n)
        got.append(ml.row_hashes(out, keys))
    got = np.concatenate(got)
    assert sizes == [256] * 11 + [3000 - 256 * 11]
    order = np.searchsorted(np.sort(want), got)
    where = np.argsort(want)[order]  # the reference row delivered at each position
    assert np.array_equal(want[where], got)
    assert np.array_equal(np.sort(where), np.arange(3000))  # each row exactly once
    windows, _ = ml.shuffle_windows(groups, 600, 5)
    assert all(len(w) == 3 for w in windows)  # 750 rows: at least 600, of whole row groups
    assert [g for w in windows for g in w] != list(range(12))
    at = 0
    for w in windows:
        rows = np.concatenate([np.arange(g * 250, g * 250 + 250) for g in w])
        part = where[at:at + len(rows)]
        assert np.array_equal(np.sort(part), np.sort(rows))  # the window's rows, no others
        assert not np.array_equal(part, rows)  # permuted
        # Mixed through the window, not a shift or a few swaps: position and row uncorrelated.
        rank = np.argsort(np.argsort(part))
        assert abs(np.corrcoef(rank, np.arange(len(part)))[0, 1]) < 0.2
        at += len(rows)
    ok, why = ml.check_shuffled(ml.SHUFFLED, shape, paths, 2, ref, seed=5, window=600)
    assert ok, why
    # Another seed, another order; the same rows.
    other = np.concatenate([ml.row_hashes(out, keys) for _, out in
                            ml.read(ml.SHUFFLED, shape, paths, 2, {}, seed=6, window=600)])
    assert not np.array_equal(other, got) and np.array_equal(np.sort(other), np.sort(got))


@pytest.mark.parametrize("fault", ["identity", "across windows", "lost row", "batch size"])
def test_the_shuffled_floors_check_catches_a_wrong_reader(tmp_path, monkeypatch, fault):
    """``check_shuffled`` fails a floor whose windows are not permuted, that moves a row into
    another window, that delivers a row twice and loses another, or whose batches are cut
    otherwise."""
    import ctypes
    import dataclasses

    import numpy as np

    ml, ms = _bench_modules()
    shape = dataclasses.replace(ms.BY_NAME["many"], batch_size=256)
    paths, ref = _small_row_groups(ms, ms.BY_NAME["many"], tmp_path, 3000, 250)
    assert ml.check_shuffled(ml.SHUFFLED, shape, paths, 2, ref, window=600)[0]
    real = ml.read_parquet_cpp_shuffled
    if fault == "identity":
        lib = ml._c_lib()

        def identity(seed, n, address):
            np.frombuffer((ctypes.c_uint32 * n).from_address(address), np.uint32)[:] = np.arange(n)

        monkeypatch.setattr(lib, "shuffle_perm", identity)
        expect = "not permuted"
    else:
        def wrong(*args, **kwargs):
            batches = [(n, {k: v.copy() for k, v in out.items()}) for n, out in real(*args, **kwargs)]
            first, last = batches[0][1], batches[-1][1]
            for key in first:
                if fault == "across windows":  # swap a row of the first window with the last's
                    first[key][0], last[key][-1] = last[key][-1].copy(), first[key][0].copy()
                elif fault == "lost row":
                    first[key][1] = first[key][0]
            if fault == "batch size":
                n, out = batches.pop(0)
                batches[:0] = [(128, {k: v[:128] for k, v in out.items()}),
                               (n - 128, {k: v[128:] for k, v in out.items()})]
            yield from batches

        monkeypatch.setattr(ml, "read_parquet_cpp_shuffled", wrong)
        expect = {"across windows": "rows of other windows", "lost row": "not a permutation",
                  "batch size": "batch sizes"}[fault]
    ok, why = ml.check_shuffled(ml.SHUFFLED, shape, paths, 2, ref, window=600)
    assert not ok and expect in why, why


def test_the_shuffled_floors_permutation_is_uniform():
    """``shuffle_perm`` (Fisher-Yates with wyrand): every permutation of 4 equally often over
    24,000 seeds (a chi-square far below what a biased shuffle gives: always swapping with a
    lower index, Sattolo's, never leaves a value in place), and a permutation of 0..n-1 for a
    large n."""
    import ctypes

    import numpy as np

    ml, _ = _bench_modules()
    lib = ml._c_lib()
    perm = np.empty(4, np.uint32)
    counts = {}
    for seed in range(24_000):
        lib.shuffle_perm(ctypes.c_uint64(seed * 0x9E3779B97F4A7C15 % (1 << 64)), 4, perm.ctypes.data)
        counts[tuple(perm)] = counts.get(tuple(perm), 0) + 1
    assert len(counts) == 24
    chi2 = sum((c - 1000) ** 2 / 1000 for c in counts.values())
    assert chi2 < 60, (chi2, counts)  # 23 degrees of freedom: p < 1e-4 above 60
    big = np.empty(300_000, np.uint32)
    lib.shuffle_perm(7, len(big), big.ctypes.data)
    assert np.array_equal(np.sort(big), np.arange(len(big)))


def test_the_shuffled_floor_is_never_a_decode_limit():
    """The floor is measured for the fixed-width shapes only, and never among the decode readers
    (it does more than they do: it would never be the fastest, and must not be taken for one)."""
    ml, ms = _bench_modules()
    sys.path.insert(0, ROOT)
    try:
        from bench import matrix
    finally:
        sys.path.remove(ROOT)
    assert matrix.SHUFFLED_FLOOR == ml.SHUFFLED
    for shape in ms.SHAPES:
        assert ml.SHUFFLED not in ml.readers(shape)
        assert ml.floors(shape) == ([ml.SHUFFLED] if shape.name in ("narrow", "wide", "many") else [])
