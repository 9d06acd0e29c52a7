"""The native kernels behind the newer ONNX operators (edgesdk._native.kernels: the math activations,
layer_norm, instance_norm, softmax along an axis, reduce, argreduce, batched_matmul, ConvTranspose,
resize) against float64 numpy references, at every kernel level this CPU runs (isa=), on odd sizes,
with NaN and infinities, one and two threads, and their argument checks. The same microkernels are
checked lane by lane per level (NEON under qemu, AVX-512 under Bochs) by the C++ driver's families
in cpu_native/tests/kernel_tests.cc (tests/test_native_kernels.py)."""
from __future__ import annotations

import math

import numpy as np
import pytest

ext = pytest.importorskip("edgesdk._native")
K = ext.kernels
ISAS = K.supported_isas()
NAN, INF = np.float32(np.nan), np.float32(np.inf)
SIZES = [1, 7, 17, 33]


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def assert_close(got, want, rtol: float, atol: float, what: str = "") -> None:
    """|got - want| <= max(rtol |want|, atol), with NaN and +-inf at the same places."""
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    assert got.shape == want.shape, what
    same_nan = np.isnan(got) == np.isnan(want)
    assert same_nan.all(), f"{what}: NaN at {np.argwhere(~same_nan)[:5].tolist()}"
    inf = np.isinf(want)
    assert (got[inf] == want[inf]).all(), f"{what}: infinities differ {got[inf][:5]} {want[inf][:5]}"
    fin = np.isfinite(want)
    err = np.abs(got[fin] - want[fin])
    bad = err > np.maximum(rtol * np.abs(want[fin]), atol)
    if bad.any():
        i = np.argmax(err / np.maximum(rtol * np.abs(want[fin]), atol))
        raise AssertionError(f"{what}: {bad.sum()} mismatches, worst got {got[fin][i]!r} want {want[fin][i]!r}")


# ---- activations ----------------------------------------------------------------------------------
_erfc = np.vectorize(math.erfc, otypes=[np.float64])
_erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu64(x):
    return 0.5 * x * _erfc(-x / math.sqrt(2))


def gelu_tanh64(x):
    u = math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)
    with np.errstate(over="ignore"):
        return x / (1 + np.exp(-2 * u))


def softplus64(x):
    with np.errstate(over="ignore"):
        return np.where(x > 0, x + np.log1p(np.exp(-np.abs(x))), np.log1p(np.exp(np.minimum(x, 0))))


MATH = {  # name: float64 reference of finite x
    "gelu": gelu64,
    "gelu_tanh": gelu_tanh64,
    "erf": _erf,
    "exp": np.exp,
    "log": np.log,
    "abs": np.abs,
    "sqrt": np.sqrt,
    "reciprocal": lambda x: 1.0 / x,
    "neg": np.negative,
    "square": np.square,
    "silu": lambda x: x / (1 + np.exp(-x)),
    "mish": lambda x: x * np.tanh(softplus64(x)),
    "softplus": softplus64,
}
# (nan, +inf, -inf, +0, -0) -> expected, as IEEE / ONNX Runtime give them: Gelu, GeluTanh, Silu
# and Mish are x * f(x) with f(-inf) = 0, so -inf * 0 = NaN (ONNX Runtime 1.32 gives NaN there).
SPECIALS = {
    "gelu": [NAN, INF, NAN, 0, 0], "gelu_tanh": [NAN, INF, NAN, 0, 0], "erf": [NAN, 1, -1, 0, 0],
    "exp": [NAN, INF, 0, 1, 1], "log": [NAN, INF, NAN, -INF, -INF], "abs": [NAN, INF, INF, 0, 0],
    "sqrt": [NAN, INF, NAN, 0, 0], "reciprocal": [NAN, 0, 0, INF, -INF], "neg": [NAN, -INF, INF, 0, 0],
    "square": [NAN, INF, INF, 0, 0], "silu": [NAN, INF, NAN, 0, 0], "mish": [NAN, INF, NAN, 0, 0],
    "softplus": [NAN, INF, 0, math.log(2), math.log(2)],
}


