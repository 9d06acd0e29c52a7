// The AVX2-width qu8 GEMM loop and depthwise convolution, templated on how a step multiplies:
// included by qu8_avx2.cc (avx2 level: vpmaddwd / vpmaddubsw) and qu8_avxvnni.cc (avxvnni level:
// AVX-VNNI's ymm vpdpbusd), each compiled with its own ISA flags, so the shared code is written once
// and each level instantiates it with its own instructions. Not a standalone header.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/qu8_ukernels.h"
#include "kernels/requantization.h"
#include "kernels/ukernels.h"

namespace edgesdk::kernels {
namespace {

static_assert(kAvx2Qu8NR == 16, "two ymm of int32 per row");

// A channel block's constants (ukernels.h, Qu8Requant), one lane per channel.
struct RqVec {
  __m256i mult, mult_odd, left, right, mask, thr;
  bool any_left;  // some lane shifts left: only then the saturating left shift runs
};

RqVec rq_finish(RqVec q) {
  q.mult_odd = _mm256_srli_epi64(q.mult, 32);  // odd lanes' multipliers where vpmuldq reads them
  q.any_left = !_mm256_testz_si256(q.left, q.left);
  return q;
}

__m256i load8_i32(const int32_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// Lanes [0, 8) of a kQu8RqRows x count table from channel j.
RqVec rq_load(const int32_t* rq, size_t count, size_t j) {
  RqVec q;
  q.mult = load8_i32(rq + kQu8RqMultiplier * count + j);
  q.left = load8_i32(rq + kQu8RqLeft * count + j);
  q.right = load8_i32(rq + kQu8RqRight * count + j);
  q.mask = load8_i32(rq + kQu8RqMask * count + j);
  q.thr = load8_i32(rq + kQu8RqThreshold * count + j);
  return rq_finish(q);
}

// requantize(x) of requantization.h, lane by lane (the AVX-512 version, qu8_avx512.inl, says how):
// saturating left shift; srdhm from vpmuldq's 64-bit products of the even lanes and, after a 32-bit
// shift, the odd ones (bits 31..62 of product + 2^30; INT32_MIN * INT32_MIN, the one overflow, reads
// INT32_MIN and becomes INT32_MAX); rdbpot as (y >> e) + ((y & mask) > (mask >> 1) + (y < 0)).
static inline __m256i requantize(__m256i x, const RqVec& q) {
  if (q.any_left) {
    const __m256i shifted = _mm256_sllv_epi32(x, q.left);
    const __m256i kept = _mm256_cmpeq_epi32(_mm256_srav_epi32(shifted, q.left), x);
    const __m256i saturated = _mm256_xor_si256(_mm256_srai_epi32(x, 31), _mm256_set1_epi32(0x7FFFFFFF));
    x = _mm256_blendv_epi8(saturated, shifted, kept);
  }
  const __m256i nudge = _mm256_set1_epi64x(int64_t{1} << 30);
  __m256i even = _mm256_add_epi64(_mm256_mul_epi32(x, q.mult), nudge);
  __m256i odd = _mm256_add_epi64(_mm256_mul_epi32(_mm256_srli_epi64(x, 32), q.mult_odd), nudge);
  even = _mm256_srli_epi64(even, 31);
  odd = _mm256_add_epi64(odd, odd);
  __m256i y = _mm256_blend_epi32(even, odd, 0xAA);
  y = _mm256_add_epi32(y, _mm256_cmpeq_epi32(y, _mm256_set1_epi32(INT32_MIN)));
  const __m256i rem = _mm256_and_si256(y, q.mask);
  const __m256i thr = _mm256_sub_epi32(q.thr, _mm256_srai_epi32(y, 31));
  return _mm256_sub_epi32(_mm256_srav_epi32(y, q.right), _mm256_cmpgt_epi32(rem, thr));
}

// The fp32 form of requantize (qu8_avx512.inl, RqMode::Fp, says why it is exact), for lanes with no
// left shift, multiplier > 0 and right shift e <= 20: V = x * m * 2^(-20-e) + (1024 +- 2^(10-e)),
// offset by the sign of x, in one FMA; w = round(V); r = w >> 11 unless some lane has w mod 2048 = 0
// (then the caller redoes the vector with requantize). AVX2 has no embedded rounding: the
// conversions and the FMA round as MXCSR says, so callers take this form only when it rounds to
// nearest (fp_rounding_ok); subnormals never arise (|scale| >= 2^-10, x integer).
struct FpRq {
  __m256 scale, offset_pos, offset_neg;
};

bool fp_rounding_ok() { return (_mm_getcsr() & 0x6000u) == 0; }

// kAnySign = false: every lane takes the non-negative offset, right where the output clamps at or
// above its zero point (qu8_avx512.inl's requantize_fp says why).
template <bool kAnySign = true>
static inline __m256i requantize_fp(__m256i x, const FpRq& q, int* retry) {
  const __m256 offset = kAnySign ? _mm256_blendv_ps(q.offset_pos, q.offset_neg, _mm256_castsi256_ps(x))  // by x's sign
                                 : q.offset_pos;
  const __m256i w = _mm256_cvtps_epi32(_mm256_fmadd_ps(_mm256_cvtepi32_ps(x), q.scale, offset));
  const __m256i step = _mm256_cmpeq_epi32(_mm256_and_si256(w, _mm256_set1_epi32(2047)), _mm256_setzero_si256());
  *retry = _mm256_movemask_ps(_mm256_castsi256_ps(step));
  return _mm256_srai_epi32(w, 11);
}

// The output stage: int16 zero point, byte clamp bounds.
struct OutVec {
  __m256i zp16, lo8, hi8;
};

OutVec out_vec(const Qu8Output& o) {
  return OutVec{_mm256_set1_epi16(static_cast<int16_t>(o.zero_point)), _mm256_set1_epi8(static_cast<char>(o.qmin)),
                _mm256_set1_epi8(static_cast<char>(o.qmax))};
}

// 16 requantized lanes (z0: 0..7, z1: 8..15) -> 16 bytes: int16 with saturation, + zero point with
// saturation, uint8 with saturation, clamped: exact (a lane that saturated is out of [0, 255] by far).
static inline __m128i to_u8x16(__m256i z0, __m256i z1, const OutVec& o) {
  const __m128i zp = _mm256_castsi256_si128(o.zp16);
  const __m128i p0 = _mm_adds_epi16(_mm_packs_epi32(_mm256_castsi256_si128(z0), _mm256_extracti128_si256(z0, 1)), zp);
  const __m128i p1 = _mm_adds_epi16(_mm_packs_epi32(_mm256_castsi256_si128(z1), _mm256_extracti128_si256(z1, 1)), zp);
  const __m128i u = _mm_packus_epi16(p0, p1);
  return _mm_min_epu8(_mm_max_epu8(u, _mm256_castsi256_si128(o.lo8)), _mm256_castsi256_si128(o.hi8));
}

// 8 lanes -> 8 bytes in the low half.
static inline __m128i to_u8x8(__m256i z, const OutVec& o) { return to_u8x16(z, z, o); }

// Two rows of 16 requantized lanes -> row 0's 16 bytes in the low 128 bits, row 1's in the high:
// the in-lane packs leave 4-channel groups interleaved, one permute puts them in order.
static inline __m256i pack2_u8(const __m256i* r0, const __m256i* r1, const OutVec& o) {
  const __m256i p0 = _mm256_adds_epi16(_mm256_packs_epi32(r0[0], r0[1]), o.zp16);
  const __m256i p1 = _mm256_adds_epi16(_mm256_packs_epi32(r1[0], r1[1]), o.zp16);
  __m256i u = _mm256_packus_epi16(p0, p1);
  u = _mm256_permutevar8x32_epi32(u, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  return _mm256_min_epu8(_mm256_max_epu8(u, o.lo8), o.hi8);
}

void store_row16(uint8_t* c, __m128i v, size_t nr) {
  if (nr >= 16) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(c), v);
    return;
  }
  alignas(16) uint8_t bytes[16];
  _mm_store_si128(reinterpret_cast<__m128i*>(bytes), v);
  for (size_t j = 0; j < nr; ++j) c[j] = bytes[j];
}

int32_t load_u32(const uint8_t* p) {
  int32_t v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}

// requantize() of one row's 16 lanes with the tile's constants (the fp32 form's rare retries: out of
// the hot loop, which keeps its registers).
__attribute__((noinline)) void requantize_row(__m256i* acc, const int32_t* rq) {
  acc[0] = requantize(acc[0], rq_load(rq, 16, 0));
  acc[1] = requantize(acc[1], rq_load(rq, 16, 8));
}

template <size_t M>
__attribute__((always_inline)) inline void store_tile(__m256i (*acc)[2], size_t mr, size_t nr, const int32_t* rq,
                                                      uint8_t* c, size_t ldc, const Qu8Output* out) {
  // The fp32 form where the tile's columns (< nr) allow it (the packed table's kQu8RqFpScale rows
  // are > 0: computed once when the table was written, as qu8_avx512.inl's store_tile takes them)
  // and MXCSR rounds to nearest. Small-K GEMMs (MobileNets' 1x1 expansions) spend most of their
  // time here: deriving those constants from the integer rows on every call cost 1.3x there.
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i valid0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(nr)), lane);
  const __m256i valid1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(nr) - 8), lane);
  const __m256 s0 = _mm256_castsi256_ps(load8_i32(rq + kQu8RqFpScale * 16));
  const __m256 s1 = _mm256_castsi256_ps(load8_i32(rq + kQu8RqFpScale * 16 + 8));
  const __m256i bad0 = _mm256_andnot_si256(_mm256_castps_si256(_mm256_cmp_ps(s0, _mm256_setzero_ps(), _CMP_GT_OQ)), valid0);
  const __m256i bad1 = _mm256_andnot_si256(_mm256_castps_si256(_mm256_cmp_ps(s1, _mm256_setzero_ps(), _CMP_GT_OQ)), valid1);
  if (_mm256_testz_si256(_mm256_or_si256(bad0, bad1), _mm256_or_si256(bad0, bad1)) && fp_rounding_ok()) {
    const FpRq f0{s0, _mm256_castsi256_ps(load8_i32(rq + kQu8RqFpOffsetPos * 16)),
                  _mm256_castsi256_ps(load8_i32(rq + kQu8RqFpOffsetNeg * 16))};
    const FpRq f1{s1, _mm256_castsi256_ps(load8_i32(rq + kQu8RqFpOffsetPos * 16 + 8)),
                  _mm256_castsi256_ps(load8_i32(rq + kQu8RqFpOffsetNeg * 16 + 8))};
    const int cols = nr >= 16 ? 0xFFFF : (1 << nr) - 1;
    const bool any_sign = out->qmin < out->zero_point;  // else (fused Relu) no sign select: qu8_avx512.inl
#pragma GCC unroll 8
    for (size_t i = 0; i < M; ++i) {
      int r0, r1;
      const __m256i y0 = any_sign ? requantize_fp<true>(acc[i][0], f0, &r0) : requantize_fp<false>(acc[i][0], f0, &r0);
      const __m256i y1 = any_sign ? requantize_fp<true>(acc[i][1], f1, &r1) : requantize_fp<false>(acc[i][1], f1, &r1);
      if (__builtin_expect(((r0 | r1 << 8) & cols) != 0, 0)) {
        requantize_row(acc[i], rq);
      } else {
        acc[i][0] = y0;
        acc[i][1] = y1;
      }
    }
  } else {
    const RqVec q0 = rq_load(rq, 16, 0), q1 = rq_load(rq, 16, 8);
#pragma GCC unroll 8
    for (size_t i = 0; i < M; ++i) {
      acc[i][0] = requantize(acc[i][0], q0);
      acc[i][1] = requantize(acc[i][1], q1);
    }
  }
  const OutVec o = out_vec(*out);
