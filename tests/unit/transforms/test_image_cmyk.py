"""CMYK and YCCK JPEGs, and valid inputs stoker does not decode (issue 22, item 5).

CMYK JPEGs (Photoshop's Adobe-inverted convention, as Pillow writes them) and YCCK JPEGs (Adobe
transform 2, as libjpeg-turbo's TurboJPEG writes a CMYK source) decode to what Pillow's
``Image.open(...).convert("RGB" | "L" | "RGBA")`` gives, within one level. A valid input stoker
does not decode raises :class:`~stoker.errors.UnsupportedInputError` (an
``UnsupportedTypeError``), never ``CorruptFileError``; ``on_error="zero"`` substitutes it like a
corrupt row.
"""

from __future__ import annotations

import ctypes
import io
import zipfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image, features

import stoker
from stoker import _stoker, errors, ops
from stoker.errors import CorruptFileError, UnsupportedInputError, UnsupportedTypeError


def smooth(height, width, channels, seed):
    """Low-frequency noise upsampled (a photo's gradients) plus a little fine texture."""
    rng = np.random.default_rng(seed)
    coarse = rng.integers(0, 256, (height // 8 + 2, width // 8 + 2, channels), dtype=np.uint8)
    planes = [np.asarray(Image.fromarray(coarse[..., c]).resize((width, height),
                                                                Image.Resampling.BICUBIC))
              for c in range(channels)]
    texture = rng.integers(-6, 7, (height, width, channels))
    return np.clip(np.stack(planes, -1).astype(np.int16) + texture, 0, 255).astype(np.uint8)


def pillow_cmyk_jpeg(cmyk, **options):
    """Pillow's CMYK JPEG: libjpeg stores it Adobe-inverted, with an Adobe marker (transform 0)."""
    buffer = io.BytesIO()
    Image.fromarray(cmyk, "CMYK").save(buffer, "JPEG", **options)
    return buffer.getvalue()


def turbojpeg_ycck_jpeg(cmyk, quality=90, subsampling=0):
    """libjpeg-turbo's TurboJPEG compressing a CMYK buffer (TJPF_CMYK) writes a YCCK JPEG."""
    tj = ctypes.CDLL("libturbojpeg.so.0")
    tj.tjInitCompress.restype = ctypes.c_void_p
    tj.tjCompress2.argtypes = [ctypes.c_void_p, ctypes.c_void_p] + [ctypes.c_int] * 4 + [
        ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_ulong)] + [ctypes.c_int] * 3
    tj.tjFree.argtypes = [ctypes.c_void_p]
    tj.tjDestroy.argtypes = [ctypes.c_void_p]
    cmyk = np.ascontiguousarray(cmyk)
    height, width, _ = cmyk.shape
    handle = tj.tjInitCompress()
    buffer, size = ctypes.c_void_p(), ctypes.c_ulong(0)
    tjpf_cmyk = 11
    assert tj.tjCompress2(handle, cmyk.ctypes.data, width, 0, height, tjpf_cmyk,
                          ctypes.byref(buffer), ctypes.byref(size), subsampling, quality, 0) == 0
    data = ctypes.string_at(buffer, size.value)
    tj.tjFree(buffer)
    tj.tjDestroy(handle)
    return data


def pillow(data, mode):
    array = np.asarray(Image.open(io.BytesIO(data)).convert(mode))
    return array[..., None] if array.ndim == 2 else array


def max_diff(a, b):
    assert a.shape == b.shape, (a.shape, b.shape)
    return int(np.abs(a.astype(np.int16) - b.astype(np.int16)).max())


CMYK_FILES = [  # (name, writer, expected Adobe transform)
    ("pillow-cmyk-q95", lambda c: pillow_cmyk_jpeg(c, quality=95), 0),
    ("pillow-cmyk-q75", lambda c: pillow_cmyk_jpeg(c, quality=75), 0),
    ("turbojpeg-ycck-444", lambda c: turbojpeg_ycck_jpeg(c, 90, 0), 2),
    ("turbojpeg-ycck-420", lambda c: turbojpeg_ycck_jpeg(c, 85, 2), 2),
]


@pytest.mark.parametrize("name,writer,transform", CMYK_FILES, ids=[c[0] for c in CMYK_FILES])
@pytest.mark.parametrize("height,width", [(67, 93), (16, 16), (120, 41)])
def test_cmyk_and_ycck_match_pillow(name, writer, transform, height, width):
    data = writer(smooth(height, width, 4, seed=height + width))
    image = Image.open(io.BytesIO(data))
    assert image.mode == "CMYK" and image.info.get("adobe_transform") == transform
    for mode in ("RGB", "L", "RGBA"):
        ours = _stoker.apply_ops([ops.decode_image(mode=mode)], data)
        assert ours.dtype == np.uint8
        assert max_diff(ours, pillow(data, mode)) <= 1, mode


@pytest.mark.parametrize("name,writer,transform", CMYK_FILES[::2],
                         ids=[c[0] for c in CMYK_FILES[::2]])
def test_cmyk_draft_and_resize_match_pillow(name, writer, transform):
    data = writer(smooth(240, 320, 4, seed=5))
    # draft: decoded at 1/2 or 1/4 in the DCT domain, as Pillow's draft does.
    for target in [(100, 100), (50, 70)]:
        ours = _stoker.apply_ops([ops.decode_image(draft=list(target))], data)
        image = Image.open(io.BytesIO(data))
        image.draft("CMYK", (target[1], target[0]))
        reference = np.asarray(image.convert("RGB"))
        assert ours.shape == reference.shape and ours.shape[0] < 240
        assert max_diff(ours, reference) <= 1, target
    # The full decode and a resize: Pillow's convert then resize.
    ours = _stoker.apply_ops([ops.decode_image(dct_scaling=False), ops.resize([60, 80])], data)
    reference = np.asarray(Image.open(io.BytesIO(data)).convert("RGB").resize(
        (80, 60), Image.Resampling.BILINEAR))
    assert max_diff(ours, reference) <= 1


def test_loader_decodes_mixed_rgb_cmyk_and_ycck_rows(tmp_path):
    h, w = 40, 56
    rgb = io.BytesIO()
    Image.fromarray(smooth(h, w, 3, 1)).save(rgb, "JPEG", quality=90)
    gray = io.BytesIO()
    Image.fromarray(smooth(h, w, 1, 2)[..., 0]).save(gray, "JPEG", quality=90)
    rows = [rgb.getvalue(), pillow_cmyk_jpeg(smooth(h, w, 4, 3), quality=90),
            turbojpeg_ycck_jpeg(smooth(h, w, 4, 4)), gray.getvalue(),
            pillow_cmyk_jpeg(smooth(h, w, 4, 5), quality=80)]
    path = str(tmp_path / "mixed.parquet")
    pq.write_table(pa.table({"image": pa.array(rows, pa.binary())}), path, row_group_size=2)
    for mode in ("RGB", "L"):
        for cache in (None, str(tmp_path / f"cache-{mode}"), str(tmp_path / f"cache-{mode}")):
            with stoker.Loader(path, batch_size=len(rows), shuffle=False, drop_last=False,
                               cache_dir=cache, num_threads=2,
                               transforms={"image": [ops.decode_image(mode=mode,
                                                                      shape=[h, w])]}) as loader:
                batch = next(iter(loader))
                loader.flush_cache()
            for row, data in enumerate(rows):
                assert max_diff(batch["image"][row], pillow(data, mode)) <= 1, (mode, row)


# ------------------------------------------------------------- valid but unsupported inputs

def npy(array):
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=True)
    return buffer.getvalue()


