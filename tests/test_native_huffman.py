"""The native Huffman block decoder and the streaming sparse 1x1 convolution
(cpu_native/src/kernels/huffman.h, edgesdk/backends/cpu/huffman.py) against the pure-Python
reference decoder of edgesdk.compress.huffman (the format's spec) and against sparse_conv1x1 / the
dense numpy product: every layout (sparse with a codebook or raw fp32 / fp16 values, dense), blocks
from 1 x 1 to 128 x 128, shapes that are no multiple of the block, empty rows, 100% sparsity,
single-symbol tables; crafted streams (flipped bits, moved offsets, wrong entry counts, Kraft,
column overruns, rows that never end, short streams, random bytes) raise ValueError, never crash;
the convolution at every ISA level this CPU runs, 1-4 threads, batch 2, NaN and infinities."""
from __future__ import annotations

import dataclasses
from typing import Iterator

import numpy as np
import pytest

ext = pytest.importorskip("edgesdk._native")
if not hasattr(ext, "huffman_decode"):
    pytest.skip("edgesdk._native predates the Huffman decoder", allow_module_level=True)

from edgesdk.backends.cpu.huffman import decode_entries, prepare_conv1x1  # noqa: E402
from edgesdk.compress import huffman as H  # noqa: E402
from edgesdk.compress.encode import encode_clustered, encode_huffman, encode_sparse, prune_mask  # noqa: E402
from edgesdk.compress.encodings import EncodingError, HuffmanBlocks  # noqa: E402


def reference(enc: HuffmanBlocks):
    """(rows, cols, idx) by the reference decoder, or the ValueError it raises (a wrong entry count
    included, as HuffmanBlocks.entry_arrays checks it)."""
    try:
        rows, cols, idx, per_block = H.decode_reference(enc.grid, enc.layout, enc.stream, enc.block_offsets,
                                                        enc.gap_lengths, enc.index_lengths)
    except ValueError as exc:
        return exc
    if not np.array_equal(per_block, enc.block_entries.astype(np.int64)):
        return ValueError("block entry counts differ")
    return rows, cols, idx


def native(enc: HuffmanBlocks, pairs: bool | None = None):
    """decode_entries, or with pairs given, the binding with its (gap, index) pair table forced on / off."""
    try:
        if pairs is None:
            return decode_entries(enc)
        return ext.huffman_decode(enc.rows, enc.cols, enc.block_rows, enc.block_cols, enc.layout, enc.stream,
                                  enc.block_offsets, enc.block_entries, enc.gap_lengths, enc.index_lengths,
                                  pairs=pairs)
    except ValueError as exc:
        return exc


def assert_same(enc: HuffmanBlocks, what: str = "") -> None:
    want = reference(enc)
    for pairs in (None, False, True):
        got = native(enc, pairs)
        if isinstance(want, Exception) or isinstance(got, Exception):
            assert isinstance(want, Exception) and isinstance(got, Exception), (what, pairs, want, got)
            continue
        for a, b, name in zip(got, want, ("rows", "cols", "idx")):
            assert a.dtype == np.int64 and np.array_equal(a, b), (what, pairs, name)


def weights(rng: np.random.Generator, k: int, c: int) -> np.ndarray:
    return rng.standard_normal((k, c, 1, 1)).astype(np.float32)


def encodings(rng: np.random.Generator, k: int, c: int, sparsity: float, block: tuple[int, int]
              ) -> Iterator[tuple[str, HuffmanBlocks]]:
    w = weights(rng, k, c)
    keep = prune_mask(w, sparsity) if sparsity < 1 else np.zeros(w.shape, bool)
    if k > 2:
        keep[1] = False  # an empty row
    yield "sparse+cb4", encode_huffman(encode_sparse(w, keep, bits=4), block=block)
    yield "sparse+cb3/channel", encode_huffman(encode_sparse(w, keep, bits=3, per_channel=True), block=block)
    yield "sparse+fp32", encode_huffman(encode_sparse(w, keep), block=block)
    yield "sparse+fp16", encode_huffman(encode_sparse(w, keep, fp16=True), block=block)
    yield "dense+cb2", encode_huffman(encode_clustered(w, 2), block=block)
    if sparsity < 1:
        yield "dense+cb4/keep", encode_huffman(encode_clustered(w, 4, keep=keep), block=block)


