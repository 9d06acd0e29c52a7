// Scalar GEMM microkernels (4x4): the portable path and the reference the SIMD ones match.
#include "kernels/ukernels.h"

namespace edgesdk::kernels {
namespace {

constexpr size_t MR = kScalarMR, NR = kScalarNR;

float load_weight(const float* w, size_t i) { return w[i]; }
float load_weight(const uint16_t* w, size_t i) { return fp16_to_fp32(w[i]); }

template <class W>
void igemm_4x4(size_t mr, size_t nr, size_t kc, size_t ks, const float* const* a, const void* w_raw,
               const float* bias, float* c, size_t ldc, uint32_t flags, const MinMax* clamp) {
  const W* w = static_cast<const W*>(w_raw);
  float acc[MR][NR];
  for (size_t i = 0; i < MR; ++i)
    for (size_t j = 0; j < NR; ++j)
      acc[i][j] = (flags & kGemmAccumulate) ? (i < mr && j < nr ? c[i * ldc + j] : 0.0f)
                                            : (bias != nullptr ? bias[j] : 0.0f);
  for (size_t s = 0; s < ks; ++s) {
    const float* const* rows = a + s * MR;
    for (size_t k = 0; k < kc; ++k) {
      for (size_t i = 0; i < MR; ++i) {
        const float av = rows[i][k];
        for (size_t j = 0; j < NR; ++j) acc[i][j] += av * load_weight(w, j);
      }
      w += NR;
    }
  }
  for (size_t i = 0; i < mr; ++i)
    for (size_t j = 0; j < nr; ++j) {
      float v = acc[i][j];
      if (flags & kGemmFinal) {
        v = v < clamp->min ? clamp->min : v;
        v = v > clamp->max ? clamp->max : v;
      }
      c[i * ldc + j] = v;
    }
}

}  // namespace

void f32_igemm_4x4__scalar(size_t mr, size_t nr, size_t kc, size_t ks, const float* const* a, const void* w,
                           const float* bias, float* c, size_t ldc, uint32_t flags, const MinMax* clamp) {
  igemm_4x4<float>(mr, nr, kc, ks, a, w, bias, c, ldc, flags, clamp);
}

void f32_f16w_igemm_4x4__scalar(size_t mr, size_t nr, size_t kc, size_t ks, const float* const* a,
                                const void* w, const float* bias, float* c, size_t ldc, uint32_t flags,
                                const MinMax* clamp) {
  igemm_4x4<uint16_t>(mr, nr, kc, ks, a, w, bias, c, ldc, flags, clamp);
}

}  // namespace edgesdk::kernels
