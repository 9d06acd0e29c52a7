"""Reading an .onnx file with its weights copied once, not four times.

``onnx.load`` reads the file into a bytes object, protobuf copies each initializer's ``raw_data``
into its message, the ``.raw_data`` access copies it into a new bytes object and
``numpy_helper.to_array`` copies that into the array: four passes over ResNet-18's 46 MB, each into
freshly faulted memory (about 2 us per 4 KiB page on a VM). Here the file is read once into a
numpy buffer, the protobuf wire format is walked only as deep as ModelProto.graph (field 7) ->
GraphProto.initializer (5) -> TensorProto.raw_data (9), the model is parsed by onnx from a copy
of the file without the large ``raw_data`` payloads, and the importer takes each payload as a numpy
view of the buffer (:meth:`OnnxFile.array`).

The walk handles only what it needs to; anything else it meets (external data, a graph given
twice, a deprecated group field, a length past the end) makes :func:`read_onnx` return None
and the caller use ``onnx.load``, which reads such files (or reports them) as before.
"""
from __future__ import annotations

import ctypes
import math
import os
import sys
from dataclasses import dataclass

import numpy as np
import onnx

from .runtime.arena import aligned_host_buffer

# Payloads from this size on stay in the buffer; smaller ones are left in the message (a copy
# of a few KB costs less than a view's bookkeeping).
_HOLLOW_BYTES = 4096

_MODEL_GRAPH, _GRAPH_INITIALIZER = 7, 5
_TENSOR_RAW_DATA, _TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION = 9, 13, 14
_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5

# TensorProto.DataType -> the numpy dtype of its little-endian raw_data (fixed-size types only;
# others, bfloat16, float8, int4 and strings among them, go through onnx.numpy_helper).
_DTYPES = {onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.UINT8: np.uint8, onnx.TensorProto.INT8: np.int8,
           onnx.TensorProto.UINT16: np.uint16, onnx.TensorProto.INT16: np.int16, onnx.TensorProto.INT32: np.int32,
           onnx.TensorProto.INT64: np.int64, onnx.TensorProto.BOOL: np.bool_,
           onnx.TensorProto.FLOAT16: np.float16, onnx.TensorProto.DOUBLE: np.float64,
           onnx.TensorProto.UINT32: np.uint32, onnx.TensorProto.UINT64: np.uint64}


class _Unexpected(Exception):
    """Something the walk does not handle: the caller falls back to onnx.load."""


@dataclass
class OnnxFile:
    """A parsed model whose large initializers' raw_data live in ``buffer`` at ``payloads[i]``
    (begin, end) instead of in the message (i: the initializer's index in the graph)."""

    model: onnx.ModelProto
    buffer: np.ndarray
    payloads: dict[int, tuple[int, int]]

    def array(self, index: int) -> np.ndarray | None:
        """Initializer ``index`` of the graph as an array (a view of the buffer where its bytes
        are aligned), or None when its data is in the message. Raises ValueError when the payload
        does not hold exactly what the dims and type say."""
        span = self.payloads.get(index)
        if span is None:
            return None
        begin, end = span
        proto = self.model.graph.initializer[index]
        shape = tuple(int(d) for d in proto.dims)
        dtype = _DTYPES.get(proto.data_type)
        if dtype is None:  # a type numpy_helper knows how to unpack: give it its bytes back
            full = onnx.TensorProto()
            full.CopyFrom(proto)
            full.raw_data = self.buffer[begin:end].tobytes()
            return onnx.numpy_helper.to_array(full)
        itemsize = np.dtype(dtype).itemsize
        need = math.prod(shape) * itemsize if all(d >= 0 for d in shape) else "a non-negative size"
        if need != end - begin:
            raise ValueError(f"raw_data holds {end - begin} bytes, dims {list(shape)} of "
                             f"{onnx.TensorProto.DataType.Name(proto.data_type)} need {need}")
        value = self.buffer[begin:end].view(dtype).reshape(shape)
        # _align_payloads moved nearly all to 8-byte boundaries; one it could not is copied so
        # that the kernels' loads are aligned.
        return value if (self.buffer.ctypes.data + begin) % itemsize == 0 else value.copy()


