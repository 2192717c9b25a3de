"""Reads a Petastorm dataset's Unischema without unpickling arbitrary objects.

Petastorm stores its schema as a pickle under ``dataset-toolkit.unischema.v1`` in the key-value
metadata of ``_common_metadata``, and the row groups per file (JSON) under
``dataset-toolkit.num_row_groups_per_file.v1``. Unpickling runs whatever the pickle names, so a
dataset folder anyone can write to is a code-execution hole. Petastorm's own restricted unpickler
allows every name under ``builtins`` and ``numpy`` (``builtins.eval`` included); this one allows
only the classes a Unischema is made of, by exact module and name, and builds inert stand-ins for
Petastorm's and Spark's classes (neither package is imported): a pickle that names anything else
raises :class:`~stoker.errors.UnsafeMetadataError` before anything is called.

Allowed classes are still called with the pickle's arguments, so the unpickler also bounds what a
pickle can make them build (``bytearray(2**31)``, ``str`` of a structure that shares itself, a list
grown by a million APPENDs, a dict key whose hash walks 2**40 tuples): Python's own pickle
machine runs opcode by opcode, every object it builds and every container it grows is charged to
one budget (:data:`BUDGET_BYTES`) before or as it is made, a call of an allowed class is checked
against its arguments first (sizes, kinds), and dict keys, set members and dtypes must be small.
Over the budget, or an argument no Unischema needs: ``UnsafeMetadataError`` naming the file.
After loading, every field is checked to be plain (name, dtype, shape of ints, known codec).
"""

from __future__ import annotations

import collections
import copyreg
import decimal
import io
import json
import operator
import pickle
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from .errors import CorruptFileError, UnsafeMetadataError

__all__ = ["UNISCHEMA_KEY", "ROW_GROUPS_KEY", "BUDGET_BYTES", "Schema", "Field", "Codec",
           "SparkType", "loads_unischema", "read_unischema"]

UNISCHEMA_KEY = b"dataset-toolkit.unischema.v1"
ROW_GROUPS_KEY = b"dataset-toolkit.num_row_groups_per_file.v1"
# What one Unischema pickle may build, estimated (sys.getsizeof) per object and per container
# growth. Petastorm's pickle of a 14-field schema builds about 30 KiB; 10,000 fields about 20 MiB.
BUDGET_BYTES = 64 << 20
# Values a dict key or set member may nest (hashing and comparing walk them, shared ones again).
_KEY_NODES = 64
# Fields and sub-dtypes a numpy dtype may nest (its repr, hash and == walk them).
_DTYPE_NODES = 256
# Dimensions of a field's shape.
_MAX_DIMS = 32
# Encodings a pickled str/bytes call may name (others, e.g. punycode, are slow or odd).
_ENCODINGS = {"utf-8", "utf8", "ascii", "latin1", "latin-1", "iso-8859-1"}


def _short(value: Any) -> str:
    """A value for an error message that never walks an attacker's structure."""
    if isinstance(value, (str, bytes)):
        text = repr(value)
        return text if len(text) <= 80 else text[:77] + "..."
    if value is None or isinstance(value, (bool, float)) or (
            isinstance(value, int) and -10 ** 30 < value < 10 ** 30):
        return repr(value)
    if isinstance(value, type):
        return f"{value.__module__}.{value.__qualname__}"
    if callable(value) and isinstance(getattr(value, "__qualname__", None), str):
        return f"{getattr(value, '__module__', '?')}.{value.__qualname__}"
    return f"a {type(value).__name__}"