def npz_bzip2(array):
    """An .npz whose member is bzip2-compressed (zipfile writes it; numpy.load reads it)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_BZIP2) as archive:
        archive.writestr("x.npy", npy(array))
    data = buffer.getvalue()
    assert np.load(io.BytesIO(data))["x"].tolist() == array.tolist()
    return data


def animated_webp():
    frames = [Image.fromarray(smooth(20, 24, 3, seed)) for seed in range(3)]
    buffer = io.BytesIO()
    frames[0].save(buffer, "WEBP", save_all=True, append_images=frames[1:], duration=100,
                   lossless=True)
    data = buffer.getvalue()
    assert getattr(Image.open(io.BytesIO(data)), "n_frames", 1) == 3
    return data


def other_format(fmt):
    """A valid image in a format stoker does not decode, written by Pillow."""
    buffer = io.BytesIO()
    Image.fromarray(smooth(24, 40, 3, 4)).save(buffer, fmt)
    return buffer.getvalue()


def jpeg(h=32, w=48):
    buffer = io.BytesIO()
    Image.fromarray(smooth(h, w, 3, 9)).save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


def with_precision(data, bits):
    """`data` with its frame header claiming `bits`-bit samples: what a 12-bit JPEG's header
    says (no writer here makes real 12-bit JPEGs; the header is what stoker classifies by)."""
    sof = data.index(b"\xff\xc0")
    return data[:sof + 4] + bytes([bits]) + data[sof + 5:]


IMAGE_CHAIN = [ops.decode_image(), ops.resize([16, 16])]
ARRAY_CHAIN = [ops.decode_npy(dtype="float32", shape=[3])]
NPZ_CHAIN = [ops.decode_npz(key="x", dtype="float32", shape=[3])]

UNSUPPORTED = [  # (name, chain, bytes factory, words the message must contain)
    ("12-bit JPEG", IMAGE_CHAIN, lambda: with_precision(jpeg(), 12), "12-bit JPEG"),
    ("above max_pixels", [ops.decode_image(max_pixels=32 * 48 - 1), ops.resize([16, 16])], jpeg,
     "max_pixels"),
    ("complex npy", ARRAY_CHAIN, lambda: npy(np.zeros(3, np.complex64)), "complex"),
    ("structured npy", ARRAY_CHAIN, lambda: npy(np.zeros(3, [("a", "<i4"), ("b", "<f4")])),
     "structured"),
    ("unicode npy", ARRAY_CHAIN, lambda: npy(np.array(["ab", "c", "d"])), "unicode"),
    ("object npy", ARRAY_CHAIN, lambda: npy(np.array([1, "x", None], dtype=object)), "object"),
    ("datetime npy", ARRAY_CHAIN, lambda: npy(np.zeros(3, "datetime64[ns]")), "datetime64"),
    ("bzip2 npz", NPZ_CHAIN, lambda: npz_bzip2(np.arange(3, dtype=np.float32)),
     "compression method 12"),
]
if features.check("webp"):
    UNSUPPORTED.append(("animated WebP", IMAGE_CHAIN, animated_webp, "animated WebP"))
for _format, _name, _feature in [("GIF", "GIF", None), ("BMP", "BMP", None), ("TIFF", "TIFF", None),
                                 ("JPEG2000", "JPEG 2000", "jpg_2000"), ("AVIF", "AVIF", "avif")]:
    if _feature is None or features.check(_feature):
        UNSUPPORTED.append((_name, IMAGE_CHAIN, lambda f=_format: other_format(f),
                            f"{_name} images are not supported"))

CORRUPT = [
    ("truncated JPEG", IMAGE_CHAIN, lambda: jpeg()[:300]),
    ("bad JPEG marker", IMAGE_CHAIN, lambda: jpeg()[:20] + b"\xff\xbe" + jpeg()[20:]),
    ("truncated npy", ARRAY_CHAIN, lambda: npy(np.arange(3, dtype=np.float32))[:-2]),
]


def test_unsupported_input_error_is_an_unsupported_type_error():
    assert issubclass(UnsupportedInputError, UnsupportedTypeError)
    assert issubclass(UnsupportedInputError, TypeError)
    assert issubclass(UnsupportedInputError, errors.StokerError)
    assert not issubclass(UnsupportedInputError, CorruptFileError)
    assert errors.error_class("unsupported_input") is UnsupportedInputError
    assert "UnsupportedInputError" in errors.__all__


@pytest.mark.parametrize("name,chain,make,words", UNSUPPORTED, ids=[u[0] for u in UNSUPPORTED])
def test_valid_but_unsupported_inputs_are_not_called_corrupt(tmp_path, name, chain, make, words):
    data = make()
    with pytest.raises(UnsupportedInputError, match=words):
        _stoker.apply_ops(chain, data)
    # Through a loader: on_error="raise" names file, row group, row and column; "zero"
    # substitutes the row, the good rows around it unchanged.
    good = npy(np.arange(3, dtype=np.float32)) if chain is ARRAY_CHAIN else (
        _npz(np.arange(3, dtype=np.float32)) if chain is NPZ_CHAIN else jpeg(24, 40))
    path = str(tmp_path / "u.parquet")
    pq.write_table(pa.table({"x": pa.array([good, data, good], pa.binary())}), path,
                   row_group_size=3)
    options = dict(batch_size=3, shuffle=False, drop_last=False, transforms={"x": chain})
    with stoker.Loader(path, **options) as loader:
        with pytest.raises(UnsupportedInputError) as info:
            next(iter(loader))
    assert not isinstance(info.value, CorruptFileError)
    message = str(info.value)
    assert "u.parquet" in message and "row group 0, row 1" in message, message
    assert "column 'x'" in message and words in message, message
    with stoker.Loader(path, on_error="zero", **options) as loader:
        batch = next(iter(loader))
        assert loader.stats()["transforms"]["substituted_rows"] == 1
    assert batch["x_valid"].tolist() == [True, False, True]
    assert not batch["x"][1].any()
    assert batch["x"][0].tobytes() == batch["x"][2].tobytes() == \
        _stoker.apply_ops(chain, good).tobytes()


def _npz(array):
    buffer = io.BytesIO()
    np.savez_compressed(buffer, x=array)
    return buffer.getvalue()


@pytest.mark.parametrize("name,chain,make", CORRUPT, ids=[c[0] for c in CORRUPT])
def test_damaged_inputs_stay_corrupt(name, chain, make):
    with pytest.raises(CorruptFileError) as info:
        _stoker.apply_ops(chain, make())
    assert not isinstance(info.value, UnsupportedInputError)
