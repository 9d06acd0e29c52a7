"""Write a Graph as an .edgepkg file: header, flatbuffer, then the 64-byte aligned blob area."""
from __future__ import annotations

import json
import numbers
import os
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable

import flatbuffers
import numpy as np

from .. import __version__
from ..errors import PackageError
from ..fileio import atomic_path
from ..graph import Graph, Node, Tensor
from ..runtime.activations import Activation
from .fb import Accuracy as fb_accuracy
from .fb import Blob as fb_blob
from .fb import Graph as fb_graph
from .fb import Metadata as fb_metadata
from .fb import Model as fb_model
from .fb.ValueKind import ValueKind
from .layout import (ARRAY_ALIGN, CHECKSUM_OFFSET, FILE_IDENTIFIER, FORMAT_VERSION, HEADER_SIZE, SMALL_ARRAY,
                     Checksum, Header, align, deflate_graph_section, dtype_code)

Progress = Callable[[int, int], None]

# Keys save_package's ``metadata`` accepts; recipe and layers default to what compression left
# in graph.metadata["compression"].
DEFLATE_GRAPH_SECTION = True  # tests that edit the raw flatbuffer turn it off
METADATA_KEYS = ("source_sha256", "recipe", "layers", "accuracy", "accuracy_dataset")
_INT64 = (-(1 << 63), 1 << 63)


@dataclass(frozen=True)
class PackageInfo:
    """What save_package wrote."""
    path: Path
    file_size: int
    flatbuffer_size: int
    blob_area_size: int  # payload plus alignment padding
    blobs: int
    checksum: str  # hex xxh3-128 (see layout.Checksum)


def save_package(graph: Graph, path: str | os.PathLike, *, metadata: dict[str, Any] | None = None,
                 progress: Progress | None = None) -> PackageInfo:
    """Write ``graph`` to ``path`` as one .edgepkg file (layout: see edgesdk.package).

    Dense constants are stored as raw little-endian arrays, encoded ones as their encoding's
    arrays (never decoded). ``metadata`` may give ``source_sha256`` (hex digest of the model the
    graph came from), ``recipe`` and ``layers`` (JSON-able values or JSON text; default:
    ``graph.metadata["compression"]``),
    ``accuracy`` and ``accuracy_dataset``. ``progress(bytes_written, total_bytes)`` is called
    after the flatbuffer and after every blob. The file appears whole or not at all: on any
    failure the file previously at ``path`` is left as it was.
    """
    path = Path(path)
    builder = _ModelBuilder()
    fb = builder.build(graph, _package_metadata(graph, metadata or {}))
    fb, fb_inflated_size = deflate_graph_section(fb) if DEFLATE_GRAPH_SECTION else (fb, 0)
    blob_size = builder.blob_area_size  # the graph section follows the last blob: no padding
    header = Header(FORMAT_VERSION, HEADER_SIZE, HEADER_SIZE + blob_size + len(fb), blob_size, len(fb),
                    fb_inflated_size)
    digest = _write_atomically(path, lambda f: _write(f, header, fb, builder.arrays, progress))
    return PackageInfo(path, header.file_size, len(fb), builder.blob_area_size, len(builder.area.blobs) - 1,
                       digest.hex())


# -- file writing ------------------------------------------------------------------------------
def _write_atomically(path: Path, write: Callable[[IO[bytes]], bytes]) -> bytes:
    """Write a temp file beside ``path``, then rename it over: readers see the old file or the new
    one, never half of one, and an interrupted pack leaves nothing behind."""
    try:
        with atomic_path(path, fsync=False) as tmp, open(tmp, "r+b") as f:
            result = write(f)
            f.flush()
            os.fsync(f.fileno())  # the data must be on disk before the rename makes it visible
        return result
    except OSError as exc:
        raise PackageError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from None


