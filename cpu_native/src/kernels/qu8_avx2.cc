// AVX2 qu8 kernels (avx2 level): GEMM / indirect GEMM, depthwise convolution, pooling, Add / Mul
// and requantization, bit for bit the scalar ones (qu8_scalar.cc). Compiled with -mavx2 -mfma
// -mf16c; selected at run time only. Channel and element tails (< one vector) run requantization.h's
// scalar formulas: AVX2 has no byte-masked loads, and they are the same arithmetic (the depthwise
// convolution, on packed weights, computes its last channels in a whole vector instead).
//
// The GEMM forms products exactly in 16 bits: vpmaddwd multiplies int16 pairs and adds the two
// products into an int32 lane. vpmaddubsw (u8 x s8 pairs summed into int16 with saturation) would
// saturate on ordinary 8-bit weights (two products of 255 * -128 sum to -65280), so it runs only
// in the narrow GEMM, for layers whose weight pairs the packer proved fit (ukernels.h; ONNX
// Runtime's AVX2 kernels use it on any weights and saturate, hence its reduce_range option).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/qu8_ukernels.h"
#include "kernels/requantization.h"
#include "kernels/ukernels.h"

namespace edgesdk::kernels {
namespace {

constexpr size_t MR = kAvx2Qu8MR;  // 4
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

RqVec rq_broadcast(const Qu8Requant& r) {
  RqVec q;
  q.mult = _mm256_set1_epi32(r.multiplier);
  q.left = _mm256_set1_epi32(r.left_shift);
  q.right = _mm256_set1_epi32(r.right_shift);
  q.mask = _mm256_set1_epi32(r.rounding_mask);
  q.thr = _mm256_set1_epi32(r.rounding_threshold);
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
#pragma GCC unroll 4
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
#pragma GCC unroll 4
    for (size_t i = 0; i < M; ++i) {
      acc[i][0] = requantize(acc[i][0], q0);
      acc[i][1] = requantize(acc[i][1], q1);
    }
  }
  const OutVec o = out_vec(*out);
#pragma GCC unroll 2
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
#pragma GCC unroll 4
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

// The GEMM loop of both (ukernels.h, Qu8IgemmUkernel): M rows of two accumulators from the bias;
// per kernel position and 4 k one packed step applied to each row's 4-byte activation word (a
// tail of kc % 4 bytes reads the whole word: ukernels.h, rows are readable that far); then the
// fused requantization.
template <size_t M, class Step>
void igemm(size_t mr, size_t nr, size_t kc, size_t ks, const uint8_t* const* a, const void* w, const int32_t* bias,
           const int32_t* rq, uint8_t* c, size_t ldc, const Qu8Output* out) {
  __m256i acc[M][2];
  const __m256i b0 = load8_i32(bias), b1 = load8_i32(bias + 8);
#pragma GCC unroll 4
  for (size_t i = 0; i < M; ++i) {
    acc[i][0] = b0;
    acc[i][1] = b1;
  }
  const Step step;
  const uint8_t* wp = static_cast<const uint8_t*>(w);
  for (size_t s = 0; s < ks; ++s) {
    const uint8_t* r[M];
#pragma GCC unroll 4
    for (size_t i = 0; i < M; ++i) r[i] = a[s * MR + i];
    for (size_t k = 0; k < kc; k += 4) {
      const typename Step::Weights wv = Step::load(wp);
      wp += Step::kBytes;
#pragma GCC unroll 4
      for (size_t i = 0; i < M; ++i) step.apply(acc[i], load_u32(r[i] + k), wv);
    }
  }
  store_tile<M>(acc, mr, nr, rq, c, ldc, out);
}


// The contiguous range [begin, end) of kernel taps whose input position lies in [0, extent).
void tap_range(size_t o, size_t stride, size_t kernel, size_t dil, size_t pad, size_t extent, size_t* begin,
               size_t* end) {
  size_t k = 0;
  const ptrdiff_t base = static_cast<ptrdiff_t>(o * stride) - static_cast<ptrdiff_t>(pad);
  while (k < kernel && base + static_cast<ptrdiff_t>(k * dil) < 0) ++k;
  *begin = k;
  while (k < kernel && base + static_cast<ptrdiff_t>(k * dil) < static_cast<ptrdiff_t>(extent)) ++k;
  *end = k;
}

// Taps inside the padded input: the scalar kernel's count_include_pad divisor.
size_t padded_taps(size_t o, size_t stride, size_t kernel, size_t dil, size_t pad0, size_t extent, size_t pad1) {
  size_t count = 0;
  for (size_t k = 0; k < kernel; ++k) count += o * stride + k * dil < extent + pad0 + pad1;
  return count;
}

// 8 bytes widened to int32 lanes.
__m256i load8_u8(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

void store8(uint8_t* p, __m128i v) { _mm_storel_epi64(reinterpret_cast<__m128i*>(p), v); }

uint8_t output_of(int32_t acc, const Qu8Requant& r, const Qu8Output& out) {
  return qu8_clamp_output(qu8_requantize(acc, r), out);
}

// int32 a + b saturated to int32 (Add's sa + sb: requantize clamps the exact sum the same way).
__m256i add_saturate(__m256i a, __m256i b) {
  const __m256i sum = _mm256_add_epi32(a, b);
  const __m256i overflow = _mm256_srai_epi32(_mm256_and_si256(_mm256_xor_si256(a, sum), _mm256_xor_si256(b, sum)), 31);
  const __m256i saturated = _mm256_xor_si256(_mm256_srai_epi32(a, 31), _mm256_set1_epi32(0x7FFFFFFF));
  return _mm256_blendv_epi8(sum, saturated, overflow);
}

int32_t add_saturate(int32_t a, int32_t b) {
  const int64_t s = static_cast<int64_t>(a) + b;
  return static_cast<int32_t>(s < kInt32Min ? kInt32Min : s > kInt32Max ? kInt32Max : s);
}

}  // namespace

// Calls igemm<M, Step> with M = mr (1..4).
#define EDGESDK_AVX2_QU8_GEMM(Step)                                                       \
  switch (mr) {                                                                         \
    case 1: igemm<1, Step>(mr, nr, kc, ks, a, w, bias, rq, c, ldc, out); break;         \
    case 2: igemm<2, Step>(mr, nr, kc, ks, a, w, bias, rq, c, ldc, out); break;         \
    case 3: igemm<3, Step>(mr, nr, kc, ks, a, w, bias, rq, c, ldc, out); break;         \
    default: igemm<4, Step>(mr, nr, kc, ks, a, w, bias, rq, c, ldc, out); break;        \
  }

void qu8_igemm_4x16c4__avx2(size_t mr, size_t nr, size_t kc, size_t ks, const uint8_t* const* a, const void* w,
                            const int32_t* bias, const int32_t* rq, uint8_t* c, size_t ldc, const Qu8Output* out) {
  EDGESDK_AVX2_QU8_GEMM(WidenStep)
}

void qu8_igemm_narrow_4x16c4__avx2(size_t mr, size_t nr, size_t kc, size_t ks, const uint8_t* const* a, const void* w,
                                   const int32_t* bias, const int32_t* rq, uint8_t* c, size_t ldc,
                                   const Qu8Output* out) {
  EDGESDK_AVX2_QU8_GEMM(NarrowStep)
}
#undef EDGESDK_AVX2_QU8_GEMM

namespace {
namespace dw {

// Depthwise convolution (multiplier 1) on packed weights (qu8_ukernels.h, "AVX2 blocks"): 32
// channels per block as 4 ymm accumulators, two kernel rows per int32 lane as int16 pairs
// (vpmaddwd's two exact products, then vpaddd). Per output row and block, output pixels go in
// segments of kSegment: the columns the segment's windows read are interleaved once into scratch
// (padding columns and rows reading the zero point), then each pixel takes per (row pair, kernel
// column) four weight vectors and four vpmaddwd, and the requantization constants come from the
// block. Channels past C in the last block read whatever follows them in the input (their weights
// are 0; nothing past the input buffer is read) and are not stored.
constexpr size_t kSegment = 16, kRows = 2, kMaxGroupRows = kQu8DwMaxRows + 2;

size_t groups_of(size_t kh) { return (kh + kRows - 1) / kRows; }

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
template <size_t P, bool Fp>
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
          acc[i][v] = _mm256_add_epi32(acc[i][v], _mm256_madd_epi16(_mm256_load_si256(x + i * pixel_step + v), wv));
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
void block_row(const Qu8DepthwiseArgs* a, const uint8_t* const* rows, const size_t* steps, size_t c0, size_t n,
               const __m256i* blk, uint8_t* y, const uint8_t* zp_row, uintptr_t end, const OutVec& o,
               __m256i* scratch) {
  const size_t G = groups_of(a->kh), KW = a->kw, S = a->stride_w, D = a->dil_w;
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
  const __m256i zpv = _mm256_set1_epi16(static_cast<int16_t>(a->input_zero_point));
  const __m256i zero = _mm256_setzero_si256();
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
        const size_t t = g * kRows;
        const __m256i r0 = steps[t] != 0 ? load_row(base[t] + static_cast<size_t>(ix) * step[t], n, end)
                                         : _mm256_load_si256(reinterpret_cast<const __m256i*>(zp_row));
        const __m256i r1 = steps[t + 1] != 0 ? load_row(base[t + 1] + static_cast<size_t>(ix) * step[t + 1], n, end)
                                             : _mm256_load_si256(reinterpret_cast<const __m256i*>(zp_row));
        // int16 pairs (r0, r1) of vectors 0..3: bytes interleaved, then each followed by a zero byte.
        const __m256i t0 = _mm256_unpacklo_epi8(r0, r1), t1 = _mm256_unpackhi_epi8(r0, r1);
        col[g * 4 + 0] = _mm256_unpacklo_epi8(t0, zero);
        col[g * 4 + 1] = _mm256_unpackhi_epi8(t0, zero);
        col[g * 4 + 2] = _mm256_unpacklo_epi8(t1, zero);
        col[g * 4 + 3] = _mm256_unpackhi_epi8(t1, zero);
      }
    }
    uint8_t* yseg = y + seg * a->out_stride + c0;
    const size_t ys = a->out_stride;
    size_t p = 0;
    if (fp) {
      for (; p + 2 <= count; p += 2) pixels<2, true>(k, scratch, p, yseg + p * ys, ys, o, n);
      if (p < count) pixels<1, true>(k, scratch, p, yseg + p * ys, ys, o, n);
    } else {
      for (; p + 2 <= count; p += 2) pixels<2, false>(k, scratch, p, yseg + p * ys, ys, o, n);
      if (p < count) pixels<1, false>(k, scratch, p, yseg + p * ys, ys, o, n);
    }
  }
}

void run(const Qu8DepthwiseArgs* a, size_t row_begin, size_t row_end) {
  const size_t C = a->c, G = groups_of(a->kh);
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
      block_row(a, rows, steps, c0, min_size(32, C - c0), packed + (c0 / 32) * lines, y, zp_row, end, o,
                scratch);
  }
}

