"""Writing files safely: readers (and a user's earlier file) see the old content or the new,
never half of it, and an interrupted write leaves nothing behind."""
from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, *, fsync: bool = True) -> Iterator[Path]:
    """Yield a fresh temp path beside ``path``; when the block succeeds, rename it over ``path``.

    The temp file is created empty with ``O_EXCL`` and the normal umask mode (not mkstemp's
    0600), so the result has the permissions any new file would have. ``fsync`` makes the data
    durable before the rename publishes it. On any error the temp file is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    open(tmp, "xb").close()
    try:
        yield tmp
        if fsync:
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: str | os.PathLike, data: bytes, *, fsync: bool = True) -> None:
    with atomic_path(path, fsync=fsync) as tmp:
        tmp.write_bytes(data)


def atomic_write_text(path: str | os.PathLike, text: str, *, fsync: bool = True) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), fsync=fsync)
