"""Push-down transforms in the pipeline: chains declared per column run on the workers, the
deterministic prefix is cached, random ops are keyed by (seed, epoch, row id, op index)."""

from __future__ import annotations

import io
import itertools

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stoker
from stoker import errors, ops
from stoker_testdata import digest
from stoker_testdata import jpeg_bytes as _jpeg

ROWS = 120
PIL = pytest.importorskip("PIL.Image")


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    root = tmp_path_factory.mktemp("transforms")
    rng = np.random.default_rng(3)
    blobs = [_jpeg(rng, int(rng.integers(40, 70)), int(rng.integers(40, 70))) for _ in range(ROWS)]
    table = pa.table({
        "id": np.arange(ROWS, dtype=np.int64),
        "image": pa.array(blobs, pa.binary()),
        "price": rng.gamma(2.0, 3.0, ROWS),
        "city": pa.array([f"city-{i % 13}" for i in range(ROWS)]),
    })
    path = str(root / "data.parquet")
    pq.write_table(table, path, row_group_size=25)
    return path, blobs


CHAIN = [ops.decode_image(), ops.resize([40, 40]), ops.random_resized_crop(24),
         ops.horizontal_flip(), ops.normalize([0.5, 0.5, 0.5], [0.25, 0.25, 0.25]), ops.to_chw()]
OPTIONS = dict(columns=["id", "image"], batch_size=16, seed=9, shuffle_window=60,
               transforms={"image": CHAIN})


def _by_id(loader):
    return {int(i): img.copy() for b in loader for i, img in zip(b["id"], b["image"])}


def test_images_arrive_as_model_ready_tensors(images):
    path, blobs = images
    loader = stoker.Loader(path, **OPTIONS)
    info = loader.columns["image"]
    assert info.dtype == "float32" and list(info.inner_shape) == [3, 24, 24]
    batch = next(iter(loader))
    assert batch["image"].shape == (16, 3, 24, 24) and batch["image"].dtype == np.float32
    # Without random ops the result is Pillow's decode and resize, normalised (within 1 level).
    plain = stoker.Loader(path, columns=["id", "image"], batch_size=16, shuffle=False,
                          transforms={"image": [ops.decode_image(), ops.resize([40, 40])]})
    first = next(iter(plain))
    for row in range(4):
        want = np.asarray(PIL.open(io.BytesIO(blobs[row])).convert("RGB").resize(
            (40, 40), PIL.BILINEAR), dtype=np.int16)
        assert np.abs(first["image"][row].astype(np.int16) - want).max() <= 1


def test_same_row_same_augmentation_whatever_the_order_threads_and_cache(images, tmp_path):
    path, _ = images
    reference = _by_id(stoker.Loader(path, num_threads=1, **OPTIONS))
    assert len(reference) == ROWS - ROWS % 16
    unshuffled = _by_id(stoker.Loader(path, shuffle=False, num_threads=2,
                                      **{k: v for k, v in OPTIONS.items()}))
    for row_id, image in unshuffled.items():
        if row_id in reference:  # the same row, at another batch position
            np.testing.assert_array_equal(image, reference[row_id])
    cache = str(tmp_path / "cache")
    for _ in range(2):  # cold, then warm
        cached = stoker.Loader(path, cache_dir=cache, num_threads=2, **OPTIONS)
        assert digest(cached) == digest(stoker.Loader(path, num_threads=1, **OPTIONS))
        cached.flush_cache()  # close() drops entries still queued behind the pipeline
    warm = stoker.Loader(path, cache_dir=cache, **OPTIONS)
    list(warm)
    assert warm.stats()["cache"]["misses"] == 0 and warm.stats()["cache"]["hits"] > 0


def test_another_epoch_draws_other_augmentations_and_resume_repeats_them(images):
    path, _ = images
    loader = stoker.Loader(path, **OPTIONS)
    epoch0 = digest(loader)
    epoch1 = digest(loader)  # the next epoch
    assert epoch0 != epoch1
    it = iter(stoker.Loader(path, **OPTIONS))
    next(it)
    resumed_from = stoker.Loader(path, **OPTIONS)
    head = digest(itertools.islice(resumed_from, 3))
    resumed = stoker.Loader(path, **OPTIONS)
    resumed.load_state_dict(resumed_from.state_dict())
    assert head + digest(resumed) == epoch0