def _write(f: IO[bytes], header: Header, fb: bytes, arrays: list[tuple[int, np.ndarray]],
           progress: Progress | None) -> bytes:
    """Stream the file once, hashing as it goes, then fill in the checksum field."""
    checksum = Checksum()
    head = header.pack()
    checksum.update_header(head)
    f.write(head)
    for offset, array in arrays:
        _emit(f, checksum, bytes(header.blob_offset + offset - f.tell()))
        _emit(f, checksum, array.reshape(-1).view(np.uint8))
        if progress:
            progress(f.tell(), header.file_size)
    _emit(f, checksum, bytes(header.fb_offset - f.tell()))
    _emit(f, checksum, fb)
    if progress:
        progress(f.tell(), header.file_size)
    digest = checksum.digest()
    f.seek(CHECKSUM_OFFSET)
    f.write(digest)
    return digest


def _emit(f: IO[bytes], checksum: Checksum, data: Any) -> None:
    f.write(data)
    checksum.update(data)


# -- metadata ----------------------------------------------------------------------------------
def _package_metadata(graph: Graph, given: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(given) - set(METADATA_KEYS))
    if unknown:
        raise PackageError(f"unknown package metadata {unknown}; save_package accepts {list(METADATA_KEYS)}")
    accuracy = given.get("accuracy")
    if accuracy is not None and (isinstance(accuracy, bool) or not isinstance(accuracy, numbers.Real)):
        raise PackageError(f"package metadata 'accuracy' must be a number, got {accuracy!r}")
    compression = graph.metadata.get("compression") or {}
    return {
        "producer": f"edgesdk {__version__}",
        "source_sha256": given.get("source_sha256"),
        "recipe": _json(given.get("recipe", compression.get("recipe")), "recipe"),
        "layers": _json(given.get("layers", compression.get("layers")), "layers"),
        "accuracy": accuracy,
        "accuracy_dataset": given.get("accuracy_dataset"),
        "graph_metadata": _json(_stored_graph_metadata(graph.metadata), "graph.metadata"),
    }


def _stored_graph_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    """graph.metadata as the package keeps it. The compression recipe and per-layer stats are
    stored once, as package metadata (the reader puts them back under "compression"); "package"
    describes the file a graph was loaded from, not the one being written; a source path keeps
    only the file name (a path on the packing machine means nothing on a phone and may say more
    than the user wants to ship)."""
    stored = {k: v for k, v in metadata.items() if k != "package"}
    compression = stored.get("compression")
    if isinstance(compression, dict):
        rest = {k: v for k, v in compression.items() if k not in ("recipe", "layers")}
        if rest:
            stored["compression"] = rest
        else:
            del stored["compression"]
    if isinstance(stored.get("source"), (str, os.PathLike)):
        stored["source"] = os.path.basename(os.fspath(stored["source"]))
    return stored