def _set_state(obj: Any, state: Any) -> None:
    """A stand-in's pickled state -> its attributes: str keys only, and never one of the class's
    own names (``kind``, ``type_name``, properties, methods), which a pickle must not replace."""
    if isinstance(state, tuple) and len(state) == 2:  # (dict, slots)
        parts = [part for part in state if part]
        if not all(isinstance(part, dict) for part in parts):
            raise ValueError("the state of a Unischema object is not a dict")
        state = {k: v for part in parts for k, v in part.items()}
    if state is None:
        return
    if not isinstance(state, dict):
        raise ValueError(f"the state of a Unischema object is {_short(state)}, not a dict")
    cls = type(obj)
    for key, value in state.items():
        if not isinstance(key, str) or hasattr(cls, key):
            raise ValueError(f"the state of a {cls.__name__} sets {_short(key)}")
        obj.__dict__[key] = value


class SparkType:
    """Inert stand-in for a ``pyspark.sql.types`` instance: its class name and pickled state."""

    type_name = "DataType"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args = args
        _set_state(self, kwargs)

    def __setstate__(self, state: Any) -> None:
        _set_state(self, state)

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
            image_codec = args[0] if args else kwargs.get("image_codec", "png")
            if not isinstance(image_codec, str):
                raise ValueError(f"CompressedImageCodec({_short(image_codec)}): not a str")
            self._image_codec = "." + image_codec
            self._quality = args[1] if len(args) > 1 else kwargs.get("quality", 80)
        elif self.kind == "ScalarCodec":
            self._spark_type = args[0] if args else kwargs.get("spark_type")

    def __setstate__(self, state: Any) -> None:
        _set_state(self, state)

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
            state = state[0] or {}
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
    # vars(), not dir() + getattr(): getattr imports numpy's lazy submodules (numpy.testing,
    # f2py: ~50 ms at a process's first Loader), and none of them is a scalar type.
    for name, value in vars(np).items():
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
    raise UnsafeMetadataError(
        f"copyreg._reconstructor({_short(cls)}, {_short(base)}) is not allowed")


def _numpy_scalar(dtype: Any, data: Any = None) -> Any:
    if not isinstance(dtype, np.dtype) or dtype.hasobject or not isinstance(data, bytes):
        raise UnsafeMetadataError("numpy scalar of an object dtype is not allowed")
    if dtype.itemsize > len(data):
        raise ValueError(f"a numpy scalar of {dtype.itemsize} bytes from {len(data)} bytes")
    return np.frombuffer(data, dtype=dtype, count=1)[0]


# --------------------------------------------------------------------------- bounded unpickling

_SCALARS = (str, bytes, int, float, complex, bool, type(None), decimal.Decimal)
_SIZED = (str, bytes, bytearray, list, tuple, dict, set, frozenset)
# Bytes one element of a container built by a call costs (list slot; set/dict entry with its
# share of the table); a str's characters may each become a 1-character str object.
_PER_ITEM = {list: 8, tuple: 8, set: 64, frozenset: 64, dict: 104, collections.OrderedDict: 160}


def _key_nodes(value: Any, limit: int) -> int:
    """How many values hashing or comparing ``value`` visits (shared ones each time), counted
    up to ``limit + 1``; a value that is no plain key counts as ``limit + 1``."""
    count, todo = 0, [value]
    while todo and count <= limit:
        item = todo.pop()
        count += 1
        if isinstance(item, (tuple, frozenset)):
            todo.extend(item)
        elif not isinstance(item, _SCALARS + (type, np.generic)) or isinstance(item, np.void):
            return limit + 1  # dtypes, lists, stand-ins: no business being a key
    return count


def _dtype_nodes(dtype: np.dtype, limit: int) -> int:
    """Fields and sub-dtypes ``dtype`` nests (shared ones each time), counted up to
    ``limit + 1``."""
    count, todo = 0, [dtype]
    while todo and count <= limit:
        item = todo.pop()
        count += 1
        if item.subdtype is not None:
            todo.append(item.subdtype[0])
        if item.fields:
            todo.extend(entry[0] for entry in item.fields.values())
    return count


