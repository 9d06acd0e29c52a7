"""The LQ-Nets bitwise (AND + popcount) GEMM and convolution (cpu_native/src/kernels/lq.h,
edgesdk._native.LQGemm / LQConv) against an independent float64 numpy oracle: weights decoded to
dense from bit-planes and basis, inputs quantized by thresholds / codes to c + sum alpha_i bit_i,
dense matmul / convolution with zero padding applied after quantization. Covers Kw, Kx in 1..4 and 8,
reduction lengths that are no multiple of 32 / 64, 1 and several rows, conv geometries (1x1, 3x3 pad
1, stride 2, dilation 2, asymmetric pads, C = 3, 16, 64, 70), offset c = 0 and c != 0 (the border
correction), ties on thresholds, +-Inf, the NaN rule, bias, activations, every kernel variant this CPU
runs (bit-identical results), thread counts, bad arguments, and the LQ-Nets thesis golden vector."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

ext = pytest.importorskip("edgesdk._native")
if not hasattr(ext, "LQGemm"):
    pytest.skip("edgesdk._native predates the LQ kernels", allow_module_level=True)

SUPPORTED_ISAS = set(ext.kernels.supported_isas())
VARIANTS = ext.lq_variants()
# (isa, popcnt) pairs reaching every variant this CPU runs: scalar, avx2, avx512 BW (shuffle),
# avx512 VPOPCNTDQ (auto, where the CPU has it).
PATHS = [("scalar", "auto")]
if "avx2" in SUPPORTED_ISAS:
    PATHS.append(("avx2", "auto"))
if "avx512" in SUPPORTED_ISAS:
    PATHS.append(("avx512", "shuffle"))
    if "avx512vpopcnt" in VARIANTS:
        PATHS.append(("avx512", "vpopcnt"))
if "neon" in SUPPORTED_ISAS:
    PATHS.append(("neon", "auto"))


# ------------------------------------------------------------------------------------------------
# The oracle.

def decode_weights(planes: np.ndarray, basis: np.ndarray, n: int) -> np.ndarray:
    """Dense (O, n) float64 weights: sum_j beta[o, j] * (2*bit_j - 1), bits LSB first per uint32."""
    o, kw, _ = planes.shape
    bits = ((planes[..., None] >> np.arange(32, dtype=np.uint32)) & 1).reshape(o, kw, -1)[:, :, :n]
    return np.einsum("oj,ojk->ok", basis.astype(np.float64), 2.0 * bits - 1.0)


def quantize(x: np.ndarray, alpha, c, thresholds, codes) -> tuple[np.ndarray, np.ndarray]:
    """(levels float64, NaN mask): level index = #thresholds strictly below x."""
    xf = np.asarray(x, np.float32)
    idx = np.sum(np.asarray(thresholds, np.float32) < xf[..., None], axis=-1)
    code = np.asarray(codes)[idx].astype(np.int64)
    alpha = np.asarray(alpha, np.float64)
    bits = (code[..., None] >> np.arange(len(alpha))) & 1
    return float(c) + bits @ alpha, np.isnan(xf)


def gemm_oracle(x, planes, basis, n, alpha, c, thr, codes, bias, act="none"):
    w = decode_weights(planes, basis, n)
    q, nan = quantize(x, alpha, c, thr, codes)
    y = q @ w.T + (0.0 if bias is None else bias.astype(np.float64))
    scale = np.abs(q) @ np.abs(w).T + (0.0 if bias is None else np.abs(bias.astype(np.float64))) + 1e-30
    y = apply_act(y, act)
    y[nan.any(axis=1)] = np.nan
    return y, scale


