"""Read an .edgepkg file: check it, then build a Graph whose constants are views of the mmap.

The Python flatbuffers runtime has no verifier, so this module is one: the header, checksum and
every blob are checked before any array exists, every vector length is charged against a budget
the size of the flatbuffer (a corrupt length cannot loop for ages or allocate gigabytes), and any
exception a corrupt buffer still trips becomes a one-line :class:`PackageError`.
"""
from __future__ import annotations

import json
import math
import mmap
import os
from pathlib import Path
from typing import Any, Callable

import numpy as np
from flatbuffers.table import Table

from .. import __version__
from ..compress.encodings import Encoding, encoding_from_parts
from ..errors import EdgeSDKError, PackageError
from ..graph import Graph, Node, Tensor
from ..runtime.activations import Activation
from ..runtime.shapes import infer_shapes
from .fb.ActivationValue import ActivationValue
from .fb.AttributeValue import AttributeValue
from .fb.BoolValue import BoolValue
from .fb.FloatList import FloatList
from .fb.FloatValue import FloatValue
from .fb.IntList import IntList
from .fb.IntValue import IntValue
from .fb.Model import Model
from .fb.ScalarValue import ScalarValue
from .fb.Sequence import Sequence
from .fb.StringList import StringList
from .fb.StringValue import StringValue
from .layout import (ALIGN, FILE_IDENTIFIER, FORMAT_VERSION, HEADER_SIZE, MAGIC, Header,
                     dtype_from_code, file_checksum, inflate_graph_section)

_MAX_DIM = 1 << 40  # no real tensor has a larger dimension; a corrupt one must not overflow math


class _Corrupt(Exception):
    """A structural problem; the caller names the file."""


def load_package(path: str | os.PathLike, *, verify: bool = True) -> Graph:
    """The Graph stored in the package at ``path``.

    The file is mapped read-only and constants are ``np.frombuffer`` views of the mapping (encoded
    ones rebuilt over views): nothing is copied until a tensor is used. Header, identifier, format
    version, file size, checksum (skipped with ``verify=False``; it reads the whole file) and every
    blob's bounds, alignment and size are checked before any array exists. The package metadata
    is in ``graph.metadata["package"]``. Any problem is one :class:`PackageError` line.
    """
    return _guarded(path, verify, lambda pkg: pkg.graph())


def read_package_info(path: str | os.PathLike, *, verify: bool = True) -> dict[str, Any]:
    """Package metadata, graph signature, op counts and every constant's storage (dense or
    encoding kind and parameters, stored and dense bytes), without building any array."""
    return _guarded(path, verify, lambda pkg: pkg.info())


def _guarded(path: str | os.PathLike, verify: bool, read: Callable[["_Package"], Any]) -> Any:
    try:
        return read(_Package(Path(path), verify))
    except PackageError:
        raise
    except _Corrupt as exc:
        raise PackageError(f"{path}: corrupt package: {exc}") from None
    except Exception as exc:  # whatever else a crafted buffer trips: still one line, never a trace
        detail = str(exc).splitlines()[0] if str(exc) else ""
        raise PackageError(f"{path}: corrupt package ({type(exc).__name__}: {detail})") from None