SHAPES = [(1, 1, 0.0), (7, 13, 0.5), (33, 70, 0.9), (130, 140, 0.9), (9, 300, 1.0), (40, 9, 0.0)]
BLOCKS = [(1, 1), (3, 5), (128, 128), (16, 64), (64, 7)]


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: f"{b[0]}x{b[1]}")
def test_native_decode_equals_reference(block: tuple[int, int]) -> None:
    rng = np.random.default_rng(sum(block))
    for k, c, sparsity in SHAPES:
        if block == (1, 1) and k * c > 2000:
            continue  # the reference decoder's per-block Python loop
        for name, enc in encodings(rng, k, c, sparsity, block):
            enc.validate()
            assert_same(enc, f"{name} {k}x{c} {sparsity} {block}")
            rows, cols, idx = decode_entries(enc)
            assert rows.size == enc.entries
            if enc.codebook is None:
                assert np.all(idx == -1)


def test_single_symbol_tables_and_empty_tensors() -> None:
    rng = np.random.default_rng(7)
    w = np.ones((10, 20, 1, 1), np.float32)
    enc = encode_huffman(encode_clustered(w, 2), block=(4, 8))  # every index the same: one symbol
    assert int((enc.index_lengths > 0).sum()) == 1
    assert_same(enc)
    enc = encode_huffman(encode_sparse(w, np.zeros(w.shape, bool)), block=(4, 8))  # only end-of-row codes
    assert int((enc.gap_lengths > 0).sum()) == 1 and enc.entries == 0
    assert_same(enc)
    assert all(a.size == 0 for a in decode_entries(enc))
    full = encode_huffman(encode_sparse(weights(rng, 6, 6), np.ones((6, 6, 1, 1), bool)), block=(6, 6))
    assert_same(full)  # every gap 0: two gap symbols
    # decode() through the native decoder equals the weights
    w = weights(rng, 50, 70)
    keep = prune_mask(w, 0.8)
    enc = encode_huffman(encode_sparse(w, keep), block=(16, 32))
    np.testing.assert_array_equal(enc.decode(), np.where(keep, w, 0))


def test_entry_arrays_use_the_native_decoder(monkeypatch: pytest.MonkeyPatch) -> None:
    enc = encode_huffman(encode_sparse(weights(np.random.default_rng(1), 20, 30), np.ones((20, 30, 1, 1), bool), bits=3))
    monkeypatch.setattr(H, "decode_reference", lambda *a, **k: pytest.fail("the reference decoder ran"))
    rows, _, _ = enc.entry_arrays()
    assert rows.size == 600


# -- crafted streams ---------------------------------------------------------------------------------

def crafted(enc: HuffmanBlocks, **changes) -> HuffmanBlocks:
    return dataclasses.replace(enc, **changes)


def expect_error(enc: HuffmanBlocks, match: str | None = None) -> None:
    with pytest.raises(ValueError, match=match):
        decode_entries(enc)


def base_encodings() -> list[HuffmanBlocks]:
    rng = np.random.default_rng(11)
    w = weights(rng, 37, 90)
    keep = prune_mask(w, 0.8)
    return [encode_huffman(encode_sparse(w, keep, bits=4), block=(16, 32)),
            encode_huffman(encode_sparse(w, keep), block=(8, 64)),
            encode_huffman(encode_clustered(w, 3), block=(16, 40))]


def test_flipped_bits_match_the_reference() -> None:
    rng = np.random.default_rng(12)
    for enc in base_encodings():
        body = enc.stream.size - H.STREAM_PADDING
        for trial in range(150):
            stream = enc.stream.copy()
            for _ in range(1 + trial % 3):
                bit = int(rng.integers(0, body * 8))
                stream[bit >> 3] ^= np.uint8(1 << (bit & 7))
            assert_same(crafted(enc, stream=stream), f"trial {trial}")


