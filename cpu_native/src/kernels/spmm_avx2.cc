// AVX2 sparse 1x1 kernels (ukernels.h, SpmmUkernel): spmm_simd.inl on 8-lane vectors, compiled with
// -mavx2 -mfma -mf16c (fp16 weights widened by vcvtph2ps). MR = 32 pixels (4 ymm accumulators a row)
// at NB 1 and 2, 16 at NB 4 (8 accumulators either way: 16 registers leave room for the inputs and
// weights). Selected at run time only.
#include <immintrin.h>

#include "kernels/ukernels.h"

namespace edgesdk::kernels {
namespace {

#include "kernels/vec_f32_avx2.inl"

static inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

#include "kernels/spmm_simd.inl"

}  // namespace

#include "kernels/spmm_defs.inl"
EDGESDK_SPMM_DEFINE(32, 1, 4, avx2)
EDGESDK_SPMM_DEFINE(32, 2, 4, avx2)
EDGESDK_SPMM_DEFINE(16, 4, 2, avx2)

bool f32_nonfinite_scan_32x__avx2(const float* x, size_t rows, size_t xs, size_t n) {
  return nonfinite_scan(x, rows, xs, n);
}

}  // namespace edgesdk::kernels
