// NEON (ARMv8.0) qu8 kernels of the neon level (and neonfp16, which keeps them): GEMM / indirect
// GEMM, depthwise convolution, pooling, Add / Mul and requantization, bit for bit the scalar ones
// (qu8_scalar.cc). Products are formed exactly in 16 bits: uint8 activations widen to int16
// (0..255, or x - x_zp in -255..255 with USUBL) and int8 weights to int16, and SMLAL / SMULL
// multiply them into int32 lanes. Channel and element tails (< one vector) run requantization.h's
// scalar formulas.
#include <arm_neon.h>

#include <cstring>

#include "kernels/qu8_ukernels.h"
#include "kernels/requantization.h"
#include "kernels/ukernels.h"

namespace edgesdk::kernels {
namespace {

#include "kernels/qu8_neon.inl"

constexpr size_t MR = kNeonQu8MR;  // 4
static_assert(kNeonQu8NR == 16, "four int32x4 per row");

// GEMM 4x16, packed Qu8Layout::KMajor (16 int8 weights per k): 16 accumulators; per 8 k, each row's
// 8 activations widened once (one q register), then per k the 16 weights widened (2 q registers)
// and 4 SMLAL by lane per row. 16 + 4 + 2 (+2 while widening) of the 32 registers.
template <size_t M>
void igemm(size_t mr, size_t nr, size_t kc, size_t ks, const uint8_t* const* a, const int8_t* w, const int32_t* bias,
           const int32_t* rq, uint8_t* c, size_t ldc, const Qu8Output* out) {
  int32x4_t acc[M][4];
  for (size_t v = 0; v < 4; ++v) {
    const int32x4_t b = vld1q_s32(bias + 4 * v);
    for (size_t i = 0; i < M; ++i) acc[i][v] = b;
  }
  for (size_t s = 0; s < ks; ++s) {
    const uint8_t* r[M];
    for (size_t i = 0; i < M; ++i) r[i] = a[s * MR + i];
    size_t k = 0;
    for (; k + 8 <= kc; k += 8) {
      int16x8_t av[M];
      for (size_t i = 0; i < M; ++i) av[i] = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(r[i] + k)));
#define EDGESDK_STEP(lane)                                                          \
  {                                                                                 \
    const int8x16_t wv = vld1q_s8(w);                                               \
    w += 16;                                                                        \
    const int16x8_t wl = vmovl_s8(vget_low_s8(wv)), wh = vmovl_high_s8(wv);         \
    for (size_t i = 0; i < M; ++i) {                                                \
      acc[i][0] = vmlal_laneq_s16(acc[i][0], vget_low_s16(wl), av[i], lane);        \
      acc[i][1] = vmlal_high_laneq_s16(acc[i][1], wl, av[i], lane);                 \
      acc[i][2] = vmlal_laneq_s16(acc[i][2], vget_low_s16(wh), av[i], lane);        \
      acc[i][3] = vmlal_high_laneq_s16(acc[i][3], wh, av[i], lane);                 \
    }                                                                               \
  }
      EDGESDK_STEP(0) EDGESDK_STEP(1) EDGESDK_STEP(2) EDGESDK_STEP(3)
      EDGESDK_STEP(4) EDGESDK_STEP(5) EDGESDK_STEP(6) EDGESDK_STEP(7)
#undef EDGESDK_STEP
    }
    for (; k < kc; ++k) {
      const int8x16_t wv = vld1q_s8(w);
      w += 16;
      const int16x8_t wl = vmovl_s8(vget_low_s8(wv)), wh = vmovl_high_s8(wv);
      for (size_t i = 0; i < M; ++i) {
        const int16_t x = r[i][k];
        acc[i][0] = vmlal_n_s16(acc[i][0], vget_low_s16(wl), x);
        acc[i][1] = vmlal_n_s16(acc[i][1], vget_high_s16(wl), x);
        acc[i][2] = vmlal_n_s16(acc[i][2], vget_low_s16(wh), x);
        acc[i][3] = vmlal_n_s16(acc[i][3], vget_high_s16(wh), x);
      }
    }
  }
  store_tile<M>(acc, mr, nr, rq, c, ldc, out);
}

