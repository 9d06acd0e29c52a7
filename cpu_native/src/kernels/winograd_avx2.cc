// AVX2 + FMA Winograd F(4x4, 3x3) transforms: winograd_simd.inl on 8-lane vectors, 8 channels a
// step. Compiled with -mavx2 -mfma -mf16c; selected at run time only.
#include <immintrin.h>

#include "kernels/ukernels.h"

namespace edgesdk::kernels {
namespace {

alignas(32) const int32_t kMaskTable[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
static inline __m256i first_lanes(size_t n) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kMaskTable + 8 - n));
}

struct V {
  using T = __m256;
  static constexpr size_t W = 8;
  static T load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, T v) { _mm256_storeu_ps(p, v); }
  static T load_tail(const float* p, size_t n) { return _mm256_maskload_ps(p, first_lanes(n)); }
  static void store_tail(float* p, T v, size_t n) { _mm256_maskstore_ps(p, first_lanes(n), v); }
  static T set1(float v) { return _mm256_set1_ps(v); }
  static T add(T a, T b) { return _mm256_add_ps(a, b); }
  static T sub(T a, T b) { return _mm256_sub_ps(a, b); }
  static T fma(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  static T max(T a, T b) { return _mm256_max_ps(a, b); }
  static T min(T a, T b) { return _mm256_min_ps(a, b); }
  static bool any_nan(T a) { return _mm256_movemask_ps(_mm256_cmp_ps(a, a, _CMP_UNORD_Q)) != 0; }
};

#include "kernels/winograd_simd.inl"

}  // namespace

void f32_winograd43_input_8c__avx2(const float* const* pixels, size_t channels, float* v, size_t v_stride) {
  winograd43_input(pixels, channels, v, v_stride);
}

bool f32_winograd43_output_8c__avx2(const float* m, size_t m_stride, size_t channels, const float* bias, float* y,
                                    size_t y_row_stride, size_t y_pixel_stride, size_t rows, size_t cols,
                                    const MinMax* clamp) {
  return winograd43_output(m, m_stride, channels, bias, y, y_row_stride, y_pixel_stride, rows, cols, clamp);
}

}  // namespace edgesdk::kernels