def test_moved_offsets_and_wrong_entry_counts() -> None:
    rng = np.random.default_rng(13)
    for enc in base_encodings():
        nb = enc.block_entries.size
        for _ in range(40):
            offsets = enc.block_offsets.copy()
            b = int(rng.integers(1, nb))
            offsets[b] = np.uint32(max(int(offsets[b - 1]), int(offsets[b]) - int(rng.integers(1, 4))))
            assert_same(crafted(enc, block_offsets=offsets))
        for delta in (1, -1):
            entries = enc.block_entries.astype(np.int64)
            b = int(np.argmax(entries))
            entries[b] += delta
            expect_error(crafted(enc, block_entries=entries.astype(np.uint32)), "block")
        # offsets that fall, run past the stream, or do not start at 0
        offsets = enc.block_offsets.copy()
        offsets[2], offsets[3] = offsets[3], offsets[2] - 1
        expect_error(crafted(enc, block_offsets=offsets))
        offsets = enc.block_offsets.copy()
        offsets[-1] += 1
        expect_error(crafted(enc, block_offsets=offsets), "stream")
        offsets = enc.block_offsets.copy()
        offsets[0] = 1
        expect_error(crafted(enc, block_offsets=offsets))
        entries = enc.block_entries.copy()
        entries[0] = min(16 * 32, 8 * int(enc.block_offsets[1]) + 1)  # more entries than its bits
        expect_error(crafted(enc, block_entries=entries), "block 0")
        expect_error(crafted(enc, stream=enc.stream[:-1]), "stream")  # one byte short of the padding
        expect_error(crafted(enc, stream=enc.stream[:3]), "stream")
        expect_error(crafted(enc, block_offsets=enc.block_offsets[:-1]), "block_offsets")
        expect_error(crafted(enc, block_entries=enc.block_entries.astype(np.int64)), "block_entries")
        # all of it as EncodingError through validate()
        with pytest.raises(EncodingError):
            entries = enc.block_entries.copy()
            entries[0] = entries[0] + 1 if entries[0] < 16 * 32 else entries[0] - 1
            crafted(enc, block_entries=entries).validate()


def test_bad_code_lengths() -> None:
    sparse, raw, dense = base_encodings()
    too_many = sparse.gap_lengths.copy()
    too_many[:] = 1  # 33 codes of one bit
    expect_error(crafted(sparse, gap_lengths=too_many), "Kraft")
    long = dense.index_lengths.copy()
    long[0] = 13
    expect_error(crafted(dense, index_lengths=long), "12")
    kraft = sparse.index_lengths.copy()
    kraft[kraft == 0] = 1
    kraft[:3] = 1
    expect_error(crafted(sparse, index_lengths=kraft), "Kraft")
    expect_error(crafted(sparse, gap_lengths=sparse.gap_lengths[:-1]), "gap")  # alphabet != block_cols + 1
    expect_error(crafted(sparse, gap_lengths=np.zeros(5000, np.uint8)), "gap_lengths")
    expect_error(crafted(dense, index_lengths=None), "index")
    # lengths that are a prefix code but not the one written: decodes to garbage or fails, as the reference
    for enc in (sparse, raw, dense):
        for name in ("gap_lengths", "index_lengths"):
            lengths = getattr(enc, name)
            if lengths is None:
                continue
            shuffled = np.random.default_rng(3).permutation(lengths)
            assert_same(crafted(enc, **{name: shuffled}), name)


def write(grid: H.BlockGrid, symbols: list[list[tuple[int, int]]], gap_lengths: np.ndarray,
          index_lengths: np.ndarray | None):
    """A stream of hand-written symbols (per block: (table, symbol) pairs)."""
    table = np.array([t for blk in symbols for t, _ in blk], np.int8)
    sym = np.array([s for blk in symbols for _, s in blk], np.int64)
    block = np.repeat(np.arange(len(symbols)), [len(b) for b in symbols])
    return H.write_stream(H.Symbols(table, sym, block), [gap_lengths, index_lengths], len(symbols))


