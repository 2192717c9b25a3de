"""Petastorm's row predicates, for ``make_reader(predicate=...)`` and ``make_batch_reader``.

    from stoker.petastorm.predicates import in_set   # was: from petastorm.predicates import ...

``petastorm.predicates`` does not import next to a current pyarrow (Petastorm 0.13.1 imports
``pyarrow.filesystem``, which pyarrow removed); these are the same classes with the same
arguments and results, without Petastorm.

``make_reader`` calls ``do_include`` once per row with a dict of the predicate's fields
(``get_fields()``), decoded as the row's values, and keeps the row when it returns true: the
same values Petastorm passes, so the same rows are kept, ``in_pseudorandom_split`` included (it
hashes ``str(value)`` with MD5 exactly as Petastorm does).

``make_batch_reader`` calls ``do_include`` with a pandas ``DataFrame`` of the predicate's fields
for the rows of a batch and needs one bool per row back, as Petastorm's batch reader does (there
``in_lambda``'s function gets one ``Series`` per field). Petastorm's own ``in_set``,
``in_intersection``, ``in_negate``, ``in_reduce`` and ``in_pseudorandom_split`` fail on a
DataFrame; these evaluate it row by row, with the ``make_reader`` result for each row.
"""

from __future__ import annotations

import abc
import collections.abc
import hashlib
import sys
from typing import Any, Callable, Iterable, List, Sequence, Set

import numpy as np

__all__ = ["PredicateBase", "in_set", "in_intersection", "in_lambda", "in_negate", "in_reduce",
           "in_pseudorandom_split"]


class PredicateBase(abc.ABC):
    """Base class of row predicates: ``get_fields()`` names the fields ``do_include(values)``
    reads."""

    @abc.abstractmethod
    def get_fields(self) -> Set[str]:
        ...

    @abc.abstractmethod
    def do_include(self, values: Any) -> Any:
        ...


def _is_frame(values: Any) -> bool:
    return hasattr(values, "columns") and hasattr(values, "iloc")


def _per_row(frame: Any, field: str, test: Callable[[Any], bool]) -> Any:
    """``test`` on each row's value of ``field`` (numpy scalars, as ``make_reader`` passes them)
    -> a bool Series on the frame's index."""
    import pandas as pd

    column = frame[field]
    return pd.Series([bool(test(value)) for value in column.to_numpy()], index=column.index,
                     dtype=bool)


def _mask(frame: Any, result: Any) -> np.ndarray:
    mask = np.asarray(result)
    if mask.shape != (len(frame),):
        raise ValueError(f"a predicate returned {mask.shape} values for a batch of {len(frame)} "
                         "rows; it must return one bool per row")
    return mask.astype(bool)


def _string_to_bucket(string: str, bucket_num: int) -> int:
    """Petastorm's bucket of a string: its MD5 as an integer, modulo ``bucket_num``."""
    hash_str = hashlib.md5(string.encode("utf-8")).hexdigest()
    return int(hash_str, 16) % bucket_num


class in_set(PredicateBase):  # noqa: N801 - Petastorm's names
    """True where ``predicate_field``'s value is in ``inclusion_values``."""

    def __init__(self, inclusion_values: Iterable[Any], predicate_field: str) -> None:
        self._inclusion_values = set(inclusion_values)
        self._predicate_field = predicate_field

    def get_fields(self) -> Set[str]:
        return {self._predicate_field}

    def do_include(self, values: Any) -> Any:
        if _is_frame(values):
            return _per_row(values, self._predicate_field, self._inclusion_values.__contains__)
        return values[self._predicate_field] in self._inclusion_values


class in_intersection(PredicateBase):  # noqa: N801
    """True where ``predicate_field``'s value (a list or array) holds at least one of
    ``inclusion_values``."""

    def __init__(self, inclusion_values: Iterable[Any], _predicate_field: str) -> None:
        self._inclusion_values = list(inclusion_values)
        self._predicate_field = _predicate_field

    def get_fields(self) -> Set[str]:
        return {self._predicate_field}

    def _test(self, value: Any) -> bool:
        if not isinstance(value, collections.abc.Iterable):
            raise ValueError("Predicate field should have iterable type")
        return bool(np.isin(value, self._inclusion_values).any())

    def do_include(self, values: Any) -> Any:
        if _is_frame(values):
            return _per_row(values, self._predicate_field, self._test)
        return self._test(values[self._predicate_field])


