"""Objects reused across rows and tasks: a failing input, then good ones on the same worker thread
(or process), and the good ones must come out exact.

Issue 22, item 1: a JPEG whose header libjpeg refuses left the worker thread's TurboJPEG handle
mid-header, so every later JPEG on that thread failed as well: ``on_error="zero"`` zeroed good
rows, the cache stored them as failed, and a good image in another column raised naming that
column. The audit in docs/reliability.md ("Objects reused across rows and tasks") lists each reused
object and its test; the Python side is here (the C++ side: ``ReuseAfterFailure.*`` in
cpp/src/transform/image_test.cc, ``DecodeNpy.AFailureBetweenGoodRowsLeavesThemExact`` in
array_test.cc, cpp/src/catalog/reuse_after_failure_test.cc).

Every fixture is written by a real encoder: Pillow (its libjpeg, libpng and libwebp), numpy.save,
pyarrow with zstd and snappy.
"""

from __future__ import annotations

import io
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

import stoker
from stoker import _stoker, ops
from stoker._pyworkers import ThreadRunner, make_runner
from stoker.errors import CorruptFileError, TransformError

pytestmark = pytest.mark.timeout(300)

H, W = 48, 64
ROWS = 24
ROW_GROUP = 4


# ------------------------------------------------------------------------------------ fixtures

