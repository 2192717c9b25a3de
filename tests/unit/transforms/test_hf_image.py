"""A HuggingFace-style image column (Arrow ``struct<bytes: binary, path: string>``, what
``datasets`` writes for an ``Image()`` feature): ``transforms={"image": [...]}`` reads its
``bytes`` field and delivers the output as ``image``; ``image.path`` only when columns names it.
A struct without a binary ``bytes`` field takes no transforms under its own name, and the error
says which field to name.

The reference is Pillow's decode of the same bytes (PNG: lossless, so equal pixel for pixel).
"""

from __future__ import annotations

import io
import time
from typing import Dict, List

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stoker
from stoker import errors, ops
from stoker_testdata import load_in_order as load

Image = pytest.importorskip("PIL.Image")

ROWS = 10
HEIGHT, WIDTH = 12, 16
CHAIN = [ops.decode_image(), ops.center_crop([HEIGHT, WIDTH])]  # fixed shape, pixels unchanged


def _pictures() -> List["Image.Image"]:
    rng = np.random.default_rng(25)
    return [Image.fromarray(rng.integers(0, 256, (HEIGHT, WIDTH, 3), dtype=np.uint8))
            for _ in range(ROWS)]


def _png(picture) -> bytes:
    out = io.BytesIO()
    picture.save(out, format="PNG")
    return out.getvalue()


