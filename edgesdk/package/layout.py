"""The fixed 64-byte header of an .edgepkg file, alignment and the whole-file checksum.

See the layout table at the top of ``edgepkg.fbs``. The header is plain ``struct`` so a reader
can reject a file (wrong magic, version, size, checksum) before touching the flatbuffer.
"""
from __future__ import annotations

import zlib

import xxhash
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from .fb.DType import DType

MAGIC = b"EDGEPKG\0"
FORMAT_VERSION = 2
FILE_IDENTIFIER = b"EPKG"  # the flatbuffer's file_identifier, bytes 4..8 of the flatbuffer
ALIGN = 64  # every blob starts at a multiple of this file offset (OpenCL host-pointer friendly)
SMALL_ARRAY = 256  # arrays smaller than this (bytes) share blobs, each at a multiple of ARRAY_ALIGN
ARRAY_ALIGN = 8  # array offsets inside a blob: any element type is naturally aligned

_HEADER = struct.Struct("<8sIIQQQQ16s")
HEADER_SIZE = _HEADER.size  # 64
CHECKSUM_OFFSET = struct.calcsize("<8sIIQQQQ")  # 48; the 16-byte field its own checksum skips
_CHECKSUM_END = CHECKSUM_OFFSET + 16


@dataclass(frozen=True)
class Header:
    """The fixed header. The blob area follows it (at 64, so blob offsets that are multiples of 64
    are file offsets that are too) and the graph section ends the file: no padding between the
    header, the blobs and the graph section, which matters for packages of a few KB."""
    format_version: int
    header_size: int
    file_size: int
    blob_size: int
    fb_size: int
    fb_inflated_size: int = 0  # 0: flatbuffer stored raw; else zlib-deflated, this many bytes inflated
    checksum: bytes = bytes(16)
    magic: bytes = MAGIC

    @property
    def blob_offset(self) -> int:
        return self.header_size

    @property
    def fb_offset(self) -> int:
        return self.header_size + self.blob_size

    def pack(self) -> bytes:
        return _HEADER.pack(self.magic, self.format_version, self.header_size, self.file_size, self.blob_size,
                            self.fb_size, self.fb_inflated_size, self.checksum)

    @classmethod
    def unpack(cls, buf: Any) -> "Header":
        (magic, version, header_size, file_size, blob_size, fb_size, fb_inflated_size,
         checksum) = _HEADER.unpack_from(buf, 0)
        return cls(version, header_size, file_size, blob_size, fb_size, fb_inflated_size, checksum, magic)