def activation_inputs(name: str) -> np.ndarray:
    grid = np.linspace(-12, 12, 2401, dtype=np.float32)
    small = np.float32(10.0) ** np.arange(-8, 0, 0.25, dtype=np.float32)
    x = np.concatenate([grid, small, -small, rng(1).standard_normal(303).astype(np.float32) * 3])
    if name == "exp":
        x = np.concatenate([x, np.linspace(-103, 88.7, 999, dtype=np.float32)])  # subnormal to near overflow
    if name in ("log", "sqrt"):
        x = np.concatenate([np.abs(x[x != 0]), np.float32([1e-40, 1e-45, 3e38, 1.0, 1.0000001])])
    if name == "reciprocal":
        x = x[x != 0]
    return x


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("name", MATH)
def test_math_activation_accuracy(name, isa):
    x = activation_inputs(name)
    y = x.copy()
    K.activation(y, name, threads=2, isa=isa)
    with np.errstate(all="ignore"):
        want = MATH[name](x.astype(np.float64))
    # Subnormal float results: judged in absolute terms (1e-7), as any other tiny value.
    assert_close(y, want, 2e-6, 1e-7, f"{name} {isa}")


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("name", MATH)
def test_math_activation_specials_in_every_lane(name, isa):
    specials = np.float32([NAN, INF, -INF, 0.0, -0.0])
    want = np.float32(SPECIALS[name])
    for n in SIZES:  # each special at each lane position of a vector and of a tail
        for shift in range(min(n, 16)):
            x = rng(n).standard_normal(n).astype(np.float32)
            idx = (np.arange(5) * 3 + shift) % n
            x[idx] = specials[: len(idx)] if n >= 5 else specials[:n]
            got = x.copy()
            K.activation(got, name, isa=isa)
            for j, i in enumerate(idx[: min(5, n)]):
                w = want[j] if n >= 5 else want[:n][j]
                if np.isnan(w):
                    assert np.isnan(got[i]), f"{name}({x[i]}) {isa}"
                else:
                    assert got[i] == w, f"{name}({specials[j]}) = {got[i]} want {w} ({isa}, n={n})"


@pytest.mark.parametrize("name", ["gelu", "silu", "mish", "softplus", "exp", "erf"])
def test_math_activation_fused_into_gemm_conv_and_matmul(name):
    r = rng(2)
    a = (r.standard_normal((17, 33)) * 0.5).astype(np.float32)
    w = (r.standard_normal((7, 33)) * 0.2).astype(np.float32)
    b = r.standard_normal(7).astype(np.float32) * 0.1
    act = MATH[name]
    for isa in ISAS:
        out = np.empty((17, 7), np.float32)
        K.gemm(a, K.pack_gemm(w, b, isa=isa), out, act=name, threads=2)
        assert_close(out, act((a.astype(np.float64) @ w.T.astype(np.float64)) + b), 1e-4, 1e-5, f"gemm {name} {isa}")
        y = np.empty((1, 17, 7), np.float32)
        idx = np.zeros(1, np.int64)
        K.batched_matmul(a[None], w.T.copy()[None], y, idx, idx, act=name, isa=isa)
        assert_close(y[0], act(a.astype(np.float64) @ w.T.astype(np.float64)), 1e-4, 1e-5, f"matmul {name} {isa}")
    x = r.standard_normal((1, 5, 6, 3)).astype(np.float32)
    plan = K.ConvPlan(K.pack_gemm(np.ones((4, 27), np.float32) * 0.1), [1, 5, 6, 3], (3, 3), (1, 1), (1, 1), [1, 1, 1, 1])
    y_act, y_raw = np.empty(plan.output_shape, np.float32), np.empty(plan.output_shape, np.float32)
    plan.run(x, y_act, act=name)
    plan.run(x, y_raw)
    assert_close(y_act, act(y_raw.astype(np.float64)), 1e-5, 1e-6, f"conv {name}")


def test_activation_rejects_unknown_names_and_isas():
    x = np.ones(3, np.float32)
    with pytest.raises(ValueError, match="unknown activation"):
        K.activation(x, "gelu_erf")
    with pytest.raises(ValueError, match="unknown ISA"):
        K.activation(x, "gelu", isa="sse9")
    with pytest.raises(TypeError, match="float32"):
        K.activation(np.ones(3), "gelu")


