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

#include "kernels/vec_f32_avx512f.inl"

using V = V512F;

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