def test_a_changed_transform_never_reads_stale_cache_entries(images, tmp_path):
    path, _ = images
    cache = str(tmp_path / "cache")
    make = lambda size: stoker.Loader(  # noqa: E731
        path, columns=["id", "image"], batch_size=16, seed=1, cache_dir=cache,
        transforms={"image": [ops.decode_image(), ops.resize([size, size])]})
    first = make(32)
    assert next(iter(first))["image"].shape[1:] == (32, 32, 3)
    second = make(20)
    batch = next(iter(second))
    assert batch["image"].shape[1:] == (20, 20, 3)
    assert second.stats()["cache"]["misses"] > 0  # another key: decoded again, not reused


def test_feature_ops_match_numpy(images):
    path, _ = images
    loader = stoker.Loader(path, columns=["id", "price", "city"], batch_size=ROWS, shuffle=False,
                           drop_last=False,
                           transforms={"price": [ops.log1p(), ops.standardize(1.5, 0.5)],
                                       "city": [ops.hash_bucket(1000)]})
    batch = next(iter(loader))
    table = pq.read_table(path)
    price = table["price"].to_numpy()
    np.testing.assert_allclose(batch["price"], ((np.log1p(price) - 1.5) / 0.5).astype(np.float32),
                               rtol=1e-6)

    def fnv1a(text):
        h = 0xCBF29CE484222325
        for byte in text.encode():
            h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
        return h

    expected = [fnv1a(c) % 1000 for c in table["city"].to_pylist()]
    assert batch["city"].dtype == np.int64 and batch["city"].tolist() == expected


def test_bad_chains_fail_at_open_naming_op_and_column(images):
    path, _ = images
    with pytest.raises(errors.InvalidOptionError, match="no_such_op"):
        stoker.Loader(path, columns=["image"], transforms={"image": [{"op": "no_such_op"}]})
    with pytest.raises(errors.StokerError, match="image"):  # variable shape where fixed is needed
        stoker.Loader(path, columns=["image"], transforms={"image": [ops.decode_image()]})
    with pytest.raises(errors.StokerError, match="price"):  # an image op on a float column
        stoker.Loader(path, columns=["price"], transforms={"price": [ops.decode_image()]})
    with pytest.raises(errors.InvalidOptionError, match="not in columns"):
        stoker.Loader(path, columns=["id"], transforms={"image": [ops.decode_image()]})
    with pytest.raises(errors.InvalidOptionError, match="not an op"):
        stoker.Loader(path, columns=["image"], transforms={"image": ["resize"]})


def test_a_corrupt_image_names_file_row_group_row_and_column(tmp_path):
    rng = np.random.default_rng(0)
    blobs = [_jpeg(rng, 32, 32) for _ in range(30)]
    blobs[17] = blobs[17][:40]  # truncated
    path = str(tmp_path / "bad.parquet")
    pq.write_table(pa.table({"image": pa.array(blobs, pa.binary())}), path, row_group_size=10)
    loader = stoker.Loader(path, columns=["image"], batch_size=10, shuffle=False,
                           transforms={"image": [ops.decode_image(), ops.resize([16, 16])]})
    with pytest.raises(errors.CorruptFileError) as raised:
        list(loader)
    message = str(raised.value)
    assert "bad.parquet" in message and "row group 1" in message and "row 7" in message
    assert "image" in message


def test_inspect_shows_what_a_chain_produces(images, capsys):
    import json

    from stoker.__main__ import main

    path, _ = images
    chain = {"image": [{"op": "decode_image"}, {"op": "resize", "size": [32, 32]},
                       {"op": "to_chw"}]}
    assert main(["inspect", path, "--columns", "image,price", "--json",
                 "--transforms", json.dumps(chain)]) == 0
    report = json.loads(capsys.readouterr().out)
    columns = {c["name"]: c for c in report["columns"]}
    assert columns["image"]["dtype"] == "uint8"
    assert list(columns["image"]["shape"]) == [3, 32, 32]
    described = stoker.describe(path, columns=["image"], transforms=chain)
    assert list(described.columns[0].inner_shape) == [3, 32, 32]
