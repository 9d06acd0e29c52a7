"""Integer requantization as gemmlowp, TFLite and QNNPACK define it: the bit-exact oracle.

A real multiplier M (input scale x weight scale / output scale) is held as an int32 ``multiplier``
in [2^30, 2^31) and a power-of-two ``shift`` (TFLite's QuantizeMultiplier: M = multiplier *
2^(shift - 31), a positive shift shifting left), so that requantizing an int32 accumulator needs
no floating point:

    requantize(acc) = RoundingDivideByPOT(SaturatingRoundingDoublingHighMul(acc << left, multiplier), right)

Ops whose accumulators are small (a concat's rescale, average pools, Mul) take the same formula
with the right shift folded into a smaller multiplier (:func:`quantize_multiplier_round_once`),
so that it rounds once.

The C++ kernels (cpu_native/src/kernels, the ``qu8_*`` families) implement exactly these
formulas; the numpy versions here are what the reference backend runs and what the kernel tests
compare with, so they are written in int64 numpy arithmetic that cannot wrap.
"""
from __future__ import annotations

import math

import numpy as np

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
# TFLite's quantized Add shifts both (x - zero_point) operands left by 20 before rescaling them
# to a common scale: 8-bit differences keep 20 fractional bits through two roundings.
ADD_LEFT_SHIFT = 20


def quantize_multiplier(scale: float) -> tuple[int, int]:
    """(multiplier, shift) with scale == multiplier * 2**(shift - 31), multiplier in [2^30, 2^31),
    shift in [-31, 30]; (0, 0) for a scale below 2^-32 (as TFLite). Raises ValueError for a
    negative, non-finite or too large (>= 2^30) scale."""
    scale = float(scale)
    if not math.isfinite(scale) or scale < 0:
        raise ValueError(f"requantization scale {scale} is not a finite non-negative number")
    if scale == 0.0:
        return 0, 0
    mantissa, exponent = math.frexp(scale)  # scale = mantissa * 2**exponent, mantissa in [0.5, 1)
    q = round(mantissa * (1 << 31))
    if q == 1 << 31:  # the mantissa rounded up to 1.0
        q //= 2
        exponent += 1
    if exponent < -31:  # beyond a 31-bit right shift: every int32 accumulator requantizes to 0 or +-1
        return 0, 0
    if exponent > 30:
        raise ValueError(f"requantization scale {scale} is too large (at least 2^30)")
    return int(q), int(exponent)


# Below this scale the right shift is at least 8: the second rounding's bias is under 2^-9 of an
# output step, and folding the shift in would leave the multiplier fewer than 23 significant bits.
ROUND_ONCE_MIN_SCALE = 2.0 ** -8


def quantize_multiplier_round_once(scale: float) -> tuple[int, int]:
    """(multiplier, shift) of ``scale`` for small accumulators (8-bit codes, their sums over a
    window, their products): requantize() rounds once. quantize_multiplier's form rounds twice
    where its shift is negative (srdhm to an integer, then the right shift), and an 8-bit value
    rescaled by 0.25-0.5 lands on the first rounding's half steps often enough that the second,
    halves away from zero, biases the output by up to a quarter step: DenseNet-121's concats and
    2x2 average pools drifted every feature upwards (28.5 dB against fp32; 31.0 with one rounding).
    Here a scale in [2^-8, 1/2) keeps shift 0 and multiplier round(scale * 2^31) (23-30
    significant bits): srdhm's rounding is the only one. Elsewhere as quantize_multiplier."""
    multiplier, shift = quantize_multiplier(scale)
    if shift >= 0 or float(scale) < ROUND_ONCE_MIN_SCALE:
        return multiplier, shift
    return int(round(float(scale) * (1 << 31))), 0


def quantize_multipliers(scales: np.ndarray, round_once: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel :func:`quantize_multiplier` (or :func:`quantize_multiplier_round_once`) as two
    int32 arrays."""
    form = quantize_multiplier_round_once if round_once else quantize_multiplier
    pairs = [form(s) for s in np.asarray(scales, dtype=np.float64).reshape(-1)]
    mult = np.array([p[0] for p in pairs], dtype=np.int32)
    shift = np.array([p[1] for p in pairs], dtype=np.int32)
    return mult, shift


def srdhm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """gemmlowp SaturatingRoundingDoublingHighMul of int32 values (int64 arrays in and out)."""
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    ab = a * b
    nudge = np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    total = ab + nudge
    # C++ division truncates toward zero; numpy's // floors.
    quotient = np.where(total >= 0, total >> 31, -((-total) >> 31))
    overflow = (a == INT32_MIN) & (b == INT32_MIN)
    return np.where(overflow, INT32_MAX, quotient)


def rdbpot(x: np.ndarray, exponent: np.ndarray) -> np.ndarray:
    """gemmlowp RoundingDivideByPOT: x / 2^exponent rounded to nearest, ties away from zero."""
    x = np.asarray(x, dtype=np.int64)
    e = np.asarray(exponent, dtype=np.int64)
    mask = (np.int64(1) << e) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> e) + (remainder > threshold)


def requantize(acc: np.ndarray, multiplier: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """TFLite MultiplyByQuantizedMultiplier of int32 accumulators (broadcasting; int64 result).
    The left shift saturates to int32, as the kernels do."""
    acc = np.asarray(acc, dtype=np.int64)
    shift = np.asarray(shift, dtype=np.int64)
    left = np.maximum(shift, 0)
    right = np.maximum(-shift, 0)
    shifted = np.clip(acc << left, INT32_MIN, INT32_MAX)
    return rdbpot(srdhm(shifted, multiplier), right)


def requantize_to(acc: np.ndarray, multiplier: np.ndarray, shift: np.ndarray, zero_point: int,
                  qmin: int, qmax: int, dtype: np.dtype) -> np.ndarray:
    """The 8-bit output: clamp(requantize(acc) + zero_point, qmin, qmax) as ``dtype``."""
    y = requantize(acc, multiplier, shift) + int(zero_point)
    return np.clip(y, qmin, qmax).astype(dtype)


def add_multipliers(a_scale: float, b_scale: float, y_scale: float) -> tuple[int, int, int, int, int, int]:
    """(a_mult, a_shift, b_mult, b_shift, out_mult, out_shift) of TFLite's quantized Add: both
    inputs rescaled to twice the larger input scale, then to the output."""
    twice_max = 2.0 * max(float(a_scale), float(b_scale))
    a_m, a_s = quantize_multiplier(float(a_scale) / twice_max)
    b_m, b_s = quantize_multiplier(float(b_scale) / twice_max)
    o_m, o_s = quantize_multiplier(twice_max / ((1 << ADD_LEFT_SHIFT) * float(y_scale)))
    return a_m, a_s, b_m, b_s, o_m, o_s


def quantized_add(a: np.ndarray, a_zp: int, b: np.ndarray, b_zp: int, y_zp: int,
                  mults: tuple[int, int, int, int, int, int], qmin: int, qmax: int, dtype: np.dtype) -> np.ndarray:
    """TFLite's quantized Add (reference_ops::Add, left shift 20) on 8-bit arrays (broadcasting)."""
    a_m, a_s, b_m, b_s, o_m, o_s = mults
    sa = requantize((np.asarray(a, np.int64) - a_zp) << ADD_LEFT_SHIFT, a_m, a_s)
    sb = requantize((np.asarray(b, np.int64) - b_zp) << ADD_LEFT_SHIFT, b_m, b_s)
    return requantize_to(np.clip(sa + sb, INT32_MIN, INT32_MAX), o_m, o_s, y_zp, qmin, qmax, dtype)
