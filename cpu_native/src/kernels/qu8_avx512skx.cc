// AVX-512 (F + BW + DQ + VL, Skylake-X) qu8 kernels of the avx512 level: the GEMMs without VNNI, so
// it runs where Bochs' corei7_skylake_x checks it (tools/avx512_under_bochs.py), depthwise
// convolution, pooling, Add / Mul and requantization. Compiled with -mavx512f -mavx512bw
// -mavx512vl -mavx512dq; selected at run time only.
//
// The GEMM forms products exactly in 16 bits: vpmaddwd multiplies int16 pairs and adds the two
// products into an int32 lane. vpmaddubsw (u8 x s8 pairs summed into int16 with saturation) would
// saturate on ordinary 8-bit weights (two products of 255 * -128 sum to -65280), so it runs only
// in the narrow GEMM, for layers whose weight pairs the packer proved fit (ukernels.h).
// GCC 12 flags its own _mm512_undefined_* helpers as (maybe-)uninitialized when inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <type_traits>

#include "kernels/qu8_ukernels.h"
#include "kernels/requantization.h"
#include "kernels/ukernels.h"

namespace edgesdk::kernels {
namespace {

#include "kernels/qu8_avx512.inl"
#include "kernels/qu8_avx512_dwconv.inl"

constexpr size_t MR = kAvx512Qu8MR;  // 8
static_assert(kAvx512Qu8NR == 16, "one zmm of int32 per row");

// GEMM, packed Qu8Layout::C4Split16: per 4 k, 16 lanes (w[k0], w[k2]) then 16 lanes (w[k1], w[k3]),
// int16 pairs. The broadcast 32-bit activation word x0 | x1 << 8 | x2 << 16 | x3 << 24 becomes the
// int16 pairs (x0, x2) with a mask and (x1, x3) with a 16-bit shift by 8: no shuffle. Per row and
// 4 k: 2 vpmaddwd + 2 vpaddd (+ the and / shift) for 64 multiply-adds.
struct WidenStep {
  struct Weights {
    __m512i a, b;
  };
  static constexpr size_t kBytes = 128;
  static Weights load(const uint8_t* w) { return {_mm512_load_si512(w), _mm512_load_si512(w + 64)}; }
  void apply(__m512i& acc, int32_t x32, const Weights& w) const {
    const __m512i x = _mm512_set1_epi32(x32);
    const __m512i x02 = _mm512_and_si512(x, _mm512_set1_epi32(0x00FF00FF)), x13 = _mm512_srli_epi16(x, 8);
    acc = _mm512_add_epi32(acc, _mm512_madd_epi16(x02, w.a));
    acc = _mm512_add_epi32(acc, _mm512_madd_epi16(x13, w.b));
  }
};

// The narrow-weight GEMM (ukernels.h, the qu8_igemm_narrow slot), packed Qu8Layout::C4: per 4 k one
// 64-byte weight load (16 columns x 4 k); per row the broadcast activation word, vpmaddubsw (two
// uint8 x int8 products per int16 lane: exact, the packer checked every weight pair), vpmaddwd by
// 1 (the lane's 4 products into int32) and vpaddd: 3 instructions where WidenStep takes 6.
struct NarrowStep {
  using Weights = __m512i;
  static constexpr size_t kBytes = 64;
  const __m512i ones = _mm512_set1_epi16(1);
  static Weights load(const uint8_t* w) { return _mm512_load_si512(w); }
  void apply(__m512i& acc, int32_t x32, const Weights& w) const {
    acc = _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(_mm512_set1_epi32(x32), w), ones));
  }
};

__mmask64 first64(size_t n) { return n >= 64 ? ~__mmask64{0} : (__mmask64{1} << n) - 1; }

// Taps k < kernel inside the padded input (position o*stride + k*dil - pad0 < extent + pad1): the
// scalar kernel's count_include_pad divisor.
size_t padded_taps(size_t o, size_t stride, size_t kernel, size_t dil, size_t pad0, size_t extent, size_t pad1) {
  size_t count = 0;
  for (size_t k = 0; k < kernel; ++k) count += o * stride + k * dil < extent + pad0 + pad1;
  return count;
}

// int32 a + b saturated to int32 (Add's sa + sb: requantize clamps the exact sum the same way).
__m512i add_saturate(__m512i a, __m512i b) {
  const __m512i sum = _mm512_add_epi32(a, b);
  const __mmask16 overflow =
      _mm512_movepi32_mask(_mm512_and_si512(_mm512_xor_si512(a, sum), _mm512_xor_si512(b, sum)));
  const __m512i saturated = _mm512_xor_si512(_mm512_srai_epi32(a, 31), _mm512_set1_epi32(0x7FFFFFFF));
  return _mm512_mask_mov_epi32(sum, overflow, saturated);
}

