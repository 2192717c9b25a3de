"""Petastorm's reader API on stoker: change one import.

    from stoker.petastorm import make_reader          # was: from petastorm import make_reader
    from stoker.petastorm.pytorch import DataLoader   # was: from petastorm.pytorch import ...

``make_reader`` yields one namedtuple of numpy values per row, ``make_batch_reader`` one namedtuple
of column arrays per batch, as Petastorm's readers do; underneath, a :class:`stoker.Loader` reads
and decodes on C++ threads (Petastorm codecs become stoker ops). Petastorm's arguments keep their
meaning where stoker has one; the others are accepted with a one-time warning naming them when
ignoring them cannot change the rows delivered, and refused with ``InvalidOptionError`` when it
would. docs/migrating-from-petastorm.md has the table.

Order: with a ``seed`` the order is a pure function of (dataset, options, seed, epoch, shard), the
same for any ``workers_count``; every row is delivered exactly once per epoch across the
``shard_count`` shards.

``transform_spec`` and ``predicate`` follow Petastorm per reader: ``make_reader`` evaluates the
predicate on a dict of each row's predicate fields and calls the spec's function once per row
with a dict (petastorm/py_dict_reader_worker.py); ``make_batch_reader`` passes both a pandas
``DataFrame`` (petastorm/arrow_reader_worker.py). Predicates: :mod:`stoker.petastorm.predicates`.
"""

from __future__ import annotations

import collections
import collections.abc
import keyword
import re
import warnings
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

import numpy as np

from .. import _stoker
from .._petastorm import PetastormStore, codec_kind, decode_value, detect, field_chain
from .._unischema import Field, Schema
from ..errors import (InvalidOptionError, LoaderClosedError, NullValueError, TransformError,
                      UnsupportedTypeError)
from ..loader import Loader

__all__ = ["make_reader", "make_batch_reader", "Reader", "TransformSpec", "predicates"]

_WARNED: set = set()
# numpy's C long long types and the np.int64 / np.uint64 of the same size (where they differ).
_LONG_LONG = {np.dtype(c).char: np.dtype(t) for c, t in (("q", np.int64), ("Q", np.uint64))
              if np.dtype(c).type is not np.dtype(t).type}
# Rows per engine batch behind the row reader (the reader hands out rows; any size works).
_ROWS_PER_BATCH = 256


def _warn_once(names: Sequence[str], why: str) -> None:
    key = (tuple(names), why)
    if key in _WARNED:
        return
    _WARNED.add(key)
    warnings.warn(f"stoker.petastorm ignores {', '.join(names)}: {why}", UserWarning, stacklevel=3)


def TransformSpec(func=None, edit_fields=None, removed_fields=None,  # noqa: N802
                  selected_fields=None):
    """Petastorm's ``TransformSpec(func, edit_fields, removed_fields, selected_fields)``.

    ``func`` gets one row as a dict from ``make_reader`` and one batch as a pandas DataFrame
    from ``make_batch_reader``, as in Petastorm. ``edit_fields`` are ``(name, numpy_dtype,
    shape, nullable)`` tuples (or UnischemaFields); ``reader.schema`` shows the result."""
    from .._user_transform import TransformSpec as Spec

    return Spec(func, edit_fields=edit_fields, removed_fields=removed_fields,
                selected_fields=selected_fields)


def _edit_field(field: Any) -> tuple:
    """An ``edit_fields`` entry -> (name, numpy_dtype, shape, nullable), as given."""
    if isinstance(field, Field) or (hasattr(field, "numpy_dtype") and hasattr(field, "name")):
        entry = (field.name, field.numpy_dtype, field.shape, getattr(field, "nullable", False))
    elif isinstance(field, (tuple, list)) and len(field) == 4:
        entry = tuple(field)
    else:
        raise InvalidOptionError(
            f"TransformSpec edit_fields entries are (name, numpy_dtype, shape, nullable) tuples "
            f"or UnischemaFields, got {field!r}")
    name, dtype, shape, nullable = entry
    if not isinstance(name, str):
        raise InvalidOptionError(f"TransformSpec edit_fields: field name {name!r} is not a str")
    if shape is not None and (not isinstance(shape, (tuple, list)) or not all(
            d is None or (isinstance(d, int) and d >= 0) for d in shape)):
        raise InvalidOptionError(f"TransformSpec edit_fields[{name!r}]: shape {shape!r} is not a "
                                 "tuple of sizes (int or None)")
    return name, dtype, tuple(shape) if shape is not None else (), bool(nullable)


