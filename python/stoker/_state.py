"""The shape of a resume state (``Loader.state_dict()``), checked before any of it is used.

A state is a dict of plain integers (and ``options``, a dict of integers). Every key is checked
for its type and range before ``load_state_dict`` acts on it; anything else is a
:class:`~stoker.errors.StateMismatchError` naming the key. Nothing is coerced: ``True`` is not
``1``, ``1.0`` and ``"1"`` are not integers (numpy integer scalars are, with their exact value).
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Tuple

import numpy as np

from .errors import StateMismatchError

__all__ = ["STATE_VERSION", "check_state"]

STATE_VERSION = 1
_INT64_MAX = 2**63 - 1
_INT32_MAX = 2**31 - 1
_UINT64_MAX = 2**64 - 1

# key: (required, smallest, largest). The engine takes epochs and batches as int64, world sizes
# as int, seeds and fingerprints as uint64.
_KEYS: Dict[str, Tuple[bool, int, int]] = {
    "version": (True, STATE_VERSION, STATE_VERSION),
    "epoch": (True, 0, _INT64_MAX),
    "batch": (True, 0, _INT64_MAX),
    "seed": (True, 0, _UINT64_MAX),
    "fingerprint": (True, 0, _UINT64_MAX),
    "data_fingerprint": (False, 0, _UINT64_MAX),
    "rank": (False, 0, _INT32_MAX - 1),
    "world_size": (False, 1, _INT32_MAX),
    "elastic_world_size": (False, 0, _INT32_MAX),
    "elastic_batch": (False, 0, _INT64_MAX),
}


def _is_integer(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _bad(key: str, value: Any, wanted: str) -> StateMismatchError:
    return StateMismatchError(
        f"state_dict[{key!r}] is {value!r} ({type(value).__name__}); it must be {wanted} "
        "(a state is what Loader.state_dict() returned, unchanged)")


def check_state(state: Any) -> Dict[str, Any]:
    """The state with every value a plain ``int`` (``options`` a dict of ints); raises
    StateMismatchError naming the first key that is missing, unknown, of the wrong type or out
    of range."""
    if not isinstance(state, Mapping):
        raise StateMismatchError(
            f"a state is the dict Loader.state_dict() returned, got {type(state).__name__}")
    missing = sorted(k for k, (required, _, _) in _KEYS.items() if required and k not in state)
    if missing:
        raise StateMismatchError(f"state_dict is missing {missing}")
    unknown = sorted(str(k) for k in state if k not in _KEYS and k != "options")
    if unknown:
        raise StateMismatchError(
            f"state_dict has unknown keys {unknown} (a state is what Loader.state_dict() "
            f"returned: {sorted(_KEYS) + ['options']})")
    out: Dict[str, Any] = {}
    for key, (_, low, high) in _KEYS.items():
        if key not in state:
            continue
        value = state[key]
        if key == "version" and _is_integer(value) and value != STATE_VERSION:
            raise StateMismatchError(
                f"state_dict version {value} is not supported (expected {STATE_VERSION})")
        if not _is_integer(value) or not low <= value <= high:
            span = f"{low}" if low == high else f"an integer in [{low}, {high}]"
            raise _bad(key, value, span)
        out[key] = int(value)
    if ("rank" in out) != ("world_size" in out):
        have, lacks = ("rank", "world_size") if "rank" in out else ("world_size", "rank")
        raise StateMismatchError(f"state_dict has {have!r} but not {lacks!r}")
    if "rank" in out and out["rank"] >= out["world_size"]:
        raise StateMismatchError(
            f"state_dict['rank'] is {out['rank']}, outside world_size={out['world_size']}")
    if out.get("elastic_batch", 0) and not out.get("elastic_world_size", 0):
        raise StateMismatchError(
            f"state_dict['elastic_batch'] is {out['elastic_batch']} with "
            "elastic_world_size=0 (no elastic resume)")
    options: Optional[Any] = state.get("options")
    if "options" in state:
        if not isinstance(options, Mapping):
            raise _bad("options", options, "a dict of integers")
        checked = {}
        for name, value in options.items():
            if not isinstance(name, str) or not _is_integer(value):
                raise StateMismatchError(
                    f"state_dict['options'][{name!r}] is {value!r} ({type(value).__name__}); "
                    "it must be an integer")
            checked[name] = int(value)
        out["options"] = checked
    return out
