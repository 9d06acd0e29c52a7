// NEON (AArch64 Advanced SIMD) Winograd F(4x4, 3x3) transforms: winograd_simd.inl on 4-lane
// vectors, 4 channels a step; tails go through a small buffer. vmaxq/vminq return NaN when either
// operand is NaN, so the clamp keeps it as on x86.
#include <arm_neon.h>

#include "kernels/ukernels.h"

namespace edgesdk::kernels {
namespace {

#include "kernels/vec_f32_neon.inl"

#include "kernels/winograd_simd.inl"

}  // namespace

void f32_winograd43_input_4c__neon(const float* const* pixels, size_t channels, float* v, size_t v_stride) {
  winograd43_input(pixels, channels, v, v_stride);
}

bool f32_winograd43_output_4c__neon(const float* m, size_t m_stride, size_t channels, const float* bias, float* y,
                                    size_t y_row_stride, size_t y_pixel_stride, size_t rows, size_t cols,
                                    const MinMax* clamp) {
  return winograd43_output(m, m_stride, channels, bias, y, y_row_stride, y_pixel_stride, rows, cols, clamp);
}

void f32_winograd43_weights_4x__neon(const float* g, size_t g_stride, size_t n, float* u, size_t u_stride) {
  winograd43_weights(g, g_stride, n, u, u_stride);
}

}  // namespace edgesdk::kernels