# ---- normalisation -----------------------------------------------------------------------------------
def layer_norm64(x, scale, bias, eps):
    x = x.astype(np.float64)
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * scale + (0 if bias is None else bias)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("threads", [1, 2])
def test_layer_norm(isa, threads):
    r = rng(3)
    for rows, cols in [(1, 1), (7, 17), (3, 33), (5, 768), (2, 5000)]:
        x = (r.standard_normal((rows, cols)) + 3).astype(np.float32)
        scale = r.standard_normal(cols).astype(np.float32)
        for bias in (None, r.standard_normal(cols).astype(np.float32)):
            y = np.empty_like(x)
            K.layer_norm(x, scale, bias, y, 1e-5, threads, isa=isa)
            assert_close(y, layer_norm64(x, scale, bias, 1e-5), 1e-5, 1e-5, f"layer_norm {rows}x{cols} {isa}")
    x[0, 3] = NAN  # a NaN spoils its own row only; in place works
    want = layer_norm64(x, scale, bias, 1e-3)
    K.layer_norm(x, scale, bias, x, 1e-3, threads, isa=isa)
    assert np.isnan(x[0]).all() and np.isfinite(x[1:]).all()
    assert_close(x[1:], want[1:], 1e-5, 1e-5)


@pytest.mark.parametrize("isa", ISAS)
def test_instance_norm(isa):
    r = rng(4)
    for n, c, s in [(1, 1, 1), (2, 3, 17), (1, 7, 33), (2, 5, 1000)]:
        x = (r.standard_normal((n, c, s)) * 2 - 1).astype(np.float32)
        scale, bias = r.standard_normal(c).astype(np.float32), r.standard_normal(c).astype(np.float32)
        y = np.empty_like(x)
        K.instance_norm(x, scale, bias, y, 1e-5, 2, isa=isa)
        want = layer_norm64(x, 1.0, None, 1e-5) * scale[:, None] + bias[:, None]
        assert_close(y, want, 1e-5, 1e-5, f"instance_norm {n, c, s} {isa}")


def test_norm_argument_checks():
    x = np.ones((3, 4), np.float32)
    with pytest.raises(ValueError, match="scale"):
        K.layer_norm(x, np.ones(5, np.float32), None, np.empty_like(x), 1e-5, 1)
    with pytest.raises(ValueError, match="bias"):
        K.layer_norm(x, np.ones(4, np.float32), np.ones(3, np.float32), np.empty_like(x), 1e-5, 1)
    with pytest.raises(ValueError, match="y"):
        K.layer_norm(x, np.ones(4, np.float32), None, np.empty((4, 3), np.float32), 1e-5, 1)
    with pytest.raises(ValueError, match="C-contiguous"):
        K.layer_norm(np.ones((4, 3), np.float32).T, np.ones(4, np.float32), None, np.empty_like(x), 1e-5, 1)
    with pytest.raises(ValueError, match=r"\(N, C, S\)"):
        K.instance_norm(x, np.ones(4, np.float32), None, np.empty_like(x), 1e-5, 1)


# ---- softmax and reductions ----------------------------------------------------------------------------
AXIS_SHAPES = [(1, 1, 1), (3, 7, 1), (2, 33, 1), (2, 1000, 1), (1, 7, 17), (3, 17, 33), (2, 5, 70), (1, 1, 5)]


def softmax64(x, log):
    x = x.astype(np.float64)
    with np.errstate(invalid="ignore"):
        d = x - x.max(1, keepdims=True)
        lse = np.log(np.exp(d).sum(1, keepdims=True))
        return d - lse if log else np.exp(d - lse)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("log", [False, True])
def test_softmax_along_an_axis(isa, log):
    r = rng(5)
    for shape in AXIS_SHAPES:
        x = (r.standard_normal(shape) * 5).astype(np.float32)
        if shape[1] > 2:
            x[0, 1, 0] = -INF  # a masked entry: exactly 0 (-inf in log)
        for threads in (1, 2):
            y = np.empty_like(x)
            K.softmax(x.reshape(-1), y.reshape(-1), *shape, log, threads, isa=isa)
            assert_close(y, softmax64(x, log), 2e-6 if not log else 1e-5, 1e-6 if log else 1e-12, f"{shape} {isa}")
        if shape[1] > 2:
            assert y[0, 1, 0] == (-INF if log else 0.0)
    x = (r.standard_normal((2, 9, 19)) * 3).astype(np.float32)
    x[0, 4, 3], x[1, :, 5], x[1, 2, 7] = NAN, -INF, INF  # NaN; all -inf; +inf: each column NaN
    want = softmax64(x, log)
    K.softmax(x, x, 2, 9, 19, log, 2, isa=isa)  # in place
    assert np.isnan(x[0, :, 3]).all() and np.isnan(x[1, :, 5]).all() and np.isnan(x[1, :, 7]).all()
    assert_close(x, want, 1e-5, 1e-6, f"specials {isa}")


