"""Reads a Petastorm dataset's Unischema without unpickling arbitrary objects.

Petastorm stores its schema as a pickle under ``dataset-toolkit.unischema.v1`` in the key-value
metadata of ``_common_metadata``, and the row groups per file (JSON) under
``dataset-toolkit.num_row_groups_per_file.v1``. Unpickling runs whatever the pickle names, so a
dataset folder anyone can write to is a code-execution hole. Petastorm's own restricted unpickler
allows every name under ``builtins`` and ``numpy`` (``builtins.eval`` included); this one allows
only the classes a Unischema is made of, by exact module and name, and builds inert stand-ins for
Petastorm's and Spark's classes (neither package is imported): a pickle that names anything else
raises :class:`~stoker.errors.UnsafeMetadataError` before anything is called.
"""

from __future__ import annotations

import collections
import copyreg
import decimal
import io
import json
import pickle
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from .errors import CorruptFileError, UnsafeMetadataError

__all__ = ["UNISCHEMA_KEY", "ROW_GROUPS_KEY", "Schema", "Field", "Codec", "SparkType",
           "loads_unischema", "read_unischema"]

UNISCHEMA_KEY = b"dataset-toolkit.unischema.v1"
ROW_GROUPS_KEY = b"dataset-toolkit.num_row_groups_per_file.v1"


class SparkType:
    """Inert stand-in for a ``pyspark.sql.types`` instance: its class name and pickled state."""

    type_name = "DataType"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args = args
        self.__dict__.update(kwargs)

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 2:  # (dict, slots)
            state = {**(state[0] or {}), **(state[1] or {})}
        if isinstance(state, dict):
            self.__dict__.update({str(k): v for k, v in state.items()})

    def __repr__(self) -> str:
        return f"{self.type_name}()"


_SPARK_TYPES = ("NullType", "StringType", "CharType", "VarcharType", "BinaryType", "BooleanType",
                "DateType", "TimestampType", "TimestampNTZType", "DecimalType", "DoubleType",
                "FloatType", "ByteType", "IntegerType", "LongType", "ShortType", "ArrayType",
                "MapType", "StructField", "StructType", "DayTimeIntervalType",
                "YearMonthIntervalType")
_SPARK_CLASSES = {name: type(name, (SparkType,), {"type_name": name}) for name in _SPARK_TYPES}


class Codec:
    """Inert stand-in for a Petastorm codec: ``kind`` is the codec's class name."""

    kind = "Codec"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Petastorm's constructors: CompressedImageCodec(image_codec, quality), ScalarCodec(type).
        if self.kind == "CompressedImageCodec":
            self._image_codec = "." + str(args[0] if args else kwargs.get("image_codec", "png"))
            self._quality = args[1] if len(args) > 1 else kwargs.get("quality", 80)
        elif self.kind == "ScalarCodec":
            self._spark_type = args[0] if args else kwargs.get("spark_type")

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 2:
            state = {**(state[0] or {}), **(state[1] or {})}
        if isinstance(state, dict):
            self.__dict__.update({str(k): v for k, v in state.items()})

    @property
    def image_codec(self) -> str:
        """``"png"`` or ``"jpeg"`` (CompressedImageCodec only)."""
        return str(self.__dict__.get("_image_codec", ".png")).lstrip(".").lower()

    @property
    def spark_type(self) -> Optional[str]:
        """The Spark type's class name (ScalarCodec only)."""
        value = self.__dict__.get("_spark_type")
        return value.type_name if isinstance(value, SparkType) else None

    def __repr__(self) -> str:
        if self.kind == "CompressedImageCodec":
            return f"CompressedImageCodec({self.image_codec!r})"
        if self.kind == "ScalarCodec":
            return f"ScalarCodec({self.spark_type}())"
        return f"{self.kind}()"


