// AVX-512 sparse 1x1 kernels (ukernels.h, SpmmUkernel): spmm_simd.inl on 16-lane vectors with lane
// masks for the pixel tails. AVX-512 F instructions only (compiled with -mavx512f -mfma -mf16c, as
// the GEMM: fp16 weights widened by vcvtph2ps), hence __avx512f. MR = 64 pixels (4 zmm a row) at NB
// 1, 2 and 4, 32 at NB 8 (16 accumulators of the 32 registers). Selected at run time only.
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
  static T fma(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  static T max(T a, T b) { return _mm512_max_ps(a, b); }
  static T min(T a, T b) { return _mm512_min_ps(a, b); }
  static bool any_nan(T a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q) != 0; }
};

static inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

#include "kernels/spmm_simd.inl"

}  // namespace

#include "kernels/spmm_defs.inl"
EDGESDK_SPMM_DEFINE(64, 1, 4, avx512f)
EDGESDK_SPMM_DEFINE(64, 2, 4, avx512f)
EDGESDK_SPMM_DEFINE(64, 4, 4, avx512f)
EDGESDK_SPMM_DEFINE(32, 8, 2, avx512f)

bool f32_nonfinite_scan_64x__avx512f(const float* x, size_t rows, size_t xs, size_t n) {
  return nonfinite_scan(x, rows, xs, n);
}

}  // namespace edgesdk::kernels
