"""Dense bit packing of unsigned integers (1-32 bits each), little-endian bit order:
value i occupies bits [i*b, (i+1)*b) of the byte stream, least significant bit first."""
from __future__ import annotations

import numpy as np


def packed_nbytes(count: int, bits: int) -> int:
    return (count * bits + 7) // 8


def pack_bits(values: np.ndarray, bits: int) -> np.ndarray:
    values = np.asarray(values).reshape(-1)
    if not 1 <= bits <= 32:
        raise ValueError(f"bits must be 1..32, got {bits}")
    if values.size and (values.min() < 0 or values.max() >= 1 << bits):
        raise ValueError(f"values do not fit in {bits} bits")
    planes = (values.astype(np.uint64)[:, None] >> np.arange(bits, dtype=np.uint64)) & 1
    return np.packbits(planes.astype(np.uint8).reshape(-1), bitorder="little")


def unpack_bits(packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    if packed.size < packed_nbytes(count, bits):
        raise ValueError(f"{packed.size} bytes cannot hold {count} values of {bits} bits")
    flat = np.unpackbits(np.asarray(packed, dtype=np.uint8), count=count * bits, bitorder="little")
    weights = (1 << np.arange(bits, dtype=np.uint64))
    out = np.uint8 if bits <= 8 else np.uint16 if bits <= 16 else np.uint32
    return (flat.reshape(count, bits).astype(np.uint64) @ weights).astype(out)
