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
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from .. import __version__
from ..compress.encodings import Encoding, encoding_from_parts
from ..errors import EdgeSDKError, PackageError
from ..graph import Graph, Node, Tensor
from ..runtime.activations import Activation
from ..runtime.shapes import infer_shapes
from .fb.Model import Model
from .fb.ValueKind import ValueKind
from .layout import (ALIGN, ARRAY_ALIGN, FILE_IDENTIFIER, FORMAT_VERSION, HEADER_SIZE, MAGIC, Header,
                     dtype_from_code, file_checksum, inflate_graph_section)

_MAX_DIM = 1 << 40  # no real tensor has a larger dimension; a corrupt one must not overflow math


class _Corrupt(Exception):
    """A structural problem; the caller names the file."""


def load_package(path: str | os.PathLike, *, verify: bool = True) -> Graph:
    """The Graph stored in the package at ``path``.

    The file is mapped read-only and constants are ``np.frombuffer`` views of the mapping (encoded
    ones rebuilt over views): nothing is copied until a tensor is used. Header, identifier, format
    version, file size and every blob's and array's bounds, alignment and size are checked before
    any array exists; the whole-file checksum (skipped with ``verify=False``) is computed on a
    second thread while the graph is built (xxhash releases the GIL) and checked before the graph
    is returned. The package metadata is in ``graph.metadata["package"]``. Any problem is one
    :class:`PackageError` line.
    """
    return _guarded(path, verify, lambda pkg: pkg.graph())


def read_package_info(path: str | os.PathLike, *, verify: bool = True) -> dict[str, Any]:
    """Package metadata, graph signature, op counts and every constant's storage (dense or
    encoding kind and parameters, stored and dense bytes), without building any array."""
    return _guarded(path, verify, lambda pkg: pkg.info())


def _guarded(path: str | os.PathLike, verify: bool, read: Callable[["_Package"], Any]) -> Any:
    checksum: _ChecksumCheck | None = None
    try:
        mm, header = _open(Path(path))
        checksum = _ChecksumCheck(Path(path), mm, header) if verify else None
        result = read(_Package(Path(path), mm, header))
        if checksum is not None:
            checksum.raise_if_wrong()
        return result
    except PackageError:
        _prefer_checksum_error(checksum)
        raise
    except _Corrupt as exc:
        _prefer_checksum_error(checksum)
        raise PackageError(f"{path}: corrupt package: {exc}") from None
    except Exception as exc:  # whatever else a crafted buffer trips: still one line, never a trace
        _prefer_checksum_error(checksum)
        detail = str(exc).splitlines()[0] if str(exc) else ""
        raise PackageError(f"{path}: corrupt package ({type(exc).__name__}: {detail})") from None


def _prefer_checksum_error(checksum: "_ChecksumCheck | None") -> None:
    """A damaged file usually also trips a structural check; its checksum says it best."""
    if checksum is not None:
        checksum.raise_if_wrong()


class _ChecksumCheck:
    """The whole-file checksum, computed on a thread while the caller parses the file."""

    def __init__(self, path: Path, mm: mmap.mmap, header: Header) -> None:
        self.path, self.expected, self.actual = path, header.checksum, None
        self.thread = threading.Thread(target=self._run, args=(mm,), daemon=True)
        self.thread.start()

    def _run(self, mm: mmap.mmap) -> None:
        self.actual = file_checksum(memoryview(mm))

    def raise_if_wrong(self) -> None:
        self.thread.join()
        if self.actual != self.expected:
            raise PackageError(f"{self.path}: checksum mismatch: the package is corrupt; copy or pack it again")


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
    if (h.header_size != HEADER_SIZE or h.fb_size < 8
            or h.header_size + h.blob_size + h.fb_size != h.file_size):
        raise _Corrupt("inconsistent header (region sizes)")


def _open(path: Path) -> tuple[mmap.mmap, Header]:
    """The mapped file and its checked header."""
    mm = _map(path)
    header = Header.unpack(mm)
    _check_header(path, header, len(mm))
    return mm, header


