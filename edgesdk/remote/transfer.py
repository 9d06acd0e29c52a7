"""Copying files to and from a board over SFTP.

An upload never leaves a partial file under the destination name: it skips files whose sha256
on the board already matches, checks the free space first, writes ``.<name>.part`` next to the
destination, verifies its sha256 on the board, then renames it into place. A failed upload removes
its part file; when the connection itself died, the next upload into that folder does (at most one
push per board work directory at a time). Small Python one-liners run on the board with its own
interpreter for everything SFTP cannot tell (hashes, free space, errno of a failed write).
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import posixpath
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import paramiko

from ..errors import ProvisionError, RemoteError, TransferError
from ..fileio import atomic_path
from .connection import CommandResult, Connection

PART_SUFFIX = ".part"
HELPER_TIMEOUT_S = 120.0  # hashing a big package on a slow SD card takes a while
ProgressFn = Callable[[int, int, str], None]

# Runs on the board (any Python >= 3.6): `prepare DEST`, `sha256 FILE`, `free DIR`; one JSON line out.
_BOARD_HELPER = r"""
import hashlib, json, os, sys, tempfile
def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
def failure(path, e):
    return {"ok": False, "path": path, "errno": e.errno, "error": e.strerror or str(e)}
def prepare(dest):
    folder = os.path.dirname(dest)
    try:
        os.makedirs(folder, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".edgesdk-probe-", dir=folder)
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        return failure(folder, e)
    removed = []
    for name in os.listdir(folder):
        if name.startswith(".") and name.endswith(".part"):
            try:
                os.remove(os.path.join(folder, name))
                removed.append(name)
            except OSError:
                pass
    st = os.statvfs(folder)
    return {"ok": True, "sha256": sha256(dest) if os.path.isfile(dest) else None,
            "free": st.f_bavail * st.f_frsize, "removed": removed}
command, path = sys.argv[1], sys.argv[2]
if command == "prepare":
    print(json.dumps(prepare(path)))
elif command == "free":
    st = os.statvfs(path)
    print(json.dumps({"ok": True, "free": st.f_bavail * st.f_frsize}))
else:
    try:
        print(json.dumps({"ok": True, "sha256": sha256(path)}))
    except OSError as e:
        print(json.dumps(failure(path, e)))