def conv_oracle(x, planes, basis, c_in, kernel, alpha, c, thr, codes, bias, stride, dilation, pads, act="none"):
    kh, kwid = kernel
    o = planes.shape[0]
    w = decode_weights(planes, basis, c_in * kh * kwid).reshape(o, c_in, kh, kwid)
    q, nan = quantize(x, alpha, c, thr, codes)
    b, h, wd, _ = x.shape
    pt, pl, pb, pr = pads
    qp = np.zeros((b, h + pt + pb, wd + pl + pr, c_in))
    qp[:, pt:pt + h, pl:pl + wd] = q
    np_ = np.zeros((b, h + pt + pb, wd + pl + pr), bool)
    np_[:, pt:pt + h, pl:pl + wd] = nan.any(axis=-1)
    oh = (h + pt + pb - (dilation[0] * (kh - 1) + 1)) // stride[0] + 1
    ow = (wd + pl + pr - (dilation[1] * (kwid - 1) + 1)) // stride[1] + 1
    y = np.zeros((b, oh, ow, o))
    scale = np.zeros((b, oh, ow, o))
    mask = np.zeros((b, oh, ow), bool)
    for ty in range(kh):
        for tx in range(kwid):
            ys = slice(ty * dilation[0], ty * dilation[0] + stride[0] * (oh - 1) + 1, stride[0])
            xs = slice(tx * dilation[1], tx * dilation[1] + stride[1] * (ow - 1) + 1, stride[1])
            patch = qp[:, ys, xs, :]
            y += np.einsum("bhwc,oc->bhwo", patch, w[:, :, ty, tx])
            scale += np.einsum("bhwc,oc->bhwo", np.abs(patch), np.abs(w[:, :, ty, tx]))
            mask |= np_[:, ys, xs]
    if bias is not None:
        y += bias.astype(np.float64)
        scale += np.abs(bias.astype(np.float64))
    y = apply_act(y, act)
    y[mask] = np.nan
    return y, scale + 1e-30


def apply_act(y, act):
    if act == "relu":
        return np.maximum(y, 0.0)
    if act == "clip":
        return np.clip(y, -0.5, 0.75)
    return y


def assert_close(got, want, scale, rtol=1e-5):
    assert got.shape == want.shape
    nan_w = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan_w)
    err = np.abs(got.astype(np.float64) - want)[~nan_w] / np.maximum(scale, 1.0)[~nan_w]
    assert err.size == 0 or err.max() <= rtol, f"max scaled error {err.max():.3g}"


# ------------------------------------------------------------------------------------------------
# Random layers.

def make_quant(rng, kx: int, offset: float):
    """alpha (ascending, > 0), thresholds at the midpoints of the sorted levels, codes (the code of
    the l-th smallest level)."""
    alpha = np.sort(rng.uniform(0.1, 1.0, kx)).astype(np.float32)
    levels = offset + ((np.arange(2 ** kx)[:, None] >> np.arange(kx)) & 1) @ alpha.astype(np.float64)
    codes = np.argsort(levels, kind="stable").astype(np.uint8)
    s = levels[codes]
    thr = ((s[1:] + s[:-1]) / 2).astype(np.float32)
    return alpha, np.float32(offset), thr, codes


