"""The fixed 128-byte header of an .edgepkg file, alignment and the whole-file checksum.

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
FORMAT_VERSION = 1
FILE_IDENTIFIER = b"EPKG"  # the flatbuffer's file_identifier, bytes 4..8 of the flatbuffer
ALIGN = 64  # every blob starts at a multiple of this file offset (OpenCL host-pointer friendly)

_HEADER = struct.Struct("<8sII6Q32s32s")
HEADER_SIZE = _HEADER.size  # 128
CHECKSUM_OFFSET = struct.calcsize("<8sII6Q")  # 64; the 32-byte field its own checksum skips
_CHECKSUM_END = CHECKSUM_OFFSET + 32


@dataclass(frozen=True)
class Header:
    format_version: int
    header_size: int
    file_size: int
    fb_offset: int
    fb_size: int
    blob_offset: int
    blob_size: int
    fb_inflated_size: int = 0  # 0: flatbuffer stored raw; else zlib-deflated, this many bytes inflated
    checksum: bytes = bytes(32)
    magic: bytes = MAGIC
    reserved_tail: bytes = bytes(32)

    def pack(self) -> bytes:
        return _HEADER.pack(self.magic, self.format_version, self.header_size, self.file_size,
                            self.fb_offset, self.fb_size, self.blob_offset, self.blob_size,
                            self.fb_inflated_size, self.checksum, self.reserved_tail)

    @classmethod
    def unpack(cls, buf: Any) -> "Header":
        (magic, version, header_size, file_size, fb_offset, fb_size, blob_offset, blob_size,
         fb_inflated_size, checksum, tail) = _HEADER.unpack_from(buf, 0)
        return cls(version, header_size, file_size, fb_offset, fb_size, blob_offset, blob_size,
                   fb_inflated_size, checksum, magic, tail)


def align(n: int) -> int:
    """The first multiple of ALIGN at or after n."""
    return -(-n // ALIGN) * ALIGN


class Checksum:
    """xxh3-128 of a file's bytes with the checksum field skipped: feed the file in order.

    xxh3 catches every accidental corruption a checksum is for at ~20 GB/s (sha256 took 9.5 ms of a
    14 MB MobileNetV2 package's open time, xxh3 0.6 ms). The 32-byte field holds the 16-byte
    digest followed by 16 zero bytes.
    """

    def __init__(self) -> None:
        self._hash = xxhash.xxh3_128()

    def update_header(self, header: bytes | memoryview) -> None:
        self._hash.update(header[:CHECKSUM_OFFSET])
        self._hash.update(header[_CHECKSUM_END:HEADER_SIZE])

    def update(self, data: bytes | memoryview) -> None:
        self._hash.update(data)

    def digest(self) -> bytes:
        return self._hash.digest() + bytes(16)


def file_checksum(buf: memoryview) -> bytes:
    """The checksum of a whole package held in ``buf`` (read without copying)."""
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


def deflate_graph_section(fb: bytes) -> tuple[bytes, int]:
    """(stored bytes, fb_inflated_size for the header): deflated only when that is smaller."""
    packed = zlib.compress(fb, 9)
    return (packed, len(fb)) if len(packed) < len(fb) and len(fb) <= MAX_INFLATE_RATIO * len(packed) else (fb, 0)


def inflate_graph_section(stored: bytes, inflated_size: int) -> bytes | None:
    """The flatbuffer bytes, or None when the stored section does not inflate to exactly that size."""
    if not inflated_size:
        return stored
    if inflated_size > MAX_INFLATE_RATIO * len(stored):
        return None
    try:
        inflater = zlib.decompressobj()
        fb = inflater.decompress(stored, inflated_size)
    except zlib.error:
        return None
    return fb if len(fb) == inflated_size and inflater.eof and not inflater.unconsumed_tail else None