def photo(seed, h=H, w=W):
    """A photo-like RGB image: smooth colour regions plus fine noise (distinct per seed)."""
    rng = np.random.default_rng(seed)
    coarse = rng.integers(0, 256, (h // 8 + 2, w // 8 + 2, 3), dtype=np.uint8)
    smooth = np.asarray(Image.fromarray(coarse).resize((w, h), Image.Resampling.BICUBIC))
    return np.clip(smooth.astype(np.int16) + rng.integers(-12, 13, (h, w, 3)), 0, 255).astype(
        np.uint8)


def encode(array, fmt, **options):
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, fmt, **options)
    return buffer.getvalue()


def npy(array):
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def bad_header(jpeg):
    """The issue's repro: an unknown marker (0xFFBE) spliced into a valid JPEG's header."""
    return jpeg[:20] + b"\xff\xbe" + jpeg[20:]


def flip_middle(data):
    out = bytearray(data)
    start = len(data) * 2 // 3
    for i in range(start, start + 64):
        out[i] ^= 0x5A
    return bytes(out)


def twelve_bit(jpeg):
    """A JPEG whose frame header says 12-bit samples (valid JPEG; libjpeg-turbo decodes 8)."""
    sof = jpeg.index(b"\xff\xc0")
    return jpeg[:sof + 4] + b"\x0c" + jpeg[sof + 5:]


def good_value(column, row):
    image = photo(1000 + row)
    if column == "npy":
        return npy(np.random.default_rng(row).standard_normal((3, 5)).astype(np.float32))
    if column == "png":
        return encode(image, "PNG")
    if column == "webp":
        return encode(image, "WEBP", lossless=True)
    return encode(image, "JPEG", quality=90)


def bad_values(column):
    """The failing inputs of a column, each failing somewhere else in its decoder."""
    if column == "npy":
        good = good_value("npy", 0)
        return [good[:-7], npy(np.zeros((3, 5), np.complex64)),
                npy(np.zeros(3, [("a", "<i4"), ("b", "<f4")])), b"\x93NUMPY garbage"]
    if column == "png":
        good = good_value("png", 0)
        return [flip_middle(good), good[:len(good) // 2], b"\x89PNG\r\n\x1a\n" + b"\0" * 40]
    if column == "webp":
        good = good_value("webp", 0)
        return [good[:len(good) // 2], good[:40]]
    jpeg = good_value("jpeg", 0)
    return [bad_header(jpeg), jpeg[:len(jpeg) // 2], flip_middle(jpeg), twelve_bit(jpeg),
            b"\xff\xd8\xff not a jpeg"]


# Every decode path an image or array takes; each column reads its own copy of the bytes.
CHAINS = {
    "jpeg_fused": [ops.decode_image(), ops.resize([32, 32])],  # DCT-scaled decode
    # A crop shrinking less than 2x: the libjpeg region decoder.
    "jpeg_region": [ops.decode_image(), ops.center_crop(40), ops.resize([32, 32])],
    "jpeg_full": [ops.decode_image(shape=[H, W])],
    "jpeg_gray": [ops.decode_image(mode="L", shape=[H, W])],
    "jpeg_rgba": [ops.decode_image(mode="RGBA", shape=[H, W])],
    "png": [ops.decode_image(shape=[H, W])],
    "webp": [ops.decode_image(shape=[H, W])],
    "npy": [ops.decode_npy(dtype="float32", shape=[3, 5])],
}
COLUMNS = list(CHAINS)


def bad_rows(c):
    """The rows where column number `c` holds a failing input: a different set per column, row
    0 for the first (the issue's [bad, good, good, good])."""
    return {r for r in range(ROWS) if r % 5 == c % 5}


def write(path, clean):
    data = {"id": np.arange(ROWS, dtype=np.int64)}
    for c, column in enumerate(COLUMNS):
        kind = column.split("_")[0]
        bads = bad_values(kind)
        values = []
        for row in range(ROWS):
            if not clean and row in bad_rows(c):
                values.append(bads[row // 5 % len(bads)])
            else:
                values.append(good_value(kind, row))
        data[column] = pa.array(values, pa.binary())
    pq.write_table(pa.table(data), path, row_group_size=ROW_GROUP)


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("reuse")
    bad, clean = str(root / "bad.parquet"), str(root / "clean.parquet")
    write(bad, clean=False)
    write(clean, clean=True)
    return bad, clean


def load(path, **options):
    """Every row of an epoch, by id: {column: [rows]} (copies)."""
    options = dict(dict(batch_size=5, shuffle=False, drop_last=False, on_error="zero",
                        transforms=CHAINS), **options)
    with stoker.Loader(path, **options) as loader:
        out = {}
        for batch in loader:
            for key, value in batch.items():
                out.setdefault(key, []).extend(np.array(value, copy=True))
        loader.flush_cache()
    assert out["id"] == list(range(ROWS))
    return out


def assert_exact_after_failures(got, clean):
    for c, column in enumerate(COLUMNS):
        bad = bad_rows(c)
        assert [bool(v) for v in got[column + "_valid"]] == [r not in bad for r in range(ROWS)], \
            column
        for row in range(ROWS):
            if row in bad:
                assert not got[column][row].any(), (column, row)
            else:
                assert got[column][row].tobytes() == clean[column][row].tobytes(), (column, row)


# ------------------------------------------------------------------------------------- tests

def test_the_issues_repro(tmp_path):
    """[bad, good, good, good] through decode_image + resize on one thread: [F, T, T, T]."""
    good = encode(photo(7), "JPEG", quality=90)
    path = str(tmp_path / "r.parquet")
    pq.write_table(pa.table({"image": [bad_header(good), good, good, good]}), path)
    chain = {"image": [ops.decode_image(), ops.resize([32, 32])]}
    reference = _stoker.apply_ops(chain["image"], good)
    cache = str(tmp_path / "cache")
    for options in ({}, {"cache_dir": cache}, {"cache_dir": cache}):  # no cache, cold, warm
        with stoker.Loader(path, batch_size=4, transforms=chain, num_threads=1, shuffle=False,
                           on_error="zero", **options) as loader:
            batch = next(iter(loader))
            loader.flush_cache()
        assert batch["image_valid"].tolist() == [False, True, True, True], options
        for row in (1, 2, 3):
            assert batch["image"][row].tobytes() == reference.tobytes()


@pytest.mark.parametrize("num_threads", [1, 2])
def test_every_decoder_after_failures_cold_and_warm_cache(datasets, tmp_path, num_threads):
    bad, clean_path = datasets
    clean = load(clean_path, num_threads=1)
    assert all(all(clean[c + "_valid"]) for c in COLUMNS)
    assert_exact_after_failures(load(bad, num_threads=num_threads), clean)
    cache = str(tmp_path / "cache")
    assert_exact_after_failures(load(bad, num_threads=num_threads, cache_dir=cache), clean)
    with stoker.Loader(bad, batch_size=5, shuffle=False, drop_last=False, on_error="zero",
                       transforms=CHAINS, num_threads=num_threads, cache_dir=cache) as warm:
        assert_exact_after_failures(load_epoch(warm), clean)
        assert warm.stats()["transforms"]["prefix_rows"] == 0  # served by the cache


def load_epoch(loader):
    out = {}
    for batch in loader:
        for key, value in batch.items():
            out.setdefault(key, []).extend(np.array(value, copy=True))
    return out


def test_good_rows_match_the_references(datasets):
    """The clean run itself against Pillow and numpy: exact for lossless formats and arrays,
    within one level for JPEG (another libjpeg-turbo build)."""
    _, clean_path = datasets
    clean = load(clean_path, num_threads=1)
    for row in range(ROWS):
        image = Image.open(io.BytesIO(good_value("jpeg", row)))
        for column, mode in (("jpeg_full", "RGB"), ("jpeg_gray", "L"), ("jpeg_rgba", "RGBA")):
            want = np.asarray(image.convert(mode)).reshape(H, W, -1)
            assert np.abs(clean[column][row].astype(np.int16) - want).max() <= 1, (column, row)
        for column in ("png", "webp"):
            want = np.asarray(Image.open(io.BytesIO(good_value(column, row))).convert("RGB"))
            assert clean[column][row].tobytes() == want.tobytes(), (column, row)
        want = np.load(io.BytesIO(good_value("npy", row)))
        assert clean["npy"][row].tobytes() == want.tobytes()


def test_a_good_image_in_another_column_is_not_blamed(tmp_path):
    """Two image columns: a bad header in 'a' must not fail the good JPEG of 'b' (which raised
    CorruptFileError naming 'b'), and with both raising the error names 'a'."""
    good = encode(photo(3), "JPEG", quality=90)
    path = str(tmp_path / "two.parquet")
    pq.write_table(pa.table({"a": [bad_header(good), good, good], "b": [good, good, good]}), path)
    chain = [ops.decode_image(), ops.resize([32, 32])]
    reference = _stoker.apply_ops(chain, good).tobytes()
    for num_threads in (1, 2):
        with stoker.Loader(path, batch_size=3, num_threads=num_threads, shuffle=False,
                           transforms={"a": chain, "b": chain}, on_error={"a": "zero"}) as loader:
            batch = next(iter(loader))
        assert batch["a_valid"].tolist() == [False, True, True]
        assert all(image.tobytes() == reference for image in batch["b"])
        with stoker.Loader(path, batch_size=3, num_threads=num_threads, shuffle=False,
                           transforms={"a": chain, "b": chain}) as loader:
            with pytest.raises(CorruptFileError) as info:
                next(iter(loader))
        message = str(info.value)
        assert "column 'a'" in message and "column 'b'" not in message, message
        assert "row group 0, row 0" in message, message


def test_op_level_decoders_after_failures_on_the_calling_thread():
    """apply_ops runs on the calling thread: every failing input of every kind, then every good
    one, on one thread, against a fresh process's answers (the clean column in `load`)."""
    goods = {column: [good_value(column.split("_")[0], row) for row in range(3)]
             for column in COLUMNS}
    want = {column: [_stoker.apply_ops(CHAINS[column], value).tobytes() for value in values]
            for column, values in goods.items()}
    for failing_column in COLUMNS:
        for failing in bad_values(failing_column.split("_")[0]):
            with pytest.raises((CorruptFileError, stoker.errors.UnsupportedInputError)):
                _stoker.apply_ops(CHAINS[failing_column], failing)
            for column, values in goods.items():
                got = [_stoker.apply_ops(CHAINS[column], value).tobytes() for value in values]
                assert got == want[column], (failing_column, column)


def test_hash_bucket_after_failed_rows(tmp_path):
    """hash_bucket keeps no hasher between rows: null rows (failing under on_error="zero") among
    good ones leave the good ids those of a clean run."""
    words = [f"word-{i}" for i in range(ROWS)]
    path, clean_path = str(tmp_path / "h.parquet"), str(tmp_path / "clean.parquet")
    pq.write_table(pa.table({"w": [None if i % 5 == 0 else w for i, w in enumerate(words)]}),
                   path, row_group_size=ROW_GROUP)
    pq.write_table(pa.table({"w": words}), clean_path, row_group_size=ROW_GROUP)
    chain = {"w": [ops.hash_bucket(1 << 20)]}
    for num_threads in (1, 2):
        for cache in (None, str(tmp_path / "cache"), str(tmp_path / "cache")):
            kw = dict(batch_size=ROWS, shuffle=False, drop_last=False, transforms=chain,
                      num_threads=num_threads, cache_dir=cache)
            with stoker.Loader(path, on_error="zero", **kw) as loader:
                got = next(iter(loader))
                loader.flush_cache()
            with stoker.Loader(clean_path, **dict(kw, cache_dir=None)) as loader:
                want = next(iter(loader))
            assert got["w_valid"].tolist() == [i % 5 != 0 for i in range(ROWS)]
            for i in range(ROWS):
                if i % 5:
                    assert got["w"][i] == want["w"][i], i


# ------------------------------------------------- Arrow's decompression and recycled buffers

def _corrupt_page(path, row_group, column):
    """Overwrites the compressed payload of `column`'s data page in `row_group` with 0xFF bytes
    (the page header stays), so decompressing it fails."""
    meta = pq.ParquetFile(path).metadata.row_group(row_group).column(column)
    start = meta.data_page_offset
    end = start + meta.total_compressed_size
    with open(path, "r+b") as f:
        f.seek(start + (end - start) // 2)
        f.write(b"\xff" * ((end - start) // 2 - 4))


@pytest.mark.parametrize("codec", ["zstd", "snappy"])
def test_arrow_decompression_after_a_corrupt_page(tmp_path, codec):
    """A corrupt page raises CorruptFileError; the page buffers it used go back to the process's
    recycling pool, and the next loaders (cold and warm cache, one and two threads) reuse them:
    their batches equal pyarrow's."""
    rng = np.random.default_rng(5)
    rows = 4000
    table = pa.table({
        "id": np.arange(rows, dtype=np.int64),
        "x": pa.array(rng.standard_normal(rows), mask=rng.random(rows) < 0.1),
        "s": [f"s{int(v)}" * (1 + int(v) % 4) for v in rng.integers(0, 10**6, rows)],
    })
    bad, good = str(tmp_path / "bad.parquet"), str(tmp_path / "good.parquet")
    for path in (bad, good):
        pq.write_table(table, path, row_group_size=1000, compression=codec,
                       use_dictionary=False)
    _corrupt_page(bad, 1, 2)
    with pytest.raises(Exception):
        pq.ParquetFile(bad).read_row_group(1)  # pyarrow fails on it too
    options = dict(batch_size=500, shuffle=False, drop_last=False, fill_null={"x": 0.0})
    want_x = np.nan_to_num(table.column("x").to_numpy(zero_copy_only=False), nan=0.0)
    cache = str(tmp_path / "cache")
    for num_threads in (1, 2):
        for cache_dir in (None, cache, cache):
            with stoker.Loader(bad, num_threads=num_threads, **options) as loader:
                with pytest.raises(CorruptFileError, match=r"row group 1"):
                    list(loader)
            with stoker.Loader(good, num_threads=num_threads, cache_dir=cache_dir,
                               **options) as loader:
                batches = list(loader)
                loader.flush_cache()
            assert np.concatenate([b["id"] for b in batches]).tolist() == list(range(rows))
            got_x = np.concatenate([b["x"] for b in batches])
            assert got_x.tobytes() == want_x.tobytes()
            got_s = [s for b in batches for s in stoker.to_pylist(b["s"])]
            assert got_s == table.column("s").to_pylist()


# ------------------------------------------------------------ Python worker processes' arenas

def transform_or_raise(arrays):
    """Raises on the row group starting at row 8 the first time this process sees it (a marker
    file makes it once per test), else doubles x; the output is as large as the input."""
    marker = os.environ.get("STOKER_TEST_RAISE_ONCE")
    if marker and int(arrays["id"][0]) == 8 and not os.path.exists(marker):
        open(marker, "w").close()
        raise ValueError("failing once")
    return {"id": arrays["id"], "x": arrays["x"] * 2, "v": arrays["v"][:, ::-1].copy()}


def augment_or_raise(batch, rng):
    marker = os.environ.get("STOKER_TEST_RAISE_ONCE")
    if marker and int(batch["id"][0]) == 8 and not os.path.exists(marker):
        open(marker, "w").close()
        raise ValueError("failing once")
    return {"id": batch["id"], "x": batch["x"] + rng.standard_normal(len(batch["x"]))}


def big_or_raise(arrays):
    n = int(arrays["n"][0])
    if n < 0:
        raise ValueError("negative")
    return {"out": np.arange(n, dtype=np.int64) * 3 + 1}


@pytest.mark.timeout(180)
def test_process_runner_worker_after_a_user_error():
    """The same worker process (one) and its arenas: a call that raises after a large output,
    then smaller and larger calls; each result equals the thread runner's."""
    runner = make_runner({"t": big_or_raise}, 1)
    try:
        pid = runner.pids
        for n in (200_000, -1, 10, -1, 300_000, -1, 0, 5):
            arrays = {"n": np.array([n])}
            if n < 0:
                with pytest.raises(TransformError, match="negative"):
                    runner.call("t", arrays, "rg")
                continue
            got = runner.call("t", arrays, "rg")
            want = ThreadRunner({"t": big_or_raise}).call("t", arrays, "rg")
            assert got["out"].tobytes() == want["out"].tobytes(), n
        assert runner.pids == pid  # one process throughout: a user error keeps it
    finally:
        runner.close()


@pytest.mark.timeout(240)
@pytest.mark.parametrize("stage", ["transform", "augment"])
def test_python_workers_after_a_failing_call(tmp_path, monkeypatch, stage):
    """python_workers=1: the callable raises on one row group (or batch) the first time; the
    epoch raises TransformError; the next epoch of the same loader (the same worker process and
    shared-memory arenas), cold and then warm cache, equals a run that never failed."""
    rows = 40
    rng = np.random.default_rng(2)
    path = str(tmp_path / "d.parquet")
    pq.write_table(pa.table({
        "id": np.arange(rows, dtype=np.int64),
        "x": rng.standard_normal(rows).astype(np.float32),
        "v": pa.FixedSizeListArray.from_arrays(
            pa.array(rng.standard_normal(rows * 3).astype(np.float32)), 3),
    }), path, row_group_size=8)
    options = dict(batch_size=8, shuffle=False, drop_last=False, seed=3, num_threads=1)
    if stage == "transform":
        options["transform"] = transform_or_raise
        options["cache_dir"] = str(tmp_path / "cache")
    else:
        options["augment"] = augment_or_raise
        options["columns"] = ["id", "x"]
    with stoker.Loader(path, **options) as loader:  # thread mode, no failure: the reference
        want = [{k: np.array(v, copy=True) for k, v in b.items()} for b in loader]
        loader.flush_cache()
    if "cache_dir" in options:
        options["cache_dir"] = str(tmp_path / "cache2")
    monkeypatch.setenv("STOKER_TEST_RAISE_ONCE", str(tmp_path / "raised"))
    with stoker.Loader(path, python_workers=1, **options) as loader:
        with pytest.raises(TransformError, match="failing once"):
            list(loader)
        for _ in range(2):  # the next epochs: the same worker, cold then warm cache
            loader.set_epoch(0)
            got = [{k: np.array(v, copy=True) for k, v in b.items()} for b in loader]
            loader.flush_cache()
            assert len(got) == len(want)
            for a, b in zip(got, want):
                assert a.keys() == b.keys()
                for key in a:
                    assert a[key].tobytes() == b[key].tobytes(), key