def _pillow(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


@pytest.fixture(scope="module")
def hf_file(tmp_path_factory) -> str:
    """What ``datasets`` writes for an Image() feature and a label."""
    datasets = pytest.importorskip("datasets")
    path = str(tmp_path_factory.mktemp("hf") / "hf.parquet")
    features = datasets.Features({"image": datasets.Image(),
                                  "label": datasets.Value("int64")})
    dataset = datasets.Dataset.from_dict(
        {"image": _pictures(), "label": list(range(ROWS))}, features=features)
    dataset.to_parquet(path)
    return path


@pytest.fixture(scope="module")
def arrow_file(tmp_path_factory) -> str:
    """The same layout written by pyarrow directly, with paths and large_binary bytes."""
    path = str(tmp_path_factory.mktemp("arrow") / "arrow.parquet")
    image = pa.StructArray.from_arrays(
        [pa.array([_png(p) for p in _pictures()], pa.large_binary()),
         pa.array([f"img/{i}.png" for i in range(ROWS)], pa.string())],
        names=["bytes", "path"])
    pq.write_table(pa.table({"image": image, "label": np.arange(ROWS, dtype=np.int64)}), path,
                   row_group_size=4)
    return path


def _stored_bytes(path: str) -> List[bytes]:
    return [row["bytes"] for row in pq.read_table(path, columns=["image"])["image"].to_pylist()]


def _images(batches: List[Dict[str, np.ndarray]]) -> np.ndarray:
    return np.concatenate([np.asarray(b["image"]) for b in batches])


def test_hf_file_is_the_struct_datasets_writes(hf_file):
    image = pq.read_schema(hf_file).field("image").type
    assert pa.types.is_struct(image)
    assert {image.field(i).name for i in range(image.num_fields)} == {"bytes", "path"}
    assert pa.types.is_binary(image.field("bytes").type)


@pytest.mark.parametrize("which", ["hf_file", "arrow_file"])
@pytest.mark.parametrize("cached", [False, True])
def test_transforms_on_the_struct_read_its_bytes(which, cached, request, tmp_path):
    path = request.getfixturevalue(which)
    kwargs = {"cache_dir": str(tmp_path / "cache")} if cached else {}
    epochs = []
    for _ in range(2 if cached else 1):  # with a cache: a cold epoch, then a warm one
        batches = load(path, batch_size=3, columns=["image", "label"],
                       transforms={"image": CHAIN}, **kwargs)
        assert all(set(b) == {"image", "label"} for b in batches)  # no image.path, no image.bytes
        epochs.append(_images(batches))
        assert np.concatenate([np.asarray(b["label"]) for b in batches]).tolist() == \
            list(range(ROWS))
    expected = np.stack([_pillow(b) for b in _stored_bytes(path)])
    for images in epochs:
        assert images.dtype == np.uint8 and images.shape == (ROWS, HEIGHT, WIDTH, 3)
        np.testing.assert_array_equal(images, expected)


def test_the_leaf_spelling_still_works_and_agrees(arrow_file):
    by_struct = _images(load(arrow_file, columns=["image"], transforms={"image": CHAIN}))
    batches = load(arrow_file, columns=["image.bytes"], transforms={"image.bytes": CHAIN})
    assert set(batches[0]) == {"image.bytes"}
    by_leaf = np.concatenate([np.asarray(b["image.bytes"]) for b in batches])
    np.testing.assert_array_equal(by_struct, by_leaf)


def test_path_only_when_named(arrow_file):
    batches = load(arrow_file, batch_size=ROWS, columns=["image", "image.path"],
                   transforms={"image": CHAIN})
    assert set(batches[0]) == {"image", "image.path"}
    paths = batches[0]["image.path"]
    assert [paths[i] for i in range(ROWS)] == [f"img/{i}.png" for i in range(ROWS)]


def test_every_column_when_none_named(arrow_file):
    batches = load(arrow_file, batch_size=ROWS, transforms={"image": CHAIN})
    assert set(batches[0]) == {"image", "label"}


def test_several_outputs_of_the_struct(arrow_file):
    batches = load(arrow_file, batch_size=ROWS, columns=["image"],
                   transforms={"image": {"full": CHAIN,
                                         "small": [ops.decode_image(), ops.resize([6, 8])]}})
    assert set(batches[0]) == {"full", "small"}
    np.testing.assert_array_equal(
        batches[0]["full"], np.stack([_pillow(b) for b in _stored_bytes(arrow_file)]))
    assert batches[0]["small"].shape == (ROWS, 6, 8, 3)


def test_loader_columns_and_describe_report_the_output(arrow_file):
    with stoker.Loader(arrow_file, columns=["image", "label"], transforms={"image": CHAIN},
                       batch_size=2) as loader:
        info = loader.columns
        assert list(info) == ["image", "label"]
        assert info["image"].dtype == "uint8"
        assert list(info["image"].inner_shape) == [HEIGHT, WIDTH, 3]
        assert info["image"].arrow_type == "large_binary"
    described = stoker.describe(arrow_file, columns=["image", "label"],
                                transforms={"image": CHAIN})
    columns = {c.name: c for c in described.columns}
    assert list(columns) == ["image", "label"]
    assert columns["image"].ok, columns["image"].error
    assert columns["image"].dtype == "uint8"
    assert list(columns["image"].inner_shape) == [HEIGHT, WIDTH, 3]
    assert columns["image"].arrow_type == "large_binary"  # the field read: image.bytes
    # Named, the path is described too; without transforms the struct is its fields.
    named = stoker.describe(arrow_file, columns=["image", "image.path"],
                            transforms={"image": CHAIN})
    assert [c.name for c in named.columns] == ["image", "image.path"]
    plain = stoker.describe(arrow_file, columns=["image"])
    assert [c.name for c in plain.columns] == ["image.bytes", "image.path"]


def test_options_for_the_struct_reach_its_chain(tmp_path):
    image = pa.StructArray.from_arrays(
        [pa.array([_png(_pictures()[0]), b"not an image", _png(_pictures()[1])], pa.binary()),
         pa.array(["a", "b", "c"])], names=["bytes", "path"])
    path = str(tmp_path / "bad.parquet")
    pq.write_table(pa.table({"image": image}), path)
    with pytest.raises(errors.CorruptFileError, match="'image'"):
        load(path, columns=["image"], transforms={"image": CHAIN})
    batches = load(path, columns=["image"], transforms={"image": CHAIN},
                   on_error={"image": "zero"})
    assert set(batches[0]) == {"image", "image_valid"}
    assert np.asarray(batches[0]["image_valid"]).tolist() == [True, False, True]
    assert not np.asarray(batches[0]["image"])[1].any()


def test_a_struct_without_binary_bytes_names_the_field_to_transform(tmp_path):
    path = str(tmp_path / "structs.parquet")
    table = pa.table({
        "meta": pa.StructArray.from_arrays(
            [pa.array([b"x", b"y"], pa.binary()), pa.array([1, 2], pa.int64())],
            names=["blob", "size"]),
        "text": pa.StructArray.from_arrays(
            [pa.array(["a", "b"]), pa.array(["p", "q"])], names=["bytes", "path"]),
    })
    pq.write_table(table, path)
    with pytest.raises(errors.InvalidOptionError) as raised:
        stoker.Loader(path, columns=["meta"], transforms={"meta": CHAIN})
    message = str(raised.value)
    assert "transforms['meta']" in message and "struct" in message
    assert "transforms={'meta.blob': [...]}" in message and "binary 'bytes' field" in message
    # A bytes field of strings is not image bytes.
    with pytest.raises(errors.InvalidOptionError, match=r"transforms=\{'text.bytes'"):
        stoker.Loader(path, columns=["text"], transforms={"text": [ops.hash_bucket(10)]})
    # Several outputs on such a struct: the same advice.
    with pytest.raises(errors.InvalidOptionError, match=r"transforms=\{'meta.blob'"):
        stoker.Loader(path, columns=["meta"], transforms={"meta": {"a": CHAIN}})
    # Describe reports the same error for each of the struct's fields.
    described = stoker.describe(path, columns=["meta"], transforms={"meta": CHAIN})
    assert [c.name for c in described.columns] == ["meta.blob", "meta.size"]
    assert all(not c.ok and c.error == message for c in described.columns)


def test_both_spellings_at_once_are_refused(arrow_file):
    with pytest.raises(errors.InvalidOptionError, match="both 'image' and 'image.bytes'"):
        stoker.Loader(arrow_file, columns=["image"],
                      transforms={"image": CHAIN, "image.bytes": CHAIN})
    with pytest.raises(errors.InvalidOptionError, match="both 'image' and 'image.bytes'"):
        stoker.Loader(arrow_file, columns=["image", "image.bytes"], transforms={"image": CHAIN})


def test_a_struct_not_in_columns_is_reported_as_before(arrow_file):
    with pytest.raises(errors.InvalidOptionError, match="'image', which is not in columns"):
        stoker.Loader(arrow_file, columns=["label"], transforms={"image": CHAIN})


def test_fingerprints_tell_the_spellings_apart(arrow_file, tmp_path):
    """Same options, same state; the struct and the leaf spelling deliver different keys, so a
    resume state of one does not fit the other."""
    def state(columns, transforms):
        with stoker.Loader(arrow_file, columns=columns, transforms=transforms, batch_size=2,
                           shuffle=False) as loader:
            next(iter(loader))
            return loader.state_dict()

    first = state(["image"], {"image": CHAIN})
    again = state(["image"], {"image": CHAIN})
    assert (again["fingerprint"], again["options"]) == (first["fingerprint"], first["options"])
    leaf = state(["image.bytes"], {"image.bytes": CHAIN})
    assert leaf["fingerprint"] != first["fingerprint"]
    assert leaf["options"] != first["options"]
    with stoker.Loader(arrow_file, columns=["image.bytes"], transforms={"image.bytes": CHAIN},
                       batch_size=2, shuffle=False) as loader:
        with pytest.raises(errors.StokerError):
            loader.load_state_dict(first)


def test_both_spellings_share_the_cache_entries(arrow_file, tmp_path):
    """The same bytes through the same ops: one entry, whichever name the output takes."""
    cache = str(tmp_path / "cache")
    found = []
    for columns, transforms in ((["image.bytes"], {"image.bytes": CHAIN}),
                                (["image"], {"image": CHAIN})):
        with stoker.Loader(arrow_file, columns=columns, transforms=transforms, batch_size=5,
                           shuffle=False, cache_dir=cache) as loader:
            list(loader)
            deadline = time.monotonic() + 30  # entries are written behind: wait for them
            while loader.stats()["cache"]["writes"] < loader.stats()["cache"]["misses"]:
                assert time.monotonic() < deadline, loader.stats()["cache"]
                time.sleep(0.01)
            stats = loader.stats()
            found.append((stats["cache"]["hits"], stats["transforms"]["prefix_rows"]))
    assert found[0][0] == 0 and found[0][1] == ROWS  # cold: every row decoded
    assert found[1][0] > 0 and found[1][1] == 0  # warm from the leaf spelling's entries
