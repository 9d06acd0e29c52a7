// gemmlowp requantization, the scalar definition every qu8 kernel reproduces bit for bit
// (ukernels.h, "Quantized uint8"). TFLite's QuantizeMultiplier convention: real scale =
// multiplier * 2^(shift - 31), multiplier in [2^30, 2^31) or 0, shift in [-31, 30], positive shift
// = left shift; the formulas below are defined (and the kernels agree) for any int32 multiplier.
// Everything here is `static inline` (common.h's ODR rule): SIMD files use it for their tails.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/ukernels.h"

namespace edgesdk::kernels {

constexpr int32_t kInt32Min = INT32_MIN, kInt32Max = INT32_MAX;

// gemmlowp SaturatingRoundingDoublingHighMul: round(a * b / 2^31), halves towards +infinity
// (the nudge 1 - 2^30 for negative products and C++'s truncating division together make
// floor((a*b + 2^30) / 2^31): what x86's 64-bit products plus 2^30, shifted right by 31, and
// NEON's SQRDMULH compute). Only INT32_MIN * INT32_MIN overflows; it saturates.
static inline int32_t qu8_srdhm(int32_t a, int32_t b) {
  if (a == kInt32Min && b == kInt32Min) return kInt32Max;
  const int64_t ab = static_cast<int64_t>(a) * b;
  const int64_t nudge = ab >= 0 ? (int64_t{1} << 30) : (1 - (int64_t{1} << 30));
  return static_cast<int32_t>((ab + nudge) / (int64_t{1} << 31));
}

// gemmlowp RoundingDivideByPOT: x / 2^e rounded to nearest, halves away from zero; 0 <= e <= 31.
static inline int32_t qu8_rdbpot(int32_t x, int e) {
  const int32_t mask = static_cast<int32_t>((int64_t{1} << e) - 1);
  const int32_t rem = x & mask;
  const int32_t threshold = (mask >> 1) + (x < 0 ? 1 : 0);
  return (x >> e) + (rem > threshold ? 1 : 0);
}

// acc * multiplier * 2^(shift - 31): the left part of the shift saturates to int32 first.
static inline int32_t qu8_requantize(int32_t acc, int32_t multiplier, int32_t shift) {
  const int left = shift > 0 ? shift : 0, right = shift > 0 ? 0 : -shift;
  const int64_t shifted = static_cast<int64_t>(acc) * (int64_t{1} << left);  // << without signed-shift UB
  const int32_t x = static_cast<int32_t>(shifted < kInt32Min ? kInt32Min : shifted > kInt32Max ? kInt32Max : shifted);
  return qu8_rdbpot(qu8_srdhm(x, multiplier), right);
}

// The output byte of a requantized value: + zero point (exactly, in 64 bits), clamped to [qmin, qmax].
static inline uint8_t qu8_clamp_output(int32_t requantized, const Qu8Output& out) {
  const int64_t v = static_cast<int64_t>(requantized) + out.zero_point;
  return static_cast<uint8_t>(v < out.qmin ? out.qmin : v > out.qmax ? out.qmax : v);
}

// The precomputed form the kernels use (ukernels.h, Qu8Requant).
static inline Qu8Requant qu8_requant_of(int32_t multiplier, int32_t shift) {
  Qu8Requant r;
  r.multiplier = multiplier;
  r.left_shift = shift > 0 ? shift : 0;
  r.right_shift = shift > 0 ? 0 : -shift;
  r.rounding_mask = static_cast<int32_t>((int64_t{1} << r.right_shift) - 1);
  r.rounding_threshold = r.rounding_mask >> 1;
  return r;
}

// qu8_requantize from the precomputed form (the same arithmetic; scalar tails of SIMD kernels).
static inline int32_t qu8_requantize(int32_t acc, const Qu8Requant& r) {
  const int64_t shifted = static_cast<int64_t>(acc) * (int64_t{1} << r.left_shift);
  const int32_t x = static_cast<int32_t>(shifted < kInt32Min ? kInt32Min : shifted > kInt32Max ? kInt32Max : shifted);
  return qu8_rdbpot(qu8_srdhm(x, r.multiplier), r.right_shift);
}

// Channel j of a kQu8RqRows x count table.
static inline Qu8Requant qu8_requant_at(const int32_t* rq, size_t count, size_t j) {
  return Qu8Requant{rq[kQu8RqMultiplier * count + j], rq[kQu8RqLeft * count + j], rq[kQu8RqRight * count + j],
                    rq[kQu8RqMask * count + j], rq[kQu8RqThreshold * count + j]};
}

// The fp32 form of requantize (qu8_avx512.inl, RqMode::Fp, where the proof is): scale m * 2^(-20-e)
// with m rounded to the nearest float (ties to even: done here in integers, so the result does
// not depend on the caller's rounding mode), offsets 1024 +- 2^(10-e) (1024 for e = 0). The form
// applies to m > 0, no left shift and e <= 20; elsewhere scale is 0, which the kernels test.
struct Qu8FpRequant {
  float scale, offset_pos, offset_neg;
};
static inline Qu8FpRequant qu8_fp_requant(const Qu8Requant& r) {
  if (r.multiplier <= 0 || r.left_shift != 0 || r.right_shift > 20) return Qu8FpRequant{0.0f, 1024.0f, 1024.0f};
  const uint32_t m = static_cast<uint32_t>(r.multiplier);
  int exponent = 0;  // bits dropped to keep 24 significant ones
  while ((m >> exponent) >= (uint32_t{1} << 24)) ++exponent;
  uint32_t q = m >> exponent;
  if (exponent > 0) {
    const uint32_t dropped = m & ((uint32_t{1} << exponent) - 1), half = uint32_t{1} << (exponent - 1);
    if (dropped > half || (dropped == half && (q & 1u) != 0)) ++q;  // q <= 2^24: still exact as a float
  }
  const float scale = std::ldexp(static_cast<float>(q), exponent - 20 - r.right_shift);
  const float half = r.right_shift > 0 ? std::ldexp(1.0f, 10 - r.right_shift) : 0.0f;
  return Qu8FpRequant{scale, 1024.0f + half, 1024.0f - half};
}

// The fp32 form of the quantized Add (qu8_add, TFLite's arithmetic: sa = requantize((a - a_zp) << 20,
// a_rq), sb likewise, r = requantize(sa + sb, out_rq)), for the SIMD kernels: three 64-bit
// requantizations per lane become one multiply, one FMA, one add and a conversion. Why it is exact:
//   - The output step is the Fp form's (qu8_avx512.inl, RqMode::Fp): with m_o > 0, no left shift
//     and e_o >= 1, r = floor(u + d), u = v * m_o / 2^(31+e_o), v = sa + sb, d = 1/2 + 2^(-1-e_o)
//     minus 2^(-e_o) when v < 0. In units of 2^-11: V = 2048 (u + d).
//   - With no left shifts and multipliers > 0, sa is (a - a_zp) * m_a / 2^(11+e_a) rounded twice
//     (srdhm on a value whose low 20 bits are 0, then rdbpot): |sa - that| <= 1, likewise sb, so
//     replacing v by the linear x_a * S_a + x_b * S_b (x = input - zero point, |x| <= 255,
//     S_a = m_a m_o 2^(-31-e_a-e_o), in V's units) moves V by at most 2^(12-e_o). v never
//     saturates (|sa|, |sb| < 2^28).
//   - fp32: S_a and S_b converted here (relative error < 2^-23 in any rounding mode), x exact,
//     then t = fma(x_b, S_b, x_a * S_a) and V' = t + D (D = 2048 d, exact for e_o <= 23), each
//     rounded to nearest (the kernels make sure): |V' - V| < 2^(12-e_o) + (4.001 (M_a + M_b) +
//     1025) 2^-24 with M = 255 S. Where
//     that bound is < 1/2 (checked here, per call), w = round(V') with w mod 2048 != 0 puts V
//     strictly between the same two multiples of 2048 as w, so r = w >> 11; lanes with
//     w mod 2048 = 0 (about one in 2048) take the integer form.
//   - d follows the sign of t, not of v: where they differ, |u| is below the error bound, and
//     both offsets give r = 0 with V' near 1024, far from a step.
// Calibrated adds (output scale within a few times the inputs') pass; others keep the integer form.
struct Qu8AddFp {
  float scale_a, scale_b, offset_pos, offset_neg;
};
static inline bool qu8_add_fp(const Qu8BinaryArgs& args, Qu8AddFp* f) {
  const Qu8Requant &ra = args.a_rq, &rb = args.b_rq, &ro = args.out_rq;
  if (ra.left_shift != 0 || rb.left_shift != 0 || ro.left_shift != 0) return false;
  if (ra.multiplier <= 0 || rb.multiplier <= 0 || ro.multiplier <= 0) return false;
  const int eo = ro.right_shift;
  if (eo < 1 || eo > 23) return false;
  const double mo = ro.multiplier;
  f->scale_a = static_cast<float>(std::ldexp(ra.multiplier * mo, -31 - ra.right_shift - eo));
  f->scale_b = static_cast<float>(std::ldexp(rb.multiplier * mo, -31 - rb.right_shift - eo));
  const double bound = std::ldexp(1.0, 12 - eo) +
                       std::ldexp(4.001 * 255.0 * (double{f->scale_a} + f->scale_b) + 1025.0, -24);
  if (!(bound < 0.5)) return false;
  const float half = std::ldexp(1.0f, 10 - eo);
  f->offset_pos = 1024.0f + half;
  f->offset_neg = 1024.0f - half;
  return true;
}

static inline int32_t qu8_float_bits(float v) {
  int32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return bits;
}
static inline float qu8_float_of(int32_t bits) {
  float v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

// Writes channel j of a kQu8RqRows x count table.
static inline void qu8_set_requant(int32_t* rq, size_t count, size_t j, const Qu8Requant& r) {
  rq[kQu8RqMultiplier * count + j] = r.multiplier;
  rq[kQu8RqLeft * count + j] = r.left_shift;
  rq[kQu8RqRight * count + j] = r.right_shift;
  rq[kQu8RqMask * count + j] = r.rounding_mask;
  rq[kQu8RqThreshold * count + j] = r.rounding_threshold;
  const Qu8FpRequant f = qu8_fp_requant(r);
  rq[kQu8RqFpScale * count + j] = qu8_float_bits(f.scale);
  rq[kQu8RqFpOffsetPos * count + j] = qu8_float_bits(f.offset_pos);
  rq[kQu8RqFpOffsetNeg * count + j] = qu8_float_bits(f.offset_neg);
}

// int32 addition modulo 2^32 (the accumulators' arithmetic; signed overflow would be UB).
static inline int32_t qu8_wrap_add(int32_t a, int32_t b) {
  return static_cast<int32_t>(static_cast<uint32_t>(a) + static_cast<uint32_t>(b));
}

}  // namespace edgesdk::kernels
