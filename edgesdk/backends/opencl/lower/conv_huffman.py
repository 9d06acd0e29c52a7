"""Conv and Gemm (as a 1x1 convolution) straight from Huffman-coded weight blocks (issue 15,
``cl_kernels/conv_huffman.cl``): one work-group per (block row, pixel tile, image) walks its block
row's blocks, work-item 0 decoding each into local memory and the whole group multiplying it in.
A block whose entries do not fit the device's local memory (a 128x128 block of floats is 64 KiB;
NVIDIA gives a work-group 48 KiB, Adreno and Mali 32 KiB) is decoded a strip of rows at a time,
the decoder carrying on where the last strip stopped.

:func:`huffman_launch` returns the reason (a string) where the kernel does not apply (grouped convolutions, not
even a strip of one row per work-item fits local memory, very tall blocks); the caller then runs
the weights decoded at load and the reason goes into the step note.
"""
from __future__ import annotations

import numpy as np

from ....compress.huffman import MAX_CODE_BITS, reversed_codes
from ..kernels import DeviceBuffer, Launch, LoweringContext, ceil_div, storage_defines

LR_DEFAULT = 8  # work-items along a block's rows
LP_MAX = 16  # pixel vectors per work-group (VEC pixels each)
MAX_RPW = 32  # rows (float vectors of accumulators) per work-item
# The sparse layout's dense rule for non-finite inputs (conv_huffman.cl): NaN where a pruned
# weight meets inf / NaN, as ONNX Runtime. False gives conv_csr's rule (stored entries only).
NONFINITE_RULE = True


def lookup_table(lengths: np.ndarray | None) -> np.ndarray:
    """The decode table of a canonical code given by its lengths: for every MAX_CODE_BITS-bit
    peek of the LSB-first stream, symbol << 4 | length of the code it starts with (0: no code)."""
    table = np.zeros(1 << MAX_CODE_BITS, np.uint16)
    if lengths is None:
        return table
    lengths = np.asarray(lengths, np.int64)
    codes = reversed_codes(lengths)
    for symbol in np.flatnonzero(lengths):
        length = int(lengths[symbol])
        table[int(codes[symbol])::1 << length] = (int(symbol) << 4) | length
    return table


def row_entries(enc) -> np.ndarray | None:
    """Entries per (row, column block) of the sparse layout (decoding the stream once), for the
    exact size of a strip; None for the dense layout (every row of a block is full)."""
    if enc.layout == "dense":
        return None
    rows, cols, _ = enc.entry_arrays()
    grid = enc.grid
    flat = rows.astype(np.int64) * grid.grid_cols + cols // enc.block_cols
    return np.bincount(flat, minlength=grid.rows * grid.grid_cols).reshape(grid.rows, grid.grid_cols)


def strip_entries(enc, rows: int, per_row: np.ndarray | None = None) -> int:
    """The most entries a strip of ``rows`` rows (strips start at each block's first row) of one
    block holds: every entry of the largest block when the strip is a whole block, else counted
    from ``per_row`` (:func:`row_entries`) or bounded by ``rows`` full rows."""
    maxe = max(1, int(np.max(enc.block_entries))) if enc.block_entries.size else 1
    if rows >= enc.block_rows or per_row is None:
        return min(maxe, rows * enc.block_cols)
    starts = [r for b in range(0, per_row.shape[0], enc.block_rows)
              for r in range(b, min(b + enc.block_rows, per_row.shape[0]), rows)]
    return max(1, int(np.add.reduceat(per_row, starts, axis=0).max()))


def local_bytes(enc, rows: int, per_row: np.ndarray | None = None) -> int:
    """Local memory one work-group needs to hold a strip of ``rows`` rows of a block: its entries
    (float values; sparse: plus ushort columns and the row starts)."""
    entries = strip_entries(enc, rows, per_row)
    if enc.layout == "dense":
        return 4 * entries
    return 6 * entries + 4 * (rows + 1) + 16


def local_budget(info) -> int:
    """The local memory a work-group may use (a function: the tests shrink it to a mobile GPU's)."""
    return int(info.local_mem_bytes)


def strip_rows(enc, lr: int, budget: int) -> tuple[int, np.ndarray | None]:
    """The rows decoded at a time: the whole block where it fits ``budget`` bytes, else the most
    rows, a multiple of the ``lr`` work-items along the rows, that fit (0: not even ``lr``); and
    the sparse layout's entries per row where it had to count them (:func:`row_entries`)."""
    br = enc.block_rows
    if local_bytes(enc, br) <= budget:
        return br, None
    per_row = row_entries(enc)
    rows = 0
    while rows + lr < br and local_bytes(enc, rows + lr, per_row) <= budget:
        rows += lr
    return rows, per_row


