"""A one-line progress display on stderr, needing no optional package.

The line is redrawn in place (carriage return) at most every ``interval`` seconds and erased at
the end, so the command's report on stdout stays clean. It is drawn only when the stream is a
terminal and the user did not pass ``--quiet``: piped or logged stderr gets nothing.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Optional, TextIO

__all__ = ["Progress"]


def _is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or closed
        return False


class Progress:
    """``update(text)`` redraws the line (throttled); ``close()`` erases it. As a context
    manager around a blocking call, ``Progress(..., tick=True)`` redraws ``label ... N.N s``
    from a thread until the call returns (for work that reports no counts)."""

    def __init__(self, label: str, enabled: bool = True, stream: Optional[TextIO] = None,
                 interval: float = 0.1, tick: bool = False) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = bool(enabled) and _is_tty(self.stream)
        self.label = label
        self.interval = interval
        self.start = time.perf_counter()
        self._last = 0.0
        self._width = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        if self.enabled and tick:
            self._thread = threading.Thread(target=self._tick, name="stoker-progress",
                                            daemon=True)
            self._thread.start()

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def _tick(self) -> None:
        while not self._stop.wait(self.interval):
            self.update(f"{self.elapsed():.1f} s", force=True)

    def update(self, text: str, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if not force and now - self._last < self.interval:
            return
        self._last = now
        line = f"{self.label}: {text}"
        with self._lock:
            pad = " " * max(0, self._width - len(line))
            self._width = len(line)
            self.stream.write("\r" + line + pad)
            self.stream.flush()

    def close(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        if not self.enabled:
            return
        with self._lock:
            if self._width:
                self.stream.write("\r" + " " * self._width + "\r")
                self.stream.flush()
                self._width = 0

    def __enter__(self) -> "Progress":
        if self.enabled:
            self.update("...", force=True)
        return self

    def __exit__(self, *exc) -> None:
        self.close()
