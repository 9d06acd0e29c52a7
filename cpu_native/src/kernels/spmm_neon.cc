// NEON sparse 1x1 kernels (ukernels.h, SpmmUkernel): spmm_simd.inl on 4-lane vectors. MR = 16
// pixels (4 q registers a row) at NB 1 and 2, 8 at NB 4; fp16 weights widened by fcvt. NEON has no
// masked loads: the last 1-3 pixels of a row go through a small stack copy.
#include <arm_neon.h>

#include <cstring>

#include "kernels/ukernels.h"

namespace edgesdk::kernels {
namespace {

struct V {
  using T = float32x4_t;
  static constexpr size_t W = 4;
  static T load(const float* p) { return vld1q_f32(p); }
  static void store(float* p, T v) { vst1q_f32(p, v); }
  static T load_tail(const float* p, size_t n, float fill) {
    float tmp[4] = {fill, fill, fill, fill};
    for (size_t i = 0; i < n; ++i) tmp[i] = p[i];
    return vld1q_f32(tmp);
  }
  static void store_tail(float* p, T v, size_t n) {
    float tmp[4];
    vst1q_f32(tmp, v);
    for (size_t i = 0; i < n; ++i) p[i] = tmp[i];
  }
  static T set1(float v) { return vdupq_n_f32(v); }
  static T add(T a, T b) { return vaddq_f32(a, b); }
  static T fma(T a, T b, T c) { return vfmaq_f32(c, a, b); }
  // fmax/fmin semantics of the x86 kernels: the second operand when either is NaN (the clamp
  // passes max(lo, acc), so a NaN accumulator stays NaN).
  static T max(T a, T b) { return vbslq_f32(vcgtq_f32(a, b), a, b); }
  static T min(T a, T b) { return vbslq_f32(vcltq_f32(a, b), a, b); }
  static bool any_nan(T a) { return vminvq_u32(vceqq_f32(a, a)) == 0; }
};

static inline float half_to_float(uint16_t h) {
  __fp16 f;
  std::memcpy(&f, &h, sizeof f);
  return static_cast<float>(f);  // fcvt s, h (ARMv8.0)
}

#include "kernels/spmm_simd.inl"

}  // namespace

#include "kernels/spmm_defs.inl"
EDGESDK_SPMM_DEFINE(16, 1, 4, neon)
EDGESDK_SPMM_DEFINE(16, 2, 4, neon)
EDGESDK_SPMM_DEFINE(8, 4, 2, neon)

bool f32_nonfinite_scan_16x__neon(const float* x, size_t rows, size_t xs, size_t n) {
  return nonfinite_scan(x, rows, xs, n);
}

}  // namespace edgesdk::kernels