# -- the file ----------------------------------------------------------------------------------
def _map(path: Path) -> mmap.mmap:
    """The file mapped read-only; its size is checked against the header before any other read."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            start = f.read(len(MAGIC))
            if not start or not MAGIC.startswith(start):  # a shorter prefix is a truncated package
                raise PackageError(f"{path}: not an edgesdk package (no EDGEPKG header)")
            if size < HEADER_SIZE:
                raise PackageError(f"{path}: truncated package: {size} bytes, less than the "
                                   f"{HEADER_SIZE}-byte header")
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except FileNotFoundError:
        raise PackageError(f"{path}: no such file") from None
    except (OSError, ValueError) as exc:
        raise PackageError(f"{path}: cannot read the package ({getattr(exc, 'strerror', None) or exc})") from None


def _check_header(path: Path, h: Header, size: int) -> None:
    if h.format_version != FORMAT_VERSION:
        raise PackageError(f"{path}: package format version {h.format_version} is not supported; "
                           f"edgesdk {__version__} reads version {FORMAT_VERSION}: re-pack the model")
    if h.file_size > size:
        raise PackageError(f"{path}: truncated package: {size} bytes, the header says {h.file_size}")
    if h.file_size < size:
        raise _Corrupt(f"{size} bytes, the header says {h.file_size}")
    fb_end = h.fb_offset + h.fb_size
    if (h.header_size != HEADER_SIZE or h.fb_offset != HEADER_SIZE or any(h.reserved_tail)
            or h.fb_size < 8 or h.blob_offset % ALIGN or not fb_end <= h.blob_offset
            or h.blob_offset + h.blob_size != h.file_size):
        raise _Corrupt("inconsistent header (region offsets and sizes)")


class _Package:
    """A checked, mapped package: header, flatbuffer root, blob table."""

    def __init__(self, path: Path, verify: bool) -> None:
        self.path = path
        self.mm = _map(path)
        self.header = Header.unpack(self.mm)
        _check_header(path, self.header, len(self.mm))
        if verify and file_checksum(memoryview(self.mm)) != self.header.checksum:
            raise PackageError(f"{path}: checksum mismatch: the package is corrupt; copy or pack it again")
        h = self.header
        fb = inflate_graph_section(self.mm[h.fb_offset:h.fb_offset + h.fb_size], h.fb_inflated_size)
        if fb is None:
            raise _Corrupt("the graph section does not inflate to the size its header gives")
        if fb[4:8] != FILE_IDENTIFIER:
            raise PackageError(f"{path}: not an edgesdk package (flatbuffer identifier "
                               f"{fb[4:8]!r}, expected {FILE_IDENTIFIER!r})")
        self.r = _Reader(len(fb))
        self.model = Model.GetRootAs(fb, 0)
        if self.model.FormatVersion() != h.format_version:
            raise _Corrupt(f"flatbuffer format version {self.model.FormatVersion()} differs from the "
                           f"header's {h.format_version}")
        self.meta, self.g = self.model.Metadata(), self.model.Graph()
        if self.meta is None or self.g is None:
            raise _Corrupt("no graph or no metadata")
        self.blobs = [self._blob(i) for i in range(self.r.count(self.model.BlobsLength(), 16))]
        if not self.blobs or self.blobs[0][1]:
            raise _Corrupt("blob 0 must be the empty sentinel")

    def _blob(self, i: int) -> tuple[int, int]:
        """(file offset, size) of blob ``i``, checked against the blob area and the alignment."""
        blob = self.model.Blobs(i)
        offset, size, area = blob.Offset(), blob.Size(), self.header.blob_size
        if offset % ALIGN:
            raise _Corrupt(f"blob {i} at offset {offset} is not {ALIGN}-byte aligned")
        if offset + size > area:
            raise _Corrupt(f"blob {i} ({size} bytes at {offset}) lies outside the {area}-byte blob area")
        return self.header.blob_offset + offset, size

    def array(self, index: int, dtype: np.dtype | None, shape: tuple[int, ...], what: str) -> np.ndarray:
        """A read-only view of blob ``index`` in the mapping, as dtype[shape]: no copy."""
        if not 0 < index < len(self.blobs):
            raise _Corrupt(f"{what} refers to blob {index}; the package has {len(self.blobs)}")
        if dtype is None:
            raise _Corrupt(f"{what} has an unknown dtype")
        offset, size = self.blobs[index]
        count = math.prod(shape)
        if size != count * dtype.itemsize:
            raise _Corrupt(f"{what}: blob {index} holds {size} bytes but {dtype.name}{list(shape)} "
                           f"needs {count * dtype.itemsize}")
        return np.frombuffer(self.mm, dtype, count, offset).reshape(shape)

    # -- the graph
    def graph(self) -> Graph:
        g, r = self.g, self.r
        graph = Graph(r.text(g.Name(), "graph name", required=False) or "graph")
        tensors = [self._tensor(g.Tensors(i)) for i in range(r.count(g.TensorsLength(), 4))]
        graph.tensors = {t.name: t for t in tensors}
        if len(graph.tensors) != len(tensors):
            raise _Corrupt("duplicate tensor names")
        names = [t.name for t in tensors]
        graph.inputs = _names(r.numbers(g.InputsAsNumpy()), names, "graph inputs")
        graph.outputs = _names(r.numbers(g.OutputsAsNumpy()), names, "graph outputs")
        attributes = [self._attribute(g.Attributes(i)) for i in range(r.count(g.AttributesLength(), 4))]
        graph.nodes = [self._node(g.Nodes(i), names, attributes) for i in range(r.count(g.NodesLength(), 4))]
        graph.metadata = self._json(self.meta.GraphMetadataJson(), "graph metadata") or {}
        if not isinstance(graph.metadata, dict):
            raise _Corrupt("graph metadata is not a JSON object")
        graph.metadata["package"] = self.metadata()
        _check_runnable(graph)
        return graph

    def _tensor(self, t: Any) -> Tensor:
        r = self.r
        name = r.text(t.Name(), "tensor name")
        shape = r.shape(t.ShapeAsNumpy())
        dtype = dtype_from_code(t.Dtype())
        if dtype is None:
            raise _Corrupt(f"tensor {name!r} has unknown dtype code {t.Dtype()}")
        blob = t.Data()
        if blob:  # dense; a dense tensor's encoding field is not read
            return Tensor(name, shape, dtype, self.array(blob, dtype, shape, f"tensor {name!r}"))
        encoding = t.Encoding()
        return Tensor(name, shape, dtype, encoding=self._encoding(encoding, name) if encoding is not None else None)

    def _encoding(self, e: Any, tensor: str) -> Encoding:
        r = self.r
        kind = r.text(e.Kind(), f"tensor {tensor!r} encoding kind")
        params = self._params(e, tensor)
        arrays = {}
        for i in range(r.count(e.ArraysLength(), 4)):
            a = e.Arrays(i)
            array = r.text(a.Name(), "array name")
            arrays[array] = self.array(a.Blob(), dtype_from_code(a.Dtype()), r.shape(a.ShapeAsNumpy()),
                                       f"tensor {tensor!r} array {array!r}")
        try:
            return encoding_from_parts(kind, r.shape(e.ShapeAsNumpy()), params, arrays)
        except EdgeSDKError as exc:
            raise _Corrupt(f"tensor {tensor!r}: {exc}") from None

    def _params(self, e: Any, tensor: str) -> dict[str, Any]:
        params = {}
        for i in range(self.r.count(e.ParamsLength(), 4)):
            p = e.Params(i)
            name = self.r.text(p.Name(), "parameter name")
            params[name] = _value(p.ValueType(), p.Value(), self.r, _SCALAR_NAMES,
                                  f"tensor {tensor!r} parameter {name!r}")
        return params

    def _attribute(self, a: Any) -> tuple[str, Any]:
        name = self.r.text(a.Name(), "attribute name")
        return name, _value(a.ValueType(), a.Value(), self.r, _ATTRIBUTE_NAMES, f"attribute {name!r}")

    def _node(self, n: Any, names: list[str], attributes: list[tuple[str, Any]]) -> Node:
        r = self.r
        name = r.text(n.Name(), "node name")
        where = f"node {name!r}"
        inputs = _names(r.numbers(n.InputsAsNumpy()), names, where, optional=True)
        outputs = _names(r.numbers(n.OutputsAsNumpy()), names, where, optional=True)
        pool = r.numbers(n.AttributesAsNumpy())
        if any(i >= len(attributes) for i in pool):
            raise _Corrupt(f"{where} refers to attribute {max(pool)}; the graph has {len(attributes)}")
        # nodes share pooled values: lists are the one mutable kind, so each node gets its own
        attrs = {k: list(v) if isinstance(v, list) else v for k, v in (attributes[i] for i in pool)}
        if len(attrs) != len(pool):
            raise _Corrupt(f"{where} has the same attribute twice")
        return Node(r.text(n.Op(), f"{where} op"), name, inputs, outputs, attrs)

    # -- metadata
    def _json(self, raw: bytes | None, what: str) -> Any:
        text = self.r.text(raw, what, required=False)
        if text is None:
            return None
        try:
            return json.loads(text)
        except ValueError:
            raise _Corrupt(f"{what} is not valid JSON") from None

    def metadata(self) -> dict[str, Any]:
        """What graph.metadata["package"] holds: the package's own metadata, JSON parsed."""
        m, r = self.meta, self.r
        accuracy = m.Accuracy()
        return {
            "path": str(self.path),
            "format_version": self.header.format_version,
            "file_size": self.header.file_size,
            "checksum": self.header.checksum.hex(),
            "producer": r.text(m.Producer(), "producer", required=False),
            "created": r.text(m.Created(), "creation time", required=False),
            "source_sha256": r.text(m.SourceSha256(), "source sha256", required=False),
            "recipe": self._json(m.RecipeJson(), "recipe"),
            "layers": self._json(m.LayersJson(), "per-layer stats"),
            "accuracy": None if accuracy is None else accuracy.Value(),
            "accuracy_dataset": None if accuracy is None else r.text(accuracy.Dataset(), "dataset", required=False),
        }

    def info(self) -> dict[str, Any]:
        """Metadata, graph signature and per-tensor storage, without building any array."""
        g, r = self.g, self.r
        tensors = [g.Tensors(i) for i in range(r.count(g.TensorsLength(), 4))]
        names = [r.text(t.Name(), "tensor name") for t in tensors]
        ops: dict[str, int] = {}
        for i in range(r.count(g.NodesLength(), 4)):
            op = r.text(g.Nodes(i).Op(), "node op")
            ops[op] = ops.get(op, 0) + 1

        def signature(indices: list[int], what: str) -> list[dict[str, Any]]:
            return [self._tensor_info(tensors[i]) for i in _indices(indices, len(names), what)]

        return {
            **self.metadata(),
            "graph": {
                "name": r.text(g.Name(), "graph name", required=False),
                "inputs": signature(r.numbers(g.InputsAsNumpy()), "graph inputs"),
                "outputs": signature(r.numbers(g.OutputsAsNumpy()), "graph outputs"),
                "nodes": sum(ops.values()),
                "ops": ops,
            },
            "graph_metadata": self._json(self.meta.GraphMetadataJson(), "graph metadata"),
            "tensors": [self._tensor_info(t) for t in tensors if t.Data() or t.Encoding() is not None],
        }

    def _tensor_info(self, t: Any) -> dict[str, Any]:
        r = self.r
        shape = r.shape(t.ShapeAsNumpy())
        dtype = dtype_from_code(t.Dtype())
        out: dict[str, Any] = {"name": r.text(t.Name(), "tensor name"), "shape": list(shape),
                               "dtype": dtype.name if dtype is not None else None}
        blob, e = t.Data(), t.Encoding()
        if blob:
            out.update(storage="dense", stored_bytes=self._blob_size(blob))
        elif e is not None:
            stored = sum(self._blob_size(e.Arrays(i).Blob()) for i in range(r.count(e.ArraysLength(), 4)))
            out.update(storage=r.text(e.Kind(), "encoding kind"), params=self._params(e, out["name"]),
                       stored_bytes=stored)
        if dtype is not None and (blob or e is not None):
            out["dense_bytes"] = math.prod(shape) * dtype.itemsize
        return out

    def _blob_size(self, index: int) -> int:
        if not 0 < index < len(self.blobs):
            raise _Corrupt(f"a tensor refers to blob {index}; the package has {len(self.blobs)}")
        return self.blobs[index][1]


