"""The int8 (qu8) kernels of edgesdk._native.kernels (cpu_native/src/kernels/operators_qu8.h): uint8
activations with per-tensor zero points, int8 weights symmetric per output channel, int32 bias and
accumulation, and gemmlowp requantization (TFLite's QuantizeMultiplier convention) fused into every
kernel. Each binding is compared bit for bit with an independent numpy implementation of the formulas
(int64 arithmetic) on random and adversarial cases, at every kernel level this CPU runs (isa=), and
its argument checks raise typed errors. The same kernels are checked lane by lane per level (NEON
under qemu, AVX-512BW under Bochs, AVX512_VNNI natively where the CPU has it) by the C++ driver's qu8
families (tests/test_native_kernels.py)."""
from __future__ import annotations

import numpy as np
import pytest

ext = pytest.importorskip("edgesdk._native")
K = ext.kernels
ISAS = K.supported_isas()
I32_MIN, I32_MAX = -(2 ** 31), 2 ** 31 - 1
EXTREME_MULTS = [0, 1, -1, I32_MIN, I32_MAX, 1 << 30, (1 << 30) + 1, 1518500250, -1518500250]
EXTREME_SHIFTS = [-31, -30, -17, -1, 0, 1, 7, 30]


# ---- the reference: the int8 spec's formulas in int64 numpy ---------------------------------------

def srdhm(a, b):
    """gemmlowp SaturatingRoundingDoublingHighMul, C++ semantics (division truncates toward 0)."""
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    ab = a * b  # |ab| <= 2^62
    q = ab + np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    res = np.where(q >= 0, q // (1 << 31), -((-q) // (1 << 31)))
    return np.where((a == I32_MIN) & (b == I32_MIN), I32_MAX, res)


def rdbpot(x, e):
    """gemmlowp RoundingDivideByPOT, 0 <= e <= 31."""
    x, e = np.asarray(x, np.int64), np.asarray(e, np.int64)
    mask = (np.int64(1) << e) - 1
    rem = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> e) + (rem > threshold)


def requantize(acc, mult, shift):
    acc, mult, shift = np.asarray(acc, np.int64), np.asarray(mult, np.int64), np.asarray(shift, np.int64)
    left, right = np.maximum(shift, 0), np.maximum(-shift, 0)
    x = np.clip(acc * (np.int64(1) << left), I32_MIN, I32_MAX)  # acc may be an exact int64 sum (Add)
    return rdbpot(srdhm(x, mult), right)


def output(acc, mult, shift, zp, qmin=0, qmax=255):
    return np.clip(requantize(acc, mult, shift) + zp, qmin, qmax).astype(np.uint8)


def wrap32(v):
    """int64 -> int32 modulo 2^32 (the kernels' accumulators wrap)."""
    return (np.asarray(v, np.int64) + 2 ** 31) % 2 ** 32 - 2 ** 31


def test_reference_formulas():
    """The numpy reference itself on hand-checked values."""
    assert srdhm(I32_MIN, I32_MIN) == I32_MAX
    assert srdhm(1 << 30, 1 << 30) == 1 << 29
    assert srdhm(-3, 1 << 30) == -1  # -1.5 -> -1: halves go up
    assert srdhm(3, 1 << 30) == 2
    assert rdbpot(5, 1) == 3 and rdbpot(-5, 1) == -3 and rdbpot(-4, 1) == -2 and rdbpot(7, 0) == 7
    assert rdbpot(I32_MIN, 31) == -1 and rdbpot(I32_MAX, 31) == 1
    assert requantize(I32_MAX, I32_MAX, 30) == I32_MAX - 1  # saturated to I32_MAX, times (1 - 2^-31)
    assert requantize(-3, 1 << 30, 30) == -(1 << 30)  # -3 * 2^30 saturates to I32_MIN, halved
    assert requantize(100, 1 << 30, -2) == 13  # 100 * 0.5 / 4 = 12.5 -> 13


# ---- case generators ------------------------------------------------------------------------------

def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def u8(r, shape):
    return r.integers(0, 256, size=shape, dtype=np.uint8)


def i8(r, shape):
    return r.integers(-128, 128, size=shape, dtype=np.int8)


def channel_scales(r, n: int, magnitude: float, extreme_every: int = 6):
    """Per-channel (multiplier, shift) mapping sums of about `magnitude` to ~ +-60, every
    `extreme_every`-th channel an extreme one."""
    mult = r.integers(1 << 30, 1 << 31, size=n, dtype=np.int64).astype(np.int32)
    base = int(np.clip(np.round(np.log2(64 / max(magnitude, 1.0))), -31, 30))
    shift = np.clip(base + r.integers(-1, 2, size=n), -31, 30).astype(np.int32)
    for j in range(extreme_every - 1, n, extreme_every):
        mult[j] = EXTREME_MULTS[r.integers(len(EXTREME_MULTS))]
        shift[j] = EXTREME_SHIFTS[r.integers(len(EXTREME_SHIFTS))]
    return mult, shift


def out_size(i, k, s, d, p0, p1):
    return (i + p0 + p1 - d * (k - 1) - 1) // s + 1


def windows(xp, kh, kw, s, d, oh, ow):
    """[(ky, kx, view (N, OH, OW, C))] of a padded NHWC array."""
    return [(ky, kx, xp[:, ky * d[0]:ky * d[0] + s[0] * (oh - 1) + 1:s[0], kx * d[1]:kx * d[1] + s[1] * (ow - 1) + 1:s[1]])
            for ky in range(kh) for kx in range(kw)]


def ref_conv(x, w, bias, x_zp, mult, shift, y_zp, qmin, qmax, stride, dilation, pads):
    n, h, wd, c = x.shape
    o, kh, kw, _ = w.shape
    oh = out_size(h, kh, stride[0], dilation[0], pads[0], pads[2])
    ow = out_size(wd, kw, stride[1], dilation[1], pads[1], pads[3])
    xp = np.pad(x.astype(np.int64) - x_zp, ((0, 0), (pads[0], pads[2]), (pads[1], pads[3]), (0, 0)))  # pads add 0
    acc = np.zeros((n, oh, ow, o), np.int64) + (0 if bias is None else bias.astype(np.int64))
    for ky, kx, v in windows(xp, kh, kw, stride, dilation, oh, ow):
        acc += v @ w[:, ky, kx, :].astype(np.int64).T
    return output(wrap32(acc), mult, shift, y_zp, qmin, qmax)


# ---- GEMM and convolution -------------------------------------------------------------------------

@pytest.mark.parametrize("isa", ISAS)
def test_qu8_gemm_matches_numpy(isa):
    r = rng(1)
    for case, (m, n, k) in enumerate([(1, 1, 1), (3, 5, 7), (8, 16, 16), (9, 17, 33), (17, 40, 100), (33, 3, 300),
                                      (5, 33, 4), (64, 96, 24), (2, 15, 5)]):
        x_zp, y_zp = [0, 128, 255, 3, 77][case % 5], [128, 0, 255, 9][case % 4]
        qmin, qmax = [(0, 255), (128, 255), (10, 200), (0, 255)][case % 4]
        a, w = u8(r, (m, k)), i8(r, (n, k))
        bias = None if case % 3 == 1 else r.integers(-10000, 10001, size=n, dtype=np.int32)
        mult, shift = channel_scales(r, n, np.sqrt(k) * 74 * 74)
        packed = K.pack_qu8_conv(w, bias, x_zp, mult, shift, y_zp, qmin, qmax, isa=isa)
        assert (packed.n, packed.k, packed.kernel, packed.isa) == (n, k, (1, 1), isa)
        y = np.empty((m, n), np.uint8)
        K.qu8_gemm(a, packed, y, threads=1 + case % 2)
        acc = (a.astype(np.int64) - x_zp) @ w.astype(np.int64).T + (0 if bias is None else bias)
        np.testing.assert_array_equal(y, output(wrap32(acc), mult, shift, y_zp, qmin, qmax), err_msg=f"{isa} {m}x{n}x{k}")


