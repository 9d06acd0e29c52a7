"""Progress bars for long steps (packing, evaluation, fine-tuning epochs, profiling, uploads).

The bars are tqdm's: count, rate and ETA, at most 80 columns wide, on stderr, and only when that
stream is a terminal. Nothing is drawn on a pipe or into a log (so ``--json`` output and CI logs
stay clean), nor after :func:`set_enabled(False) <set_enabled>` (``edgesdk -q`` and ``--json``).

A :class:`Progress` is a plain callback ``progress(done, total, detail)``: library functions take
one without knowing about tqdm, and a caller that wants no bar passes None.
"""
from __future__ import annotations

import os
import sys
from typing import Callable, TextIO

MAX_COLUMNS = 80  # bars never wrap on a standard terminal, however wide the window

ProgressFn = Callable[[int, int, str], None]  # (done, total, detail)
ProgressFactory = Callable[[str], ProgressFn]  # label -> a callback for one long step

_enabled = True


def set_enabled(enabled: bool) -> None:
    """Allow (default) or forbid progress bars in this process; the CLI forbids them under -q and --json."""
    global _enabled
    _enabled = enabled


def bars_allowed() -> bool:
    """What :func:`set_enabled` last said (True unless forbidden)."""
    return _enabled


def bars_enabled(stream: TextIO | None = None) -> bool:
    """True when a bar on ``stream`` (default stderr) would be drawn: allowed, and a terminal."""
    stream = stream if stream is not None else sys.stderr
    try:
        return _enabled and stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def _columns(stream: TextIO) -> int:
    """The bar width: the terminal's, capped at MAX_COLUMNS."""
    try:
        return max(20, min(MAX_COLUMNS, os.get_terminal_size(stream.fileno()).columns))
    except (AttributeError, ValueError, OSError):
        return MAX_COLUMNS


class Progress:
    """``progress(done, total, detail)`` draws one bar labelled ``label``; ``detail`` shows after
    the rate (a layer name, a stage, the running loss). A call whose ``total`` differs from the
    current bar's, or whose ``done`` went back, starts a new bar (the next stage of a step).
    A bar closes when ``done`` reaches ``total``; ``leave=False`` then erases it (for bars followed
    by a summary line, like fine-tuning epochs)."""

    def __init__(self, label: str, stream: TextIO | None = None, *, leave: bool = True) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = bars_enabled(self.stream)
        self.leave = leave
        self._bar = None  # the tqdm bar in progress, if any
        self._detail = ""

    def __call__(self, done: int, total: int, detail: str = "") -> None:
        if not self.enabled:
            return
        bar = self._bar
        if bar is None or bar.total != total or done < bar.n:
            self.close()
            bar = self._bar = self._new_bar(total)
        if detail != self._detail:
            self._detail = detail
            bar.set_postfix_str(detail, refresh=False)
        bar.update(done - bar.n)
        if done >= total:
            self.close()

    def _new_bar(self, total: int):
        from tqdm import tqdm  # imported with the first bar drawn: `import edgesdk` stays light
        # mininterval and the like stay tqdm's defaults so that TQDM_* environment variables apply.
        # Rates read better scaled (11.7kit/s), and so do large counts (4.19M bytes), but small
        # counts stay exact (3/4 layers, not 3.00/4.00).
        counts = "{n_fmt}/{total_fmt}" if total >= 10_000 else "{n}/{total}"
        return tqdm(total=total, desc=self.label, file=self.stream, ncols=_columns(self.stream),
                    leave=self.leave, unit_scale=True, dynamic_ncols=False,
                    bar_format="{l_bar}{bar}| " + counts + " [{elapsed}<{remaining}, {rate_fmt}{postfix}]")

    def close(self) -> None:
        """Finish the current bar (left on screen or erased as ``leave`` says)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
            self._detail = ""


def transient(label: str) -> Progress:
    """A :class:`Progress` erased when done: a :data:`ProgressFactory` for steps whose result is
    printed anyway (fine-tuning epochs, evaluations)."""
    return Progress(label, leave=False)