// The depthwise taps of the avx512 level (qu8_avx512_dwconv.inl): two kernel rows per int32 lane as
// int16 (the raw bytes zero-extended, the weights sign-extended), vpmaddwd's two exact products
// summed into the lane, then vpaddd.
struct PairTaps {
  static constexpr size_t kRows = 2;
  static constexpr size_t kStreamPixels = 4;  // 3x3 streaming: 8 accumulators, 12 weight vectors a pass
  static __m512i zp_vector(uint8_t zp) { return _mm512_set1_epi16(zp); }
  // Rows r[0], r[1] (bytes) -> the int16 pairs (r0, r1) of vectors 0..3: bytes interleaved, then
  // each byte followed by a zero byte.
  template <class V>
  static void interleave(const V* r, V* out) {
    const V z = dw::zero<V>();
    const V t0 = dw::unpacklo8(r[0], r[1]), t1 = dw::unpackhi8(r[0], r[1]);
    out[0] = dw::unpacklo8(t0, z);
    out[1] = dw::unpackhi8(t0, z);
    out[2] = dw::unpacklo8(t1, z);
    out[3] = dw::unpackhi8(t1, z);
  }
  // Vectors 2H, 2H + 1 of the interleave of 64-byte rows.
  template <size_t H>
  static void half(const __m512i* r, __m512i* out) {
    const __m512i z = _mm512_setzero_si512();
    const __m512i t = H == 0 ? dw::unpacklo8(r[0], r[1]) : dw::unpackhi8(r[0], r[1]);
    out[0] = dw::unpacklo8(t, z);
    out[1] = dw::unpackhi8(t, z);
  }
  static int32_t weight_lane(const int8_t* w) { return qu8_dw_pair_lane(w); }
  static __m512i tap(__m512i acc, __m512i x, __m512i w) { return _mm512_add_epi32(acc, _mm512_madd_epi16(x, w)); }
};

}  // namespace

void qu8_igemm_8x16c4__avx512skx(size_t mr, size_t nr, size_t kc, size_t ks, const uint8_t* const* a, const void* w,
                                 const int32_t* bias, const int32_t* rq, uint8_t* c, size_t ldc, const Qu8Output* out) {
#define EDGESDK_CALL(M) igemm_loop<M, MR, WidenStep>(mr, nr, kc, ks, a, w, bias, rq, c, ldc, out)
  EDGESDK_QU8_DISPATCH_MR(mr, EDGESDK_CALL)
#undef EDGESDK_CALL
}

void qu8_igemm_narrow_8x16c4__avx512skx(size_t mr, size_t nr, size_t kc, size_t ks, const uint8_t* const* a,
                                        const void* w, const int32_t* bias, const int32_t* rq, uint8_t* c, size_t ldc,
                                        const Qu8Output* out) {
#define EDGESDK_CALL(M) igemm_loop<M, MR, NarrowStep>(mr, nr, kc, ks, a, w, bias, rq, c, ldc, out)
  EDGESDK_QU8_DISPATCH_MR(mr, EDGESDK_CALL)
#undef EDGESDK_CALL
}

// Multiplier 1, weights packed by qu8_dw_pack__avx512skx (qu8_ukernels.h).
void qu8_depthwise_16c__avx512skx(const Qu8DepthwiseArgs* a, size_t row_begin, size_t row_end) {
  dw::run<PairTaps>(a, row_begin, row_end);
}

size_t qu8_dw_bytes__avx512skx(size_t c, size_t kh, size_t kw) { return dw::packed_bytes<PairTaps>(c, kh, kw); }

void qu8_dw_pack__avx512skx(const Qu8DwPackArgs* args, void* out) { dw::pack<PairTaps>(args, out); }

