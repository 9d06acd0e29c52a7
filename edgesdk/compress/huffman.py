"""Canonical Huffman coding of compressed weights in independently decodable blocks (seed 004,
Deep Compression's last stage): the layout, the encoder and a pure-Python reference decoder.

The stored form is :class:`edgesdk.compress.encodings.HuffmanBlocks` (kind ``"huffman"``). Its
format, which the native decoder (``cpu_native/src/kernels/huffman.cc``) and the OpenCL kernels
follow bit for bit:

* **Blocks.** The weight's matrix view (rows = output channels) is cut into blocks of
  ``block_rows`` x ``block_cols`` (128 x 128 by default; the last block row / column is
  shorter), numbered row-major: block ``b = bi * block_grid_cols + bj`` covers rows
  ``[bi * block_rows, ...)`` and columns ``[bj * block_cols, ...)``. Block ``b``'s code starts at
  byte ``block_offsets[b]`` of ``stream`` and ends (with zero padding to a byte) at or before
  ``block_offsets[b + 1]``: each block decodes on its own, into a workspace of one block. A
  block's code ends in its last byte (zero bits pad it to the byte, no more), so that no zero
  padding can stand in for a missing code.
* **Bits.** Least significant bit first (bit i of the stream is ``stream[i >> 3] >> (i & 7) & 1``,
  as :mod:`.bitpack` and deflate). A code of length L whose canonical value is c (most
  significant bit first, as deflate assigns them) is written as c bit-reversed, so a decoder
  peeks ``MAX_CODE_BITS`` low bits and looks them up. ``stream`` carries 8 zero bytes after the
  last block so that decoders may refill a 64-bit buffer with one unaligned load.
* **Codes.** Canonical codes are given by their lengths alone (``gap_lengths``,
  ``index_lengths``: one uint8 per symbol, 0 for a symbol that never occurs, at most
  ``MAX_CODE_BITS``). Codes are assigned in order of (length, symbol). A table with one used
  symbol gives it length 1 (code 0). Lengths must satisfy Kraft's inequality (sum 2^-L <= 1).
* **Layout "sparse"** (pruned weights): for each row of the block in order, the row's non-zero
  entries in increasing column order as (gap, value) pairs, then the end-of-row symbol. The gap
  alphabet is ``0 .. block_cols`` where ``block_cols`` is end-of-row and g < block_cols steps to
  column ``previous + 1 + g`` (the previous column of a row starts at -1, block-local); every
  column stays inside the block. The value is a Huffman-coded codebook index (``index_lengths``,
  alphabet ``2 ** value_bits``) when the tensor has a codebook, else nothing: raw values
  (``values``, fp32 or fp16) are stored in entry order (block by block, rows in order), and a
  block's first value is the sum of ``block_entries`` of the blocks before it.
* **Layout "dense"** (clustered weights, every weight an index): each row's ``width`` index
  codes in column order, no gaps, no end-of-row. Index 0 of a ``zero_reserved`` codebook is
  a pruned weight (0.0).
* ``block_entries[b]``: the non-zero entries of block b (sparse; dense: rows x columns of the
  block). Decoders size workspaces from it and check it.

The CSR's column deltas are exactly what the gap code compresses (seed 004 §2.2's relative
indices, without fillers: a gap of a whole block is one symbol); the index code compresses the
k-means indices, whose clusters are far from equally populated (Deep Compression: 20-30% off a
pruned + clustered model).
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

MAX_CODE_BITS = 12  # a 4096-entry lookup table per code: 8 KB of uint16, in L1
DEFAULT_BLOCK = (128, 128)
STREAM_PADDING = 8  # zero bytes after the last block


# -- codes ---------------------------------------------------------------------------------------

def code_lengths(freqs: np.ndarray, limit: int = MAX_CODE_BITS) -> np.ndarray:
    """Huffman code lengths (uint8) for symbol frequencies, none longer than ``limit``; unused
    symbols get 0, a lone used symbol gets 1. Frequencies are flattened (halved, floored at 1)
    until the longest code fits: the simple limiter zstd and others fall back on, which costs
    almost nothing when, as here, the alphabet is small (<= 257 symbols)."""
    freqs = np.asarray(freqs, dtype=np.int64)
    used = np.flatnonzero(freqs)
    lengths = np.zeros(freqs.size, dtype=np.uint8)
    if used.size == 0:
        return lengths
    if used.size == 1:
        lengths[used] = 1
        return lengths
    if used.size > 1 << limit:
        raise ValueError(f"{used.size} symbols cannot have codes of at most {limit} bits")
    weights = freqs[used].copy()
    while True:
        depth = _huffman_depths(weights)
        if depth.max() <= limit:
            lengths[used] = depth
            return lengths
        weights = np.maximum(1, weights >> 1)


def _huffman_depths(weights: np.ndarray) -> np.ndarray:
    """Leaf depths of a Huffman tree over ``weights`` (>= 2 symbols); ties broken by symbol
    order so that the same frequencies always give the same code."""
    heap = [(int(w), i, (i,)) for i, w in enumerate(weights)]
    heapq.heapify(heap)
    depth = np.zeros(len(weights), dtype=np.int64)
    order = len(weights)
    while len(heap) > 1:
        w1, _, a = heapq.heappop(heap)
        w2, _, b = heapq.heappop(heap)
        for leaf in a + b:
            depth[leaf] += 1
        heapq.heappush(heap, (w1 + w2, order, a + b))
        order += 1
    return depth


def canonical_codes(lengths: np.ndarray) -> np.ndarray:
    """The canonical code of every symbol (MSB-first value; 0 for unused symbols): in order of
    (length, symbol), each code is the previous one plus 1, shifted left when the length grows."""
    lengths = np.asarray(lengths, dtype=np.int64)
    codes = np.zeros(lengths.size, dtype=np.int64)
    code, previous = 0, 0
    for symbol in sorted(np.flatnonzero(lengths), key=lambda s: (lengths[s], s)):
        code <<= int(lengths[symbol]) - previous
        previous = int(lengths[symbol])
        codes[symbol] = code
        code += 1
    return codes


def kraft_ok(lengths: np.ndarray) -> bool:
    """True when the lengths can be a prefix code (sum of 2^-L over used symbols <= 1)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    used = lengths[lengths > 0]
    return int(np.sum(np.left_shift(1, MAX_CODE_BITS - used))) <= 1 << MAX_CODE_BITS