#pragma GCC unroll 4
  for (size_t i0 = 0; i0 < M; i0 += 2) {
    const __m256i u = pack2_u8(acc[i0], acc[i0 + 1 < M ? i0 + 1 : M - 1], o);
    if (i0 < mr) store_row16(c + i0 * ldc, _mm256_castsi256_si128(u), nr);
    if (i0 + 1 < mr) store_row16(c + (i0 + 1) * ldc, _mm256_extracti128_si256(u, 1), nr);
  }
}

// acc[0..1] += the 4 k of activation word x32 against one step of Qu8Layout::C4Split16: the word
// x0 | x1 << 8 | x2 << 16 | x3 << 24 gives the int16 pairs (x0, x2) under a mask and (x1, x3) after
// a 16-bit shift by 8 (no shuffle), each multiplied with its int16 weight pairs by vpmaddwd.
// 4 x 16: 8 accumulators, 4 weight vectors (a step: (k0, k2) pairs of columns 0-7 and 8-15, then
// (k1, k3)), the broadcast and its two halves: 15 of the 16 ymm registers.
struct WidenStep {
  struct Weights {
    __m256i v[4];
  };
  static constexpr size_t kBytes = 128;
  static Weights load(const uint8_t* w) {
    Weights out;
#pragma GCC unroll 8
    for (size_t i = 0; i < 4; ++i) out.v[i] = _mm256_load_si256(reinterpret_cast<const __m256i*>(w + 32 * i));
    return out;
  }
  void apply(__m256i* acc, int32_t x32, const Weights& w) const {
    const __m256i x = _mm256_set1_epi32(x32);
    const __m256i x02 = _mm256_and_si256(x, _mm256_set1_epi32(0x00FF00FF)), x13 = _mm256_srli_epi16(x, 8);
    acc[0] = _mm256_add_epi32(acc[0], _mm256_madd_epi16(x02, w.v[0]));
    acc[1] = _mm256_add_epi32(acc[1], _mm256_madd_epi16(x02, w.v[1]));
    acc[0] = _mm256_add_epi32(acc[0], _mm256_madd_epi16(x13, w.v[2]));
    acc[1] = _mm256_add_epi32(acc[1], _mm256_madd_epi16(x13, w.v[3]));
  }
};