void pack(const Qu8DwPackArgs* a, void* out) {
  const size_t C = a->c, KH = a->kh, KW = a->kw, G = groups_of(KH);
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
            int16_t w[2] = {0, 0};
            for (size_t t = 0; t < kRows; ++t) {
              const size_t ky = g * kRows + t;
              if (ky < KH && ch(v, i) < C) w[t] = a->weights[(ky * KW + kx) * C + ch(v, i)];
            }
            return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint16_t>(w[0])) |
                                        static_cast<uint32_t>(static_cast<uint16_t>(w[1])) << 16);
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

}  // namespace dw

// QuantizeLinear of 8 floats -> 8 int32 codes in [qmin, qmax] (qu8_ukernels.h): vdivps, vroundps to
// nearest (halves to even), vaddps, then vmaxps with the NaN on the left (it returns the right
// operand, qmin, for a NaN) and vminps; the conversion is exact.
__m256i quantize8(__m256 x, __m256 scale, __m256 zp, __m256 lo, __m256 hi) {
  __m256 t = _mm256_round_ps(_mm256_div_ps(x, scale), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  t = _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(t, zp), lo), hi);
  return _mm256_cvttps_epi32(t);
}

}  // namespace

// Multiplier 1, weights packed by qu8_dw_pack__avx2 (qu8_ukernels.h).
void qu8_depthwise_8c__avx2(const Qu8DepthwiseArgs* a, size_t row_begin, size_t row_end) {
  dw::run(a, row_begin, row_end);
}

