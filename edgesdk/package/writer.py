"""Write a Graph as an .edgepkg file: header, flatbuffer, then the 64-byte aligned blob area."""
from __future__ import annotations

import datetime
import json
import numbers
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable

import flatbuffers
import numpy as np

from .. import __version__
from ..errors import PackageError
from ..graph import Graph, Node, Tensor
from ..runtime.activations import Activation
from .fb import Accuracy as fb_accuracy
from .fb import ActivationValue as fb_activation
from .fb import Attribute as fb_attribute
from .fb import Blob as fb_blob
from .fb import BoolValue as fb_bool
from .fb import Encoding as fb_encoding
from .fb import FloatList as fb_float_list
from .fb import FloatValue as fb_float
from .fb import Graph as fb_graph
from .fb import IntList as fb_int_list
from .fb import IntValue as fb_int
from .fb import Metadata as fb_metadata
from .fb import Model as fb_model
from .fb import NamedBlob as fb_named_blob
from .fb import Node as fb_node
from .fb import Param as fb_param
from .fb import StringList as fb_string_list
from .fb import StringValue as fb_string
from .fb import Tensor as fb_tensor
from .fb.AttributeValue import AttributeValue
from .fb.ScalarValue import ScalarValue
from .fb.Sequence import Sequence
from .layout import (CHECKSUM_OFFSET, FILE_IDENTIFIER, FORMAT_VERSION, HEADER_SIZE, Checksum, Header, align,
                     deflate_graph_section, dtype_code)

Progress = Callable[[int, int], None]

# Keys save_package's ``metadata`` accepts; recipe and layers default to what compression left
# in graph.metadata["compression"].
DEFLATE_GRAPH_SECTION = True  # tests that edit the raw flatbuffer turn it off
METADATA_KEYS = ("source_sha256", "recipe", "layers", "accuracy", "accuracy_dataset")
_INT64 = (-(1 << 63), 1 << 63)
_SCALARS = {"IntValue": (fb_int, int), "FloatValue": (fb_float, float), "BoolValue": (fb_bool, bool)}


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
    blob_offset = align(HEADER_SIZE + len(fb))
    header = Header(FORMAT_VERSION, HEADER_SIZE, blob_offset + builder.blob_area_size, HEADER_SIZE,
                    len(fb), blob_offset, builder.blob_area_size, fb_inflated_size)
    digest = _write_atomically(path, lambda f: _write(f, header, fb, builder.arrays, progress))
    return PackageInfo(path, header.file_size, len(fb), builder.blob_area_size, len(builder.arrays),
                       digest.hex())


# -- file writing ------------------------------------------------------------------------------
def _write_atomically(path: Path, write: Callable[[IO[bytes]], bytes]) -> bytes:
    """Write a temp file beside ``path``, then rename it over: readers see the old file or the new
    one, never half of one, and an interrupted pack leaves nothing behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "xb") as f:  # new file: O_EXCL, and the umask applies as for any file
            result = write(f)
            f.flush()
            os.fsync(f.fileno())  # the data must be on disk before the rename makes it visible
        os.replace(tmp, path)
        return result
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise PackageError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _write(f: IO[bytes], header: Header, fb: bytes, arrays: list[tuple[int, np.ndarray]],
           progress: Progress | None) -> bytes:
    """Stream the file once, hashing as it goes, then fill in the checksum field."""
    checksum = Checksum()
    head = header.pack()
    checksum.update_header(head)
    f.write(head)
    _emit(f, checksum, fb)
    if progress:
        progress(f.tell(), header.file_size)
    for offset, array in arrays:
        _emit(f, checksum, bytes(header.blob_offset + offset - f.tell()))
        _emit(f, checksum, array.reshape(-1).view(np.uint8))
        if progress:
            progress(f.tell(), header.file_size)
    _emit(f, checksum, bytes(header.file_size - f.tell()))  # the blob area of a graph without blobs
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
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "source_sha256": given.get("source_sha256"),
        "recipe": _json(given.get("recipe", compression.get("recipe")), "recipe"),
        "layers": _json(given.get("layers", compression.get("layers")), "layers"),
        "accuracy": accuracy,
        "accuracy_dataset": given.get("accuracy_dataset"),
        # "package" describes the file a graph was loaded from, not the one being written
        "graph_metadata": _json({k: v for k, v in graph.metadata.items() if k != "package"}, "graph.metadata"),
    }


def _json(value: Any, what: str) -> str | None:
    """``value`` as JSON text; a string is taken to be JSON text already (Recipe.to_json())."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            json.loads(value)
        except ValueError:
            raise PackageError(f"{what} is a string but not JSON text") from None
        return value
    try:
        return json.dumps(value, default=_json_default)
    except (TypeError, ValueError) as exc:
        raise PackageError(f"{what} cannot be stored as JSON: {exc}") from None


