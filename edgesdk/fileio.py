"""Writing files safely: readers (and a user's earlier file) see the old content or the new,
never half of it, and an interrupted write leaves nothing behind.

Every writer goes through :func:`atomic_path`: a temp file ``.NAME.PID.RANDOM.tmp`` beside the
target, renamed over it when complete. What an interruption can leave:

- an exception (KeyboardInterrupt included) removes the temp file in the ``except`` below;
- SIGTERM and SIGHUP end the process without unwinding: a handler chained in front of the default
  action removes the open temp files, then lets the signal kill the process (same exit status as
  without edgesdk). A Python-level handler that was there before (SIGINT's KeyboardInterrupt, an
  application's own) is called instead: it unwinds, and the ``except`` below cleans up;
- temp files of writes still running when the interpreter exits (daemon threads, which Python
  stops without unwinding) are removed by an atexit hook;
- SIGKILL or a power cut cannot be caught: the next write to the same folder sweeps temp files
  of the same target whose process is gone (the PID in the name), or that are older than a day.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import signal
import threading
import time
from pathlib import Path
from typing import Any, Iterator

_STALE_AFTER_S = 24 * 3600  # a temp file whose owner we cannot check (another host) counts as stale after this
_HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

_live: set[Path] = set()  # temp files of this process not yet renamed or removed
_live_lock = threading.Lock()
_previous_handlers: dict[int, Any] = {}


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, *, fsync: bool = True) -> Iterator[Path]:
    """Yield a fresh temp path beside ``path``; when the block succeeds, rename it over ``path``.

    The temp file is created empty with ``O_EXCL`` and the normal umask mode (not mkstemp's
    0600), so the result has the permissions any new file would have. ``fsync`` makes the data
    durable before the rename publishes it. On any error, and on SIGTERM/SIGINT/SIGHUP, the temp
    file is removed; leftovers of killed writers to the same target are swept first."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    sweep_stale_temps(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    _track(tmp)
    try:
        open(tmp, "xb").close()
        yield tmp
        if fsync:
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        _untrack(tmp)


def atomic_write_bytes(path: str | os.PathLike, data: bytes, *, fsync: bool = True) -> None:
    with atomic_path(path, fsync=fsync) as tmp:
        tmp.write_bytes(data)


def atomic_write_text(path: str | os.PathLike, text: str, *, fsync: bool = True) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), fsync=fsync)


def sweep_stale_temps(path: str | os.PathLike) -> list[Path]:
    """Remove the temp files left beside ``path`` by writers that were killed; returns them.

    A temp file is stale when the process named in it no longer exists, or when it is older than
    a day (its PID may belong to another machine sharing the folder, or have been reused)."""
    path = Path(path)
    removed = []
    try:
        candidates = list(path.parent.glob(f".{_glob_escape(path.name)}.*.tmp"))
    except OSError:
        return removed
    for tmp in candidates:
        if tmp in _live or not _is_stale(tmp, path.name):
            continue
        try:
            tmp.unlink()
            removed.append(tmp)
        except OSError:  # gone meanwhile, or not ours to remove: leave it
            pass
    return removed


def _is_stale(tmp: Path, name: str) -> bool:
    middle = tmp.name[len(name) + 2:-len(".tmp")]  # "PID.RANDOM", or "RANDOM" from older versions
    try:
        age = time.time() - tmp.stat().st_mtime
    except OSError:
        return False
    pid_text, _, token = middle.partition(".")
    if token and pid_text.isdigit():
        return not _process_exists(int(pid_text)) or age > _STALE_AFTER_S
    return age > 3600  # the older ".NAME.RANDOM.tmp" form carries no PID: an hour is plenty for a write


def _process_exists(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def _glob_escape(name: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


# -- signals ---------------------------------------------------------------------------------------

def _track(tmp: Path) -> None:
    with _live_lock:
        _live.add(tmp)
    _install_handlers()


def _untrack(tmp: Path) -> None:
    with _live_lock:
        _live.discard(tmp)


def _install_handlers() -> None:
    """Chain a cleanup handler in front of the current ones, once per process.

    signal.signal only works in the main thread; a write that starts first in another thread
    gets the handlers installed by the next main-thread write (the sweep covers the gap)."""
    if _previous_handlers or threading.current_thread() is not threading.main_thread():
        return
    for sig in _HANDLED_SIGNALS:
        try:
            previous = signal.getsignal(sig)
            if previous is signal.SIG_IGN:  # nohup and friends: the process will not die of it
                continue
            signal.signal(sig, _on_signal)
            _previous_handlers[sig] = previous
        except (ValueError, OSError):  # not the main thread of the main interpreter
            return


def _remove_live_temps() -> None:
    with _live_lock:
        live = list(_live)
    for tmp in live:
        try:
            tmp.unlink()
        except OSError:
            pass


def _on_signal(signum: int, frame: Any) -> None:
    previous = _previous_handlers.get(signum, signal.SIG_DFL)
    if callable(previous):
        # Python code keeps running (KeyboardInterrupt for SIGINT, or the application's handler):
        # writes unwind through atomic_path's except, and atexit covers what never unwinds.
        previous(signum, frame)
        return
    # SIG_DFL (or None: set from C): die of the signal as the process would have without us.
    _remove_live_temps()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _forget_parent_temps() -> None:
    _live.clear()  # a forked child must not remove its parent's files when it is killed


atexit.register(_remove_live_temps)  # runs after non-daemon threads are joined: what is left never completes
os.register_at_fork(after_in_child=_forget_parent_temps)
