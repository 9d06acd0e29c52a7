// x86-64 microkernels of the LQ bitwise GEMM (lq.h), included by lq.cc only. Each function carries
// its target attribute (no per-file flags), is static, and runs only after lq_kernels() checked the
// CPU. Popcounts: AVX2 and AVX-512 BW count bytes with the vpshufb nibble lookup (Mula's method),
// sum up to 31 words of byte counts (at most 8 * 31 = 248 per byte) and fold them into 64-bit lanes
// with vpsadbw; AVX-512 VPOPCNTDQ counts 64-bit lanes directly. Lanes are the 8 output channels of a
// panel, so no horizontal sum is ever needed.
//
// The encoders (kx <= 4: at most 15 thresholds, a 16-entry code table) compare 8 / 16 values with
// every threshold, look the codes up with a permute and build each plane's bits with movemask /
// test masks; kx > 4 falls back to the scalar (binary search) encoder.

#define EDGESDK_LQ_AVX2 __attribute__((target("avx2,fma,popcnt")))
#define EDGESDK_LQ_SKX __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,popcnt")))
#define EDGESDK_LQ_VPOPCNT __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vpopcntdq,fma,popcnt")))

// GCC 12 warns about the intrinsics' self-initialised undefined vectors (`__Y = __Y`) in functions
// whose ISA comes from a target attribute rather than the command line: a false positive.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace edgesdk::kernels {
namespace {

// ----------------------------------------------------------------------------------------------
// AVX2: 8 lanes = 2 ymm per x-row, up to 4 x-rows.

template <size_t MR>
EDGESDK_LQ_AVX2 void lq_gemm_avx2_mr(size_t kc, size_t taps, const uint64_t* const* a, const ptrdiff_t* tap_off,
                                     const uint64_t* w, size_t np, size_t panel_stride, int32_t* c) {
  const __m256i lut = _mm256_setr_epi8(0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4, 0, 1, 1, 2, 1, 2, 2, 3, 1, 2,
                                       2, 3, 2, 3, 3, 4);
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i even = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
  for (size_t j = 0; j < np; ++j) {
    const uint64_t* wp = w + j * panel_stride;
    __m256i acc8[MR][2], acc64[MR][2];
    for (size_t r = 0; r < MR; ++r)
      for (size_t h = 0; h < 2; ++h) acc8[r][h] = acc64[r][h] = _mm256_setzero_si256();
    unsigned left = 31;
    for (size_t t = 0; t < taps; ++t) {
      const uint64_t* ap[MR];
      for (size_t r = 0; r < MR; ++r) ap[r] = a[r] + tap_off[t];
      for (size_t k = 0; k < kc; ++k, wp += 8) {
        const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp));
        const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp + 4));
        for (size_t r = 0; r < MR; ++r) {
          const __m256i xv = _mm256_set1_epi64x(static_cast<long long>(ap[r][k]));
          const __m256i v0 = _mm256_and_si256(xv, w0), v1 = _mm256_and_si256(xv, w1);
          const __m256i c0 = _mm256_add_epi8(_mm256_shuffle_epi8(lut, _mm256_and_si256(v0, m4)),
                                             _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v0, 4), m4)));
          const __m256i c1 = _mm256_add_epi8(_mm256_shuffle_epi8(lut, _mm256_and_si256(v1, m4)),
                                             _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v1, 4), m4)));
          acc8[r][0] = _mm256_add_epi8(acc8[r][0], c0);
          acc8[r][1] = _mm256_add_epi8(acc8[r][1], c1);
        }
        if (--left == 0) {
          left = 31;
          for (size_t r = 0; r < MR; ++r)
            for (size_t h = 0; h < 2; ++h) {
              acc64[r][h] = _mm256_add_epi64(acc64[r][h], _mm256_sad_epu8(acc8[r][h], _mm256_setzero_si256()));
              acc8[r][h] = _mm256_setzero_si256();
            }
        }
      }
    }
    for (size_t r = 0; r < MR; ++r) {
      const __m256i s0 = _mm256_add_epi64(acc64[r][0], _mm256_sad_epu8(acc8[r][0], _mm256_setzero_si256()));
      const __m256i s1 = _mm256_add_epi64(acc64[r][1], _mm256_sad_epu8(acc8[r][1], _mm256_setzero_si256()));
      const __m256i c32 = _mm256_blend_epi32(_mm256_permutevar8x32_epi32(s0, even),
                                             _mm256_permutevar8x32_epi32(s1, even), 0xF0);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + (r * np + j) * 8), c32);
    }
  }
}