// The narrow-weight GEMM (ukernels.h, the qu8_igemm_narrow slot), packed Qu8Layout::C4: per 4 k two
// 32-byte weight loads (columns 0-7 and 8-15, 4 k each); per row the broadcast activation word and,
// per weight vector, vpmaddubsw (two uint8 x int8 products per int16 lane: exact, the packer
// checked every weight pair), vpmaddwd by 1 (the lane's 4 products into int32) and vpaddd: 6
// instructions per row and 4 k where WidenStep takes 11.
struct NarrowStep {
  struct Weights {
    __m256i lo, hi;
  };
  static constexpr size_t kBytes = 64;
  const __m256i ones = _mm256_set1_epi16(1);
  static Weights load(const uint8_t* w) {
    return {_mm256_load_si256(reinterpret_cast<const __m256i*>(w)),
            _mm256_load_si256(reinterpret_cast<const __m256i*>(w + 32))};
  }
  void apply(__m256i* acc, int32_t x32, const Weights& w) const {
    const __m256i x = _mm256_set1_epi32(x32);
    acc[0] = _mm256_add_epi32(acc[0], _mm256_madd_epi16(_mm256_maddubs_epi16(x, w.lo), ones));
    acc[1] = _mm256_add_epi32(acc[1], _mm256_madd_epi16(_mm256_maddubs_epi16(x, w.hi), ones));
  }
};