def hand_made(rows: int, cols: int, block: tuple[int, int], symbols, entries, index: bool = False) -> HuffmanBlocks:
    grid = H.BlockGrid(rows, cols, *block)
    gap_lengths = np.full(block[1] + 1, 0, np.uint8)
    used = sorted({s for blk in symbols for t, s in blk if t == 0})
    gap_lengths[used] = H.code_lengths(np.ones(len(used)))
    index_lengths = np.array([1, 1], np.uint8) if index else None
    stream, offsets = write(grid, symbols, gap_lengths, index_lengths)
    common = dict(codebook=np.array([[0.0, 1.0]], np.float32), index_lengths=index_lengths, value_bits=1) if index \
        else dict(values=np.ones(sum(entries), np.float32))
    return HuffmanBlocks((rows, cols), block_rows=block[0], block_cols=block[1], layout="sparse", stream=stream,
                         block_offsets=offsets, block_entries=np.array(entries, np.uint32), gap_lengths=gap_lengths,
                         **common)


def test_hand_made_streams() -> None:
    eor = 4
    # a good one: rows (col 0, col 3) and (col 1) in a 2 x 4 block
    good = hand_made(2, 4, (2, 4), [[(0, 0), (0, 2), (0, eor), (0, 1), (0, eor)]], [3])
    good.validate()
    rows, cols, _ = decode_entries(good)
    assert rows.tolist() == [0, 0, 1] and cols.tolist() == [0, 3, 1]
    # the second column block is 2 wide: gap 3 steps to column 3 of 2
    over = hand_made(1, 6, (1, 4), [[(0, eor)], [(0, 3), (0, eor)]], [0, 1])
    expect_error(over, "block 1: row 0 steps to column 3 of 2")
    # gaps that never end the row: past the last column
    expect_error(hand_made(1, 4, (1, 4), [[(0, 0)] * 5 + [(0, eor)]], [4]), "column 4 of 4")
    # a missing last end-of-row code: the zero padding bits decode as the zero code, here end-of-row
    # (the format allows it; the reference agrees)
    padded = hand_made(2, 4, (2, 4), [[(0, 0), (0, eor), (0, 1)]], [2])
    assert decode_entries(padded)[1].tolist() == [0, 1]
    assert_same(padded)
    # a row that never ends: gap 0 codes (the zero code) up to the block's end, in a 4095-wide block
    gap_lengths = np.zeros(4096, np.uint8)
    gap_lengths[[0, 4095]] = 1
    endless = HuffmanBlocks((1, 4095), block_rows=1, block_cols=4095, layout="sparse",
                            stream=np.zeros(9, np.uint8), block_offsets=np.array([0, 1], np.uint32),
                            block_entries=np.array([8], np.uint32), gap_lengths=gap_lengths,
                            values=np.ones(8, np.float32))
    expect_error(endless, "block 0: row 0: a gap code runs past the block's end")
    assert_same(endless)
    # a missing index code: the next codes are read as it, as the reference reads them
    assert_same(hand_made(1, 4, (1, 4), [[(0, 0), (1, 1), (0, 1), (0, eor)]], [2], index=True))
    ok = hand_made(1, 4, (1, 4), [[(0, 0), (1, 1), (0, 1), (1, 0), (0, eor)]], [2], index=True)
    assert decode_entries(ok)[2].tolist() == [1, 0]
    # the reference agrees on every one
    for enc in (good, over, ok):
        assert_same(enc)