def make_weights(rng, o: int, kw: int, n: int):
    planes = rng.integers(0, 2 ** 32, size=(o, kw, (n + 31) // 32), dtype=np.uint64).astype(np.uint32)
    if n % 32:
        planes[:, :, -1] &= np.uint32((1 << (n % 32)) - 1)
    basis = np.sort(rng.uniform(0.05, 1.0, (o, kw)), axis=1).astype(np.float32)
    return planes, basis


def make_input(rng, shape, thr):
    x = rng.normal(0, 1.5, size=shape).astype(np.float32)
    flat = x.reshape(-1)
    # ties exactly on thresholds, and infinities
    k = max(1, flat.size // 10)
    picks = rng.choice(flat.size, size=k, replace=False)
    flat[picks] = rng.choice(thr, size=k)
    if flat.size > 4:
        flat[rng.choice(flat.size, 2, replace=False)] = [np.inf, -np.inf]
    return x


# ------------------------------------------------------------------------------------------------
# The thesis golden vector.

GOLD_BETA = np.array([[0.11, 0.23, 0.31], [0.23, 0.41, 0.53], [0.13, 0.22, 0.46], [0.32, 0.33, 0.35]], np.float32)
GOLD_PLANES = np.array([[7, 13, 20], [4, 15, 3], [31, 17, 11], [22, 19, 2]], np.uint32).reshape(4, 3, 1)
GOLD_ALPHA = np.array([0.24, 3.4], np.float32)
GOLD_C = -1.82
GOLD_THR = np.array([-1.70, 0.0, 1.70], np.float32)
GOLD_CODES = np.array([0, 1, 2, 3], np.uint8)
GOLD_X = np.array([[0.5, 1.2, 2.3, -1.0, 0.0]], np.float32)
GOLD_BIAS = np.array([-1.1, -5.0, -0.3, 2.8], np.float32)


@pytest.mark.parametrize("isa,popcnt", PATHS)
def test_thesis_golden_vector(isa, popcnt):
    idx = np.sum(GOLD_THR < GOLD_X[0, :, None], axis=1)
    np.testing.assert_array_equal(GOLD_CODES[idx], [2, 2, 3, 1, 1])
    g = ext.LQGemm(GOLD_PLANES, GOLD_BETA, 5, GOLD_ALPHA, GOLD_C, GOLD_THR, GOLD_CODES, GOLD_BIAS, isa=isa, popcnt=popcnt)
    y = np.zeros((1, 4), np.float32)
    g.run(GOLD_X, y)
    np.testing.assert_array_equal(np.round(y[0], 4), np.float32([-0.2014, -0.1546, 0.1526, 4.2936]))
    g = ext.LQGemm(GOLD_PLANES, GOLD_BETA, 5, GOLD_ALPHA, GOLD_C, GOLD_THR, GOLD_CODES, isa=isa, popcnt=popcnt)
    g.run(GOLD_X, y, act_name="relu")
    np.testing.assert_array_equal(np.round(y[0], 4), np.float32([0.8986, 4.8454, 0.4526, 1.4936]))
    want, _ = gemm_oracle(GOLD_X, GOLD_PLANES, GOLD_BETA, 5, GOLD_ALPHA, GOLD_C, GOLD_THR, GOLD_CODES, None, "relu")
    np.testing.assert_allclose(y, want, rtol=1e-5)


# ------------------------------------------------------------------------------------------------
# GEMM.

GEMM_CASES = [  # (kw, kx, n, m, o, offset, bias, act)
    *[(kw, kx, n, m, 13, off, bias, act)
      for (kw, kx), (n, m), (off, bias, act) in zip(
          itertools.product(range(1, 5), range(1, 5)),
          itertools.cycle([(5, 1), (63, 3), (64, 1), (65, 7), (700, 2), (784, 1), (2000, 17)]),
          itertools.cycle([(0.0, True, "none"), (-0.7, False, "relu"), (0.3, True, "clip"), (-1.1, True, "none")]))],
    (8, 8, 300, 5, 9, -0.5, True, "none"),
    (8, 1, 130, 2, 17, 0.0, False, "relu"),
    (1, 8, 77, 3, 8, 0.25, True, "none"),
    (3, 3, 784, 1, 700, 0.0, True, "relu"),
    (2, 2, 700, 1, 10, -0.1, True, "none"),
    (1, 1, 1024, 64, 40, 0.0, False, "none"),
    (2, 3, 300, 150, 300, -0.4, True, "relu"),  # several row tasks and channel blocks
]


@pytest.mark.parametrize("kw,kx,n,m,o,offset,bias,act", GEMM_CASES)
def test_gemm_matches_oracle(kw, kx, n, m, o, offset, bias, act):
    rng = np.random.default_rng(1000 * kw + 100 * kx + n)
    alpha, c, thr, codes = make_quant(rng, kx, offset)
    planes, basis = make_weights(rng, o, kw, n)
    b = rng.normal(0, 1, o).astype(np.float32) if bias else None
    x = make_input(rng, (m, n), thr)
    want, scale = gemm_oracle(x, planes, basis, n, alpha, c, thr, codes, b, act)
    kwargs = {"act_alpha": -0.5, "act_beta": 0.75} if act == "clip" else {}
    first = None
    for isa, popcnt in PATHS:
        g = ext.LQGemm(planes, basis, n, alpha, float(c), thr, codes, b, isa=isa, popcnt=popcnt)
        for threads in (1, 2, 3):
            y = np.full((m, o), 7.0, np.float32)
            g.run(x, y, act_name=act, threads=threads, **kwargs)
            assert_close(y, want, scale)
            if first is None:
                first = y.copy()
            else:  # every variant and thread count: the same bits
                np.testing.assert_array_equal(y.view(np.uint32), first.view(np.uint32), err_msg=f"{isa} {popcnt} {threads}")


def test_gemm_nan_rows():
    rng = np.random.default_rng(7)
    alpha, c, thr, codes = make_quant(rng, 2, 0.0)
    planes, basis = make_weights(rng, 11, 2, 70)
    x = rng.normal(size=(4, 70)).astype(np.float32)
    x[1, 69] = np.nan
    x[3, 0] = np.nan
    x[2, 5] = np.inf
    want, scale = gemm_oracle(x, planes, basis, 70, alpha, c, thr, codes, None, "relu")
    for isa, popcnt in PATHS:
        g = ext.LQGemm(planes, basis, 70, alpha, float(c), thr, codes, isa=isa, popcnt=popcnt)
        y = np.zeros((4, 11), np.float32)
        g.run(x, y, act_name="relu")
        assert np.isnan(y[[1, 3]]).all() and np.isfinite(y[[0, 2]]).all()
        assert_close(y, want, scale)


def test_gemm_infinities_take_the_extreme_levels():
    rng = np.random.default_rng(8)
    alpha, c, thr, codes = make_quant(rng, 3, -0.4)
    planes, basis = make_weights(rng, 5, 2, 4)
    x = np.array([[np.inf, np.inf, np.inf, np.inf], [-np.inf] * 4, [thr[0], thr[3], thr[-1], 0.0]], np.float32)
    want, scale = gemm_oracle(x, planes, basis, 4, alpha, c, thr, codes, None)
    for isa, popcnt in PATHS:
        g = ext.LQGemm(planes, basis, 4, alpha, float(c), thr, codes, isa=isa, popcnt=popcnt)
        y = np.zeros((3, 5), np.float32)
        g.run(x, y)
        assert np.isfinite(y).all()
        assert_close(y, want, scale)


# ------------------------------------------------------------------------------------------------
# Convolution.

CONV_CASES = [  # (c_in, o, kernel, stride, dilation, pads, hw, kw, kx, offset, bias, act)
    (16, 9, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), (5, 6), 2, 2, -0.6, True, "none"),
    (3, 8, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), (7, 6), 1, 1, 0.0, True, "relu"),
    (3, 5, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), (6, 5), 3, 2, -1.3, False, "none"),
    (64, 16, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), (9, 8), 2, 3, 0.45, True, "none"),
    (70, 10, (3, 3), (1, 1), (2, 2), (2, 2, 2, 2), (7, 7), 4, 4, -0.9, True, "relu"),
    (16, 12, (3, 2), (2, 1), (1, 2), (0, 2, 1, 0), (8, 7), 3, 1, 0.8, True, "clip"),
    (70, 7, (5, 5), (1, 2), (1, 1), (2, 1, 0, 3), (6, 9), 1, 4, -0.2, False, "none"),
    (3, 20, (2, 2), (1, 1), (1, 1), (1, 0, 0, 1), (4, 4), 8, 8, 0.3, True, "none"),
    (64, 64, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), (10, 10), 1, 1, 0.0, False, "none"),
    (16, 33, (1, 1), (2, 2), (1, 1), (1, 1, 1, 1), (5, 5), 2, 4, -0.5, True, "none"),
]


