// NEON GEMM microkernels, 8x8: 16 q-register accumulators; the main loop takes 4 k at a time
// (one q load per A row) and multiplies by lane (fmla .4s by element), so it needs 8 A + 2 W
// registers and no broadcasts. fp16 weights are widened with vcvt_f32_f16 (base ARMv8).
#include <arm_neon.h>

#include "kernels/ukernels.h"

namespace edgesdk::kernels {
namespace {

constexpr size_t MR = kNeonMR, NR = kNeonNR;  // 8, 8

static inline float32x4_t load_w4(const float* w) { return vld1q_f32(w); }
static inline float32x4_t load_w4(const uint16_t* w) {
  return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(w)));
}

template <class W>
void igemm_8x8(size_t mr, size_t nr, size_t kc, size_t ks, const float* const* a, const void* w_raw,
               const float* bias, float* c, size_t ldc, uint32_t flags, const MinMax* clamp) {
  const W* w = static_cast<const W*>(w_raw);
  float32x4_t acc[MR][2];
  if (flags & kGemmAccumulate) {
    for (size_t i = 0; i < MR; ++i) {
      float row[NR] = {0, 0, 0, 0, 0, 0, 0, 0};
      if (i < mr)
        for (size_t j = 0; j < nr; ++j) row[j] = c[i * ldc + j];
      acc[i][0] = vld1q_f32(row);
      acc[i][1] = vld1q_f32(row + 4);
    }
  } else {
    const float32x4_t b0 = bias != nullptr ? vld1q_f32(bias) : vdupq_n_f32(0.0f);
    const float32x4_t b1 = bias != nullptr ? vld1q_f32(bias + 4) : vdupq_n_f32(0.0f);
    for (size_t i = 0; i < MR; ++i) { acc[i][0] = b0; acc[i][1] = b1; }
  }
  if (mr == 1) {
    // GEMV (batch 1): one row, memory-bound on the weights; two k per step for two FMA chains.
    float32x4_t e0 = vdupq_n_f32(0.0f), e1 = vdupq_n_f32(0.0f);
    for (size_t s = 0; s < ks; ++s) {
      const float* a0 = a[s * MR];
      size_t k = 0;
      for (; k + 2 <= kc; k += 2) {
        acc[0][0] = vfmaq_n_f32(acc[0][0], load_w4(w), a0[k]);
        acc[0][1] = vfmaq_n_f32(acc[0][1], load_w4(w + 4), a0[k]);
        e0 = vfmaq_n_f32(e0, load_w4(w + 8), a0[k + 1]);
        e1 = vfmaq_n_f32(e1, load_w4(w + 12), a0[k + 1]);
        w += 2 * NR;
      }
      if (k < kc) {
        acc[0][0] = vfmaq_n_f32(acc[0][0], load_w4(w), a0[k]);
        acc[0][1] = vfmaq_n_f32(acc[0][1], load_w4(w + 4), a0[k]);
        w += NR;
      }
    }
    acc[0][0] = vaddq_f32(acc[0][0], e0);
    acc[0][1] = vaddq_f32(acc[0][1], e1);
  } else {
    for (size_t s = 0; s < ks; ++s) {
      const float* const* rows = a + s * MR;
      const float* r[MR];
      for (size_t i = 0; i < MR; ++i) r[i] = rows[i];
      size_t k = 0;
      for (; k + 4 <= kc; k += 4) {
        float32x4_t av[MR];
        for (size_t i = 0; i < MR; ++i) av[i] = vld1q_f32(r[i] + k);
#define EDGESDK_STEP(lane)                                                 \
    {                                                                        \
      const float32x4_t w0 = load_w4(w), w1 = load_w4(w + 4);                \
      w += NR;                                                               \
      for (size_t i = 0; i < MR; ++i) {                                      \
        acc[i][0] = vfmaq_laneq_f32(acc[i][0], w0, av[i], lane);             \
        acc[i][1] = vfmaq_laneq_f32(acc[i][1], w1, av[i], lane);             \
      }                                                                      \
  }
      EDGESDK_STEP(0) EDGESDK_STEP(1) EDGESDK_STEP(2) EDGESDK_STEP(3)
#undef EDGESDK_STEP
    }
    for (; k < kc; ++k) {
      const float32x4_t w0 = load_w4(w), w1 = load_w4(w + 4);
      w += NR;
      for (size_t i = 0; i < MR; ++i) {
        const float32x4_t av = vld1q_dup_f32(r[i] + k);
        acc[i][0] = vfmaq_f32(acc[i][0], w0, av);
        acc[i][1] = vfmaq_f32(acc[i][1], w1, av);
      }
    }
  }
  }
  if (flags & kGemmFinal) {
    const float32x4_t lo = vdupq_n_f32(clamp->min), hi = vdupq_n_f32(clamp->max);
    for (size_t i = 0; i < MR; ++i) {
      acc[i][0] = vminq_f32(vmaxq_f32(acc[i][0], lo), hi);
      acc[i][1] = vminq_f32(vmaxq_f32(acc[i][1], lo), hi);
    }
  }
  for (size_t i = 0; i < mr; ++i) {
    if (nr == NR) {
      vst1q_f32(c + i * ldc, acc[i][0]);
      vst1q_f32(c + i * ldc + 4, acc[i][1]);
    } else {
      float row[NR];
      vst1q_f32(row, acc[i][0]);
      vst1q_f32(row + 4, acc[i][1]);
      for (size_t j = 0; j < nr; ++j) c[i * ldc + j] = row[j];
    }
  }
}

}  // namespace

void f32_igemm_8x8__neon(size_t mr, size_t nr, size_t kc, size_t ks, const float* const* a, const void* w,
                         const float* bias, float* c, size_t ldc, uint32_t flags, const MinMax* clamp) {
  igemm_8x8<float>(mr, nr, kc, ks, a, w, bias, c, ldc, flags, clamp);
}

void f32_f16w_igemm_8x8__neon(size_t mr, size_t nr, size_t kc, size_t ks, const float* const* a, const void* w,
                              const float* bias, float* c, size_t ldc, uint32_t flags, const MinMax* clamp) {
  igemm_8x8<uint16_t>(mr, nr, kc, ks, a, w, bias, c, ldc, flags, clamp);
}

}  // namespace edgesdk::kernels