class _Reader:
    """Bounded reads: a valid flatbuffer never holds more vector elements and string bytes than
    its own size, so every read is charged against that and a corrupt length fails fast."""

    def __init__(self, nbytes: int) -> None:
        self.left = nbytes

    def count(self, n: int, width: int) -> int:
        self.left -= n * width
        if self.left < 0:
            raise _Corrupt("the flatbuffer refers to more data than it holds")
        return n

    def text(self, raw: bytes | None, what: str, required: bool = True) -> str | None:
        if raw is None:
            if required:
                raise _Corrupt(f"missing {what}")
            return None
        self.count(len(raw) + 4, 1)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise _Corrupt(f"{what} is not UTF-8") from None

    def numbers(self, vector: Any) -> list:
        """A scalar vector from a generated ``...AsNumpy()`` (0 when absent) as Python numbers.
        The view is bounded by the buffer, so charging its bytes afterwards is enough."""
        if isinstance(vector, int):
            return []
        self.count(vector.nbytes, 1)
        return vector.tolist()

    def shape(self, vector: Any) -> tuple[int, ...]:
        dims = tuple(self.numbers(vector))
        if any(not 0 <= d < _MAX_DIM for d in dims):
            raise _Corrupt(f"invalid shape {dims}")
        return dims


def _check_runnable(graph: Graph) -> None:
    """What a hand-built Graph is checked for before it runs (defined inputs, ops with kernels,
    shapes that follow from the attributes), so that a crafted package fails here, in one line,
    rather than in a backend. Linear: the stored node order must already be topological."""
    available = {name for name, t in graph.tensors.items() if t.is_constant} | set(graph.inputs)
    for node in graph.nodes:
        missing = [i for i in node.inputs if i and i not in available]
        if missing:
            raise _Corrupt(f"node {node.name!r} reads {missing[0]!r} before anything computes it")
        available.update(o for o in node.outputs if o)
    missing = [o for o in graph.outputs if o not in available]
    if missing:
        raise _Corrupt(f"graph output {missing[0]!r} is never computed")
    try:
        infer_shapes(graph)
    except EdgeSDKError as exc:
        raise _Corrupt(str(exc)) from None