def reversed_codes(lengths: np.ndarray) -> np.ndarray:
    """Each symbol's code bit-reversed within its length: what goes into the LSB-first stream."""
    lengths = np.asarray(lengths, dtype=np.int64)
    codes = canonical_codes(lengths)
    out = np.zeros_like(codes)
    for bit in range(MAX_CODE_BITS):
        take = lengths > bit
        out[take] |= ((codes[take] >> bit) & 1) << (lengths[take] - 1 - bit)
    return out


# -- layout --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BlockGrid:
    rows: int
    cols: int
    block_rows: int
    block_cols: int

    @property
    def grid_rows(self) -> int:
        return -(-self.rows // self.block_rows)

    @property
    def grid_cols(self) -> int:
        return -(-self.cols // self.block_cols)

    @property
    def blocks(self) -> int:
        return self.grid_rows * self.grid_cols

    def block_shape(self, b: int) -> tuple[int, int, int, int]:
        """(first row, first column, rows, columns) of block ``b``."""
        bi, bj = divmod(b, self.grid_cols)
        r0, c0 = bi * self.block_rows, bj * self.block_cols
        return r0, c0, min(self.block_rows, self.rows - r0), min(self.block_cols, self.cols - c0)


@dataclass(frozen=True)
class Symbols:
    """A symbol sequence to code: per symbol its alphabet (0: gap, 1: index), its value, and its
    block; in stream order."""
    table: np.ndarray
    symbol: np.ndarray
    block: np.ndarray


def sparse_symbols(grid: BlockGrid, rows: np.ndarray, cols: np.ndarray, indices: np.ndarray | None
                   ) -> tuple[Symbols, np.ndarray, np.ndarray]:
    """The symbols of the sparse layout for entries at (rows, cols) (any order, no repeats), with
    their codebook indices (or None for raw values). Returns the symbols, the entry order
    (a permutation of the entries: how raw values are stored) and the entries per block."""
    gb = rows // grid.block_rows * grid.grid_cols + cols // grid.block_cols
    local_row = rows % grid.block_rows
    local_col = cols % grid.block_cols
    order = np.lexsort((local_col, local_row, gb))
    gb, local_row, local_col = gb[order], local_row[order], local_col[order]
    counts = np.bincount(gb, minlength=grid.blocks).astype(np.int64)
    # gaps: a row's first entry steps from -1, the others from the previous entry's column
    same_row = np.zeros(order.size, dtype=bool)
    same_row[1:] = (gb[1:] == gb[:-1]) & (local_row[1:] == local_row[:-1])
    previous = np.where(same_row, np.concatenate([[-1], local_col[:-1]]), -1)
    gaps = local_col - previous - 1
    # end-of-row events: one per row of every block, sorted after the row's entries
    heights = np.array([grid.block_shape(b)[2] for b in range(grid.blocks)], dtype=np.int64)
    eor_block = np.repeat(np.arange(grid.blocks), heights)
    eor_row = np.arange(eor_block.size) - np.repeat(np.cumsum(heights) - heights, heights)
    n, e = order.size, eor_block.size
    # stream order: (block, row, entry-before-EOR, column), entries emitting gap then index
    event_block = np.concatenate([gb, eor_block])
    event_row = np.concatenate([local_row, eor_row])
    event_col = np.concatenate([local_col, np.full(e, grid.block_cols)])
    event_order = np.lexsort((event_col, event_row, event_block))
    is_entry = event_order < n
    per_event = np.where(is_entry, 1 if indices is None else 2, 1)
    starts = np.cumsum(per_event) - per_event
    total = int(per_event.sum())
    table = np.zeros(total, dtype=np.int8)
    symbol = np.zeros(total, dtype=np.int64)
    block = np.repeat(event_block[event_order], per_event)
    entry_events = event_order[is_entry]
    symbol[starts[is_entry]] = gaps[entry_events]
    symbol[starts[~is_entry]] = grid.block_cols
    if indices is not None:
        symbol[starts[is_entry] + 1] = np.asarray(indices)[order][entry_events]
        table[starts[is_entry] + 1] = 1
    return Symbols(table, symbol, block), order, counts


def dense_symbols(grid: BlockGrid, index_matrix: np.ndarray) -> tuple[Symbols, np.ndarray]:
    """The symbols of the dense layout: every index of each block, rows in order. Returns them and
    the entries per block (rows x columns)."""
    parts, blocks, counts = [], [], np.zeros(grid.blocks, dtype=np.int64)
    for b in range(grid.blocks):
        r0, c0, h, w = grid.block_shape(b)
        parts.append(index_matrix[r0:r0 + h, c0:c0 + w].reshape(-1))
        blocks.append(np.full(h * w, b, dtype=np.int64))
        counts[b] = h * w
    symbol = np.concatenate(parts).astype(np.int64)
    return Symbols(np.ones(symbol.size, np.int8), symbol, np.concatenate(blocks)), counts


def write_stream(symbols: Symbols, tables: list[np.ndarray], n_blocks: int) -> tuple[np.ndarray, np.ndarray]:
    """Bit-pack the symbols with the codes of ``tables`` (lengths per alphabet), each block from
    a byte boundary. Returns (stream with STREAM_PADDING zero bytes, block byte offsets)."""
    lengths = np.zeros(symbols.symbol.size, dtype=np.int64)
    codes = np.zeros(symbols.symbol.size, dtype=np.int64)
    for t, table_lengths in enumerate(tables):
        if table_lengths is None:
            continue
        take = symbols.table == t
        lengths[take] = np.asarray(table_lengths, dtype=np.int64)[symbols.symbol[take]]
        codes[take] = reversed_codes(table_lengths)[symbols.symbol[take]]
    if np.any(lengths == 0):
        raise ValueError("a symbol without a code")  # the caller built the tables from these symbols
    block_bits = np.bincount(symbols.block, weights=lengths, minlength=n_blocks).astype(np.int64)
    block_bytes = (block_bits + 7) // 8
    offsets = np.concatenate([[0], np.cumsum(block_bytes)])
    if offsets[-1] >= 2**32 - STREAM_PADDING:
        raise ValueError(f"{offsets[-1]} bytes of code in one tensor; at most 4 GiB")
    # each symbol's first bit: its block's start plus the bits before it in the block
    within = np.cumsum(lengths) - lengths
    block_first = np.zeros(n_blocks, dtype=np.int64)
    nonempty = np.bincount(symbols.block, minlength=n_blocks) > 0
    first_symbol = np.searchsorted(symbols.block, np.arange(n_blocks))
    block_first[nonempty] = within[first_symbol[nonempty]]
    position = offsets[symbols.block] * 8 + within - block_first[symbols.block]
    # spread every code into its bits (codes are at most MAX_CODE_BITS long)
    owner = np.repeat(np.arange(lengths.size), lengths)
    bit_index = np.arange(owner.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    bits = np.zeros(int(offsets[-1]) * 8, dtype=np.uint8)
    bits[position[owner] + bit_index] = (codes[owner] >> bit_index) & 1
    stream = np.concatenate([np.packbits(bits, bitorder="little"), np.zeros(STREAM_PADDING, np.uint8)])
    return stream, offsets.astype(np.uint32)


def table_for(symbols: Symbols, t: int, alphabet: int) -> np.ndarray:
    return code_lengths(np.bincount(symbols.symbol[symbols.table == t], minlength=alphabet))


# -- reference decoder ---------------------------------------------------------------------------

class _BitReader:
    def __init__(self, stream: np.ndarray, byte_offset: int, end_byte: int):
        self.data = stream
        self.position = byte_offset * 8
        self.end = end_byte * 8

    def symbol(self, decode: dict[tuple[int, int], int], what: str) -> int:
        code = 0
        for length in range(1, MAX_CODE_BITS + 1):
            if self.position >= self.end:
                raise ValueError(f"a {what} code runs past its block's end")
            code = (code << 1) | int(self.data[self.position >> 3] >> (self.position & 7) & 1)
            self.position += 1
            symbol = decode.get((length, code))
            if symbol is not None:
                return symbol
        raise ValueError(f"bits that are no {what} code")


def _decoder(lengths: np.ndarray | None) -> dict[tuple[int, int], int]:
    if lengths is None:
        return {}
    codes = canonical_codes(lengths)
    return {(int(lengths[s]), int(codes[s])): int(s) for s in np.flatnonzero(lengths)}


def decode_reference(grid: BlockGrid, layout: str, stream: np.ndarray, offsets: np.ndarray,
                     gap_lengths: np.ndarray | None, index_lengths: np.ndarray | None
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Decode every block, one bit at a time (slow: tests and machines without the native module).
    Returns (rows, cols, indices or -1 for raw values, entries per block), entries in stored
    order; raises ValueError on a stream that breaks the format."""
    gaps, idx = _decoder(gap_lengths), _decoder(index_lengths)
    rows, cols, values, per_block = [], [], [], []
    for b in range(grid.blocks):
        r0, c0, h, w = grid.block_shape(b)
        reader = _BitReader(stream, int(offsets[b]), int(offsets[b + 1]))
        before = len(rows)
        for r in range(h):
            if layout == "dense":
                for c in range(w):
                    rows.append(r0 + r)
                    cols.append(c0 + c)
                    values.append(reader.symbol(idx, "index"))
                continue
            column = -1
            while True:
                g = reader.symbol(gaps, "gap")
                if g == grid.block_cols:
                    break
                column += 1 + g
                if column >= w:
                    raise ValueError(f"block {b} row {r} steps to column {column} of {w}")
                rows.append(r0 + r)
                cols.append(c0 + column)
                values.append(reader.symbol(idx, "index") if idx else -1)
        if (reader.position + 7) // 8 != int(offsets[b + 1]):
            raise ValueError(f"block {b}: its code ends before its last byte")
        per_block.append(len(rows) - before)
    as_array = lambda v: np.asarray(v, dtype=np.int64)  # noqa: E731
    return as_array(rows), as_array(cols), as_array(values), as_array(per_block)


def native_decoder():
    """``decode(enc) -> (rows, cols, indices or -1)`` (int64, stored order) by the native decoder
    (``cpu_native/src/kernels/huffman.h``: it checks every code, column and block end and raises
    ValueError on a stream that breaks the format), or None where ``edgesdk._native`` is not built
    or predates it: callers then use :func:`decode_reference`."""
    try:
        from .. import _native
    except ImportError:
        return None
    decode = getattr(_native, "huffman_decode", None)
    if decode is None:
        return None

    def run(enc) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        optional = [None if a is None else np.ascontiguousarray(a) for a in (enc.gap_lengths, enc.index_lengths)]
        return decode(enc.rows, enc.cols, enc.block_rows, enc.block_cols, enc.layout,
                      np.ascontiguousarray(enc.stream), np.ascontiguousarray(enc.block_offsets),
                      np.ascontiguousarray(enc.block_entries), *optional)
    return run


def entropy_bits(freqs: np.ndarray) -> float:
    """Shannon's bound on a code for these frequencies, in bits (what Huffman approaches)."""
    f = np.asarray(freqs, dtype=np.float64)
    f = f[f > 0]
    return float(-(f * np.log2(f / f.sum())).sum()) if f.size else 0.0


__all__ = ["MAX_CODE_BITS", "DEFAULT_BLOCK", "STREAM_PADDING", "BlockGrid", "code_lengths", "canonical_codes",
           "reversed_codes", "kraft_ok", "sparse_symbols", "dense_symbols", "write_stream", "decode_reference",
           "entropy_bits", "native_decoder"]
