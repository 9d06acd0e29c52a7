"""Build encodings from dense weights: pruning masks, k-means codebooks, CSR (of float or int8
weights), NNM, fp16."""
from __future__ import annotations

import numpy as np

from .bitpack import pack_bits
from . import huffman
from .bitpack import unpack_bits
from .encodings import NNM, Clustered, DenseFP16, HuffmanBlocks, LQBinary, SparseCSR
from .kmeans import kmeans_1d, kmeans_vectors

MAX_DELTA_BITS = 8


def matrix_view(w: np.ndarray) -> np.ndarray:
    """Rows = output channels, columns = the rest (C order)."""
    return np.asarray(w, dtype=np.float32).reshape(w.shape[0], -1)


def magnitude_threshold(magnitudes: np.ndarray, sparsity: float) -> float:
    """The |w| at or below which a fraction ``sparsity`` of the weights falls."""
    if sparsity <= 0:
        return -1.0
    flat = np.sort(np.abs(magnitudes).reshape(-1))
    cut = int(round(sparsity * flat.size))
    return float(flat[cut - 1]) if cut > 0 else -1.0


def prune_mask(w: np.ndarray, sparsity: float | None = None, threshold: float | None = None) -> np.ndarray:
    """True where a weight is kept. Give the layer's own sparsity or a (global) threshold."""
    if threshold is None:
        threshold = magnitude_threshold(w, sparsity or 0.0)
    return np.abs(w) > threshold


def _store(values: np.ndarray, fp16: bool) -> np.ndarray:
    return values.astype(np.float16 if fp16 else np.float32)


def encode_fp16(w: np.ndarray) -> DenseFP16:
    return DenseFP16(tuple(w.shape), np.asarray(w, dtype=np.float16))