size_t qu8_dw_bytes__avx2(size_t c, size_t kh, size_t kw) {
  return div_up(c, 32) * qu8_dw_avx2_lines(dw::groups_of(kh), kw) * 32;
}

void qu8_dw_pack__avx2(const Qu8DwPackArgs* args, void* out) { dw::pack(args, out); }

void qu8_quantize_32x__avx2(const float* x, uint8_t* y, size_t n, const Qu8QuantizeParams* params) {
  const __m256 scale = _mm256_set1_ps(params->scale), zp = _mm256_set1_ps(params->zero_point);
  const __m256 lo = _mm256_set1_ps(static_cast<float>(params->qmin)), hi = _mm256_set1_ps(static_cast<float>(params->qmax));
  const __m256i low_byte = _mm256_set1_epi16(0xFF);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i q[4];
    for (size_t j = 0; j < 4; ++j) q[j] = quantize8(_mm256_loadu_ps(x + i + 8 * j), scale, zp, lo, hi);
    // int16 (exact), their low bytes, then bytes; the in-lane packs leave the 4-code groups in the
    // order 0, 2, 4, 6, 1, 3, 5, 7, which one dword permute restores.
    const __m256i p01 = _mm256_and_si256(_mm256_packs_epi32(q[0], q[1]), low_byte);
    const __m256i p23 = _mm256_and_si256(_mm256_packs_epi32(q[2], q[3]), low_byte);
    const __m256i u = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(p01, p23), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), u);
  }
  if (i < n) qu8_quantize__scalar(x + i, y + i, n - i, params);
}