class in_lambda(PredicateBase):  # noqa: N801
    """``predicate_func(*values of predicate_fields[, state_arg])``: with ``make_reader`` each
    value is one row's; with ``make_batch_reader`` a ``Series`` of the batch's rows (return one
    bool per row), as in Petastorm."""

    def __init__(self, predicate_fields: List[str], predicate_func: Callable[..., Any],
                 state_arg: Any = None) -> None:
        if not isinstance(predicate_fields, list):
            raise ValueError("Predicate fields should be a list")
        self._predicate_fields = predicate_fields
        self._predicate_func = predicate_func
        self._state_arg = state_arg

    def get_fields(self) -> Set[str]:
        return set(self._predicate_fields)

    def do_include(self, values: Any) -> Any:
        args = [values[field] for field in self._predicate_fields]
        if self._state_arg is not None:
            args.append(self._state_arg)
        return self._predicate_func(*args)


class in_negate(PredicateBase):  # noqa: N801
    """The negation of ``predicate``."""

    def __init__(self, predicate: PredicateBase) -> None:
        if not isinstance(predicate, PredicateBase):
            raise ValueError("Predicate is nor derived from PredicateBase")
        self._predicate = predicate

    def get_fields(self) -> Set[str]:
        return self._predicate.get_fields()

    def do_include(self, values: Any) -> Any:
        if _is_frame(values):
            import pandas as pd

            return pd.Series(~_mask(values, self._predicate.do_include(values)),
                             index=values.index, dtype=bool)
        return not self._predicate.do_include(values)


class in_reduce(PredicateBase):  # noqa: N801
    """``reduce_func`` of the predicates' results (``all``: and, ``any``: or)."""

    def __init__(self, predicate_list: Sequence[PredicateBase],
                 reduce_func: Callable[[List[Any]], Any]) -> None:
        if not all(isinstance(p, PredicateBase) for p in predicate_list):
            raise ValueError("Predicate is nor derived from PredicateBase")
        self._predicate_list = predicate_list
        self._reduce_func = reduce_func

    def get_fields(self) -> Set[str]:
        fields: Set[str] = set()
        for predicate in self._predicate_list:
            fields |= predicate.get_fields()
        return fields

    def do_include(self, values: Any) -> Any:
        if _is_frame(values):
            import pandas as pd

            masks = [_mask(values, p.do_include(values)) for p in self._predicate_list]
            return pd.Series([bool(self._reduce_func([bool(m[i]) for m in masks]))
                              for i in range(len(values))], index=values.index, dtype=bool)
        return self._reduce_func([p.do_include(values) for p in self._predicate_list])


class in_pseudorandom_split(PredicateBase):  # noqa: N801
    """The rows of subset ``subset_index`` when the dataset is split in the proportions of
    ``fraction_list`` by a hash of ``predicate_field`` (MD5 of ``str(value)``, as Petastorm:
    the same rows land in the same subset)."""

    def __init__(self, fraction_list: Sequence[float], subset_index: int,
                 predicate_field: str) -> None:
        if subset_index >= len(fraction_list):
            raise ValueError("subset_index is out of range")
        self._predicate_field = predicate_field
        # Petastorm's CDF, float arithmetic included, so the borders are the same numbers.
        borders = [sum(fraction_list[:i + 1]) for i in range(len(fraction_list))]
        fraction_low = borders[subset_index - 1] if subset_index else 0
        fraction_high = borders[subset_index]
        self._bucket_low = fraction_low * (sys.maxsize - 1)
        self._bucket_high = fraction_high * (sys.maxsize - 1)

    def get_fields(self) -> Set[str]:
        return {self._predicate_field}

    def _test(self, value: Any) -> bool:
        bucket = _string_to_bucket(str(value), sys.maxsize)
        return self._bucket_low <= bucket < self._bucket_high

    def do_include(self, values: Any) -> Any:
        if _is_frame(values):
            return _per_row(values, self._predicate_field, self._test)
        if self._predicate_field not in values.keys():
            raise ValueError("Tested values does not have split key: %s" % self._predicate_field)
        return self._test(values[self._predicate_field])
