// AVX2 + FMA Winograd F(4x4, 3x3) transforms: winograd_simd.inl on 8-lane vectors, 8 channels a
// step. Compiled with -mavx2 -mfma -mf16c; selected at run time only.
#include <immintrin.h>

#include "kernels/ukernels.h"

namespace edgesdk::kernels {
namespace {

#include "kernels/vec_f32_avx2.inl"

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

void f32_winograd43_weights_8x__avx2(const float* g, size_t g_stride, size_t n, float* u, size_t u_stride) {
  winograd43_weights(g, g_stride, n, u, u_stride);
}

}  // namespace edgesdk::kernels