// The GEMM loop of every step (ukernels.h, Qu8IgemmUkernel; kMR: the tile's rows, the indirection
// buffer's stride): M rows of two accumulators from the bias (the row loops unroll fully up to 8
// rows: one left rolled keeps the accumulators in memory);
// per kernel position and 4 k one packed step applied to each row's 4-byte activation word (a
// tail of kc % 4 bytes reads the whole word: ukernels.h, rows are readable that far); then the
// fused requantization.
template <size_t kMR, size_t M, class Step>
void igemm(size_t mr, size_t nr, size_t kc, size_t ks, const uint8_t* const* a, const void* w, const int32_t* bias,
           const int32_t* rq, uint8_t* c, size_t ldc, const Qu8Output* out) {
  __m256i acc[M][2];
  const __m256i b0 = load8_i32(bias), b1 = load8_i32(bias + 8);
#pragma GCC unroll 8
  for (size_t i = 0; i < M; ++i) {
    acc[i][0] = b0;
    acc[i][1] = b1;
  }
  const Step step;
  const uint8_t* wp = static_cast<const uint8_t*>(w);
  for (size_t s = 0; s < ks; ++s) {
    const uint8_t* r[M];
#pragma GCC unroll 8
    for (size_t i = 0; i < M; ++i) r[i] = a[s * kMR + i];
    for (size_t k = 0; k < kc; k += 4) {
      const typename Step::Weights wv = Step::load(wp);
      wp += Step::kBytes;
#pragma GCC unroll 8
      for (size_t i = 0; i < M; ++i) step.apply(acc[i], load_u32(r[i] + k), wv);
    }
  }
  store_tile<M>(acc, mr, nr, rq, c, ldc, out);
}