class _Unpickler(pickle._Unpickler):  # type: ignore[name-defined]
    """Python's own unpickler (opcode by opcode, so each can be metered) with the allowlist and
    the budget. ``dispatch`` is pickle's table with every handler wrapped by ``_metered``."""

    dispatch: Dict[int, Callable[[Any], None]] = {}

    def __init__(self, data: bytes, where: str) -> None:
        super().__init__(io.BytesIO(data))
        self._where = where
        self._left = BUDGET_BYTES
        # id -> (object, bytes charged): objects stay referenced, so an id is never reused.
        self._charged: Dict[int, Tuple[Any, int]] = {}

    # ---------------------------------------------------------------------------- the budget

    def _refuse(self, what: str) -> UnsafeMetadataError:
        return UnsafeMetadataError(
            f"{self._where}: the pickled Unischema under {UNISCHEMA_KEY.decode()} {what}; a "
            "Unischema needs nothing of the kind, so stoker refuses it (nothing beyond the "
            "budget was built)")

    def _charge(self, nbytes: int, what: str) -> None:
        self._left -= nbytes
        if self._left < 0:
            raise self._refuse(f"builds more than {BUDGET_BYTES >> 20} MiB of objects ({what})")

    def _check_key(self, key: Any) -> None:
        if _key_nodes(key, _KEY_NODES) > _KEY_NODES:
            raise self._refuse(f"uses {_short(key)} as a dict key or set member (keys must be "
                               f"plain values, or tuples of at most {_KEY_NODES})")

    # ------------------------------------------------------------------- calls of allowed names

    def _check_encoding(self, args: Tuple[Any, ...], kwargs: Dict[str, Any], call: str) -> None:
        encoding = args[1] if len(args) > 1 else kwargs.get("encoding")
        errors = args[2] if len(args) > 2 else kwargs.get("errors")
        if encoding is not None and (not isinstance(encoding, str) or
                                     encoding.lower() not in _ENCODINGS):
            raise self._refuse(f"calls {call} with encoding {_short(encoding)}")
        if errors is not None and not isinstance(errors, str):
            raise self._refuse(f"calls {call} with errors={_short(errors)}")
        if set(kwargs) - {"encoding", "errors"} or len(args) > 3:
            raise self._refuse(f"calls {call} with more arguments than it takes")

    def _check_call(self, func: Any, args: Any, kwargs: Any) -> None:
        """Before ``func(*args, **kwargs)`` (REDUCE, NEWOBJ, OBJ, INST): what it would build is
        charged, and arguments no Unischema needs are refused."""
        if isinstance(func, type) and issubclass(func, (Schema, Field, Codec, SparkType)) or \
                func is _reconstructor or func is _numpy_scalar:
            # Stand-ins keep references to what they get (checked after loading); the two
            # functions are bounded by their arguments (see each).
            if not isinstance(args, tuple) or not isinstance(kwargs, dict):
                raise self._refuse(f"calls {_short(func)} with {_short(args)} as its arguments")
            if isinstance(func, type) and issubclass(func, Codec):
                for arg in list(args) + list(kwargs.values()):
                    if not isinstance(arg, (str, int, SparkType, type(None))):
                        raise self._refuse(f"calls {_short(func)} with {_short(arg)}")
            return
        call = _short(func)
        if not isinstance(args, tuple) or not isinstance(kwargs, dict) or not callable(func):
            raise self._refuse(f"calls {call} with {_short(args)} as its arguments")
        first = args[0] if args else None
        if func in (bytes, bytearray):
            self._check_encoding(args, kwargs, call)
            if not args:
                return
            if isinstance(first, str):
                self._charge(4 * len(first), f"{call} of a str")
            elif isinstance(first, (bytes, bytearray, list, tuple)):
                self._charge(len(first), f"{call} of {len(first)} items")
            elif hasattr(type(first), "__index__"):
                size = operator.index(first)
                self._charge(max(size, 0), f"{call}({size})")
            else:
                raise self._refuse(f"calls {call} with {_short(first)}")
            return
        if func is str or (isinstance(func, type) and issubclass(func, (np.str_, np.bytes_))):
            self._check_encoding(args, kwargs, call)
            if args and (not isinstance(first, _SCALARS + (bytearray, np.generic)) or
                         isinstance(first, np.void)):
                # str() of a container walks it: exponential for one that shares itself.
                raise self._refuse(f"calls {call} with {_short(first)}")
            self._charge(8 * sys.getsizeof(first), f"{call} of {_short(first)}")
            return
        if func in (int, float, complex, bool, object, decimal.Decimal):
            if kwargs or len(args) > 2:
                raise self._refuse(f"calls {call} with more arguments than a Unischema needs")
            for arg in args:
                plain = isinstance(arg, _SCALARS + (np.generic,)) and not isinstance(arg, np.void)
                digits = (func is decimal.Decimal and isinstance(arg, tuple) and len(arg) == 3
                          and isinstance(arg[1], tuple) and len(arg[1]) <= 10000 and
                          all(isinstance(d, int) for d in arg[1]))
                if not (plain or digits):
                    raise self._refuse(f"calls {call} with {_short(arg)}")
                self._charge(sys.getsizeof(arg), f"{call} of {_short(arg)}")
            return
        if func in _PER_ITEM:
            if len(args) > 1 or (kwargs and func not in (dict, collections.OrderedDict)):
                raise self._refuse(f"calls {call} with more arguments than it takes")
            keys = list(kwargs)
            if args:
                if not isinstance(first, _SIZED):
                    raise self._refuse(f"calls {call} with {_short(first)}")
                per_item = _PER_ITEM[func] * (8 if isinstance(first, str) else 1)
                self._charge(len(first) * per_item, f"{call} of {len(first)} items")
                if func in (dict, collections.OrderedDict):
                    if isinstance(first, dict):
                        keys.extend(first)
                    else:
                        for pair in first:
                            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                                raise self._refuse(f"calls {call} with {_short(pair)} as an "
                                                   "item")
                            keys.append(pair[0])
                elif func in (set, frozenset) and not isinstance(first, (str, bytes, bytearray)):
                    keys.extend(first)
            self._charge(len(kwargs) * _PER_ITEM[func], f"{call} of {len(kwargs)} keywords")
            for key in keys:
                self._check_key(key)
            return
        if func is np.dtype:
            if set(kwargs) - {"align", "copy"} or len(args) > 3 or not args:
                raise self._refuse("calls numpy.dtype with arguments a Unischema does not use")
            if not (isinstance(first, (str, np.dtype)) or first in _DTYPE_TYPES):
                # A list or dict spec builds nested dtypes, a shared one exponentially.
                raise self._refuse(f"calls numpy.dtype with {_short(first)}")
            if isinstance(first, str) and len(first) > 256:
                raise self._refuse(f"calls numpy.dtype with a {len(first)}-character spec")
            if isinstance(first, np.dtype) and _dtype_nodes(first, _DTYPE_NODES) > _DTYPE_NODES:
                raise self._refuse(f"calls numpy.dtype with a dtype nesting more than "
                                   f"{_DTYPE_NODES} fields")
            for flag in list(args[1:]) + list(kwargs.values()):
                if not isinstance(flag, int):
                    raise self._refuse(f"calls numpy.dtype with {_short(flag)}")
            return
        if isinstance(func, type) and issubclass(func, np.dtype):
            if args or kwargs:
                raise self._refuse(f"calls {call} with arguments")
            return
        if isinstance(func, type) and issubclass(func, np.generic):
            if kwargs or len(args) > 2:
                raise self._refuse(f"calls {call} with arguments a Unischema does not use")
            for arg in args:
                if not isinstance(arg, _SCALARS + (np.generic,)):
                    # numpy scalar types turn lists into arrays (a shared list: n**depth).
                    raise self._refuse(f"calls {call} with {_short(arg)}")
            if issubclass(func, np.void) and args and hasattr(type(first), "__index__"):
                size = operator.index(first)
                self._charge(max(size, 0), f"{call}({size})")
            else:
                self._charge(8 * sys.getsizeof(first), f"{call} of {_short(first)}")
            return
        raise self._refuse(f"calls {call}, which it may only name")

    # ------------------------------------------------------------------------ metered opcodes

    def load_reduce(self) -> None:
        func, args = self.stack[-2:] if len(self.stack) > 1 else (None, ())
        self._check_call(func, args, {})
        super().load_reduce()

    def load_newobj(self) -> None:
        cls, args = self.stack[-2:] if len(self.stack) > 1 else (None, ())
        self._check_call(cls, args, {})
        super().load_newobj()

    def load_newobj_ex(self) -> None:
        cls, args, kwargs = self.stack[-3:] if len(self.stack) > 2 else (None, (), {})
        self._check_call(cls, args, kwargs)
        super().load_newobj_ex()

    def _instantiate(self, klass: Any, args: Any) -> None:
        self._check_call(klass, tuple(args), {})
        super()._instantiate(klass, args)

    def load_build(self) -> None:
        inst, state = self.stack[-2:] if len(self.stack) > 1 else (None, None)
        if not isinstance(inst, (Schema, Field, Codec, SparkType, np.dtype)):
            # A class here would be changed for the whole process (setattr of slot state).
            raise self._refuse(f"sets the state of {_short(inst)}")
        cost = sys.getsizeof(state)
        for part in (state if isinstance(state, tuple) else (state,)):
            if isinstance(part, dict):
                cost += sum(sys.getsizeof(v) for v in part.values() if isinstance(v, dict))
        self._charge(cost, f"the state of a {type(inst).__name__}")
        super().load_build()
        if isinstance(inst, np.dtype) and _dtype_nodes(inst, _DTYPE_NODES) > _DTYPE_NODES:
            raise self._refuse(f"builds a numpy dtype nesting more than {_DTYPE_NODES} fields")

    def load_setitem(self) -> None:
        if len(self.stack) > 1:
            self._check_key(self.stack[-2])
        super().load_setitem()

    def load_setitems(self) -> None:
        for key in self.stack[0::2]:  # after MARK: key, value, key, value, ...
            self._check_key(key)
        super().load_setitems()

    def load_additems(self) -> None:
        for key in self.stack:
            self._check_key(key)
        super().load_additems()

    def load_frozenset(self) -> None:
        for key in self.stack:
            self._check_key(key)
        super().load_frozenset()

    def find_class(self, module: str, name: str) -> Any:
        value = _allowed(module, name)
        if value is None:
            raise UnsafeMetadataError(
                f"{self._where}: the pickled Unischema names {module[:100]}.{name[:100]}, which "
                "is not a Unischema, UnischemaField, Petastorm codec, numpy dtype or Spark type; "
                "stoker refuses to unpickle it (nothing was run)")
        return value

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafeMetadataError(f"{self._where}: persistent ids are not allowed in a Unischema")