// The contiguous range [begin, end) of kernel taps whose input position lies in [0, extent).
void tap_range(size_t o, size_t stride, size_t kernel, size_t dil, size_t pad, size_t extent, size_t* begin,
               size_t* end) {
  size_t k = 0;
  const ptrdiff_t base = static_cast<ptrdiff_t>(o * stride) - static_cast<ptrdiff_t>(pad);
  while (k < kernel && base + static_cast<ptrdiff_t>(k * dil) < 0) ++k;
  *begin = k;
  while (k < kernel && base + static_cast<ptrdiff_t>(k * dil) < static_cast<ptrdiff_t>(extent)) ++k;
  *end = k;
}

// Taps inside the padded input: the scalar kernel's count_include_pad divisor.
size_t padded_taps(size_t o, size_t stride, size_t kernel, size_t dil, size_t pad0, size_t extent, size_t pad1) {
  size_t count = 0;
  for (size_t k = 0; k < kernel; ++k) count += o * stride + k * dil < extent + pad0 + pad1;
  return count;
}

uint8_t output_of(int32_t acc, const Qu8Requant& r, const Qu8Output& out) {
  return qu8_clamp_output(qu8_requantize(acc, r), out);
}

int32_t add_saturate(int32_t a, int32_t b) {
  const int64_t s = static_cast<int64_t>(a) + b;
  return static_cast<int32_t>(s < kInt32Min ? kInt32Min : s > kInt32Max ? kInt32Max : s);
}

}  // namespace

void qu8_igemm_4x16__neon(size_t mr, size_t nr, size_t kc, size_t ks, const uint8_t* const* a, const void* w,
                          const int32_t* bias, const int32_t* rq, uint8_t* c, size_t ldc, const Qu8Output* out) {
  const int8_t* w8 = static_cast<const int8_t*>(w);
  switch (mr) {
    case 1: igemm<1>(mr, nr, kc, ks, a, w8, bias, rq, c, ldc, out); break;
    case 2: igemm<2>(mr, nr, kc, ks, a, w8, bias, rq, c, ldc, out); break;
    case 3: igemm<3>(mr, nr, kc, ks, a, w8, bias, rq, c, ldc, out); break;
    default: igemm<4>(mr, nr, kc, ks, a, w8, bias, rq, c, ldc, out); break;
  }
}

