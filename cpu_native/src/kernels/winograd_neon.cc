// NEON (AArch64 Advanced SIMD) Winograd F(4x4, 3x3) transforms: winograd_simd.inl on 4-lane
// vectors, 4 channels a step; tails go through a small buffer. vmaxq/vminq return NaN when either
// operand is NaN, so the clamp keeps it as on x86.
#include <arm_neon.h>

#include "kernels/ukernels.h"

namespace edgesdk::kernels {
namespace {

struct V {
  using T = float32x4_t;
  static constexpr size_t W = 4;
  static T load(const float* p) { return vld1q_f32(p); }
  static void store(float* p, T v) { vst1q_f32(p, v); }
  static T load_tail(const float* p, size_t n) {
    float buf[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (size_t i = 0; i < n; ++i) buf[i] = p[i];
    return vld1q_f32(buf);
  }
  static void store_tail(float* p, T v, size_t n) {
    float buf[4];
    vst1q_f32(buf, v);
    for (size_t i = 0; i < n; ++i) p[i] = buf[i];
  }
  static T set1(float v) { return vdupq_n_f32(v); }
  static T add(T a, T b) { return vaddq_f32(a, b); }
  static T sub(T a, T b) { return vsubq_f32(a, b); }
  static T fma(T a, T b, T c) { return vfmaq_f32(c, a, b); }
  static T max(T a, T b) { return vmaxq_f32(a, b); }
  static T min(T a, T b) { return vminq_f32(a, b); }
  static bool any_nan(T a) { return vminvq_u32(vceqq_f32(a, a)) == 0; }
};

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

}  // namespace edgesdk::kernels