void qu8_maxpool_64c__avx512skx(const Qu8PoolArgs* a, size_t row_begin, size_t row_end) {
  for (size_t row = row_begin; row < row_end; ++row) {
    const size_t b = row / a->oh, oy = row % a->oh;
    size_t ky0, ky1;
    tap_range(oy, a->stride_h, a->kh, a->dil_h, a->pad_top, a->h, &ky0, &ky1);
    for (size_t ox = 0; ox < a->ow; ++ox) {
      size_t kx0, kx1;
      tap_range(ox, a->stride_w, a->kw, a->dil_w, a->pad_left, a->w, &kx0, &kx1);
      uint8_t* y = a->output + ((b * a->oh + oy) * a->ow + ox) * a->out_stride;
      for (size_t c0 = 0; c0 < a->c; c0 += 64) {
        const __mmask64 m = first64(a->c - c0);
        __m512i best = _mm512_setzero_si512();  // a window with no input tap gives 0, as the scalar kernel
        for (size_t ky = ky0; ky < ky1; ++ky) {
          const size_t iy = oy * a->stride_h + ky * a->dil_h - a->pad_top;
          for (size_t kx = kx0; kx < kx1; ++kx) {
            const size_t ix = ox * a->stride_w + kx * a->dil_w - a->pad_left;
            best = _mm512_max_epu8(best, _mm512_maskz_loadu_epi8(m, a->input + ((b * a->h + iy) * a->w + ix) * a->in_stride + c0));
          }
        }
        _mm512_mask_storeu_epi8(y + c0, m, best);
      }
    }
  }
}

void qu8_avgpool_16c__avx512skx(const Qu8PoolArgs* a, size_t row_begin, size_t row_end) {
  const size_t entries = a->kh * a->kw + 1;
  const OutVec o = out_vec(a->out);
  size_t q_count = entries;  // none yet
  RqVec q{};
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
      const size_t count = a->count_include_pad ? py * px : inside;
      if (count != q_count) {  // the constants change with the divisor only (at borders)
        q = rq_broadcast(qu8_requant_at(a->rq, entries, count));
        q_count = count;
      }
      const __m512i zp_sum = _mm512_set1_epi32(static_cast<int32_t>(inside) * a->input_zero_point);
      uint8_t* y = a->output + ((b * a->oh + oy) * a->ow + ox) * a->out_stride;
      for (size_t c0 = 0; c0 < a->c; c0 += 16) {
        const __mmask16 m = first16(a->c - c0);
        __m512i acc = _mm512_setzero_si512();
        for (size_t ky = ky0; ky < ky1; ++ky) {
          const size_t iy = oy * a->stride_h + ky * a->dil_h - a->pad_top;
          for (size_t kx = kx0; kx < kx1; ++kx) {
            const size_t ix = ox * a->stride_w + kx * a->dil_w - a->pad_left;
            acc = _mm512_add_epi32(acc, load16_u8(a->input + ((b * a->h + iy) * a->w + ix) * a->in_stride + c0, m));
          }
        }
        store16(y + c0, to_u8(requantize(_mm512_sub_epi32(acc, zp_sum), q), o), m);
      }
    }
  }
}

void qu8_global_avgpool_64c__avx512skx(const uint8_t* x, size_t pixels, size_t c, size_t in_stride, uint8_t* y,
                                       int32_t input_zero_point, const Qu8Requant* rq, const Qu8Output* out) {
  const RqVec q = rq_broadcast(*rq);
  const OutVec o = out_vec(*out);
  const __m512i zp_sum = _mm512_set1_epi32(static_cast<int32_t>(static_cast<uint32_t>(pixels) *
                                                                static_cast<uint32_t>(input_zero_point)));
  for (size_t c0 = 0; c0 < c; c0 += 64) {
    const size_t cn = c - c0 < 64 ? c - c0 : 64;
    const __mmask64 m = first64(cn);
    __m512i acc[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
    for (size_t p = 0; p < pixels; ++p) {
      const __m512i v = _mm512_maskz_loadu_epi8(m, x + p * in_stride + c0);
      acc[0] = _mm512_add_epi32(acc[0], _mm512_cvtepu8_epi32(_mm512_castsi512_si128(v)));
      acc[1] = _mm512_add_epi32(acc[1], _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(v, 1)));
      acc[2] = _mm512_add_epi32(acc[2], _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(v, 2)));
      acc[3] = _mm512_add_epi32(acc[3], _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(v, 3)));
    }
    for (size_t j = 0; j < 4 && 16 * j < cn; ++j)
      store16(y + c0 + 16 * j, to_u8(requantize(_mm512_sub_epi32(acc[j], zp_sum), q), o), first16(cn - 16 * j));
  }
}