namespace {

// The columns [lo, hi) of output positions whose window lies inside [0, extent) along one axis.
void inside_range(size_t out, size_t stride, size_t kernel, size_t dil, size_t pad, size_t extent, size_t* lo,
                  size_t* hi) {
  const size_t span = (kernel - 1) * dil;
  *lo = min_size(out, div_up(pad, stride));
  *hi = extent + pad < span + 1 ? *lo : min_size(out, (extent - 1 + pad - span) / stride + 1);
  if (*hi < *lo) *hi = *lo;
}

// acc0/acc1 (channels 0-3 / 4-7) += x * the 8 weights at w.
static inline void mla8(int32x4_t& acc0, int32x4_t& acc1, int16x8_t x, const int8_t* w) {
  const int16x8_t wv = vmovl_s8(vld1_s8(w));
  acc0 = vmlal_s16(acc0, vget_low_s16(x), vget_low_s16(wv));
  acc1 = vmlal_high_s16(acc1, x, wv);
}

// 8 channels per block: per tap, SMLAL / SMLAL2 multiply the widened bytes with the widened
// weights into two int32x4. A pixel whose window lies inside the input starts from bias_folded and
// multiplies the raw bytes (0..255 as int16); a border pixel starts from the bias, skips the padding
// taps and takes x - x_zp from USUBL for the others. Channel blocks are the outer loop of a row.
// Multiplier 1 only (the operator runs the scalar kernel otherwise).
template <size_t KW>
void depthwise_8c(const Qu8DepthwiseArgs* a, size_t row_begin, size_t row_end) {
  const size_t C = a->c, kw = KW != 0 ? KW : a->kw;
  const uint8x8_t zp = vdup_n_u8(static_cast<uint8_t>(a->input_zero_point));
  const OutVec o = out_vec(a->out);
  const size_t row_step = a->dil_h * a->w * a->in_stride, col_step = a->dil_w * a->in_stride;
  size_t ox_lo, ox_hi;
  inside_range(a->ow, a->stride_w, kw, a->dil_w, a->pad_left, a->w, &ox_lo, &ox_hi);
  for (size_t row = row_begin; row < row_end; ++row) {
    const size_t b = row / a->oh, oy = row % a->oh;
    size_t ky0, ky1;
    tap_range(oy, a->stride_h, a->kh, a->dil_h, a->pad_top, a->h, &ky0, &ky1);
    const bool rows_inside = ky0 == 0 && ky1 == a->kh;
    const uint8_t* image = a->input + b * a->h * a->w * a->in_stride;
    uint8_t* y = a->output + (b * a->oh + oy) * a->ow * a->out_stride;
    size_t c0 = 0;
    for (; c0 + 8 <= C; c0 += 8) {
      const RqVec q0 = rq_load(a->rq, C, c0), q1 = rq_load(a->rq, C, c0 + 4);
      const int32x4_t bias0 = a->bias != nullptr ? vld1q_s32(a->bias + c0) : vdupq_n_s32(0);
      const int32x4_t bias1 = a->bias != nullptr ? vld1q_s32(a->bias + c0 + 4) : vdupq_n_s32(0);
      const int32x4_t folded0 = vld1q_s32(a->bias_folded + c0), folded1 = vld1q_s32(a->bias_folded + c0 + 4);
      const int8_t* wc = a->weights + c0;
      const uint8_t* top = image + (oy * a->stride_h - (rows_inside ? a->pad_top : 0)) * a->w * a->in_stride + c0;
      for (size_t ox = 0; ox < a->ow; ++ox) {
        int32x4_t acc0, acc1;
        if (rows_inside && ox >= ox_lo && ox < ox_hi) {
          acc0 = folded0;
          acc1 = folded1;
          const uint8_t* p = top + (ox * a->stride_w - a->pad_left) * a->in_stride;
          const int8_t* wr = wc;
          for (size_t ky = 0; ky < a->kh; ++ky, p += row_step, wr += kw * C)
            for (size_t kx = 0; kx < kw; ++kx)
              mla8(acc0, acc1, vreinterpretq_s16_u16(vmovl_u8(vld1_u8(p + kx * col_step))), wr + kx * C);
        } else {
          size_t kx0, kx1;
          tap_range(ox, a->stride_w, kw, a->dil_w, a->pad_left, a->w, &kx0, &kx1);
          acc0 = bias0;
          acc1 = bias1;
          for (size_t ky = ky0; ky < ky1; ++ky) {
            const size_t iy = oy * a->stride_h + ky * a->dil_h - a->pad_top;
            for (size_t kx = kx0; kx < kx1; ++kx) {
              const size_t ix = ox * a->stride_w + kx * a->dil_w - a->pad_left;
              const uint8x8_t x = vld1_u8(image + (iy * a->w + ix) * a->in_stride + c0);
              mla8(acc0, acc1, vreinterpretq_s16_u16(vsubl_u8(x, zp)), wc + (ky * kw + kx) * C);
            }
          }
        }
        vst1_u8(y + ox * a->out_stride + c0, to_u8x8(requantize(acc0, q0), requantize(acc1, q1), o));
      }
    }
    for (; c0 < C; ++c0) {  // the last C % 8 channels
      const Qu8Requant r = qu8_requant_at(a->rq, C, c0);
      for (size_t ox = 0; ox < a->ow; ++ox) {
        size_t kx0, kx1;
        tap_range(ox, a->stride_w, kw, a->dil_w, a->pad_left, a->w, &kx0, &kx1);
        uint32_t acc = a->bias != nullptr ? static_cast<uint32_t>(a->bias[c0]) : 0u;
        for (size_t ky = ky0; ky < ky1; ++ky) {
          const size_t iy = oy * a->stride_h + ky * a->dil_h - a->pad_top;
          for (size_t kx = kx0; kx < kx1; ++kx) {
            const size_t ix = ox * a->stride_w + kx * a->dil_w - a->pad_left;
            const int32_t x = image[(iy * a->w + ix) * a->in_stride + c0] - a->input_zero_point;
            acc += static_cast<uint32_t>(x * a->weights[(ky * kw + kx) * C + c0]);
          }
        }
        y[ox * a->out_stride + c0] = output_of(static_cast<int32_t>(acc), r, a->out);
      }
    }
  }
}

}  // namespace

void qu8_depthwise_8c__neon(const Qu8DepthwiseArgs* a, size_t row_begin, size_t row_end) {
  if (a->kw == 3) depthwise_8c<3>(a, row_begin, row_end);
  else depthwise_8c<0>(a, row_begin, row_end);
}

