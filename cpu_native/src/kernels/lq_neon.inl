// aarch64 microkernel of the LQ bitwise GEMM (lq.h), included by lq.cc only (NEON is part of the
// base ISA). 8 lanes = 4 q registers of 2 x 64 bits per x-row, up to 4 x-rows: vcntq_u8 byte
// counts summed over up to 31 words (at most 248 per byte), then folded into the 64-bit lanes with
// pairwise widening adds (vpaddlq_u8, vpaddlq_u16, vpadalq_u32). The encoder is the scalar one.

namespace edgesdk::kernels {
namespace {

template <size_t MR>
void lq_gemm_neon_mr(size_t kc, size_t taps, const uint64_t* const* a, size_t a_stride, const uint64_t* w,
                     const float* const* coef, const int32_t* cnt, float* const* y) {
  uint8x16_t acc8[MR][4];
  uint64x2_t acc64[MR][4];
  for (size_t r = 0; r < MR; ++r)
    for (size_t h = 0; h < 4; ++h) {
      acc8[r][h] = vdupq_n_u8(0);
      acc64[r][h] = vdupq_n_u64(0);
    }
  unsigned left = 31;
  for (size_t t = 0; t < taps; ++t) {
    const uint64_t* ap[MR];
    for (size_t r = 0; r < MR; ++r) ap[r] = a[t * a_stride + r];
    for (size_t k = 0; k < kc; ++k, w += 8) {
      const uint64x2_t w0 = vld1q_u64(w), w1 = vld1q_u64(w + 2), w2 = vld1q_u64(w + 4), w3 = vld1q_u64(w + 6);
      for (size_t r = 0; r < MR; ++r) {
        const uint64x2_t xv = vdupq_n_u64(ap[r][k]);
        acc8[r][0] = vaddq_u8(acc8[r][0], vcntq_u8(vreinterpretq_u8_u64(vandq_u64(xv, w0))));
        acc8[r][1] = vaddq_u8(acc8[r][1], vcntq_u8(vreinterpretq_u8_u64(vandq_u64(xv, w1))));
        acc8[r][2] = vaddq_u8(acc8[r][2], vcntq_u8(vreinterpretq_u8_u64(vandq_u64(xv, w2))));
        acc8[r][3] = vaddq_u8(acc8[r][3], vcntq_u8(vreinterpretq_u8_u64(vandq_u64(xv, w3))));
      }
      if (--left == 0) {
        left = 31;
        for (size_t r = 0; r < MR; ++r)
          for (size_t h = 0; h < 4; ++h) {
            acc64[r][h] = vpadalq_u32(acc64[r][h], vpaddlq_u16(vpaddlq_u8(acc8[r][h])));
            acc8[r][h] = vdupq_n_u8(0);
          }
      }
    }
  }
  for (size_t r = 0; r < MR; ++r) {
    uint64x2_t s[4];
    for (size_t h = 0; h < 4; ++h) s[h] = vpadalq_u32(acc64[r][h], vpaddlq_u16(vpaddlq_u8(acc8[r][h])));
    const int32x4_t c0 = vreinterpretq_s32_u32(vcombine_u32(vmovn_u64(s[0]), vmovn_u64(s[1])));
    const int32x4_t c1 = vreinterpretq_s32_u32(vcombine_u32(vmovn_u64(s[2]), vmovn_u64(s[3])));
    const int32x4_t cr = vdupq_n_s32(cnt[r]);
    const float32x4_t d0 = vcvtq_f32_s32(vsubq_s32(vaddq_s32(c0, c0), cr));
    const float32x4_t d1 = vcvtq_f32_s32(vsubq_s32(vaddq_s32(c1, c1), cr));
    vst1q_f32(y[r], vfmaq_f32(vld1q_f32(y[r]), vld1q_f32(coef[r]), d0));
    vst1q_f32(y[r] + 4, vfmaq_f32(vld1q_f32(y[r] + 4), vld1q_f32(coef[r] + 4), d1));
  }
}

void lq_gemm_4x8__neon(size_t mr, size_t kc, size_t taps, const uint64_t* const* a, size_t a_stride,
                       const uint64_t* w, const float* const* coef, const int32_t* cnt, float* const* y) {
  switch (mr) {
    case 1: lq_gemm_neon_mr<1>(kc, taps, a, a_stride, w, coef, cnt, y); break;
    case 2: lq_gemm_neon_mr<2>(kc, taps, a, a_stride, w, coef, cnt, y); break;
    case 3: lq_gemm_neon_mr<3>(kc, taps, a, a_stride, w, coef, cnt, y); break;
    default: lq_gemm_neon_mr<4>(kc, taps, a, a_stride, w, coef, cnt, y); break;
  }
}

const LqKernels kLqNeon{LqVariant::Neon, 4, lq_gemm_4x8__neon, lq_encode__scalar, "b1_lqgemm_4x8__neon",
                        "f32_lqencode__scalar"};

}  // namespace
}  // namespace edgesdk::kernels