def test_softmax_keeps_the_last_axis_form_and_checks_sizes():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    out = np.empty_like(x)
    K.softmax(x, out, 2)  # the (x, out, threads) form is still there
    assert_close(out, softmax64(x.reshape(3, 4, 1), False).reshape(3, 4), 2e-6, 1e-12)
    with pytest.raises(ValueError, match="elements"):
        K.softmax(x, out, 3, 5, 1)
    with pytest.raises(ValueError, match="overflow"):
        K.softmax(x, out, 2**40, 2**40, 2**40)


REDUCE = {
    "sum": lambda x: x.sum(1), "mean": lambda x: x.mean(1), "max": lambda x: x.max(1), "min": lambda x: x.min(1),
    "l2": lambda x: np.sqrt((x * x).sum(1)), "sum_square": lambda x: (x * x).sum(1),
    "log_sum_exp": lambda x: np.log(np.exp(x).sum(1)),
}


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("op", REDUCE)
def test_reduce(isa, op):
    r = rng(6)
    for shape in AXIS_SHAPES + [(1, 3000, 3)]:
        x = (r.standard_normal(shape) * 2 + 0.5).astype(np.float32)
        for threads in (1, 2):
            y = np.empty((shape[0], shape[2]), np.float32)
            K.reduce(x, y, *shape, op, threads, isa=isa)
            assert_close(y, REDUCE[op](x.astype(np.float64)), 1e-5, 1e-5, f"{op} {shape} {isa}")
    x = r.standard_normal((2, 9, 19)).astype(np.float32)
    x[0, 4, 3], x[1, 8, 5], x[1, 2, 7], x[0, :, 9] = NAN, INF, -INF, -INF
    y = np.empty((2, 19), np.float32)
    K.reduce(x, y, 2, 9, 19, op, 2, isa=isa)
    with np.errstate(all="ignore"):
        assert_close(y, REDUCE[op](x.astype(np.float64)), 1e-5, 1e-5, f"{op} specials {isa}")
    row = x.reshape(1, -1, 1)[:, :40].copy()
    y1 = np.empty((1, 1), np.float32)
    K.reduce(row, y1, 1, 40, 1, op, isa=isa)  # a contiguous row with NaN, inf and -inf
    with np.errstate(all="ignore"):
        assert_close(y1, REDUCE[op](row.astype(np.float64)), 1e-5, 1e-5, f"{op} row specials {isa}")


def test_reduce_over_an_empty_axis_gives_the_identity():
    want = {"sum": 0, "mean": NAN, "max": -INF, "min": INF, "l2": 0, "sum_square": 0, "log_sum_exp": -INF}
    for op, w in want.items():
        y = np.ones((2, 3), np.float32)
        K.reduce(np.empty((2, 0, 3), np.float32), y, 2, 0, 3, op)
        assert_close(y, np.full((2, 3), w), 0, 0, op)
    with pytest.raises(ValueError, match="op must"):
        K.reduce(np.ones(4, np.float32), np.ones(2, np.float32), 2, 2, 1, "prod")
    with pytest.raises(ValueError, match="elements"):
        K.reduce(np.ones(4, np.float32), np.ones(3, np.float32), 2, 2, 1, "sum")


def argref(x, op, last):
    """numpy's argmax/argmin along axis 1 (the first NaN wins); last: the last extreme (or NaN)."""
    f = np.argmax if op == "max" else np.argmin
    if not last:
        return f(x, axis=1)
    return x.shape[1] - 1 - f(x[:, ::-1], axis=1)


@pytest.mark.parametrize("isa", ISAS)
def test_argreduce(isa):
    r = rng(7)
    for shape in AXIS_SHAPES + [(2, 300, 1), (1, 40, 20)]:
        x = r.integers(-3, 4, size=shape).astype(np.float32)  # many ties
        x.reshape(-1)[5::11] = NAN if shape[1] > 20 else x.reshape(-1)[5::11]
        for op in ("max", "min"):
            for last in (False, True):
                for threads in (1, 2):
                    y = np.full((shape[0], shape[2]), -1, np.int64)
                    K.argreduce(x, y, *shape, op, last, threads, isa=isa)
                    np.testing.assert_array_equal(y, argref(x, op, last), f"{op} last={last} {shape} {isa}")
    with pytest.raises(ValueError, match="empty"):
        K.argreduce(np.empty((2, 0, 1), np.float32), np.empty(2, np.int64), 2, 0, 1, "max")
    with pytest.raises(TypeError, match="int64"):
        K.argreduce(np.ones((2, 3), np.float32), np.empty(2, np.int32), 2, 3, 1, "max")