def _codebooks(m: np.ndarray, keep: np.ndarray, bits: int, per_channel: bool, init: str,
               zero_reserved: bool, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Codebook (G, 2^bits) and indices (rows, cols) for matrix ``m``; pruned entries -> index 0."""
    k = 1 << bits
    groups = m if per_channel else m.reshape(1, -1)
    mask = keep if per_channel else keep.reshape(1, -1)
    if zero_reserved:  # entry 0 is the exact zero of pruned weights; k-1 clusters for the rest
        book, idx = kmeans_1d(groups, k - 1, mask=mask, init=init, seed=seed) if k > 1 else (None, None)
        book = np.concatenate([np.zeros((groups.shape[0], 1), np.float32), book], axis=1)
        idx = np.where(mask, idx + 1, 0)
    else:
        book, idx = kmeans_1d(groups, k, init=init, seed=seed)
    return book, idx.reshape(m.shape)


def encode_clustered(w: np.ndarray, bits: int, *, per_channel: bool = False, init: str = "linear",
                     keep: np.ndarray | None = None, fp16: bool = False, seed: int = 0) -> Clustered:
    """k-means codebook of 2^bits entries; with ``keep`` (a pruning mask) entry 0 is reserved for 0."""
    if not 1 <= bits <= 8:
        raise ValueError(f"cluster bits must be 1..8, got {bits}")
    m = matrix_view(w)
    zero_reserved = keep is not None
    if zero_reserved and bits == 1 and keep.any():
        raise ValueError("1-bit clustering of a pruned layer leaves no entry for non-zero weights; use >= 2 bits")
    keep_m = matrix_view(keep).astype(bool) if keep is not None else np.ones_like(m, dtype=bool)
    book, idx = _codebooks(m, keep_m, bits, per_channel, init, zero_reserved, seed)
    return Clustered(tuple(w.shape), _store(book, fp16), pack_bits(idx, bits), bits, zero_reserved)


def encode_sparse(w: np.ndarray, keep: np.ndarray, *, bits: int | None = None, per_channel: bool = False,
                  init: str = "linear", fp16: bool = False, seed: int = 0) -> SparseCSR:
    """Relative-index CSR of the kept weights, values raw or clustered (codebook entry 0 = zero).

    The delta field width is chosen per layer to minimise the stored size (fillers included).
    An int8 ``w`` (the weights of an integer op) keeps its values raw and int8: the encoding
    decodes to exactly ``w`` where ``keep``, 0 elsewhere (neither ``bits`` nor ``fp16`` apply).
    """
    integer = np.asarray(w).dtype == np.int8
    if integer and (bits is not None or fp16):
        raise ValueError("int8 weights are stored raw: no clustering (bits) and no fp16")
    m = np.asarray(w).reshape(w.shape[0], -1) if integer else matrix_view(w)
    keep_m = matrix_view(keep).astype(bool)
    rows, cols = np.nonzero(keep_m)  # row-major: rows ascending, columns ascending within a row
    if bits is not None:
        book, idx = _codebooks(m, keep_m, bits, per_channel, init, True, seed)
        entry_values = idx[rows, cols]
    else:
        book, entry_values = None, m[rows, cols]
    if bits is None:
        return _csr(tuple(w.shape), rows, cols, entry_values if integer else _store(entry_values, fp16))
    return _csr(tuple(w.shape), rows, cols, entry_values, _store(book, fp16), bits)


def _csr(shape: tuple[int, ...], rows: np.ndarray, cols: np.ndarray, entry_values: np.ndarray,
         codebook: np.ndarray | None = None, bits: int = 0) -> SparseCSR:
    """The CSR of entries at (rows, cols), row-major, no repeats: raw values in their stored
    dtype, or codebook indices (``bits`` wide, never the reserved 0). The delta field width is
    the one that minimises the stored size (fillers included)."""
    n_rows = shape[0]
    value_bits = bits or entry_values.dtype.itemsize * 8
    delta_bits = min(range(1, MAX_DELTA_BITS + 1),
                     key=lambda k: _csr_layout(rows, cols, n_rows, k)[2] * (k + value_bits))
    row_ptr, deltas, entries, filler_at = _csr_layout(rows, cols, n_rows, delta_bits)
    values = np.zeros(entries, dtype=entry_values.dtype)
    values[~filler_at] = entry_values
    lengths = np.diff(row_ptr)
    length_bits = max(1, int(lengths.max(initial=0)).bit_length())
    common = dict(row_lengths=pack_bits(lengths, length_bits), length_bits=length_bits,
                  deltas=pack_bits(deltas, delta_bits), delta_bits=delta_bits)
    if codebook is None:
        return SparseCSR(shape, values=values, **common)
    return SparseCSR(shape, codebook=codebook, indices=pack_bits(values, bits), value_bits=bits, **common)


def _csr_layout(rows: np.ndarray, cols: np.ndarray, n_rows: int, k: int):
    """Entry layout with fillers for a k-bit delta field: (row_ptr, deltas, entries, filler mask).

    Delta of a row's first entry = its column; later ones = column - previous column. A delta
    larger than 2^k - 1 is preceded by ceil(d / (2^k - 1)) - 1 fillers of delta 2^k - 1 each.
    """
    top = (1 << k) - 1
    first = np.ones(len(rows), dtype=bool)
    first[1:] = rows[1:] != rows[:-1]
    prev = np.where(first, 0, np.concatenate([[0], cols[:-1]]))
    d = cols - prev
    fillers = np.maximum(0, -(-d // top) - 1) if top > 0 else np.zeros_like(d)
    total = len(rows) + int(fillers.sum())
    # each real entry lands after its own fillers
    real_pos = np.arange(len(rows)) + np.cumsum(fillers)
    deltas = np.full(total, top, dtype=np.int64)
    deltas[real_pos] = d - fillers * top
    filler_at = np.ones(total, dtype=bool)
    filler_at[real_pos] = False
    per_row = np.bincount(rows, weights=1 + fillers, minlength=n_rows).astype(np.int64)
    row_ptr = np.concatenate([[0], np.cumsum(per_row)])
    return row_ptr, deltas, total, filler_at


def encode_nnm(w: np.ndarray, rate: float, *, mode: str = "shared", init: str = "kmeans++", fp16: bool = False,
               seed: int = 0) -> NNM:
    """Cluster output channels (``shared``) or per-input-channel filter slices into (1-rate)*K."""
    k = w.shape[0]
    clusters = max(1, int(round((1.0 - rate) * k)))
    index_dtype = np.uint8 if clusters <= 256 else np.uint16
    if mode == "shared":
        centroids, assign = kmeans_vectors(matrix_view(w)[None], clusters, init=init, seed=seed)
        return NNM(tuple(w.shape), _store(centroids[0].reshape((-1,) + w.shape[1:]), fp16),
                   assign[0].astype(index_dtype), "shared")
    if mode != "per_input_channel" or w.ndim != 4:
        raise ValueError(f"NNM mode {mode!r} needs 'shared', or 'per_input_channel' on a conv weight")
    slices = np.ascontiguousarray(np.moveaxis(w, 1, 0)).reshape(w.shape[1], k, -1)  # (C, K, R*S)
    centroids, assign = kmeans_vectors(slices, clusters, init=init, seed=seed)
    return NNM(tuple(w.shape), _store(centroids.reshape((w.shape[1], -1) + w.shape[2:]), fp16),
               assign.astype(index_dtype), "per_input_channel")


def encode_lq(w: np.ndarray, bits: int, *, iters: int = 20) -> LQBinary:
    """Learned binary-coded weights (LQ-Nets): each output channel's basis fitted by QEM
    (:func:`edgesdk.compress.lq.fit_weight_basis`), every weight its nearest level's code."""
    from .lq import fit_weight_basis, pack_planes
    basis, codes = fit_weight_basis(matrix_view(w), bits, iters=iters)
    return LQBinary(tuple(w.shape), basis, pack_planes(codes, bits), bits)


def lq_from_codes(shape: tuple[int, ...], basis: np.ndarray, codes: np.ndarray) -> LQBinary:
    """The encoding of weights already on their levels (fine-tuning's result): ``codes`` (O, N)."""
    from .lq import pack_planes
    basis = np.ascontiguousarray(basis, dtype=np.float32)
    return LQBinary(tuple(int(d) for d in shape), basis, pack_planes(codes, basis.shape[1]), basis.shape[1])


def lq_as_clustered(enc: LQBinary) -> Clustered:
    """The same weights as per-channel codebooks (a channel's 2^bits levels in code order, each
    weight's code its index): what runs an LQ layer whose input is not quantized through the
    clustered (codebook-in-registers) kernels. Decodes to exactly the same tensor."""
    return Clustered(enc.shape, enc.levels(), pack_bits(enc.codes(), enc.bits), enc.bits)


def encode_huffman(enc: SparseCSR | Clustered, block: tuple[int, int] = huffman.DEFAULT_BLOCK) -> HuffmanBlocks:
    """The same weights Huffman-coded in blocks (:mod:`.huffman`): a CSR's column gaps and its
    codebook indices (raw fp32 / fp16 values stay raw, in block order), or a clustered tensor's
    indices (pruned ones included, as the reserved index 0). Decodes to exactly what ``enc``
    decodes to. int8 CSR (integer ops) is not coded: its kernels read the CSR itself."""
    block_rows, block_cols = (int(v) for v in block)
    if not (1 <= block_rows <= 1 << 16 and 1 <= block_cols <= 4095):
        raise ValueError(f"Huffman blocks of {block_rows} x {block_cols}: rows 1..65536, columns 1..4095")
    grid = huffman.BlockGrid(enc.rows, enc.cols, block_rows, block_cols)
    common = dict(block_rows=block_rows, block_cols=block_cols)
    if isinstance(enc, Clustered):
        idx = unpack_bits(enc.indices, enc.bits, enc.rows * enc.cols).reshape(enc.rows, enc.cols)
        symbols, counts = huffman.dense_symbols(grid, idx)
        index_lengths = huffman.table_for(symbols, 1, 1 << enc.bits)
        stream, offsets = huffman.write_stream(symbols, [None, index_lengths], grid.blocks)
        return HuffmanBlocks(enc.shape, layout="dense", stream=stream, block_offsets=offsets,
                             block_entries=counts.astype(np.uint32), index_lengths=index_lengths,
                             codebook=enc.codebook, value_bits=enc.bits, zero_reserved=enc.zero_reserved, **common)
    if not isinstance(enc, SparseCSR) or enc.dtype != np.float32:
        raise ValueError(f"Huffman coding takes clustered or float CSR weights, not {enc.describe()}")
    entry_row, col = enc.columns()
    if enc.codebook is None:
        raw = np.asarray(enc.values)
        keep = raw != 0  # fillers, and weights that were exactly zero
        idx = None
    else:
        all_idx = unpack_bits(enc.indices, enc.value_bits, enc.entries).astype(np.int64)
        keep = all_idx != 0
        idx = all_idx[keep]
    symbols, order, counts = huffman.sparse_symbols(grid, entry_row[keep], col[keep], idx)
    gap_lengths = huffman.table_for(symbols, 0, block_cols + 1)
    index_lengths = None if idx is None else huffman.table_for(symbols, 1, 1 << enc.value_bits)
    stream, offsets = huffman.write_stream(symbols, [gap_lengths, index_lengths], grid.blocks)
    stored = {"values": np.ascontiguousarray(raw[keep][order])} if idx is None else {
        "codebook": enc.codebook, "index_lengths": index_lengths, "value_bits": enc.value_bits}
    return HuffmanBlocks(enc.shape, layout="sparse", stream=stream, block_offsets=offsets,
                         block_entries=counts.astype(np.uint32), gap_lengths=gap_lengths, **stored, **common)


def huffman_source(enc: HuffmanBlocks) -> SparseCSR | Clustered:
    """The uncoded encoding a Huffman-coded tensor stands for (what :func:`encode_huffman` was
    given, up to the CSR's filler layout): what runtimes use for layers whose kernels read CSR or
    clustered indices rather than decoding block by block. Decodes to the same tensor."""
    rows, cols, idx = enc.entry_arrays()
    if enc.layout == "dense":
        matrix = np.zeros((enc.rows, enc.cols), dtype=np.int64)
        matrix[rows, cols] = idx
        return Clustered(enc.shape, enc.codebook, pack_bits(matrix, enc.value_bits), enc.value_bits, enc.zero_reserved)
    order = np.lexsort((cols, rows))
    if enc.codebook is None:
        return _csr(enc.shape, rows[order], cols[order], np.asarray(enc.values)[order])
    return _csr(enc.shape, rows[order], cols[order], idx[order], enc.codebook, enc.value_bits)