def _metered(handler: Callable[[Any], None], slots: int) -> Callable[[Any], None]:
    """``handler`` followed by its charge: ``slots`` bytes (stack slot, mark list or memo entry)
    plus a new object on top of the stack, or what a container there grew by."""
    def run(self: _Unpickler) -> None:
        handler(self)
        left = self._left - slots
        stack = self.stack
        if stack:
            top = stack[-1]
            size = sys.getsizeof(top)
            known = self._charged.get(id(top))
            if known is None:
                self._charged[id(top)] = (top, size)
                left -= size + 64
            elif size > known[1]:
                self._charged[id(top)] = (top, size)
                left -= size - known[1]
        self._left = left
        if left < 0:
            top = stack[-1] if stack else None
            self._charge(0, f"the last a {type(top).__name__} of {sys.getsizeof(top)} bytes")
    return run


_DTYPE_TYPES = frozenset(v for v in _NUMPY.values() if isinstance(v, type)) | frozenset(
    (str, bytes, int, float, complex, bool, object))
# A mark is a new list; a memo entry a dict entry and an int.
_SLOTS = {pickle.MARK[0]: 8 + 64, pickle.PUT[0]: 8 + 104, pickle.BINPUT[0]: 8 + 104,
          pickle.LONG_BINPUT[0]: 8 + 104, pickle.MEMOIZE[0]: 8 + 104}