CONV_CASES = [  # (N, H, W, C, O, kernel, stride, dilation, pads)
    (1, 5, 7, 3, 5, (1, 1), (1, 1), (1, 1), [0, 0, 0, 0]),      # the GEMM path
    (2, 6, 5, 17, 33, (1, 1), (2, 2), (1, 1), [0, 0, 0, 0]),    # 1x1 stride 2: indirect
    (1, 7, 9, 5, 17, (3, 3), (1, 1), (1, 1), [1, 1, 1, 1]),     # C not a multiple of 4
    (2, 9, 8, 3, 16, (3, 3), (2, 2), (1, 1), [1, 1, 1, 1]),     # RGB stem
    (1, 11, 10, 1, 1, (5, 5), (1, 1), (2, 2), [4, 4, 4, 4]),    # dilation 2
    (1, 6, 7, 17, 5, (3, 2), (1, 1), (1, 1), [0, 1, 2, 0]),     # asymmetric kernel and padding
    (1, 4, 4, 64, 40, (3, 3), (1, 1), (1, 1), [1, 1, 1, 1]),
    (1, 3, 3, 8, 19, (3, 3), (1, 2), (1, 1), [2, 2, 2, 2]),     # windows entirely in the padding
]


@pytest.mark.parametrize("isa", ISAS)
def test_qu8_conv_matches_numpy(isa):
    r = rng(2)
    for case, (n, h, wd, c, o, kernel, stride, dil, pads) in enumerate(CONV_CASES):
        x_zp, y_zp = [0, 128, 255, 3, 77][case % 5], [128, 0, 255, 9][case % 4]
        qmin, qmax = [(0, 255), (128, 255), (10, 200), (0, 255)][case % 4]
        x, w = u8(r, (n, h, wd, c)), i8(r, (o, *kernel, c))
        bias = None if case % 3 == 2 else r.integers(-100000, 100001, size=o, dtype=np.int32)
        mult, shift = channel_scales(r, o, np.sqrt(w[0].size) * 74 * 74)
        packed = K.pack_qu8_conv(w, bias, x_zp, mult, shift, y_zp, qmin, qmax, isa=isa)
        assert packed.kernel == kernel and packed.k == w[0].size
        plan = K.Qu8ConvPlan(packed, [n, h, wd, c], kernel, stride, dil, pads)
        assert plan.is_gemm == (kernel == (1, 1) and stride == (1, 1) and not any(pads))
        want = ref_conv(x, w, bias, x_zp, mult, shift, y_zp, qmin, qmax, stride, dil, pads)
        assert list(want.shape) == plan.output_shape
        y = np.empty(plan.output_shape, np.uint8)
        plan.run(x, y, threads=1 + case % 2)
        np.testing.assert_array_equal(y, want, err_msg=f"{isa} case {case}")
        x2 = (255 - x).copy()  # a new input buffer: the indirection must follow it
        plan.run(x2, y, threads=2)
        np.testing.assert_array_equal(y, ref_conv(x2, w, bias, x_zp, mult, shift, y_zp, qmin, qmax, stride, dil, pads))


@pytest.mark.parametrize("isa", ISAS)
def test_requantization_edges_through_the_gemm(isa):
    """acc = bias + (x - x_zp) * 1: biases put the accumulator at INT32_MIN / MAX, their neighbours
    and the exact halves of srdhm and rdbpot, for every shift, with multipliers near 0.5 and 1 and the
    extreme ones; the output zero point 128 keeps small results visible."""
    r = rng(3)
    bias, mult, shift = [], [], []
    for s in range(-31, 31):
        for m in [1 << 30, (1 << 30) + 1, 1518500250, I32_MAX, int(r.integers(1 << 30, 1 << 31))]:
            e = max(-s, 0)
            t = int(r.integers(-100, 100))
            target = t * 2.0 ** e + (2.0 ** (e - 1) if e > 0 else 0.5)
            if s > 0:
                target /= 2.0 ** s
            bias.append(int(np.clip(round(target * 2 ** 31 / m), I32_MIN, I32_MAX)))
            mult.append(m)
            shift.append(s)
    for acc in [I32_MIN, I32_MIN + 1, -1, 0, 1, I32_MAX - 1, I32_MAX, 1 << 30, -(1 << 30)]:
        for m in EXTREME_MULTS:
            for s in EXTREME_SHIFTS:
                bias.append(acc)
                mult.append(m)
                shift.append(s)
    bias, mult, shift = (np.array(v, np.int64).astype(np.int32) for v in (bias, mult, shift))
    n, deltas = len(bias), np.array([0, 1, -1, 2, -2, 100, -128, 127, 3])
    for k in (1, 6):
        w = i8(r, (n, k))
        w[:, 0] = 1
        a = np.full((len(deltas), k), 128, np.uint8)
        a[:, 0] = 128 + deltas
        packed = K.pack_qu8_conv(w, bias, 128, mult, shift, 128, isa=isa)
        y = np.empty((len(deltas), n), np.uint8)
        K.qu8_gemm(a, packed, y, threads=2)
        want = output(wrap32(bias.astype(np.int64)[None, :] + deltas[:, None]), mult, shift, 128)
        np.testing.assert_array_equal(y, want, err_msg=f"{isa} K={k}")


# ---- depthwise ------------------------------------------------------------------------------------

DW_CASES = [  # (N, H, W, C, multiplier, kernel, stride, dilation, pads)
    (1, 7, 8, 1, 1, (3, 3), (1, 1), (1, 1), [1, 1, 1, 1]),
    (2, 9, 7, 3, 1, (3, 3), (2, 2), (1, 1), [1, 1, 1, 1]),
    (1, 10, 9, 17, 1, (5, 5), (2, 2), (1, 1), [2, 2, 2, 2]),
    (1, 6, 6, 40, 1, (3, 3), (1, 1), (1, 1), [0, 0, 1, 1]),
    (1, 8, 8, 33, 1, (3, 3), (1, 1), (2, 2), [2, 2, 2, 2]),
    (1, 5, 12, 96, 1, (3, 3), (2, 1), (1, 1), [1, 1, 1, 1]),
    (1, 6, 5, 3, 2, (3, 3), (1, 1), (1, 1), [1, 1, 1, 1]),   # channel multiplier (scalar path)
    (1, 4, 4, 5, 3, (1, 1), (1, 1), (1, 1), [0, 0, 0, 0]),
    (1, 3, 3, 16, 1, (3, 3), (1, 1), (1, 1), [3, 3, 3, 3]),   # windows entirely in the padding
]