void qu8_maxpool_16c__neon(const Qu8PoolArgs* a, size_t row_begin, size_t row_end) {
  for (size_t row = row_begin; row < row_end; ++row) {
    const size_t b = row / a->oh, oy = row % a->oh;
    size_t ky0, ky1;
    tap_range(oy, a->stride_h, a->kh, a->dil_h, a->pad_top, a->h, &ky0, &ky1);
    for (size_t ox = 0; ox < a->ow; ++ox) {
      size_t kx0, kx1;
      tap_range(ox, a->stride_w, a->kw, a->dil_w, a->pad_left, a->w, &kx0, &kx1);
      uint8_t* y = a->output + ((b * a->oh + oy) * a->ow + ox) * a->out_stride;
      size_t c0 = 0;
      for (; c0 + 16 <= a->c; c0 += 16) {
        uint8x16_t best = vdupq_n_u8(0);  // a window with no input tap gives 0, as the scalar kernel
        for (size_t ky = ky0; ky < ky1; ++ky)
          for (size_t kx = kx0; kx < kx1; ++kx) {
            const size_t iy = oy * a->stride_h + ky * a->dil_h - a->pad_top, ix = ox * a->stride_w + kx * a->dil_w - a->pad_left;
            best = vmaxq_u8(best, vld1q_u8(a->input + ((b * a->h + iy) * a->w + ix) * a->in_stride + c0));
          }
        vst1q_u8(y + c0, best);
      }
      for (; c0 < a->c; ++c0) {
        uint8_t best = 0;
        for (size_t ky = ky0; ky < ky1; ++ky)
          for (size_t kx = kx0; kx < kx1; ++kx) {
            const size_t iy = oy * a->stride_h + ky * a->dil_h - a->pad_top, ix = ox * a->stride_w + kx * a->dil_w - a->pad_left;
            const uint8_t v = a->input[((b * a->h + iy) * a->w + ix) * a->in_stride + c0];
            best = v > best ? v : best;
          }
        y[c0] = best;
      }
    }
  }
}

void qu8_avgpool_8c__neon(const Qu8PoolArgs* a, size_t row_begin, size_t row_end) {
  const size_t entries = a->kh * a->kw + 1;
  const OutVec o = out_vec(a->out);
  for (size_t row = row_begin; row < row_end; ++row) {
    const size_t b = row / a->oh, oy = row % a->oh;
    size_t ky0, ky1;
    tap_range(oy, a->stride_h, a->kh, a->dil_h, a->pad_top, a->h, &ky0, &ky1);
    const size_t py = padded_taps(oy, a->stride_h, a->kh, a->dil_h, a->pad_top, a->h, a->pad_bottom);
    for (size_t ox = 0; ox < a->ow; ++ox) {
      size_t kx0, kx1;
      tap_range(ox, a->stride_w, a->kw, a->dil_w, a->pad_left, a->w, &kx0, &kx1);
      const size_t px = padded_taps(ox, a->stride_w, a->kw, a->dil_w, a->pad_left, a->w, a->pad_right);
      const size_t inside = (ky1 - ky0) * (kx1 - kx0);
      const Qu8Requant r = qu8_requant_at(a->rq, entries, a->count_include_pad ? py * px : inside);
      const RqVec q = rq_broadcast(r);
      const uint32_t zp_sum = static_cast<uint32_t>(inside) * static_cast<uint32_t>(a->input_zero_point);
      uint8_t* y = a->output + ((b * a->oh + oy) * a->ow + ox) * a->out_stride;
      size_t c0 = 0;
      for (; c0 + 8 <= a->c; c0 += 8) {
        uint32x4_t s0 = vdupq_n_u32(0), s1 = vdupq_n_u32(0);
        for (size_t ky = ky0; ky < ky1; ++ky)
          for (size_t kx = kx0; kx < kx1; ++kx) {
            const size_t iy = oy * a->stride_h + ky * a->dil_h - a->pad_top, ix = ox * a->stride_w + kx * a->dil_w - a->pad_left;
            const uint16x8_t x = vmovl_u8(vld1_u8(a->input + ((b * a->h + iy) * a->w + ix) * a->in_stride + c0));
            s0 = vaddw_u16(s0, vget_low_u16(x));
            s1 = vaddw_high_u16(s1, x);
          }
        const int32x4_t a0 = vreinterpretq_s32_u32(vsubq_u32(s0, vdupq_n_u32(zp_sum)));
        const int32x4_t a1 = vreinterpretq_s32_u32(vsubq_u32(s1, vdupq_n_u32(zp_sum)));
        vst1_u8(y + c0, to_u8x8(requantize(a0, q), requantize(a1, q), o));
      }
      for (; c0 < a->c; ++c0) {
        uint32_t acc = 0;
        for (size_t ky = ky0; ky < ky1; ++ky)
          for (size_t kx = kx0; kx < kx1; ++kx) {
            const size_t iy = oy * a->stride_h + ky * a->dil_h - a->pad_top, ix = ox * a->stride_w + kx * a->dil_w - a->pad_left;
            acc += a->input[((b * a->h + iy) * a->w + ix) * a->in_stride + c0];
          }
        y[c0] = output_of(static_cast<int32_t>(acc - zp_sum), r, a->out);
      }
    }
  }
}