@pytest.mark.parametrize("c_in,o,kernel,stride,dilation,pads,hw,kw,kx,offset,bias,act", CONV_CASES)
def test_conv_matches_oracle(c_in, o, kernel, stride, dilation, pads, hw, kw, kx, offset, bias, act):
    rng = np.random.default_rng(c_in * 31 + o * 7 + kernel[0])
    alpha, c, thr, codes = make_quant(rng, kx, offset)
    n = c_in * kernel[0] * kernel[1]
    planes, basis = make_weights(rng, o, kw, n)
    b = rng.normal(0, 1, o).astype(np.float32) if bias else None
    x = make_input(rng, (2, *hw, c_in), thr)
    want, scale = conv_oracle(x, planes, basis, c_in, kernel, alpha, c, thr, codes, b, stride, dilation, pads, act)
    kwargs = {"act_alpha": -0.5, "act_beta": 0.75} if act == "clip" else {}
    first = None
    for isa, popcnt in PATHS:
        conv = ext.LQConv(planes, basis, c_in, kernel, alpha, float(c), thr, codes, b, isa=isa, popcnt=popcnt)
        assert conv.output_shape(x.shape, stride, dilation, pads) == list(want.shape)
        for threads in (1, 2):
            y = np.full(want.shape, 7.0, np.float32)
            conv.run(x, y, stride=stride, dilation=dilation, pads=pads, act_name=act, threads=threads, **kwargs)
            assert_close(y, want, scale)
            if first is None:
                first = y.copy()
            else:
                np.testing.assert_array_equal(y.view(np.uint32), first.view(np.uint32), err_msg=f"{isa} {popcnt} {threads}")