@pytest.mark.parametrize("isa", ISAS)
def test_qu8_depthwise_matches_numpy(isa):
    r = rng(4)
    for case, (n, h, wd, c, mult_c, kernel, stride, dil, pads) in enumerate(DW_CASES):
        oc = c * mult_c
        x_zp, y_zp = [0, 128, 255, 3, 77][case % 5], [128, 0, 255, 9][case % 4]
        qmin, qmax = [(0, 255), (128, 255), (10, 200), (0, 255)][case % 4]
        x, w = u8(r, (n, h, wd, c)), i8(r, (*kernel, oc))
        bias = None if case % 4 == 0 else r.integers(-10000, 10001, size=oc, dtype=np.int32)
        mult, shift = channel_scales(r, oc, np.sqrt(kernel[0] * kernel[1]) * 74 * 74)
        oh = out_size(h, kernel[0], stride[0], dil[0], pads[0], pads[2])
        ow = out_size(wd, kernel[1], stride[1], dil[1], pads[1], pads[3])
        y = np.empty((n, oh, ow, oc), np.uint8)
        K.qu8_depthwise_conv(x, w, bias, x_zp, mult, shift, y_zp, qmin, qmax, y, stride, dil, pads,
                             threads=1 + case % 2, isa=isa)
        xp = np.pad(x.astype(np.int64) - x_zp, ((0, 0), (pads[0], pads[2]), (pads[1], pads[3]), (0, 0)))
        xp = np.repeat(xp, mult_c, axis=3)  # output channel o reads input channel o // multiplier
        acc = np.zeros((n, oh, ow, oc), np.int64) + (0 if bias is None else bias.astype(np.int64))
        for ky, kx, v in windows(xp, *kernel, stride, dil, oh, ow):
            acc += v * w[ky, kx].astype(np.int64)
        np.testing.assert_array_equal(y, output(wrap32(acc), mult, shift, y_zp, qmin, qmax), err_msg=f"{isa} {case}")


def ref_depthwise(x, w, bias, x_zp, mult, shift, y_zp, qmin, qmax, stride, dil, pads, mult_c=1):
    n, h, wd, c = x.shape
    kh, kw, oc = w.shape
    oh = out_size(h, kh, stride[0], dil[0], pads[0], pads[2])
    ow = out_size(wd, kw, stride[1], dil[1], pads[1], pads[3])
    xp = np.pad(x.astype(np.int64) - x_zp, ((0, 0), (pads[0], pads[2]), (pads[1], pads[3]), (0, 0)))
    xp = np.repeat(xp, mult_c, axis=3)
    acc = np.zeros((n, oh, ow, oc), np.int64) + (0 if bias is None else bias.astype(np.int64))
    for ky, kx, v in windows(xp, kh, kw, stride, dil, oh, ow):
        acc += v * w[ky, kx].astype(np.int64)
    return output(wrap32(acc), mult, shift, y_zp, qmin, qmax)


def calibrated_scales(r, n: int, magnitude: float):
    """Per-channel (multiplier, shift) as calibrated networks have them (multiplier in [2^30, 2^31),
    right shifts): the blocks the x86 kernels requantize in fp32 (qu8_ukernels.h)."""
    mult = r.integers(1 << 30, 1 << 31, size=n, dtype=np.int64).astype(np.int32)
    base = int(np.clip(np.round(np.log2(64 / max(magnitude, 1.0))), -20, 0))
    return mult, np.clip(base + r.integers(-2, 3, size=n), -20, 0).astype(np.int32)


# (N, H, W, C, kernel, stride, dilation, pads): the geometries of the packed x86 kernels (3x3 stride
# 1 and 2 stream their columns; anything else interleaves segments in scratch), channel counts
# across their 64 / 32 / 16-wide blocks and tails, rows wide enough for their 8-, 4-, 2- and
# 1-pixel groups with and without padding columns.
DW_GEOMETRIES = [
    (1, 9, 37, 64, (3, 3), (1, 1), (1, 1), [1, 1, 1, 1]),
    (1, 8, 23, 144, (3, 3), (2, 2), (1, 1), [1, 1, 1, 1]),
    (2, 6, 19, 33, (3, 3), (1, 1), (1, 1), [0, 2, 1, 0]),      # asymmetric padding, 33 = 32 + 1
    (1, 7, 18, 17, (3, 3), (2, 2), (1, 1), [0, 0, 1, 1]),      # TF "same" stride 2
    (1, 11, 21, 96, (3, 3), (1, 2), (1, 1), [1, 1, 1, 1]),
    (1, 10, 17, 48, (3, 3), (2, 1), (1, 1), [1, 0, 1, 2]),
    (1, 9, 14, 100, (3, 3), (1, 1), (2, 2), [2, 2, 2, 2]),     # dilation: the scratch path
    (1, 12, 13, 40, (3, 3), (1, 1), (3, 1), [3, 1, 3, 1]),     # dilation along H only: streams
    (1, 12, 16, 80, (5, 5), (1, 1), (1, 1), [2, 2, 2, 2]),
    (1, 13, 15, 65, (5, 5), (2, 2), (1, 1), [2, 1, 2, 3]),
    (1, 9, 10, 7, (5, 5), (1, 1), (2, 2), [4, 4, 4, 4]),
    (1, 6, 9, 24, (3, 5), (1, 2), (1, 1), [1, 2, 1, 2]),       # rectangular kernels
    (1, 7, 8, 130, (5, 3), (2, 1), (1, 1), [2, 1, 2, 1]),
    (1, 5, 7, 3, (1, 1), (1, 1), (1, 1), [0, 0, 0, 0]),
    (1, 8, 9, 16, (7, 7), (3, 3), (1, 1), [3, 3, 3, 3]),       # stride 3, 7x7
    (1, 4, 4, 32, (3, 3), (1, 1), (1, 1), [3, 3, 3, 3]),       # windows entirely in the padding
    (1, 3, 40, 1, (3, 3), (1, 1), (1, 1), [1, 1, 1, 1]),       # one channel, a long row
    (1, 2, 2, 200, (3, 3), (2, 2), (1, 1), [1, 1, 1, 1]),      # one output pixel
    (1, 7, 7, 200, (3, 3), (1, 1), (1, 1), [1, 1, 1, 1]),      # few rows: channel slices on 2 threads
    (1, 14, 14, 72, (3, 3), (2, 2), (1, 1), [0, 0, 1, 1]),
]


