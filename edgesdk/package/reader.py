"""Read an .edgepkg file: check it, then build a Graph whose constants are views of its bytes.

The file is read once into private, 64-byte aligned memory: constants are views of that buffer,
and the checksum and every check see exactly the bytes later used. (Mapping the file instead
would tie every constant to the file: a package overwritten in place, ``cp new.edgepkg
model.edgepkg``, would kill the process with SIGBUS at its next run.)

The Python flatbuffers runtime has no verifier, so this module is one: the header, checksum and
every blob are checked before any array exists, every vector length is charged against a budget
the size of the flatbuffer (a corrupt length cannot loop for ages or allocate gigabytes), and any
exception a corrupt buffer still trips becomes a one-line :class:`PackageError`. A sound file can
still lie (a checksum is no signature): the graph and every encoding are then checked against
what the backends take for granted (:mod:`.validate`, :meth:`Encoding.validate`).
"""
from __future__ import annotations

import json
import math
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from queue import SimpleQueue
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from .. import __version__
from ..compress.encodings import Encoding, encoding_from_parts
from ..errors import EdgeSDKError, ModelTooLargeError, PackageError
from ..graph import Graph, Node, Tensor
from ..runtime.activations import Activation
from ..runtime.arena import aligned_host_buffer
from ..runtime.shapes import infer_shapes
from .fb.Model import Model
from .fb.ValueKind import ValueKind
from .layout import (ALIGN, ARRAY_ALIGN, FILE_IDENTIFIER, FORMAT_VERSION, HEADER_SIZE, MAGIC, Header,
                     dtype_from_code, file_checksum, inflate_graph_section)
from ..ops.quantize import QUANTIZED_INPUTS
from .validate import Invalid, check_graph

_MAX_DIM = 1 << 40  # no real tensor has a larger dimension; a corrupt one must not overflow math
_WAY_OUT = "re-pack the model with `edgesdk pack`"


class _Corrupt(Exception):
    """A structural problem; the caller names the file."""


def load_package(path: str | os.PathLike, *, verify: bool = True) -> Graph:
    """The Graph stored in the package at ``path``.

    The file is read once into private, 64-byte aligned memory and constants are views of it
    (encoded ones rebuilt over views): nothing is copied after that read, and nothing refers to
    the file afterwards, so it may be overwritten or deleted while the graph is in use. Header,
    identifier, format version, file size and every blob's and array's bounds, alignment and
    size are checked before any array exists. A large blob area is read on a second thread while
    the graph is built (the read releases the GIL); the whole-file checksum of the bytes read
    (skipped with ``verify=False``) is checked before the graph is returned. The graph and every
    encoding are then validated against what the backends assume (:mod:`.validate`,
    :meth:`Encoding.validate`). The package metadata is in ``graph.metadata["package"]``. Any
    problem is one :class:`PackageError` line.
    """
    return _guarded(path, verify, True, lambda pkg: pkg.graph())


def read_package_info(path: str | os.PathLike, *, verify: bool = True) -> dict[str, Any]:
    """Package metadata, graph signature, op counts and every constant's storage (dense or
    encoding kind and parameters, stored and dense bytes), without building any array (with
    ``verify=False`` the blob area is not even read)."""
    return _guarded(path, verify, verify, lambda pkg: pkg.info())


def _guarded(path: str | os.PathLike, verify: bool, blobs: bool, read: Callable[["_Package"], Any]) -> Any:
    contents: _Contents | None = None
    try:
        contents = _Contents(Path(path), read_blobs=blobs or verify)
        result = read(_Package(contents))
        contents.wait()
        if verify:
            contents.check()
        return result
    except PackageError:
        _prefer_file_error(contents, verify)
        raise
    except ModelTooLargeError as exc:  # too large for this machine is no fault of the file: kept typed
        _prefer_file_error(contents, verify)
        raise ModelTooLargeError(_one_line(str(exc)), tensor=exc.tensor, nbytes=exc.nbytes, limit=exc.limit) from None
    except (_Corrupt, Invalid) as exc:
        _prefer_file_error(contents, verify)
        raise PackageError(f"{path}: corrupt package: {_one_line(str(exc))}; {_WAY_OUT}") from None
    except Exception as exc:  # whatever else a crafted buffer trips: still one line, never a trace
        _prefer_file_error(contents, verify)
        detail = str(exc).splitlines()[0] if str(exc) else ""
        raise PackageError(f"{path}: corrupt package ({type(exc).__name__}: {detail}); {_WAY_OUT}") from None