for _code, _handler in pickle._Unpickler.dispatch.items():  # type: ignore[attr-defined]
    _Unpickler.dispatch[_code] = _metered(getattr(_Unpickler, _handler.__name__, _handler),
                                          _SLOTS.get(_code, 8))
del _code, _handler


def _check_loaded(schema: Any, where: str) -> Schema:
    """The unpickled object is a Unischema of plain fields (so nothing stoker does with it
    later, a repr in a message included, walks an attacker's structure)."""
    def bad(what: str) -> CorruptFileError:
        return CorruptFileError(f"{where}: {UNISCHEMA_KEY.decode()} {what}")

    if not isinstance(schema, Schema):
        raise bad(f"holds {_short(schema)}, not a Unischema")
    name, fields = schema.__dict__.get("_name"), schema.__dict__.get("_fields")
    if not isinstance(name, str) or not isinstance(fields, dict):
        raise bad("holds a Unischema without a str name and a dict of fields")
    for key, field in fields.items():
        if not isinstance(key, str) or not isinstance(field, Field) or \
                not isinstance(field.name, str):
            raise bad(f"field {_short(key)} is not a UnischemaField")
        dtype = field.numpy_dtype
        if isinstance(dtype, np.dtype):
            if _dtype_nodes(dtype, _DTYPE_NODES) > _DTYPE_NODES:
                raise bad(f"field {key!r}: numpy_dtype nests more than {_DTYPE_NODES} fields")
        elif not isinstance(dtype, type):
            raise bad(f"field {key!r}: numpy_dtype is {_short(dtype)}, not a type")
        shape = field[2] if field[2] is not None else ()
        if not isinstance(shape, (tuple, list)) or len(shape) > _MAX_DIMS or not all(
                d is None or (isinstance(d, (int, np.integer)) and not isinstance(d, bool)
                              and 0 <= d < 2 ** 40) for d in shape):
            raise bad(f"field {key!r}: shape is not a tuple of at most {_MAX_DIMS} sizes "
                      "(int or None)")
        codec = field.codec
        if codec is not None:
            if not isinstance(codec, Codec) or type(codec).kind not in _CODEC_CLASSES:
                raise bad(f"field {key!r}: codec is {_short(codec)}, not a Petastorm codec")
            state = codec.__dict__
            if not isinstance(state.get("_image_codec", ""), str) or not isinstance(
                    state.get("_quality", 0), int) or not isinstance(
                    state.get("_spark_type"), (SparkType, type(None))):
                raise bad(f"field {key!r}: its {type(codec).kind} holds values of the wrong "
                          "kinds")
    return schema


def loads_unischema(data: bytes, where: str = "_common_metadata") -> Schema:
    """Unpickles a Unischema with the restricted, bounded unpickler; ``where`` names the file in
    errors."""
    try:
        schema = _Unpickler(data, where).load()
    except UnsafeMetadataError:
        raise
    except Exception as error:  # noqa: BLE001 - any malformed pickle
        # str() of an error holding a value (a KeyError) would repr it: plain messages only.
        detail = str(error)[:300] if all(isinstance(a, (str, int)) for a in error.args) else ""
        raise CorruptFileError(
            f"{where}: the pickled Unischema under {UNISCHEMA_KEY.decode()} cannot be read: "
            f"{type(error).__name__}{': ' + detail if detail else ''}") from None
    return _check_loaded(schema, where)


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