@pytest.mark.parametrize("isa", ISAS)
def test_qu8_depthwise_geometries_match_numpy_and_scalar(isa):
    """Every geometry with calibrated scales (the fp32-requantized blocks) and with extreme ones
    (every 6th channel: the integer forms), against numpy and, byte for byte, the scalar level."""
    r = rng(9)
    for case, (n, h, wd, c, kernel, stride, dil, pads) in enumerate(DW_GEOMETRIES):
        for extreme in (False, True):
            x_zp, y_zp = [0, 128, 255, 3, 77][case % 5], [128, 0, 255, 9][(case + extreme) % 4]
            qmin, qmax = [(0, 255), (128, 255), (10, 200), (0, 255)][(case + extreme) % 4]
            x, w = u8(r, (n, h, wd, c)), i8(r, (*kernel, c))
            bias = None if case % 5 == 2 else r.integers(-20000, 20001, size=c, dtype=np.int32)
            magnitude = np.sqrt(kernel[0] * kernel[1]) * 74 * 74
            mult, shift = channel_scales(r, c, magnitude) if extreme else calibrated_scales(r, c, magnitude)
            want = ref_depthwise(x, w, bias, x_zp, mult, shift, y_zp, qmin, qmax, stride, dil, pads)
            plan = K.Qu8DepthwisePlan(w, bias, x_zp, mult, shift, y_zp, qmin, qmax, [n, h, wd, c], stride, dil,
                                      pads, isa=isa)
            assert plan.output_shape == list(want.shape)
            what = f"{isa} case {case} extreme={extreme} {plan.kernel_name}"
            got = np.empty(want.shape, np.uint8)
            plan.run(x, got, threads=1 + case % 2)
            np.testing.assert_array_equal(got, want, err_msg=what)
            scalar = np.empty(want.shape, np.uint8)
            K.Qu8DepthwisePlan(w, bias, x_zp, mult, shift, y_zp, qmin, qmax, [n, h, wd, c], stride, dil, pads,
                               isa="scalar").run(x, scalar)
            np.testing.assert_array_equal(got, scalar, err_msg=what)
            x2 = (255 - x).copy()  # the plan holds no input state
            plan.run(x2, got, threads=2)
            np.testing.assert_array_equal(
                got, ref_depthwise(x2, w, bias, x_zp, mult, shift, y_zp, qmin, qmax, stride, dil, pads), err_msg=what)


def edge_constants(r, shifts, mults):
    """(bias, mult, shift) per channel putting bias + d (small d) at srdhm's and rdbpot's exact halves
    (test_requantization_edges_through_the_gemm's construction)."""
    bias, mult, shift = [], [], []
    for s in shifts:
        for m in mults:
            e = max(-s, 0)
            t = int(r.integers(-100, 100))
            target = t * 2.0 ** e + (2.0 ** (e - 1) if e > 0 else 0.5)
            if s > 0:
                target /= 2.0 ** s
            # (multipliers <= 0 have no halves to aim at: the accumulator anywhere in int32)
            b = round(target * 2 ** 31 / m) if m > 0 else int(r.integers(I32_MIN, I32_MAX, endpoint=True))
            bias.append(int(np.clip(b, I32_MIN, I32_MAX)))
            mult.append(m)
            shift.append(s)
    return tuple(np.array(v, np.int64).astype(np.int32) for v in (bias, mult, shift))