class _Package:
    """A checked, mapped package: header, flatbuffer root, blob table."""

    def __init__(self, path: Path, mm: mmap.mmap, header: Header) -> None:
        self.path, self.mm, self.header = path, mm, header
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
        self.blobs = self._blob_table()
        if not self.blobs or self.blobs[0][1]:
            raise _Corrupt("blob 0 must be the empty sentinel")
        self.columns = _Columns(self.g, self.r)

    def _blob_table(self) -> list[tuple[int, int]]:
        """[(file offset, size)] of every blob, checked against the blob area and the alignment.
        Read as one numpy array: the vector of Blob structs is 16-byte records."""
        tab = self.model._tab
        field = tab.Offset(8)  # Model.blobs (vtable slot of the third field)
        if not field:
            return []
        start, count = tab.Vector(field), tab.VectorLen(field)
        self.r.count(count, 16)
        table = np.frombuffer(tab.Bytes, np.dtype([("offset", "<u8"), ("size", "<u8")]), count, start)
        offsets, sizes, area = table["offset"], table["size"], self.header.blob_size
        outside = np.flatnonzero((offsets > area) | (sizes > area - np.minimum(offsets, area)))
        if outside.size:
            i = int(outside[0])
            raise _Corrupt(f"blob {i} ({sizes[i]} bytes at {offsets[i]}) lies outside the {area}-byte blob area")
        unaligned = np.flatnonzero(offsets % ALIGN)
        if unaligned.size:
            i = int(unaligned[0])
            raise _Corrupt(f"blob {i} at offset {offsets[i]} is not {ALIGN}-byte aligned")
        return list(zip((offsets + self.header.blob_offset).tolist(), sizes.tolist()))

    def array(self, blob: int, offset: int, dtype: np.dtype | None, shape: tuple[int, ...], what: str) -> np.ndarray:
        """A read-only view of dtype[shape] at ``offset`` inside blob ``blob`` of the mapping: no copy."""
        if not 0 < blob < len(self.blobs):
            raise _Corrupt(f"{what} refers to blob {blob}; the package has {len(self.blobs)}")
        if dtype is None:
            raise _Corrupt(f"{what} has an unknown dtype")
        start, size = self.blobs[blob]
        count = math.prod(shape)
        if offset % ARRAY_ALIGN or offset + count * dtype.itemsize > size:
            raise _Corrupt(f"{what}: {dtype.name}{list(shape)} at offset {offset} does not fit blob {blob} "
                           f"({size} bytes) or is not {ARRAY_ALIGN}-byte aligned")
        return np.frombuffer(self.mm, dtype, count, start + offset).reshape(shape)

    # -- the graph
    def graph(self) -> Graph:
        g, r, c = self.g, self.r, self.columns
        graph = Graph(r.text(g.Name(), "graph name", required=False) or "graph")
        encodings = self._encodings()
        tensors = []
        for i, (name, shape, dtype) in enumerate(zip(c.tensor_names, c.shapes, c.dtypes)):
            if c.blobs[i]:  # dense; an encoding naming this tensor would be ignored, so refuse it
                if i in encodings:
                    raise _Corrupt(f"tensor {name!r} has both dense data and an encoding")
                data = self.array(c.blobs[i], c.offsets[i], dtype, shape, f"tensor {name!r}")
                tensors.append(Tensor.trusted(name, shape, dtype, data))
            elif i in encodings:
                tensors.append(Tensor.trusted(name, shape, dtype, encoding=self._encoding(encodings[i], name, shape)))
            else:
                tensors.append(Tensor.trusted(name, shape, dtype))
        graph.tensors = {t.name: t for t in tensors}
        if len(graph.tensors) != len(tensors):
            raise _Corrupt("duplicate tensor names")
        graph.inputs = _names(c.inputs, c.tensor_names, "graph inputs")
        graph.outputs = _names(c.outputs, c.tensor_names, "graph outputs")
        graph.nodes = list(self._nodes())
        graph.metadata = self._json(self.meta.GraphMetadataJson(), "graph metadata") or {}
        if not isinstance(graph.metadata, dict):
            raise _Corrupt("graph metadata is not a JSON object")
        package = self.metadata()
        if package["recipe"] is not None or package["layers"] is not None:
            compression = graph.metadata.get("compression")
            graph.metadata["compression"] = {**(compression if isinstance(compression, dict) else {}),
                                             "recipe": package["recipe"], "layers": package["layers"]}
        graph.metadata["package"] = package
        _check_runnable(graph)
        return graph

    def _nodes(self) -> Iterator[Node]:
        c = self.columns
        values, tensor_names = c.values(), c.tensor_names
        io, pool = c.node_tensors, c.node_values
        _indices(io, len(tensor_names), "node tensors", optional=True)
        if any(not 0 <= i < len(values) for i in pool):
            raise _Corrupt(f"a node refers to value {max(pool)}; the graph has {len(values)}")
        at_io = at_value = 0
        for name, op, n_in, n_out, n_attr in zip(c.node_names, c.node_ops, c.input_counts, c.output_counts,
                                                  c.attribute_counts):
            inputs = [tensor_names[i] if i >= 0 else "" for i in io[at_io:at_io + n_in]]
            outputs = [tensor_names[i] if i >= 0 else "" for i in io[at_io + n_in:at_io + n_in + n_out]]
            at_io += n_in + n_out
            picked = pool[at_value:at_value + n_attr]
            at_value += n_attr
            # nodes share pooled values: lists are the one mutable kind, so each node gets its own
            attrs = {k: list(v) if isinstance(v, list) else v for k, v in (values[i] for i in picked)}
            if len(attrs) != n_attr:
                raise _Corrupt(f"node {name!r} has the same attribute twice")
            yield Node(op, name, inputs, outputs, attrs)

    def _encodings(self) -> dict[int, "_EncodingEntry"]:
        """tensor index -> its encoding's kind, parameters and arrays (not yet built)."""
        c = self.columns
        found: dict[int, _EncodingEntry] = {}
        for entry in c.encodings():
            if entry.tensor in found:
                raise _Corrupt(f"tensor {c.tensor_names[entry.tensor]!r} has two encodings")
            found[entry.tensor] = entry
        return found

    def _encoding(self, entry: "_EncodingEntry", tensor: str, shape: tuple[int, ...]) -> Encoding:
        arrays = {name: self.array(blob, offset, dtype, dims, f"tensor {tensor!r} array {name!r}")
                  for name, blob, offset, dtype, dims in entry.arrays}
        try:
            return encoding_from_parts(entry.kind, shape, entry.params, arrays)
        except EdgeSDKError as exc:
            raise _Corrupt(f"tensor {tensor!r}: {exc}") from None

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
            "source_sha256": r.text(m.SourceSha256(), "source sha256", required=False),
            "recipe": self._json(m.RecipeJson(), "recipe"),
            "layers": self._json(m.LayersJson(), "per-layer stats"),
            "accuracy": None if accuracy is None else accuracy.Value(),
            "accuracy_dataset": None if accuracy is None else r.text(accuracy.Dataset(), "dataset", required=False),
        }

    def info(self) -> dict[str, Any]:
        """Metadata, graph signature and per-tensor storage, without building any array."""
        g, r, c = self.g, self.r, self.columns
        encodings = self._encodings()
        ops: dict[str, int] = {}
        for op in c.node_ops:
            ops[op] = ops.get(op, 0) + 1

        def signature(indices: list[int], what: str) -> list[dict[str, Any]]:
            return [self._tensor_info(i, encodings.get(i)) for i in _indices(indices, len(c.tensor_names), what)]

        return {
            **self.metadata(),
            "graph": {
                "name": r.text(g.Name(), "graph name", required=False),
                "inputs": signature(c.inputs, "graph inputs"),
                "outputs": signature(c.outputs, "graph outputs"),
                "nodes": len(c.node_ops),
                "ops": ops,
            },
            "graph_metadata": self._json(self.meta.GraphMetadataJson(), "graph metadata"),
            "tensors": [self._tensor_info(i, encodings.get(i)) for i in range(len(c.tensor_names))
                        if c.blobs[i] or i in encodings],
        }

    def _tensor_info(self, i: int, entry: "_EncodingEntry | None") -> dict[str, Any]:
        c = self.columns
        name, shape, dtype = c.tensor_names[i], c.shapes[i], c.dtypes[i]
        dense_bytes = math.prod(shape) * dtype.itemsize
        out: dict[str, Any] = {"name": name, "shape": list(shape), "dtype": dtype.name}
        if c.blobs[i]:
            out.update(storage="dense", stored_bytes=dense_bytes, dense_bytes=dense_bytes)
        elif entry is not None:
            stored = sum(math.prod(dims) * dtype.itemsize for _, _, _, dtype, dims in entry.arrays)
            out.update(storage=entry.kind, params=entry.params, stored_bytes=stored, dense_bytes=dense_bytes)
        return out