class _Spec:
    """A TransformSpec (stoker's or Petastorm's) as the reader applies it: Petastorm's
    transform_schema (petastorm/transform.py) gives the output fields and their order."""

    def __init__(self, spec: Any, view: Sequence[str], fields: Dict[str, Field],
                 schema_name: str) -> None:
        if not all(hasattr(spec, n) for n in ("func", "edit_fields", "removed_fields",
                                               "selected_fields")):
            raise InvalidOptionError(
                f"transform_spec must be a TransformSpec (func, edit_fields, removed_fields, "
                f"selected_fields), got {type(spec).__name__}")
        if spec.func is not None and not callable(spec.func):
            raise InvalidOptionError(f"TransformSpec func must be callable, got {spec.func!r}")
        self.func = spec.func
        self.removed = list(spec.removed_fields or [])
        self.selected = list(spec.selected_fields) if spec.selected_fields is not None else None
        edits = [_edit_field(f) for f in (spec.edit_fields or [])]
        if len({e[0] for e in edits}) != len(edits):
            raise InvalidOptionError("TransformSpec edit_fields names a field twice")
        unknown = set(self.removed) - set(view)
        if unknown:
            warnings.warn('remove_fields specified some field names that are not part of the '
                          f'schema. These field names will be ignored "{", ".join(unknown)}". ',
                          UserWarning, stacklevel=5)
        excluded = {e[0] for e in edits} | set(self.removed)
        self.fields: Dict[str, Field] = {n: fields.get(n, Field(n, None, (), None, False))
                                         for n in view if n not in excluded}
        for name, dtype, shape, nullable in edits:
            self.fields[name] = Field(name, dtype, shape, None, nullable)
        if self.selected is not None:
            unknown = set(self.selected) - set(self.fields)
            if unknown:
                warnings.warn('selected_fields specified some field names that are not part of '
                              f'the schema. These field names will be ignored '
                              f'"{", ".join(unknown)}". ', UserWarning, stacklevel=5)
            order = self.selected
            self.fields = {n: self.fields[n] for n in sorted(
                (n for n in self.fields if n in order), key=order.index)}
        self.names = list(self.fields)
        self.schema = Schema(schema_name + "_transformed")
        self.schema._fields = collections.OrderedDict(self.fields)

    def check_names(self, got: Sequence[Any], reader: str) -> None:
        """The function's output (after removed_fields) must be the schema's fields, as
        Petastorm requires (it raises TypeError or ValueError there)."""
        extra = [str(n) for n in got if n not in self.fields]
        missing = [n for n in self.names if n not in set(got)]
        if extra or missing:
            raise TransformError(
                f"{reader}: the TransformSpec's function returned fields that are not the "
                f"reader's schema: {'extra ' + ', '.join(extra) if extra else ''}"
                f"{'; ' if extra and missing else ''}"
                f"{'missing ' + ', '.join(missing) if missing else ''} (the schema is the "
                "dataset's fields less removed_fields, plus edit_fields, restricted to "
                "selected_fields; declare new fields in edit_fields)")


def _url_to_source(url: Any) -> List[str]:
    urls = [url] if isinstance(url, str) else list(url)
    if not urls:
        raise InvalidOptionError("dataset_url is empty")
    out = []
    for item in urls:
        if not isinstance(item, str):
            raise InvalidOptionError(
                f"dataset_url must be a URL string or a list of them, got {item!r}")
        if item.startswith("file://"):
            item = item[len("file://"):]
        elif item.startswith(("hdfs://", "viewfs://")):
            raise InvalidOptionError(
                f"dataset_url {item!r}: stoker reads local paths, s3://, gs:// and other Arrow "
                "filesystems, not HDFS")
        out.append(item)
    return out


def _select_fields(available: Sequence[str], schema_fields: Any) -> List[str]:
    """Petastorm's ``schema_fields``: names, UnischemaFields or regex patterns (full match)."""
    if schema_fields is None:
        return list(available)
    if isinstance(schema_fields, str) or not isinstance(schema_fields, (list, tuple, set)):
        raise InvalidOptionError(
            f"schema_fields must be a list of field names, UnischemaFields or regex patterns, "
            f"got {schema_fields!r}")
    chosen = set()
    for item in schema_fields:
        name = getattr(item, "name", None) if not isinstance(item, str) else None
        if name is not None:
            if name not in available:
                raise InvalidOptionError(
                    f"schema_fields: field {name!r} is not in the dataset (fields: "
                    f"{', '.join(available)})")
            chosen.add(name)
            continue
        if not isinstance(item, str):
            raise InvalidOptionError(f"schema_fields: {item!r} is not a name or pattern")
        matched = [n for n in available if re.fullmatch(item, n)]
        if not matched:
            raise InvalidOptionError(
                f"schema_fields: {item!r} matches no field (fields: {', '.join(available)})")
        chosen.update(matched)
    return [n for n in available if n in chosen]  # dataset order, as Petastorm's schema view