def read_onnx(path: str | os.PathLike) -> OnnxFile | None:
    """The model at ``path`` with its large payloads left in one buffer, or None when the file is
    one the walk does not handle (the caller then uses onnx.load). OSError propagates."""
    if sys.byteorder != "little":  # raw_data is little-endian; numpy_helper swaps it elsewhere
        return None
    with open(path, "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        # A numpy buffer, not bytes: numpy advises transparent huge pages for large arrays, which
        # makes the first touch of 46 MB cost 3 ms instead of 25 on a VM.
        buffer = aligned_host_buffer(size)
        view, at = memoryview(buffer), 0
        while at < size:
            n = f.readinto(view[at:])
            if not n:
                return None  # shrank while being read: onnx.load reports what it finds
            at += n
    try:
        stripped, payloads = _without_payloads(view)
    except _Unexpected:
        return None
    model = onnx.ModelProto.FromString(stripped)
    _align_payloads(buffer, payloads)
    return OnnxFile(model, buffer, payloads)


def _align_payloads(buffer: np.ndarray, payloads: dict[int, tuple[int, int]]) -> None:
    """Move each payload down to an 8-byte boundary, in place. Protobuf does not align them, and
    an unaligned one would be copied into fresh memory (11 of ResNet-18's 13 ms of copies). Once the
    stripped message exists, only the payloads' bytes are still needed: a payload moves over its
    own field header (and whatever precedes it) but never over the payload before it."""
    base, floor = buffer.ctypes.data, 0
    for index, (begin, end) in sorted(payloads.items(), key=lambda item: item[1][0]):
        target = begin - (base + begin) % 8
        if target < floor:  # too close behind the previous payload: array() copies this one
            floor = end
            continue
        if target != begin:
            ctypes.memmove(base + target, base + begin, end - begin)
            payloads[index] = (target, target + end - begin)
        floor = target + end - begin


def _without_payloads(mv: memoryview) -> tuple[bytes | memoryview, dict[int, tuple[int, int]]]:
    """The model's bytes with the large initializer payloads left out, and where those are."""
    graph_field = None
    for field, wire, start, begin, end in _fields(mv, 0, len(mv)):
        if field == _MODEL_GRAPH:
            if wire != _LEN or graph_field is not None:  # protobuf would merge two: not handled here
                raise _Unexpected
            graph_field = (start, begin, end)
    if graph_field is None:
        raise _Unexpected
    start, begin, end = graph_field
    payloads: dict[int, tuple[int, int]] = {}
    graph = _graph_without_payloads(mv, begin, end, payloads)
    if not payloads:  # nothing left out: the message is the file as read
        return mv, payloads
    return b"".join((mv[:start], _tag(_MODEL_GRAPH, _LEN), _varint_bytes(len(graph)), graph, mv[end:])), payloads


def _graph_without_payloads(mv: memoryview, begin: int, end: int, payloads: dict[int, tuple[int, int]]) -> bytes:
    parts: list[bytes | memoryview] = []
    copied = begin  # fields from here up to the current one are copied as they are
    index = -1  # of the initializer, in the order protobuf gives them
    for field, wire, start, vbegin, vend in _fields(mv, begin, end):
        if field != _GRAPH_INITIALIZER:
            continue
        if wire != _LEN:
            raise _Unexpected  # not an initializer protobuf would read: onnx.load reports it
        index += 1
        tensor = _tensor_without_payload(mv, vbegin, vend)
        if tensor is None:
            continue
        tensor, payloads[index] = tensor
        parts += [mv[copied:start], _tag(_GRAPH_INITIALIZER, _LEN), _varint_bytes(len(tensor)), tensor]
        copied = vend
    parts.append(mv[copied:end])
    return b"".join(parts)


def _tensor_without_payload(mv: memoryview, begin: int, end: int) -> tuple[bytes, tuple[int, int]] | None:
    """The TensorProto's bytes without its raw_data and where that was, or None when it keeps them
    (small)."""
    raw = None
    for field, wire, start, vbegin, vend in _fields(mv, begin, end):
        if field in (_TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION):
            raise _Unexpected  # external data: onnx.load resolves the files
        if field == _TENSOR_RAW_DATA:
            if raw is not None or wire != _LEN:  # protobuf keeps the last of repeated bytes: not handled here
                raise _Unexpected
            raw = (start, vbegin, vend)
    if raw is None or raw[2] - raw[1] < _HOLLOW_BYTES:
        return None
    start, vbegin, vend = raw
    return b"".join((mv[begin:start], mv[vend:end])), (vbegin, vend)


def _fields(mv: memoryview, pos: int, end: int):
    """(field number, wire type, start of the tag, start of the value, end of the value) for each
    field of the message in mv[pos:end]."""
    while pos < end:
        start = pos
        tag, pos = _varint(mv, pos, end)
        field, wire = tag >> 3, tag & 7
        if wire == _VARINT:
            begin = pos
            _, pos = _varint(mv, pos, end)
        elif wire == _LEN:
            length, begin = _varint(mv, pos, end)
            pos = begin + length
        elif wire == _I64:
            begin, pos = pos, pos + 8
        elif wire == _I32:
            begin, pos = pos, pos + 4
        else:  # groups (deprecated) and invalid wire types
            raise _Unexpected
        if pos > end or field == 0:
            raise _Unexpected
        yield field, wire, start, begin, pos


def _varint(mv: memoryview, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while pos < end and shift < 64:
        byte = mv[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    raise _Unexpected


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _tag(field: int, wire: int) -> bytes:
    return _varint_bytes(field << 3 | wire)
