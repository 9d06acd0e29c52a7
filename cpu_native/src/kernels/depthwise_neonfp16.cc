// ARMv8.2-A FP16 arithmetic (FEAT_FP16) depthwise convolution for fp16 sessions, NHWC. Built with
// -march=armv8.2-a+fp16 (this file only), run only on the neonfp16 level.
//
// Reads the fp16 copies of input and weights that the driver made (DepthwiseArgs::input_f16 /
// weights_f16): per tap, 8 channels cost one input load, one weight load and one FMLA .8h, where
// the fp32 kernel needs four loads and two FMLAs .4s. Numerics as the fp16 GEMM (gemm_neonfp16.cc):
// fp16 fused multiply-adds into fp16 accumulators, widened and added into fp32 accumulators
// (started at the fp32 bias) after every kF16KBlock in-bounds taps in (ky, kx) order, so a 3x3 or
// 4x4 window is one fp16 block and a 5x5 one is two. The clamp part of the activation is applied in
// registers; other kinds run the NEON fp32 activation kernel on each output pixel while it is in
// L1.
#include <arm_neon.h>

#include "kernels/ukernels.h"

#if !defined(__ARM_FEATURE_FP16_VECTOR_ARITHMETIC)
#error "depthwise_neonfp16.cc must be compiled with -march=armv8.2-a+fp16 (see CMakeLists.txt)"
#endif

