// Scalar sparse 1x1 kernels (ukernels.h, SpmmUkernel): spmm_simd.inl on a one-lane "vector", 8
// pixels a step. The portable path, and the reference the SIMD levels are checked against
// (cpu_native/tests/kernel_tests.cc, f32_spmm): the same summation order per output element, the
// product and the sum rounded separately (no fused multiply-add: -ffp-contract=off under -std=c++17).
#include "kernels/ukernels.h"

namespace edgesdk::kernels {
namespace {

struct V {
  using T = float;
  static constexpr size_t W = 1;
  static T load(const float* p) { return *p; }
  static void store(float* p, T v) { *p = v; }
  static T load_tail(const float* p, size_t n, float fill) { return n != 0 ? *p : fill; }
  static void store_tail(float* p, T v, size_t n) {
    if (n != 0) *p = v;
  }
  static T set1(float v) { return v; }
  static T add(T a, T b) { return a + b; }
  static T fma(T a, T b, T c) { return a * b + c; }
  // The x86 semantics (second operand when either is NaN), as the SIMD clamps rely on.
  static T max(T a, T b) { return a > b ? a : b; }
  static T min(T a, T b) { return a < b ? a : b; }
  static bool any_nan(T a) { return a != a; }
};

static inline float half_to_float(uint16_t h) { return fp16_to_fp32(h); }

#include "kernels/spmm_simd.inl"

}  // namespace

#include "kernels/spmm_defs.inl"
EDGESDK_SPMM_DEFINE(8, 1, 8, scalar)
EDGESDK_SPMM_DEFINE(8, 2, 8, scalar)
EDGESDK_SPMM_DEFINE(8, 4, 8, scalar)

bool f32_nonfinite_scan__scalar(const float* x, size_t rows, size_t xs, size_t n) {
  return nonfinite_scan(x, rows, xs, n);
}

}  // namespace edgesdk::kernels