void qu8_global_avgpool_16c__neon(const uint8_t* x, size_t pixels, size_t c, size_t in_stride, uint8_t* y,
                                  int32_t input_zero_point, const Qu8Requant* rq, const Qu8Output* out) {
  const RqVec q = rq_broadcast(*rq);
  const OutVec o = out_vec(*out);
  const uint32_t zp_sum = static_cast<uint32_t>(pixels) * static_cast<uint32_t>(input_zero_point);
  const uint32x4_t zp = vdupq_n_u32(zp_sum);
  size_t c0 = 0;
  for (; c0 + 16 <= c; c0 += 16) {
    uint32x4_t s[4] = {vdupq_n_u32(0), vdupq_n_u32(0), vdupq_n_u32(0), vdupq_n_u32(0)};
    for (size_t p = 0; p < pixels; ++p) {
      const uint8x16_t v = vld1q_u8(x + p * in_stride + c0);
      const uint16x8_t lo = vmovl_u8(vget_low_u8(v)), hi = vmovl_high_u8(v);
      s[0] = vaddw_u16(s[0], vget_low_u16(lo));
      s[1] = vaddw_high_u16(s[1], lo);
      s[2] = vaddw_u16(s[2], vget_low_u16(hi));
      s[3] = vaddw_high_u16(s[3], hi);
    }
    int32x4_t z[4];
    for (size_t j = 0; j < 4; ++j) z[j] = requantize(vreinterpretq_s32_u32(vsubq_u32(s[j], zp)), q);
    vst1q_u8(y + c0, to_u8x16(z[0], z[1], z[2], z[3], o));
  }
  for (; c0 < c; ++c0) {
    uint32_t acc = 0;
    for (size_t p = 0; p < pixels; ++p) acc += x[p * in_stride + c0];
    y[c0] = output_of(static_cast<int32_t>(acc - zp_sum), *rq, *out);
  }
}

void qu8_add_8x__neon(const Qu8BinaryArgs* a, size_t row_begin, size_t row_end) {
  const RqVec qa = rq_broadcast(a->a_rq), qb = rq_broadcast(a->b_rq), qo = rq_broadcast(a->out_rq);
  const OutVec o = out_vec(a->out);
  const uint8x8_t azp = vdup_n_u8(static_cast<uint8_t>(a->a_zero_point));
  const uint8x8_t bzp = vdup_n_u8(static_cast<uint8_t>(a->b_zero_point));
  const uint8x8_t b_scalar = vdup_n_u8(a->b[0]);
  for (size_t r = row_begin; r < row_end; ++r) {
    const uint8_t* ar = a->a + r * a->c;
    const uint8_t* br = a->broadcast == Broadcast::None ? a->b + r * a->c : a->b;
    uint8_t* yr = a->y + r * a->c;
    size_t i = 0;
    for (; i + 8 <= a->c; i += 8) {
      const int16x8_t da = vreinterpretq_s16_u16(vsubl_u8(vld1_u8(ar + i), azp));
      const int16x8_t db =
          vreinterpretq_s16_u16(vsubl_u8(a->broadcast == Broadcast::Scalar ? b_scalar : vld1_u8(br + i), bzp));
      int32x4_t z[2];
      for (size_t h = 0; h < 2; ++h) {
        const int32x4_t xa = vshlq_n_s32(h == 0 ? vmovl_s16(vget_low_s16(da)) : vmovl_high_s16(da), kQu8AddLeftShift);
        const int32x4_t xb = vshlq_n_s32(h == 0 ? vmovl_s16(vget_low_s16(db)) : vmovl_high_s16(db), kQu8AddLeftShift);
        // SQADD: the saturating int32 sum, which requantize's clamp of the exact sum equals.
        z[h] = requantize(vqaddq_s32(requantize(xa, qa), requantize(xb, qb)), qo);
      }
      vst1_u8(yr + i, to_u8x8(z[0], z[1], o));
    }
    for (; i < a->c; ++i) {
      const int32_t xb = a->broadcast == Broadcast::Scalar ? a->b[0] : br[i];
      const int32_t sa = qu8_requantize((ar[i] - a->a_zero_point) * (1 << kQu8AddLeftShift), a->a_rq);
      const int32_t sb = qu8_requantize((xb - a->b_zero_point) * (1 << kQu8AddLeftShift), a->b_rq);
      yr[i] = output_of(add_saturate(sa, sb), a->out_rq, a->out);
    }
  }
}