@dataclass(frozen=True)
class _EncodingEntry:
    tensor: int
    kind: str
    params: dict[str, Any]
    arrays: list[tuple[str, int, int, np.dtype, tuple[int, ...]]]  # name, blob, offset, dtype, shape


class _Columns:
    """The graph's columns (see Graph in edgepkg.fbs) as Python lists, checked for consistent
    lengths and ranges, so that indexing them later cannot fail."""

    def __init__(self, g: Any, r: "_Reader") -> None:
        self.g, self.r = g, r
        self.strings = _text_table(r.bytes(g.StringsAsNumpy()), r.array(g.StringLengthsAsNumpy()))
        self.dtypes = _dtypes(r.array(g.TensorDtypesAsNumpy()), "tensor")
        t = len(self.dtypes)
        self.shapes = _shapes(r.array(g.TensorRanksAsNumpy()), r.array(g.TensorDimsAsNumpy()), t, "tensor")
        places = self._column(g.TensorPlacesAsNumpy(), 2 * t, "tensor places")
        self.blobs, self.offsets = places[0::2], places[1::2]
        self.inputs = r.numbers(g.InputsAsNumpy())
        self.outputs = r.numbers(g.OutputsAsNumpy())
        ops = r.numbers(g.NodeOpsAsNumpy())
        n = len(ops)
        counts = self._column(g.NodeCountsAsNumpy(), 3 * n, "node counts")
        self.input_counts, self.output_counts, self.attribute_counts = counts[0::3], counts[1::3], counts[2::3]
        self.node_tensors = self._column(g.NodeTensorsAsNumpy(), sum(self.input_counts) + sum(self.output_counts),
                                         "node tensors")
        self.node_values = self._column(g.NodeAttributesAsNumpy(), sum(self.attribute_counts), "node attributes")
        if len(self.strings) < t + n:
            raise _Corrupt(f"the string table has {len(self.strings)} strings for {t} tensors and {n} nodes")
        self.tensor_names = self.strings[:t]
        self.node_names = self.strings[t:t + n]
        self.node_ops = [self.string(i, "an op type") for i in ops]
        self._values: list[tuple[str, Any]] | None = None

    def _column(self, vector: Any, length: int, what: str) -> list:
        values = self.r.numbers(vector)
        if len(values) != length:
            raise _Corrupt(f"{what}: {len(values)} entries, expected {length}")
        return values

    def string(self, index: int, what: str) -> str:
        if not 0 <= index < len(self.strings):
            raise _Corrupt(f"{what} is string {index}; the table has {len(self.strings)}")
        return self.strings[index]

    def values(self) -> list[tuple[str, Any]]:
        """The value pool: (name, value) pairs, decoded once."""
        if self._values is None:
            self._values = list(self._decode_values())
        return self._values

    def _decode_values(self) -> Iterator[tuple[str, Any]]:
        g, r = self.g, self.r
        names = r.numbers(g.ValueNamesAsNumpy())
        kinds = self._column(g.ValueKindsAsNumpy(), len(names), "value kinds")
        counts = self._column(g.ValueCountsAsNumpy(), 2 * len(names), "value counts")
        int_counts, float_counts = counts[0::2], counts[1::2]
        ints = self._column(g.ValueIntsAsNumpy(), sum(int_counts), "integer values")
        floats = self._column(g.ValueFloatsAsNumpy(), sum(float_counts), "float values")
        at_int = at_float = 0
        for name, kind, n_int, n_float in zip(names, kinds, int_counts, float_counts):
            name = self.string(name, "a value name")
            part_ints, part_floats = ints[at_int:at_int + n_int], floats[at_float:at_float + n_float]
            at_int += n_int
            at_float += n_float
            yield name, self._value(kind, part_ints, part_floats, f"value {name!r}")

    def _value(self, kind: int, ints: list[int], floats: list[float], what: str) -> Any:
        sequence = list if kind & ValueKind.LIST_FLAG else tuple
        base = kind & ~ValueKind.LIST_FLAG
        shape = (len(ints), len(floats))
        if base in _SCALAR_SHAPES and kind == base and shape == _SCALAR_SHAPES[base]:
            if base == ValueKind.INT:
                return ints[0]
            if base == ValueKind.FLOAT:
                return floats[0]
            if base == ValueKind.BOOL and ints[0] in (0, 1):
                return bool(ints[0])
            if base == ValueKind.STRING:
                return self.string(ints[0], what)
        elif base == ValueKind.INTS and not floats:
            return sequence(ints)
        elif base == ValueKind.FLOATS and not ints:
            return sequence(floats)
        elif base == ValueKind.STRINGS and not floats:
            return sequence(self.string(i, what) for i in ints)
        elif base == ValueKind.ACTIVATION and kind == base and len(ints) == 1:
            try:
                return Activation(self.string(ints[0], what), tuple(floats))
            except (KeyError, ValueError):
                raise _Corrupt(f"{what} is an invalid activation") from None
        raise _Corrupt(f"{what} has kind {kind} with {len(ints)} ints and {len(floats)} floats")

    def encodings(self) -> Iterator[_EncodingEntry]:
        g, r = self.g, self.r
        tensors = r.numbers(g.EncodingTensorsAsNumpy())
        e = len(tensors)
        kinds = self._column(g.EncodingKindsAsNumpy(), e, "encoding kinds")
        counts = self._column(g.EncodingCountsAsNumpy(), 2 * e, "encoding counts")
        param_counts, array_counts = counts[0::2], counts[1::2]
        params = self._column(g.EncodingParamsAsNumpy(), sum(param_counts), "encoding parameters")
        a = sum(array_counts)
        names = self._column(g.ArrayNamesAsNumpy(), a, "array names")
        places = self._column(g.ArrayPlacesAsNumpy(), 2 * a, "array places")
        blobs, offsets = places[0::2], places[1::2]
        dtypes = _dtypes(r.array(g.ArrayDtypesAsNumpy()), "encoding array")
        shapes = _shapes(r.array(g.ArrayRanksAsNumpy()), r.array(g.ArrayDimsAsNumpy()), a, "encoding array")
        if len(dtypes) != a:
            raise _Corrupt(f"array dtypes: {len(dtypes)} entries, expected {a}")
        values = self.values()
        if any(not 0 <= v < len(values) for v in params):
            raise _Corrupt(f"an encoding parameter refers to value {max(params)}; the graph has {len(values)}")
        at_param = at_array = 0
        for tensor, kind, n_param, n_array in zip(tensors, kinds, param_counts, array_counts):
            if not 0 <= tensor < len(self.tensor_names):
                raise _Corrupt(f"an encoding refers to tensor {tensor}; the graph has {len(self.tensor_names)}")
            entry_params = dict(values[i] for i in params[at_param:at_param + n_param])
            if len(entry_params) != n_param:
                raise _Corrupt(f"tensor {self.tensor_names[tensor]!r}: an encoding parameter is given twice")
            span = range(at_array, at_array + n_array)
            arrays = [(self.string(names[i], "an array name"), blobs[i], offsets[i], dtypes[i], shapes[i])
                      for i in span]
            at_param += n_param
            at_array += n_array
            yield _EncodingEntry(tensor, self.string(kind, "an encoding kind"), entry_params, arrays)


