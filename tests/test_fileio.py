"""edgesdk.fileio: the one temp-file-and-rename writer every output goes through."""
from __future__ import annotations

import os

import pytest

from edgesdk.fileio import atomic_path, atomic_write_text


def test_new_file_gets_the_umask_mode_not_0600(tmp_path) -> None:
    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "a.txt", "hello")
    finally:
        os.umask(old)
    assert (tmp_path / "a.txt").read_text() == "hello"
    assert (tmp_path / "a.txt").stat().st_mode & 0o777 == 0o644


def test_failed_write_keeps_the_old_file_and_leaves_no_temp(tmp_path) -> None:
    target = tmp_path / "out.bin"
    target.write_bytes(b"precious")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_bytes(b"half")
            raise RuntimeError("interrupted")
    assert target.read_bytes() == b"precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]


def test_creates_missing_folders_and_replaces(tmp_path) -> None:
    target = tmp_path / "deep" / "er" / "x.txt"
    atomic_write_text(target, "1")
    atomic_write_text(target, "2")
    assert target.read_text() == "2"
    assert [p.name for p in target.parent.iterdir()] == ["x.txt"]


# -- interrupted writes: signals, kill -9 and the sweep ----------------------------------------------

import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from edgesdk.fileio import sweep_stale_temps  # noqa: E402
from edgesdk.models import default_model_path  # noqa: E402

# A child that starts a write (in the main thread or a worker thread), says so, then stalls in it.
_WRITER = """
import sys, threading, time
from edgesdk.fileio import atomic_path
target, where = sys.argv[1], sys.argv[2]
def write():
    with atomic_path(target) as tmp:
        tmp.write_bytes(b"half written")
        print("writing", flush=True)
        time.sleep(60)
if where == "main":
    write()
else:
    threading.Thread(target=write, daemon=(where == "daemon")).start()
    time.sleep(60)
"""

# A real package write (edgesdk.compress.pack_model) stalled after its first array.
_PACKER = """
import sys, time
from edgesdk.compress import pack_model
def progress(done, total, stage=""):
    if stage == "writing" and done < total:
        print("writing", flush=True)
        time.sleep(60)
pack_model(sys.argv[3], sys.argv[1], progress=progress)
"""


def _start(script: str, target: Path, *args: str) -> subprocess.Popen:
    child = subprocess.Popen([sys.executable, "-c", script, str(target), *args],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = child.stdout.readline()
    assert line.strip() == "writing", f"child did not start writing: {line!r} {child.stderr.read()[-2000:]}"
    return child


def _temps(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_during_a_write_removes_the_temp_and_keeps_the_old_file(tmp_path, sig) -> None:
    target = tmp_path / "model.edgepkg"
    target.write_bytes(b"precious")
    child = _start(_WRITER, target, "main")
    assert len(_temps(tmp_path)) == 1
    child.send_signal(sig)
    assert child.wait(timeout=30) == -sig  # dies of the signal, as without edgesdk
    assert _temps(tmp_path) == [] and target.read_bytes() == b"precious"


def test_sigint_during_a_write_removes_the_temp(tmp_path) -> None:
    target = tmp_path / "out.npz"
    child = _start(_WRITER, target, "main")
    child.send_signal(signal.SIGINT)
    assert child.wait(timeout=30) != 0
    assert "KeyboardInterrupt" in child.stderr.read()
    assert _temps(tmp_path) == [] and not target.exists()


def test_a_daemon_threads_write_is_removed_at_exit_after_sigint(tmp_path) -> None:
    # KeyboardInterrupt ends the main thread; Python stops the daemon writer without unwinding it
    target = tmp_path / "out.bin"
    child = _start(_WRITER, target, "daemon")
    child.send_signal(signal.SIGINT)
    assert child.wait(timeout=30) != 0
    assert _temps(tmp_path) == []


def test_a_worker_threads_write_killed_by_sigterm_is_swept_next_time(tmp_path) -> None:
    # signal handlers can only be installed from the main thread: a process whose first write
    # runs in a worker dies of SIGTERM at once, and the next write to the target sweeps the rest
    target = tmp_path / "out.bin"
    child = _start(_WRITER, target, "thread")
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=30) == -signal.SIGTERM
    assert len(_temps(tmp_path)) == 1
    atomic_write_text(target, "next")
    assert _temps(tmp_path) == [] and target.read_text() == "next"


def test_a_real_pack_interrupted_by_sigterm_leaves_nothing(tmp_path) -> None:
    target = tmp_path / "digits.edgepkg"
    child = _start(_PACKER, target, "main", str(default_model_path()))
    assert _temps(tmp_path)
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=30) == -signal.SIGTERM
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_kill_9_leftovers_are_swept_by_the_next_write_to_the_same_target(tmp_path) -> None:
    target = tmp_path / "model.edgepkg"
    other = tmp_path / "other.edgepkg"
    child = _start(_WRITER, target, "main")
    child.kill()
    child.wait(timeout=30)
    leftover = _temps(tmp_path)
    assert len(leftover) == 1  # SIGKILL cannot be caught
    atomic_write_text(other, "x")  # another target's write leaves it alone
    assert _temps(tmp_path) == leftover
    atomic_write_text(target, "new")
    assert _temps(tmp_path) == [] and target.read_text() == "new"


def test_the_sweep_keeps_temps_of_live_writers_and_removes_old_ones(tmp_path) -> None:
    target = tmp_path / "a[1].bin"  # glob metacharacters in the name
    live = tmp_path / f".a[1].bin.{os.getppid()}.0123abcd.tmp"  # pytest's parent: alive
    dead_old_format = tmp_path / ".a[1].bin.89abcdef.tmp"  # no PID (older versions), 2 hours old
    recent_old_format = tmp_path / ".a[1].bin.fedcba98.tmp"
    ancient_live = tmp_path / f".a[1].bin.{os.getppid()}.00000000.tmp"  # PID alive but 2 days old
    unrelated = tmp_path / ".b.bin.1.0123abcd.tmp"
    for p in (live, dead_old_format, recent_old_format, ancient_live, unrelated):
        p.write_bytes(b"")
    now = time.time()
    os.utime(dead_old_format, (now - 7200, now - 7200))
    os.utime(ancient_live, (now - 2 * 86400, now - 2 * 86400))
    removed = sweep_stale_temps(target)
    assert sorted(p.name for p in removed) == sorted([dead_old_format.name, ancient_live.name])
    assert live.exists() and recent_old_format.exists() and unrelated.exists()


def test_temp_names_carry_the_pid(tmp_path) -> None:
    with atomic_path(tmp_path / "x") as tmp:
        assert tmp.name.startswith(f".x.{os.getpid()}.") and tmp.name.endswith(".tmp")
        assert not sweep_stale_temps(tmp_path / "x")  # our own live temp is never swept
        assert tmp.exists()