def test_random_bytes_never_crash() -> None:
    rng = np.random.default_rng(21)
    for trial in range(300):
        rows, cols = int(rng.integers(1, 40)), int(rng.integers(1, 40))
        block = (int(rng.integers(1, 10)), int(rng.integers(1, 10)))
        grid = H.BlockGrid(rows, cols, *block)
        nb = grid.blocks
        sizes = rng.integers(0, 6, nb)
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.uint32)
        stream = np.concatenate([rng.integers(0, 256, int(offsets[-1])), np.zeros(8)]).astype(np.uint8)
        entries = rng.integers(0, 4, nb).astype(np.uint32)
        gap = H.code_lengths(rng.integers(0, 5, block[1] + 1))
        index = H.code_lengths(rng.integers(0, 5, 4)) if trial % 2 else None
        dense = trial % 5 == 0
        enc = HuffmanBlocks((rows, cols), block_rows=block[0], block_cols=block[1],
                            layout="dense" if dense else "sparse", stream=stream, block_offsets=offsets,
                            block_entries=entries, gap_lengths=None if dense else gap,
                            index_lengths=H.code_lengths(rng.integers(0, 5, 4)) if dense else index)
        got = native(enc)
        if not dense:  # the reference raises the same way (dense: the entry counts are all wrong)
            want = reference(enc)
            assert isinstance(got, Exception) == isinstance(want, Exception), trial
        else:
            assert isinstance(got, Exception)


def test_large_layer_decodes_fast() -> None:
    import time
    rng = np.random.default_rng(5)
    w = weights(rng, 512, 4608)
    keep = rng.random(w.shape) > 0.9
    enc = encode_huffman(encode_sparse(w, keep), block=(128, 128))
    decode_entries(enc)
    t0 = time.perf_counter()
    for _ in range(5):
        rows, _, _ = decode_entries(enc)
    per_call = (time.perf_counter() - t0) / 5
    assert rows.size == int(keep.sum())
    assert per_call < 0.2, per_call  # ~2 ms measured; loose for loaded CI machines


# -- the streaming convolution ---------------------------------------------------------------------

@pytest.fixture(params=ext.kernels.supported_isas())
def isa(request: pytest.FixtureRequest) -> Iterator[str]:
    ext.kernels.set_isa(request.param)
    try:
        yield request.param
    finally:
        ext.kernels.reset_isa()


def dense_reference(w: np.ndarray, x: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """y = W @ X + bias per image in float64 with every product formed (0 * inf = NaN)."""
    with np.errstate(invalid="ignore", over="ignore"):
        prod = w.astype(np.float64)[None, :, :, None] * x.reshape(x.shape[0], x.shape[1], -1).astype(np.float64)[:, None]
        y = prod.sum(axis=2)
    if bias is not None:
        y += bias.astype(np.float64)[None, :, None]
    return y


def packed_like(enc: HuffmanBlocks, bias: np.ndarray | None):
    """sparse_conv1x1's weights for the same matrix, NB = 1 (the streaming kernel's summation order)."""
    m = enc.decode().reshape(enc.rows, enc.cols)
    rows, cols = np.nonzero(m)
    row_ptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=enc.rows))]).astype(np.int64)
    values = m[rows, cols]
    if enc.values is not None and enc.values.dtype == np.float16:
        values = values.astype(np.float16)
    return m, ext.pack_sparse_conv1x1(row_ptr, cols.astype(np.int32), values, bias, enc.cols, block=1)


CONV_SHAPES = [(19, 33, (7, 7), 0.9, (8, 16)), (40, 67, (5, 20), 0.5, (128, 128)), (8, 3, (1, 1), 0.0, (3, 5)),
               (130, 150, (14, 14), 0.9, (128, 128)), (24, 16, (3, 11), 1.0, (16, 16)), (7, 260, (2, 31), 0.95, (1, 100))]


def conv_encodings(rng: np.random.Generator, k: int, c: int, sparsity: float, block: tuple[int, int]):
    for name, enc in encodings(rng, k, c, sparsity, block):
        yield name, enc


