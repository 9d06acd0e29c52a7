// AVX2 qu8 kernels (avx2 level): GEMM / indirect GEMM, depthwise convolution, pooling, Add / Mul
// and requantization, bit for bit the scalar ones (qu8_scalar.cc). Compiled with -mavx2 -mfma
// -mf16c; selected at run time only. Channel and element tails (< one vector) run requantization.h's
// scalar formulas: AVX2 has no byte-masked loads, and they are the same arithmetic.
//
// Products are formed exactly in 16 bits: vpmaddwd multiplies int16 pairs and adds the two
// products into an int32 lane. Not vpmaddubsw (u8 x s8 pairs summed into int16 with saturation):
// two products of 255 * -128 sum to -65280, far outside int16, so it would saturate on ordinary
// data (XNNPACK uses it only with weights restricted to 7 bits).
#include <immintrin.h>

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

// The last 1-3 bytes of a row, upper bytes zero; nothing past the row is read.
int32_t load_u32_tail(const uint8_t* p, size_t n) {
  uint32_t v = p[0];
  if (n > 1) v |= static_cast<uint32_t>(p[1]) << 8;
  if (n > 2) v |= static_cast<uint32_t>(p[2]) << 16;
  return static_cast<int32_t>(v);
}

// acc[0..1] += the 4 k of activation word x32 against one step of Qu8Layout::C4Split16: the word
// x0 | x1 << 8 | x2 << 16 | x3 << 24 gives the int16 pairs (x0, x2) under a mask and (x1, x3) after
// a 16-bit shift by 8 (no shuffle), each multiplied with its int16 weight pairs by vpmaddwd.
static inline void step(__m256i* acc, int32_t x32, const __m256i* wv) {
  const __m256i x = _mm256_set1_epi32(x32);
  const __m256i x02 = _mm256_and_si256(x, _mm256_set1_epi32(0x00FF00FF)), x13 = _mm256_srli_epi16(x, 8);
  acc[0] = _mm256_add_epi32(acc[0], _mm256_madd_epi16(x02, wv[0]));
  acc[1] = _mm256_add_epi32(acc[1], _mm256_madd_epi16(x02, wv[1]));
  acc[0] = _mm256_add_epi32(acc[0], _mm256_madd_epi16(x13, wv[2]));
  acc[1] = _mm256_add_epi32(acc[1], _mm256_madd_epi16(x13, wv[3]));
}