void qu8_maxpool_32c__avx2(const Qu8PoolArgs* a, size_t row_begin, size_t row_end) {
  for (size_t row = row_begin; row < row_end; ++row) {
    const size_t b = row / a->oh, oy = row % a->oh;
    size_t ky0, ky1;
    tap_range(oy, a->stride_h, a->kh, a->dil_h, a->pad_top, a->h, &ky0, &ky1);
    for (size_t ox = 0; ox < a->ow; ++ox) {
      size_t kx0, kx1;
      tap_range(ox, a->stride_w, a->kw, a->dil_w, a->pad_left, a->w, &kx0, &kx1);
      uint8_t* y = a->output + ((b * a->oh + oy) * a->ow + ox) * a->out_stride;
      size_t c0 = 0;
      for (; c0 + 32 <= a->c; c0 += 32) {
        __m256i best = _mm256_setzero_si256();  // a window with no input tap gives 0, as the scalar kernel
        for (size_t ky = ky0; ky < ky1; ++ky)
          for (size_t kx = kx0; kx < kx1; ++kx) {
            const size_t iy = oy * a->stride_h + ky * a->dil_h - a->pad_top, ix = ox * a->stride_w + kx * a->dil_w - a->pad_left;
            const uint8_t* p = a->input + ((b * a->h + iy) * a->w + ix) * a->in_stride + c0;
            best = _mm256_max_epu8(best, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
          }
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + c0), best);
      }
      for (; c0 < a->c; ++c0) {
        uint8_t best = 0;
        for (size_t ky = ky0; ky < ky1; ++ky)
          for (size_t kx = kx0; kx < kx1; ++kx) {
            const size_t iy = oy * a->stride_h + ky * a->dil_h - a->pad_top, ix = ox * a->stride_w + kx * a->dil_w - a->pad_left;
            const uint8_t v = a->input[((b * a->h + iy) * a->w + ix) * a->in_stride + c0];
            best = v > best ? v : best;
          }
        y[c0] = best;
      }
    }
  }
}