void qu8_mul_8x__neon(const Qu8BinaryArgs* a, size_t row_begin, size_t row_end) {
  const RqVec qo = rq_broadcast(a->out_rq);
  const OutVec o = out_vec(a->out);
  const uint8x8_t azp = vdup_n_u8(static_cast<uint8_t>(a->a_zero_point));
  const uint8x8_t bzp = vdup_n_u8(static_cast<uint8_t>(a->b_zero_point));
  const uint8x8_t b_scalar = vdup_n_u8(a->b[0]);
  for (size_t r = row_begin; r < row_end; ++r) {
    const uint8_t* ar = a->a + r * a->c;
    const uint8_t* br = a->broadcast == Broadcast::None ? a->b + r * a->c : a->b;
    uint8_t* yr = a->y + r * a->c;
    size_t i = 0;
    for (; i + 8 <= a->c; i += 8) {
      const int16x8_t da = vreinterpretq_s16_u16(vsubl_u8(vld1_u8(ar + i), azp));
      const int16x8_t db =
          vreinterpretq_s16_u16(vsubl_u8(a->broadcast == Broadcast::Scalar ? b_scalar : vld1_u8(br + i), bzp));
      const int32x4_t p0 = vmull_s16(vget_low_s16(da), vget_low_s16(db)), p1 = vmull_high_s16(da, db);
      vst1_u8(yr + i, to_u8x8(requantize(p0, qo), requantize(p1, qo), o));
    }
    for (; i < a->c; ++i) {
      const int32_t xb = a->broadcast == Broadcast::Scalar ? a->b[0] : br[i];
      yr[i] = output_of((ar[i] - a->a_zero_point) * (xb - a->b_zero_point), a->out_rq, a->out);
    }
  }
}

void qu8_requantize_8x__neon(const uint8_t* x, uint8_t* y, size_t n, int32_t input_zero_point, const Qu8Requant* rq,
                             const Qu8Output* out) {
  const RqVec q = rq_broadcast(*rq);
  const OutVec o = out_vec(*out);
  const uint8x8_t zp = vdup_n_u8(static_cast<uint8_t>(input_zero_point));
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const int16x8_t d = vreinterpretq_s16_u16(vsubl_u8(vld1_u8(x + i), zp));
    vst1_u8(y + i, to_u8x8(requantize(vmovl_s16(vget_low_s16(d)), q), requantize(vmovl_high_s16(d), q), o));
  }
  for (; i < n; ++i) y[i] = output_of(x[i] - input_zero_point, *rq, *out);
}