def _json(value: Any, what: str) -> str | None:
    """``value`` as JSON text; a string is taken to be JSON text already (Recipe.to_json())."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise PackageError(f"{what} is a string but not JSON text") from None
    try:
        return json.dumps(_rounded(value), default=_json_default, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise PackageError(f"{what} cannot be stored as JSON: {exc}") from None


def _rounded(value: Any) -> Any:
    """Floats cut to 7 significant digits (stats such as an RMS error do not need 17; a recipe's
    parameters are short decimals and stay exact)."""
    if isinstance(value, float):
        return float(f"{value:.7g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(v) for v in value]
    return value


def _json_default(value: Any) -> Any:
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


# -- blob area ---------------------------------------------------------------------------------
SMALL_BLOB_LIMIT = 1 << 16  # a shared blob of small arrays is closed at this size


class _BlobArea:
    """Places arrays in blobs: an array of SMALL_ARRAY bytes or more gets a blob of its own, smaller
    ones share a blob at ARRAY_ALIGN-aligned offsets. Blob 0 is the empty sentinel."""

    def __init__(self) -> None:
        self.blobs: list[list[tuple[int, np.ndarray]]] = [[]]  # per blob: (offset inside, array)
        self.sizes: list[int] = [0]
        self._shared: int | None = None  # index of the open shared blob

    def place(self, array: np.ndarray) -> tuple[int, int]:
        """(blob index, byte offset inside the blob) of ``array``, stored little-endian C order."""
        array = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
        if array.nbytes >= SMALL_ARRAY:
            return self._new_blob(array), 0
        if self._shared is None or self.sizes[self._shared] + array.nbytes > SMALL_BLOB_LIMIT:
            self._shared = self._new_blob(None)
        blob = self._shared
        offset = -(-self.sizes[blob] // ARRAY_ALIGN) * ARRAY_ALIGN
        self.blobs[blob].append((offset, array))
        self.sizes[blob] = offset + array.nbytes
        return blob, offset

    def _new_blob(self, array: np.ndarray | None) -> int:
        self.blobs.append([] if array is None else [(0, array)])
        self.sizes.append(0 if array is None else array.nbytes)
        return len(self.blobs) - 1

    def layout(self) -> tuple[list[tuple[int, int]], list[tuple[int, np.ndarray]], int]:
        """(blob table [(offset in the area, size)], arrays [(offset in the area, array)], area size)."""
        table, arrays, end = [(0, 0)], [], 0
        for contents, size in zip(self.blobs[1:], self.sizes[1:]):
            start = align(end)
            table.append((start, size))
            arrays.extend((start + offset, array) for offset, array in contents)
            end = start + size
        return table, arrays, end


# -- flatbuffer --------------------------------------------------------------------------------
class _ModelBuilder:
    """Builds the Model flatbuffer and lays out the blob area as arrays are referenced."""

    def __init__(self) -> None:
        self.b = flatbuffers.Builder(1 << 16)
        self.b.ForceDefaults(True)  # flatbuffers skips fields equal to their default, and -0.0 == 0.0
        self.area = _BlobArea()
        self.arrays: list[tuple[int, np.ndarray]] = []  # (offset in the blob area, array), after build
        self.blob_area_size = 0

    def build(self, graph: Graph, meta: dict[str, Any]) -> bytes:
        b = self.b
        graph_off = self._graph(graph)
        blobs = self._blob_vector()
        meta_off = self._metadata(meta)
        fb_model.Start(b)
        fb_model.AddFormatVersion(b, FORMAT_VERSION)
        fb_model.AddGraph(b, graph_off)
        fb_model.AddBlobs(b, blobs)
        fb_model.AddMetadata(b, meta_off)
        b.Finish(fb_model.End(b), file_identifier=FILE_IDENTIFIER)
        return bytes(b.Output())

    # -- helpers (flatbuffers objects must be complete before the table that refers to them)
    def _offsets(self, offsets: list[int]) -> int:
        self.b.StartVector(4, len(offsets), 4)
        for off in reversed(offsets):
            self.b.PrependUOffsetTRelative(off)
        return self.b.EndVector()

    def _numbers(self, values: Any, dtype: str, where: str) -> int:
        try:
            array = np.array(values, dtype=dtype).reshape(-1)
        except (OverflowError, ValueError, TypeError) as exc:
            raise PackageError(f"{where}: {values!r} does not fit {np.dtype(dtype).name} ({exc})") from None
        return self.b.CreateNumpyVector(array)

    # -- blobs
    def _blob_vector(self) -> int:
        table, self.arrays, self.blob_area_size = self.area.layout()
        fb_model.StartBlobsVector(self.b, len(table))
        for offset, size in reversed(table):
            fb_blob.CreateBlob(self.b, offset, size)
        return self.b.EndVector()

    # -- graph
    def _graph(self, graph: Graph) -> int:
        b = self.b
        columns = _GraphColumns(graph, self.area)
        name = b.CreateString(graph.name)
        vectors = [(add, self._numbers(values, dtype, where)) for add, values, dtype, where in columns.vectors()]
        fb_graph.Start(b)
        fb_graph.AddName(b, name)
        for add, vector in vectors:
            add(b, vector)
        return fb_graph.End(b)

    # -- metadata
    def _metadata(self, meta: dict[str, Any]) -> int:
        b = self.b
        strings = {key: b.CreateString(meta[key]) for key in
                   ("producer", "source_sha256", "recipe", "layers", "accuracy_dataset",
                    "graph_metadata") if meta[key] is not None}
        accuracy = 0
        if meta["accuracy"] is not None:
            fb_accuracy.Start(b)
            fb_accuracy.AddValue(b, float(meta["accuracy"]))
            if "accuracy_dataset" in strings:
                fb_accuracy.AddDataset(b, strings["accuracy_dataset"])
            accuracy = fb_accuracy.End(b)
        fb_metadata.Start(b)
        for key, add in (("producer", fb_metadata.AddProducer),
                         ("source_sha256", fb_metadata.AddSourceSha256),
                         ("recipe", fb_metadata.AddRecipeJson), ("layers", fb_metadata.AddLayersJson),
                         ("graph_metadata", fb_metadata.AddGraphMetadataJson)):
            if key in strings:
                add(b, strings[key])
        if accuracy:
            fb_metadata.AddAccuracy(b, accuracy)
        return fb_metadata.End(b)


class _GraphColumns:
    """A Graph as the column vectors of edgepkg.fbs's Graph table (Python lists until built)."""

    def __init__(self, graph: Graph, area: _BlobArea) -> None:
        self.area = area
        tensors = list(graph.tensors.values())
        self.index = {name: i for i, name in enumerate(graph.tensors)}
        # tensor names first, then node names, then every other string once
        self.strings: list[str] = [t.name for t in tensors] + [n.name for n in graph.nodes]
        self.string_ids: dict[str, int] = {}
        self.values: dict[tuple[str, str, str], int] = {}  # distinct (name, value) -> value index
        self.v_names: list[int] = []
        self.v_kinds: list[int] = []
        self.v_int_counts: list[int] = []
        self.v_float_counts: list[int] = []
        self.v_ints: list[int] = []
        self.v_floats: list[float] = []
        self._tensors(tensors)
        self.inputs = _indices(graph.inputs, self.index, "graph input")
        self.outputs = _indices(graph.outputs, self.index, "graph output")
        self._nodes(graph.nodes)
        self._encodings(tensors)

    def vectors(self) -> list[tuple[Callable, Any, str, str]]:
        """(Graph.Add<Field>, values, dtype, what) for every column."""
        encoded = [s.encode("utf-8") for s in self.strings]
        too_long = [s for s in encoded if len(s) > 0xFFFF]
        if too_long:
            raise PackageError(f"a name or string of {len(too_long[0])} bytes ({too_long[0][:40]!r}...); "
                               f"packages hold strings of at most 65535 bytes")
        g = fb_graph
        return [
            (g.AddStrings, np.frombuffer(b"".join(encoded), np.uint8), "u1", "string table"),
            (g.AddStringLengths, [len(s) for s in encoded], "<u2", "string table"),
            (g.AddTensorDtypes, self.t_dtypes, "i1", "tensor dtypes"),
            (g.AddTensorRanks, self.t_ranks, "u1", "tensor ranks"),
            (g.AddTensorDims, _dims(self.t_dims, "a tensor"), "<i4", "tensor shapes"),
            (g.AddTensorPlaces, _pairs(self.t_blobs, self.t_offsets), "<u4", "tensor places"),
            (g.AddInputs, self.inputs, "<i4", "graph inputs"),
            (g.AddOutputs, self.outputs, "<i4", "graph outputs"),
            (g.AddNodeOps, self.n_ops, "<u4", "node ops"),
            (g.AddNodeCounts, _counts(self.n_inputs, self.n_outputs, self.n_attributes), "<u2", "node counts"),
            (g.AddNodeTensors, self.n_tensors, "<i4", "node tensors"),
            (g.AddNodeAttributes, self.n_values, "<u4", "node attributes"),
            (g.AddValueNames, self.v_names, "<u4", "value names"),
            (g.AddValueKinds, self.v_kinds, "u1", "value kinds"),
            (g.AddValueCounts, _counts(self.v_int_counts, self.v_float_counts), "<u2", "value counts"),
            (g.AddValueInts, self.v_ints, "<i8", "integer values"),
            (g.AddValueFloats, self.v_floats, "<f8", "float values"),
            (g.AddEncodingTensors, self.e_tensors, "<u4", "encoding tensors"),
            (g.AddEncodingKinds, self.e_kinds, "<u4", "encoding kinds"),
            (g.AddEncodingCounts, _counts(self.e_params, self.e_arrays), "<u2", "encoding counts"),
            (g.AddEncodingParams, self.e_values, "<u4", "encoding parameters"),
            (g.AddArrayNames, self.a_names, "<u4", "array names"),
            (g.AddArrayPlaces, _pairs(self.a_blobs, self.a_offsets), "<u4", "array places"),
            (g.AddArrayDtypes, self.a_dtypes, "i1", "array dtypes"),
            (g.AddArrayRanks, self.a_ranks, "u1", "array ranks"),
            (g.AddArrayDims, _dims(self.a_dims, "an encoded array"), "<i4", "array shapes"),
        ]

    def string(self, text: str) -> int:
        if text not in self.string_ids:
            self.string_ids[text] = len(self.strings)
            self.strings.append(text)
        return self.string_ids[text]

    def _tensors(self, tensors: list[Tensor]) -> None:
        self.t_dtypes, self.t_ranks, self.t_dims, self.t_blobs, self.t_offsets = [], [], [], [], []
        for tensor in tensors:
            self.t_dtypes.append(_storable(tensor.dtype, f"tensor {tensor.name!r}"))
            self.t_ranks.append(_rank(tensor.shape, f"tensor {tensor.name!r}"))
            self.t_dims.extend(tensor.shape)
            blob = offset = 0
            if tensor.encoding is None and tensor.is_constant:  # dense: .data is the stored array
                value = tensor.data
                if value.dtype != tensor.dtype or value.shape != tensor.shape:
                    raise PackageError(f"tensor {tensor.name!r} is {tensor.dtype}{list(tensor.shape)} but "
                                       f"holds {value.dtype}{list(value.shape)} data")
                blob, offset = self.area.place(value)
            self.t_blobs.append(blob)
            self.t_offsets.append(offset)

    def _nodes(self, nodes: list[Node]) -> None:
        self.n_ops, self.n_inputs, self.n_outputs, self.n_attributes, self.n_tensors, self.n_values = \
            [], [], [], [], [], []
        for node in nodes:
            where = f"node {node.name!r}"
            self.n_ops.append(self.string(node.op))
            self.n_inputs.append(len(node.inputs))
            self.n_outputs.append(len(node.outputs))
            self.n_attributes.append(len(node.attrs))
            self.n_tensors.extend(_indices(node.inputs, self.index, where, optional=True))
            self.n_tensors.extend(_indices(node.outputs, self.index, where, optional=True))
            self.n_values.extend(self.value(k, v, f"attribute {k!r} of {where}") for k, v in node.attrs.items())

    def _encodings(self, tensors: list[Tensor]) -> None:
        self.e_tensors, self.e_kinds, self.e_params, self.e_values, self.e_arrays = [], [], [], [], []
        self.a_names, self.a_blobs, self.a_offsets, self.a_dtypes, self.a_ranks, self.a_dims = \
            [], [], [], [], [], []
        for tensor in tensors:
            if tensor.encoding is None:
                continue
            kind, shape, params, arrays = tensor.encoding.parts()
            where = f"tensor {tensor.name!r} ({kind})"
            if tuple(shape) != tensor.shape:
                raise PackageError(f"{where}: the encoding's shape {list(shape)} is not the tensor's "
                                   f"{list(tensor.shape)}")
            self.e_tensors.append(self.index[tensor.name])
            self.e_kinds.append(self.string(kind))
            self.e_params.append(len(params))
            for name, value in params.items():
                if _scalar_kind(value) is None:
                    raise PackageError(f"{where} parameter {name!r}: {value!r} is not an int, float, bool or str")
                self.e_values.append(self.value(name, value, f"{where} parameter {name!r}"))
            self.e_arrays.append(len(arrays))
            for name, array in arrays.items():
                self.a_names.append(self.string(name))
                self.a_dtypes.append(_storable(array.dtype, f"{where} array {name!r}"))
                self.a_ranks.append(_rank(array.shape, f"{where} array {name!r}"))
                self.a_dims.extend(array.shape)
                blob, offset = self.area.place(array)
                self.a_blobs.append(blob)
                self.a_offsets.append(offset)

    # -- values
    def value(self, name: str, value: Any, where: str) -> int:
        """The index of (name, value) in the value pool, adding it when new."""
        # repr tells apart what == merges: 1, 1.0 and True; 0.0 and -0.0; tuples and lists
        key = (name, type(value).__name__, repr(value))
        if key not in self.values:
            kind, ints, floats = self._encode(value, where)
            self.values[key] = len(self.v_names)
            self.v_names.append(self.string(name))
            self.v_kinds.append(kind)
            self.v_int_counts.append(len(ints))
            self.v_float_counts.append(len(floats))
            self.v_ints.extend(ints)
            self.v_floats.extend(floats)
        return self.values[key]

    def _encode(self, value: Any, where: str) -> tuple[int, list[int], list[float]]:
        """(ValueKind, ints, floats) for an attribute or parameter value."""
        if isinstance(value, Activation):
            return ValueKind.ACTIVATION, [self.string(value.kind)], [float(p) for p in value.params]
        if isinstance(value, (tuple, list)):
            return self._encode_list(value, where)
        kind = _scalar_kind(value)
        if kind is None:
            raise PackageError(f"{where}: cannot store a {type(value).__name__} ({value!r}) in a package")
        if kind == ValueKind.FLOAT:
            return kind, [], [float(value)]
        if kind == ValueKind.STRING:
            return kind, [self.string(value)], []
        return kind, [_int64(int(value), where)], []

    def _encode_list(self, values: tuple | list, where: str) -> tuple[int, list[int], list[float]]:
        kinds = {_scalar_kind(v) for v in values} or {ValueKind.INT}  # () is stored as an empty int tuple
        if len(kinds) > 1 or not kinds <= {ValueKind.INT, ValueKind.FLOAT, ValueKind.STRING}:
            raise PackageError(f"{where}: cannot store {values!r}; lists must hold only ints, only "
                               f"floats or only strings")
        kind = kinds.pop()
        flag = ValueKind.LIST_FLAG if isinstance(values, list) else 0
        if kind == ValueKind.FLOAT:
            return ValueKind.FLOATS | flag, [], [float(v) for v in values]
        if kind == ValueKind.STRING:
            return ValueKind.STRINGS | flag, [self.string(v) for v in values], []
        return ValueKind.INTS | flag, [_int64(int(v), where) for v in values], []