void qu8_avgpool_8c__avx2(const Qu8PoolArgs* a, size_t row_begin, size_t row_end) {
  const size_t entries = a->kh * a->kw + 1;
  const OutVec o = out_vec(a->out);
  for (size_t row = row_begin; row < row_end; ++row) {
    const size_t b = row / a->oh, oy = row % a->oh;
    size_t ky0, ky1;
    tap_range(oy, a->stride_h, a->kh, a->dil_h, a->pad_top, a->h, &ky0, &ky1);
    const size_t py = padded_taps(oy, a->stride_h, a->kh, a->dil_h, a->pad_top, a->h, a->pad_bottom);
    for (size_t ox = 0; ox < a->ow; ++ox) {
      size_t kx0, kx1;
      tap_range(ox, a->stride_w, a->kw, a->dil_w, a->pad_left, a->w, &kx0, &kx1);
      const size_t px = padded_taps(ox, a->stride_w, a->kw, a->dil_w, a->pad_left, a->w, a->pad_right);
      const size_t inside = (ky1 - ky0) * (kx1 - kx0);
      const Qu8Requant r = qu8_requant_at(a->rq, entries, a->count_include_pad ? py * px : inside);
      const RqVec q = rq_broadcast(r);
      const int32_t zp_sum = static_cast<int32_t>(inside) * a->input_zero_point;
      uint8_t* y = a->output + ((b * a->oh + oy) * a->ow + ox) * a->out_stride;
      size_t c0 = 0;
      for (; c0 + 8 <= a->c; c0 += 8) {
        __m256i acc = _mm256_setzero_si256();
        for (size_t ky = ky0; ky < ky1; ++ky)
          for (size_t kx = kx0; kx < kx1; ++kx) {
            const size_t iy = oy * a->stride_h + ky * a->dil_h - a->pad_top, ix = ox * a->stride_w + kx * a->dil_w - a->pad_left;
            acc = _mm256_add_epi32(acc, load8_u8(a->input + ((b * a->h + iy) * a->w + ix) * a->in_stride + c0));
          }
        store8(y + c0, to_u8x8(requantize(_mm256_sub_epi32(acc, _mm256_set1_epi32(zp_sum)), q), o));
      }
      for (; c0 < a->c; ++c0) {
        int32_t acc = 0;
        for (size_t ky = ky0; ky < ky1; ++ky)
          for (size_t kx = kx0; kx < kx1; ++kx) {
            const size_t iy = oy * a->stride_h + ky * a->dil_h - a->pad_top, ix = ox * a->stride_w + kx * a->dil_w - a->pad_left;
            acc += a->input[((b * a->h + iy) * a->w + ix) * a->in_stride + c0];
          }
        y[c0] = output_of(acc - zp_sum, r, a->out);
      }
    }
  }
}

void qu8_global_avgpool_32c__avx2(const uint8_t* x, size_t pixels, size_t c, size_t in_stride, uint8_t* y,
                                  int32_t input_zero_point, const Qu8Requant* rq, const Qu8Output* out) {
  const RqVec q = rq_broadcast(*rq);
  const OutVec o = out_vec(*out);
  const int32_t zp_sum = static_cast<int32_t>(static_cast<uint32_t>(pixels) * static_cast<uint32_t>(input_zero_point));
  const __m256i zp = _mm256_set1_epi32(zp_sum);
  size_t c0 = 0;
  for (; c0 + 32 <= c; c0 += 32) {
    __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
    for (size_t p = 0; p < pixels; ++p)
      for (size_t j = 0; j < 4; ++j) acc[j] = _mm256_add_epi32(acc[j], load8_u8(x + p * in_stride + c0 + 8 * j));
    for (size_t j = 0; j < 4; j += 2)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(y + c0 + 8 * j),
                       to_u8x16(requantize(_mm256_sub_epi32(acc[j], zp), q),
                                requantize(_mm256_sub_epi32(acc[j + 1], zp), q), o));
  }
  for (; c0 + 8 <= c; c0 += 8) {
    __m256i acc = _mm256_setzero_si256();
    for (size_t p = 0; p < pixels; ++p) acc = _mm256_add_epi32(acc, load8_u8(x + p * in_stride + c0));
    store8(y + c0, to_u8x8(requantize(_mm256_sub_epi32(acc, zp), q), o));
  }
  for (; c0 < c; ++c0) {
    uint32_t acc = 0;
    for (size_t p = 0; p < pixels; ++p) acc += x[p * in_stride + c0];
    y[c0] = output_of(static_cast<int32_t>(acc - static_cast<uint32_t>(zp_sum)), *rq, *out);
  }
}