# Names and strings come from the file and may hold line breaks: shown escaped, the error stays one line.
_LINE_BREAKS = {ord(c): repr(c)[1:-1] for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"}


def _one_line(text: str) -> str:
    return text.translate(_LINE_BREAKS)


def _prefer_file_error(contents: "_Contents | None", verify: bool) -> None:
    """A damaged file usually also trips a structural check; a failed read or the checksum says
    it best."""
    if contents is not None:
        contents.wait()
        if verify:
            contents.check()


# -- the file ----------------------------------------------------------------------------------
class _Contents:
    """The package's bytes in memory this process owns, read once.

    Reads and checks the header, allocates the buffer (64-byte aligned, so blob offsets are
    aligned addresses), reads the graph section, then the blob area (when ``read_blobs``): on a
    second thread when it is large, while the caller builds the graph (the read releases the
    GIL). ``data`` is a read-only view of the buffer: every array handed out is a view of it and
    keeps it alive, and the checksum (:meth:`check`) covers exactly these bytes.
    """

    def __init__(self, path: Path, read_blobs: bool) -> None:
        self.path = path
        self.file = _open_file(path)
        self.reader: threading.Event | None = None  # set when the background read is over
        self.error: BaseException | None = None
        try:
            self._read_header()
            self._read(self.header.fb_offset, self.header.file_size)
            if not read_blobs:
                self.file.close()
            elif self.header.blob_size < _BACKGROUND_READ:  # a thread costs more than the read
                self._read_blobs()
            else:
                self.reader = _WORKER.submit(self._read_blobs)
        except BaseException:
            self.file.close()
            raise
        self.data = self.buffer.view()
        self.data.flags.writeable = False

    def _read_header(self) -> None:
        path, f = self.path, self.file
        size = os.fstat(f.fileno()).st_size
        head = f.read(HEADER_SIZE)
        start = head[:len(MAGIC)]
        if not start or not MAGIC.startswith(start):  # a shorter prefix is a truncated package
            raise PackageError(f"{path}: not an edgesdk package (no EDGEPKG header)")
        if len(head) < HEADER_SIZE:
            raise PackageError(f"{path}: truncated package: {len(head)} bytes, less than the "
                               f"{HEADER_SIZE}-byte header")
        self.header = h = Header.unpack(head)
        _check_header(path, h, size)
        self.buffer = aligned_host_buffer(h.file_size, ALIGN)
        self.buffer[:HEADER_SIZE] = np.frombuffer(head, np.uint8)

    def _read(self, begin: int, end: int) -> None:
        """buffer[begin:end) from the file: one call unless over 2 GB, or the file shrinks (is being
        rewritten) under us."""
        self.file.seek(begin)
        view, at = memoryview(self.buffer), begin
        while at < end:
            n = self.file.readinto(view[at:end])
            if not n:
                raise PackageError(f"{self.path}: truncated package: the file ended at byte {at}, the header "
                                   f"says {self.header.file_size} (was it overwritten while being read?)")
            at += n

    def _read_blobs(self) -> None:
        try:
            self._read(self.header.blob_offset, self.header.fb_offset)
        except BaseException as exc:  # raised again on the caller's thread, by wait()
            self.error = exc if isinstance(exc, PackageError) else PackageError(
                f"{self.path}: cannot read the package ({getattr(exc, 'strerror', None) or exc})")
        finally:
            self.file.close()

    def graph_section(self) -> np.ndarray:
        return self.data[self.header.fb_offset:]

    def wait(self) -> None:
        """Until the blob area is in memory (array contents are read only after this)."""
        if self.reader is not None:
            self.reader.wait()
            self.reader = None
        if self.error is not None:
            raise self.error

    def check(self) -> None:
        """The checksum of the bytes read (the blob area included) against the header's."""
        self.wait()
        if file_checksum(memoryview(self.data)) != self.header.checksum:
            raise PackageError(f"{self.path}: checksum mismatch: the package is corrupt; copy or pack it again")


_BACKGROUND_READ = 1 << 20  # blob areas from this size are read on a thread


class _Worker:
    """One long-lived daemon thread for the background reads (starting a thread per load cost a
    quarter of a millisecond, a tenth of opening MobileNetV2). Jobs run one at a time."""

    def __init__(self) -> None:
        self.jobs: SimpleQueue[tuple[Callable[[], None], threading.Event]] = SimpleQueue()
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()

    def submit(self, job: Callable[[], None]) -> threading.Event:
        """Run ``job`` (which must not raise) on the worker; the event is set when it is over."""
        done = threading.Event()
        with self.lock:
            if self.thread is None or not self.thread.is_alive():  # first use, or a forked child
                self.thread = threading.Thread(target=self._run, name="edgesdk-package-reader", daemon=True)
                self.thread.start()
            self.jobs.put((job, done))
        return done

    def _run(self) -> None:
        while True:
            job, done = self.jobs.get()
            try:
                job()
            finally:
                done.set()


_WORKER = _Worker()


def _open_file(path: Path) -> Any:
    try:
        return open(path, "rb", buffering=0)
    except FileNotFoundError:
        raise PackageError(f"{path}: no such file") from None
    except OSError as exc:
        raise PackageError(f"{path}: cannot read the package ({exc.strerror or exc})") from None


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


class _Package:
    """A checked package in memory: header, flatbuffer root, blob table."""

    def __init__(self, contents: _Contents) -> None:
        self.contents, self.path, self.header = contents, contents.path, contents.header
        h = self.header
        fb = inflate_graph_section(contents.graph_section(), h.fb_inflated_size)
        if fb is None:
            raise _Corrupt("the graph section does not inflate to the size its header gives")
        fb = bytes(fb)  # the flatbuffers runtime slices its buffer and decodes the slices
        if fb[4:8] != FILE_IDENTIFIER:
            raise PackageError(f"{self.path}: not an edgesdk package (flatbuffer identifier "
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
        """A read-only view of dtype[shape] at ``offset`` inside blob ``blob`` of the file's
        bytes: no copy."""
        if not 0 < blob < len(self.blobs):
            raise _Corrupt(f"{what} refers to blob {blob}; the package has {len(self.blobs)}")
        if dtype is None:
            raise _Corrupt(f"{what} has an unknown dtype")
        start, size = self.blobs[blob]
        count = math.prod(shape)
        if offset % ARRAY_ALIGN or offset + count * dtype.itemsize > size:
            raise _Corrupt(f"{what}: {dtype.name}{list(shape)} at offset {offset} does not fit blob {blob} "
                           f"({size} bytes) or is not {ARRAY_ALIGN}-byte aligned")
        return np.frombuffer(self.contents.data, dtype, count, start + offset).reshape(shape)

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
                encoding = self._encoding(encodings[i], name, shape)
                if dtype != encoding.dtype:  # float32, or int8 for int8 CSR: what decode() gives
                    raise _Corrupt(f"tensor {name!r} is declared {dtype} but its {encoding.kind} encoding "
                                   f"decodes to {encoding.dtype}")
                tensors.append(Tensor.trusted(name, shape, dtype, encoding=encoding))
            else:
                tensors.append(Tensor.trusted(name, shape, dtype))
        graph.tensors = {t.name: t for t in tensors}
        if len(graph.tensors) != len(tensors):
            raise _Corrupt("duplicate tensor names")
        if "" in graph.tensors:  # "" marks an omitted input: the writer never stores a tensor so named
            raise _Corrupt("a tensor has an empty name")
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
        integer = [t for t in tensors if t.encoding is not None and t.dtype != np.float32]
        if integer or any(node.op in QUANTIZED_INPUTS for node in graph.nodes):
            # check_graph reads the integer ops' scales, zero points and int8 weights (graph.const
            # decodes them): they must be in memory, and encoded ones sound, before it runs
            self.contents.wait()
            _check_encodings(integer)
        _check_runnable(graph)
        self.contents.wait()  # the encodings' checks read their arrays
        _check_encodings(t for t in tensors if t.encoding is not None and t.dtype == np.float32)
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
    unknown = [i for i, dtype in enumerate(dtypes) if dtype is None]  # not `None in`: float64 == None
    if unknown:
        raise _Corrupt(f"{what} {unknown[0]} has an unknown dtype code")
    return dtypes


def _shapes(ranks: np.ndarray, dims: np.ndarray, count: int, what: str) -> list[tuple[int, ...]]:
    """Split the concatenated ``dims`` into ``count`` shapes of the given ranks."""
    if len(ranks) != count or int(ranks.sum()) != len(dims):
        raise _Corrupt(f"{what} ranks and shapes disagree in length")
    if dims.size and not (int(dims.min()) >= 0 and int(dims.max()) < _MAX_DIM):
        raise _Corrupt(f"an invalid shape among the {what} shapes")
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
    shapes that follow from the attributes) and what the importer guarantees of the graphs it
    builds (:func:`check_graph`: arity, attribute kinds, dtypes, single assignment), so that a
    crafted package fails here, in one line, rather than in a backend. Linear: the stored node
    order must already be topological."""
    available = {name for name, t in graph.tensors.items() if t.is_constant} | set(graph.inputs)
    for node in graph.nodes:
        missing = [i for i in node.inputs if i and i not in available]
        if missing:
            raise _Corrupt(f"node {node.name!r} reads {missing[0]!r} before anything computes it")
        available.update(o for o in node.outputs if o)
    missing = [o for o in graph.outputs if o not in available]
    if missing:
        raise _Corrupt(f"graph output {missing[0]!r} is never computed")
    check_graph(graph)
    try:
        infer_shapes(graph)
    except ModelTooLargeError:  # a sound package too large for this machine: say so, typed
        raise
    except EdgeSDKError as exc:
        raise _Corrupt(str(exc)) from None


def _check_encodings(tensors: Iterable[Tensor]) -> None:
    """Every encoding against its tensor (Encoding.validate): bit widths, dtypes, stream lengths,
    index ranges; what the kernels that read encodings directly cannot check themselves."""
    for tensor in tensors:
        if tensor.encoding is not None:
            try:
                tensor.encoding.validate()
            except EdgeSDKError as exc:
                raise _Corrupt(f"tensor {tensor.name!r} ({tensor.encoding.kind}): {exc}") from None


def _indices(indices: list[int], n: int, what: str, optional: bool = False) -> list[int]:
    low = -1 if optional else 0
    bad = [i for i in indices if not low <= i < n]
    if bad:
        raise _Corrupt(f"{what} refer to tensor {bad[0]}; the graph has {n}")
    return indices


def _names(indices: list[int], names: list[str], what: str, optional: bool = False) -> list[str]:
    return [names[i] if i >= 0 else "" for i in _indices(indices, len(names), what, optional)]
