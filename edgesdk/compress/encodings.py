"""How a compressed weight tensor is stored, and how it decodes to the exact values it stands for.

Every encoding works on the tensor's *matrix view*: rows are output channels (``shape[0]``) and
columns everything else, in C order (Conv OIHW, Gemm weights stored (out, in)). An encoding is a
set of named arrays plus a few scalar parameters, which is all the package format needs to store
it (see :meth:`Encoding.parts` and :func:`encoding_from_parts`). ``decode`` is the reference: a
backend that runs an encoding directly must produce the same numbers as the decoded dense tensor.
"""
from __future__ import annotations

import abc
import functools
import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..errors import EdgeSDKError
from .bitpack import packed_nbytes, unpack_bits

Params = dict[str, Any]  # ints, floats, strings, bools


class EncodingError(EdgeSDKError):
    """Stored encoding data are inconsistent (wrong sizes, indices out of range)."""


@dataclass(frozen=True, eq=False)
class Encoding(abc.ABC):
    shape: tuple[int, ...]
    kind: ClassVar[str]

    @abc.abstractmethod
    def decode(self) -> np.ndarray:
        """The dense float32 tensor of ``shape``."""

    @abc.abstractmethod
    def arrays(self) -> dict[str, np.ndarray]:
        """The stored blobs, by name."""

    def params(self) -> Params:
        """Scalar parameters stored next to the blobs."""
        return {}

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays().values())

    @property
    def rows(self) -> int:
        return self.shape[0]

    @property
    def cols(self) -> int:
        return math.prod(self.shape[1:])

    def describe(self) -> str:
        return self.kind

    def parts(self) -> tuple[str, tuple[int, ...], Params, dict[str, np.ndarray]]:
        return self.kind, self.shape, self.params(), self.arrays()


def _values_dtype(a: np.ndarray) -> str:
    return "fp16" if a.dtype == np.float16 else "fp32"


@dataclass(frozen=True, eq=False)
class DenseFP16(Encoding):
    """Uncompressed weights stored as IEEE half."""
    values: np.ndarray  # float16, ``shape``
    kind: ClassVar[str] = "fp16"

    def decode(self) -> np.ndarray:
        return self.values.astype(np.float32).reshape(self.shape)

    def arrays(self) -> dict[str, np.ndarray]:
        return {"values": self.values}


@dataclass(frozen=True, eq=False)
class Clustered(Encoding):
    """k-means weight sharing: b-bit indices into a codebook per layer or per output channel.

    ``codebook`` is (G, 2^bits) with G = 1 (layer) or rows (channel); ``indices`` is the
    bit-packed index of every element in matrix-view order. When ``zero_reserved``, entry 0 of
    every codebook is exactly 0.0 and marks pruned weights.
    """
    codebook: np.ndarray  # (G, 2**bits) float32 or float16
    indices: np.ndarray  # uint8, packed at ``bits`` per element
    bits: int
    zero_reserved: bool = False
    kind: ClassVar[str] = "clustered"

    @property
    def granularity(self) -> str:
        return "layer" if self.codebook.shape[0] == 1 else "channel"

    def decode(self) -> np.ndarray:
        n = self.rows * self.cols
        _check(self.codebook.shape[1] == 1 << self.bits and self.codebook.shape[0] in (1, self.rows),
               f"codebook shape {self.codebook.shape} does not fit {self.bits} bits and {self.rows} rows")
        _check(self.indices.size >= packed_nbytes(n, self.bits), "index stream too short")
        idx = unpack_bits(self.indices, self.bits, n).reshape(self.rows, self.cols)
        book = self.codebook.astype(np.float32)
        group = np.zeros(self.rows, dtype=np.int64) if book.shape[0] == 1 else np.arange(self.rows)
        return book[group[:, None], idx].reshape(self.shape)

    def arrays(self) -> dict[str, np.ndarray]:
        return {"codebook": self.codebook, "indices": self.indices}

    def params(self) -> Params:
        return {"bits": self.bits, "zero_reserved": self.zero_reserved}

    def describe(self) -> str:
        return f"cluster{self.bits}/{self.granularity}" + ("/fp16" if self.codebook.dtype == np.float16 else "")