def test_conv_equals_gemm_for_1x1():
    rng = np.random.default_rng(11)
    alpha, c, thr, codes = make_quant(rng, 2, -0.3)
    planes, basis = make_weights(rng, 10, 3, 70)
    x = make_input(rng, (1, 4, 5, 70), thr)
    conv = ext.LQConv(planes, basis, 70, (1, 1), alpha, float(c), thr, codes)
    gemm = ext.LQGemm(planes, basis, 70, alpha, float(c), thr, codes)
    y1 = np.zeros((1, 4, 5, 10), np.float32)
    y2 = np.zeros((20, 10), np.float32)
    conv.run(x, y1)
    gemm.run(x.reshape(20, 70), y2)
    np.testing.assert_array_equal(y1.reshape(20, 10), y2)


def test_conv_nan_pixels_and_padding():
    """A NaN pixel makes every output pixel whose window reads it NaN (all channels), and none else;
    padded taps read no input."""
    rng = np.random.default_rng(12)
    alpha, c, thr, codes = make_quant(rng, 2, -0.8)
    planes, basis = make_weights(rng, 6, 2, 5 * 9)
    x = rng.normal(size=(1, 6, 6, 5)).astype(np.float32)
    x[0, 0, 0, 3] = np.nan
    x[0, 4, 2, 0] = np.nan
    want, scale = conv_oracle(x, planes, basis, 5, (3, 3), alpha, c, thr, codes, None, (1, 1), (1, 1), (1, 1, 1, 1))
    assert np.isnan(want).any() and np.isfinite(want).any()
    for isa, popcnt in PATHS:
        conv = ext.LQConv(planes, basis, 5, (3, 3), alpha, float(c), thr, codes, isa=isa, popcnt=popcnt)
        y = np.zeros((1, 6, 6, 6), np.float32)
        conv.run(x, y, pads=(1, 1, 1, 1))
        assert_close(y, want, scale)


# ------------------------------------------------------------------------------------------------
# Dispatch and arguments.

def test_kernel_names_and_popcnt_override(monkeypatch):
    rng = np.random.default_rng(3)
    alpha, c, thr, codes = make_quant(rng, 1, 0.0)
    planes, basis = make_weights(rng, 4, 1, 40)
    args = (planes, basis, 40, alpha, float(c), thr, codes)
    assert ext.LQGemm(*args, isa="scalar").kernel == "b1_lqgemm_4x8__scalar"
    if "avx2" in SUPPORTED_ISAS:
        assert ext.LQGemm(*args, isa="avx2").kernel == "b1_lqgemm_4x8__avx2"
    if "avx512" in SUPPORTED_ISAS:
        assert ext.LQGemm(*args, isa="avx512", popcnt="shuffle").kernel == "b1_lqgemm_8x8__avx512skx"
        monkeypatch.setenv("EDGESDK_LQ_POPCNT", "shuffle")
        assert ext.LQGemm(*args, isa="avx512").kernel == "b1_lqgemm_8x8__avx512skx"
        assert ext.LQGemm(*args, isa="scalar").kernel == "b1_lqgemm_4x8__scalar"
        monkeypatch.setenv("EDGESDK_LQ_POPCNT", "bogus")
        with pytest.raises(ValueError, match="EDGESDK_LQ_POPCNT"):
            ext.LQGemm(*args, isa="avx512")
        monkeypatch.delenv("EDGESDK_LQ_POPCNT")
        auto = ext.LQGemm(*args, isa="avx512").kernel
        if ext.cpu_features()["flags"].get("avx512vpopcntdq"):
            assert auto == "b1_lqgemm_8x8__avx512vpopcnt"
            assert ext.LQConv(planes, basis, 40, (1, 1), alpha, float(c), thr, codes, isa="avx512").kernel == auto
        else:
            assert auto == "b1_lqgemm_8x8__avx512skx"
            with pytest.raises(ValueError):
                ext.LQGemm(*args, isa="avx512", popcnt="vpopcnt")
    with pytest.raises(ValueError):
        ext.LQGemm(*args, isa="scalar", popcnt="vpopcnt")
    with pytest.raises(ValueError):
        ext.LQGemm(*args, popcnt="fast")
    assert ext.kernels.LQGemm is ext.LQGemm and ext.kernels.LQConv is ext.LQConv