def _json_default(value: Any) -> Any:
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


# -- flatbuffer --------------------------------------------------------------------------------
class _ModelBuilder:
    """Builds the Model flatbuffer and lays out the blob area as arrays are referenced."""

    def __init__(self) -> None:
        self.b = flatbuffers.Builder(1 << 16)
        self.b.ForceDefaults(True)  # flatbuffers skips fields equal to their default, and -0.0 == 0.0
        self.arrays: list[tuple[int, np.ndarray]] = []  # (offset in the blob area, C-order LE array)
        self.blob_area_size = 0
        self.attributes: dict[tuple[str, str, str], int] = {}  # distinct attribute -> its pool index
        self.attribute_tables: list[int] = []

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

    def _strings(self, values: list[str]) -> int:
        return self._offsets([self.b.CreateString(v) for v in values])

    # -- blobs
    def _add_array(self, array: np.ndarray) -> int:
        """Place ``array`` in the blob area; returns its index in Model.blobs (1-based)."""
        array = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
        offset = align(self.blob_area_size)
        self.arrays.append((offset, array))
        self.blob_area_size = offset + array.nbytes
        return len(self.arrays)

    def _blob_vector(self) -> int:
        places = [(0, 0)] + [(offset, array.nbytes) for offset, array in self.arrays]  # [0]: sentinel
        fb_model.StartBlobsVector(self.b, len(places))
        for offset, size in reversed(places):
            fb_blob.CreateBlob(self.b, offset, size)
        return self.b.EndVector()

    # -- graph
    def _graph(self, graph: Graph) -> int:
        b = self.b
        index = {name: i for i, name in enumerate(graph.tensors)}
        name = b.CreateString(graph.name)
        tensors = self._offsets([self._tensor(t) for t in graph.tensors.values()])
        inputs = self._numbers(_indices(graph.inputs, index, "graph input"), "<i4", "graph inputs")
        outputs = self._numbers(_indices(graph.outputs, index, "graph output"), "<i4", "graph outputs")
        nodes = self._offsets([self._node(n, index) for n in graph.nodes])
        attributes = self._offsets(self.attribute_tables)
        fb_graph.Start(b)
        fb_graph.AddName(b, name)
        fb_graph.AddTensors(b, tensors)
        fb_graph.AddInputs(b, inputs)
        fb_graph.AddOutputs(b, outputs)
        fb_graph.AddNodes(b, nodes)
        fb_graph.AddAttributes(b, attributes)
        return fb_graph.End(b)

    def _tensor(self, tensor: Tensor) -> int:
        b = self.b
        code = _storable(tensor.dtype, f"tensor {tensor.name!r}")
        name = b.CreateString(tensor.name)
        shape = self._numbers(tensor.shape, "<i8", f"tensor {tensor.name!r} shape")
        encoding = self._encoding(tensor) if tensor.encoding is not None else 0
        data = 0
        if tensor.encoding is None and tensor.is_constant:  # dense: .data is the stored array
            value = tensor.data
            if value.dtype != tensor.dtype or value.shape != tensor.shape:
                raise PackageError(f"tensor {tensor.name!r} is {tensor.dtype}{list(tensor.shape)} but "
                                   f"holds {value.dtype}{list(value.shape)} data")
            data = self._add_array(value)
        fb_tensor.Start(b)
        fb_tensor.AddName(b, name)
        fb_tensor.AddShape(b, shape)
        fb_tensor.AddDtype(b, code)
        fb_tensor.AddData(b, data)
        if encoding:
            fb_tensor.AddEncoding(b, encoding)
        return fb_tensor.End(b)

    def _encoding(self, tensor: Tensor) -> int:
        b = self.b
        kind, shape, params, arrays = tensor.encoding.parts()
        where = f"tensor {tensor.name!r} ({kind})"
        kind_off = b.CreateString(kind)
        shape_off = self._numbers(shape, "<i8", f"{where} shape")
        param_offs = self._offsets([self._param(k, v, where) for k, v in params.items()])
        array_offs = self._offsets([self._named_blob(k, a, where) for k, a in arrays.items()])
        fb_encoding.Start(b)
        fb_encoding.AddKind(b, kind_off)
        fb_encoding.AddShape(b, shape_off)
        fb_encoding.AddParams(b, param_offs)
        fb_encoding.AddArrays(b, array_offs)
        return fb_encoding.End(b)

    def _param(self, name: str, value: Any, where: str) -> int:
        type_name, value_off = self._value(value, f"{where} parameter {name!r}")
        if not hasattr(ScalarValue, type_name):
            raise PackageError(f"{where} parameter {name!r}: {value!r} is not an int, float, bool or str")
        name_off = self.b.CreateString(name)
        fb_param.Start(self.b)
        fb_param.AddName(self.b, name_off)
        fb_param.AddValueType(self.b, getattr(ScalarValue, type_name))
        fb_param.AddValue(self.b, value_off)
        return fb_param.End(self.b)

    def _named_blob(self, name: str, array: np.ndarray, where: str) -> int:
        code = _storable(array.dtype, f"{where} array {name!r}")
        blob = self._add_array(array)
        name_off = self.b.CreateString(name)
        shape = self._numbers(array.shape, "<i8", f"{where} array {name!r}")
        fb_named_blob.Start(self.b)
        fb_named_blob.AddName(self.b, name_off)
        fb_named_blob.AddBlob(self.b, blob)
        fb_named_blob.AddDtype(self.b, code)
        fb_named_blob.AddShape(self.b, shape)
        return fb_named_blob.End(self.b)

    def _node(self, node: Node, index: dict[str, int]) -> int:
        b = self.b
        where = f"node {node.name!r}"
        op, name = b.CreateString(node.op), b.CreateString(node.name)
        inputs = self._numbers(_indices(node.inputs, index, where, optional=True), "<i4", where)
        outputs = self._numbers(_indices(node.outputs, index, where, optional=True), "<i4", where)
        attrs = self._numbers([self._attribute(k, v, f"attribute {k!r} of {where}")
                               for k, v in node.attrs.items()], "<u4", where)
        fb_node.Start(b)
        fb_node.AddOp(b, op)
        fb_node.AddName(b, name)
        fb_node.AddInputs(b, inputs)
        fb_node.AddOutputs(b, outputs)
        fb_node.AddAttributes(b, attrs)
        return fb_node.End(b)

    def _attribute(self, name: str, value: Any, where: str) -> int:
        """The index of (name, value) in the graph's attribute pool, adding it when new."""
        # repr tells apart what == merges: 1, 1.0 and True; 0.0 and -0.0; tuples and lists
        key = (name, type(value).__name__, repr(value))
        if key not in self.attributes:
            self.attributes[key] = len(self.attribute_tables)
            self.attribute_tables.append(self._attribute_table(name, value, where))
        return self.attributes[key]

    def _attribute_table(self, name: str, value: Any, where: str) -> int:
        type_name, value_off = self._value(value, where)
        name_off = self.b.CreateString(name)
        fb_attribute.Start(self.b)
        fb_attribute.AddName(self.b, name_off)
        fb_attribute.AddValueType(self.b, getattr(AttributeValue, type_name))
        fb_attribute.AddValue(self.b, value_off)
        return fb_attribute.End(self.b)

    def _value(self, value: Any, where: str) -> tuple[str, int]:
        """(union member name, table offset) for an attribute or parameter value."""
        b = self.b
        if isinstance(value, Activation):
            kind, params = b.CreateString(value.kind), self._numbers(value.params, "<f8", where)
            fb_activation.Start(b)
            fb_activation.AddKind(b, kind)
            fb_activation.AddParams(b, params)
            return "ActivationValue", fb_activation.End(b)
        if isinstance(value, (tuple, list)):
            return self._list(value, where)
        return self._scalar(value, where)

    def _scalar(self, value: Any, where: str) -> tuple[str, int]:
        b = self.b
        kind = _scalar_kind(value)
        if kind is None:
            raise PackageError(f"{where}: cannot store a {type(value).__name__} ({value!r}) in a package")
        if kind == "StringValue":
            text = b.CreateString(value)
            fb_string.Start(b)
            fb_string.AddValue(b, text)
            return kind, fb_string.End(b)
        if kind == "IntValue" and not _INT64[0] <= value < _INT64[1]:
            raise PackageError(f"{where}: {value} does not fit a 64-bit integer")
        module, cast = _SCALARS[kind]
        module.Start(b)
        module.AddValue(b, cast(value))
        return kind, module.End(b)

    def _list(self, values: tuple | list, where: str) -> tuple[str, int]:
        kinds = {_scalar_kind(v) for v in values} or {"IntValue"}  # () is stored as an empty IntList
        if len(kinds) > 1 or not kinds <= {"IntValue", "FloatValue", "StringValue"}:
            raise PackageError(f"{where}: cannot store {values!r}; lists must hold only ints, only "
                               f"floats or only strings")
        kind = kinds.pop()
        sequence = Sequence.TUPLE if isinstance(values, tuple) else Sequence.LIST
        module = {"IntValue": fb_int_list, "FloatValue": fb_float_list, "StringValue": fb_string_list}[kind]
        if kind == "StringValue":
            items = self._strings(list(values))
        else:
            items = self._numbers(values, "<i8" if kind == "IntValue" else "<f8", where)
        module.Start(self.b)
        module.AddValues(self.b, items)
        module.AddSequence(self.b, sequence)
        return kind.replace("Value", "List"), module.End(self.b)

    # -- metadata
    def _metadata(self, meta: dict[str, Any]) -> int:
        b = self.b
        strings = {key: b.CreateString(meta[key]) for key in
                   ("producer", "created", "source_sha256", "recipe", "layers", "accuracy_dataset",
                    "graph_metadata") if meta[key] is not None}
        accuracy = 0
        if meta["accuracy"] is not None:
            fb_accuracy.Start(b)
            fb_accuracy.AddValue(b, float(meta["accuracy"]))
            if "accuracy_dataset" in strings:
                fb_accuracy.AddDataset(b, strings["accuracy_dataset"])
            accuracy = fb_accuracy.End(b)
        fb_metadata.Start(b)
        for key, add in (("producer", fb_metadata.AddProducer), ("created", fb_metadata.AddCreated),
                         ("source_sha256", fb_metadata.AddSourceSha256),
                         ("recipe", fb_metadata.AddRecipeJson), ("layers", fb_metadata.AddLayersJson),
                         ("graph_metadata", fb_metadata.AddGraphMetadataJson)):
            if key in strings:
                add(b, strings[key])
        if accuracy:
            fb_metadata.AddAccuracy(b, accuracy)
        return fb_metadata.End(b)


def _scalar_kind(value: Any) -> str | None:
    if isinstance(value, (bool, np.bool_)):  # before int: bool is an int subclass
        return "BoolValue"
    if isinstance(value, numbers.Integral):
        return "IntValue"
    if isinstance(value, numbers.Real):
        return "FloatValue"
    if isinstance(value, str):
        return "StringValue"
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