_CODEC_CLASSES = {name: type(name, (Codec,), {"kind": name}) for name in (
    "ScalarCodec", "NdarrayCodec", "CompressedNdarrayCodec", "CompressedImageCodec")}


class Field(tuple):
    """Stand-in for ``UnischemaField(name, numpy_dtype, shape, codec, nullable)``."""

    def __new__(cls, *args: Any, **kwargs: Any) -> "Field":
        names = ("name", "numpy_dtype", "shape", "codec", "nullable")
        values = dict(zip(names, args))
        values.update({k: v for k, v in kwargs.items() if k in names})
        return super().__new__(cls, (values.get("name"), values.get("numpy_dtype"),
                                     values.get("shape", ()), values.get("codec"),
                                     bool(values.get("nullable", False))))

    name = property(lambda self: self[0])
    numpy_dtype = property(lambda self: self[1])
    shape = property(lambda self: tuple(self[2]) if self[2] is not None else ())
    codec = property(lambda self: self[3])
    nullable = property(lambda self: self[4])

    def __setstate__(self, state: Any) -> None:  # a NamedTuple pickles no state; ignore any
        pass

    def __repr__(self) -> str:
        return (f"UnischemaField({self.name!r}, {self.numpy_dtype!r}, {self.shape!r}, "
                f"{self.codec!r}, {self.nullable})")