void qu8_add_16x__avx512skx(const Qu8BinaryArgs* a, size_t row_begin, size_t row_end) {
  constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const RqVec qa = rq_broadcast(a->a_rq), qb = rq_broadcast(a->b_rq), qo = rq_broadcast(a->out_rq);
  const OutVec o = out_vec(a->out);
  const __m512i azp = _mm512_set1_epi32(a->a_zero_point), bzp = _mm512_set1_epi32(a->b_zero_point);
  const __m512i b_scalar = _mm512_set1_epi32(a->b[0]);
  // The fp32 form (requantization.h, qu8_add_fp; embedded rounding to nearest) where the constants
  // allow it; its rare unvouched lanes, and every lane otherwise, take the three requantizations.
  Qu8AddFp fp{};
  const bool use_fp = qu8_add_fp(*a, &fp);
  const __m512 scale_a = _mm512_set1_ps(fp.scale_a), scale_b = _mm512_set1_ps(fp.scale_b);
  const __m512 offset_pos = _mm512_set1_ps(fp.offset_pos), offset_neg = _mm512_set1_ps(fp.offset_neg);
  for (size_t r = row_begin; r < row_end; ++r) {
    const uint8_t* ar = a->a + r * a->c;
    const uint8_t* br = a->broadcast == Broadcast::None ? a->b + r * a->c : a->b;
    uint8_t* yr = a->y + r * a->c;
    for (size_t i = 0; i < a->c; i += 16) {
      const __mmask16 m = first16(a->c - i);
      const __m512i da = _mm512_sub_epi32(load16_u8(ar + i, m), azp);
      const __m512i db = _mm512_sub_epi32(a->broadcast == Broadcast::Scalar ? b_scalar : load16_u8(br + i, m), bzp);
      if (use_fp) {
        const __m512 t = _mm512_fmadd_round_ps(_mm512_cvtepi32_ps(db), scale_b,
                                               _mm512_mul_round_ps(_mm512_cvtepi32_ps(da), scale_a, kNearest), kNearest);
        const __m512 offset = _mm512_mask_blend_ps(_mm512_movepi32_mask(_mm512_castps_si512(t)), offset_pos, offset_neg);
        const __m512i w = _mm512_cvt_roundps_epi32(_mm512_add_round_ps(t, offset, kNearest), kNearest);
        if (__builtin_expect(_mm512_mask_testn_epi32_mask(m, w, _mm512_set1_epi32(2047)) == 0, 1)) {
          store16(yr + i, to_u8(_mm512_srai_epi32(w, 11), o), m);
          continue;
        }
      }
      const __m512i sa = requantize(_mm512_slli_epi32(da, kQu8AddLeftShift), qa);
      const __m512i sb = requantize(_mm512_slli_epi32(db, kQu8AddLeftShift), qb);
      store16(yr + i, to_u8(requantize(add_saturate(sa, sb), qo), o), m);
    }
  }
}

// (a - a_zp) * (b - b_zp): both fit int16, so vpmaddwd of the first with the second's low half
// (high half cleared) is the exact product.
void qu8_mul_16x__avx512skx(const Qu8BinaryArgs* a, size_t row_begin, size_t row_end) {
  const RqVec qo = rq_broadcast(a->out_rq);
  const OutVec o = out_vec(a->out);
  const __m512i azp = _mm512_set1_epi32(a->a_zero_point), bzp = _mm512_set1_epi32(a->b_zero_point);
  const __m512i low16 = _mm512_set1_epi32(0xFFFF);
  const __m512i b_scalar = _mm512_set1_epi32(a->b[0]);
  for (size_t r = row_begin; r < row_end; ++r) {
    const uint8_t* ar = a->a + r * a->c;
    const uint8_t* br = a->broadcast == Broadcast::None ? a->b + r * a->c : a->b;
    uint8_t* yr = a->y + r * a->c;
    for (size_t i = 0; i < a->c; i += 16) {
      const __mmask16 m = first16(a->c - i);
      const __m512i xb = a->broadcast == Broadcast::Scalar ? b_scalar : load16_u8(br + i, m);
      const __m512i da = _mm512_sub_epi32(load16_u8(ar + i, m), azp);
      const __m512i db = _mm512_and_si512(_mm512_sub_epi32(xb, bzp), low16);
      store16(yr + i, to_u8(requantize(_mm512_madd_epi16(da, db), qo), o), m);
    }
  }
}

void qu8_requantize_16x__avx512skx(const uint8_t* x, uint8_t* y, size_t n, int32_t input_zero_point,
                                   const Qu8Requant* rq, const Qu8Output* out) {
  const RqVec q = rq_broadcast(*rq);
  const OutVec o = out_vec(*out);
  const __m512i zp = _mm512_set1_epi32(input_zero_point);
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 m = first16(n - i);
    store16(y + i, to_u8(requantize(_mm512_sub_epi32(load16_u8(x + i, m), zp), q), o), m);
  }
}

