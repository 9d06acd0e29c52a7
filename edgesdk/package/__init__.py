"""The ``.edgepkg`` model package: one file, 64-byte aligned blobs, checksummed.

A package stores a :class:`~edgesdk.graph.Graph` (nodes, typed attributes, tensors), its
constants (dense, or compressed encodings exactly as :meth:`Encoding.parts` gives them, never
decoded) and metadata (producer, source model sha256, compression recipe, per-layer stats,
accuracy, ``graph.metadata``; no timestamp, so packing is deterministic). The schema is ``edgepkg.fbs``; the Python code in
``fb/`` is generated from it by ``tools/gen_flatbuffers.py``.

File layout (little-endian; byte by byte at the top of ``edgepkg.fbs``)::

    [0, 64)              header: magic "EDGEPKG\\0", format version, file size, sizes of the
                         blob area and the graph section, xxh3-128 of the whole file but its own
                         16 bytes
    [64, 64 + blobs)     blob area: arrays at file offsets that are multiples of 64 (arrays under
                         256 bytes share blobs, 8-byte aligned), raw little-endian C order
    [.., end)            graph section: the flatbuffer (root Model, file_identifier "EPKG"),
                         zlib-deflated with a preset dictionary when that is smaller

Arrays live outside the flatbuffer so that :func:`load_package` can hand out ``np.frombuffer``
views of the file's bytes, read once into private 64-byte aligned memory (no copy per tensor). Not
a mapping of the file: the checksum and the validation then cover exactly the bytes later used, and
a package overwritten while a session has it open cannot pull pages from under it (SIGBUS).

>>> info = save_package(graph, "model.edgepkg", metadata={"accuracy": 0.98, "accuracy_dataset": "digits"})
>>> graph = load_package("model.edgepkg")  # or Session("model.edgepkg")
"""
from __future__ import annotations

import hashlib
import importlib
import os
from typing import TYPE_CHECKING, Any

from ..errors import PackageError
from .layout import FORMAT_VERSION

if TYPE_CHECKING:
    from .reader import load_package, read_package_info
    from .writer import METADATA_KEYS, PackageInfo, save_package

SUFFIX = ".edgepkg"

# The reader and the writer (flatbuffers, xxhash, the encodings) are imported on first use: the
# loader sniffs every model file for the package magic (layout), and a session of an .onnx file
# needs nothing else from here; importing them took 28 ms of its first creation.
_LAZY = {"load_package": ".reader", "read_package_info": ".reader", "save_package": ".writer",
         "METADATA_KEYS": ".writer", "PackageInfo": ".writer"}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    globals()[name] = value
    return value


def sha256_file(path: str | os.PathLike) -> str:
    """Hex sha256 of a file, for ``save_package(..., metadata={"source_sha256": ...})``."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


__all__ = ["save_package", "load_package", "read_package_info", "sha256_file", "PackageInfo",
           "PackageError", "FORMAT_VERSION", "METADATA_KEYS", "SUFFIX"]