def _indices(indices: list[int], n: int, what: str, optional: bool = False) -> list[int]:
    low = -1 if optional else 0
    bad = [i for i in indices if not low <= i < n]
    if bad:
        raise _Corrupt(f"{what} refer to tensor {bad[0]}; the graph has {n}")
    return indices


def _names(indices: list[int], names: list[str], what: str, optional: bool = False) -> list[str]:
    return [names[i] if i >= 0 else "" for i in _indices(indices, len(names), what, optional)]


# -- typed values ------------------------------------------------------------------------------
def _as(cls: type, table: Table) -> Any:
    """The union member ``table`` read as generated class ``cls``."""
    obj = cls()
    obj.Init(table.Bytes, table.Pos)
    return obj


def _sequence(values: list, sequence: int) -> tuple | list:
    if sequence not in (Sequence.TUPLE, Sequence.LIST):
        raise _Corrupt(f"unknown sequence kind {sequence}")
    return tuple(values) if sequence == Sequence.TUPLE else values


def _int_list(t: Table, r: _Reader) -> tuple | list:
    v = _as(IntList, t)
    return _sequence(r.numbers(v.ValuesAsNumpy()), v.Sequence())


def _float_list(t: Table, r: _Reader) -> tuple | list:
    v = _as(FloatList, t)
    return _sequence(r.numbers(v.ValuesAsNumpy()), v.Sequence())