# ---- batched MatMul ------------------------------------------------------------------------------------
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("transpose_b", [False, True])
def test_batched_matmul(isa, transpose_b):
    r = rng(8)
    for ba, bb, m, k, n in [(1, 1, 1, 1, 1), (2, 1, 7, 17, 33), (1, 3, 33, 7, 17), (3, 3, 17, 70, 65), (1, 1, 130, 200, 40)]:
        a = r.standard_normal((ba, m, k)).astype(np.float32)
        b = r.standard_normal((bb, k, n)).astype(np.float32)
        batch = max(ba, bb)
        ai = np.arange(batch, dtype=np.int64) % ba  # numpy broadcasting of the batch axis
        bi = np.arange(batch, dtype=np.int64) % bb
        bt = b.transpose(0, 2, 1).copy() if transpose_b else b
        for threads in (1, 2):
            y = np.empty((batch, m, n), np.float32)
            K.batched_matmul(a, bt, y, ai, bi, threads, transpose_b=transpose_b, isa=isa)
            want = np.matmul(a.astype(np.float64)[ai], b.astype(np.float64)[bi])
            assert_close(y, want, 1e-4, 1e-4 * math.sqrt(k), f"{(ba, bb, m, k, n)} {isa}")
    a[0, 0, 0], a[0, 1, 1] = NAN, INF  # row 0 NaN; row 1 +-inf or NaN where a 0 meets the inf
    y = np.empty((batch, m, n), np.float32)
    K.batched_matmul(a, bt, y, ai, bi, 1, act="relu", transpose_b=transpose_b, isa=isa)
    with np.errstate(invalid="ignore"):
        want = np.maximum(np.matmul(a.astype(np.float64)[ai], b.astype(np.float64)[bi]), 0)
    assert_close(y, want, 1e-4, 1e-3, f"specials {isa}")


def test_batched_matmul_argument_checks():
    a, b = np.ones((2, 3, 4), np.float32), np.ones((1, 4, 5), np.float32)
    y = np.empty((2, 3, 5), np.float32)
    ok = np.array([0, 1], np.int64), np.array([0, 0], np.int64)
    K.batched_matmul(a, b, y, *ok)
    assert (y == 4).all()
    with pytest.raises(ValueError, match="out of range"):
        K.batched_matmul(a, b, y, np.array([0, 2], np.int64), ok[1])
    with pytest.raises(ValueError, match="out of range"):
        K.batched_matmul(a, b, y, ok[0], np.array([0, -1], np.int64))
    with pytest.raises(TypeError, match="int64"):
        K.batched_matmul(a, b, y, ok[0].astype(np.int32), ok[1])
    with pytest.raises(ValueError, match="a_index"):
        K.batched_matmul(a, b, y, np.zeros(3, np.int64), ok[1])
    with pytest.raises(ValueError, match="K"):
        K.batched_matmul(a, np.ones((1, 5, 5), np.float32), y, *ok)
    with pytest.raises(ValueError, match="y"):
        K.batched_matmul(a, b, np.empty((2, 3, 4), np.float32), *ok)


# ---- ConvTranspose --------------------------------------------------------------------------------------
def conv_transpose64(x, w, bias, group, stride, dil, pads, out_pad):
    """ONNX ConvTranspose (NCHW, float64) by scattering every input pixel's window."""
    n, cin, h, wd = x.shape
    _, cout_g, kh, kw = w.shape
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = stride, dil, pads
    oh = (h - 1) * sh - pt - pb + dh * (kh - 1) + out_pad[0] + 1
    ow = (wd - 1) * sw - pl - pr + dw * (kw - 1) + out_pad[1] + 1
    cin_g = cin // group
    canvas = np.zeros((n, cout_g * group, max(pt + oh, (h - 1) * sh + dh * (kh - 1) + 1),
                       max(pl + ow, (wd - 1) * sw + dw * (kw - 1) + 1)))
    for g in range(group):
        xg = x[:, g * cin_g:(g + 1) * cin_g].astype(np.float64)
        for ky in range(kh):
            for kx in range(kw):
                contrib = np.einsum("nchw,co->nohw", xg, w[g * cin_g:(g + 1) * cin_g, :, ky, kx].astype(np.float64))
                canvas[:, g * cout_g:(g + 1) * cout_g, ky * dh:ky * dh + (h - 1) * sh + 1:sh,
                       kx * dw:kx * dw + (wd - 1) * sw + 1:sw] += contrib
    y = canvas[:, :, pt:pt + oh, pl:pl + ow]
    return y + (0 if bias is None else bias[None, :, None, None])