// DequantizeLinear (qu8_ukernels.h): codes widened to int32, less the zero point, to fp32 (exact),
// one multiply; the tail under a mask.
void qu8_dequantize_64x__avx512skx(const uint8_t* x, float* y, size_t n, const Qu8DequantizeParams* params) {
  const __m512 scale = _mm512_set1_ps(params->scale);
  const __m512i zp = _mm512_set1_epi32(params->zero_point);
  auto sixteen = [&](const uint8_t* p, __mmask16 m) {
    const __m128i bytes = _mm_maskz_loadu_epi8(m, p);
    const __m512i codes = params->is_signed ? _mm512_cvtepi8_epi32(bytes) : _mm512_cvtepu8_epi32(bytes);
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(codes, zp)), scale);
  };
  size_t i = 0;
  for (; i + 64 <= n; i += 64)
    for (size_t j = 0; j < 4; ++j) _mm512_storeu_ps(y + i + 16 * j, sixteen(x + i + 16 * j, 0xFFFF));
  for (; i < n; i += 16) {
    const __mmask16 m = first16(n - i);
    _mm512_mask_storeu_ps(y + i, m, sixteen(x + i, m));
  }
}

// QuantizeLinear (qu8_ukernels.h): vdivps, vrndscaleps to nearest (halves to even), vaddps, then
// vmaxps with the NaN on the left (it returns the right operand, qmin, for a NaN) and vminps; the
// conversion is exact and vpmovdb keeps each code's low byte.
void qu8_quantize_64x__avx512skx(const float* x, uint8_t* y, size_t n, const Qu8QuantizeParams* params) {
  const __m512 scale = _mm512_set1_ps(params->scale), zp = _mm512_set1_ps(params->zero_point);
  const __m512 lo = _mm512_set1_ps(static_cast<float>(params->qmin));
  const __m512 hi = _mm512_set1_ps(static_cast<float>(params->qmax));
  auto codes = [&](__m512 v) {
    __m512 t = _mm512_roundscale_ps(_mm512_div_ps(v, scale), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    t = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(t, zp), lo), hi);
    return _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(t));
  };
  size_t i = 0;
  for (; i + 64 <= n; i += 64)
    for (size_t j = 0; j < 4; ++j)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i + 16 * j), codes(_mm512_loadu_ps(x + i + 16 * j)));
  for (; i < n; i += 16) {
    const __mmask16 m = first16(n - i);
    _mm_mask_storeu_epi8(y + i, m, codes(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

#include "kernels/u8_interleave.inl"

void u8_interleave__avx512skx(const uint8_t* planes, size_t plane_stride, size_t c, uint8_t* y, size_t n) {
  u8_interleave_impl::interleave(planes, plane_stride, c, y, n);
}

#include "kernels/qu8_lut_x86.inl"

// Table lookup: two passes of vpshufb over the table's difference rows (qu8_lut_x86.inl says why
// they telescope) on 64 bytes a step (AVX-512BW: vpshufb zmm, vpsubsb zmm); masked tail.
void qu8_lut_64x__avx512skx(const uint8_t* x, uint8_t* y, size_t n, const uint8_t* table) {
  __m512i d[16];
  for (size_t k = 0; k < 16; ++k) d[k] = _mm512_broadcast_i32x4(lut_difference_row(table, k));
  const __m512i step = _mm512_set1_epi8(16), flip = _mm512_set1_epi8(static_cast<char>(0x80));
  for (size_t i = 0; i < n; i += 64) {
    const __mmask64 m = n - i >= 64 ? ~__mmask64{0} : (__mmask64{1} << (n - i)) - 1;
    __m512i lo = _mm512_maskz_loadu_epi8(m, x + i), hi = _mm512_xor_si512(lo, flip);
    __m512i v = _mm512_xor_si512(_mm512_shuffle_epi8(d[0], lo), _mm512_shuffle_epi8(d[8], hi));
#pragma GCC unroll 7
    for (size_t k = 1; k < 8; ++k) {
      lo = _mm512_subs_epi8(lo, step);
      hi = _mm512_subs_epi8(hi, step);
      v = _mm512_xor_si512(v, _mm512_xor_si512(_mm512_shuffle_epi8(d[k], lo), _mm512_shuffle_epi8(d[8 + k], hi)));
    }
    _mm512_mask_storeu_epi8(y + i, m, v);
  }
}

}  // namespace edgesdk::kernels