// 4 x 16: 8 accumulators, 4 weight vectors (a step: (k0, k2) pairs of columns 0-7 and 8-15, then
// (k1, k3)), the broadcast and its two halves: 15 of the 16 ymm registers.
template <size_t M>
void igemm(size_t mr, size_t nr, size_t kc, size_t ks, const uint8_t* const* a, const int16_t* w, const int32_t* bias,
           const int32_t* rq, uint8_t* c, size_t ldc, const Qu8Output* out) {
  __m256i acc[M][2];
  const __m256i b0 = load8_i32(bias), b1 = load8_i32(bias + 8);
#pragma GCC unroll 4
  for (size_t i = 0; i < M; ++i) {
    acc[i][0] = b0;
    acc[i][1] = b1;
  }
  const size_t kb = kc & ~size_t{3}, tail = kc & 3;
  for (size_t s = 0; s < ks; ++s) {
    const uint8_t* r[M];
#pragma GCC unroll 4
    for (size_t i = 0; i < M; ++i) r[i] = a[s * MR + i];
    for (size_t k = 0; k < kb; k += 4) {
      __m256i wv[4];
#pragma GCC unroll 4
      for (size_t v = 0; v < 4; ++v) wv[v] = _mm256_load_si256(reinterpret_cast<const __m256i*>(w + 16 * v));
      w += 64;
#pragma GCC unroll 4
      for (size_t i = 0; i < M; ++i) step(acc[i], load_u32(r[i] + k), wv);
    }
    if (tail != 0) {
      __m256i wv[4];
#pragma GCC unroll 4
      for (size_t v = 0; v < 4; ++v) wv[v] = _mm256_load_si256(reinterpret_cast<const __m256i*>(w + 16 * v));
      w += 64;
#pragma GCC unroll 4
      for (size_t i = 0; i < M; ++i) step(acc[i], load_u32_tail(r[i] + kb, tail), wv);
    }
  }
  const RqVec q0 = rq_load(rq, 16, 0), q1 = rq_load(rq, 16, 8);
#pragma GCC unroll 4
  for (size_t i = 0; i < M; ++i) {
    acc[i][0] = requantize(acc[i][0], q0);
    acc[i][1] = requantize(acc[i][1], q1);
  }
  const OutVec o = out_vec(*out);
#pragma GCC unroll 2
  for (size_t i0 = 0; i0 < M; i0 += 2) {
    const __m256i u = pack2_u8(acc[i0], acc[i0 + 1 < M ? i0 + 1 : M - 1], o);
    if (i0 < mr) store_row16(c + i0 * ldc, _mm256_castsi256_si128(u), nr);
    if (i0 + 1 < mr) store_row16(c + (i0 + 1) * ldc, _mm256_extracti128_si256(u, 1), nr);
  }
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

void qu8_igemm_4x16c4__avx2(size_t mr, size_t nr, size_t kc, size_t ks, const uint8_t* const* a, const void* w,
                            const int32_t* bias, const int32_t* rq, uint8_t* c, size_t ldc, const Qu8Output* out) {
  const int16_t* w16 = static_cast<const int16_t*>(w);
  switch (mr) {
    case 1: igemm<1>(mr, nr, kc, ks, a, w16, bias, rq, c, ldc, out); break;
    case 2: igemm<2>(mr, nr, kc, ks, a, w16, bias, rq, c, ldc, out); break;
    case 3: igemm<3>(mr, nr, kc, ks, a, w16, bias, rq, c, ldc, out); break;
    default: igemm<4>(mr, nr, kc, ks, a, w16, bias, rq, c, ldc, out); break;
  }
}

namespace {

// The columns [lo, hi) of output positions whose window lies inside [0, extent) along one axis.
void inside_range(size_t out, size_t stride, size_t kernel, size_t dil, size_t pad, size_t extent, size_t* lo,
                  size_t* hi) {
  const size_t span = (kernel - 1) * dil;
  *lo = min_size(out, div_up(pad, stride));
  *hi = extent + pad < span + 1 ? *lo : min_size(out, (extent - 1 + pad - span) / stride + 1);
  if (*hi < *lo) *hi = *lo;
}

// One output pixel of an 8-channel block whose window lies inside the input: from bias_folded, raw
// bytes times the weights. KW = 3 (the common kernel width) unrolls the row and gives each column its
// own accumulator (one chain through all KH*KW taps would outlast the out-of-order window that
// overlaps neighbouring pixels); KW = 0: any width, one chain.
template <size_t KW>
static inline __m256i depthwise_inside(const Qu8DepthwiseArgs* a, const uint8_t* p, const int32_t* wc, __m256i bias) {
  const size_t C = a->c;
  const size_t row_step = a->dil_h * a->w * a->in_stride, col_step = a->dil_w * a->in_stride;
  auto tap = [](__m256i acc, const uint8_t* q, const int32_t* w) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(load8_u8(q), load8_i32(w)));
  };
  if constexpr (KW == 3) {
    __m256i acc0 = bias, acc1 = _mm256_setzero_si256(), acc2 = _mm256_setzero_si256();
    for (size_t ky = 0; ky < a->kh; ++ky, p += row_step, wc += 3 * C) {
      acc0 = tap(acc0, p, wc);
      acc1 = tap(acc1, p + col_step, wc + C);
      acc2 = tap(acc2, p + 2 * col_step, wc + 2 * C);
    }
    return _mm256_add_epi32(acc0, _mm256_add_epi32(acc1, acc2));
  } else {
    __m256i acc = bias;
    for (size_t ky = 0; ky < a->kh; ++ky, p += row_step, wc += a->kw * C)
      for (size_t kx = 0; kx < a->kw; ++kx) acc = tap(acc, p + kx * col_step, wc + kx * C);
    return acc;
  }
}