EDGESDK_LQ_AVX2 void lq_gemm_4x8__avx2(size_t mr, size_t kc, size_t taps, const uint64_t* const* a, const ptrdiff_t* tap_off,
                                       const uint64_t* w, size_t np, size_t panel_stride, int32_t* c) {
  switch (mr) {
    case 1: lq_gemm_avx2_mr<1>(kc, taps, a, tap_off, w, np, panel_stride, c); break;
    case 2: lq_gemm_avx2_mr<2>(kc, taps, a, tap_off, w, np, panel_stride, c); break;
    case 3: lq_gemm_avx2_mr<3>(kc, taps, a, tap_off, w, np, panel_stride, c); break;
    default: lq_gemm_avx2_mr<4>(kc, taps, a, tap_off, w, np, panel_stride, c); break;
  }
}

// The combination (every x86 variant: 8 lanes are one ymm).
EDGESDK_LQ_AVX2 void lq_combine_8__avx2(size_t pixels, size_t kx, size_t kw, const int32_t* c, const int32_t* cnt,
                                        const float* coef, const float* base, size_t base_stride, float* y,
                                        size_t y_stride, float lo, float hi) {
  const __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
  for (size_t p = 0; p < pixels; ++p, y += y_stride, base += base_stride, c += kx * kw * 8, cnt += kx) {
    __m256 acc = _mm256_loadu_ps(base);
    for (size_t j = 0; j < kw; ++j)
      for (size_t i = 0; i < kx; ++i) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + (i * kw + j) * 8));
        const __m256i d = _mm256_sub_epi32(_mm256_add_epi32(v, v), _mm256_set1_epi32(cnt[i]));
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(coef + (j * kx + i) * 8), _mm256_cvtepi32_ps(d), acc);
      }
    // acc < lo ? lo : acc, then acc > hi ? hi : acc (the scalar reference's order; acc is never NaN)
    _mm256_storeu_ps(y, _mm256_min_ps(_mm256_max_ps(acc, vlo), vhi));
  }
}

// ----------------------------------------------------------------------------------------------
// AVX-512: 8 lanes = 1 zmm per x-row, up to 8 x-rows.

template <size_t MR>
EDGESDK_LQ_SKX void lq_gemm_skx_mr(size_t kc, size_t taps, const uint64_t* const* a, const ptrdiff_t* tap_off,
                                   const uint64_t* w, size_t np, size_t panel_stride, int32_t* c) {
  const __m512i lut = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4));
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  for (size_t j = 0; j < np; ++j) {
    const uint64_t* wp = w + j * panel_stride;
    __m512i acc8[MR], acc64[MR];
    for (size_t r = 0; r < MR; ++r) acc8[r] = acc64[r] = _mm512_setzero_si512();
    unsigned left = 31;
    for (size_t t = 0; t < taps; ++t) {
      const uint64_t* ap[MR];
      for (size_t r = 0; r < MR; ++r) ap[r] = a[r] + tap_off[t];
      for (size_t k = 0; k < kc; ++k, wp += 8) {
        const __m512i wv = _mm512_loadu_si512(wp);
        for (size_t r = 0; r < MR; ++r) {
          const __m512i v = _mm512_and_si512(_mm512_set1_epi64(static_cast<long long>(ap[r][k])), wv);
          const __m512i cv = _mm512_add_epi8(_mm512_shuffle_epi8(lut, _mm512_and_si512(v, m4)),
                                             _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4)));
          acc8[r] = _mm512_add_epi8(acc8[r], cv);
        }
        if (--left == 0) {
          left = 31;
          for (size_t r = 0; r < MR; ++r) {
            acc64[r] = _mm512_add_epi64(acc64[r], _mm512_sad_epu8(acc8[r], _mm512_setzero_si512()));
            acc8[r] = _mm512_setzero_si512();
          }
        }
      }
    }
    for (size_t r = 0; r < MR; ++r) {
      const __m512i sum = _mm512_add_epi64(acc64[r], _mm512_sad_epu8(acc8[r], _mm512_setzero_si512()));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + (r * np + j) * 8), _mm512_cvtepi64_epi32(sum));
    }
  }
}

EDGESDK_LQ_SKX void lq_gemm_8x8__avx512skx(size_t mr, size_t kc, size_t taps, const uint64_t* const* a,
                                          const ptrdiff_t* tap_off, const uint64_t* w, size_t np, size_t panel_stride,
                                          int32_t* c) {
  switch (mr) {
    case 1: lq_gemm_skx_mr<1>(kc, taps, a, tap_off, w, np, panel_stride, c); break;
    case 2: lq_gemm_skx_mr<2>(kc, taps, a, tap_off, w, np, panel_stride, c); break;
    case 3: lq_gemm_skx_mr<3>(kc, taps, a, tap_off, w, np, panel_stride, c); break;
    case 4: lq_gemm_skx_mr<4>(kc, taps, a, tap_off, w, np, panel_stride, c); break;
    case 5: lq_gemm_skx_mr<5>(kc, taps, a, tap_off, w, np, panel_stride, c); break;
    case 6: lq_gemm_skx_mr<6>(kc, taps, a, tap_off, w, np, panel_stride, c); break;
    case 7: lq_gemm_skx_mr<7>(kc, taps, a, tap_off, w, np, panel_stride, c); break;
    default: lq_gemm_skx_mr<8>(kc, taps, a, tap_off, w, np, panel_stride, c); break;
  }
}

