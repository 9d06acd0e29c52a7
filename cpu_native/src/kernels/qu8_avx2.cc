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

#include "kernels/qu8_avx2.inl"

namespace edgesdk::kernels {
namespace {

RqVec rq_broadcast(const Qu8Requant& r) {
  RqVec q;
  q.mult = _mm256_set1_epi32(r.multiplier);
  q.left = _mm256_set1_epi32(r.left_shift);
  q.right = _mm256_set1_epi32(r.right_shift);
  q.mask = _mm256_set1_epi32(r.rounding_mask);
  q.thr = _mm256_set1_epi32(r.rounding_threshold);
  return rq_finish(q);
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

// Calls igemm<kAvx2Qu8MR, M, Step> with M = mr (1..4).
#define EDGESDK_AVX2_QU8_GEMM(Step)                                                       \
  switch (mr) {                                                                         \
    case 1: igemm<kAvx2Qu8MR, 1, Step>(mr, nr, kc, ks, a, w, bias, rq, c, ldc, out); break;         \
    case 2: igemm<kAvx2Qu8MR, 2, Step>(mr, nr, kc, ks, a, w, bias, rq, c, ldc, out); break;         \
    case 3: igemm<kAvx2Qu8MR, 3, Step>(mr, nr, kc, ks, a, w, bias, rq, c, ldc, out); break;         \
    default: igemm<kAvx2Qu8MR, 4, Step>(mr, nr, kc, ks, a, w, bias, rq, c, ldc, out); break;        \
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
  dw::run<dw::PairTaps>(a, row_begin, row_end);
}

size_t qu8_dw_bytes__avx2(size_t c, size_t kh, size_t kw) {
  return dw::packed_bytes<dw::PairTaps>(c, kh, kw);
}

void qu8_dw_pack__avx2(const Qu8DwPackArgs* args, void* out) { dw::pack<dw::PairTaps>(args, out); }

namespace {
// The narrow depthwise tap (the qu8_depthwise_narrow slot): 4 kernel rows a lane as bytes, the
// avxvnni layout; vpmaddubsw sums rows (0, 1) and (2, 3) into int16 lanes, vpmaddwd by 1 adds the
// two into the int32 lane and vpaddd accumulates: 3 instructions per 4 taps of 8 channels where
// PairTaps takes 4 (two vpmaddwd + vpaddd pairs), and half the interleaving. Exact only for
// weights whose row pairs never leave int16 (qu8_dw_pairs_fit_int16, which the plan checks).
struct MaddubsDot {
  static __m256i dot(__m256i acc, __m256i x, __m256i w) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(x, w), _mm256_set1_epi16(1)));
  }
};
using NarrowTaps = dw::QuadTaps<MaddubsDot>;
}  // namespace

// Multiplier 1, weights packed by qu8_dw_narrow_pack__avx2 (the avxvnni layout), whose row pairs fit.
void qu8_depthwise_narrow_8c__avx2(const Qu8DepthwiseArgs* a, size_t row_begin, size_t row_end) {
  dw::run<NarrowTaps>(a, row_begin, row_end);
}

size_t qu8_dw_narrow_bytes__avx2(size_t c, size_t kh, size_t kw) { return dw::packed_bytes<NarrowTaps>(c, kh, kw); }

void qu8_dw_narrow_pack__avx2(const Qu8DwPackArgs* args, void* out) { dw::pack<NarrowTaps>(args, out); }

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

// DequantizeLinear (qu8_ukernels.h): codes widened to int32, less the zero point, to fp32 (exact),
// one multiply; 32 a step, the tail by the scalar formula.
void qu8_dequantize_32x__avx2(const uint8_t* x, float* y, size_t n, const Qu8DequantizeParams* params) {
  const __m256 scale = _mm256_set1_ps(params->scale);
  const __m256i zp = _mm256_set1_epi32(params->zero_point);
  auto eight = [&](const uint8_t* p) {
    const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    const __m256i codes = params->is_signed ? _mm256_cvtepi8_epi32(bytes) : _mm256_cvtepu8_epi32(bytes);
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(codes, zp)), scale);
  };
  size_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (size_t j = 0; j < 4; ++j) _mm256_storeu_ps(y + i + 8 * j, eight(x + i + 8 * j));
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, eight(x + i));
  if (i < n) qu8_dequantize__scalar(x + i, y + i, n - i, params);
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
  // The fp32 form (requantization.h, qu8_add_fp) where the constants allow it and MXCSR rounds to
  // nearest; its rare unvouched lanes, and every lane otherwise, take the three requantizations.
  Qu8AddFp fp{};
  const bool use_fp = qu8_add_fp(*a, &fp) && fp_rounding_ok();
  const __m256 scale_a = _mm256_set1_ps(fp.scale_a), scale_b = _mm256_set1_ps(fp.scale_b);
  const __m256 offset_pos = _mm256_set1_ps(fp.offset_pos), offset_neg = _mm256_set1_ps(fp.offset_neg);
  auto operand_b = [&](const uint8_t* bp) { return a->broadcast == Broadcast::Scalar ? b_scalar : load8_u8(bp); };
  auto exact8 = [&](const uint8_t* ap, const uint8_t* bp) {
    const __m256i sa = requantize(_mm256_slli_epi32(_mm256_sub_epi32(load8_u8(ap), azp), kQu8AddLeftShift), qa);
    const __m256i sb = requantize(_mm256_slli_epi32(_mm256_sub_epi32(operand_b(bp), bzp), kQu8AddLeftShift), qb);
    return requantize(add_saturate(sa, sb), qo);
  };
  auto lane8 = [&](const uint8_t* ap, const uint8_t* bp) {
    if (!use_fp) return exact8(ap, bp);
    const __m256 xa = _mm256_cvtepi32_ps(_mm256_sub_epi32(load8_u8(ap), azp));
    const __m256 xb = _mm256_cvtepi32_ps(_mm256_sub_epi32(operand_b(bp), bzp));
    const __m256 t = _mm256_fmadd_ps(xb, scale_b, _mm256_mul_ps(xa, scale_a));
    const __m256i w = _mm256_cvtps_epi32(_mm256_add_ps(t, _mm256_blendv_ps(offset_pos, offset_neg, t)));
    const __m256i step = _mm256_cmpeq_epi32(_mm256_and_si256(w, _mm256_set1_epi32(2047)), _mm256_setzero_si256());
    if (__builtin_expect(!_mm256_testz_si256(step, step), 0)) return exact8(ap, bp);
    return _mm256_srai_epi32(w, 11);
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
