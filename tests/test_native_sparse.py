"""The sparse 1x1 convolution bindings (edgesdk._native.pack_sparse_conv1x1 / sparse_conv1x1,
cpu_native/src/kernels/operators_sparse.h) against numpy's dense product W @ X: fp32, fp16 and
codebook values, every block height NB the level offers and the packer's own choice, 1 and 2
threads, every ISA level this CPU runs (forced in turn with kernels.set_isa: the packer takes the
active level's kernels); NaN and infinities as the dense product gives them (a pruned weight times
inf is NaN); the one-line ValueErrors; several Python threads on one packed object."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

import numpy as np
import pytest

ext = pytest.importorskip("edgesdk._native")


def csr(dense: np.ndarray, fillers: int = 0, rng: np.random.Generator | None = None
        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row_ptr int64, cols int32, mask of kept entries) of the non-zeros of dense, plus `fillers`
    explicit zero entries per row where there is room (CSR fillers the packer must drop)."""
    rows, cols = [0], []
    for r in range(dense.shape[0]):
        keep = set(np.flatnonzero(dense[r]).tolist())
        if fillers and rng is not None:
            zeros = np.flatnonzero(dense[r] == 0)
            keep |= set(rng.choice(zeros, size=min(fillers, zeros.size), replace=False).tolist())
        cols.extend(sorted(keep))
        rows.append(len(cols))
    row_ptr = np.array(rows, np.int64)
    col = np.array(cols, np.int32)
    return row_ptr, col, np.repeat(np.arange(dense.shape[0]), np.diff(row_ptr))


def pruned(rng: np.random.Generator, k: int, c: int, sparsity: float) -> np.ndarray:
    w = rng.standard_normal((k, c)).astype(np.float32)
    w[rng.random((k, c)) < sparsity] = 0.0
    return w