def _string_list(t: Table, r: _Reader) -> tuple | list:
    v = _as(StringList, t)
    return _sequence([r.text(v.Values(i), "string") for i in range(r.count(v.ValuesLength(), 4))], v.Sequence())


def _activation(t: Table, r: _Reader) -> Activation:
    v = _as(ActivationValue, t)
    try:
        return Activation(r.text(v.Kind(), "activation kind"), tuple(r.numbers(v.ParamsAsNumpy())))
    except (KeyError, ValueError):
        raise _Corrupt("invalid activation") from None


_VALUE_READERS: dict[str, Callable[[Table, _Reader], Any]] = {
    "IntValue": lambda t, r: _as(IntValue, t).Value(),
    "FloatValue": lambda t, r: _as(FloatValue, t).Value(),
    "BoolValue": lambda t, r: _as(BoolValue, t).Value(),
    "StringValue": lambda t, r: r.text(_as(StringValue, t).Value(), "string"),
    "IntList": _int_list,
    "FloatList": _float_list,
    "StringList": _string_list,
    "ActivationValue": _activation,
}


def _union_names(enum: type) -> dict[int, str]:
    return {code: name for name, code in vars(enum).items() if not name.startswith("_") and name != "NONE"}


_ATTRIBUTE_NAMES = _union_names(AttributeValue)
_SCALAR_NAMES = _union_names(ScalarValue)


def _value(type_code: int, table: Table | None, r: _Reader, names: dict[int, str], what: str) -> Any:
    name = names.get(type_code)
    if name is None or table is None:
        raise _Corrupt(f"{what} has no value or an unknown type ({type_code})")
    return _VALUE_READERS[name](table, r)