@pytest.mark.parametrize("isa", ISAS)
def test_requantization_edges_through_the_depthwise(isa):
    """acc = bias + (x - x_zp) * 1 (the centre tap; the others weigh 0) at the exact halves, for
    blocks of calibrated constants (the fp32 form, whose near-step lanes retry in integers) and
    for every shift with extreme multipliers, at each channel of a 3x3 window and a 1x1 one."""
    r = rng(10)
    calibrated = edge_constants(r, range(-20, 1), [1 << 30, (1 << 30) + 1, 1518500250, I32_MAX,
                                                   int(r.integers(1 << 30, 1 << 31))])
    extreme = edge_constants(r, range(-31, 31), [1 << 30, 1518500250, I32_MAX, 0, 1, -1, I32_MIN])
    for bias, mult, shift in (calibrated, extreme):
        c = len(bias)
        deltas = np.array([0, 1, -1, 2, -2, 100, -128, 127, 3, -3, 5])
        x = (128 + np.broadcast_to(deltas[None, :, None, None], (1, len(deltas), 5, c))).astype(np.uint8)
        for kernel, pads in (((3, 3), [1, 1, 1, 1]), ((1, 1), [0, 0, 0, 0])):
            w = np.zeros((*kernel, c), np.int8)
            w[kernel[0] // 2, kernel[1] // 2] = 1
            y = np.empty((1, len(deltas), 5, c), np.uint8)
            K.Qu8DepthwisePlan(w, bias, 128, mult, shift, 128, 0, 255, list(x.shape), pads=pads, isa=isa).run(
                x, y, threads=2)
            # Inside the image every output sees only its own centre; along the padded border too.
            want = output(wrap32(bias.astype(np.int64)[None, None, None, :] + deltas[None, :, None, None]), mult,
                          shift, 128)
            np.testing.assert_array_equal(y, np.broadcast_to(want, y.shape), err_msg=f"{isa} {kernel} C={c}")


# ---- element-wise ---------------------------------------------------------------------------------

def b_operand(r, bc, rows, c):
    return u8(r, {"none": (rows, c), "channel": (c,), "scalar": (1,)}[bc])


def b_broadcast(b, bc, rows, c):
    return b.astype(np.int64).reshape({"none": (rows, c), "channel": (1, c), "scalar": (1, 1)}[bc])


@pytest.mark.parametrize("isa", ISAS)
def test_qu8_add_matches_numpy(isa):
    r = rng(5)
    case = 0
    for c in (1, 3, 8, 15, 16, 17, 33, 100):
        for bc in ("none", "channel", "scalar"):
            case += 1
            rows = 3
            a, b = u8(r, (rows, c)), b_operand(r, bc, rows, c)
            a_zp, b_zp, y_zp = [0, 128, 255, 3, 77][case % 5], [77, 0, 128][case % 3], [128, 0, 255, 9][case % 4]
            qmin, qmax = [(0, 255), (128, 255), (10, 200), (0, 255)][case % 4]
            am, bm, om = (int(v) for v in r.integers(1 << 30, 1 << 31, size=3))
            a_s, b_s, o_s = -1 - int(r.integers(3)), -1 - int(r.integers(3)), -18 - int(r.integers(3))
            if case % 5 == 4:  # left shifts: sa and sb saturate, and so does their sum
                a_s, b_s, am, o_s = EXTREME_SHIFTS[case % 8], EXTREME_SHIFTS[(case + 3) % 8], EXTREME_MULTS[case % 9], 0
            y = np.empty_like(a)
            K.qu8_add(a, a_zp, b, b_zp, y, y_zp, am, a_s, bm, b_s, om, o_s, qmin, qmax, bc, threads=1 + case % 2,
                      isa=isa)
            sa = requantize((a.astype(np.int64) - a_zp) << 20, am, a_s)
            sb = requantize((b_broadcast(b, bc, rows, c) - b_zp) << 20, bm, b_s)
            np.testing.assert_array_equal(y, output(sa + sb, om, o_s, y_zp, qmin, qmax), err_msg=f"{isa} {c} {bc}")


def add_case_multipliers(r, case):
    """TFLite Add constants (fixedpoint.add_multipliers) from random scales: output scales from 0.2x to
    3x the inputs' sum (the kernels' fp32 form takes most, the integer form the rest)."""
    from edgesdk.quant.fixedpoint import add_multipliers
    a_scale, b_scale = 10.0 ** r.uniform(-3, 0, 2)
    if case % 7 == 0:
        b_scale = a_scale  # equal scales: sa and sb on the same grid
    return add_multipliers(a_scale, b_scale, (a_scale + b_scale) * 10.0 ** r.uniform(-0.7, 0.5))


@pytest.mark.parametrize("isa", ISAS)
def test_qu8_add_every_byte_pair(isa):
    # All 65,536 (a, b) pairs for calibrated-looking constants: the fp32 form of the SIMD kernels
    # (requantization.h, qu8_add_fp) must give the integer form's bytes on every one, including the
    # lanes near a rounding step that it hands back.
    r = rng(15)
    a = np.repeat(np.arange(256, dtype=np.uint8), 256).reshape(256, 256)
    b = np.ascontiguousarray(a.T)
    fp32_cases = 0
    for case in range(24):
        am, a_s, bm, b_s, om, o_s = add_case_multipliers(r, case)
        fp32_cases += K.qu8_add_takes_fp32(am, a_s, bm, b_s, om, o_s)
        a_zp, b_zp, y_zp = (int(v) for v in r.integers(0, 256, 3))
        qmin, qmax = (y_zp, 255) if case % 3 == 0 else (0, 255)  # a fused Relu every third case
        y = np.empty_like(a)
        K.qu8_add(a, a_zp, b, b_zp, y, y_zp, am, a_s, bm, b_s, om, o_s, qmin, qmax, "none", threads=1 + case % 2,
                  isa=isa)
        sa = requantize((a.astype(np.int64) - a_zp) << 20, am, a_s)
        sb = requantize((b.astype(np.int64) - b_zp) << 20, bm, b_s)
        np.testing.assert_array_equal(y, output(sa + sb, om, o_s, y_zp, qmin, qmax), err_msg=f"{isa} case {case}")
    assert 12 <= fp32_cases < 24, fp32_cases  # both forms ran


@pytest.mark.parametrize("isa", ISAS)
def test_qu8_mul_matches_numpy(isa):
    r = rng(6)
    case = 0
    for c in (1, 3, 8, 15, 16, 17, 33, 100):
        for bc in ("none", "channel", "scalar"):
            case += 1
            rows = 4
            a, b = u8(r, (rows, c)), b_operand(r, bc, rows, c)
            a_zp, b_zp, y_zp = [0, 128, 255, 3, 77][case % 5], [77, 0, 128][case % 3], [128, 0, 255, 9][case % 4]
            qmin, qmax = [(0, 255), (128, 255), (10, 200), (0, 255)][case % 4]
            m, s = int(r.integers(1 << 30, 1 << 31)), -8 - int(r.integers(3))
            if case % 4 == 3:
                m, s = EXTREME_MULTS[case % 9], EXTREME_SHIFTS[case % 8]
            elif case % 4 == 1:
                m, s = 1 << 30, -2  # product / 8 exactly: rdbpot's halves
            y = np.empty_like(a)
            K.qu8_mul(a, a_zp, b, b_zp, y, y_zp, m, s, qmin, qmax, bc, threads=1 + case % 2, isa=isa)
            prod = (a.astype(np.int64) - a_zp) * (b_broadcast(b, bc, rows, c) - b_zp)
            np.testing.assert_array_equal(y, output(prod, m, s, y_zp, qmin, qmax), err_msg=f"{isa} {c} {bc}")


@pytest.mark.parametrize("isa", ISAS)
def test_qu8_requantize_matches_numpy(isa):
    r = rng(7)
    for case, s in enumerate(range(-31, 31)):
        x = u8(r, (3, 1 + case % 40))
        x_zp, y_zp = [0, 128, 255, 3, 77][case % 5], [128, 0, 255, 9][case % 4]
        qmin, qmax = [(0, 255), (128, 255), (10, 200), (0, 255)][case % 4]
        m = EXTREME_MULTS[case % 9] if case % 3 == 0 else int(r.integers(1 << 30, 1 << 31))
        # and the rounded-once form of the pools, concats and products: shift 0, multiplier < 2^30
        for m, s in [(m, s), (int(r.integers(1 << 22, 1 << 30)), 0)]:
            y = np.empty_like(x)
            K.qu8_requantize(x, x_zp, y, y_zp, m, s, qmin, qmax, threads=1 + case % 2, isa=isa)
            np.testing.assert_array_equal(y, output(x.astype(np.int64) - x_zp, m, s, y_zp, qmin, qmax),
                                          err_msg=f"{m} {s}")


# ---- concat and table lookup ----------------------------------------------------------------------

@pytest.mark.parametrize("isa", ISAS)
def test_qu8_concat_matches_the_reference_rescale(isa):
    from edgesdk.ops.quantize import rescale, rescale_params
    r = rng(11)
    y_scale, y_zp = np.float32(0.05), 131
    # (rows, widths): narrow parts of many rows, and one row wider than a task (pieces of a row)
    for case, (rows, widths) in enumerate([(1, [3]), (7, [1, 16, 33]), (40, [64, 5, 200, 2]), (1, [40000, 17]),
                                           (3, [20000, 1]), (2, [0, 9])]):
        xs = [u8(r, (rows, w)) for w in widths]
        params = [(np.float32(y_scale * s), int(z)) for s, z in
                  zip(r.choice([1.0, 0.31, 2.7, 1e-4, 300.0, 0.003], len(widths)), r.integers(0, 256, len(widths)))]
        params[0] = (y_scale, y_zp)  # one part a plain copy
        copies, mults, shifts = zip(*[rescale_params(s, z, y_scale, y_zp) for s, z in params])
        y = np.empty((rows, sum(widths)), np.uint8)
        K.qu8_concat(xs, [z for _, z in params], list(mults), list(shifts), list(copies), y, y_zp, threads=1 + case % 2,
                     isa=isa)
        want = np.concatenate([rescale(x, s, z, y_scale, y_zp, np.dtype(np.uint8)) for x, (s, z) in zip(xs, params)],
                              axis=1)
        np.testing.assert_array_equal(y, want, err_msg=f"case {case}")


@pytest.mark.parametrize("isa", ISAS)
def test_qu8_lut_matches_numpy(isa):
    r = rng(12)
    for n in list(range(0, 70)) + [255, 256, 1000, 70001]:
        table = u8(r, 256)
        x = np.concatenate([np.arange(256, dtype=np.uint8), u8(r, n)])[-n:] if n else np.zeros(0, np.uint8)
        x = np.ascontiguousarray(x)
        y = np.empty_like(x)
        K.qu8_lut(x, table, y, threads=1 + n % 2, isa=isa)
        np.testing.assert_array_equal(y, table[x], err_msg=f"n={n}")


def test_conv_plan_runs_one_group_of_a_wider_tensor():
    r = rng(13)
    x, w = u8(r, (1, 5, 6, 24)), i8(r, (4, 3, 3, 8))
    mult, shift = np.full(4, 1 << 30, np.int32), np.full(4, -6, np.int32)
    packed = K.pack_qu8_conv(w, None, 3, mult, shift, 7, 0, 255)
    plan = K.Qu8ConvPlan(packed, [1, 5, 6, 8], (3, 3), pads=[1, 1, 1, 1])
    y = np.zeros((1, 5, 6, 12), np.uint8)
    plan.run(x, y, 1, 16, 8)  # the third group of x into the last 4 channels of y
    want = np.empty((1, 5, 6, 4), np.uint8)
    K.Qu8ConvPlan(packed, [1, 5, 6, 8], (3, 3), pads=[1, 1, 1, 1]).run(np.ascontiguousarray(x[..., 16:]), want)
    np.testing.assert_array_equal(y[..., 8:], want)
    assert not y[..., :8].any()
    with pytest.raises(ValueError, match="x: expected shape"):
        plan.run(x, y, 1, 20, 0)
    with pytest.raises(ValueError, match="y: expected shape"):
        plan.run(x, y, 1, 16, 9)
    six = K.Qu8ConvPlan(K.pack_qu8_conv(i8(r, (4, 3, 3, 6)), None, 3, mult, shift, 7, 0, 255), [1, 5, 6, 6], (3, 3),
                      pads=[1, 1, 1, 1])
    with pytest.raises(ValueError, match="run past"):  # channels 18-23 of 24, read as two words: 18-25
        six.run(x, y, 1, 18, 0)


def test_concat_and_lut_refuse_bad_arguments():
    a = np.zeros((2, 3), np.uint8)
    with pytest.raises(ValueError, match="table: expected 256"):
        K.qu8_lut(a, np.zeros(255, np.uint8), np.empty_like(a))
    with pytest.raises(ValueError, match="equally long"):
        K.qu8_concat([a], [0, 1], [0], [0], [True], np.empty((2, 3), np.uint8), 0)
    with pytest.raises(ValueError, match="y's rows"):
        K.qu8_concat([a, np.zeros((3, 3), np.uint8)], [0, 0], [0, 0], [0, 0], [True, True], np.empty((2, 6), np.uint8), 0)


# ---- QuantizeLinear -------------------------------------------------------------------------------

def ref_quantize(x, scale, zp, dtype):
    """The cpu lowering's numpy pass (edgesdk/backends/cpu/lower/quantize.py), the spec of the kernel."""
    lo, hi = (0, 255) if dtype == np.uint8 else (-128, 127)
    with np.errstate(all="ignore"):
        t = np.divide(x, np.float32(scale))
        np.rint(t, out=t)
        np.add(t, np.float32(zp), out=t)
        np.nan_to_num(t, copy=False, nan=lo)
        np.clip(t, lo, hi, out=t)
    return t.astype(dtype)


def quantize_inputs(r, scale):
    """Random values over the codes and past them, and the special ones: NaNs (quiet, negative,
    signalling and payload bit patterns), infinities, signed zeros, subnormals, the float extremes,
    ties of the rounding (x / scale exactly k + 1/2, both parities, both signs) and their
    neighbours one ulp away."""
    bits = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFBFFFFF, 0x7FA5A5A5, 0x00000001, 0x80000001,
                     0x007FFFFF, 0x80000000, 0x7F7FFFFF, 0xFF7FFFFF, 0x00800000], np.uint32).view(np.float32)
    halves = (np.arange(-300, 300, dtype=np.float32) + np.float32(0.5)) * np.float32(scale)
    special = np.concatenate([bits, np.array([np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30, 2.0 ** 31, -(2.0 ** 31)],
                                             np.float32), halves, np.nextafter(halves, np.float32(np.inf)),
                              np.nextafter(halves, np.float32(-np.inf))])
    noise = (r.standard_normal(3000) * 200 * scale).astype(np.float32)
    return np.concatenate([special, noise]).astype(np.float32)


