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
                      "shuffled / unshuffled: cold, warm", "decode limit won", "memory limit won",
                      "flags"]
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
