// ARMv8.2-A dot-product (FEAT_DotProd: HWCAP asimddp) qu8 GEMM / indirect-GEMM microkernel, 4x16c4
// (neondot level: the neonfp16 table plus this kernel; dispatch.cc). This file alone is compiled with
// -march=armv8.2-a+dotprod (CMakeLists.txt); dispatch calls it only on CPUs that report the feature.
//
// SDOT multiplies 4 signed bytes by 4 signed bytes per 32-bit lane and adds the 4 products into the
// lane. The activations are unsigned, so they go in as x ^ 0x80 = x - 128 (int8) and the packed
// bias carries + 128 * sum_k w back (operators_qu8.cc: qu8_xor80 levels); exact in int32 like every
// other variant (|4 * 128 * 128| per step). UDOT/USDOT would need unsigned weights or FEAT_I8MM.
// Packed Qu8Layout::C4: per 4 k, 16 columns x 4 bytes = 4 q registers, each 4 columns' 4 k in its
// 32-bit lanes; per 16 k, each row's 16 activation bytes are one q register, and SDOT by element
// (lane t = k block t) multiplies them with the weights without broadcasts: 16 accumulators, 4 A
// and 4 W registers.
#include <arm_neon.h>

#include "kernels/ukernels.h"

#if !defined(__ARM_FEATURE_DOTPROD)
#error "qu8_neondot.cc must be compiled with -march=armv8.2-a+dotprod (see CMakeLists.txt)"
#endif

namespace edgesdk::kernels {
namespace {

#include "kernels/qu8_neon.inl"

constexpr size_t MR = kNeonDotQu8MR;  // 4
static_assert(kNeonDotQu8NR == 16, "four int32x4 per row");

// 4 activation bytes (a word of k) as int8 x - 128 in lane 0 of a q register.
static inline int8x16_t signed_word(uint32_t bytes) {
  return vreinterpretq_s8_u32(vdupq_n_u32(bytes ^ 0x80808080u));
}

template <size_t M>
void igemm(size_t mr, size_t nr, size_t kc, size_t ks, const uint8_t* const* a, const int8_t* w, const int32_t* bias,
           const int32_t* rq, uint8_t* c, size_t ldc, const Qu8Output* out) {
  int32x4_t acc[M][4];
  for (size_t v = 0; v < 4; ++v) {
    const int32x4_t b = vld1q_s32(bias + 4 * v);
    for (size_t i = 0; i < M; ++i) acc[i][v] = b;
  }
  const uint8x16_t flip = vdupq_n_u8(0x80);
  for (size_t s = 0; s < ks; ++s) {
    const uint8_t* r[M];
    for (size_t i = 0; i < M; ++i) r[i] = a[s * MR + i];
    size_t k = 0;
    for (; k + 16 <= kc; k += 16) {
      int8x16_t av[M];
      for (size_t i = 0; i < M; ++i) av[i] = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(r[i] + k), flip));
#define EDGESDK_STEP(lane)                                                  \
  {                                                                         \
    int8x16_t wv[4];                                                        \
    for (size_t v = 0; v < 4; ++v) wv[v] = vld1q_s8(w + 16 * v);            \
    w += 64;                                                                \
    for (size_t i = 0; i < M; ++i)                                          \
      for (size_t v = 0; v < 4; ++v) acc[i][v] = vdotq_laneq_s32(acc[i][v], wv[v], av[i], lane); \
  }
      EDGESDK_STEP(0) EDGESDK_STEP(1) EDGESDK_STEP(2) EDGESDK_STEP(3)
#undef EDGESDK_STEP
    }
    // Whole words of 4 k, then the last 1-3 bytes (zero-extended: the weights past kc are zero, and
    // the 0x80 the flip makes of the padding bytes meets them).
    for (; k < kc; k += 4) {
      int8x16_t av[M];
      for (size_t i = 0; i < M; ++i) av[i] = signed_word(k + 4 <= kc ? load_u32(r[i] + k) : load_u32_tail(r[i] + k, kc - k));
      int8x16_t wv[4];
      for (size_t v = 0; v < 4; ++v) wv[v] = vld1q_s8(w + 16 * v);
      w += 64;
      for (size_t i = 0; i < M; ++i)
        for (size_t v = 0; v < 4; ++v) acc[i][v] = vdotq_laneq_s32(acc[i][v], wv[v], av[i], 0);
    }
  }
  store_tile<M>(acc, mr, nr, rq, c, ldc, out);
}

}  // namespace

void qu8_igemm_4x16c4__neondot(size_t mr, size_t nr, size_t kc, size_t ks, const uint8_t* const* a, const void* w,
                               const int32_t* bias, const int32_t* rq, uint8_t* c, size_t ldc, const Qu8Output* out) {
  const int8_t* w8 = static_cast<const int8_t*>(w);
  switch (mr) {
    case 1: igemm<1>(mr, nr, kc, ks, a, w8, bias, rq, c, ldc, out); break;
    case 2: igemm<2>(mr, nr, kc, ks, a, w8, bias, rq, c, ldc, out); break;
    case 3: igemm<3>(mr, nr, kc, ks, a, w8, bias, rq, c, ldc, out); break;
    default: igemm<4>(mr, nr, kc, ks, a, w8, bias, rq, c, ldc, out); break;
  }
}

}  // namespace edgesdk::kernels