def dense_reference(w: np.ndarray, x: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """act-free y = W @ X + bias per image in float64, every product formed (0 * inf = NaN): no BLAS,
    which may skip zero weights."""
    with np.errstate(invalid="ignore"):
        prod = w.astype(np.float64)[None, :, :, None] * x.reshape(x.shape[0], x.shape[1], -1).astype(np.float64)[:, None]
        y = prod.sum(axis=2)
    if bias is not None:
        y += bias.astype(np.float64)[None, :, None]
    return y


def blocks_of(isa: str) -> list[int]:
    return [1, 2, 4, 8] if isa.startswith("avx512") else [1, 2, 4]


@pytest.fixture(params=ext.kernels.supported_isas())
def isa(request: pytest.FixtureRequest) -> Iterator[str]:
    ext.kernels.set_isa(request.param)
    try:
        yield request.param
    finally:
        ext.kernels.reset_isa()


ACTS = {"none": lambda y: y, "relu": lambda y: np.maximum(y, 0), "relu6": lambda y: np.clip(y, 0, 6),
        "sigmoid": lambda y: 1 / (1 + np.exp(-y))}


@pytest.mark.parametrize("kind", ["f32", "f16", "codebook"])
def test_matches_numpy(isa: str, kind: str) -> None:
    rng = np.random.default_rng(1)
    for i, (k, c, hw, sparsity) in enumerate([(19, 33, 49, 0.9), (16, 24, 100, 0.5), (5, 7, 1, 0.0), (40, 67, 131, 0.99),
                                             (8, 3, 17, 1.0), (96, 24, 196, 0.7)]):
        w = pruned(rng, k, c, sparsity)
        row_ptr, cols, row_of = csr(w, fillers=1, rng=rng)
        bias = rng.standard_normal(k).astype(np.float32) if i % 2 == 0 else None
        kwargs: dict = {}
        if kind == "f32":
            values = w[row_of, cols]
        elif kind == "f16":
            values = w[row_of, cols].astype(np.float16)
            w = np.zeros_like(w)
            w[row_of, cols] = values.astype(np.float32)
        else:
            groups = k if i % 2 else 1
            book = rng.standard_normal((groups, 12)).astype(np.float32)
            book[:, 0] = 0.0  # index 0 is a zero: the entries that pick it are dropped
            idx = rng.integers(0, 12, cols.size).astype(np.uint8)
            values, kwargs = None, {"indices": idx, "codebook": book}
            w = np.zeros_like(w)
            w[row_of, cols] = book[row_of if groups > 1 else 0, idx]
        for block in [0, *blocks_of(isa)]:
            packed = ext.pack_sparse_conv1x1(row_ptr, cols, values, bias, c, block=block, **kwargs)
            assert (packed.rows, packed.cols, packed.value_kind) == (k, c, kind)
            assert packed.nnz == np.count_nonzero(w) and packed.stored >= packed.nnz and packed.nbytes > 0
            assert block == 0 or packed.block == block
            assert packed.kernel_name.endswith(f"x{packed.block if k >= packed.block else 1}__" +
                                               {"scalar": "scalar", "avx2": "avx2", "avxvnni": "avx2"}.get(isa, "avx512f"))
            for threads, (act, ref) in zip([1, 2, 2, 1], ACTS.items()):
                x = rng.standard_normal((2, c, 7, hw // 7) if hw % 7 == 0 else (2, c, hw)).astype(np.float32)
                y = np.full((2, k, *x.shape[2:]), np.nan, np.float32)
                ext.sparse_conv1x1(x, packed, y, act, None, None, threads)
                want = ref(dense_reference(w, x, bias)).reshape(y.shape)
                np.testing.assert_allclose(y, want, rtol=2e-5, atol=2e-5 * max(1.0, float(np.abs(want).max(initial=0))),
                                           err_msg=f"{isa} {kind} {k}x{c} hw {hw} block {block} {act} threads {threads}")


def test_clip_activation_arguments(isa: str) -> None:
    rng = np.random.default_rng(2)
    w = pruned(rng, 9, 10, 0.6)
    row_ptr, cols, row_of = csr(w)
    packed = ext.pack_sparse_conv1x1(row_ptr, cols, w[row_of, cols], None, 10)
    x = rng.standard_normal((1, 10, 40)).astype(np.float32) * 3
    y = np.empty((1, 9, 40), np.float32)
    ext.sparse_conv1x1(x, packed, y, "clip", -0.5, 0.25, 1)
    np.testing.assert_allclose(y, np.clip(dense_reference(w, x, None), -0.5, 0.25), rtol=1e-5, atol=1e-5)


def test_nan_and_inf_follow_the_dense_product(isa: str) -> None:
    """A pruned weight times inf or NaN is NaN in the dense product ONNX Runtime runs: the outputs
    must be NaN exactly where numpy's dense product is, and +-inf where it is."""
    rng = np.random.default_rng(3)
    for kind in ["f32", "f16", "codebook"]:
        for block in [0, *blocks_of(isa)]:
            k, c, hw = 21, 30, 75
            w = pruned(rng, k, c, 0.8)
            w[:, 5] = 0.0  # a column no row uses: inf there makes every output NaN
            w[3, :] = 0.0  # an empty row: inf anywhere makes it NaN
            row_ptr, cols, row_of = csr(w)
            kwargs: dict = {}
            values: np.ndarray | None = w[row_of, cols]
            if kind == "f16":
                values = values.astype(np.float16)
                w[row_of, cols] = values.astype(np.float32)
            elif kind == "codebook":
                book = np.linspace(-1, 1, 16, dtype=np.float32)[None]  # no 0.0 entry: one is appended for padding
                idx = rng.integers(0, 16, cols.size).astype(np.uint8)
                values, kwargs = None, {"indices": idx, "codebook": book}
                w[row_of, cols] = book[0, idx]
            packed = ext.pack_sparse_conv1x1(row_ptr, cols, values, None, c, block=block, **kwargs)
            x = rng.standard_normal((2, c, hw)).astype(np.float32)
            x[0, 5, 3] = np.inf          # the unused column
            x[0, 7, 40] = -np.inf        # a column some rows use
            x[1, 9, 70:] = np.nan
            x[1, 11, 2] = np.inf
            x[1, 12, 2] = -np.inf        # inf - inf where both weights are non-zero
            y = np.empty((2, k, hw), np.float32)
            ext.sparse_conv1x1(x, packed, y, "relu", None, None, 2)
            want = dense_reference(w, x, None)
            with np.errstate(invalid="ignore"):
                want = np.where(np.isnan(want), np.nan, np.maximum(want, 0))
            assert np.array_equal(np.isnan(y), np.isnan(want)), (kind, block, np.argwhere(np.isnan(y) != np.isnan(want))[:5])
            finite = np.isfinite(want)
            assert np.array_equal(y[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)])
            np.testing.assert_allclose(y[finite], want[finite], rtol=1e-5, atol=1e-5)


def test_bad_arguments_raise_value_error() -> None:
    rng = np.random.default_rng(4)
    w = pruned(rng, 4, 6, 0.5)
    w[:, 0] = 1.0
    row_ptr, cols, row_of = csr(w)
    vals = w[row_of, cols]
    pack = ext.pack_sparse_conv1x1
    bad_cols = cols.copy()
    bad_cols[1], bad_cols[0] = bad_cols[0], bad_cols[1]
    out_of_range = cols.copy()
    out_of_range[-1] = 6
    cases = [
        (lambda: pack(row_ptr.astype(np.int32), cols, vals, None, 6), "row_ptr"),
        (lambda: pack(row_ptr, cols.astype(np.int64), vals, None, 6), "cols"),
        (lambda: pack(row_ptr, cols, vals.astype(np.float64), None, 6), "values"),
        (lambda: pack(row_ptr, cols, vals[:-1], None, 6), "values"),
        (lambda: pack(row_ptr, cols, vals, np.zeros(3, np.float32), 6), "bias"),
        (lambda: pack(row_ptr, cols, vals, np.zeros(4, np.float64), 6), "bias"),
        (lambda: pack(row_ptr, bad_cols, vals, None, 6), "increasing"),
        (lambda: pack(row_ptr, out_of_range, vals, None, 6), "outside"),
        (lambda: pack(row_ptr[:-1], cols, vals, None, 6), "row_ptr"),
        (lambda: pack(row_ptr, cols, vals, None, 0), "input_channels"),
        (lambda: pack(row_ptr, cols, vals, None, 6, block=3), "block"),
        (lambda: pack(row_ptr, cols, None, None, 6), "indices"),
        (lambda: pack(row_ptr, cols, None, None, 6, indices=np.zeros(cols.size, np.uint8),
                      codebook=np.ones((3, 4), np.float32)), "codebook"),
        (lambda: pack(row_ptr, cols, None, None, 6, indices=np.full(cols.size, 4, np.uint8),
                      codebook=np.ones((1, 4), np.float32)), "index"),
        (lambda: pack(row_ptr, cols, vals, None, 6, indices=np.zeros(cols.size, np.uint8),
                      codebook=np.ones((1, 4), np.float32)), "not both"),
    ]
    if "avx512" not in ext.kernels.active_isa():
        cases.append((lambda: pack(row_ptr, cols, vals, None, 6, block=8), "block 8"))
    for call, words in cases:
        with pytest.raises(ValueError, match=words) as info:
            call()
        assert "\n" not in str(info.value), info.value
    packed = pack(row_ptr, cols, vals, None, 6)
    x = np.zeros((1, 6, 10), np.float32)
    for x_, y_, words in [(np.zeros((1, 5, 10), np.float32), np.zeros((1, 4, 10), np.float32), "channels"),
                          (x, np.zeros((1, 4, 11), np.float32), "y"),
                          (x, np.zeros((2, 4, 10), np.float32), "y"),
                          (x.astype(np.float64), np.zeros((1, 4, 10), np.float32), "x"),
                          (x, np.zeros((1, 4, 10), np.float32)[:, :, ::2], "y"),
                          (x[0], np.zeros((4, 10), np.float32), "x")]:
        with pytest.raises(ValueError, match=words):
            ext.sparse_conv1x1(x_, packed, y_, "none", None, None, 1)
    with pytest.raises(ValueError, match="activation"):
        ext.sparse_conv1x1(x, packed, np.zeros((1, 4, 10), np.float32), "swish9", None, None, 1)


def test_several_threads_share_one_packed_object() -> None:
    rng = np.random.default_rng(5)
    k, c, hw = 64, 96, 14 * 14
    w = pruned(rng, k, c, 0.85)
    row_ptr, cols, row_of = csr(w)
    packed = ext.pack_sparse_conv1x1(row_ptr, cols, w[row_of, cols], None, c)
    xs = [rng.standard_normal((1, c, 14, 14)).astype(np.float32) for _ in range(8)]
    want = [dense_reference(w, x, None).reshape(1, k, 14, 14) for x in xs]

    def run(i: int) -> np.ndarray:
        y = np.empty((1, k, 14, 14), np.float32)
        for _ in range(20):
            ext.sparse_conv1x1(xs[i], packed, y, "none", None, None, 1 + i % 2)
        return y

    with ThreadPoolExecutor(max_workers=4) as pool:
        for got, ref in zip(pool.map(run, range(8)), want):
            np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-4)


def test_packer_picks_blocks_for_column_correlated_sparsity() -> None:
    """Unstructured pruning: blocks of 1 (a block stores the union of its rows' columns); the same
    columns in groups of rows (structured pruning): the packer's cost estimate takes a bigger block."""
    rng = np.random.default_rng(6)
    w = pruned(rng, 64, 128, 0.9)
    row_ptr, cols, row_of = csr(w)
    assert ext.pack_sparse_conv1x1(row_ptr, cols, w[row_of, cols], None, 128).block == 1
    s = np.repeat(rng.random((16, 128)) < 0.2, 4, axis=0)  # 4 consecutive rows share their columns
    w = np.where(s, rng.standard_normal((64, 128)), 0).astype(np.float32)
    row_ptr, cols, row_of = csr(w)
    packed = ext.pack_sparse_conv1x1(row_ptr, cols, w[row_of, cols], None, 128)
    assert packed.block >= 2 and packed.stored == packed.nnz, packed