def huffman_launch(ctx: LoweringContext, w_name: str, geom, x: DeviceBuffer, x_half: bool, y: DeviceBuffer,
                   y_half: bool, epilogue) -> Launch | str:
    """The launch of ``conv_huffman`` for ``geom`` (a conv.ConvGeometry), or why it cannot run."""
    enc = ctx.encoding(w_name)
    info = ctx.device.info
    if geom.groups != 1:
        return "grouped convolution"
    max_wg = min(info.max_work_group_size, 1024)
    br = enc.block_rows
    lr = min(br, LR_DEFAULT)
    if ceil_div(br, lr) > MAX_RPW:
        lr = ceil_div(br, MAX_RPW)
    lr = min(lr, max_wg, info.max_work_item_sizes[1])
    rpw = ceil_div(br, lr)
    if rpw > 2 * MAX_RPW:
        return f"blocks of {br} rows (at most {2 * MAX_RPW * lr} for {lr} work-items)"

    vec = ctx.vec
    if geom.is_pointwise and geom.h * geom.w == 1:  # Gemm (or a conv on 1x1 images): pixels = batch
        images, pixels = 1, geom.n
        strides = {"XN": 0, "XC": 1, "XP": geom.c, "YN": 0, "YC": 1, "YP": geom.oc}
    elif geom.is_pointwise:
        images, pixels = geom.n, geom.h * geom.w
        strides = {"XN": geom.c * pixels, "XC": pixels, "XP": 1, "YN": geom.oc * pixels, "YC": pixels, "YP": 1}
    else:
        images, pixels = geom.n, 0
        strides = {}
    pw = int(bool(strides))
    pv = ceil_div(pixels, vec) if pw else geom.oh * ceil_div(geom.ow, vec)
    lp = max(1, min(pv, LP_MAX, max_wg // lr, info.max_work_item_sizes[0]))
    nonfinite = int(enc.layout == "sparse" and NONFINITE_RULE)
    counters = nonfinite * 4 * vec * lr * lp  # the non-finite tap counts (NONFINITE)
    sr, per_row = strip_rows(enc, lr, local_budget(info) - counters)
    if sr == 0:
        return (f"a strip of {lr} block rows needs {local_bytes(enc, lr, per_row) + counters} bytes of local "
                f"memory, the device has {local_budget(info)}")

    stream = ctx.raw(w_name, "huffman-stream", np.asarray(enc.stream, np.uint8))
    offsets = ctx.raw(w_name, "huffman-offsets", np.asarray(enc.block_offsets, np.uint32))
    gap_table = ctx.raw(w_name, "huffman-gap-table", lookup_table(enc.gap_lengths)) if enc.layout == "sparse" \
        else ctx.dummy
    w_half = False
    if enc.codebook is not None:
        book = enc.codebook.astype(np.float32)
        if ctx.precision == "fp16":  # the reference's fp16 model rounds the decoded weights to half
            book = book.astype(np.float16).astype(np.float32)
        codebook = ctx.small_float(w_name, "codebook", book)
        index_table = ctx.raw(w_name, "huffman-index-table", lookup_table(enc.index_lengths))
        values, value_start = ctx.dummy, ctx.dummy
        value_defines = {"V_MODE": 1, "CB_BITS": enc.value_bits, "CB_ROWS": book.shape[0]}
    else:
        raw_values = np.asarray(enc.values)
        if ctx.precision == "fp16" and raw_values.dtype == np.float32:
            raw_values = raw_values.astype(np.float16)
        w_half = raw_values.dtype == np.float16
        if raw_values.size == 0:
            raw_values = np.zeros(1, raw_values.dtype)
        values = ctx.raw(w_name, "huffman-values-fp16" if w_half else "huffman-values-fp32", raw_values)
        starts = np.concatenate([[0], np.cumsum(enc.block_entries, dtype=np.int64)[:-1]]).astype(np.uint32)
        value_start = ctx.raw(w_name, "huffman-value-start", starts)
        codebook, index_table = ctx.dummy, ctx.dummy
        value_defines = {"V_MODE": 0, "CB_BITS": 0, "CB_ROWS": 1}
    grid = enc.grid
    defines = {"CONV_HUFFMAN": 1, **geom.defines(), **storage_defines(X=x_half, W=w_half, Y=y_half),
               **epilogue.defines(), **value_defines, **strides, "PW": pw, "P": pixels,
               "DENSE_LAYOUT": int(enc.layout == "dense"), "BR": br, "BC": enc.block_cols, "GC": grid.grid_cols,
               "COLS": grid.cols, "SE": strip_entries(enc, sr, per_row), "SR": sr, "PEEK": MAX_CODE_BITS,
               "STREAM_BYTES": int(enc.stream.size), "NONFINITE": nonfinite, "LR": lr, "LP": lp, "RPW": rpw}
    size = (ceil_div(pv, lp) * lp, grid.grid_rows * lr, images)
    args = [x, stream, offsets, gap_table, index_table, values, value_start, codebook,
            epilogue.bias or ctx.dummy, y]
    strips = "" if sr == br else f", {sr} rows at a time"
    ctx.note(f"{w_name}: {enc.describe()} decoded per block in the kernel ({br}x{enc.block_cols} blocks{strips})")
    return ctx.launch("conv_huffman.cl", "conv_huffman", defines, args, size, local_size=(lp, lr, 1))