CONV_T_CASES = [  # (n, cin, h, w, cout_g, group, kernel, stride, dilation, pads, output_padding)
    (1, 3, 5, 6, 4, 1, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), (0, 0)),
    (2, 4, 4, 3, 5, 1, (2, 2), (2, 2), (1, 1), (0, 0, 0, 0), (0, 0)),       # the 2x upsample
    (1, 6, 5, 5, 2, 2, (3, 3), (2, 2), (1, 1), (1, 0, 2, 1), (1, 1)),       # groups, asymmetric pads, out pad
    (1, 7, 6, 5, 1, 7, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), (1, 0)),       # depthwise
    (1, 3, 4, 4, 3, 3, (2, 3), (1, 2), (2, 1), (0, 1, 1, 0), (0, 1)),       # groups with 1 in, 3 out channels
    (1, 33, 3, 4, 17, 1, (4, 4), (2, 2), (1, 1), (1, 1, 1, 1), (0, 0)),
    (1, 2, 7, 1, 3, 1, (3, 1), (3, 1), (2, 1), (0, 0, 0, 0), (2, 0)),
    (1, 5, 1, 1, 7, 1, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), (0, 0)),
]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("case", range(len(CONV_T_CASES)))
def test_conv_transpose(isa, case):
    n, cin, h, wd, cout_g, group, kernel, stride, dil, pads, out_pad = CONV_T_CASES[case]
    r = rng(9 + case)
    x = r.standard_normal((n, cin, h, wd)).astype(np.float32)
    w = r.standard_normal((cin, cout_g, *kernel)).astype(np.float32)
    bias = r.standard_normal(cout_g * group).astype(np.float32) if case % 2 else None
    want = conv_transpose64(x, w, bias, group, stride, dil, pads, out_pad)
    packed = K.pack_conv_transpose(w, group, isa=isa)
    assert packed.isa == isa and packed.c_out == cout_g * group and packed.depthwise == (cin == group and cout_g == 1)
    kw = dict(kernel=kernel, stride=stride, dilation=dil, pads=pads, output_padding=out_pad)
    y = np.empty(want.shape, np.float32)
    K.conv_transpose_nchw(x, packed, bias, y, threads=2, **kw)
    assert_close(y, want, 1e-5, 1e-5 * math.sqrt(cin * kernel[0] * kernel[1]), f"nchw {case} {isa}")
    y_nhwc = np.empty(want.transpose(0, 2, 3, 1).shape, np.float32)
    K.conv_transpose_nhwc(x.transpose(0, 2, 3, 1).copy(), packed, bias, y_nhwc, act="silu", threads=1, **kw)
    assert_close(y_nhwc, MATH["silu"](want.transpose(0, 2, 3, 1)), 1e-5, 1e-5 * math.sqrt(cin * 9), f"nhwc {case} {isa}")


def test_conv_transpose_argument_checks():
    w = np.ones((4, 2, 3, 3), np.float32)
    p = K.pack_conv_transpose(w, 2)
    x = np.ones((1, 4, 5, 5), np.float32)
    y = np.empty((1, 4, 7, 7), np.float32)
    K.conv_transpose_nchw(x, p, None, y, (3, 3))
    with pytest.raises(ValueError, match="kernel"):
        K.conv_transpose_nchw(x, p, None, y, (2, 2))
    with pytest.raises(ValueError, match="C_in"):
        K.conv_transpose_nchw(np.ones((1, 3, 5, 5), np.float32), p, None, y, (3, 3))
    with pytest.raises(ValueError, match="y"):
        K.conv_transpose_nchw(x, p, None, np.empty((1, 4, 6, 7), np.float32), (3, 3))
    with pytest.raises(ValueError, match="bias"):
        K.conv_transpose_nchw(x, p, np.ones(3, np.float32), y, (3, 3))
    with pytest.raises(ValueError, match="pads remove"):
        K.conv_transpose_nchw(x, p, None, y, (3, 3), pads=(5, 5, 5, 5))
    with pytest.raises(ValueError, match="multiple of group"):
        K.pack_conv_transpose(w, 3)