void qu8_add_16x__avx2(const Qu8BinaryArgs* a, size_t row_begin, size_t row_end) {
  const RqVec qa = rq_broadcast(a->a_rq), qb = rq_broadcast(a->b_rq), qo = rq_broadcast(a->out_rq);
  const OutVec o = out_vec(a->out);
  const __m256i azp = _mm256_set1_epi32(a->a_zero_point), bzp = _mm256_set1_epi32(a->b_zero_point);
  const __m256i b_scalar = _mm256_set1_epi32(a->b[0]);
  auto lane8 = [&](const uint8_t* ap, const uint8_t* bp) {
    const __m256i xb = a->broadcast == Broadcast::Scalar ? b_scalar : load8_u8(bp);
    const __m256i sa = requantize(_mm256_slli_epi32(_mm256_sub_epi32(load8_u8(ap), azp), kQu8AddLeftShift), qa);
    const __m256i sb = requantize(_mm256_slli_epi32(_mm256_sub_epi32(xb, bzp), kQu8AddLeftShift), qb);
    return requantize(add_saturate(sa, sb), qo);
  };
  for (size_t r = row_begin; r < row_end; ++r) {
    const uint8_t* ar = a->a + r * a->c;
    const uint8_t* br = a->broadcast == Broadcast::None ? a->b + r * a->c : a->b;
    uint8_t* yr = a->y + r * a->c;
    size_t i = 0;
    for (; i + 16 <= a->c; i += 16)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(yr + i), to_u8x16(lane8(ar + i, br + i), lane8(ar + i + 8, br + i + 8), o));
    for (; i + 8 <= a->c; i += 8) store8(yr + i, to_u8x8(lane8(ar + i, br + i), o));
    for (; i < a->c; ++i) {
      const int32_t xb = a->broadcast == Broadcast::Scalar ? a->b[0] : br[i];
      const int32_t sa = qu8_requantize((ar[i] - a->a_zero_point) * (1 << kQu8AddLeftShift), a->a_rq);
      const int32_t sb = qu8_requantize((xb - a->b_zero_point) * (1 << kQu8AddLeftShift), a->b_rq);
      yr[i] = output_of(add_saturate(sa, sb), a->out_rq, a->out);
    }
  }
}

// (a - a_zp) * (b - b_zp): both fit int16, so vpmaddwd of the first with the second's low half
// (high half cleared) is the exact product.
void qu8_mul_16x__avx2(const Qu8BinaryArgs* a, size_t row_begin, size_t row_end) {
  const RqVec qo = rq_broadcast(a->out_rq);
  const OutVec o = out_vec(a->out);
  const __m256i azp = _mm256_set1_epi32(a->a_zero_point), bzp = _mm256_set1_epi32(a->b_zero_point);
  const __m256i low16 = _mm256_set1_epi32(0xFFFF);
  const __m256i b_scalar = _mm256_set1_epi32(a->b[0]);
  auto lane8 = [&](const uint8_t* ap, const uint8_t* bp) {
    const __m256i xb = a->broadcast == Broadcast::Scalar ? b_scalar : load8_u8(bp);
    const __m256i da = _mm256_sub_epi32(load8_u8(ap), azp);
    const __m256i db = _mm256_and_si256(_mm256_sub_epi32(xb, bzp), low16);
    return requantize(_mm256_madd_epi16(da, db), qo);
  };
  for (size_t r = row_begin; r < row_end; ++r) {
    const uint8_t* ar = a->a + r * a->c;
    const uint8_t* br = a->broadcast == Broadcast::None ? a->b + r * a->c : a->b;
    uint8_t* yr = a->y + r * a->c;
    size_t i = 0;
    for (; i + 16 <= a->c; i += 16)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(yr + i), to_u8x16(lane8(ar + i, br + i), lane8(ar + i + 8, br + i + 8), o));
    for (; i + 8 <= a->c; i += 8) store8(yr + i, to_u8x8(lane8(ar + i, br + i), o));
    for (; i < a->c; ++i) {
      const int32_t xb = a->broadcast == Broadcast::Scalar ? a->b[0] : br[i];
      yr[i] = output_of((ar[i] - a->a_zero_point) * (xb - a->b_zero_point), a->out_rq, a->out);
    }
  }
}