def test_conv_equals_sparse_conv1x1(isa: str) -> None:
    rng = np.random.default_rng(31)
    for i, (k, c, (h, w_), sparsity, block) in enumerate(CONV_SHAPES):
        for name, enc in conv_encodings(rng, k, c, sparsity, block):
            bias = rng.standard_normal(k).astype(np.float32) if i % 2 == 0 else None
            m, packed = packed_like(enc, bias)
            conv = prepare_conv1x1(enc, bias)
            assert conv.isa == isa and conv.rows == k and conv.cols == c and conv.nnz == np.count_nonzero(m)
            x = rng.standard_normal((2, c, h, w_)).astype(np.float32)
            want = np.empty((2, k, h, w_), np.float32)
            ext.sparse_conv1x1(x, packed, want, "relu6", None, None, 1)
            for threads in (1, 2, 3, 4):
                y = np.full((2, k, h, w_), np.nan, np.float32)
                conv.run(x, y, "relu6", None, None, threads)
                np.testing.assert_array_equal(y, want, err_msg=f"{isa} {name} {k}x{c} {block} threads {threads}")
            y = np.empty((2, k, h * w_), np.float32)
            conv.run(x.reshape(2, c, -1), y, "none", threads=2)
            np.testing.assert_allclose(y, dense_reference(m, x, bias), rtol=1e-4, atol=1e-4,
                                       err_msg=f"{isa} {name} {k}x{c} {block}")


def test_conv_isa_argument() -> None:
    rng = np.random.default_rng(32)
    enc = encode_huffman(encode_sparse(weights(rng, 70, 90), prune_mask(weights(rng, 70, 90), 0.8), bits=4),
                         block=(32, 32))
    x = rng.standard_normal((2, 90, 9, 9)).astype(np.float32)
    m = enc.decode().reshape(70, 90)
    for level in ext.kernels.supported_isas():
        conv = prepare_conv1x1(enc, isa=level)
        assert conv.isa == level and conv.value_kind == "codebook"
        y = np.empty((2, 70, 9, 9), np.float32)
        conv.run(x, y, threads=2)
        np.testing.assert_allclose(y, dense_reference(m, x, None).reshape(y.shape), rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="ISA"):
        prepare_conv1x1(enc, isa="nope")


def test_conv_nan_and_inf_follow_the_dense_product(isa: str) -> None:
    rng = np.random.default_rng(33)
    k, c, hw = 21, 30, 75
    w = weights(rng, k, c)
    keep = rng.random(w.shape) > 0.8
    keep[:, 5] = False  # a column no row uses: inf there makes every output NaN
    keep[3] = False     # an empty row
    for enc in (encode_huffman(encode_sparse(w, keep), block=(8, 16)),
                encode_huffman(encode_sparse(w, keep, bits=4), block=(128, 128)),
                encode_huffman(encode_clustered(w, 3, keep=keep), block=(5, 7))):
        m = enc.decode().reshape(k, c)
        conv = prepare_conv1x1(enc)
        x = rng.standard_normal((2, c, hw)).astype(np.float32)
        x[0, 5, 3] = np.inf
        x[0, 7, 40] = -np.inf
        x[1, 9, 70:] = np.nan
        x[1, 11, 2] = np.inf
        x[1, 12, 2] = -np.inf
        _, packed = packed_like(enc, None)
        want_sparse = np.empty((2, k, hw), np.float32)
        ext.sparse_conv1x1(x, packed, want_sparse, "relu", None, None, 1)
        for threads in (1, 2, 4):
            y = np.empty((2, k, hw), np.float32)
            conv.run(x, y, "relu", None, None, threads)
            want = dense_reference(m, x, None)
            with np.errstate(invalid="ignore"):
                want = np.where(np.isnan(want), np.nan, np.maximum(want, 0))
            assert np.array_equal(np.isnan(y), np.isnan(want)), (enc.describe(), threads)
            finite = np.isfinite(want)
            assert np.array_equal(y[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)])
            np.testing.assert_allclose(y[finite], want[finite], rtol=1e-5, atol=1e-5)
            np.testing.assert_array_equal(y, want_sparse)