_SCALAR_SHAPES = {ValueKind.INT: (1, 0), ValueKind.FLOAT: (0, 1), ValueKind.BOOL: (1, 0), ValueKind.STRING: (1, 0)}


def _dtypes(codes: np.ndarray, what: str) -> list[np.dtype]:
    dtypes = [dtype_from_code(code) for code in codes.tolist()]
    if None in dtypes:
        raise _Corrupt(f"{what} {dtypes.index(None)} has an unknown dtype code")
    return dtypes


def _shapes(ranks: np.ndarray, dims: np.ndarray, count: int, what: str) -> list[tuple[int, ...]]:
    """Split the concatenated ``dims`` into ``count`` shapes of the given ranks."""
    if len(ranks) != count or int(ranks.sum()) != len(dims):
        raise _Corrupt(f"{what} ranks and shapes disagree in length")
    if dims.size and not (int(dims.min()) >= 0 and int(dims.max()) < _MAX_DIM):
        raise _Corrupt(f"a {what} has an invalid shape")
    flat = dims.tolist()
    ends = np.cumsum(ranks, dtype=np.int64).tolist()
    return [tuple(flat[end - rank:end]) for end, rank in zip(ends, ranks.tolist())]


def _text_table(data: bytes, lengths: np.ndarray) -> list[str]:
    """The strings of the given byte lengths, back to back in ``data``. ASCII (every real model)
    is decoded once and sliced; anything else string by string."""
    ends = np.cumsum(lengths, dtype=np.int64)
    if (int(ends[-1]) if ends.size else 0) != len(data):
        raise _Corrupt(f"the string table holds {len(data)} bytes, its lengths add up to a different size")
    bounds = [0] + ends.tolist()
    try:
        if data.isascii():
            text = data.decode("ascii")
            return [text[a:b] for a, b in zip(bounds, bounds[1:])]
        return [data[a:b].decode("utf-8") for a, b in zip(bounds, bounds[1:])]
    except UnicodeDecodeError:
        raise _Corrupt("a name is not UTF-8") from None


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

    def array(self, vector: Any) -> np.ndarray:
        """A scalar vector from a generated ``...AsNumpy()`` as a numpy array (empty when absent)."""
        if isinstance(vector, int):
            return np.zeros(0, np.int64)
        self.count(vector.nbytes, 1)
        return vector

    def bytes(self, vector: Any) -> bytes:
        return self.array(vector).tobytes()

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