def _int64(value: int, where: str) -> int:
    if not _INT64[0] <= value < _INT64[1]:
        raise PackageError(f"{where}: {value} does not fit a 64-bit integer")
    return value


def _rank(shape: tuple[int, ...], where: str) -> int:
    if len(shape) > 255:
        raise PackageError(f"{where} has rank {len(shape)}; packages hold at most 255")
    return len(shape)


def _dims(values: list[int], what: str) -> list[int]:
    if values and max(values) >= 1 << 31:
        raise PackageError(f"{what} has a dimension of {max(values)}; packages hold dimensions below 2^31")
    return values


def _pairs(first: list[int], second: list[int]) -> list[int]:
    """Two columns interleaved: a0, b0, a1, b1, ..."""
    return [x for pair in zip(first, second) for x in pair]


def _counts(*columns: list[int]) -> list[int]:
    """Count columns interleaved (per entry: the first column's count, the second's, ...)."""
    top = max((max(c) for c in columns if c), default=0)
    if top > 0xFFFF:
        raise PackageError(f"a node, value or encoding with {top} entries (inputs, list elements or "
                           f"arrays); packages hold at most 65535")
    return [x for entry in zip(*columns) for x in entry]


def _scalar_kind(value: Any) -> int | None:
    if isinstance(value, (bool, np.bool_)):  # before int: bool is an int subclass
        return ValueKind.BOOL
    if isinstance(value, numbers.Integral):
        return ValueKind.INT
    if isinstance(value, numbers.Real):
        return ValueKind.FLOAT
    if isinstance(value, str):
        return ValueKind.STRING
    return None


def _storable(dtype: np.dtype, where: str) -> int:
    code = dtype_code(dtype)
    if code is None:
        raise PackageError(f"{where}: dtype {np.dtype(dtype)} cannot be stored in a package")
    return code


def _indices(names: list[str], index: dict[str, int], where: str, optional: bool = False) -> list[int]:
    """Tensor indices for ``names``; with ``optional``, "" (omitted) becomes -1."""
    missing = [n for n in names if n not in index and not (optional and n == "")]
    if missing:
        raise PackageError(f"{where} refers to tensor {missing[0]!r}, which the graph does not have")
    return [index[n] if n in index else -1 for n in names]