def test_conv_decode_only_and_arguments() -> None:
    rng = np.random.default_rng(34)
    w = weights(rng, 64, 96)
    enc = encode_huffman(encode_sparse(w, prune_mask(w, 0.9)), block=(16, 32))
    conv = prepare_conv1x1(enc, np.zeros(64, np.float32))
    conv.decode_only(1)
    conv.decode_only(3)
    assert conv.workspace_entries <= conv.nnz and "HuffmanConv1x1" in repr(conv)
    x = np.ones((1, 96, 4, 4), np.float32)
    seconds = conv.run(x, np.empty((1, 64, 4, 4), np.float32))
    assert seconds >= 0
    with pytest.raises(ValueError, match="channels"):
        conv.run(np.ones((1, 95, 4, 4), np.float32), np.empty((1, 64, 4, 4), np.float32))
    with pytest.raises(ValueError, match="y"):
        conv.run(x, np.empty((1, 63, 4, 4), np.float32))
    with pytest.raises(ValueError, match="threads"):
        conv.run(x, np.empty((1, 64, 4, 4), np.float32), threads=0)
    with pytest.raises(ValueError, match="bias"):
        prepare_conv1x1(enc, np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="values"):
        ext.HuffmanConv1x1(64, 96, 16, 32, "sparse", enc.stream, enc.block_offsets, enc.block_entries,
                           enc.gap_lengths, values=enc.values[:-1])
    bad = enc.stream.copy()
    bad[: enc.stream.size - 8] ^= 0x5A
    with pytest.raises(ValueError, match="block"):
        ext.HuffmanConv1x1(64, 96, 16, 32, "sparse", bad, enc.block_offsets, enc.block_entries, enc.gap_lengths,
                           values=enc.values)


def test_conv_from_several_python_threads() -> None:
    """One prepared object, run from 4 Python threads at once (the workspaces are per thread)."""
    from concurrent.futures import ThreadPoolExecutor
    rng = np.random.default_rng(35)
    w = weights(rng, 300, 200)
    enc = encode_huffman(encode_sparse(w, prune_mask(w, 0.85), bits=4), block=(32, 64))
    conv = prepare_conv1x1(enc)
    m = enc.decode().reshape(300, 200)
    xs = [rng.standard_normal((2, 200, 5, 7)).astype(np.float32) for _ in range(8)]

    def one(i: int) -> np.ndarray:
        y = np.empty((2, 300, 5, 7), np.float32)
        for _ in range(5):
            conv.run(xs[i], y, threads=1 + i % 3)
        return y

    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(one, range(8)))
    for x, y in zip(xs, outs):
        np.testing.assert_allclose(y, dense_reference(m, x, None).reshape(y.shape), rtol=1e-4, atol=1e-4)


def test_conv_under_edgesdk_cpu_isa() -> None:
    """EDGESDK_CPU_ISA picks the level the prepared object takes by default (a fresh process)."""
    import os
    import subprocess
    import sys
    code = (
        "import numpy as np\n"
        "from edgesdk.backends.cpu.huffman import prepare_conv1x1\n"
        "from edgesdk.compress.encode import encode_huffman, encode_sparse, prune_mask\n"
        "rng = np.random.default_rng(0)\n"
        "w = rng.standard_normal((40, 50, 1, 1)).astype(np.float32)\n"
        "enc = encode_huffman(encode_sparse(w, prune_mask(w, 0.7), bits=3), block=(16, 16))\n"
        "conv = prepare_conv1x1(enc)\n"
        "x = rng.standard_normal((2, 50, 6, 6)).astype(np.float32)\n"
        "y = np.empty((2, 40, 6, 6), np.float32)\n"
        "conv.run(x, y, threads=2)\n"
        "m = enc.decode().reshape(40, 50).astype(np.float64)\n"
        "want = np.einsum('kc,ncp->nkp', m, x.reshape(2, 50, -1).astype(np.float64)).reshape(y.shape)\n"
        "assert np.allclose(y, want, rtol=1e-4, atol=1e-4)\n"
        "print(conv.isa)\n")
    for level in ext.kernels.supported_isas():
        env = {**os.environ, "EDGESDK_CPU_ISA": level}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == level