@pytest.mark.parametrize("isa", ISAS)
def test_quantize_linear_matches_the_numpy_lowering(isa):
    r = rng(11)
    name = K.quantize_linear_kernel(isa=isa)
    for dtype, zps in ((np.uint8, (0, 128, 255, 3)), (np.int8, (-128, 0, 127, -5))):
        for scale in (np.float32(0.5), np.float32(1 / 64), np.float32(0.0173), np.float32(3.7), np.float32(2e-5)):
            x = quantize_inputs(r, scale)
            r.shuffle(x)
            for zp in zps:
                want = ref_quantize(x, scale, zp, dtype)
                for size in (len(x), 1, 15, 16, 17, 31, 63, 64, 65, 100):
                    got = np.empty(size, dtype)
                    K.quantize_linear(x[:size], float(scale), float(zp), got, threads=1 + size % 2, isa=isa)
                    np.testing.assert_array_equal(got, want[:size], err_msg=f"{name} {dtype.__name__} {scale} {zp}")
                scalar = np.empty(len(x), dtype)
                K.quantize_linear(x, float(scale), float(zp), scalar, isa="scalar")
                got = np.empty(len(x), dtype)
                K.quantize_linear(x, float(scale), float(zp), got, threads=2, isa=isa)
                np.testing.assert_array_equal(got, scalar, err_msg=name)
    x = r.standard_normal((2, 3, 40, 41)).astype(np.float32)  # any shape, split across threads
    got = np.empty(x.shape, np.uint8)
    K.quantize_linear(x, 0.02, 128, got, threads=2, isa=isa)
    np.testing.assert_array_equal(got, ref_quantize(x, np.float32(0.02), 128, np.uint8))


# ---- DequantizeLinear -----------------------------------------------------------------------------

@pytest.mark.parametrize("isa", ISAS)
def test_dequantize_linear_matches_the_numpy_lowering(isa):
    # The kernel against the numpy pass it replaced (float32 difference, one multiply), every code,
    # every zero point kind and the tails of each vector width.
    name = K.dequantize_linear_kernel(isa=isa)
    assert name.startswith("qu8_dequantize")
    r = rng(16)
    for dtype, zps in ((np.uint8, (0, 128, 255, 3)), (np.int8, (-128, 0, 127, -5))):
        codes = np.concatenate([np.arange(256, dtype=np.uint8).view(dtype), r.integers(0, 256, 1000, np.uint8).view(dtype)])
        for scale in (np.float32(0.5), np.float32(0.0173), np.float32(3.7e-7), np.float32(1e30), np.float32(-2.5)):
            for zp in zps:
                want = np.subtract(codes, np.int32(zp), dtype=np.float32) * scale
                for size in (len(codes), 1, 7, 8, 15, 16, 17, 31, 33, 63, 64, 65):
                    got = np.full(size + 1, 7.0, np.float32)
                    K.dequantize_linear(codes[:size], float(scale), zp, got[:size], threads=1 + size % 2, isa=isa)
                    np.testing.assert_array_equal(got[:size], want[:size], err_msg=f"{name} {dtype.__name__} {scale} {zp}")
                    assert got[size] == 7.0  # nothing written past y
    with pytest.raises(ValueError, match="zero_point"):
        K.dequantize_linear(np.zeros(4, np.int8), 1.0, 200, np.empty(4, np.float32), isa=isa)
    with pytest.raises(TypeError, match="uint8 or int8"):
        K.dequantize_linear(np.zeros(4, np.int16), 1.0, 0, np.empty(4, np.float32), isa=isa)


