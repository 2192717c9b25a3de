"""Dtype arguments as users give them: a name, a numpy dtype or scalar type, or a torch dtype.

The engine takes dtype names (``"float32"``); the conversion from Python objects lives here
because only Python knows them. Validity is the engine's: it refuses unknown names with the list
of known ones (``_stoker.dtype_names()``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _stoker
from .errors import InvalidOptionError

__all__ = ["dtype_name"]


def dtype_name(value: Any, where: str) -> str:
    """``value`` as the engine's dtype name; ``where`` names the option in the error."""
    if isinstance(value, str):
        return value
    module = type(value).__module__ or ""
    if module.startswith("torch"):  # torch.float32 -> "float32" (torch.bfloat16 included)
        return str(value).rsplit(".", 1)[-1]
    if isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, np.generic)):
        return np.dtype(value).name
    raise InvalidOptionError(
        f"{where} must be a dtype name, a numpy dtype or a torch dtype, got {value!r}; known "
        f"dtypes: {', '.join(_stoker.dtype_names())}")
