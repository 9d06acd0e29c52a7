"""How a compressed weight tensor is stored, and how it decodes to the exact values it stands for.

Every encoding works on the tensor's *matrix view*: rows are output channels (``shape[0]``) and
columns everything else, in C order (Conv OIHW, Gemm weights stored (out, in)). An encoding is a
set of named arrays plus a few scalar parameters, which is all the package format needs to store
it (see :meth:`Encoding.parts` and :func:`encoding_from_parts`). ``decode`` is the reference: a
backend that runs an encoding directly must produce the same numbers as the decoded dense tensor.

Encodings decode to float32, but for one: :class:`SparseCSR` with raw int8 values (the weights of
QLinearConv / QGemm / QLinearMatMul, pruned then quantized) decodes to the exact int8 tensor;
:attr:`Encoding.dtype` says which, and the package reader refuses a tensor declared otherwise.
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

# What validate() accepts: exactly the dtypes edgesdk.compress.encode writes.
_FLOATS = (np.dtype(np.float32), np.dtype(np.float16))
_BYTES = (np.dtype(np.uint8),)
_INT8 = np.dtype(np.int8)
_FLOAT32 = np.dtype(np.float32)
_RAW_VALUES = _FLOATS + (_INT8,)  # SparseCSR's raw values: float, or int8 (int8 tensors)
_INT32_MAX = 2**31 - 1  # the OpenCL CSR kernel indexes entries with int


class EncodingError(EdgeSDKError):
    """Stored encoding data are inconsistent (wrong sizes, indices out of range)."""


@dataclass(frozen=True, eq=False)
class Encoding(abc.ABC):
    shape: tuple[int, ...]
    kind: ClassVar[str]

    @abc.abstractmethod
    def decode(self) -> np.ndarray:
        """The dense tensor of ``shape``, of :attr:`dtype`."""

    @property
    def dtype(self) -> np.dtype:
        """What :meth:`decode` gives: float32, but for int8 CSR (the tensor's declared dtype)."""
        return _FLOAT32

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

    def validate(self) -> None:
        """Check every parameter and array against ``shape``: everything :meth:`decode` and the
        backends' kernels take for granted (bit widths, array dtypes and sizes, index ranges),
        without decoding, in a few vectorised passes over the stored bytes. Raises
        :class:`EncodingError` naming the field and the problem. The package reader calls this
        for every encoded tensor, so a crafted file fails here rather than in a kernel."""
        _require(isinstance(self.shape, tuple) and len(self.shape) >= 1
                 and all(type(d) is int and d >= 1 for d in self.shape),
                 f"shape {list(self.shape)} is not a non-empty shape of positive dimensions")
        self._validate()

    @abc.abstractmethod
    def _validate(self) -> None:
        """The encoding's own checks; ``shape`` is already known to be sound."""

    def parts(self) -> tuple[str, tuple[int, ...], Params, dict[str, np.ndarray]]:
        return self.kind, self.shape, self.params(), self.arrays()


def _values_dtype(a: np.ndarray) -> str:
    return "fp16" if a.dtype == np.float16 else "int8" if a.dtype == np.int8 else "fp32"


@dataclass(frozen=True, eq=False)
class DenseFP16(Encoding):
    """Uncompressed weights stored as IEEE half."""
    values: np.ndarray  # float16, ``shape``
    kind: ClassVar[str] = "fp16"

    def decode(self) -> np.ndarray:
        return self.values.astype(np.float32).reshape(self.shape)

    def arrays(self) -> dict[str, np.ndarray]:
        return {"values": self.values}

    def _validate(self) -> None:
        _require_array(self.values, "values", (np.dtype(np.float16),), self.shape)


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

    def _validate(self) -> None:
        bits = _require_int(self.bits, "bits", 1, 8)  # the native and OpenCL kernels unpack <= 8
        _require(type(self.zero_reserved) is bool, f"zero_reserved is {self.zero_reserved!r}, not a bool")
        _require_codebook(self.codebook, "codebook", bits, self.rows)
        _require_array(self.indices, "indices", _BYTES, (packed_nbytes(self.rows * self.cols, bits),),
                       f"{self.rows * self.cols} indices of {bits} bits")

    def describe(self) -> str:
        return f"cluster{self.bits}/{self.granularity}" + ("/fp16" if self.codebook.dtype == np.float16 else "")


@dataclass(frozen=True, eq=False)
class SparseCSR(Encoding):
    """Pruned weights as relative-index CSR over the matrix view's rows (seed 004, §2.2).

    Each row's entries store the column *difference* to the previous entry of the row (the first
    one: its absolute column), at ``delta_bits`` bits, so columns are a prefix sum. A gap too
    large for the field is bridged by filler entries: delta 2^k - 1 and value exactly zero.
    Values are either raw (``values`` fp32/fp16, or int8: the weights of an integer op, pruned
    then quantized, which decode to the exact int8 tensor) or b-bit codebook indices
    (``indices``) whose codebook entry 0 is 0.0. Each row's entry count (fillers included) is
    stored bit-packed at ``length_bits``; ``row_ptr``, each row's first entry, is their prefix
    sum, computed once when a runtime asks (4 bytes a row were a quarter of a small pruned layer).
    """
    row_lengths: np.ndarray  # uint8, packed at length_bits: entries of each row
    length_bits: int
    deltas: np.ndarray  # uint8 packed at delta_bits
    delta_bits: int
    values: np.ndarray | None = None  # (entries,) float32 / float16 / int8
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

    @property
    def dtype(self) -> np.dtype:
        """int8 for raw int8 values (decoded as they are stored), else float32. Raw values of
        another integer type (which validate() refuses) give theirs, for the reader's message."""
        values = self.values
        if self.codebook is None and isinstance(values, np.ndarray) and values.dtype.kind in "iu":
            return values.dtype
        return _FLOAT32

    def columns(self) -> tuple[np.ndarray, np.ndarray]:
        """Each entry's row and absolute column (int64 arrays of ``entries``), fillers included:
        what a sparse kernel needs, without the dense matrix."""
        rows, row_ptr = self.rows, self.row_ptr
        e = int(row_ptr[-1])
        _check(1 <= self.delta_bits <= 16 and self.deltas.size >= packed_nbytes(e, self.delta_bits),
               "delta stream too short")
        deltas = unpack_bits(self.deltas, self.delta_bits, e).astype(np.int64)
        entry_row = np.repeat(np.arange(rows), np.diff(row_ptr))
        running = np.concatenate([[0], np.cumsum(deltas)])
        col = running[1:] - running[row_ptr[:-1]][entry_row]
        _check(e == 0 or (col.min() >= 0 and col.max() < self.cols), "column index out of range")
        return entry_row, col

    def entry_values(self) -> np.ndarray:
        """Each entry's value (fillers: 0.0), raw or through the codebook, in :attr:`dtype`."""
        return self._entry_values(np.repeat(np.arange(self.rows), np.diff(self.row_ptr)))

    def decode(self) -> np.ndarray:
        entry_row, col = self.columns()
        dense = np.zeros((self.rows, self.cols), dtype=self.dtype)
        dense[entry_row, col] = self._entry_values(entry_row)
        return dense.reshape(self.shape)

    def _entry_values(self, entry_row: np.ndarray) -> np.ndarray:
        if self.codebook is None:
            _check(self.values is not None and self.values.shape == (self.entries,), "values length mismatch")
            return self.values.astype(self.dtype)
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

    def _validate(self) -> None:
        length_bits = _require_int(self.length_bits, "length_bits", 1, 32)
        delta_bits = _require_int(self.delta_bits, "delta_bits", 1, 16)  # decode's and OpenCL's limit
        _require_array(self.row_lengths, "row_lengths", _BYTES, (packed_nbytes(self.rows, length_bits),),
                       f"{self.rows} row lengths of {length_bits} bits")
        lengths = _unpack_fields(self.row_lengths, length_bits, self.rows).astype(np.int64)
        entries = int(lengths.sum())
        _require(entries <= _INT32_MAX, f"{entries} entries; at most {_INT32_MAX}")
        _require_array(self.deltas, "deltas", _BYTES, (packed_nbytes(entries, delta_bits),),
                       f"{entries} column deltas of {delta_bits} bits")
        self._validate_values(entries)
        self._validate_columns(lengths, _unpack_fields(self.deltas, delta_bits, entries))

    def _validate_values(self, entries: int) -> None:
        """Raw values (float, or int8 for an int8 tensor), or codebook indices whose entry 0 is the
        exact zero fillers stand for."""
        if self.codebook is None and self.indices is None:
            _require(type(self.value_bits) is int and self.value_bits == 0,
                     f"value_bits is {self.value_bits!r} but the values are stored raw (expected 0)")
            _require_array(self.values, "values", _RAW_VALUES, (entries,), f"one value per entry ({entries})")
            return
        _require(self.values is None, "both raw values and a codebook are stored")
        bits = _require_int(self.value_bits, "value_bits", 1, 8)
        _require_codebook(self.codebook, "codebook", bits, self.rows)
        _require_array(self.indices, "indices", _BYTES, (packed_nbytes(entries, bits),),
                       f"{entries} indices of {bits} bits")
        _require(not np.any(self.codebook[:, 0]), "codebook entry 0 is not 0.0 (filler entries stand for zero)")

    def _validate_columns(self, lengths: np.ndarray, deltas: np.ndarray) -> None:
        """Every decoded column inside the row, and strictly increasing along it: a row's first
        delta is its column (>= 0), later ones step right (>= 1; fillers too). decode() writes a
        repeated column once, the OpenCL kernel would add it twice. Row sums, not a running sum
        of every entry: no temporary as large as the stream (fresh pages cost more than the math)."""
        if not deltas.size:
            return
        full = np.flatnonzero(lengths)  # rows with entries
        starts = (np.cumsum(lengths) - lengths)[full]  # their first entries, increasing
        zeros = np.flatnonzero(deltas == 0)
        repeats = zeros[starts[np.minimum(np.searchsorted(starts, zeros), starts.size - 1)] != zeros]
        if repeats.size:
            _require(False, f"entry {int(repeats[0])} repeats the previous column of its row")
        last_column = np.add.reduceat(deltas, starts, dtype=np.int64)  # a row's largest column
        over = np.flatnonzero(last_column >= self.cols)
        if over.size:
            row, column = int(full[over[0]]), int(last_column[over[0]])
            _require(False, f"row {row} has column {column}, outside its {self.cols} columns")

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

    def _validate(self) -> None:
        _require(self.mode in ("shared", "per_input_channel"),
                 f"mode {self.mode!r} is neither 'shared' nor 'per_input_channel'")
        _require_array(self.centroids, "centroids", _FLOATS)
        k, c = self.shape[0], self.centroids
        if self.mode == "shared":
            expected = (c.shape[0],) + self.shape[1:] if c.ndim else None
            groups: tuple[int, ...] = ()
        else:
            _require(len(self.shape) == 4, f"per_input_channel needs a convolution weight, not {list(self.shape)}")
            expected = (self.shape[1], c.shape[1]) + self.shape[2:] if c.ndim > 1 else None
            groups = (self.shape[1],)
        _require(c.shape == expected, f"centroids have shape {list(c.shape)}, expected "
                                      f"{list(expected) if expected else '(centroids, ...)'} for {list(self.shape)}")
        clusters = self.clusters
        _require(1 <= clusters <= k, f"{clusters} centroids for {k} output channels")
        index = np.dtype(np.uint8 if clusters <= 256 else np.uint16)  # what encode_nnm stores
        _require_array(self.assignment, "assignment", (index,), groups + (k,), "one centroid per output channel")
        top = int(self.assignment.max(initial=0))
        _require(top < clusters, f"assignment {top} is out of range: there are {clusters} centroids")

    def describe(self) -> str:
        rate = 1 - self.clusters / self.shape[0]
        tag = "shared" if self.mode == "shared" else "per-input"
        return f"nnm-{tag}({100 * rate:.0f}% fewer)" + ("/fp16" if self.centroids.dtype == np.float16 else "")


@dataclass(frozen=True, eq=False)
class HuffmanBlocks(Encoding):
    """Pruned and / or clustered weights Huffman-coded in blocks that decode on their own (seed
    004; the bit-level format is in :mod:`edgesdk.compress.huffman`).

    ``layout`` "sparse": per block, each row's (column gap, value) pairs and an end-of-row code;
    values are codebook indices coded with ``index_lengths`` (``codebook`` (G, 2^value_bits)) or
    raw ``values`` (fp32 / fp16, entry order). ``layout`` "dense": every weight's codebook index.
    A kernel decodes one block at a time into a workspace of one block, never the whole layer.
    """
    block_rows: int
    block_cols: int
    layout: str
    stream: np.ndarray  # uint8: the blocks' codes back to back, then STREAM_PADDING zeros
    block_offsets: np.ndarray  # uint32 (blocks + 1,): byte offset of each block's code
    block_entries: np.ndarray  # uint32 (blocks,): entries (non-zeros; dense: weights) per block
    gap_lengths: np.ndarray | None = None  # uint8 (block_cols + 1,): sparse layout
    index_lengths: np.ndarray | None = None  # uint8 (2**value_bits,): codebook values
    codebook: np.ndarray | None = None  # (G, 2**value_bits) float32 / float16
    values: np.ndarray | None = None  # (entries,) float32 / float16: raw values (sparse layout)
    value_bits: int = 0
    zero_reserved: bool = False  # dense layout: codebook entry 0 is a pruned weight (0.0)
    kind: ClassVar[str] = "huffman"

    @property
    def grid(self):
        from .huffman import BlockGrid
        return BlockGrid(self.rows, self.cols, self.block_rows, self.block_cols)

    @property
    def entries(self) -> int:
        return int(np.sum(self.block_entries, dtype=np.int64))

    @property
    def nnz(self) -> int:
        """Stored entries: the sparse layout's non-zeros (the encoder drops zeros), every weight
        of the dense layout. Counted from the block headers, without decoding."""
        return self.entries

    def entry_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(rows, cols, codebook indices, or -1 for raw values) of every stored entry, in stored
        order: the native decoder where built (it also checks the stream), else the reference."""
        from . import huffman
        native = huffman.native_decoder()
        if native is not None:
            return native(self)
        rows, cols, idx, per_block = huffman.decode_reference(self.grid, self.layout, self.stream, self.block_offsets,
                                                              self.gap_lengths, self.index_lengths)
        _check(np.array_equal(per_block, self.block_entries.astype(np.int64)), "block entry counts differ")
        return rows, cols, idx

    def entry_values(self, rows: np.ndarray | None = None, idx: np.ndarray | None = None) -> np.ndarray:
        if rows is None:
            rows, _, idx = self.entry_arrays()
        if self.codebook is None:
            return np.asarray(self.values, dtype=np.float32)
        book = self.codebook.astype(np.float32)
        return book[np.zeros_like(rows) if book.shape[0] == 1 else rows, idx]

    def decode(self) -> np.ndarray:
        rows, cols, idx = self.entry_arrays()
        dense = np.zeros((self.rows, self.cols), dtype=np.float32)
        dense[rows, cols] = self.entry_values(rows, idx)
        return dense.reshape(self.shape)

    def arrays(self) -> dict[str, np.ndarray]:
        out = {"stream": self.stream, "block_offsets": self.block_offsets, "block_entries": self.block_entries}
        for name in ("gap_lengths", "index_lengths", "codebook", "values"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out

    def params(self) -> Params:
        return {"block_rows": self.block_rows, "block_cols": self.block_cols, "layout": self.layout,
                "value_bits": self.value_bits, "zero_reserved": self.zero_reserved}

    def _validate(self) -> None:
        from .huffman import STREAM_PADDING
        _require_int(self.block_rows, "block_rows", 1, 1 << 16)
        bw = _require_int(self.block_cols, "block_cols", 1, 4095)  # gap alphabet <= 4096 symbols
        _require(self.layout in ("sparse", "dense"), f"layout is {self.layout!r}, expected 'sparse' or 'dense'")
        _require(type(self.zero_reserved) is bool, f"zero_reserved is {self.zero_reserved!r}, not a bool")
        blocks = self.grid.blocks
        _require_array(self.block_offsets, "block_offsets", (np.dtype(np.uint32),), (blocks + 1,),
                       f"one per block of {self.block_rows} x {bw}, and the end")
        _require_array(self.block_entries, "block_entries", (np.dtype(np.uint32),), (blocks,), "one per block")
        offsets = self.block_offsets.astype(np.int64)
        _require(offsets[0] == 0 and bool(np.all(np.diff(offsets) >= 0)), "block_offsets do not start at 0 and rise")
        _require_array(self.stream, "stream", _BYTES, (int(offsets[-1]) + STREAM_PADDING,),
                       f"the blocks' {int(offsets[-1])} bytes and {STREAM_PADDING} bytes of padding")
        _require(not np.any(self.stream[-STREAM_PADDING:]), "the stream's padding is not zero")
        grid = self.grid  # every block's rows x columns, vectorised (1x1 blocks: millions of them)
        heights = np.minimum(self.block_rows, self.rows - np.arange(grid.grid_rows) * self.block_rows)
        widths = np.minimum(bw, self.cols - np.arange(grid.grid_cols) * bw)
        sizes = np.outer(heights, widths).reshape(-1)
        _require(bool(np.all(self.block_entries <= sizes)), "a block claims more entries than it has weights")
        if self.layout == "sparse":
            _require_code(self.gap_lengths, "gap_lengths", bw + 1, "one per gap and end-of-row")
        else:
            _require(self.gap_lengths is None, "a dense layout has no gap code")
            _require(self.codebook is not None, "a dense layout needs a codebook")
            _require(bool(np.array_equal(self.block_entries, sizes)), "a dense block's entries are not all its weights")
        if self.codebook is None:
            _require(self.value_bits == 0 and self.index_lengths is None, "raw values with index codes")
            _require_array(self.values, "values", _FLOATS, (self.entries,), "one per entry")
            _require(not self.zero_reserved, "zero_reserved without a codebook")
        else:
            _require(self.values is None, "both raw values and a codebook are stored")
            bits = _require_int(self.value_bits, "value_bits", 1, 8)
            _require_codebook(self.codebook, "codebook", bits, self.rows)
            _require_code(self.index_lengths, "index_lengths", 1 << bits, "one per codebook entry")
            if self.zero_reserved:
                _require(not np.any(self.codebook[:, 0]), "codebook entry 0 is not 0.0 but zero_reserved says it is")
        try:  # the stream itself: every block decodes to its entry count, inside its bytes
            self.entry_arrays()
        except (ValueError, EncodingError) as exc:
            raise EncodingError(f"stream: {exc}") from None

    def describe(self) -> str:
        if self.codebook is not None:
            values = f"cluster{self.value_bits}/{'layer' if self.codebook.shape[0] == 1 else 'channel'}"
        else:
            values = _values_dtype(self.values)
        if self.layout == "dense":
            return f"huffman[{values}]"
        sparsity = 1 - self.entries / max(1, self.rows * self.cols)
        return f"huffman-csr({100 * sparsity:.0f}% zero)+{values}"


@dataclass(frozen=True, eq=False)
class LQBinary(Encoding):
    """Learned binary-coded weights (LQ-Nets, seed 002; :mod:`edgesdk.compress.lq`): per output
    channel o, ``bits`` basis values ``basis[o]`` (float32) and, for every weight, a ``bits``-bit
    code u: ``w = sum_j basis[o, j] * (2 * bit_j(u) - 1)``. ``planes`` (O, bits, ceil(N / 32)) uint32
    holds plane j = bit j of every code along the matrix view's row (the reduction dimension: Gemm
    in-features, Conv (c, kh, kw)), element k at word k >> 5, bit k & 31 (little-endian words, LSB
    first, bit 1 = +1), with every bit past N zero - the layout the popcount kernels read, so
    ``validate`` checks it. Explicit fields, not implied ones (the seed's flatbuffers lesson):
    ``bits``, ``word_bits`` (32), ``bit_order`` ("lsb_first") and ``sign`` ("one_is_plus")."""
    basis: np.ndarray  # (O, bits) float32
    planes: np.ndarray  # (O, bits, words) uint32
    bits: int
    word_bits: int = 32
    bit_order: str = "lsb_first"
    sign: str = "one_is_plus"
    kind: ClassVar[str] = "lq"

    def codes(self) -> np.ndarray:
        """(O, N) uint8: every weight's code."""
        from .lq import unpack_planes
        return unpack_planes(self.planes, self.cols)

    def levels(self) -> np.ndarray:
        """(O, 2^bits) float32: each channel's weight for every code (its codebook)."""
        from .lq import weight_levels
        return weight_levels(self.basis)

    def decode(self) -> np.ndarray:
        from .lq import decode_weights
        return decode_weights(self.codes(), self.basis).reshape(self.shape)

    def arrays(self) -> dict[str, np.ndarray]:
        return {"basis": self.basis, "planes": self.planes}

    def params(self) -> Params:
        return {"bits": self.bits, "word_bits": self.word_bits, "bit_order": self.bit_order, "sign": self.sign}

    def _validate(self) -> None:
        from .lq import MAX_BITS, WORD_BITS, tail_bits_clear, words_for
        bits = _require_int(self.bits, "bits", 1, MAX_BITS)
        _require(self.word_bits == WORD_BITS, f"word_bits is {self.word_bits!r}, expected {WORD_BITS}")
        _require(self.bit_order == "lsb_first", f"bit_order is {self.bit_order!r}, expected 'lsb_first'")
        _require(self.sign == "one_is_plus", f"sign is {self.sign!r}, expected 'one_is_plus'")
        _require_array(self.basis, "basis", (_FLOAT32,), (self.rows, bits), "one basis per output channel")
        _require(bool(np.all(np.isfinite(self.basis))), "basis holds NaN or infinity")
        _require_array(self.planes, "planes", (np.dtype(np.uint32),), (self.rows, bits, words_for(self.cols)),
                       f"{bits} bit-planes of {self.cols} weights per output channel")
        _require(tail_bits_clear(self.planes, self.cols), f"bits past weight {self.cols} are set in planes")

    def describe(self) -> str:
        return f"lq{self.bits}"


ENCODINGS: dict[str, type[Encoding]] = {cls.kind: cls for cls in (DenseFP16, Clustered, SparseCSR, NNM,
                                                                   HuffmanBlocks, LQBinary)}


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


def _require(condition: bool, message: str) -> None:
    """validate()'s failure: the message names the field; the caller names the tensor."""
    if not condition:
        raise EncodingError(message)


def _require_int(value: Any, name: str, low: int, high: int) -> int:
    _require(type(value) is int and low <= value <= high, f"{name} is {value!r}, expected an int in {low}..{high}")
    return value


def _require_array(array: Any, name: str, dtypes: tuple[np.dtype, ...], shape: tuple[int, ...] | None = None,
                   meaning: str = "") -> None:
    # plain ifs: the messages are built only for a file that fails (validate runs on every load)
    if not isinstance(array, np.ndarray):
        raise EncodingError(f"array {name!r} is missing")
    if array.dtype not in dtypes:
        raise EncodingError(f"{name} are {array.dtype}, expected {' or '.join(d.name for d in dtypes)}")
    if shape is not None and array.shape != shape:
        raise EncodingError(f"{name} have shape {list(array.shape)}, expected {list(shape)}"
                            + (f" ({meaning})" if meaning else ""))


def _require_codebook(book: Any, name: str, bits: int, rows: int) -> None:
    """(1 or rows, 2**bits) floats: one codebook per layer or per output channel."""
    _require_array(book, name, _FLOATS)
    _require(book.ndim == 2 and book.shape[1] == 1 << bits and book.shape[0] in (1, rows),
             f"{name} has shape {list(book.shape)}, expected [1 or {rows}, {1 << bits}] for {bits} bits")


def _require_code(lengths: Any, name: str, symbols: int, meaning: str) -> None:
    """Code lengths (uint8, one per symbol) of a canonical Huffman code the decoders can table."""
    from .huffman import MAX_CODE_BITS, kraft_ok
    _require_array(lengths, name, _BYTES, (symbols,), meaning)
    _require(int(lengths.max()) <= MAX_CODE_BITS and kraft_ok(lengths),
             f"{name} are no prefix code of at most {MAX_CODE_BITS} bits")


def _unpack_fields(packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    """``count`` LSB-first fields of ``bits`` (1..32) bits (as bitpack.unpack_bits, which
    spends 8 bytes per *bit*: too slow and too large to validate every layer on every load).
    Up to 8 bits as uint8 (:func:`_unpack_octets`); wider fields (row lengths) as int64, a chunk
    at a time."""
    if bits <= 8:
        return _unpack_octets(np.asarray(packed, dtype=np.uint8).reshape(-1), bits, count)
    source = np.concatenate([np.asarray(packed, dtype=np.uint8).reshape(-1), np.zeros(5, np.uint8)])
    out = np.empty(count, dtype=np.int64)
    spans = (bits + 14) // 8  # bytes a field can touch: it may start at any bit of its first byte
    mask = np.uint64((1 << bits) - 1)
    for begin in range(0, count, _CHUNK):
        position = np.arange(begin, min(count, begin + _CHUNK), dtype=np.int64) * bits
        first = position >> 3
        word = np.zeros(position.size, dtype=np.uint64)
        for i in range(spans):
            word |= source[first + i].astype(np.uint64) << np.uint64(8 * i)
        out[begin:begin + position.size] = (word >> (position & 7).astype(np.uint64)) & mask
    return out


def _unpack_octets(packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    """Fields of up to 8 bits as uint8. Every operation runs along the stream (a short inner axis
    would cost numpy a loop per element): one pass per field position, writing a strided column."""
    if 8 % bits == 0:  # whole fields per byte: shift the bytes themselves
        per, nbytes = 8 // bits, -(-count * bits // 8)
        source = np.concatenate([packed[:nbytes], np.zeros(max(0, nbytes - packed.size), np.uint8)])
        out = np.empty((nbytes, per), np.uint8)
        for k in range(per):
            np.bitwise_and(source >> np.uint8(k * bits), np.uint8((1 << bits) - 1), out=out[:, k])
        return out.reshape(-1)[:count]
    groups = -(-count // 8)  # every 8 fields fill exactly `bits` bytes
    source = np.zeros(groups * bits, np.uint8)
    n = min(packed.size, source.size)
    source[:n] = packed[:n]
    source = source.reshape(groups, bits)
    word_type = np.uint32 if bits <= 4 else np.uint64  # 8 fields of `bits` bits
    word = source[:, 0].astype(word_type)
    for j in range(1, bits):
        word |= source[:, j].astype(word_type) << word_type(8 * j)
    out = np.empty((groups, 8), np.uint8)
    for k in range(8):
        np.bitwise_and(word >> word_type(k * bits), word_type((1 << bits) - 1), out=out[:, k], casting="unsafe")
    return out.reshape(-1)[:count]


_CHUNK = 1 << 18  # fields per pass of _unpack_fields above 8 bits