template <size_t MR>
EDGESDK_LQ_VPOPCNT void lq_gemm_vpopcnt_mr(size_t kc, size_t taps, const uint64_t* const* a, const ptrdiff_t* tap_off,
                                           const uint64_t* w, size_t np, size_t panel_stride, int32_t* c) {
  for (size_t j = 0; j < np; ++j) {
    const uint64_t* wp = w + j * panel_stride;
    __m512i acc[MR];
    for (size_t r = 0; r < MR; ++r) acc[r] = _mm512_setzero_si512();
    if (kc == 1) {  // convolutions of up to 64 channels: one word a tap
      const uint64_t* ar[MR];
      for (size_t r = 0; r < MR; ++r) ar[r] = a[r];
      for (size_t t = 0; t < taps; ++t, wp += 8) {
        const __m512i wv = _mm512_loadu_si512(wp);
        const ptrdiff_t off = tap_off[t];
        for (size_t r = 0; r < MR; ++r)
          acc[r] = _mm512_add_epi64(
              acc[r], _mm512_popcnt_epi64(_mm512_and_si512(_mm512_set1_epi64(static_cast<long long>(ar[r][off])), wv)));
      }
    } else {
      for (size_t t = 0; t < taps; ++t) {
        const uint64_t* ap[MR];
        for (size_t r = 0; r < MR; ++r) ap[r] = a[r] + tap_off[t];
        for (size_t k = 0; k < kc; ++k, wp += 8) {
          const __m512i wv = _mm512_loadu_si512(wp);
          for (size_t r = 0; r < MR; ++r)
            acc[r] = _mm512_add_epi64(
                acc[r], _mm512_popcnt_epi64(_mm512_and_si512(_mm512_set1_epi64(static_cast<long long>(ap[r][k])), wv)));
        }
      }
    }
    for (size_t r = 0; r < MR; ++r)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + (r * np + j) * 8), _mm512_cvtepi64_epi32(acc[r]));
  }
}

EDGESDK_LQ_VPOPCNT void lq_gemm_8x8__avx512vpopcnt(size_t mr, size_t kc, size_t taps, const uint64_t* const* a,
                                                  const ptrdiff_t* tap_off, const uint64_t* w, size_t np, size_t panel_stride,
                                                  int32_t* c) {
  switch (mr) {
    case 1: lq_gemm_vpopcnt_mr<1>(kc, taps, a, tap_off, w, np, panel_stride, c); break;
    case 2: lq_gemm_vpopcnt_mr<2>(kc, taps, a, tap_off, w, np, panel_stride, c); break;
    case 3: lq_gemm_vpopcnt_mr<3>(kc, taps, a, tap_off, w, np, panel_stride, c); break;
    case 4: lq_gemm_vpopcnt_mr<4>(kc, taps, a, tap_off, w, np, panel_stride, c); break;
    case 5: lq_gemm_vpopcnt_mr<5>(kc, taps, a, tap_off, w, np, panel_stride, c); break;
    case 6: lq_gemm_vpopcnt_mr<6>(kc, taps, a, tap_off, w, np, panel_stride, c); break;
    case 7: lq_gemm_vpopcnt_mr<7>(kc, taps, a, tap_off, w, np, panel_stride, c); break;
    default: lq_gemm_vpopcnt_mr<8>(kc, taps, a, tap_off, w, np, panel_stride, c); break;
  }
}

// ----------------------------------------------------------------------------------------------
// Encoders.