// 8 channels per block: per tap, the input bytes in int32 lanes and vpmaddwd with weights_lo16
// ((int16 w, 0) per lane: the low halves multiply, the lane's high half meets 0). A pixel whose window
// lies inside the input starts from bias_folded and multiplies the raw bytes; a border pixel starts
// from the bias, skips the padding taps and subtracts the zero point from the others. Channel blocks
// are the outer loop of a row (a block's constants are set up once per row). Multiplier 1 only.
template <size_t KW>
void depthwise_8c(const Qu8DepthwiseArgs* a, size_t row_begin, size_t row_end) {
  const size_t C = a->c, kw = a->kw;
  const __m256i zp = _mm256_set1_epi32(a->input_zero_point);
  const OutVec o = out_vec(a->out);
  size_t ox_lo, ox_hi;
  inside_range(a->ow, a->stride_w, kw, a->dil_w, a->pad_left, a->w, &ox_lo, &ox_hi);
  for (size_t row = row_begin; row < row_end; ++row) {
    const size_t b = row / a->oh, oy = row % a->oh;
    size_t ky0, ky1;
    tap_range(oy, a->stride_h, a->kh, a->dil_h, a->pad_top, a->h, &ky0, &ky1);
    const bool rows_inside = ky0 == 0 && ky1 == a->kh;
    const uint8_t* image = a->input + b * a->h * a->w * a->in_stride;
    uint8_t* y = a->output + (b * a->oh + oy) * a->ow * a->out_stride;
    size_t c0 = 0;
    for (; c0 + 8 <= C; c0 += 8) {
      const RqVec q = rq_load(a->rq, C, c0);
      const __m256i bias = a->bias != nullptr ? load8_i32(a->bias + c0) : _mm256_setzero_si256();
      const __m256i folded = load8_i32(a->bias_folded + c0);
      const int32_t* wc = a->weights_lo16 + c0;
      const uint8_t* top = image + (oy * a->stride_h - (rows_inside ? a->pad_top : 0)) * a->w * a->in_stride + c0;
      for (size_t ox = 0; ox < a->ow; ++ox) {
        __m256i acc;
        if (rows_inside && ox >= ox_lo && ox < ox_hi) {
          acc = depthwise_inside<KW>(a, top + (ox * a->stride_w - a->pad_left) * a->in_stride, wc, folded);
        } else {
          size_t kx0, kx1;
          tap_range(ox, a->stride_w, kw, a->dil_w, a->pad_left, a->w, &kx0, &kx1);
          const bool inside = rows_inside && kx0 == 0 && kx1 == kw;
          acc = inside ? folded : bias;
          for (size_t ky = ky0; ky < ky1; ++ky) {
            const size_t iy = oy * a->stride_h + ky * a->dil_h - a->pad_top;
            for (size_t kx = kx0; kx < kx1; ++kx) {
              const size_t ix = ox * a->stride_w + kx * a->dil_w - a->pad_left;
              __m256i x = load8_u8(image + (iy * a->w + ix) * a->in_stride + c0);
              if (!inside) x = _mm256_sub_epi32(x, zp);
              acc = _mm256_add_epi32(acc, _mm256_madd_epi16(x, load8_i32(wc + (ky * kw + kx) * C)));
            }
          }
        }
        store8(y + ox * a->out_stride + c0, to_u8x8(requantize(acc, q), o));
      }
    }
    for (; c0 < C; ++c0) {  // the last C % 8 channels
      const Qu8Requant r = qu8_requant_at(a->rq, C, c0);
      for (size_t ox = 0; ox < a->ow; ++ox) {
        size_t kx0, kx1;
        tap_range(ox, a->stride_w, kw, a->dil_w, a->pad_left, a->w, &kx0, &kx1);
        uint32_t acc = a->bias != nullptr ? static_cast<uint32_t>(a->bias[c0]) : 0u;
        for (size_t ky = ky0; ky < ky1; ++ky) {
          const size_t iy = oy * a->stride_h + ky * a->dil_h - a->pad_top;
          for (size_t kx = kx0; kx < kx1; ++kx) {
            const size_t ix = ox * a->stride_w + kx * a->dil_w - a->pad_left;
            const int32_t x = image[(iy * a->w + ix) * a->in_stride + c0] - a->input_zero_point;
            acc += static_cast<uint32_t>(x * a->weights[(ky * kw + kx) * C + c0]);
          }
        }
        y[ox * a->out_stride + c0] = output_of(static_cast<int32_t>(acc), r, a->out);
      }
    }
  }
}

}  // namespace

void qu8_depthwise_8c__avx2(const Qu8DepthwiseArgs* a, size_t row_begin, size_t row_end) {
  if (a->kw == 3) depthwise_8c<3>(a, row_begin, row_end);
  else depthwise_8c<0>(a, row_begin, row_end);
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

}  // namespace edgesdk::kernels