@pytest.mark.parametrize("isa", ISAS)
def test_quantize_linear_into_nhwc_matches_quantize_then_transpose(isa):
    """quantize_linear_nhwc (a float NCHW input quantized for NHWC kernels): every channel count the
    interleave specializes (1-4) and a general one, pixel counts around its blocks, special values,
    both dtypes, 1-3 threads: byte for byte the NCHW codes, channels last."""
    r = rng(12)
    special = quantize_inputs(r, np.float32(0.0173))
    for case, (n, c, h, w) in enumerate([(1, 3, 224, 224), (2, 3, 5, 7), (1, 1, 9, 130), (1, 2, 64, 65),
                                         (1, 4, 33, 31), (2, 5, 3, 3), (1, 17, 40, 41), (1, 3, 1, 1)]):
        x = (r.standard_normal((n, c, h, w)) * 3).astype(np.float32)
        flat = x.reshape(-1)
        flat[: min(len(special), flat.size)] = special[: min(len(special), flat.size)]
        r.shuffle(flat)
        for dtype, zp in ((np.uint8, 128), (np.int8, -3)):
            want = ref_quantize(x, np.float32(0.0173), zp, dtype).transpose(0, 2, 3, 1)
            got = np.empty((n, h, w, c), dtype)
            K.quantize_linear_nhwc(x, 0.0173, zp, got, threads=1 + case % 3, isa=isa)
            np.testing.assert_array_equal(got, want, err_msg=f"{isa} {(n, c, h, w)} {dtype.__name__}")
    with pytest.raises(ValueError, match="y"):
        K.quantize_linear_nhwc(np.zeros((1, 3, 4, 4), np.float32), 0.1, 0, np.empty((1, 3, 4, 4), np.uint8))


def test_quantize_linear_checks_its_arguments():
    x = np.ones(4, np.float32)
    with pytest.raises(TypeError, match="x: expected dtype float32"):
        K.quantize_linear(x.astype(np.float64), 1.0, 0, np.empty(4, np.uint8))
    with pytest.raises(TypeError, match="y: expected dtype uint8 or int8"):
        K.quantize_linear(x, 1.0, 0, np.empty(4, np.int16))
    with pytest.raises(ValueError, match="y: expected shape"):
        K.quantize_linear(x, 1.0, 0, np.empty(5, np.uint8))
    with pytest.raises(ValueError, match="zero_point must be"):
        K.quantize_linear(x, 1.0, 200, np.empty(4, np.int8))
    with pytest.raises(ValueError, match="zero_point must be"):
        K.quantize_linear(x, 1.0, 2.5, np.empty(4, np.uint8))


# ---- pooling --------------------------------------------------------------------------------------

POOL_CASES = [  # (N, H, W, C, kernel, stride, dilation, pads)
    (1, 7, 7, 1, (3, 3), (2, 2), (1, 1), [1, 1, 1, 1]),
    (2, 8, 8, 3, (2, 2), (2, 2), (1, 1), [0, 0, 0, 0]),
    (1, 9, 9, 17, (3, 3), (2, 2), (1, 1), [0, 0, 1, 1]),
    (1, 5, 6, 33, (5, 5), (1, 1), (1, 1), [2, 2, 2, 2]),
    (1, 7, 7, 70, (3, 3), (1, 1), (2, 2), [2, 2, 2, 2]),
    (1, 2, 2, 16, (1, 1), (1, 1), (1, 1), [1, 1, 1, 1]),  # windows entirely in the padding
]


@pytest.mark.parametrize("isa", ISAS)
def test_qu8_pools_match_numpy(isa):
    r = rng(8)
    for case, (n, h, wd, c, kernel, stride, dil, pads) in enumerate(POOL_CASES):
        x = u8(r, (n, h, wd, c))
        oh = out_size(h, kernel[0], stride[0], dil[0], pads[0], pads[2])
        ow = out_size(wd, kernel[1], stride[1], dil[1], pads[1], pads[3])
        padding = ((0, 0), (pads[0], pads[2]), (pads[1], pads[3]), (0, 0))
        y = np.empty((n, oh, ow, c), np.uint8)
        K.qu8_maxpool(x, y, kernel, stride, dil, pads, threads=1 + case % 2, isa=isa)
        xp = np.pad(x.astype(np.int64), padding, constant_values=-1)  # padding never wins; all-padding -> 0
        want = np.max([v for _, _, v in windows(xp, *kernel, stride, dil, oh, ow)], axis=0)
        np.testing.assert_array_equal(y, np.maximum(want, 0).astype(np.uint8), err_msg=f"maxpool {isa} {case}")
        entries = kernel[0] * kernel[1] + 1
        for include_pad in (False, True):
            x_zp, y_zp = [0, 128, 255, 3, 77][case % 5], [128, 0, 255, 9][case % 4]
            qmin, qmax = [(0, 255), (128, 255), (10, 200), (0, 255)][(case + include_pad) % 4]
            mult = r.integers(1 << 30, 1 << 31, size=entries, dtype=np.int64).astype(np.int32)
            shift = np.array([0] + [-int(np.ceil(np.log2(e))) for e in range(1, entries)], np.int32)
            if case % 2:
                mult[:], shift[:] = 1 << 30, -1  # sum / 4 exactly: rdbpot's halves
            K.qu8_avgpool(x, x_zp, y, y_zp, mult, shift, qmin, qmax, kernel, stride, dil, pads, include_pad,
                          threads=1 + case % 2, isa=isa)
            views = windows(np.pad(x.astype(np.int64) - x_zp, padding), *kernel, stride, dil, oh, ow)
            acc = np.sum([v for _, _, v in views], axis=0)
            inside = np.sum([v for _, _, v in windows(np.pad(np.ones((n, h, wd, 1), np.int64), padding), *kernel,
                                                       stride, dil, oh, ow)], axis=0)
            count = np.full_like(inside, kernel[0] * kernel[1]) if include_pad else inside
            want = output(acc, mult[count], shift[count], y_zp, qmin, qmax)
            np.testing.assert_array_equal(y, want, err_msg=f"avgpool {isa} {case} include_pad={include_pad}")
    for case, (n, hw, c) in enumerate([(1, 49, 1280), (2, 13, 3), (2, 64, 70), (1, 1, 17)]):
        x = u8(r, (n, hw, c))
        x_zp, y_zp = [0, 128, 255, 3][case], [128, 0, 255, 9][case]
        m, s = int(r.integers(1 << 30, 1 << 31)), -int(np.ceil(np.log2(hw)))
        y = np.empty((n, c), np.uint8)
        K.qu8_global_avgpool(x, x_zp, y, y_zp, m, s, threads=2, isa=isa)
        np.testing.assert_array_equal(y, output((x.astype(np.int64) - x_zp).sum(axis=1), m, s, y_zp))


# ---- levels and argument checks -------------------------------------------------------------------

def test_each_level_packs_for_its_own_gemm():
    """Full-range weights run the level's qu8_igemm; weights whose pairs fit int16 the level's
    vpmaddubsw GEMM where it has one (qu8_igemm_narrow: avx2, avx512), else qu8_igemm too."""
    wide = np.full((3, 8), 127, np.int8)  # pairs of 127 + 127: past int16 with activations of 255
    narrow = np.array([[64, 64, -128, 0, 127, -128, 1, 127]] * 3, np.int8)  # every pair at the edge, inside
    ones = np.full(3, 1 << 30, np.int32)
    for isa in ISAS:
        names = K.kernel_names(isa)
        packed = K.pack_qu8_conv(wide, None, 0, ones, np.zeros(3, np.int32), 0, isa=isa)
        assert packed.isa == isa and packed.kernel_name == names["qu8_igemm"], packed
        packed = K.pack_qu8_conv(narrow, None, 0, ones, np.zeros(3, np.int32), 0, isa=isa)
        assert packed.kernel_name == names.get("qu8_igemm_narrow", names["qu8_igemm"]), packed
    w = wide
    best = {"avx512amx": "qu8_igemm_16x16c4__avx512amx", "avx512vnni": "qu8_igemm_8x16c4__avx512vnni"}
    for isa, name in best.items():  # the default is the widest level's GEMM
        if isa in ISAS:
            assert K.pack_qu8_conv(w, None, 0, ones, np.zeros(3, np.int32), 0).kernel_name == name
            break


