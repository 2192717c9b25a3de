"""Petastorm stores: detection and the mapping of each Unischema field to stoker's columns.

A Loader opened on a folder whose ``_common_metadata`` holds a Petastorm Unischema decodes every
codec field on its workers with the matching op (ScalarCodec: the native column; NdarrayCodec:
``decode_npy``; CompressedNdarrayCodec: ``decode_npz``; CompressedImageCodec: ``decode_image``),
so a batch holds the arrays Petastorm's ``make_reader`` returns, stacked. Plain Parquet is not
touched: without that key nothing here changes the Loader.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field as dc_field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from . import ops
from ._unischema import Field, Schema, read_unischema
from .errors import InvalidOptionError, UnsupportedTypeError

__all__ = ["PetastormStore", "detect", "field_chain", "plan_columns", "decode_variable",
           "column_infos", "finish_batch", "Finishing", "DECODE_OPS"]

# Ops that take encoded bytes: a user chain that starts with one replaces the codec's decode.
DECODE_OPS = ("decode_image", "decode_npy", "decode_npz", "reinterpret")


@dataclass
class PetastormStore:
    """What ``_common_metadata`` says: the Unischema, row groups per file, and where it was."""

    schema: Schema
    row_groups: Optional[Dict[str, int]]
    metadata_path: str
    fields: Dict[str, Field] = dc_field(default_factory=dict)

    def __post_init__(self) -> None:
        self.fields = dict(self.schema.fields)


def _dataset_roots(sources: Sequence[str]) -> List[str]:
    """Folders whose ``_common_metadata`` describes the sources (a folder, or a file's folder)."""
    roots: List[str] = []
    for source in sources:
        if any(ch in source for ch in "*?["):
            continue
        if "://" in source and not source.startswith("file://"):
            root = source.rstrip("/")
            if root.rsplit("/", 1)[-1].endswith(".parquet"):
                root = root.rsplit("/", 1)[0]
        else:
            path = source[len("file://"):] if source.startswith("file://") else source
            root = path if os.path.isdir(path) else os.path.dirname(path)
        if root not in roots:
            roots.append(root)
    return roots


def _read_local(path: str) -> Optional[Dict[bytes, bytes]]:
    import pyarrow.parquet as pq

    if not os.path.isfile(path):
        return None
    try:
        return pq.read_schema(path).metadata
    except (OSError, ValueError) as error:
        # The Loader skips "_" files: a junk one must not stop a plain dataset from opening.
        import warnings

        warnings.warn(f"{path} is not Parquet metadata, so the dataset is read as plain Parquet "
                      f"(not as a Petastorm store): {error}", UserWarning, stacklevel=4)
        return None


def _read_remote(uri: str, storage_options: Optional[Mapping[str, Any]]
                 ) -> Optional[Dict[bytes, bytes]]:
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    options = dict(storage_options or {})
    try:
        if uri.startswith("s3://") and options:
            keep = {"access_key", "secret_key", "session_token", "region", "scheme",
                    "endpoint_override", "anonymous", "proxy_options", "force_virtual_addressing"}
            filesystem = pafs.S3FileSystem(**{k: v for k, v in options.items() if k in keep})
            path = uri[len("s3://"):]
        else:
            filesystem, path = pafs.FileSystem.from_uri(uri)
        if filesystem.get_file_info(path).type != pafs.FileType.File:
            return None
        with filesystem.open_input_file(path) as handle:
            return pq.read_schema(handle).metadata
    except (OSError, ValueError, TypeError):
        # Unreachable or unknown store: the Loader's own open reports storage errors properly.
        return None


def detect(sources: Sequence[str], storage_options: Optional[Mapping[str, Any]] = None,
           remote: bool = True) -> Optional[PetastormStore]:
    """The Petastorm store the sources belong to, or ``None`` for plain Parquet. ``remote=False``
    looks at local sources only (no request to a store before the Loader checks its options)."""
    for root in _dataset_roots(sources):
        is_remote = "://" in root and not root.startswith("file://")
        if is_remote and not remote:
            continue
        for name in ("_common_metadata", "_metadata"):
            if is_remote:
                path = root + "/" + name
                metadata = _read_remote(path, storage_options)
            else:
                path = os.path.join(root, name)
                metadata = _read_local(path)
            schema, row_groups = read_unischema(metadata, path)
            if schema is not None:
                return PetastormStore(schema, row_groups, path)
    return None


def _dtype_name(field: Field) -> str:
    try:
        dtype = np.dtype(field.numpy_dtype)
    except TypeError:
        dtype = None
    if dtype is None or dtype.kind not in "biuf":
        raise UnsupportedTypeError(
            f"Petastorm field {field.name!r}: numpy_dtype {field.numpy_dtype!r} is not a numeric "
            "or bool dtype an array op can produce")
    return dtype.name


def codec_kind(field: Field) -> str:
    """``"scalar"`` (native column), ``"npy"``, ``"npz"`` or ``"image"``."""
    codec = field.codec
    kind = getattr(codec, "kind", None) if codec is not None else None
    if kind in (None, "ScalarCodec"):
        return "scalar"
    return {"NdarrayCodec": "npy", "CompressedNdarrayCodec": "npz",
            "CompressedImageCodec": "image"}[kind]


def field_chain(field: Field, variable_ok: bool = False
                ) -> Tuple[List[Dict[str, Any]], Optional[Tuple[int, ...]]]:
    """The ops that decode ``field``'s bytes into Petastorm's array, and the per-row shape the
    batch is reshaped to afterwards (``None``: as the chain makes it).

    Raises UnsupportedTypeError when the field cannot become a fixed-shape tensor (a ``None``
    dimension), naming the field and the choices.
    """
    kind = codec_kind(field)
    if kind == "scalar":
        return [], None
    dims = [None if d is None else int(d) for d in field.shape]
    if any(d is None for d in dims) and not variable_ok:
        raise UnsupportedTypeError(
            f"Petastorm field {field.name!r} ({field.codec!r}) has shape {tuple(field.shape)!r}: "
            "a dimension of variable size cannot become a dense batch tensor. Choose one: "
            + (f"lists={{{field.name!r}: 'ragged'}} or 'padded' (a first dimension that varies, "
               "as for list columns), " if kind != "image" else "")
            + f"leave it out of columns=, give transforms={{{field.name!r}: [...]}} ending in a "
            "fixed shape (e.g. ops.decode_image(), ops.resize([h, w])), pass petastorm=False to "
            "read its encoded bytes, or use stoker.petastorm.make_reader(), which returns each "
            "row's array as stored")
    if kind == "image":
        if _dtype_name(field) != "uint8":
            raise UnsupportedTypeError(
                f"Petastorm field {field.name!r}: CompressedImageCodec images of dtype "
                f"{_dtype_name(field)} are not supported (decode_image makes uint8)")
        if field.codec.image_codec not in ("png", "jpeg", "jpg"):
            raise UnsupportedTypeError(
                f"Petastorm field {field.name!r}: CompressedImageCodec({field.codec.image_codec!r})"
                " is not supported; png and jpeg are")
        size = None if None in dims[:2] else dims[:2]
        if len(dims) == 2:  # grayscale: Petastorm returns [H, W]
            return [ops.decode_image(mode="L", shape=size)], None if size is None else tuple(dims)
        if len(dims) == 3 and dims[2] == 3:
            # OpenCV stored BGR after Petastorm swapped RGB -> BGR: the file holds RGB, which
            # decode_image returns, as Petastorm's decode does after swapping back.
            return [ops.decode_image(mode="RGB", shape=size)], None
        raise UnsupportedTypeError(
            f"Petastorm field {field.name!r}: image shape {tuple(dims)!r} is not (H, W) or "
            "(H, W, 3), the shapes Petastorm's CompressedImageCodec supports")
    dtype = _dtype_name(field)
    shape = [-1 if d is None else d for d in dims]
    if kind == "npy":
        return [ops.decode_npy(dtype, shape)], None
    return [ops.decode_npz(dtype, shape, key="arr")], None


def plan_columns(store: PetastormStore, columns: Optional[Sequence[str]],
                 transforms: Optional[Mapping[str, Any]], lists: Any = None
                 ) -> Tuple[Dict[str, List[Dict[str, Any]]], Dict[str, Tuple[int, ...]],
                            Dict[str, Tuple[str, Field]]]:
    """The Loader's ``transforms`` with every selected codec field decoded, the reshapes, and
    the array fields whose first dimension varies that ``lists`` makes ragged or padded.

    A user chain that starts with a decode op is kept as it is (the user decodes); any other
    user chain runs after the codec's decode.
    """
    out: Dict[str, List[Dict[str, Any]]] = {k: list(v) for k, v in (transforms or {}).items()}
    reshape: Dict[str, Tuple[int, ...]] = {}
    variable: Dict[str, Tuple[str, Field]] = {}
    names = list(columns) if columns is not None else list(store.fields)
    for name in names:
        field = store.fields.get(name)
        if field is None or codec_kind(field) == "scalar":
            continue
        user = out.get(name, [])
        if user and user[0].get("op") in DECODE_OPS:
            continue
        mode = lists.get(name) if isinstance(lists, Mapping) else lists
        if not user and mode is not None and codec_kind(field) in ("npy", "npz") and \
                None in tuple(field.shape):
            if mode not in ("ragged", "padded"):
                raise InvalidOptionError(f"lists[{name!r}] must be 'padded' or 'ragged', got "
                                         f"{mode!r}")
            if field.shape[0] is not None or None in tuple(field.shape)[1:]:
                raise UnsupportedTypeError(
                    f"Petastorm field {name!r} has shape {tuple(field.shape)!r}: lists= makes "
                    "rows whose first dimension varies ragged or padded; here another dimension "
                    "varies. Use stoker.petastorm.make_reader(), which returns each row's array "
                    "as stored, or petastorm=False for its bytes")
            _dtype_name(field)
            variable[name] = (mode, field)
            continue
        # With a user chain after the decode, a variable shape is fine when the chain ends in a
        # fixed one (the engine checks that and names the column).
        chain, shape = field_chain(field, variable_ok=bool(user))
        out[name] = chain + user
        if shape is not None and not user:
            reshape[name] = shape
    return out, reshape, variable


def column_infos(columns: Dict[str, Any], reshape: Mapping[str, Tuple[int, ...]],
                 variable: Mapping[str, Tuple[str, Field]]) -> Dict[str, Any]:
    """The engine's ColumnInfos with the fields the Loader finishes in Python described as it
    delivers them: reshaped ones (gray images: ``[H, W]``, not the op's ``[H, W, 1]``), and
    arrays decoded in the consumer (ragged or padded by ``lists``, of the field's dtype, each
    row shaped like the field's dimensions after the first), so ``loader.columns`` says what the
    batches hold."""
    from . import _stoker

    out = dict(columns)
    for name, shape in reshape.items():
        info = out.get(name)
        if info is not None:
            out[name] = info._replace(kind=info.kind, dtype=info.dtype,
                                      inner_shape=list(shape), annotation=info.annotation)
    for name, (mode, field) in variable.items():
        info = out.get(name)
        if info is not None:
            kind = _stoker.ColumnKind.ragged if mode == "ragged" else _stoker.ColumnKind.padded
            added = list(info.added_keys)
            if mode != "ragged":
                # Padded here: its lengths come first, named as the engine names them.
                key = _stoker.lengths_key(name)
                if key in out or key in added:
                    raise InvalidOptionError(
                        f"output key {key!r} for column {name!r} clashes with a column of "
                        f"that name; leave {key!r} out of columns, or lists={{{name!r}: "
                        "'ragged'}")
                added.insert(0, key)
            out[name] = info._replace(kind=kind, dtype=np.dtype(field.numpy_dtype).name,
                                      inner_shape=[int(d) for d in tuple(field.shape)[1:]],
                                      annotation="", added_keys=added)
    return out


def decode_variable(name: str, column: Any, mask: Any, mode: str, field: Field,
                    pad_value: float) -> Tuple[Any, Optional[np.ndarray]]:
    """A batch's encoded rows of a field whose first dimension varies -> a ``Ragged`` (rows
    concatenated along that dimension) or a padded ``[B, L, ...]`` array and the lengths."""
    import io

    from ._ragged import Ragged
    from .errors import CorruptFileError

    dtype = np.dtype(field.numpy_dtype)
    rest = tuple(int(d) for d in tuple(field.shape)[1:])
    npz = codec_kind(field) == "npz"
    arrays = []
    for i, data in enumerate(column.tolist()):
        if mask is not None and not mask[i]:
            arrays.append(np.zeros((0,) + rest, dtype))
            continue
        try:
            array = np.load(io.BytesIO(data))
            array = array["arr"] if npz else array
        except Exception as error:  # noqa: BLE001 - any undecodable row
            raise CorruptFileError(f"Petastorm field {name!r}: row {i} of the batch cannot be "
                                   f"decoded: {type(error).__name__}: {error}") from None
        if array.dtype != dtype or array.ndim != 1 + len(rest) or array.shape[1:] != rest:
            raise CorruptFileError(
                f"Petastorm field {name!r}: row {i} of the batch holds {array.dtype} "
                f"{array.shape}, not {dtype} {tuple(field.shape)} as the Unischema declares")
        arrays.append(array)
    lengths = np.array([len(a) for a in arrays], dtype=np.int64)
    if mode == "ragged":
        values = np.concatenate(arrays) if arrays else np.zeros((0,) + rest, dtype)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        return Ragged(values, offsets, "list"), None
    padded = np.full((len(arrays), int(lengths.max(initial=0))) + rest, pad_value, dtype)
    for i, array in enumerate(arrays):
        padded[i, :len(array)] = array
    return padded, lengths


def _decode_image_bytes(data: bytes) -> np.ndarray:
    """Petastorm's CompressedImageCodec.decode: OpenCV when present (bit-exact with Petastorm:
    BGR back to RGB), else Pillow (same pixels for PNG)."""
    try:
        import cv2
    except ImportError:
        import io

        from PIL import Image

        image = np.asarray(Image.open(io.BytesIO(data)))
        return image[:, :, :3] if image.ndim == 3 and image.shape[2] == 4 else image
    image = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), cv2.IMREAD_UNCHANGED)
    if image.ndim == 3 and image.shape[2] == 3:
        return image[:, :, (2, 1, 0)]
    return image


