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

#include "kernels/vec_f32_avx512f.inl"

using V = V512F;

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

void f32_winograd43_weights_16x__avx512f(const float* g, size_t g_stride, size_t n, float* u, size_t u_stride) {
  winograd43_weights(g, g_stride, n, u, u_stride);
}

}  // namespace edgesdk::kernels