@dataclass(frozen=True, eq=False)
class SparseCSR(Encoding):
    """Pruned weights as relative-index CSR over the matrix view's rows (seed 004, §2.2).

    Each row's entries store the column *difference* to the previous entry of the row (the first
    one: its absolute column), at ``delta_bits`` bits, so columns are a prefix sum. A gap too
    large for the field is bridged by filler entries: delta 2^k - 1 and value exactly zero.
    Values are either raw (``values`` fp32/fp16) or b-bit codebook indices (``indices``) whose
    codebook entry 0 is 0.0. Each row's entry count (fillers included) is stored bit-packed at
    ``length_bits``; ``row_ptr``, each row's first entry, is their prefix sum, computed once when
    a runtime asks (4 bytes a row were a quarter of a small pruned layer).
    """
    row_lengths: np.ndarray  # uint8, packed at length_bits: entries of each row
    length_bits: int
    deltas: np.ndarray  # uint8 packed at delta_bits
    delta_bits: int
    values: np.ndarray | None = None  # (entries,) float32 / float16
    codebook: np.ndarray | None = None  # (G, 2**value_bits)
    indices: np.ndarray | None = None  # uint8 packed at value_bits
    value_bits: int = 0
    kind: ClassVar[str] = "sparse_csr"

    @functools.cached_property
    def nnz(self) -> int:
        """Real non-zeros: entries minus fillers (a filler's value is exactly 0, a kept weight's
        codebook index is never the reserved 0). Counted, not stored: the stream says it."""
        if self.codebook is None:
            return int(np.count_nonzero(self.values))
        return int(np.count_nonzero(unpack_bits(self.indices, self.value_bits, self.entries)))

    @functools.cached_property
    def row_ptr(self) -> np.ndarray:
        """(rows + 1,) int64: row i's entries are [row_ptr[i], row_ptr[i + 1])."""
        _check(1 <= self.length_bits <= 32, f"row length width {self.length_bits} is not 1..32 bits")
        _check(self.row_lengths.size >= packed_nbytes(self.rows, self.length_bits), "row lengths too short")
        lengths = unpack_bits(self.row_lengths, self.length_bits, self.rows).astype(np.int64)
        return np.concatenate([[0], np.cumsum(lengths)])

    @property
    def entries(self) -> int:
        return int(self.row_ptr[-1])

    def decode(self) -> np.ndarray:
        rows, cols, row_ptr = self.rows, self.cols, self.row_ptr
        e = int(row_ptr[-1])
        _check(1 <= self.delta_bits <= 16 and self.deltas.size >= packed_nbytes(e, self.delta_bits),
               "delta stream too short")
        deltas = unpack_bits(self.deltas, self.delta_bits, e).astype(np.int64)
        entry_row = np.repeat(np.arange(rows), np.diff(row_ptr))
        running = np.concatenate([[0], np.cumsum(deltas)])
        col = running[1:] - running[row_ptr[:-1]][entry_row]
        _check(e == 0 or (col.min() >= 0 and col.max() < cols), "column index out of range")
        dense = np.zeros((rows, cols), dtype=np.float32)
        dense[entry_row, col] = self._entry_values(entry_row)
        return dense.reshape(self.shape)

    def _entry_values(self, entry_row: np.ndarray) -> np.ndarray:
        if self.codebook is None:
            _check(self.values is not None and self.values.shape == (self.entries,), "values length mismatch")
            return self.values.astype(np.float32)
        idx = unpack_bits(self.indices, self.value_bits, self.entries)
        book = self.codebook.astype(np.float32)
        group = np.zeros_like(entry_row) if book.shape[0] == 1 else entry_row
        return book[group, idx]

    def arrays(self) -> dict[str, np.ndarray]:
        out = {"row_lengths": self.row_lengths, "deltas": self.deltas}
        if self.codebook is None:
            out["values"] = self.values
        else:
            out.update(codebook=self.codebook, indices=self.indices)
        return out

    def params(self) -> Params:
        return {"length_bits": self.length_bits, "delta_bits": self.delta_bits, "value_bits": self.value_bits}

    def describe(self) -> str:
        sparsity = 1 - self.nnz / max(1, self.rows * self.cols)
        values = (f"cluster{self.value_bits}/{'layer' if self.codebook.shape[0] == 1 else 'channel'}"
                  if self.codebook is not None else _values_dtype(self.values))
        return f"csr{self.delta_bits}({100 * sparsity:.0f}% zero)+{values}"


