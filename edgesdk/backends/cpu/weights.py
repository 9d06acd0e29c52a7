"""Weight preparation, once per session: every Conv/Gemm weight in the form its kernel reads.

The kernels take convolution weights as (O, KH*KW*C) rows in (kh, kw, c) column order (NHWC
windows), while the graph stores Conv weights OIHW, i.e. (c, kh, kw) columns: dense weights are
reordered by the packing (:func:`pack_conv`), and clustered weights get their *index stream* permuted (unpacked to
one byte per index, permuted, packed again at the same width): the codebook lookup still happens
in the kernel's registers and no dense fp32 weight of a clustered layer ever exists.

What runs compressed and what does not:
- DenseFP16: packed as fp16 panels (converted in the microkernel); exact, the values are fp16.
- fp16 sessions on a CPU with ARMv8.2-A fp16 arithmetic (kernel level neonfp16): dense GEMM /
  convolution panels and depthwise convolutions run the fp16-arithmetic kernels, which round the
  activations to fp16 (as the reference policy stores them) and multiply in half, summing in fp32.
- Clustered (Conv groups=1, Gemm): native clustered GEMV/GEMM on the packed indices.
- NNM: centroid convolution / GEMM plus the native gather-accumulate.
- SparseCSR 1x1 convolutions (stride 1, no padding) at or above the level's crossover sparsity
  (``lower/conv.py``): the native sparse-times-dense kernel in CHW layout, fed from the CSR
  stream (:func:`sparse_operands`). Other pruned layers are decoded to a dense matrix once, at
  session creation, and run through the dense kernels (recorded as such in the step notes).
- Depthwise / grouped convolutions with clustered or NNM weights: no clustered depthwise kernel
  exists, so those (small) weights are decoded once at session creation, also recorded.
- HuffmanBlocks: the layers without a block-streaming kernel get the encoding the blocks code
  (:func:`uncoded`: the CSR or the clustered indices, never a dense matrix unless that encoding
  would be decoded too) once at session creation, and run as that encoding does.
"""
from __future__ import annotations

import numpy as np

from ...compress.bitpack import unpack_bits
from ...compress.encode import huffman_source, lq_as_clustered
from ...compress.encodings import NNM, Clustered, DenseFP16, Encoding, HuffmanBlocks, LQBinary, SparseCSR
from ...graph import Graph, Tensor
from ...runtime.precision import round_to_storage


def uncoded(enc: Encoding | None) -> Encoding | None:
    """A Huffman-coded weight as the encoding its blocks code (decoded once, here); LQ weights
    (with a float input) as their per-channel codebooks; others as they are."""
    if isinstance(enc, LQBinary):
        return lq_as_clustered(enc)
    return huffman_source(enc) if isinstance(enc, HuffmanBlocks) else enc


def coding_note(tensor: Tensor) -> str:
    """What a step note adds for a weight run as another encoding (:func:`uncoded`)."""
    if isinstance(tensor.encoding, LQBinary):
        return f", {tensor.encoding.describe()} weights as per-channel codebooks (float input)"
    return ", Huffman blocks decoded at session creation" if isinstance(tensor.encoding, HuffmanBlocks) else ""


def stored_matrix(tensor: Tensor) -> tuple[np.ndarray, str]:
    """The weight as a dense array in its stored precision (fp16 stays fp16), and how it was
    obtained. Clustered / NNM tensors are decoded here: callers use this only where no
    compressed kernel applies, and say so in the step note."""
    enc = tensor.encoding
    if isinstance(enc, HuffmanBlocks):
        return enc.decode(), f"{enc.describe()} decoded to dense at session creation"
    if enc is None:
        return np.asarray(tensor.data, dtype=np.float32), "dense fp32"
    if isinstance(enc, DenseFP16):
        return enc.values.reshape(enc.shape), "dense fp16"
    if isinstance(enc, SparseCSR):
        return enc.decode(), (f"{enc.describe()} decoded to dense at session creation (the sparse kernel takes "
                              "1x1 stride-1 convolutions at or above the level's crossover sparsity)")
    return enc.decode(), f"{enc.describe()} decoded at session creation (no compressed kernel for this layer shape)"


def for_precision(w: np.ndarray, precision: str) -> np.ndarray:
    """fp16 sessions store weights as half; fp32 sessions keep what the model stores."""
    if precision == "fp16" and w.dtype == np.float32:
        return w.astype(np.float16)
    return w


def as_fp32(w: np.ndarray, precision: str) -> np.ndarray:
    """For kernels that read fp32 weights only (depthwise): the values the precision implies."""
    return np.ascontiguousarray(round_to_storage(w.astype(np.float32), precision), dtype=np.float32)


def bias_vector(graph: Graph, name: str | None, n: int, precision: str, scale: float = 1.0) -> np.ndarray | None:
    """A constant bias broadcast to (n,), float32, or None when there is none."""
    if not name:
        return None
    value = graph.const(name)
    if value is None:
        return None
    b = round_to_storage(np.asarray(value, dtype=np.float32), precision) * np.float32(scale)
    return np.ascontiguousarray(np.broadcast_to(b.reshape(-1) if b.size == n else b.reshape(()), (n,)),
                                dtype=np.float32)


