// AVX-512 Winograd F(4x4, 3x3) transforms: winograd_simd.inl on 16-lane vectors, 16 channels a
// step, tails with lane masks. AVX-512 F instructions only, like the GEMM it feeds
// (gemm_avx512.cc): this file is compiled with -mavx512f -mfma -mf16c, hence __avx512f in the
// names. Selected at run time only.
// GCC 12 flags its own _mm512_undefined_* helpers as maybe-uninitialized when inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "kernels/ukernels.h"

namespace edgesdk::kernels {
namespace {

static inline __mmask16 first_lanes(size_t n) { return static_cast<__mmask16>((1u << n) - 1u); }

struct V {
  using T = __m512;
  static constexpr size_t W = 16;
  static T load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, T v) { _mm512_storeu_ps(p, v); }
  static T load_tail(const float* p, size_t n, float fill) {
    return _mm512_mask_loadu_ps(_mm512_set1_ps(fill), first_lanes(n), p);
  }
  static void store_tail(float* p, T v, size_t n) { _mm512_mask_storeu_ps(p, first_lanes(n), v); }
  static T set1(float v) { return _mm512_set1_ps(v); }
  static T add(T a, T b) { return _mm512_add_ps(a, b); }
  static T sub(T a, T b) { return _mm512_sub_ps(a, b); }
  static T fma(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  static T max(T a, T b) { return _mm512_max_ps(a, b); }
  static T min(T a, T b) { return _mm512_min_ps(a, b); }
  static bool any_nan(T a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q) != 0; }
};

#include "kernels/winograd_simd.inl"

}  // namespace

void f32_winograd43_input_16c__avx512f(const float* const* pixels, size_t channels, float* v, size_t v_stride) {
  winograd43_input(pixels, channels, v, v_stride);
}

bool f32_winograd43_output_16c__avx512f(const float* m, size_t m_stride, size_t channels, const float* bias, float* y,
                                        size_t y_row_stride, size_t y_pixel_stride, size_t rows, size_t cols,
                                        const MinMax* clamp) {
  return winograd43_output(m, m_stride, channels, bias, y, y_row_stride, y_pixel_stride, rows, cols, clamp);
}

}  // namespace edgesdk::kernels