void qu8_requantize_16x__avx2(const uint8_t* x, uint8_t* y, size_t n, int32_t input_zero_point, const Qu8Requant* rq,
                              const Qu8Output* out) {
  const RqVec q = rq_broadcast(*rq);
  const OutVec o = out_vec(*out);
  const __m256i zp = _mm256_set1_epi32(input_zero_point);
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     to_u8x16(requantize(_mm256_sub_epi32(load8_u8(x + i), zp), q),
                              requantize(_mm256_sub_epi32(load8_u8(x + i + 8), zp), q), o));
  for (; i + 8 <= n; i += 8) store8(y + i, to_u8x8(requantize(_mm256_sub_epi32(load8_u8(x + i), zp), q), o));
  for (; i < n; ++i) y[i] = output_of(x[i] - input_zero_point, *rq, *out);
}

#include "kernels/u8_interleave.inl"

void u8_interleave__avx2(const uint8_t* planes, size_t plane_stride, size_t c, uint8_t* y, size_t n) {
  u8_interleave_impl::interleave(planes, plane_stride, c, y, n);
}

#include "kernels/qu8_lut_x86.inl"

// Table lookup (ukernels.h, Qu8LutUkernel): two passes of vpshufb over the table's difference rows
// (qu8_lut_x86.inl says why they telescope), 32 bytes a step.
namespace {
struct LutRows {
  __m256i d[16];  // D_0..D_15, each row in both 128-bit lanes
};

LutRows lut_rows(const uint8_t* table) {
  LutRows r;
  for (size_t k = 0; k < 16; ++k) r.d[k] = _mm256_broadcastsi128_si256(lut_difference_row(table, k));
  return r;
}

__m256i lut32(__m256i x, const LutRows& r) {
  const __m256i step = _mm256_set1_epi8(16);
  __m256i lo = x, hi = _mm256_xor_si256(x, _mm256_set1_epi8(static_cast<char>(0x80)));
  __m256i y = _mm256_xor_si256(_mm256_shuffle_epi8(r.d[0], lo), _mm256_shuffle_epi8(r.d[8], hi));
#pragma GCC unroll 7
  for (size_t k = 1; k < 8; ++k) {
    lo = _mm256_subs_epi8(lo, step);
    hi = _mm256_subs_epi8(hi, step);
    y = _mm256_xor_si256(y, _mm256_xor_si256(_mm256_shuffle_epi8(r.d[k], lo), _mm256_shuffle_epi8(r.d[8 + k], hi)));
  }
  return y;
}
}  // namespace

void qu8_lut_32x__avx2(const uint8_t* x, uint8_t* y, size_t n, const uint8_t* table) {
  const LutRows r = lut_rows(table);
  size_t i = 0;
  for (; i + 32 <= n; i += 32)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i),
                        lut32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)), r));
  if (i < n) {  // the tail through a buffer: nothing past x + n is read or past y + n written
    alignas(32) uint8_t bytes[32] = {};
    std::memcpy(bytes, x + i, n - i);
    _mm256_store_si256(reinterpret_cast<__m256i*>(bytes), lut32(_mm256_load_si256(reinterpret_cast<const __m256i*>(bytes)), r));
    std::memcpy(y + i, bytes, n - i);
  }
}

}  // namespace edgesdk::kernels