class Schema:
    """Stand-in for a Petastorm ``Unischema``: its name and fields in order."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._name = args[0] if args else kwargs.get("name", "")
        self._fields = collections.OrderedDict()

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 2:
            state = {**(state[0] or {}), **(state[1] or {})}
        if isinstance(state, dict):
            self._name = state.get("_name", "")
            fields = state.get("_fields", {})
            self._fields = collections.OrderedDict(fields) if isinstance(fields, dict) else {}

    @property
    def name(self) -> str:
        return str(self._name)

    @property
    def fields(self) -> "collections.OrderedDict[str, Field]":
        return self._fields

    def __repr__(self) -> str:
        return f"Unischema({self.name!r}, {list(self._fields.values())!r})"


def _numpy_names() -> Dict[str, Any]:
    allowed: Dict[str, Any] = {"dtype": np.dtype}
    for name in dir(np):
        value = getattr(np, name, None)
        if isinstance(value, type) and issubclass(value, np.generic):
            allowed[name] = value
    return allowed


_NUMPY = _numpy_names()
# Builtin classes a Unischema can hold as a dtype (str, bytes, ...): types, not callables with
# effects. getattr, eval, exec, __import__ & co. are not here.
_BUILTINS = {name: getattr(__import__("builtins"), name) for name in (
    "str", "bytes", "bytearray", "int", "float", "bool", "complex", "object", "tuple", "list",
    "dict", "set", "frozenset")}


def _allowed(module: str, name: str) -> Any:
    for legacy in ("av.experimental.deepdrive.dataset_toolkit.", "av.ml.dataset_toolkit."):
        if module.startswith(legacy):  # Petastorm's former package names (its legacy.py)
            module = "petastorm." + module[len(legacy):]
    if module == "petastorm.unischema":
        if name == "Unischema":
            return Schema
        if name == "UnischemaField":
            return Field
    if module == "petastorm.codecs" and name in _CODEC_CLASSES:
        return _CODEC_CLASSES[name]
    if module == "pyspark.sql.types" and name in _SPARK_CLASSES:
        return _SPARK_CLASSES[name]
    if module in ("collections", "_collections") and name == "OrderedDict":
        return collections.OrderedDict
    if module in ("builtins", "__builtin__") and name in _BUILTINS:
        return _BUILTINS[name]
    if module == "decimal" and name == "Decimal":
        return decimal.Decimal
    if module in ("copyreg", "copy_reg") and name == "_reconstructor":
        return _reconstructor
    if module == "numpy" and name in _NUMPY:
        return _NUMPY[name]
    if module.startswith("numpy.dtypes") and name.endswith("DType"):
        value = getattr(np.dtypes, name, None)
        if isinstance(value, type) and issubclass(value, np.dtype):
            return value
    if module in ("numpy.core.multiarray", "numpy._core.multiarray") and name == "scalar":
        return _numpy_scalar
    return None


def _reconstructor(cls: Any, base: Any, state: Any) -> Any:
    """``copyreg._reconstructor`` limited to the stand-in classes (protocol 0/1 pickles)."""
    if base is object and isinstance(cls, type) and issubclass(cls, (Schema, Codec, SparkType)):
        return object.__new__(cls)
    if base is tuple and cls is Field and isinstance(state, tuple):
        return Field(*state)
    raise UnsafeMetadataError(f"copyreg._reconstructor({cls!r}, {base!r}) is not allowed")


def _numpy_scalar(dtype: Any, data: Any = None) -> Any:
    if not isinstance(dtype, np.dtype) or dtype.hasobject or not isinstance(data, bytes):
        raise UnsafeMetadataError("numpy scalar of an object dtype is not allowed")
    return np.frombuffer(data, dtype=dtype, count=1)[0]


class _Unpickler(pickle.Unpickler):
    def __init__(self, data: bytes, where: str) -> None:
        super().__init__(io.BytesIO(data))
        self._where = where

    def find_class(self, module: str, name: str) -> Any:
        value = _allowed(module, name)
        if value is None:
            raise UnsafeMetadataError(
                f"{self._where}: the pickled Unischema names {module}.{name}, which is not a "
                "Unischema, UnischemaField, Petastorm codec, numpy dtype or Spark type; stoker "
                "refuses to unpickle it (nothing was run)")
        return value

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafeMetadataError(f"{self._where}: persistent ids are not allowed in a Unischema")


def loads_unischema(data: bytes, where: str = "_common_metadata") -> Schema:
    """Unpickles a Unischema with the restricted unpickler; ``where`` names the file in errors."""
    try:
        schema = _Unpickler(data, where).load()
    except UnsafeMetadataError:
        raise
    except Exception as error:  # noqa: BLE001 - any malformed pickle
        raise CorruptFileError(
            f"{where}: the pickled Unischema under {UNISCHEMA_KEY.decode()} cannot be read: "
            f"{type(error).__name__}: {error}") from None
    if not isinstance(schema, Schema):
        raise CorruptFileError(
            f"{where}: {UNISCHEMA_KEY.decode()} holds a {type(schema).__name__}, not a Unischema")
    for key, field in schema.fields.items():
        if not isinstance(field, Field) or not isinstance(field.name, str):
            raise CorruptFileError(f"{where}: Unischema field {key!r} is not a UnischemaField")
    return schema


def read_unischema(metadata: Optional[Dict[bytes, bytes]], where: str
                   ) -> Tuple[Optional[Schema], Optional[Dict[str, int]]]:
    """The Unischema and the row groups per file from ``_common_metadata``'s key-value metadata
    (``None`` where a key is absent)."""
    if not metadata:
        return None, None
    schema = None
    if UNISCHEMA_KEY in metadata:
        schema = loads_unischema(metadata[UNISCHEMA_KEY], where)
    row_groups = None
    if ROW_GROUPS_KEY in metadata:
        try:
            parsed = json.loads(metadata[ROW_GROUPS_KEY].decode())
            row_groups = {str(k): int(v) for k, v in parsed.items()}
        except (ValueError, AttributeError, TypeError) as error:
            raise CorruptFileError(
                f"{where}: {ROW_GROUPS_KEY.decode()} is not a JSON object of row-group counts: "
                f"{error}") from None
    return schema, row_groups


def field_dims(field: Field) -> List[Optional[int]]:
    """The field's shape as a list (``None`` for a variable dimension)."""
    return [None if d is None else int(d) for d in field.shape]


# copyreg is imported for its name only (the allowlist names copyreg._reconstructor).
del copyreg