namespace dw {

// Depthwise convolution (multiplier 1) on packed weights (qu8_ukernels.h, "AVX2 blocks"): 32
// channels per block as 4 ymm accumulators, Taps::kRows kernel rows per int32 lane (Taps below).
// Per output row and block, output pixels go in segments of kSegment: the columns the segment's
// windows read are interleaved once into scratch (padding columns and rows reading the zero
// point), then each pixel takes per (row group, kernel column) four weight vectors and four taps,
// and the requantization constants come from the block. Channels past C in the last block read
// whatever follows them in the input (their weights are 0; nothing past the input buffer is read)
// and are not stored.
//
// Taps policy: kRows, zp_vector(zp) (a lane of padding), interleave(rows[kRows], out[4]) (the
// layout's vectors v = 0..3 of 32 bytes of each row), weight_lane(w[kRows]) (the packed int32 lane
// of one channel's kRows weights), and tap(acc, x, w) (acc + the lane's kRows exact products).
constexpr size_t kSegment = 16, kMaxGroupRows = kQu8DwMaxRows + 4;

// 2 kernel rows per lane as int16 pairs: vpmaddwd (two exact products) + vpaddd. Any weights.
struct PairTaps {
  static constexpr size_t kRows = 2;
  static __m256i zp_vector(int32_t zp) { return _mm256_set1_epi16(static_cast<int16_t>(zp)); }
  static void interleave(const __m256i* r, __m256i* out) {
    // int16 pairs (r0, r1): bytes interleaved, then each followed by a zero byte.
    const __m256i zero = _mm256_setzero_si256();
    const __m256i t0 = _mm256_unpacklo_epi8(r[0], r[1]), t1 = _mm256_unpackhi_epi8(r[0], r[1]);
    out[0] = _mm256_unpacklo_epi8(t0, zero);
    out[1] = _mm256_unpackhi_epi8(t0, zero);
    out[2] = _mm256_unpacklo_epi8(t1, zero);
    out[3] = _mm256_unpackhi_epi8(t1, zero);
  }
  static int32_t weight_lane(const int8_t* w) { return qu8_dw_pair_lane(w); }
  static __m256i tap(__m256i acc, __m256i x, __m256i w) { return _mm256_add_epi32(acc, _mm256_madd_epi16(x, w)); }
};

// 4 kernel rows per lane as bytes (the avx512vnni layout at 256 bits): two levels of unpacks put
// rows 0..3 of channel ch(v, i) (qu8_ukernels.h) in int32 lane i of vector v. QuadTaps adds the
// tap; the levels give it their instruction (qu8_avxvnni.cc: vpdpbusd).
template <class Dot>
struct QuadTaps {
  static constexpr size_t kRows = 4;
  static __m256i zp_vector(int32_t zp) { return _mm256_set1_epi8(static_cast<char>(zp)); }
  static void interleave(const __m256i* r, __m256i* out) {
    const __m256i t0 = _mm256_unpacklo_epi8(r[0], r[1]), t1 = _mm256_unpackhi_epi8(r[0], r[1]);
    const __m256i t2 = _mm256_unpacklo_epi8(r[2], r[3]), t3 = _mm256_unpackhi_epi8(r[2], r[3]);
    out[0] = _mm256_unpacklo_epi16(t0, t2);
    out[1] = _mm256_unpackhi_epi16(t0, t2);
    out[2] = _mm256_unpacklo_epi16(t1, t3);
    out[3] = _mm256_unpackhi_epi16(t1, t3);
  }
  static int32_t weight_lane(const int8_t* w) { return qu8_dw_quad_lane(w); }
  static __m256i tap(__m256i acc, __m256i x, __m256i w) { return Dot::dot(acc, x, w); }
};

struct Block {
  const __m256i* bias;
  const __m256i* weights;
  const __m256i* rq;
  const int32_t* flags;  // any left shift per accumulator, then the fp32 form's validity
  size_t groups, kw, stride, dil, col_lines;
};

RqVec load_rq(const __m256i* p, bool any_left) {
  RqVec q;
  q.mult = _mm256_load_si256(p + 0);
  q.mult_odd = _mm256_load_si256(p + 1);
  q.left = _mm256_load_si256(p + 2);
  q.right = _mm256_load_si256(p + 3);
  q.mask = _mm256_load_si256(p + 4);
  q.thr = _mm256_load_si256(p + 5);
  q.any_left = any_left;
  return q;
}

// 32 bytes of a row at p (n valid channels): past the input's end (`end`), only the valid ones.
__m256i load_row(const uint8_t* p, size_t n, uintptr_t end) {
  if (n >= 32 || reinterpret_cast<uintptr_t>(p) + 32 <= end) return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  alignas(32) uint8_t bytes[32] = {};
  std::memcpy(bytes, p, n);
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(bytes));
}