@dataclass(frozen=True, eq=False)
class NNM(Encoding):
    """Output-channel clustering (seed 003, §2.3.1), both readings.

    ``shared``: the rows (whole filters) cluster into K' centroids; ``assignment`` (K,) maps each
    output channel to its centroid, so a layer computes K' channels and gathers them to K.
    ``per_input_channel`` (Conv only): for every input channel c the K filter slices W[:, c]
    cluster into K' centroids; ``centroids`` is (C, K', R, S) and ``assignment`` (C, K); the layer
    runs as a grouped centroid convolution plus a gather-accumulate.
    """
    centroids: np.ndarray  # shared: (K', *shape[1:]); per_input_channel: (C, K', *shape[2:])
    assignment: np.ndarray  # uint8/uint16; shared: (K,), per_input_channel: (C, K)
    mode: str = "shared"
    kind: ClassVar[str] = "nnm"

    @property
    def clusters(self) -> int:
        return self.centroids.shape[0 if self.mode == "shared" else 1]

    def decode(self) -> np.ndarray:
        k = self.shape[0]
        _check(int(self.assignment.max(initial=0)) < self.clusters, "assignment out of range")
        c = self.centroids.astype(np.float32)
        if self.mode == "shared":
            _check(self.assignment.shape == (k,) and c.shape[1:] == self.shape[1:], "NNM shapes mismatch")
            return c[self.assignment.astype(np.int64)].reshape(self.shape)
        channels = self.shape[1]
        _check(self.assignment.shape == (channels, k) and c.shape[0] == channels and
               c.shape[2:] == self.shape[2:], "NNM shapes mismatch")
        # W[k, c] = centroids[c, assignment[c, k]]
        return c[np.arange(channels)[None, :], self.assignment.T.astype(np.int64)].reshape(self.shape)

    def arrays(self) -> dict[str, np.ndarray]:
        return {"centroids": self.centroids, "assignment": self.assignment}

    def params(self) -> Params:
        return {"mode": self.mode}

    def describe(self) -> str:
        rate = 1 - self.clusters / self.shape[0]
        tag = "shared" if self.mode == "shared" else "per-input"
        return f"nnm-{tag}({100 * rate:.0f}% fewer)" + ("/fp16" if self.centroids.dtype == np.float16 else "")


ENCODINGS: dict[str, type[Encoding]] = {cls.kind: cls for cls in (DenseFP16, Clustered, SparseCSR, NNM)}


def encoding_from_parts(kind: str, shape: tuple[int, ...], params: Params,
                        arrays: dict[str, np.ndarray]) -> Encoding:
    """Rebuild an encoding from what :meth:`Encoding.parts` returned (the package reader's path)."""
    cls = ENCODINGS.get(kind)
    if cls is None:
        raise EncodingError(f"unknown tensor encoding {kind!r}; known: {', '.join(ENCODINGS)}")
    try:
        return cls(tuple(int(d) for d in shape), **params, **arrays)
    except TypeError as exc:
        raise EncodingError(f"encoding {kind!r} with parameters {sorted(params)} and arrays "
                            f"{sorted(arrays)}: {exc}") from None


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise EncodingError(f"corrupt encoded tensor: {message}")