def _row_type(name: str, fields: Sequence[str]) -> Any:
    type_name = re.sub(r"\W", "_", name or "") or "Row"
    if not type_name[0].isalpha() or keyword.iskeyword(type_name):
        type_name = "Row_" + type_name
    return collections.namedtuple(type_name, list(fields), rename=False)


def _python_decoder(field: Field) -> Callable[[bytes], Any]:
    kind = codec_kind(field)
    return lambda data: decode_value(kind, data)



def _refuse_nulls_inside_lists(batch: Dict[str, Any], name: str, mask: Any) -> None:
    """The reader masks nullable columns to give None for null rows, as Petastorm does; the
    element masks that null_mask adds to list columns have no Petastorm form, so a null inside
    a valid row's list is refused as before rather than delivered as 0."""
    level = 1
    while _stoker.mask_key(name, level) in batch:
        elements = np.asarray(batch[_stoker.mask_key(name, level)])
        if elements.ndim > 1 and mask is not None:  # fixed-size lists: [B, n...]
            elements = elements[np.asarray(mask)]
        if not elements.all():
            raise NullValueError(
                f"column {name!r} has nulls inside its lists (an inner list, string or element), "
                "which the Petastorm reader cannot deliver; read it with stoker.Loader("
                f"null_mask=[{name!r}]), which masks them ({_stoker.mask_key(name, level)})")
        level += 1


class _Plan:
    """How each selected field is read: the Loader's transforms, and the fields decoded here."""

    def __init__(self, store: Optional[PetastormStore], names: Sequence[str],
                 types: Dict[str, Any]) -> None:
        import pyarrow as pa

        self.transforms: Dict[str, list] = {}
        self.reshape: Dict[str, tuple] = {}
        self.python: Dict[str, Callable[[bytes], Any]] = {}
        self.scalar_type: Dict[str, Any] = {}
        self.scalar_dtype: Dict[str, np.dtype] = {}
        self.nullable: List[str] = []
        fields = store.fields if store is not None else {}
        for name in names:
            field = fields.get(name)
            if field is None:
                # Plain Parquet: Petastorm infers np.str_ / np.bytes_ for these and returns
                # numpy_dtype(value), as for a Unischema's scalar fields.
                arrow = types.get(name)
                if arrow is not None and (pa.types.is_string(arrow) or
                                          pa.types.is_large_string(arrow)):
                    self.scalar_type[name] = np.str_
                elif arrow is not None and (pa.types.is_binary(arrow) or
                                            pa.types.is_large_binary(arrow)):
                    self.scalar_type[name] = np.bytes_
                continue
            if field.nullable:
                self.nullable.append(name)
            if codec_kind(field) == "scalar":
                if isinstance(field.numpy_dtype, type) and issubclass(field.numpy_dtype,
                                                                       (np.str_, np.bytes_)):
                    self.scalar_type[name] = field.numpy_dtype
                elif isinstance(field.numpy_dtype, type) and issubclass(field.numpy_dtype,
                                                                         (np.number, np.bool_)):
                    # Petastorm returns numpy_dtype(value): IntegerType stored, np.int_ given.
                    self.scalar_dtype[name] = np.dtype(field.numpy_dtype)
                continue
            variable = any(d is None for d in field.shape)
            if variable or field.nullable:
                # Null rows and per-row shapes cannot be a dense tensor: decode these here.
                self.python[name] = _python_decoder(field)
                continue
            try:
                chain, shape = field_chain(field)
            except UnsupportedTypeError:
                # Beyond the ops (a uint16 PNG, a dtype they do not make): decoded here, as
                # Petastorm's codec would.
                self.python[name] = _python_decoder(field)
                continue
            self.transforms[name] = chain
            if shape is not None:
                self.reshape[name] = shape


