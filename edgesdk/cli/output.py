"""What every ``edgesdk`` command shares on the way out: -q/-v logging set-up, notes and progress
bars, JSON emission, one-line errors, tables, sizes and counts, atomic writes.

Imports nothing heavy (numpy only); the command modules import from here, never from each other.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..fileio import atomic_path

EXIT_USAGE = 2  # the exit status of every edgesdk error (bad input, a failed board, a usage error)


# -- output levels ---------------------------------------------------------------------------
class LevelFormatter(logging.Formatter):
    """``edgesdk: warning: ...`` for warnings (what a user may want to act on), ``edgesdk: ...``
    for info and debug lines (what -v shows)."""

    def format(self, record: logging.LogRecord) -> str:
        prefix = {logging.WARNING: "warning: ", logging.ERROR: "error: ", logging.CRITICAL: "error: "}
        return f"edgesdk: {prefix.get(record.levelno, '')}{record.getMessage()}"


def log_level(args: argparse.Namespace) -> int:
    if args.quiet:
        return logging.ERROR
    return {0: logging.WARNING, 1: logging.INFO}.get(args.verbose, logging.DEBUG)


def configure_output(args: argparse.Namespace) -> Callable[[], None]:
    """Log the ``edgesdk`` loggers to stderr at the level -q/-v ask for, and turn progress bars off
    under -q and --json. Returns the undo: main() called in-process (tests, scripts) leaves the
    process's logging and bars as it found them."""
    from .. import progress
    logger = logging.getLogger("edgesdk")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(LevelFormatter())
    level, bars_were = logger.level, progress.bars_allowed()
    logger.addHandler(handler)
    logger.setLevel(log_level(args))
    progress.set_enabled(bars_were and not (args.quiet or getattr(args, "json", False)))

    def restore() -> None:
        logger.removeHandler(handler)
        logger.setLevel(level)
        progress.set_enabled(bars_were)
    return restore


def notes(args: argparse.Namespace) -> Callable[[str], None] | None:
    """Where running commentary (fine-tuning epochs, quickstart steps) goes: stdout, stderr under
    --json (stdout holds the JSON), nowhere under -q."""
    if args.quiet:
        return None
    if getattr(args, "json", False):
        return lambda line: print(line, file=sys.stderr)
    return print


def bars() -> Callable[[str], Callable[[int, int, str], None]] | None:
    """A progress factory for a library call (bars erased when done), or None when none may show."""
    from ..progress import bars_enabled, transient
    return transient if bars_enabled() else None


def print_error(message: str) -> None:
    """The one line an error prints on stderr: ``edgesdk: error: MESSAGE``."""
    print(f"edgesdk: error: {message}", file=sys.stderr)


# -- JSON ------------------------------------------------------------------------------------
def emit_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, default=json_default))


def json_default(value: Any) -> Any:
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)


# -- text ------------------------------------------------------------------------------------
def format_count(n: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.2f}{unit}"
    return str(int(n))


def format_bytes(n: int) -> str:
    return f"{n / 1024:.1f} KiB" if n >= 1024 else f"{n} B"


def table(rows: list[list[str]], header: list[str], right: set[int] = frozenset()) -> str:
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    def line(r):
        return "  ".join(str(c).rjust(w) if i in right else str(c).ljust(w)
                         for i, (c, w) in enumerate(zip(r, widths))).rstrip()
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def describe_array(value: np.ndarray) -> dict:
    """Shape, dtype, min/max/mean of a model output, and its top 5 when it looks like class scores."""
    info = {"shape": list(value.shape), "dtype": str(value.dtype),
            "min": float(value.min()) if value.size else 0.0,
            "max": float(value.max()) if value.size else 0.0,
            "mean": float(value.mean()) if value.size else 0.0}
    if value.ndim == 2 and value.shape[0] == 1 and value.shape[1] > 1:
        order = np.argsort(-value[0])[:5]
        info["top5"] = [[int(i), float(value[0, i])] for i in order]
    return info


# -- files -----------------------------------------------------------------------------------
def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Write through a temp file in the same folder, then rename: no half-written outputs."""
    with atomic_path(path) as tmp:
        write(tmp)