EDGESDK_LQ_AVX2 void lq_encode_8x__avx2(const float* x, size_t rows, size_t n, const LqActQuant& q, size_t words,
                                       uint64_t* planes, int32_t* cnt, uint8_t* nan_out) {
  if (q.kx > 4) return lq_encode__scalar(x, rows, n, q, words, planes, cnt, nan_out);
  const size_t kx = q.kx, nthr = (size_t{1} << kx) - 1;
  int32_t tab[16] = {};
  for (size_t l = 0; l <= nthr; ++l) tab[l] = q.codes[l];
  const __m256i tab_lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tab));
  const __m256i tab_hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tab + 8));
  __m256 thr[15];
  for (size_t t = 0; t < nthr; ++t) thr[t] = _mm256_set1_ps(q.thresholds[t]);
  for (size_t row = 0; row < rows; ++row, x += n, planes += kx * words, cnt += kx) {
    for (size_t i = 0; i < kx * words; ++i) planes[i] = 0;
    int nan = 0;
    for (size_t k = 0; k < n; k += 8) {
      __m256 v;
      int valid = 0xff;
      if (n - k >= 8) {
        v = _mm256_loadu_ps(x + k);
      } else {
        float tmp[8] = {};
        for (size_t e = 0; e < n - k; ++e) tmp[e] = x[k + e];
        v = _mm256_loadu_ps(tmp);
        valid = (1 << (n - k)) - 1;
      }
      nan |= _mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) & valid;
      __m256i l = _mm256_setzero_si256();
      for (size_t t = 0; t < nthr; ++t)
        l = _mm256_sub_epi32(l, _mm256_castps_si256(_mm256_cmp_ps(thr[t], v, _CMP_LT_OQ)));
      __m256i code = _mm256_permutevar8x32_epi32(tab_lo, l);
      if (kx == 4)
        code = _mm256_blendv_epi8(code, _mm256_permutevar8x32_epi32(tab_hi, l),
                                  _mm256_cmpgt_epi32(l, _mm256_set1_epi32(7)));
      for (size_t i = 0; i < kx; ++i) {
        const unsigned bits = static_cast<unsigned>(
            _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_slli_epi32(code, static_cast<int>(31 - i)))) & valid);
        planes[i * words + k / 64] |= static_cast<uint64_t>(bits) << (k % 64);
      }
    }
    for (size_t i = 0; i < kx; ++i) {
      int32_t c = 0;
      for (size_t k = 0; k < words; ++k) c += __builtin_popcountll(planes[i * words + k]);
      cnt[i] = c;
    }
    nan_out[row] = nan != 0;
  }
}

EDGESDK_LQ_SKX void lq_encode_16x__avx512skx(const float* x, size_t rows, size_t n, const LqActQuant& q, size_t words,
                                            uint64_t* planes, int32_t* cnt, uint8_t* nan_out) {
  if (q.kx > 4) return lq_encode__scalar(x, rows, n, q, words, planes, cnt, nan_out);
  const size_t kx = q.kx, nthr = (size_t{1} << kx) - 1;
  int32_t tab[16] = {};
  for (size_t l = 0; l <= nthr; ++l) tab[l] = q.codes[l];
  const __m512i table = _mm512_loadu_si512(tab);
  __m512 thr[15];
  for (size_t t = 0; t < nthr; ++t) thr[t] = _mm512_set1_ps(q.thresholds[t]);
  const __m512i one = _mm512_set1_epi32(1);
  for (size_t row = 0; row < rows; ++row, x += n, planes += kx * words, cnt += kx) {
    for (size_t i = 0; i < kx * words; ++i) planes[i] = 0;
    __mmask16 nan = 0;
    for (size_t k = 0; k < n; k += 16) {
      const __mmask16 valid = n - k >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (n - k)) - 1);
      const __m512 v = _mm512_maskz_loadu_ps(valid, x + k);
      nan |= _mm512_mask_cmp_ps_mask(valid, v, v, _CMP_UNORD_Q);
      __m512i l = _mm512_setzero_si512();
      for (size_t t = 0; t < nthr; ++t) l = _mm512_mask_add_epi32(l, _mm512_cmp_ps_mask(thr[t], v, _CMP_LT_OQ), l, one);
      const __m512i code = _mm512_permutexvar_epi32(l, table);
      for (size_t i = 0; i < kx; ++i) {
        const __mmask16 bits = _mm512_mask_test_epi32_mask(valid, code, _mm512_set1_epi32(1 << i));
        planes[i * words + k / 64] |= static_cast<uint64_t>(bits) << (k % 64);
      }
    }
    for (size_t i = 0; i < kx; ++i) {
      int32_t c = 0;
      for (size_t k = 0; k < words; ++k) c += __builtin_popcountll(planes[i * words + k]);
      cnt[i] = c;
    }
    nan_out[row] = nan != 0;
  }
}

const LqKernels kLqAvx2{LqVariant::Avx2, 4, lq_gemm_4x8__avx2, lq_combine_8__avx2, lq_encode_8x__avx2, "b1_lqgemm_4x8__avx2",
                        "f32_lqencode_8x__avx2"};
const LqKernels kLqAvx512Bw{LqVariant::Avx512Bw, 8, lq_gemm_8x8__avx512skx, lq_combine_8__avx2, lq_encode_16x__avx512skx,
                            "b1_lqgemm_8x8__avx512skx", "f32_lqencode_16x__avx512skx"};
const LqKernels kLqAvx512Vpopcnt{LqVariant::Avx512Vpopcnt, 8, lq_gemm_8x8__avx512vpopcnt, lq_combine_8__avx2,
                                 lq_encode_16x__avx512skx,
                                 "b1_lqgemm_8x8__avx512vpopcnt", "f32_lqencode_16x__avx512skx"};

}  // namespace
}  // namespace edgesdk::kernels

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