// P pixels starting at scratch column p * stride, stored from y on (pixel stride ys), n channels;
// Fp: the block takes the fp32 requantization (and MXCSR rounds to nearest).
template <class Taps, size_t P, bool Fp>
void pixels(const Block& k, const __m256i* scratch, size_t p, uint8_t* y, size_t ys, const OutVec& o, size_t n) {
  __m256i acc[P][4];
  for (size_t v = 0; v < 4; ++v) {
    const __m256i b = _mm256_load_si256(k.bias + v);
    for (size_t i = 0; i < P; ++i) acc[i][v] = b;
  }
  const size_t pixel_step = k.stride * k.col_lines;
  for (size_t g = 0; g < k.groups; ++g) {
    for (size_t kx = 0; kx < k.kw; ++kx) {
      const __m256i* w = k.weights + (g * k.kw + kx) * 4;
      const __m256i* x = scratch + (p * k.stride + kx * k.dil) * k.col_lines + g * 4;
#pragma GCC unroll 4
      for (size_t v = 0; v < 4; ++v) {
        const __m256i wv = _mm256_load_si256(w + v);
#pragma GCC unroll 4
        for (size_t i = 0; i < P; ++i)
          acc[i][v] = Taps::tap(acc[i][v], _mm256_load_si256(x + i * pixel_step + v), wv);
      }
    }
  }
#pragma GCC unroll 4
  for (size_t v = 0; v < 4; ++v) {
    const __m256i* rq = k.rq + kQu8DwAvx2RqLines * v;
    if constexpr (Fp) {
      const FpRq q{_mm256_castsi256_ps(_mm256_load_si256(rq + 6)), _mm256_castsi256_ps(_mm256_load_si256(rq + 7)),
                   _mm256_castsi256_ps(_mm256_load_si256(rq + 8))};
#pragma GCC unroll 4
      for (size_t i = 0; i < P; ++i) {
        int retry;
        const __m256i r = requantize_fp(acc[i][v], q, &retry);
        acc[i][v] = __builtin_expect(retry != 0, 0) ? requantize(acc[i][v], load_rq(rq, k.flags[v] != 0)) : r;
      }
    } else {
      const RqVec q = load_rq(rq, k.flags[v] != 0);
#pragma GCC unroll 4
      for (size_t i = 0; i < P; ++i) acc[i][v] = requantize(acc[i][v], q);
    }
  }
#pragma GCC unroll 4
  for (size_t i = 0; i < P; ++i) {
    // The in-lane packs put the four vectors' channels (qu8_ukernels.h) back in order.
    const __m256i p01 = _mm256_adds_epi16(_mm256_packs_epi32(acc[i][0], acc[i][1]), o.zp16);
    const __m256i p23 = _mm256_adds_epi16(_mm256_packs_epi32(acc[i][2], acc[i][3]), o.zp16);
    const __m256i u = _mm256_min_epu8(_mm256_max_epu8(_mm256_packus_epi16(p01, p23), o.lo8), o.hi8);
    uint8_t* yi = y + i * ys;
    if (n >= 32) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(yi), u);
    } else {
      alignas(32) uint8_t bytes[32];
      _mm256_store_si256(reinterpret_cast<__m256i*>(bytes), u);
      std::memcpy(yi, bytes, n);
    }
  }
}