class Reader:
    """What ``make_reader`` / ``make_batch_reader`` return: an iterator with Petastorm's
    ``stop()``, ``join()``, ``reset()`` and ``with`` support."""

    def __init__(self, sources: List[str], batched: bool, schema_fields: Any, seed: Any,
                 shuffle_rows: bool, shuffle_row_groups: bool, predicate: Any, num_epochs: Any,
                 cur_shard: Any, shard_count: Any, cache_dir: Any, cache_bytes: Any,
                 storage_options: Any, workers_count: Any, transform_spec: Any,
                 batch_size: int) -> None:
        if num_epochs is not None and (isinstance(num_epochs, bool) or
                                       not isinstance(num_epochs, int) or num_epochs < 1):
            raise InvalidOptionError(
                f"num_epochs must be a positive integer or None, got {num_epochs!r}")
        if (cur_shard is None) != (shard_count is None):
            raise InvalidOptionError("cur_shard and shard_count must be given together")
        if shard_count is not None and not (isinstance(shard_count, int) and shard_count >= 1 and
                                            isinstance(cur_shard, int) and
                                            0 <= cur_shard < shard_count):
            raise InvalidOptionError(
                f"cur_shard must be in [0, shard_count), got cur_shard={cur_shard!r}, "
                f"shard_count={shard_count!r}")
        if predicate is not None and not (hasattr(predicate, "get_fields") and
                                          hasattr(predicate, "do_include")):
            raise InvalidOptionError(
                "predicate must be a Petastorm predicate (get_fields() and do_include(values))")
        shuffle = bool(shuffle_row_groups or shuffle_rows)
        world = shard_count or 1
        if shuffle and world > 1 and seed is None:
            raise InvalidOptionError(
                "cur_shard/shard_count with shuffling needs seed= (every shard must draw the same "
                "order, or shards overlap); pass seed=<int> or shuffle_row_groups=False")
        self._batched = batched
        self._num_epochs = num_epochs
        self._predicate = predicate
        self._store = detect(sources, storage_options)

        self._types: Optional[Dict[str, Any]] = None
        self._nullable_flags: Dict[str, bool] = {}
        self._unsupported: Dict[str, str] = {}
        types = self._schema_types(sources, storage_options)
        available = list(types)
        dataset_rows = self._dataset_rows
        if self._store is not None:
            available = [n for n in self._store.fields if n in available]
        if schema_fields is None and self._unsupported:
            # As Petastorm's schema inference: columns of a type it cannot read are left out.
            available = [n for n in available if n not in self._unsupported]
            _warn_once(sorted(self._unsupported),
                       "their types cannot become arrays (name them in schema_fields to see why)")
        self._view = _select_fields(available, schema_fields)
        read = list(self._view)
        if predicate is not None:
            for name in predicate.get_fields():
                if name not in available:
                    raise InvalidOptionError(
                        f"predicate: field {name!r} is not in the dataset")
                if name not in read:
                    read.append(name)
        self._read = read
        # Rows get numpy_dtype(value) for plain Parquet's strings too; batches keep what pandas
        # gives (bytes objects: np.bytes_ would drop trailing NULs).
        self._plan = _Plan(self._store, read, {} if batched else types)
        self.schema = self._view_schema()
        # The transform runs here, after the decode and the predicate, per reader as Petastorm
        # runs it (rows: a dict each; batches: a DataFrame): the Loader delivers the fields.
        self._spec = None if transform_spec is None else _Spec(
            transform_spec, self._view, self._store.fields if self._store is not None else {},
            self.schema.name if self.schema is not None else "inferred_schema")
        self._fields = self._spec.names if self._spec is not None else list(self._view)
        if self._spec is not None and self.schema is not None:
            self.schema = self._spec.schema
        self.batched_output = batched
        self.is_batched_reader = batched
        self.ngram = None
        self.last_row_consumed = False

        rows_per_rank = -(-dataset_rows // world)
        self._loader = Loader(
            sources, columns=read, batch_size=max(1, min(batch_size, rows_per_rank)),
            shuffle=shuffle, seed=seed,
            # Petastorm shuffles the row-group order; rows move only with shuffle_rows (in the
            # Loader's default window: 65,536 rows, fewer where they would exceed 256 MiB decoded).
            shuffle_window=None if shuffle_rows else 1,
            drop_last=False, padding_mask=True, rank=cur_shard if shard_count else 0,
            world_size=world, num_threads=workers_count, storage_options=storage_options,
            cache_dir=cache_dir, cache_bytes=cache_bytes if cache_bytes is not None else "50GiB",
            transforms=self._plan.transforms or None,
            lists=self._lists_choice(sources, read, storage_options),
            null_mask=self._nullable_columns(sources, read, storage_options) or False,
            petastorm=False)
        self.seed = self._loader.seed
        self._row_type = _row_type(self.schema.name if self.schema else "Row", self._fields)
        self._epochs_done = 0
        self._it: Optional[Iterator[Any]] = None
        self._stopped = False

    def _lists_choice(self, sources: List[str], read: Sequence[str], storage_options: Any) -> Any:
        import pyarrow as pa

        types = self._schema_types(sources, storage_options)
        return {n: "ragged" for n in read if n in types and
                (pa.types.is_list(types[n]) or pa.types.is_large_list(types[n]))} or None

    def _nullable_columns(self, sources: List[str], read: Sequence[str],
                          storage_options: Any) -> List[str]:
        types = self._schema_types(sources, storage_options)
        # Every column Arrow declares nullable gets a mask: nulls become None, as in Petastorm.
        return [n for n in read if n in types and self._nullable_flags.get(n, True)
                and n not in self._plan.transforms]

    def _schema_types(self, sources: List[str], storage_options: Any) -> Dict[str, Any]:
        """Arrow types and nullability of the dataset's columns, from stoker's own listing (the
        files a Loader reads) and the first file's footer."""
        if self._types is None:
            import pyarrow.parquet as pq

            from .. import describe

            listing = describe(sources, storage_options=storage_options, petastorm=False,
                               lists="ragged")
            self._unsupported = {c.name: c.error for c in listing.columns if not c.ok}
            first = listing.files[0].path
            if "://" in first:
                import pyarrow.fs as pafs

                if first.startswith("s3://") and storage_options:
                    filesystem, path = pafs.S3FileSystem(**dict(storage_options)), first[5:]
                else:
                    filesystem, path = pafs.FileSystem.from_uri(first)
                with filesystem.open_input_file(path) as handle:
                    arrow = pq.read_schema(handle)
            else:
                arrow = pq.read_schema(first)
            self._types = {f.name: f.type for f in arrow}
            self._nullable_flags = {f.name: f.nullable for f in arrow}
            self._dataset_rows = int(listing.rows)
        return self._types

    def _view_schema(self) -> Optional[Schema]:
        if self._store is None:
            return None
        view = Schema(self._store.schema.name)
        view._fields = collections.OrderedDict(
            (n, self._store.fields[n]) for n in self._view)
        return view

    # ------------------------------------------------------------------------------ iteration

    def _columns(self, batch: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        """One engine batch -> {field: array or list} of the kept rows (padding and predicate
        rows dropped); None when no row is kept."""
        keep = ~np.asarray(batch["__padding__"])
        out: Dict[str, Any] = {}
        for name in self._read:
            value = batch[name]
            if hasattr(value, "tolist") and not isinstance(value, np.ndarray):
                value = value.tolist()  # Ragged: str / bytes / lists of numbers
                info = self._loader.columns[name]
                if info.kind.name == "ragged":
                    value = [np.asarray(v, dtype=info.dtype) for v in value]
            if isinstance(value, np.ndarray) and value.dtype.char in _LONG_LONG:
                # int64 arrives as C long long, which numpy keeps apart from np.int64 (long).
                value = value.view(_LONG_LONG[value.dtype.char])
            if name in self._plan.reshape:  # e.g. Petastorm's [H, W] gray images
                value = value.reshape((len(value),) + self._plan.reshape[name])
            mask = batch.get(_stoker.mask_key(name))
            _refuse_nulls_inside_lists(batch, name, mask)
            decode = self._plan.python.get(name)
            if decode is not None:
                value = [None if (mask is not None and not mask[i]) else decode(v)
                         for i, v in enumerate(value)]
                mask = None
            elif name in self._plan.scalar_dtype and isinstance(value, np.ndarray) and \
                    value.dtype.type is not self._plan.scalar_dtype[name].type:
                value = value.astype(self._plan.scalar_dtype[name])
            elif name in self._plan.scalar_type:
                cast = self._plan.scalar_type[name]
                value = [cast(v) for v in value]
            if mask is not None and not np.asarray(mask).all():
                mask = np.asarray(mask)
                if isinstance(value, np.ndarray) and value.dtype.kind == "f":
                    # Petastorm reads through pandas: a null float is NaN, not None.
                    value = value.copy()
                    value[~mask] = np.nan
                else:
                    value = [v if ok else None for v, ok in zip(list(value), mask)]
            out[name] = value
        if not keep.all():
            out = _take(out, np.flatnonzero(keep))
        if self._predicate is not None and len(keep):
            chosen = self._predicate_mask(out, int(keep.sum()))
            if not chosen.all():
                out = _take(out, np.flatnonzero(chosen))
        if not out or not len(next(iter(out.values()))):
            return None
        return {n: out[n] for n in self._view}

    def _predicate_mask(self, out: Dict[str, Any], rows: int) -> np.ndarray:
        """Which rows the predicate keeps: make_reader asks once per row with a dict of its
        predicate fields, make_batch_reader once per batch with a DataFrame of them (one bool
        per row back), as Petastorm's readers do."""
        names = sorted(self._predicate.get_fields())
        if self._batched:
            frame = self._frame(out, names)
            result = self._predicate.do_include(frame)
            mask = np.asarray(result)
            if mask.shape != (rows,) or mask.dtype.kind not in "bO":
                raise TransformError(
                    f"make_batch_reader: the predicate's do_include returned "
                    f"{type(result).__name__} {getattr(mask, 'dtype', '')} of shape "
                    f"{mask.shape} for a DataFrame of {rows} rows; it gets the batch's "
                    "predicate fields as a DataFrame (as in Petastorm) and must return one bool "
                    "per row (e.g. in_lambda(['id'], lambda ids: ids % 2 == 0))")
            return mask.astype(bool)
        return np.fromiter((bool(self._predicate.do_include({n: out[n][i] for n in names}))
                            for i in range(rows)), dtype=bool, count=rows)

    def _frame(self, columns: Dict[str, Any], names: Sequence[str]) -> Any:
        """Columns as the pandas DataFrame Petastorm's batch reader builds (Arrow's
        ``to_pandas()``: integers with nulls as float64 NaN, strings and bools with nulls as
        objects); decoded codec fields and tensors hold one array per cell."""
        import pandas as pd
        import pyarrow as pa

        data = {}
        for name in names:
            value = columns[name]
            arrow = (self._types or {}).get(name)
            codec = self._store is not None and name in self._store.fields and \
                codec_kind(self._store.fields[name]) != "scalar"
            if isinstance(value, np.ndarray) and value.ndim == 1:
                data[name] = pd.Series(value)
                continue
            cells = list(value)
            if arrow is not None and not codec and not isinstance(value, np.ndarray):
                try:
                    data[name] = pa.array(cells, type=arrow, from_pandas=True).to_pandas()
                    continue
                except (pa.ArrowException, TypeError, ValueError):
                    pass
            column = np.empty(len(cells), dtype=object)
            for i, cell in enumerate(cells):  # element-wise: equal shapes must not broadcast
                column[i] = cell
            data[name] = pd.Series(column)
        return pd.DataFrame(data)

    def _raw_batches(self) -> Iterator[Dict[str, Any]]:
        """Column batches of the schema view over the remaining epochs (after the predicate)."""
        while self._num_epochs is None or self._epochs_done < self._num_epochs:
            for batch in self._loader:
                columns = self._columns(batch)
                if columns is not None:
                    yield columns
            self._epochs_done += 1

    def _column_batches(self) -> Iterator[Dict[str, Any]]:
        """Column batches of the output fields (shared by the rows, batches and loaders)."""
        if self._spec is None:
            yield from self._raw_batches()
        elif self._batched:
            for columns in self._raw_batches():
                yield self._transform_frame(columns)
        else:
            for columns in self._raw_batches():
                yield self._transform_rows(columns)

    def _transform_rows(self, columns: Dict[str, Any]) -> Dict[str, Any]:
        """make_reader: the spec's function once per row, with a dict of the row's decoded
        values; removed_fields deleted from what it returns (petastorm/py_dict_reader_worker)."""
        spec = self._spec
        out: Dict[str, List[Any]] = {n: [] for n in spec.names}
        for values in zip(*(list(columns[n]) for n in self._view)):
            row = dict(zip(self._view, values))
            if spec.func is not None:
                row = spec.func(row)
            if not isinstance(row, collections.abc.MutableMapping):
                raise TransformError(
                    f"make_reader: the TransformSpec's function returned "
                    f"{type(row).__name__}; make_reader calls it once per row with a dict and "
                    "it must return the row's dict (make_batch_reader passes a DataFrame)")
            for name in spec.removed:
                if name in row:
                    del row[name]
            spec.check_names(list(row), "make_reader")
            for name in spec.names:
                out[name].append(row[name])
        return out

    def _transform_frame(self, columns: Dict[str, Any]) -> Dict[str, Any]:
        """make_batch_reader: the spec's function on a DataFrame of the batch; removed_fields
        dropped; each column back as Petastorm converts it (petastorm/arrow_reader_worker)."""
        import pandas as pd

        spec = self._spec
        frame = self._frame(columns, self._view)
        result = spec.func(frame) if spec.func is not None else frame
        if not isinstance(result, pd.DataFrame):
            raise TransformError(
                f"make_batch_reader: the TransformSpec's function returned "
                f"{type(result).__name__}; make_batch_reader calls it with a pandas DataFrame "
                "and it must return one (make_reader passes one row as a dict)")
        for name in set(result.columns) & set(spec.removed):
            del result[name]
        spec.check_names(list(result.columns), "make_batch_reader")
        return {name: _from_frame_column(name, result[name], spec.fields[name])
                for name in spec.names}

    def _rows(self) -> Iterator[Any]:
        for columns in self._column_batches():
            values = [list(columns[n]) for n in self._fields]
            yield from map(self._row_type._make, zip(*values))

    def _batches(self) -> Iterator[Any]:
        for columns in self._column_batches():
            yield self._row_type(**{n: _as_batch_array(v) for n, v in columns.items()})

    def __iter__(self) -> "Reader":
        return self

    def __next__(self) -> Any:
        if self._stopped:
            raise StopIteration
        if self._it is None:
            self._it = self._batches() if self._batched else self._rows()
        try:
            return next(self._it)
        except StopIteration:
            self.last_row_consumed = True
            raise
        except LoaderClosedError:
            if self._stopped:  # stop() from another thread: the iteration ends
                raise StopIteration from None
            raise

    next = __next__

    def reset(self) -> None:
        """Starts the reader over: ``num_epochs`` more epochs (each shuffled anew)."""
        self._it = None
        self._epochs_done = 0
        self.last_row_consumed = False
        self._stopped = False

    def stop(self) -> None:
        """Stops reading (the loader's threads end promptly); iteration then ends."""
        self._stopped = True
        self._it = None
        self._loader.close()

    def join(self) -> None:
        """Petastorm joins its worker pool here; stoker's threads ended in ``stop()``."""

    @property
    def diagnostics(self) -> Dict[str, Any]:
        return {"stats": self._loader.stats() if hasattr(self._loader, "stats") else {}}

    @property
    def loader(self) -> Loader:
        """The :class:`stoker.Loader` underneath (for its stats and options)."""
        return self._loader

    def __enter__(self) -> "Reader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
        self.join()


def _take(columns: Dict[str, Any], index: np.ndarray) -> Dict[str, Any]:
    return {n: (v[index] if isinstance(v, np.ndarray) else [v[i] for i in index])
            for n, v in columns.items()}


def _from_frame_column(name: str, column: Any, field: Field) -> Any:
    """A column of what a make_batch_reader TransformSpec returned -> the batch's array, as
    Petastorm converts it (Arrow from pandas, then numpy): fields of two or more dimensions
    must hold arrays of exactly their shape and are stacked; lists of one length are stacked;
    strings become a ``<U`` array (object with None where null)."""
    import pyarrow as pa

    shape = tuple(field.shape or ())
    if len(shape) > 1:
        cells = list(column)
        for i, cell in enumerate(cells):
            if not isinstance(cell, np.ndarray):
                raise TransformError(f"make_batch_reader: TransformSpec field {name!r} must "
                                     f"hold numpy arrays (row {i} holds {type(cell).__name__})")
            if None in shape or cell.shape != shape:
                raise TransformError(f"make_batch_reader: TransformSpec field {name!r} must be "
                                     f"the shape {shape} (row {i} is {cell.shape})")
        if not cells:
            return np.empty((0,) + shape)
        return np.stack(cells)
    try:
        array = pa.Array.from_pandas(column)
    except (pa.ArrowException, TypeError, ValueError) as error:
        raise TransformError(f"make_batch_reader: TransformSpec field {name!r} cannot become "
                             f"a column: {error}") from error
    values = array.to_pandas()
    values = values.to_numpy() if hasattr(values, "to_numpy") else np.asarray(values)
    if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
        if array.null_count:
            out = np.empty(len(array), dtype=object)
            out[:] = array.to_pylist()
            return out
        return np.asarray(array.to_pylist(), dtype=np.str_).reshape(len(array))
    if pa.types.is_list(array.type) or pa.types.is_large_list(array.type) or \
            pa.types.is_fixed_size_list(array.type):
        cells = list(values)
        if cells and all(isinstance(c, np.ndarray) for c in cells) and \
                len({c.shape for c in cells}) == 1:
            return np.vstack(cells)
        out = np.empty(len(cells), dtype=object)  # rows of different lengths, or None
        for i, cell in enumerate(cells):
            out[i] = cell
        return out
    return values


def _as_batch_array(value: Any) -> Any:
    """A column of a batch as Petastorm's batch reader gives it (from pandas): numbers with nulls
    become float64 with NaN, strings a ``<U`` array (object with None where null; Petastorm
    gives the string 'nan' there), bytes and bools with nulls an object array, equal-shaped
    arrays one stacked array."""
    if isinstance(value, np.ndarray):
        return value
    values = list(value)
    present = [v for v in values if v is not None]
    if present and len(present) == len(values) and all(isinstance(v, str) for v in present):
        return np.array(values, dtype=np.str_)
    if present and all(isinstance(v, (np.number, int, float)) and
                       not isinstance(v, (bool, np.bool_)) for v in present):
        return np.array([np.nan if v is None else v for v in values], dtype=np.float64)
    if present and all(isinstance(v, (bool, np.bool_)) for v in present):
        out = np.empty(len(values), dtype=object)  # pandas' object column of bools and None
        out[:] = [None if v is None else bool(v) for v in values]
        return out
    if values and len(present) == len(values) and all(isinstance(v, np.ndarray) for v in values) \
            and len({v.shape for v in values}) == 1:
        return np.stack(values)
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        out[i] = v
    return out


_IGNORED_NO_EFFECT = {
    "reader_pool_type": ("thread",
                         "stoker decodes on its own C++ threads; results do not depend on it"),
    "pyarrow_serialize": (False, "deprecated in Petastorm; no effect"),
    "results_queue_size": (50, "prefetch is bounded by bytes (Loader prefetch_bytes)"),
    "zmq_copy_buffers": (True, "no process pool, no ZeroMQ"),
    "hdfs_driver": ("libhdfs3", "HDFS is not supported; other URLs need no driver"),
    "cache_row_size_estimate": (None, "stoker's cache is sized in bytes"),
    "cache_extra_settings": (None, "stoker's cache has no diskcache settings"),
    "shuffle_row_drop_partitions": (1, "the same rows are delivered; only their order differs"),
}


def _common(dataset_url: Any, batched: bool, kwargs: Dict[str, Any]) -> Reader:
    ignored = [name for name, (default, _why) in _IGNORED_NO_EFFECT.items()
               if name in kwargs and kwargs[name] != default]
    for name in ignored:
        _warn_once([name], _IGNORED_NO_EFFECT[name][1])
    if kwargs.get("rowgroup_selector") is not None:
        raise InvalidOptionError(
            "rowgroup_selector: stoker does not read Petastorm row-group indexes; select rows "
            "with predicate= instead")
    if kwargs.get("filters") is not None:
        raise InvalidOptionError(
            "filters: pyarrow filters are not supported; use predicate= (e.g. petastorm's "
            "in_lambda) to filter rows")
    cache_type = kwargs.get("cache_type")
    cache_dir = cache_bytes = None
    if cache_type == "local-disk":
        if not kwargs.get("cache_location"):
            raise InvalidOptionError("cache_type='local-disk' needs cache_location")
        cache_dir = kwargs["cache_location"]
        cache_bytes = kwargs.get("cache_size_limit")
    elif cache_type not in (None, "null"):
        raise InvalidOptionError(
            f"cache_type must be None, 'null' or 'local-disk', got {cache_type!r}")
    filesystem = kwargs.get("filesystem")
    if filesystem is not None:
        kind = type(filesystem).__name__
        if kind != "LocalFileSystem":
            raise InvalidOptionError(
                f"filesystem: a {kind} object cannot be passed to stoker; give the URL and its "
                "settings as storage_options= (Arrow's names: endpoint_override, region, "
                "access_key, ...)")
    workers = kwargs.get("workers_count")
    return Reader(
        _url_to_source(dataset_url), batched, kwargs.get("schema_fields"), kwargs.get("seed")
        if kwargs.get("seed") is not None else kwargs.get("shard_seed"),
        bool(kwargs.get("shuffle_rows")), bool(kwargs.get("shuffle_row_groups", True)),
        kwargs.get("predicate"), kwargs.get("num_epochs", 1), kwargs.get("cur_shard"),
        kwargs.get("shard_count"), cache_dir, cache_bytes, kwargs.get("storage_options"),
        workers if workers else None, kwargs.get("transform_spec"),
        1024 if batched else _ROWS_PER_BATCH)


def make_reader(dataset_url, schema_fields=None, reader_pool_type="thread", workers_count=10,
                pyarrow_serialize=False, results_queue_size=50, seed=None, shuffle_rows=False,
                shuffle_row_groups=True, shuffle_row_drop_partitions=1, predicate=None,
                rowgroup_selector=None, num_epochs=1, cur_shard=None, shard_count=None,
                shard_seed=None, cache_type="null", cache_location=None, cache_size_limit=None,
                cache_row_size_estimate=None, cache_extra_settings=None, hdfs_driver="libhdfs3",
                transform_spec=None, filters=None, storage_options=None, zmq_copy_buffers=True,
                filesystem=None, convert_early_to_numpy=False) -> Reader:
    """Petastorm's ``make_reader``: one namedtuple of numpy values per row (codec fields
    decoded). Same arguments; see the module docstring for what each becomes."""
    return _common(dataset_url, False, dict(locals()))


def make_batch_reader(dataset_url_or_urls, schema_fields=None, reader_pool_type="thread",
                      workers_count=10, results_queue_size=50, seed=None, shuffle_rows=False,
                      shuffle_row_groups=True, shuffle_row_drop_partitions=1, predicate=None,
                      rowgroup_selector=None, num_epochs=1, cur_shard=None, shard_count=None,
                      shard_seed=None, cache_type="null", cache_location=None,
                      cache_size_limit=None, cache_row_size_estimate=None,
                      cache_extra_settings=None, hdfs_driver="libhdfs3", transform_spec=None,
                      filters=None, storage_options=None, zmq_copy_buffers=True, filesystem=None,
                      convert_early_to_numpy=False) -> Reader:
    """Petastorm's ``make_batch_reader``: one namedtuple of column arrays per batch (up to 1,024
    rows; Petastorm's batch is one row group). Same arguments."""
    return _common(dataset_url_or_urls, True, dict(locals()))