namespace edgesdk::kernels {
namespace {

constexpr size_t KB = kF16KBlock;
constexpr size_t kMaxTaps = 256;  // larger windows (none in practice) take the fp32 NEON kernel

static inline float16x8_t load8(const uint16_t* p) { return vreinterpretq_f16_u16(vld1q_u16(p)); }
static inline float16x8_t load8_tail(const uint16_t* p, size_t n) {
  uint16_t tmp[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (size_t i = 0; i < n; ++i) tmp[i] = p[i];
  return load8(tmp);
}
static inline float32x4_t load4_tail(const float* p, size_t n) {
  float tmp[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (size_t i = 0; i < n && i < 4; ++i) tmp[i] = p[i];
  return vld1q_f32(tmp);
}

// 8 output channels: fp32 accumulators lo (channels 0-3) and hi (4-7).
struct Acc8 {
  float32x4_t lo, hi;
};

static inline Acc8 init8(const float* bias, size_t n) {
  if (bias == nullptr) return {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
  if (n == 8) return {vld1q_f32(bias), vld1q_f32(bias + 4)};
  return {load4_tail(bias, n), n > 4 ? load4_tail(bias + 4, n - 4) : vdupq_n_f32(0.0f)};
}

static inline void flush8(Acc8* acc, float16x8_t* h) {
  acc->lo = vaddq_f32(acc->lo, vcvt_f32_f16(vget_low_f16(*h)));
  acc->hi = vaddq_f32(acc->hi, vcvt_high_f32_f16(*h));
  *h = vdupq_n_f16(0);
}

static inline void store8(float* out, Acc8 acc, size_t n, float32x4_t lo, float32x4_t hi) {
  acc.lo = vminq_f32(vmaxq_f32(acc.lo, lo), hi);
  acc.hi = vminq_f32(vmaxq_f32(acc.hi, lo), hi);
  if (n == 8) {
    vst1q_f32(out, acc.lo);
    vst1q_f32(out + 4, acc.hi);
    return;
  }
  float tmp[8];
  vst1q_f32(tmp, acc.lo);
  vst1q_f32(tmp + 4, acc.hi);
  for (size_t i = 0; i < n; ++i) out[i] = tmp[i];
}

static inline bool tap_inside(size_t o, size_t stride, size_t kk, size_t dil, size_t pad, size_t extent, size_t* in) {
  const ptrdiff_t pos = static_cast<ptrdiff_t>(o * stride + kk * dil) - static_cast<ptrdiff_t>(pad);
  if (pos < 0 || pos >= static_cast<ptrdiff_t>(extent)) return false;
  *in = static_cast<size_t>(pos);
  return true;
}

void depthwise_impl(const DepthwiseArgs* a, size_t row_begin, size_t row_end) {
  if (a->kh * a->kw > kMaxTaps || a->input_f16 == nullptr || a->weights_f16 == nullptr) {
    f32_depthwise_4c__neon(a, row_begin, row_end);
    return;
  }
  const size_t oc_count = a->c * a->multiplier, mult = a->multiplier;
  const MinMax mm = clamp_part(a->act);
  const bool post = needs_post_pass(a->act);
  const float32x4_t lo = vdupq_n_f32(mm.min), hi = vdupq_n_f32(mm.max);
  size_t in_offset[kMaxTaps], tap[kMaxTaps];
  for (size_t row = row_begin; row < row_end; ++row) {
    const size_t b = row / a->oh, oy = row % a->oh;
    for (size_t ox = 0; ox < a->ow; ++ox) {
      float* out = a->output + ((b * a->oh + oy) * a->ow + ox) * a->out_stride;
      size_t taps = 0;
      for (size_t ky = 0; ky < a->kh; ++ky) {
        size_t iy;
        if (!tap_inside(oy, a->stride_h, ky, a->dil_h, a->pad_top, a->h, &iy)) continue;
        for (size_t kx = 0; kx < a->kw; ++kx) {
          size_t ix;
          if (!tap_inside(ox, a->stride_w, kx, a->dil_w, a->pad_left, a->w, &ix)) continue;
          in_offset[taps] = ((b * a->h + iy) * a->w + ix) * a->in_stride;
          tap[taps] = ky * a->kw + kx;
          ++taps;
        }
      }
      if (mult == 1) {
        size_t c = 0;
        // 16 channels at once: two independent FMLA chains.
        for (; c + 16 <= oc_count; c += 16) {
          Acc8 acc0 = init8(a->bias != nullptr ? a->bias + c : nullptr, 8);
          Acc8 acc1 = init8(a->bias != nullptr ? a->bias + c + 8 : nullptr, 8);
          float16x8_t h0 = vdupq_n_f16(0), h1 = vdupq_n_f16(0);
          size_t pending = 0;
          for (size_t t = 0; t < taps; ++t) {
            const uint16_t* x = a->input_f16 + in_offset[t] + c;
            const uint16_t* wt = a->weights_f16 + tap[t] * oc_count + c;
            h0 = vfmaq_f16(h0, load8(x), load8(wt));
            h1 = vfmaq_f16(h1, load8(x + 8), load8(wt + 8));
            if (++pending == KB) {
              flush8(&acc0, &h0);
              flush8(&acc1, &h1);
              pending = 0;
            }
          }
          flush8(&acc0, &h0);
          flush8(&acc1, &h1);
          store8(out + c, acc0, 8, lo, hi);
          store8(out + c + 8, acc1, 8, lo, hi);
        }
        for (; c < oc_count; c += 8) {
          const size_t n = oc_count - c < 8 ? oc_count - c : 8;
          Acc8 acc = init8(a->bias != nullptr ? a->bias + c : nullptr, n);
          float16x8_t h = vdupq_n_f16(0);
          size_t pending = 0;
          for (size_t t = 0; t < taps; ++t) {
            const uint16_t* x = a->input_f16 + in_offset[t] + c;
            const uint16_t* wt = a->weights_f16 + tap[t] * oc_count + c;
            h = n == 8 ? vfmaq_f16(h, load8(x), load8(wt)) : vfmaq_f16(h, load8_tail(x, n), load8_tail(wt, n));
            if (++pending == KB) {
              flush8(&acc, &h);
              pending = 0;
            }
          }
          flush8(&acc, &h);
          store8(out + c, acc, n, lo, hi);
        }
      } else {
        // Channel multiplier: one input value feeds `mult` consecutive output channels.
        for (size_t ic = 0; ic < a->c; ++ic) {
          for (size_t j = 0; j < mult; j += 8) {
            const size_t n = mult - j < 8 ? mult - j : 8;
            const size_t oc = ic * mult + j;
            Acc8 acc = init8(a->bias != nullptr ? a->bias + oc : nullptr, n);
            float16x8_t h = vdupq_n_f16(0);
            size_t pending = 0;
            for (size_t t = 0; t < taps; ++t) {
              const float16x8_t x = vreinterpretq_f16_u16(vld1q_dup_u16(a->input_f16 + in_offset[t] + ic));
              const uint16_t* wt = a->weights_f16 + tap[t] * oc_count + oc;
              h = vfmaq_f16(h, x, n == 8 ? load8(wt) : load8_tail(wt, n));
              if (++pending == KB) {
                flush8(&acc, &h);
                pending = 0;
              }
            }
            flush8(&acc, &h);
            store8(out + oc, acc, n, lo, hi);
          }
        }
      }
      if (post) f32_activation_4x__neon(out, oc_count, &a->act);
    }
  }
}

}  // namespace

void f16_f32acc_depthwise_16c__neonfp16(const DepthwiseArgs* a, size_t row_begin, size_t row_end) {
  depthwise_impl(a, row_begin, row_end);
}

}  // namespace edgesdk::kernels