def test_bad_arguments_raise_value_error():
    rng = np.random.default_rng(4)
    alpha, c, thr, codes = make_quant(rng, 2, 0.0)
    planes, basis = make_weights(rng, 4, 2, 40)
    bad_ctor = [
        dict(planes=planes[:, :, :1]),                       # wrong word count for n
        dict(planes=planes.astype(np.int32)),                # dtype
        dict(planes=planes[0]),                              # rank
        dict(basis=basis[:, :1]),                            # basis shape
        dict(basis=basis.astype(np.float64)),
        dict(n=0),
        dict(act_basis=np.zeros(0, np.float32)),
        dict(act_basis=np.ones(9, np.float32)),
        dict(thresholds=thr[:2]),                            # 2^kx - 1 thresholds
        dict(thresholds=thr[::-1].copy()),                   # not ascending
        dict(thresholds=np.array([0, np.nan, 1], np.float32)),
        dict(codes=codes[:3]),
        dict(codes=np.array([0, 1, 2, 4], np.uint8)),        # code >= 2^kx
        dict(bias=np.zeros(5, np.float32)),
        dict(isa="nonsense"),
    ]
    base = dict(planes=planes, basis=basis, n=40, act_basis=alpha, act_offset=float(c), thresholds=thr, codes=codes)
    for change in bad_ctor:
        kw = {**base, **change}
        with pytest.raises(ValueError):
            ext.LQGemm(kw.pop("planes"), kw.pop("basis"), kw.pop("n"), kw.pop("act_basis"), kw.pop("act_offset"),
                       kw.pop("thresholds"), kw.pop("codes"), kw.pop("bias", None), **kw)
    g = ext.LQGemm(planes, basis, 40, alpha, float(c), thr, codes)
    x = np.zeros((3, 40), np.float32)
    for bad_x, bad_y in [(np.zeros((3, 41), np.float32), np.zeros((3, 4), np.float32)),
                         (x, np.zeros((3, 5), np.float32)),
                         (x.astype(np.float64), np.zeros((3, 4), np.float32)),
                         (x, np.zeros((3, 4), np.float64)),
                         (np.zeros((40, 3), np.float32).T, np.zeros((3, 4), np.float32)),
                         (x[None], np.zeros((3, 4), np.float32))]:
        with pytest.raises(ValueError):
            g.run(bad_x, bad_y)
    with pytest.raises(ValueError):
        g.run(x, np.zeros((3, 4), np.float32), threads=0)
    with pytest.raises(ValueError):
        g.run(x, np.zeros((3, 4), np.float32), act_name="bogus")
    ro = np.zeros((3, 4), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError):
        g.run(x, ro)
    conv = ext.LQConv(planes, basis, 10, (2, 2), alpha, float(c), thr, codes)
    xc = np.zeros((1, 5, 5, 10), np.float32)
    with pytest.raises(ValueError):
        ext.LQConv(planes, basis, 10, (3, 3), alpha, float(c), thr, codes)  # n = 90 != 40
    for kwargs in [dict(y=np.zeros((1, 4, 4, 5), np.float32)), dict(x=np.zeros((1, 5, 5, 9), np.float32)),
                   dict(stride=(0, 1)), dict(pads=(1, 1, 1)), dict(pads=(-1, 0, 0, 0)), dict(dilation=(1, 0)),
                   dict(x=np.zeros((1, 1, 1, 10), np.float32), y=np.zeros((1, 0, 0, 4), np.float32))]:
        args = {"x": xc, "y": np.zeros((1, 4, 4, 4), np.float32), **kwargs}
        with pytest.raises(ValueError):
            conv.run(args.pop("x"), args.pop("y"), **args)
    y = np.zeros((1, 4, 4, 4), np.float32)
    conv.run(xc, y)  # the good call works