def decode_value(kind: str, data: Any) -> Any:
    """One stored value of a codec field as Petastorm's reader returns it (None stays None)."""
    import io

    if data is None:
        return None
    if kind == "npy":
        return np.load(io.BytesIO(data))
    if kind == "npz":
        return np.load(io.BytesIO(data))["arr"]
    return _decode_image_bytes(data)


class DecodedInput:
    """Wraps ``transform=`` on a Petastorm store: the codec fields it receives are decoded first
    (in Python, on the worker running it), so the function sees what Petastorm's reader gives a
    TransformSpec: arrays, not encoded bytes. Picklable for ``python_workers``."""

    def __init__(self, kinds: Dict[str, str], fn: Any) -> None:
        self.kinds = dict(kinds)
        self.fn = fn

    def __call__(self, arrays: Dict[str, Any]) -> Any:
        decoded = dict(arrays)
        for name, kind in self.kinds.items():
            if name in decoded:
                values = [decode_value(kind, v) for v in decoded[name]]
                column = np.empty(len(values), dtype=object)
                column[:] = values
                decoded[name] = column
        return self.fn(decoded)


def codec_kinds(store: "PetastormStore") -> Dict[str, str]:
    """{field: "npy" | "npz" | "image"} for every field that needs decoding."""
    return {name: codec_kind(field) for name, field in store.fields.items()
            if codec_kind(field) != "scalar"}