def align(n: int) -> int:
    """The first multiple of ALIGN at or after n."""
    return -(-n // ALIGN) * ALIGN


class Checksum:
    """xxh3-128 of a file's bytes with the checksum field skipped: feed the file in order.

    xxh3 catches every accidental corruption a checksum is for at ~20 GB/s (sha256 took 9.5 ms of a
    14 MB MobileNetV2 package's open time, xxh3 0.6 ms).
    """

    def __init__(self) -> None:
        self._hash = xxhash.xxh3_128()

    def update_header(self, header: bytes | memoryview) -> None:
        self._hash.update(header[:CHECKSUM_OFFSET])
        self._hash.update(header[_CHECKSUM_END:HEADER_SIZE])

    def update(self, data: bytes | memoryview) -> None:
        self._hash.update(data)

    def digest(self) -> bytes:
        return self._hash.digest()


def file_checksum(buf: memoryview) -> bytes:
    """The checksum of a whole package held in ``buf`` (hashed in place, without copying; the
    reader passes the very buffer its arrays are views of)."""
    checksum = Checksum()
    checksum.update_header(buf[:HEADER_SIZE])
    checksum.update(buf[HEADER_SIZE:])
    return checksum.digest()


def dtype_code(dtype: np.dtype) -> int | None:
    """The schema's DType for a numpy dtype (any byte order), or None if packages cannot hold it."""
    return _CODES.get(np.dtype(dtype).newbyteorder("="))


def dtype_from_code(code: int) -> np.dtype | None:
    """The little-endian numpy dtype the blob area stores for a DType code, or None if unknown."""
    return _DTYPES.get(code)


_DTYPES: dict[int, np.dtype] = {
    DType.FLOAT32: np.dtype("<f4"), DType.FLOAT16: np.dtype("<f2"), DType.FLOAT64: np.dtype("<f8"),
    DType.INT8: np.dtype("i1"), DType.INT16: np.dtype("<i2"), DType.INT32: np.dtype("<i4"),
    DType.INT64: np.dtype("<i8"), DType.UINT8: np.dtype("u1"), DType.UINT16: np.dtype("<u2"),
    DType.UINT32: np.dtype("<u4"), DType.UINT64: np.dtype("<u8"), DType.BOOL: np.dtype("?"),
}
_CODES: dict[np.dtype, int] = {dt.newbyteorder("="): code for code, dt in _DTYPES.items()}


# The graph section (names, attributes, metadata JSON) is small and repetitive; deflating it takes
# a few KB off every package, which is most of the file for small models. Blobs stay raw.
MAX_INFLATE_RATIO = 64  # a corrupted size field must not make the reader allocate gigabytes


# Deflate's preset dictionary for the graph section: names and JSON keys that most packages hold
# (op types, attribute names, encoding names, the per-layer stats and recipe keys, exporter name
# patterns). A small model's graph section is a few hundred bytes, too short for deflate to
# learn these words from the data; with them preset it shrinks by a fifth (Brotli's built-in
# dictionary does the same for web text). The dictionary is part of format version 2: changing
# it needs a new format version. Deflate finds near matches cheapest, so the commonest go last.
GRAPH_SECTION_DICTIONARY = "".join([
    "Sub", "Div", "Mul", "Add", "Sum", "Max", "Min", "Pow", "Exp", "Log", "Sqrt", "Neg", "Abs",
    "Transpose", "Squeeze", "Unsqueeze", "Pad", "Resize", "Upsample", "Split", "Slice", "Tanh",
    "Elu", "Selu", "PRelu", "LeakyRelu", "HardSwish", "HardSigmoid", "Sigmoid", "Softmax", "LRN",
    "size", "bias", "axes", "axis", "keepdims", "epsilon", "momentum", "mode", "value",
    "BatchNormalization", "InstanceNormalization", "ReduceMean", "GlobalMaxPool",
    "GlobalAveragePool", "AveragePool", "count_include_pad", "auto_pad", "NOTSET", "SAME_UPPER",
    "Identity", "Dropout", "Concat", "Clip", "MatMul", "Flatten", "Reshape", "shape",
    "nnm", "centroids", "assignment", "shared", "per_input_channel", "per_channel", "nnm_rate",
    "global_prune", "fp16",
    # metadata: graph metadata, recipe and per-layer stats as the writer's compact JSON
    '{"source":"', '.onnx","producer":"pytorch 2.', '","opset":', ',"ir_version":',
    ',"compression":{"baseline_accuracy":0.', "edgesdk 0.", "digits-test",
    '{"default":{"cluster_bits":', ',"fp16":true}', ',"layers":[{"match":"', '","prune":0.',
    ',"cluster_bits":', '[{"name":"/', '","error_rms":0.', '},{"name":"/',
    # encodings
    "zero_reserved", "clustered", "bits", "values", "codebook", "indices",
    "row_lengths", "length_bits", "deltas", "value_bits", "delta_bits", "sparse_csr",
    # the commonest attributes and PyTorch exporter names
    "alpha", "beta", "transA", "transB", "Gemm", "ceil_mode", "MaxPool", "fused_activation",
    "Relu", "group", "pads", "dilations", "strides", "kernel_shape", "Conv",
    "_output_0", "/Relu", "/MaxPool", "/Conv", ".weight", ".bias", "input", "output", "logits",
]).encode("ascii")


def deflate_graph_section(fb: bytes) -> tuple[bytes, int]:
    """(stored bytes, fb_inflated_size for the header): deflated only when that is smaller."""
    deflater = zlib.compressobj(9, zlib.DEFLATED, 15, 9, zlib.Z_DEFAULT_STRATEGY, GRAPH_SECTION_DICTIONARY)
    packed = deflater.compress(fb) + deflater.flush()
    return (packed, len(fb)) if len(packed) < len(fb) and len(fb) <= MAX_INFLATE_RATIO * len(packed) else (fb, 0)


def inflate_graph_section(stored: bytes, inflated_size: int) -> bytes | None:
    """The flatbuffer bytes, or None when the stored section does not inflate to exactly that size."""
    if not inflated_size:
        return stored
    if inflated_size > MAX_INFLATE_RATIO * len(stored):
        return None
    try:
        inflater = zlib.decompressobj(zdict=GRAPH_SECTION_DICTIONARY)
        fb = inflater.decompress(stored, inflated_size)
    except zlib.error:
        return None
    return fb if len(fb) == inflated_size and inflater.eof and not inflater.unconsumed_tail else None
