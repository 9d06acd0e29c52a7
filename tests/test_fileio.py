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