def finish_batch(out: Dict[str, Any], reshape: Mapping[str, Tuple[int, ...]],
                 variable: Mapping[str, Tuple[str, Field]], pad_value: Any) -> Dict[str, Any]:
    """A host batch with the fields the workers cannot finish done here: images reshaped (e.g.
    Petastorm's ``[H, W]`` gray images), and arrays whose first dimension varies decoded as
    ``lists`` asks (the workers' ops make fixed shapes only)."""
    for name, shape in reshape.items():
        if name in out:
            out[name] = out[name].reshape((len(out[name]),) + shape)
    if not variable:
        return out
    from . import _stoker

    result = {}
    for key, value in out.items():
        if key not in variable:
            result[key] = value
            continue
        mode, field = variable[key]
        pad = pad_value.get(key, 0) if isinstance(pad_value, Mapping) else pad_value
        value, lengths = decode_variable(key, value, out.get(_stoker.mask_key(key)), mode, field,
                                         pad)
        result[key] = value
        if lengths is not None:
            result[_stoker.lengths_key(key)] = lengths
    return result


@dataclass(frozen=True)
class Finishing:
    """The Petastorm fields a Loader finishes in Python (plan_columns' ``reshape`` and
    ``variable``), and the ``pad_value`` option for those made padded."""

    reshape: Mapping[str, Tuple[int, ...]]
    variable: Mapping[str, Tuple[str, Field]]
    pad_value: Any

    def columns(self, columns: Dict[str, Any]) -> Dict[str, Any]:
        """``loader.columns`` as the batches hold them (column_infos)."""
        return column_infos(columns, self.reshape, self.variable)

    def batch(self, out: Dict[str, Any]) -> Dict[str, Any]:
        """A host batch with these fields finished (finish_batch)."""
        return finish_batch(out, self.reshape, self.variable, self.pad_value)