// One output row's channel block [c0, c0 + n): rows[t] / steps[t] as in run().
template <class Taps>
void block_row(const Qu8DepthwiseArgs* a, const uint8_t* const* rows, const size_t* steps, size_t c0, size_t n,
               const __m256i* blk, uint8_t* y, const uint8_t* zp_row, uintptr_t end, const OutVec& o,
               __m256i* scratch) {
  constexpr size_t kRows = Taps::kRows;
  const size_t G = qu8_dw_groups(a->kh, kRows), KW = a->kw, S = a->stride_w, D = a->dil_w;
  Block k;
  k.bias = blk;
  k.weights = blk + 4;
  k.rq = blk + 4 * (1 + G * KW);
  k.flags = reinterpret_cast<const int32_t*>(k.rq + 4 * kQu8DwAvx2RqLines);
  k.groups = G;
  k.kw = KW;
  k.stride = S;
  k.dil = D;
  k.col_lines = G * 4;
  const bool fp = k.flags[4] != 0 && fp_rounding_ok();
  const __m256i zpv = Taps::zp_vector(a->input_zero_point);
  const uint8_t* base[kMaxGroupRows];
  size_t step[kMaxGroupRows];
  for (size_t t = 0; t < G * kRows; ++t) {
    base[t] = steps[t] != 0 ? rows[t] + c0 : zp_row;
    step[t] = steps[t];
  }
  const ptrdiff_t width = static_cast<ptrdiff_t>(a->w);
  for (size_t seg = 0; seg < a->ow; seg += kSegment) {
    const size_t count = min_size(kSegment, a->ow - seg);
    const size_t cols = (count - 1) * S + (KW - 1) * D + 1;
    const ptrdiff_t ix0 = static_cast<ptrdiff_t>(seg * S) - static_cast<ptrdiff_t>(a->pad_left);
    for (size_t j = 0; j < cols; ++j) {
      const ptrdiff_t ix = ix0 + static_cast<ptrdiff_t>(j);
      __m256i* col = scratch + j * k.col_lines;
      if (ix < 0 || ix >= width) {
        for (size_t l = 0; l < k.col_lines; ++l) col[l] = zpv;
        continue;
      }
      for (size_t g = 0; g < G; ++g) {
        __m256i r[kRows];
        for (size_t q = 0; q < kRows; ++q) {
          const size_t t = g * kRows + q;
          r[q] = steps[t] != 0 ? load_row(base[t] + static_cast<size_t>(ix) * step[t], n, end)
                               : _mm256_load_si256(reinterpret_cast<const __m256i*>(zp_row));
        }
        Taps::interleave(r, col + g * 4);
      }
    }
    uint8_t* yseg = y + seg * a->out_stride + c0;
    const size_t ys = a->out_stride;
    size_t p = 0;
    if (fp) {
      for (; p + 2 <= count; p += 2) pixels<Taps, 2, true>(k, scratch, p, yseg + p * ys, ys, o, n);
      if (p < count) pixels<Taps, 1, true>(k, scratch, p, yseg + p * ys, ys, o, n);
    } else {
      for (; p + 2 <= count; p += 2) pixels<Taps, 2, false>(k, scratch, p, yseg + p * ys, ys, o, n);
      if (p < count) pixels<Taps, 1, false>(k, scratch, p, yseg + p * ys, ys, o, n);
    }
  }
}

template <class Taps>
void run(const Qu8DepthwiseArgs* a, size_t row_begin, size_t row_end) {
  constexpr size_t kRows = Taps::kRows;
  const size_t C = a->c, G = qu8_dw_groups(a->kh, kRows);
  const size_t lines = qu8_dw_avx2_lines(G, a->kw);
  const auto* packed = reinterpret_cast<const __m256i*>(a->weights_lo16);
  alignas(32) uint8_t zp_row[32];
  for (uint8_t& b : zp_row) b = static_cast<uint8_t>(a->input_zero_point);
  const OutVec o = out_vec(a->out);
  const size_t pixel_row = a->w * a->in_stride;
  const uintptr_t end =
      reinterpret_cast<uintptr_t>(a->input + (a->n * a->h * a->w - 1) * a->in_stride + a->c);
  thread_local AlignedBuffer<uint8_t> scratch_bytes;
  const size_t need = ((kSegment - 1) * a->stride_w + (a->kw - 1) * a->dil_w + 1) * G * 4;
  if (scratch_bytes.size() < need * 32) scratch_bytes = AlignedBuffer<uint8_t>(need * 32);
  __m256i* scratch = reinterpret_cast<__m256i*>(scratch_bytes.data());
  const uint8_t* rows[kMaxGroupRows];
  size_t steps[kMaxGroupRows];
  for (size_t row = row_begin; row < row_end; ++row) {
    const size_t b = row / a->oh, oy = row % a->oh;
    const uint8_t* image = a->input + b * a->h * pixel_row;
    for (size_t t = 0; t < G * kRows; ++t) {
      const ptrdiff_t iy = static_cast<ptrdiff_t>(oy * a->stride_h + t * a->dil_h) - static_cast<ptrdiff_t>(a->pad_top);
      const bool inside = t < a->kh && iy >= 0 && iy < static_cast<ptrdiff_t>(a->h);
      rows[t] = inside ? image + static_cast<size_t>(iy) * pixel_row : zp_row;
      steps[t] = inside ? a->in_stride : 0;
    }
    uint8_t* y = a->output + (b * a->oh + oy) * a->ow * a->out_stride;
    for (size_t c0 = 0; c0 < C; c0 += 32)
      block_row<Taps>(a, rows, steps, c0, min_size(32, C - c0), packed + (c0 / 32) * lines, y, zp_row, end, o,
                scratch);
  }
}

