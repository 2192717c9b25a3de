"""Push-down transform ops, declared per column and run in C++ on the loader's workers.

    loader = stoker.Loader("images/", columns=["image", "label"], output="torch", seed=1,
                           transforms={"image": [ops.decode_image(), ops.random_resized_crop(224),
                                                 ops.horizontal_flip(), ops.normalize(MEAN, STD),
                                                 ops.to_chw()]})

Each function returns the op as a dict ``{"op": name, **params}`` (what the engine takes, and
what a config file can hold); parameters left out take the engine's defaults. The chain's
deterministic prefix up to its last fixed-shape tensor runs before the ready-tensor cache (a
warm epoch skips it); the rest runs per batch, every random op keyed by (seed, epoch, global row
id, op index). The table of ops and their parameters is in docs/user-guide.md.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Union

from ._dtypes import dtype_name

__all__ = [
    "decode_image", "resize", "center_crop", "random_crop", "random_resized_crop",
    "horizontal_flip", "vertical_flip", "pad", "normalize", "to_chw", "decode_npy", "decode_npz",
    "reinterpret", "shape", "cast", "clip", "log1p", "standardize", "min_max", "bucketize", "hash_bucket",
    "vocabulary", "fill_null",
]

Op = Dict[str, Any]
Size = Union[int, Sequence[int]]


def _op(name: str, **params: Any) -> Op:
    spec: Op = {"op": name}
    spec.update({k: (list(v) if isinstance(v, tuple) else v) for k, v in params.items()
                 if v is not None})
    if "dtype" in spec:  # np.float32, np.dtype("float32") and torch.float32 name "float32"
        spec["dtype"] = dtype_name(spec["dtype"], f"ops.{name}(dtype=)")
    return spec


def decode_image(mode: str = "RGB", exif: bool = False, draft: Optional[Size] = None,
                 shape: Optional[Sequence[int]] = None, dct_scaling: bool = True,
                 max_pixels: Optional[int] = None) -> Op:
    """JPEG (CMYK and YCCK included), PNG or WebP bytes -> uint8 [H, W, C]; ``draft`` lets JPEG
    decode at a reduced size; ``shape=[h, w]`` declares every image's size (a fixed output; another
    size is an error). An image of more than ``max_pixels`` pixels (default 2**28) is refused
    before decoding (:class:`~stoker.errors.UnsupportedInputError`).

    ``dct_scaling`` (default on): when the next op is ``resize``, ``center_crop`` + ``resize`` or
    ``random_resized_crop`` and it shrinks the (cropped) JPEG to at most half on both sides, the JPEG
    is decoded at 1/2, 1/4 or 1/8 scale in the DCT domain, like Pillow's ``Image.draft``, and resized
    from there: much less work, pixels within the tolerance in the user guide of the full decode.
    Crop boxes and output sizes still come from the full size, with the same random draws.
    ``dct_scaling=False`` always decodes at full size. It is off with ``draft``, ``exif=True`` or
    ``shape``.
    """
    return _op("decode_image", mode=mode, exif=exif, draft=draft, shape=shape,
               dct_scaling=dct_scaling, max_pixels=max_pixels)


def resize(size: Size, interpolation: str = "bilinear", antialias: bool = True) -> Op:
    """``size`` int: the shorter side (torchvision); [h, w]: exactly."""
    return _op("resize", size=size, interpolation=interpolation, antialias=antialias)


def center_crop(size: Size) -> Op:
    return _op("center_crop", size=size)


def random_crop(size: Size) -> Op:
    return _op("random_crop", size=size)


def random_resized_crop(size: Size, scale: Sequence[float] = (0.08, 1.0),
                        ratio: Sequence[float] = (3 / 4, 4 / 3),
                        interpolation: str = "bilinear", antialias: bool = True) -> Op:
    """torchvision's RandomResizedCrop sampling rule."""
    return _op("random_resized_crop", size=size, scale=scale, ratio=ratio,
               interpolation=interpolation, antialias=antialias)


def horizontal_flip(p: float = 0.5) -> Op:
    return _op("horizontal_flip", p=p)


def vertical_flip(p: float = 0.5) -> Op:
    return _op("vertical_flip", p=p)


def pad(padding: Size, fill: Union[int, Sequence[int]] = 0, mode: str = "constant") -> Op:
    return _op("pad", padding=padding, fill=fill, mode=mode)


def normalize(mean: Union[float, Sequence[float]], std: Union[float, Sequence[float]],
              scale: Optional[float] = None, dtype: str = "float32") -> Op:
    """(x * scale - mean) / std per channel; ``scale`` defaults to 1/255."""
    return _op("normalize", mean=mean, std=std, scale=scale, dtype=dtype)


def to_chw() -> Op:
    return _op("to_chw")


def decode_npy(dtype: str, shape: Sequence[int]) -> Op:
    """``np.save`` bytes (Petastorm's NdarrayCodec) with a declared dtype and shape (-1: any)."""
    return _op("decode_npy", dtype=dtype, shape=shape)


def decode_npz(dtype: str, shape: Sequence[int], key: str = "") -> Op:
    """``np.savez[_compressed]`` bytes (Petastorm's CompressedNdarrayCodec)."""
    return _op("decode_npz", dtype=dtype, shape=shape, key=key or None)


def reinterpret(dtype: str, shape: Sequence[int]) -> Op:
    """Raw bytes as a ``dtype`` tensor of ``shape`` (one -1 is inferred)."""
    return _op("reinterpret", dtype=dtype, shape=shape)


def shape() -> Op:
    """The int64 shape of the input tensor (``[H, W, C]`` of a decoded image): with several
    outputs per column, e.g. ``{"image": [...], "image_size": [decode_image(), shape()]}``."""
    return _op("shape")


def cast(dtype: str, lossy: bool = False) -> Op:
    return _op("cast", dtype=dtype, lossy=lossy)


def clip(min: Optional[float] = None, max: Optional[float] = None) -> Op:  # noqa: A002
    return _op("clip", min=min, max=max)


def log1p() -> Op:
    return _op("log1p")


def standardize(mean: float, std: float) -> Op:
    return _op("standardize", mean=mean, std=std)


def min_max(min: float, max: float, clip: bool = False) -> Op:  # noqa: A002
    return _op("min_max", min=min, max=max, clip=clip)


def bucketize(boundaries: Sequence[float]) -> Op:
    return _op("bucketize", boundaries=boundaries)


def hash_bucket(num_buckets: int) -> Op:
    """FNV-1a 64 of the UTF-8 bytes (or the little-endian int64) mod ``num_buckets``: stable
    across runs, machines and versions."""
    return _op("hash_bucket", num_buckets=num_buckets)


def vocabulary(vocabulary: Sequence[Union[str, int]], oov_id: Optional[int] = None) -> Op:
    """Index in ``vocabulary``; values not in it get ``oov_id`` (default: len(vocabulary))."""
    return _op("vocabulary", vocabulary=vocabulary, oov_id=oov_id)


def fill_null(value: Union[float, str]) -> Op:
    return _op("fill_null", value=value)