# ---- resize ---------------------------------------------------------------------------------------------
def resize64(x, iy0, ix0, iy1=None, wy=None, ix1=None, wx=None, nhwc=False):
    x = x.astype(np.float64)
    if nhwc:
        x = x.transpose(0, 3, 1, 2)
    if iy1 is None:
        y = x[:, :, iy0][:, :, :, ix0]
    else:
        top = (1 - wx) * x[:, :, iy0][:, :, :, ix0] + wx * x[:, :, iy0][:, :, :, ix1]
        bottom = (1 - wx) * x[:, :, iy1][:, :, :, ix0] + wx * x[:, :, iy1][:, :, :, ix1]
        y = (1 - wy[:, None]) * top + wy[:, None] * bottom
    return y.transpose(0, 2, 3, 1) if nhwc else y


RESIZE_CASES = [(1, 1, 1, 1, 1, 1), (1, 3, 4, 5, 8, 10), (2, 17, 5, 7, 9, 33), (1, 33, 6, 4, 3, 2), (1, 2, 16, 18, 33, 35)]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_resize(isa, layout):
    r = rng(10)
    nhwc = layout == "nhwc"
    for n, c, h, w, oh, ow in RESIZE_CASES:
        x = r.standard_normal((n, h, w, c) if nhwc else (n, c, h, w)).astype(np.float32)
        out_shape = (n, oh, ow, c) if nhwc else (n, c, oh, ow)
        tables = [  # 2x nearest (the duplicate path), then random tables
            (np.minimum(np.arange(oh) // 2, h - 1).astype(np.int32), np.minimum(np.arange(ow) // 2, w - 1).astype(np.int32)),
            (r.integers(0, h, oh).astype(np.int32), r.integers(0, w, ow).astype(np.int32)),
        ]
        for iy, ix in tables:
            y = np.empty(out_shape, np.float32)
            K.resize_nearest(x, y, iy, ix, layout, 2, isa=isa)
            np.testing.assert_array_equal(y, resize64(x, iy, ix, nhwc=nhwc).astype(np.float32))
        iy0, ix0 = r.integers(0, h, oh).astype(np.int32), r.integers(0, w, ow).astype(np.int32)
        iy1, ix1 = np.minimum(iy0 + 1, h - 1).astype(np.int32), np.minimum(ix0 + 1, w - 1).astype(np.int32)
        wy, wx = r.random(oh).astype(np.float32), r.random(ow).astype(np.float32)
        for threads in (1, 2):
            y = np.empty(out_shape, np.float32)
            K.resize_linear(x, y, iy0, iy1, wy, ix0, ix1, wx, layout, threads, isa=isa)
            assert_close(y, resize64(x, iy0, ix0, iy1, wy, ix1, wx, nhwc), 1e-6, 1e-6, f"linear {layout} {isa}")


def test_resize_rejects_out_of_range_tables():
    x = np.ones((1, 2, 4, 4), np.float32)
    y = np.empty((1, 2, 8, 8), np.float32)
    good = np.arange(8, dtype=np.int32) // 2
    w = np.zeros(8, np.float32)
    for bad in (np.full(8, 4, np.int32), np.full(8, -1, np.int32)):
        with pytest.raises(ValueError, match="outside"):
            K.resize_nearest(x, y, bad, good)
        with pytest.raises(ValueError, match="outside"):
            K.resize_nearest(x, y, good, bad)
        with pytest.raises(ValueError, match="outside"):
            K.resize_linear(x, y, good, bad, w, good, good, w)
    with pytest.raises(TypeError, match="int32"):
        K.resize_nearest(x, y, good.astype(np.int64), good)
    with pytest.raises(ValueError, match="shape"):
        K.resize_nearest(x, y, good[:7], good)
    with pytest.raises(ValueError, match="layout"):
        K.resize_nearest(x, y, good, good, "nwhc")
    with pytest.raises(ValueError, match="N and C"):
        K.resize_nearest(x, np.empty((1, 3, 8, 8), np.float32), good, good)
