"""How stoker shows a source in any text it writes: through the engine's own redaction.

``redact_uri`` is ``RedactUri`` and ``redact_text`` is ``RedactSecrets``
(``cpp/include/stoker/redact.h``, the functions every engine message uses): user info
(``KEY:SECRET@``) and query strings (``?secret_key=...``) of URIs are removed, the values of
credential parameters (``secret_key=``, ``X-Amz-Signature=``, ``'session_token': '...'``) become
``***``, and so does each known secret where it stands as a whole token (never inside another word:
a secret ``"b"`` leaves ``bucket`` alone). There is no second, Python-side implementation of the
rules.
"""

from __future__ import annotations

import os
from typing import Any, Iterable

from . import _stoker

__all__ = ["redact_uri", "redact_text", "redact_value"]


def redact_uri(uri: "str | os.PathLike[str]") -> str:
    """``uri`` as stoker shows it anywhere: without user info or query string. Local paths are
    returned unchanged."""
    return _stoker.redact_uri(os.fspath(uri))


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every URI in it redacted, credential parameters' values and each non-empty
    string of ``secrets`` (where it stands as a whole token) replaced by ``***``."""
    return _stoker.redact_secrets(text, [s for s in secrets if s])


def redact_value(value: Any, secrets: Iterable[str] = ()) -> Any:
    """``redact_text`` over every string inside nested dicts, lists and tuples (a report)."""
    secrets = list(secrets)
    if isinstance(value, dict):
        return {redact_value(k, secrets): redact_value(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact_value(v, secrets) for v in value)
    if isinstance(value, str):
        return redact_text(value, secrets)
    return value