// Table lookup (ukernels.h, Qu8LutUkernel): the table as four 64-byte quarters; TBL on the first
// (an index past 63 gives 0), then TBX on the others with the index less 64, 128, 192 (TBX leaves
// a lane whose index is past 63 as it was, and the wrapped differences of the other quarters are).
void qu8_lut_16x__neon(const uint8_t* x, uint8_t* y, size_t n, const uint8_t* table) {
  const uint8x16x4_t t0 = vld1q_u8_x4(table), t1 = vld1q_u8_x4(table + 64), t2 = vld1q_u8_x4(table + 128),
                     t3 = vld1q_u8_x4(table + 192);
  const uint8x16_t q = vdupq_n_u8(64);
  auto lut16 = [&](uint8x16_t v) {
    uint8x16_t r = vqtbl4q_u8(t0, v);
    v = vsubq_u8(v, q);
    r = vqtbx4q_u8(r, t1, v);
    v = vsubq_u8(v, q);
    r = vqtbx4q_u8(r, t2, v);
    v = vsubq_u8(v, q);
    return vqtbx4q_u8(r, t3, v);
  };
  size_t i = 0;
  for (; i + 16 <= n; i += 16) vst1q_u8(y + i, lut16(vld1q_u8(x + i)));
  if (i < n) {  // the tail through a buffer: nothing past x + n is read or past y + n written
    uint8_t bytes[16] = {};
    std::memcpy(bytes, x + i, n - i);
    vst1q_u8(bytes, lut16(vld1q_u8(bytes)));
    std::memcpy(y + i, bytes, n - i);
  }
}

// QuantizeLinear (qu8_ukernels.h): FDIV, FRINTN (to nearest, halves to even), FADD, then FMAXNM
// against qmin (a quiet NaN, which the division makes of any NaN, gives qmin) and FMIN; the
// conversion is exact and XTN keeps each code's low byte. Tails run the scalar formulas.
void qu8_quantize_16x__neon(const float* x, uint8_t* y, size_t n, const Qu8QuantizeParams* params) {
  const float32x4_t scale = vdupq_n_f32(params->scale), zp = vdupq_n_f32(params->zero_point);
  const float32x4_t lo = vdupq_n_f32(static_cast<float>(params->qmin));
  const float32x4_t hi = vdupq_n_f32(static_cast<float>(params->qmax));
  auto codes = [&](float32x4_t v) {
    const float32x4_t t = vaddq_f32(vrndnq_f32(vdivq_f32(v, scale)), zp);
    return vmovn_s32(vcvtq_s32_f32(vminq_f32(vmaxnmq_f32(t, lo), hi)));
  };
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const int16x8_t a = vcombine_s16(codes(vld1q_f32(x + i)), codes(vld1q_f32(x + i + 4)));
    const int16x8_t b = vcombine_s16(codes(vld1q_f32(x + i + 8)), codes(vld1q_f32(x + i + 12)));
    vst1q_u8(y + i, vreinterpretq_u8_s8(vcombine_s8(vmovn_s16(a), vmovn_s16(b))));
  }
  if (i < n) qu8_quantize__scalar(x + i, y + i, n - i, params);
}

// DequantizeLinear (qu8_ukernels.h): codes widened to int32 (USHLL/SSHLL), less the zero point, to
// fp32 (SCVTF: exact), one FMUL; the tail by the scalar formula.
void qu8_dequantize_16x__neon(const uint8_t* x, float* y, size_t n, const Qu8DequantizeParams* params) {
  const float32x4_t scale = vdupq_n_f32(params->scale);
  const int32x4_t zp = vdupq_n_s32(params->zero_point);
  auto four = [&](int16x4_t codes) { return vmulq_f32(vcvtq_f32_s32(vsubq_s32(vmovl_s16(codes), zp)), scale); };
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const uint8x16_t bytes = vld1q_u8(x + i);
    int16x8_t lo, hi;
    if (params->is_signed) {
      lo = vmovl_s8(vget_low_s8(vreinterpretq_s8_u8(bytes)));
      hi = vmovl_high_s8(vreinterpretq_s8_u8(bytes));
    } else {
      lo = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(bytes)));
      hi = vreinterpretq_s16_u16(vmovl_high_u8(bytes));
    }
    vst1q_f32(y + i, four(vget_low_s16(lo)));
    vst1q_f32(y + i + 4, four(vget_high_s16(lo)));
    vst1q_f32(y + i + 8, four(vget_low_s16(hi)));
    vst1q_f32(y + i + 12, four(vget_high_s16(hi)));
  }
  if (i < n) qu8_dequantize__scalar(x + i, y + i, n - i, params);
}

#include "kernels/u8_interleave.inl"

void u8_interleave__neon(const uint8_t* planes, size_t plane_stride, size_t c, uint8_t* y, size_t n) {
  u8_interleave_impl::interleave(planes, plane_stride, c, y, n);
}

}  // namespace edgesdk::kernels
