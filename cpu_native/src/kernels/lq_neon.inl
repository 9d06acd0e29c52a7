// aarch64 microkernel of the LQ bitwise GEMM (lq.h), included by lq.cc only (NEON is part of the
// base ISA). 8 lanes = 4 q registers of 2 x 64 bits per x-row, up to 4 x-rows: vcntq_u8 byte
// counts summed over up to 31 words (at most 248 per byte), then folded into the 64-bit lanes with
// pairwise widening adds (vpaddlq_u8, vpaddlq_u16, vpadalq_u32). The encoder is the scalar one.

namespace edgesdk::kernels {
namespace {

template <size_t MR>
void lq_gemm_neon_mr(size_t kc, size_t taps, const uint64_t* const* a, const ptrdiff_t* tap_off, const uint64_t* w, size_t np,
                     size_t panel_stride, int32_t* c) {
  for (size_t j = 0; j < np; ++j) {
    const uint64_t* wp = w + j * panel_stride;
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
      for (size_t r = 0; r < MR; ++r) ap[r] = a[r] + tap_off[t];
      for (size_t k = 0; k < kc; ++k, wp += 8) {
        const uint64x2_t w0 = vld1q_u64(wp), w1 = vld1q_u64(wp + 2), w2 = vld1q_u64(wp + 4), w3 = vld1q_u64(wp + 6);
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
      int32_t* out = c + (r * np + j) * 8;
      vst1q_s32(out, vreinterpretq_s32_u32(vcombine_u32(vmovn_u64(s[0]), vmovn_u64(s[1]))));
      vst1q_s32(out + 4, vreinterpretq_s32_u32(vcombine_u32(vmovn_u64(s[2]), vmovn_u64(s[3]))));
    }
  }
}

void lq_gemm_4x8__neon(size_t mr, size_t kc, size_t taps, const uint64_t* const* a, const ptrdiff_t* tap_off,
                       const uint64_t* w, size_t np, size_t panel_stride, int32_t* c) {
  switch (mr) {
    case 1: lq_gemm_neon_mr<1>(kc, taps, a, tap_off, w, np, panel_stride, c); break;
    case 2: lq_gemm_neon_mr<2>(kc, taps, a, tap_off, w, np, panel_stride, c); break;
    case 3: lq_gemm_neon_mr<3>(kc, taps, a, tap_off, w, np, panel_stride, c); break;
    default: lq_gemm_neon_mr<4>(kc, taps, a, tap_off, w, np, panel_stride, c); break;
  }
}

void lq_combine_8__neon(size_t pixels, size_t kx, size_t kw, const int32_t* c, const int32_t* cnt, const float* coef,
                        const float* base, size_t base_stride, float* y, size_t y_stride, float lo, float hi) {
  const float32x4_t vlo = vdupq_n_f32(lo), vhi = vdupq_n_f32(hi);
  for (size_t p = 0; p < pixels; ++p, y += y_stride, base += base_stride, c += kx * kw * 8, cnt += kx) {
    float32x4_t a0 = vld1q_f32(base), a1 = vld1q_f32(base + 4);
    for (size_t j = 0; j < kw; ++j)
      for (size_t i = 0; i < kx; ++i) {
        const int32_t* v = c + (i * kw + j) * 8;
        const float* cf = coef + (j * kx + i) * 8;
        const int32x4_t cr = vdupq_n_s32(cnt[i]);
        const int32x4_t v0 = vld1q_s32(v), v1 = vld1q_s32(v + 4);
        a0 = vfmaq_f32(a0, vld1q_f32(cf), vcvtq_f32_s32(vsubq_s32(vaddq_s32(v0, v0), cr)));
        a1 = vfmaq_f32(a1, vld1q_f32(cf + 4), vcvtq_f32_s32(vsubq_s32(vaddq_s32(v1, v1), cr)));
      }
    vst1q_f32(y, vminq_f32(vmaxq_f32(a0, vlo), vhi));
    vst1q_f32(y + 4, vminq_f32(vmaxq_f32(a1, vlo), vhi));
  }
}

const LqKernels kLqNeon{LqVariant::Neon, 4, lq_gemm_4x8__neon, lq_combine_8__neon, lq_encode__scalar, "b1_lqgemm_4x8__neon",
                        "f32_lqencode__scalar"};

}  // namespace
}  // namespace edgesdk::kernels