template <class Taps>
void pack(const Qu8DwPackArgs* a, void* out) {
  constexpr size_t kRows = Taps::kRows;
  const size_t C = a->c, KH = a->kh, KW = a->kw, G = qu8_dw_groups(KH, kRows);
  const size_t lines = qu8_dw_avx2_lines(G, KW);
  alignas(32) int32_t lanes[8];
  for (size_t c0 = 0; c0 < C; c0 += 32) {
    __m256i* blk = static_cast<__m256i*>(out) + (c0 / 32) * lines;
    auto ch = [&](size_t v, size_t i) {
      const size_t c = c0 + qu8_dw_lane_channel(v, i);
      return c < C ? c : C;
    };
    auto fill = [&](__m256i* line, auto value) {
      for (size_t i = 0; i < 8; ++i) lanes[i] = value(i);
      _mm256_store_si256(line, _mm256_load_si256(reinterpret_cast<const __m256i*>(lanes)));
    };
    for (size_t v = 0; v < 4; ++v) fill(blk + v, [&](size_t i) { return ch(v, i) < C ? a->bias_folded[ch(v, i)] : 0; });
    for (size_t g = 0; g < G; ++g)
      for (size_t kx = 0; kx < KW; ++kx)
        for (size_t v = 0; v < 4; ++v)
          fill(blk + 4 + (g * KW + kx) * 4 + v, [&](size_t i) {
            int8_t w[kRows] = {};
            for (size_t t = 0; t < kRows; ++t) {
              const size_t ky = g * kRows + t;
              if (ky < KH && ch(v, i) < C) w[t] = a->weights[(ky * KW + kx) * C + ch(v, i)];
            }
            return Taps::weight_lane(w);
          });
    __m256i* rq = blk + 4 * (1 + G * KW);
    int32_t flags[8] = {};
    // The fp32 form where every channel of the block allows it: the table's kQu8RqFpScale row is
    // > 0 there (qu8_fp_requant, requantization.h; 0 where the form does not apply).
    bool fp = true;
    for (size_t v = 0; v < 4; ++v)
      for (size_t i = 0; i < 8; ++i)
        if (ch(v, i) < C) fp = fp && a->rq[kQu8RqFpScale * C + ch(v, i)] > 0;  // float bits of a scale >= 0
    flags[4] = fp;
    for (size_t v = 0; v < 4; ++v) {
      __m256i rows[5];
      const size_t which[5] = {kQu8RqMultiplier, kQu8RqLeft, kQu8RqRight, kQu8RqMask, kQu8RqThreshold};
      for (size_t r = 0; r < 5; ++r) {
        for (size_t i = 0; i < 8; ++i) lanes[i] = ch(v, i) < C ? a->rq[which[r] * C + ch(v, i)] : 0;
        rows[r] = _mm256_load_si256(reinterpret_cast<const __m256i*>(lanes));
      }
      RqVec q;
      q.mult = rows[0];
      q.left = rows[1];
      q.right = rows[2];
      q.mask = rows[3];
      q.thr = rows[4];
      q = rq_finish(q);
      const __m256i fields[6] = {q.mult, q.mult_odd, q.left, q.right, q.mask, q.thr};
      for (size_t f = 0; f < 6; ++f) _mm256_store_si256(rq + kQu8DwAvx2RqLines * v + f, fields[f]);
      flags[v] = q.any_left;
      // The fp32 form's constants, the table's rows as the GEMM reads them; lanes past the channels
      // take scale 0 and offset 1024 (w = 1024: never a retry, and never stored).
      const size_t fp_rows[3] = {kQu8RqFpScale, kQu8RqFpOffsetPos, kQu8RqFpOffsetNeg};
      const int32_t fp_pad[3] = {0, qu8_float_bits(1024.0f), qu8_float_bits(1024.0f)};
      for (size_t f = 0; f < 3; ++f) {
        for (size_t i = 0; i < 8; ++i) lanes[i] = !fp ? 0 : ch(v, i) < C ? a->rq[fp_rows[f] * C + ch(v, i)] : fp_pad[f];
        _mm256_store_si256(rq + kQu8DwAvx2RqLines * v + 6 + f, _mm256_load_si256(reinterpret_cast<const __m256i*>(lanes)));
      }
    }
    fill(rq + 4 * kQu8DwAvx2RqLines, [&](size_t i) { return flags[i]; });
  }
}

template <class Taps>
size_t packed_bytes(size_t c, size_t kh, size_t kw) {
  return div_up(c, 32) * qu8_dw_avx2_lines(qu8_dw_groups(kh, Taps::kRows), kw) * 32;
}

}  // namespace dw

}  // namespace
}  // namespace edgesdk::kernels