"""


@dataclass(frozen=True)
class UploadResult:
    path: str  # on the board
    sha256: str
    size: int
    skipped: bool  # already there with the same content


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def format_size(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def run_python(conn: Connection, python: str, script: str, args: list[str], *, what: str,
               timeout: float = HELPER_TIMEOUT_S, check: bool = True) -> CommandResult:
    """``python -c script args...`` on the board; a missing interpreter is a ProvisionError that
    says how to get one."""
    command = shlex.join([python, "-c", script, *args])
    result = conn.run(command, timeout=timeout, what=what, check=False)
    if result.exit_status in (126, 127):
        raise ProvisionError(
            f"no usable python at {python!r} on the board ({result.last_error_line()}): install Python 3 "
            "(Raspberry Pi OS: sudo apt install python3 python3-venv; Termux: pkg install python) or set "
            "`python:` in the target")
    if check and result.exit_status != 0:
        raise RemoteError(f"{what} failed on the board ({result.status_text}): {result.last_error_line()}")
    return result


def _helper(conn: Connection, python: str, command: str, path: str, what: str) -> dict:
    result = run_python(conn, python, _BOARD_HELPER, [command, path], what=what)
    try:
        return json.loads(result.stdout.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise TransferError(f"{what}: unexpected answer from the board: {result.last_error_line()}") from None


def remote_sha256(conn: Connection, python: str, path: str) -> str:
    answer = _helper(conn, python, "sha256", path, f"hashing {path}")
    if not answer["ok"]:
        raise TransferError(f"cannot read {path} on the board: {answer['error']}")
    return answer["sha256"]


def upload(conn: Connection, local: Path, dest: str, *, python: str,
           progress: ProgressFn | None = None) -> UploadResult:
    """Copy ``local`` to the absolute board path ``dest`` (see the module docstring)."""
    size = local.stat().st_size
    digest = file_sha256(local)
    state = _helper(conn, python, "prepare", dest, f"preparing {posixpath.dirname(dest)}")
    if not state["ok"]:
        raise TransferError(_write_failure(state["path"], state["errno"], state["error"]))
    if state["sha256"] == digest:
        if progress:
            progress(size, size, "already on the board")
        return UploadResult(dest, digest, size, skipped=True)
    if state["free"] < size:
        raise TransferError(f"no space left on the board: {posixpath.dirname(dest)} has {format_size(state['free'])} "
                            f"free, {local.name} needs {format_size(size)}")
    _upload_verified(conn, local, dest, digest, size, python=python, progress=progress)
    return UploadResult(dest, digest, size, skipped=False)


def _part_path(dest: str) -> str:
    folder, name = posixpath.split(dest)
    return posixpath.join(folder, f".{name}{PART_SUFFIX}")


def _upload_verified(conn: Connection, local: Path, dest: str, digest: str, size: int, *, python: str,
                     progress: ProgressFn | None) -> None:
    """Write the part file, check its hash on the board, rename it over ``dest``; on any failure
    remove the part file (if the board is still reachable) and raise a one-line error."""
    part = _part_path(dest)
    sent = [0]

    def callback(done: int, total: int) -> None:
        sent[0] = done
        conn.check_cancelled()  # raising here aborts paramiko's write loop
        if progress:
            progress(done, size, local.name)

    try:
        with open(local, "rb") as f:
            conn.sftp.putfo(f, part, file_size=size, callback=callback, confirm=True)
        if remote_sha256(conn, python, part) != digest:
            raise TransferError(f"{local.name} arrived corrupted on the board (sha256 mismatch; was another push "
                                "to the same board running?)")
        _replace(conn, part, dest)
    except BaseException as exc:
        # The error is worked out first: whether the disk ran full is judged with the part file there.
        error = None if isinstance(exc, (RemoteError, KeyboardInterrupt)) else _upload_error(
            conn, exc, local.name, dest, part, sent[0], size, python)
        _remove_quietly(conn, part)
        if error is None:
            raise
        raise error from None


def _replace(conn: Connection, part: str, dest: str) -> None:
    """Rename over ``dest`` atomically (OpenSSH's posix-rename); servers without that extension
    get remove + rename, which leaves a moment without ``dest`` but never a partial one."""
    try:
        conn.sftp.posix_rename(part, dest)
    except OSError as exc:
        if "unsupported" not in str(exc).lower():
            raise
        try:
            conn.sftp.remove(dest)
        except FileNotFoundError:
            pass
        conn.sftp.rename(part, dest)


def _remove_quietly(conn: Connection, path: str) -> None:
    if not conn.alive:
        return
    try:
        conn.sftp.remove(path)
    except Exception:  # already gone, or the connection died just now: the next push cleans up
        pass


def _upload_error(conn: Connection, exc: BaseException, name: str, dest: str, part: str, sent: int, size: int,
                  python: str) -> RemoteError:
    folder = posixpath.dirname(dest)
    if not conn.alive or isinstance(exc, (EOFError, paramiko.SSHException)):
        return TransferError(f"connection to the board lost while uploading {name} ({format_size(sent)} of "
                             f"{format_size(size)} sent); nothing was installed, the next push removes the partial file")
    code = getattr(exc, "errno", None)
    if code in (errno.EACCES, errno.EPERM, errno.EROFS):
        return TransferError(_write_failure(folder, code, os.strerror(code)))
    # SFTP v3 reports a full disk as a plain "Failure" (or, with pipelined writes, only as a
    # short file): ask the board how much room is left next to what did arrive.
    try:
        arrived = conn.sftp.stat(part).st_size or 0
        free = _helper(conn, python, "free", folder, f"checking free space in {folder}")["free"]
    except (RemoteError, OSError, KeyError):
        arrived, free = 0, None
    if free is not None and free < size - arrived + (1 << 16):
        return TransferError(f"no space left on the board: {folder} ran full while uploading {name} "
                             f"({format_size(arrived)} of {format_size(size)} written)")
    return TransferError(f"uploading {name} to {folder} failed: {exc or type(exc).__name__}")


def _write_failure(path: str, code: int | None, reason: str) -> str:
    if code == errno.EROFS:
        return f"{path} on the board is on a read-only file system (choose another `workdir`)"
    if code in (errno.EACCES, errno.EPERM):
        return f"{path} on the board is not writable: {reason} (choose another `workdir`)"
    if code == errno.ENOSPC:
        return f"no space left on the board in {path}"
    return f"cannot write to {path} on the board: {reason}"


def download(conn: Connection, remote: str, local: Path) -> Path:
    """Copy a board file to ``local`` through a temp file in the same folder (no half files)."""
    try:
        with atomic_path(local, fsync=False) as tmp, open(tmp, "wb") as f:
            conn.sftp.getfo(remote, f, callback=lambda done, total: conn.check_cancelled())
    except BaseException as exc:
        if isinstance(exc, (RemoteError, KeyboardInterrupt)):
            raise
        if not conn.alive:
            raise TransferError(f"connection to the board lost while downloading {remote}") from None
        raise TransferError(f"cannot download {remote} from the board: {getattr(exc, 'strerror', None) or exc}") from None
    return local


def write_text_atomically(conn: Connection, dest: str, text: str) -> None:
    """A small file (a marker) written as ``.<name>.part`` and renamed: readers see old or new."""
    part = _part_path(dest)
    conn.run(f"mkdir -p {shlex.quote(posixpath.dirname(dest))}", timeout=HELPER_TIMEOUT_S, what="creating a folder")
    try:
        with conn.sftp.open(part, "w") as f:
            f.write(text)
        _replace(conn, part, dest)
    except (OSError, EOFError, paramiko.SSHException) as exc:
        _remove_quietly(conn, part)
        raise TransferError(f"cannot write {dest} on the board: {getattr(exc, 'strerror', None) or exc}") from None