def test_bad_arguments_raise_typed_errors():
    w = np.ones((4, 3, 3, 2), np.int8)
    m, s = np.full(4, 1 << 30, np.int32), np.full(4, -3, np.int32)
    with pytest.raises(TypeError, match="w: expected dtype int8"):
        K.pack_qu8_conv(w.astype(np.uint8), None, 0, m, s, 0)
    with pytest.raises(TypeError, match="bias: expected dtype int32"):
        K.pack_qu8_conv(w, np.zeros(4, np.int64), 0, m, s, 0)
    with pytest.raises(TypeError, match="multiplier: expected dtype int32"):
        K.pack_qu8_conv(w, None, 0, m.astype(np.float32), s, 0)
    with pytest.raises(ValueError, match="shift: expected shape"):
        K.pack_qu8_conv(w, None, 0, m, s[:3], 0)
    with pytest.raises(ValueError, match="shift must be in"):
        K.pack_qu8_conv(w, None, 0, m, np.full(4, 31, np.int32), 0)
    with pytest.raises(ValueError, match="input_zero_point must be in"):
        K.pack_qu8_conv(w, None, 256, m, s, 0)
    with pytest.raises(ValueError, match="output_zero_point must be in"):
        K.pack_qu8_conv(w, None, 0, m, s, -1)
    with pytest.raises(ValueError, match="qmin must be <= qmax"):
        K.pack_qu8_conv(w, None, 0, m, s, 0, 200, 100)
    with pytest.raises(ValueError, match="C-contiguous"):
        K.pack_qu8_conv(np.ones((2, 4, 3, 3), np.int8).transpose(1, 2, 3, 0), None, 0, m, s, 0)
    packed = K.pack_qu8_conv(w, None, 0, m, s, 0)
    with pytest.raises(ValueError, match="packed for a 3x3 kernel"):
        K.Qu8ConvPlan(packed, [1, 5, 5, 2], (1, 1))
    with pytest.raises(ValueError, match="packed for a convolution kernel"):
        K.qu8_gemm(np.ones((2, 18), np.uint8), packed, np.empty((2, 4), np.uint8))
    plan = K.Qu8ConvPlan(packed, [1, 5, 5, 2], (3, 3), pads=[1, 1, 1, 1])
    with pytest.raises(TypeError, match="x: expected dtype uint8"):
        plan.run(np.ones((1, 5, 5, 2), np.float32), np.empty((1, 5, 5, 4), np.uint8))
    with pytest.raises(ValueError, match="y: expected shape"):
        plan.run(np.ones((1, 5, 5, 2), np.uint8), np.empty((1, 5, 5, 3), np.uint8))
    with pytest.raises(ValueError, match="y: must be writable"):
        y = np.empty((1, 5, 5, 4), np.uint8)
        y.flags.writeable = False
        plan.run(np.ones((1, 5, 5, 2), np.uint8), y)
    gemm_packed = K.pack_qu8_conv(np.ones((4, 6), np.int8), None, 0, m, s, 0)
    with pytest.raises(ValueError, match="a must be"):
        K.qu8_gemm(np.ones((2, 5), np.uint8), gemm_packed, np.empty((2, 4), np.uint8))
    a = np.ones((3, 5), np.uint8)
    with pytest.raises(ValueError, match="broadcast must be"):
        K.qu8_add(a, 0, a, 0, np.empty_like(a), 0, 1 << 30, -1, 1 << 30, -1, 1 << 30, -20, broadcast="row")
    with pytest.raises(ValueError, match="b: expected shape"):
        K.qu8_add(a, 0, np.ones(4, np.uint8), 0, np.empty_like(a), 0, 1 << 30, -1, 1 << 30, -1, 1 << 30, -20,
                  broadcast="channel")
    with pytest.raises(ValueError, match="a_mult must fit int32"):
        K.qu8_add(a, 0, a, 0, np.empty_like(a), 0, 1 << 31, -1, 1 << 30, -1, 1 << 30, -20)
    with pytest.raises(ValueError, match="out_shift must be in"):
        K.qu8_add(a, 0, a, 0, np.empty_like(a), 0, 1 << 30, -1, 1 << 30, -1, 1 << 30, -32)
    with pytest.raises(TypeError, match="b: expected dtype uint8"):
        K.qu8_mul(a, 0, a.astype(np.int8), 0, np.empty_like(a), 0, 1 << 30, -8)
    with pytest.raises(ValueError, match="y_zp must be in"):
        K.qu8_mul(a, 0, a, 0, np.empty_like(a), 300, 1 << 30, -8)
    with pytest.raises(ValueError, match="mult: expected shape"):
        K.qu8_avgpool(np.ones((1, 4, 4, 2), np.uint8), 0, np.empty((1, 2, 2, 2), np.uint8), 0,
                      np.ones(9, np.int32), np.zeros(9, np.int32), 0, 255, (3, 3))
    with pytest.raises(ValueError, match="x must be \\(N, HW, C\\)"):
        K.qu8_global_avgpool(np.ones((1, 4, 4, 2), np.uint8), 0, np.empty((1, 2), np.uint8), 0, 1 << 30, -4)
    with pytest.raises(ValueError, match="w's last dim must be a multiple of C"):
        K.qu8_depthwise_conv(np.ones((1, 4, 4, 3), np.uint8), np.ones((3, 3, 4), np.int8), None, 0,
                             np.ones(4, np.int32), np.zeros(4, np.int32), 0, 0, 255, np.empty((1, 2, 2, 4), np.uint8))
    with pytest.raises(ValueError, match="w's last dim must be a multiple of C"):
        K.Qu8DepthwisePlan(np.ones((3, 3, 4), np.int8), None, 0, np.ones(4, np.int32), np.zeros(4, np.int32), 0, 0, 255,
                           [1, 4, 4, 3])
    dw_plan = K.Qu8DepthwisePlan(np.ones((3, 3, 4), np.int8), None, 0, np.ones(4, np.int32), np.zeros(4, np.int32), 0, 0,
                                 255, [1, 4, 4, 4], pads=[1, 1, 1, 1])
    assert dw_plan.output_shape == [1, 4, 4, 4]
    with pytest.raises(ValueError, match="x: expected shape"):
        dw_plan.run(np.ones((1, 4, 5, 4), np.uint8), np.empty((1, 4, 4, 4), np.uint8))
    with pytest.raises(ValueError, match="shift must be in"):
        K.Qu8DepthwisePlan(np.ones((3, 3, 4), np.int8), None, 0, np.ones(4, np.int32), np.full(4, -32, np.int32), 0, 0,
                           255, [1, 4, 4, 4])
    with pytest.raises(ValueError, match="x_zp must be in"):
        K.qu8_requantize(a, -3, np.empty_like(a), 0, 1 << 30, -1)
    with pytest.raises(ValueError, match="unknown ISA"):
        K.qu8_requantize(a, 0, np.empty_like(a), 0, 1 << 30, -1, isa="sse9")
