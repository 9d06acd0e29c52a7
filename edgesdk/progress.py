"""Progress for long steps (packing big models, fine-tuning): a one-line bar on a terminal,
nothing on a pipe or in a log (so --json output and CI logs stay clean)."""
from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, label: str, stream: TextIO | None = None, min_interval: float = 0.1) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.min_interval = min_interval
        self._last = 0.0

    def __call__(self, done: int, total: int, detail: str = "") -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if done < total and now - self._last < self.min_interval:
            return
        self._last = now
        width = 24
        filled = int(width * done / max(total, 1))
        line = f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} {detail}"
        self.stream.write(line[:120].ljust(120) if done < total else line[:120].ljust(120) + "\n")
        self.stream.flush()