def pack_dense(kernels, w: np.ndarray, bias: np.ndarray | None, precision: str, layout: str = "nk",
               window: int = 1):
    """Packed GEMM panels; fp16 storage when the weights are fp16 or the session is fp16, and fp16
    arithmetic for fp16 sessions where the kernel level has it (``packed.fp16_arith``). ``window``:
    see :func:`pack_conv`."""
    w = np.ascontiguousarray(for_precision(w, precision))
    return kernels.pack_gemm(w, bias, layout, w.dtype == np.float16, fp16_arith=precision == "fp16", window=window)


def pack_conv(kernels, w: np.ndarray, bias: np.ndarray | None, precision: str):
    """OIHW convolution weights as :func:`pack_dense` panels in the kernels' (kh, kw, c) column
    order: the packing reorders each filter itself (``window``), so no transposed copy of the layer
    is made (numpy's took 14 ms of ResNet-18's session creation)."""
    return pack_dense(kernels, w.reshape(w.shape[0], -1), bias, precision, window=w.shape[2] * w.shape[3])


def clustered_indices(enc: Clustered, conv_kernel: tuple[int, int] | None) -> np.ndarray:
    """The bit-packed index stream in kernel column order: for a KxK convolution over C > 1
    channels the (c, kh, kw) columns of each row are permuted to (kh, kw, c), still packed."""
    rows, cols = enc.rows, enc.cols
    if conv_kernel is None or conv_kernel == (1, 1) or cols == conv_kernel[0] * conv_kernel[1]:
        return np.ascontiguousarray(enc.indices, dtype=np.uint8)
    kh, kw = conv_kernel
    idx = _unpack_small(enc.indices, enc.bits, rows * cols).reshape(rows, cols // (kh * kw), kh, kw)
    return _pack_small(idx.transpose(0, 2, 3, 1), enc.bits)


def _unpack_small(packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    """LSB-first stream of ``bits``-wide (<= 8) fields -> one uint8 per field."""
    stream = np.unpackbits(np.asarray(packed, dtype=np.uint8), count=count * bits, bitorder="little")
    planes = np.zeros((count, 8), dtype=np.uint8)
    planes[:, :bits] = stream.reshape(count, bits)
    return np.packbits(planes, axis=1, bitorder="little").reshape(count)


def _pack_small(values: np.ndarray, bits: int) -> np.ndarray:
    """Inverse of :func:`_unpack_small` (one byte per value instead of the generic packer's eight
    uint64 planes: a large conv layer's indices stay a few MB while being permuted)."""
    planes = np.unpackbits(np.ascontiguousarray(values, dtype=np.uint8).reshape(-1, 1), axis=1, bitorder="little")
    return np.packbits(planes[:, :bits].reshape(-1), bitorder="little")


def pack_clustered(kernels, enc: Clustered, bias: np.ndarray | None, precision: str,
                   conv_kernel: tuple[int, int] | None = None, scale: float = 1.0):
    """ClusteredWeights for clustered_gemm; ``scale`` (Gemm alpha) folds into the codebook."""
    book = enc.codebook
    if scale != 1.0:
        book = book.astype(np.float32) * np.float32(scale)
    book = np.ascontiguousarray(for_precision(book, precision))
    return kernels.pack_clustered(clustered_indices(enc, conv_kernel), enc.bits, enc.rows, enc.cols, book, bias)


def sparse_operands(enc: SparseCSR, precision: str) -> dict:
    """The CSR stream as ``pack_sparse_conv1x1`` takes it: row pointers, absolute columns and the
    values (fp32 / fp16) or codebook indices of the real non-zeros (fillers dropped), never the
    dense matrix. fp16 sessions store fp32 values as half, as the dense path does."""
    entry_row, col = enc.columns()
    if enc.codebook is None:
        values = np.asarray(enc.values)
        keep = values != 0
        stored = {"values": np.ascontiguousarray(for_precision(values[keep], precision))}
    else:
        idx = unpack_bits(enc.indices, enc.value_bits, enc.entries).astype(np.uint8)
        keep = idx != 0  # index 0 is the fillers' exact zero
        book = np.ascontiguousarray(round_to_storage(enc.codebook.astype(np.float32), precision), np.float32)
        stored = {"values": None, "indices": np.ascontiguousarray(idx[keep]), "codebook": book}
    counts = np.bincount(entry_row[keep], minlength=enc.rows)
    row_ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return {"row_ptr": row_ptr, "cols": np.ascontiguousarray(col[keep], np.int32), **stored}


def nnm_assignment(enc: NNM) -> np.ndarray:
    """(groups, K) int32: groups = 1 for the shared reading, C for the per-input-channel one."""
    assign = enc.assignment.astype(np.int32)
    return np.ascontiguousarray(assign.reshape(1, -1) if enc.mode == "shared" else assign)


def nnm_depthwise_weights(enc: NNM, precision: str) -> np.ndarray:
    """Per-input-channel centroids (C, K', R, S) as depthwise weights (R, S, C*K'): output channel
    c*K' + j of a channel-multiplier-K' depthwise conv is input channel c filtered by centroid j."""
    c, kc, r, s = enc.centroids.shape
    return as_fp32(enc.centroids.transpose(2, 3, 0, 1).reshape(r, s, c * kc), precision)
