"""Transforms beyond the basics: zero substitution of bad rows (on_error="zero"), bfloat16,
list and feature columns, several outputs per column, cached variable-shape prefixes."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stoker
from stoker import errors, ops
from stoker_testdata import digest
from stoker_testdata import jpeg_bytes as _jpeg

PIL = pytest.importorskip("PIL.Image")


BAD = {3, 17, 18, 29}  # rows with a truncated JPEG


@pytest.fixture(scope="module")
def bad_images(tmp_path_factory):
    rng = np.random.default_rng(0)
    blobs = [_jpeg(rng, int(rng.integers(30, 50)), int(rng.integers(30, 50))) for _ in range(30)]
    for row in BAD:
        blobs[row] = blobs[row][:40]
    path = str(tmp_path_factory.mktemp("bad") / "bad.parquet")
    pq.write_table(pa.table({"id": np.arange(30, dtype=np.int64),
                             "image": pa.array(blobs, pa.binary())}), path, row_group_size=10)
    return path, blobs


# The whole chain is the cached prefix; a full-size decode, to compare with Pillow's resize.
CACHED = [ops.decode_image(dct_scaling=False), ops.resize([16, 16])]
RANDOM = [ops.decode_image(), ops.random_resized_crop(12), ops.to_chw()]  # all per batch


@pytest.mark.parametrize("chain", [CACHED, RANDOM], ids=["cached-prefix", "per-batch"])
def test_on_error_zero_substitutes_zeros_and_flags_the_rows(bad_images, tmp_path, chain):
    path, blobs = bad_images
    common = dict(columns=["id", "image"], batch_size=10, shuffle=False, seed=2,
                  transforms={"image": chain})
    with pytest.raises(errors.CorruptFileError, match="row group 0, row 3.*image"):
        list(stoker.Loader(path, **common))  # the default still raises
    cache = str(tmp_path / "cache")
    digests = []
    for cache_dir in (None, cache, cache):  # no cache, cold, warm
        loader = stoker.Loader(path, on_error="zero", cache_dir=cache_dir, **common)
        batches = list(loader)
        assert [len(b["id"]) for b in batches] == [10, 10, 10]
        for batch in batches:
            valid = batch["image_valid"]
            assert valid.dtype == np.bool_ and valid.shape == (10,)
            for row_id, ok, image in zip(batch["id"], valid, batch["image"]):
                assert bool(ok) == (int(row_id) not in BAD)
                if not ok:
                    assert not image.any()
                else:
                    assert image.any()
        assert loader.stats()["transforms"]["substituted_rows"] == len(BAD)
        digests.append(digest(stoker.Loader(path, on_error="zero", cache_dir=cache_dir,
                                            **common)))
    assert digests[0] == digests[1] == digests[2]
    # Good rows are what a loader without bad rows gives.
    if chain is CACHED:
        plain = next(iter(stoker.Loader(path, on_error="zero", **common)))
        want = np.asarray(PIL.open(io.BytesIO(blobs[0])).convert("RGB").resize((16, 16),
                                                                             PIL.BILINEAR))
        assert np.abs(plain["image"][0].astype(int) - want.astype(int)).max() <= 1


def test_on_error_zero_per_column_and_torch(bad_images):
    path, _ = bad_images
    torch = pytest.importorskip("torch")
    loader = stoker.Loader(path, columns=["id", "image"], batch_size=10, shuffle=False,
                           output="torch", on_error={"image": "zero"},
                           transforms={"image": CACHED})
    batch = next(iter(loader))
    assert batch["image_valid"].dtype == torch.bool
    assert batch["image_valid"].tolist() == [i not in BAD for i in range(10)]


def test_on_error_zero_also_covers_null_rows(tmp_path):
    rng = np.random.default_rng(1)
    blobs = [_jpeg(rng, 20, 20) for _ in range(8)]
    blobs[5] = None
    path = str(tmp_path / "nulls.parquet")
    pq.write_table(pa.table({"image": pa.array(blobs, pa.binary())}), path)
    loader = stoker.Loader(path, columns=["image"], batch_size=8, shuffle=False,
                           on_error="zero", transforms={"image": CACHED})
    batch = next(iter(loader))
    assert batch["image_valid"].tolist() == [i != 5 for i in range(8)]
    with pytest.raises(errors.StokerError, match="image"):
        list(stoker.Loader(path, columns=["image"], batch_size=8, shuffle=False,
                           transforms={"image": CACHED}))


def test_on_error_wrong_combinations_fail_at_open(bad_images, tmp_path):
    path, _ = bad_images
    with pytest.raises(errors.InvalidOptionError, match="on_error.*'raise' or 'zero'"):
        stoker.Loader(path, columns=["image"], on_error="skip", transforms={"image": CACHED})
    with pytest.raises(errors.InvalidOptionError, match="on_error.*'id'.*no transforms"):
        stoker.Loader(path, columns=["id", "image"], on_error={"id": "zero"},
                      transforms={"image": CACHED})
    with pytest.raises(errors.InvalidOptionError, match="on_error names column 'nope'"):
        stoker.Loader(path, columns=["image"], on_error={"nope": "zero"},
                      transforms={"image": CACHED})
    clash = str(tmp_path / "clash.parquet")
    pq.write_table(pa.table({"image": pa.array([b"x"], pa.binary()),
                             "image_valid": pa.array([True])}), clash)
    with pytest.raises(errors.InvalidOptionError, match="image_valid"):
        stoker.Loader(clash, columns=["image", "image_valid"], on_error="zero", batch_size=1,
                      transforms={"image": CACHED})
    # on_error given for all columns does not trouble columns without transforms.
    loader = stoker.Loader(path, columns=["id", "image"], on_error="zero", batch_size=10,
                           transforms={"image": CACHED})
    assert "id" in loader.columns


# --- bfloat16 ------------------------------------------------------------------------------


def _bfloat16_bits(values):
    """float32 -> bfloat16 bits, round to nearest even (what normalize does)."""
    bits = np.asarray(values, np.float32).view(np.uint32).astype(np.uint64)
    bits = bits + 0x7FFF + ((bits >> 16) & 1)
    return (bits >> 16).astype(np.uint16)


def test_normalize_to_bfloat16_gives_torch_bfloat16(bad_images, tmp_path):
    torch = pytest.importorskip("torch")
    path, _ = bad_images
    chain = [ops.decode_image(), ops.resize([8, 8]), ops.normalize(0.5, 0.25, dtype="bfloat16")]
    reference = [ops.decode_image(), ops.resize([8, 8]), ops.normalize(0.5, 0.25)]
    common = dict(columns=["id", "image"], batch_size=10, shuffle=False, on_error="zero")
    loader = stoker.Loader(path, output="torch", transforms={"image": chain}, **common)
    assert str(loader.columns["image"].dtype) == "bfloat16"
    wide = next(iter(stoker.Loader(path, transforms={"image": reference}, **common)))
    cache = str(tmp_path / "cache")
    for cache_dir in (None, cache, cache):  # the cached prefix stores bfloat16 bits
        batch = next(iter(stoker.Loader(path, output="torch", cache_dir=cache_dir,
                                        transforms={"image": chain}, **common)))
        assert batch["image"].dtype == torch.bfloat16 and batch["image"].shape == (10, 8, 8, 3)
        bits = batch["image"].view(torch.int16).numpy().view(np.uint16)
        np.testing.assert_array_equal(bits, _bfloat16_bits(wide["image"]))


def test_cast_to_bfloat16_of_a_feature_column(tmp_path):
    torch = pytest.importorskip("torch")
    path = str(tmp_path / "f.parquet")
    values = np.array([0.1, 1.5, -3.25, 1e30, 7.0], np.float64)
    pq.write_table(pa.table({"x": values}), path)
    loader = stoker.Loader(path, columns=["x"], batch_size=5, shuffle=False, output="torch",
                           transforms={"x": [ops.cast("float32", lossy=True),
                                             ops.cast("bfloat16")]})
    got = next(iter(loader))["x"]
    assert got.dtype == torch.bfloat16
    np.testing.assert_array_equal(got.float().numpy(),
                                  torch.tensor(values, dtype=torch.float32).bfloat16().float())


def test_bfloat16_with_numpy_output_is_refused_at_open(tmp_path):
    path = str(tmp_path / "f.parquet")
    pq.write_table(pa.table({"x": np.arange(4, dtype=np.float32)}), path)
    with pytest.raises(errors.InvalidOptionError, match="'x'.*output='torch'"):
        stoker.Loader(path, columns=["x"], batch_size=4,
                      transforms={"x": [ops.cast("bfloat16")]})
    with pytest.raises(errors.InvalidOptionError, match="features_dtype='bfloat16'"):
        stoker.Loader(path, features=["x"], features_dtype="bfloat16", batch_size=4)


# --- chains on feature columns -------------------------------------------------------------


def _fnv1a(text):
    h = 0xCBF29CE484222325
    for byte in text.encode():
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


@pytest.fixture(scope="module")
def tabular(tmp_path_factory):
    rng = np.random.default_rng(5)
    rows = 50
    columns = {f"f{i}": rng.normal(i, 1 + i, rows) for i in range(6)}
    columns["city"] = [f"city-{i % 7}" for i in range(rows)]
    columns["n"] = rng.integers(0, 100, rows).astype(np.int32)
    columns["vec"] = pa.array(rng.normal(0, 1, (rows, 2)).astype(np.float32).tolist(),
                              pa.list_(pa.float32(), 2))
    columns["tags"] = pa.array([list(rng.integers(0, 9, int(rng.integers(0, 5))).astype(np.int64))
                                for _ in range(rows)], pa.list_(pa.int64()))
    columns["words"] = pa.array([[f"w{j}" for j in rng.integers(0, 5, int(rng.integers(0, 4)))]
                                 for _ in range(rows)], pa.list_(pa.string()))
    path = str(tmp_path_factory.mktemp("tab") / "t.parquet")
    pq.write_table(pa.table(columns), path, row_group_size=20)
    return path, pa.table(columns)


def test_feature_chains_standardize_hash_and_cast_before_stacking(tabular, tmp_path):
    path, table = tabular
    means = [float(np.mean(table[f"f{i}"])) for i in range(6)]
    stds = [float(np.std(table[f"f{i}"])) for i in range(6)]
    transforms = {f"f{i}": [ops.standardize(means[i], stds[i])] for i in range(6)}
    transforms["city"] = [ops.hash_bucket(1000), ops.cast("float32")]
    features = [f"f{i}" for i in range(6)] + ["city", "n"]
    for cache_dir in (None, str(tmp_path / "c"), str(tmp_path / "c")):
        loader = stoker.Loader(path, features=features, batch_size=50, shuffle=False,
                               cache_dir=cache_dir, transforms=transforms,
                               allow_lossy_cast=True)  # float64 columns into float32
        batch = next(iter(loader))["features"]
        assert batch.shape == (50, 8) and batch.dtype == np.float32
        for i in range(6):
            want = ((table[f"f{i}"].to_numpy() - means[i]) / stds[i]).astype(np.float32)
            np.testing.assert_allclose(batch[:, i], want, rtol=1e-5, atol=1e-6)
        assert batch[:, 6].tolist() == [_fnv1a(c) % 1000 for c in table["city"].to_pylist()]
        assert batch[:, 7].tolist() == table["n"].to_numpy().astype(np.float32).tolist()


def test_feature_chain_errors_name_the_column(tabular):
    path, _ = tabular
    with pytest.raises(errors.StokerError, match="feature column 'vec'.*one number"):
        stoker.Loader(path, features=["vec"], transforms={"vec": [ops.standardize(0, 2)]})
    with pytest.raises(errors.LossyCastError, match="city"):  # int64 ids into float32
        stoker.Loader(path, features=["city"], transforms={"city": [ops.hash_bucket(10)]})
    with pytest.raises(errors.InvalidOptionError, match="not in columns or features"):
        stoker.Loader(path, features=["f0"], transforms={"f1": [ops.log1p()]})


# --- chains on list columns ----------------------------------------------------------------


def test_list_chains_apply_per_element_and_keep_padded_or_ragged(tabular, tmp_path):
    path, table = tabular
    tags = table["tags"].to_pylist()
    words = table["words"].to_pylist()
    transforms = {"tags": [ops.clip(1, 6), ops.standardize(3, 2)],
                  "words": [ops.hash_bucket(50)]}
    for cache_dir in (None, str(tmp_path / "c"), str(tmp_path / "c")):
        loader = stoker.Loader(path, columns=["tags", "words"], batch_size=50, shuffle=False,
                               lists={"tags": "ragged", "words": "padded"},
                               pad_value={"words": -1}, cache_dir=cache_dir,
                               transforms=transforms)
        assert str(loader.columns["tags"].dtype) == "float32"
        assert str(loader.columns["words"].dtype) == "int64"
        batch = next(iter(loader))
        ragged = batch["tags"]
        for row, want in enumerate(tags):
            got = ragged.values[ragged.offsets[row]:ragged.offsets[row + 1]]
            np.testing.assert_allclose(got, (np.clip(np.array(want, np.float64), 1, 6) - 3) / 2,
                                       rtol=1e-6)
        lengths = batch["words_lengths"]
        assert lengths.tolist() == [len(w) for w in words]
        for row, want in enumerate(words):
            assert batch["words"][row, :len(want)].tolist() == [_fnv1a(w) % 50 for w in want]
            assert (batch["words"][row, len(want):] == -1).all()


def test_list_chain_errors_at_open(tabular):
    path, _ = tabular
    # Padded strings need a chain (ragged ones come as nested offsets without one).
    with pytest.raises(errors.StokerError, match="words.*hash_bucket"):
        stoker.Loader(path, columns=["words"], lists="padded")
    with pytest.raises(errors.StokerError, match="tags.*horizontal_flip"):  # not per element
        stoker.Loader(path, columns=["tags"], lists="ragged",
                      transforms={"tags": [ops.cast("uint8"), ops.horizontal_flip()]})
    with pytest.raises(errors.InvalidOptionError, match="on_error='zero' for column 'tags'"):
        stoker.Loader(path, columns=["tags"], lists="ragged", on_error="zero",
                      transforms={"tags": [ops.log1p()]})
    with pytest.raises(errors.InvalidOptionError, match="pad_value"):  # checked on the output
        stoker.Loader(path, columns=["words"], lists="padded", pad_value=0.5,
                      transforms={"words": [ops.hash_bucket(5)]})


# --- several outputs per column ------------------------------------------------------------


def test_one_column_gives_an_image_and_its_size(tmp_path):
    rng = np.random.default_rng(7)
    sizes = [(int(rng.integers(20, 40)), int(rng.integers(20, 40))) for _ in range(24)]
    blobs = [_jpeg(rng, w, h) for w, h in sizes]
    path = str(tmp_path / "img.parquet")
    pq.write_table(pa.table({"id": np.arange(24, dtype=np.int64),
                             "image": pa.array(blobs, pa.binary())}), path, row_group_size=10)
    # Outputs share one full-size decode, so DCT-scaled decoding (which fuses decode_image with
    # the crop of a single chain) is off here for the single chain it is compared with.
    crop = [ops.decode_image(dct_scaling=False), ops.random_resized_crop(12), ops.to_chw()]
    common = dict(batch_size=8, seed=4, shuffle_window=24)
    loader = stoker.Loader(path, columns=["id", "image"], **common,
                           transforms={"image": {"image": crop,
                                                 "image_size": [ops.decode_image(dct_scaling=False),
                                                                ops.shape()]}})
    assert list(loader.columns) == ["id", "image", "image_size"]
    assert list(loader.columns["image_size"].inner_shape) == [3]
    single = stoker.Loader(path, columns=["id", "image"], **common, transforms={"image": crop})
    for batch, alone in zip(loader, single):
        assert batch["image"].shape == (8, 3, 12, 12)
        np.testing.assert_array_equal(batch["id"], alone["id"])
        np.testing.assert_array_equal(batch["image"], alone["image"])  # same draws
        for row_id, size in zip(batch["id"], batch["image_size"]):
            w, h = sizes[int(row_id)]
            assert size.tolist() == [h, w, 3]
    assert loader.stats()["transforms"]["substituted_rows"] == 0


def test_several_outputs_errors_at_open(bad_images):
    path, _ = bad_images
    with pytest.raises(errors.InvalidOptionError, match="'id'"):  # clashes with a column
        stoker.Loader(path, columns=["id", "image"],
                      transforms={"image": {"image": CACHED, "id": CACHED}})
    with pytest.raises(errors.InvalidOptionError, match="names no outputs"):
        stoker.Loader(path, columns=["image"], transforms={"image": {}})
    with pytest.raises(errors.InvalidOptionError, match="not in columns"):
        stoker.Loader(path, columns=["id"], transforms={"image": {"a": CACHED}})
    with pytest.raises(errors.InvalidOptionError, match="'id'.*also in features"):
        stoker.Loader(path, columns=["id"], features=["id"], allow_lossy_cast=True,
                      transforms={"id": {"a": [ops.log1p()], "b": [ops.log1p()]}})


def test_several_outputs_with_on_error_zero(bad_images):
    path, _ = bad_images
    loader = stoker.Loader(path, columns=["id", "image"], batch_size=10, shuffle=False,
                           on_error="zero",
                           transforms={"image": {"small": CACHED,
                                                 "size": [ops.decode_image(), ops.shape()]}})
    batch = next(iter(loader))
    want = [i not in BAD for i in range(10)]
    assert batch["small_valid"].tolist() == want and batch["size_valid"].tolist() == want
    assert not batch["size"][~batch["size_valid"]].any()


# --- cached prefixes of varying shape ------------------------------------------------------


def test_a_warm_epoch_decodes_no_jpeg(tmp_path):
    rng = np.random.default_rng(8)
    blobs = [_jpeg(rng, int(rng.integers(20, 40)), int(rng.integers(20, 40))) for _ in range(30)]
    path = str(tmp_path / "img.parquet")
    pq.write_table(pa.table({"id": np.arange(30, dtype=np.int64),
                             "image": pa.array(blobs, pa.binary())}), path, row_group_size=10)
    # A full-size decode can be cached apart from the random crop; a DCT-scaled one (the
    # default) is made for each crop, so it is not (see the next test).
    chain = [ops.decode_image(dct_scaling=False), ops.random_resized_crop(16),
             ops.horizontal_flip(), ops.to_chw()]
    common = dict(columns=["id", "image"], batch_size=10, seed=3, shuffle_window=30,
                  transforms={"image": chain})
    plain = stoker.Loader(path, **common)
    expected = digest(plain)
    # Without a cache_dir the whole chain runs per batch (decode next to its crop).
    assert plain.stats()["transforms"]["prefix_rows"] == 0
    assert plain.stats()["transforms"]["batch_rows"] == 30
    cache = str(tmp_path / "cache")
    cold = stoker.Loader(path, cache_dir=cache, **common)
    assert digest(cold) == expected
    assert cold.stats()["transforms"]["prefix_rows"] == 30  # decoded once, before the cache
    cold.flush_cache()
    warm = stoker.Loader(path, cache_dir=cache, **common)
    assert digest(warm) == expected
    assert warm.stats()["cache"]["misses"] == 0 and warm.stats()["cache"]["hits"] > 0
    assert warm.stats()["transforms"]["prefix_rows"] == 0  # no JPEG decoded
    assert digest(warm) != expected  # the next epoch: other crops, still from the cache
    assert warm.stats()["transforms"]["prefix_rows"] == 0


def test_dct_scaled_decode_gives_the_same_bytes_in_every_cache_state(tmp_path):
    """decode_image fused with its random crop (DCT scaling, the default) is never split by the
    cache: no cache, a cold cache and a warm cache give identical batches."""
    rng = np.random.default_rng(10)
    blobs = [_jpeg(rng, int(rng.integers(64, 96)), int(rng.integers(64, 96))) for _ in range(20)]
    path = str(tmp_path / "img.parquet")
    pq.write_table(pa.table({"id": np.arange(20, dtype=np.int64),
                             "image": pa.array(blobs, pa.binary())}), path, row_group_size=10)
    common = dict(columns=["id", "image"], batch_size=10, seed=3, shuffle_window=20,
                  transforms={"image": [ops.decode_image(), ops.random_resized_crop(12,
                                                                                    scale=[0.5, 1.0])]})
    expected = digest(stoker.Loader(path, **common))
    full = digest(stoker.Loader(path, **{**common, "transforms": {"image": [
        ops.decode_image(dct_scaling=False), ops.random_resized_crop(12, scale=[0.5, 1.0])]}}))
    assert full != expected  # DCT scaling was used: otherwise this test proves nothing
    cache = str(tmp_path / "cache")
    assert digest(stoker.Loader(path, cache_dir=cache, **common)) == expected
    warm = stoker.Loader(path, cache_dir=cache, **common)
    assert digest(warm) == expected
    assert warm.stats()["transforms"]["prefix_rows"] == 0  # nothing cached before the crop
    assert warm.stats()["transforms"]["batch_rows"] == 20


def test_several_outputs_share_the_cached_decode(tmp_path):
    rng = np.random.default_rng(9)
    blobs = [_jpeg(rng, int(rng.integers(20, 40)), int(rng.integers(20, 40))) for _ in range(20)]
    path = str(tmp_path / "img.parquet")
    pq.write_table(pa.table({"image": pa.array(blobs, pa.binary())}), path)
    outputs = {"image": {"crop": [ops.decode_image(), ops.random_crop(8)],
                         "size": [ops.decode_image(), ops.shape()]}}
    common = dict(columns=["image"], batch_size=10, seed=1, shuffle=False, transforms=outputs)
    expected = digest(stoker.Loader(path, **common))
    cache = str(tmp_path / "cache")
    for _ in range(2):
        loader = stoker.Loader(path, cache_dir=cache, **common)
        assert digest(loader) == expected
    assert loader.stats()["transforms"]["prefix_rows"] == 0


def test_describe_and_inspect_show_every_output(bad_images):
    path, _ = bad_images
    described = stoker.describe(path, columns=["id", "image"], transforms={
        "image": {"small": CACHED, "size": [ops.decode_image(), ops.shape()]}})
    columns = {c.name: c for c in described.columns}
    assert list(columns) == ["id", "small", "size"]
    assert list(columns["small"].inner_shape) == [16, 16, 3]
    assert str(columns["size"].dtype) == "int64" and list(columns["size"].inner_shape) == [3]
