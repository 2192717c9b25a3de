"""How stoker shows a source in any text it writes: through the engine's own redaction.

``redact_uri`` is ``RedactUri`` (``cpp/include/stoker/redact.h``, the function every engine
message uses): user info (``KEY:SECRET@``) and the query string (``?secret_key=...``) are
removed. ``redact_text`` applies it to every URI inside a longer text (an error, a log line, a
report field) and then replaces known secret strings with ``***``. There is no second,
Python-side implementation of the rules.
"""

from __future__ import annotations

import os
import re
from typing import Any, Iterable

from . import _stoker

__all__ = ["redact_uri", "redact_text", "redact_value"]

# A URI inside free text: scheme://, then anything up to white space, a quote, or a table bar.
_URI_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>|`]+")


def redact_uri(uri: "str | os.PathLike[str]") -> str:
    """``uri`` as stoker shows it anywhere: without user info or query string. Local paths are
    returned unchanged."""
    return _stoker.redact_uri(os.fspath(uri))


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every URI in it redacted and each non-empty string of ``secrets`` replaced
    by ``***``."""
    text = _URI_IN_TEXT.sub(lambda match: _stoker.redact_uri(match.group(0)), text)
    secrets = [s for s in secrets if s]
    return _stoker.redact_secrets(text, secrets) if secrets else text


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
