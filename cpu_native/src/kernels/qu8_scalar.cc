// Scalar qu8 kernels (ukernels.h, "Quantized uint8"): the portable path and the references the
// SIMD ones (qu8_<isa>.cc) must match bit for bit. Written for clarity, not speed: accumulators add
// in uint32 (the modulo-2^32 arithmetic of every SIMD variant, without signed-overflow UB) and every
// output goes through requantization.h's formulas.
#include <cmath>

#include "kernels/qu8_ukernels.h"
#include "kernels/requantization.h"
#include "kernels/ukernels.h"

namespace edgesdk::kernels {
namespace {

constexpr size_t MR = kScalarQu8MR, NR = kScalarQu8NR;

bool tap_inside(size_t o, size_t stride, size_t k, size_t dil, size_t pad, size_t extent, size_t* in) {
  const ptrdiff_t pos = static_cast<ptrdiff_t>(o * stride + k * dil) - static_cast<ptrdiff_t>(pad);
  if (pos < 0 || pos >= static_cast<ptrdiff_t>(extent)) return false;
  *in = static_cast<size_t>(pos);
  return true;
}

// The literal formula (requantization.h) from the table's (multiplier, left, right) of channel j.
uint8_t output_of(uint32_t acc, const int32_t* rq, size_t count, size_t j, const Qu8Output& out) {
  const int32_t shift = rq[kQu8RqLeft * count + j] - rq[kQu8RqRight * count + j];
  return qu8_clamp_output(qu8_requantize(static_cast<int32_t>(acc), rq[kQu8RqMultiplier * count + j], shift), out);
}

uint8_t output_of(uint32_t acc, const Qu8Requant& r, const Qu8Output& out) {
  return qu8_clamp_output(qu8_requantize(static_cast<int32_t>(acc), r.multiplier, r.left_shift - r.right_shift), out);
}

int32_t saturate_int32(int64_t v) { return static_cast<int32_t>(v < kInt32Min ? kInt32Min : v > kInt32Max ? kInt32Max : v); }

}  // namespace

// Packed layout KMajor (KR = 1): w[s][k][NR] int8.
void qu8_igemm_4x4__scalar(size_t mr, size_t nr, size_t kc, size_t ks, const uint8_t* const* a, const void* w_raw,
                           const int32_t* bias, const int32_t* rq, uint8_t* c, size_t ldc, const Qu8Output* out) {
  const int8_t* w = static_cast<const int8_t*>(w_raw);
  uint32_t acc[MR][NR];
  for (size_t i = 0; i < MR; ++i)
    for (size_t j = 0; j < NR; ++j) acc[i][j] = static_cast<uint32_t>(bias[j]);
  for (size_t s = 0; s < ks; ++s) {
    const uint8_t* const* rows = a + s * MR;
    for (size_t k = 0; k < kc; ++k) {
      for (size_t i = 0; i < mr; ++i) {
        const int32_t av = rows[i][k];
        for (size_t j = 0; j < NR; ++j) acc[i][j] += static_cast<uint32_t>(av * w[j]);
      }
      w += NR;
    }
  }
  for (size_t i = 0; i < mr; ++i)
    for (size_t j = 0; j < nr; ++j) c[i * ldc + j] = output_of(acc[i][j], rq, NR, j, *out);
}

void qu8_depthwise__scalar(const Qu8DepthwiseArgs* a, size_t row_begin, size_t row_end) {
  const size_t oc_count = a->c * a->multiplier;
  for (size_t row = row_begin; row < row_end; ++row) {
    const size_t b = row / a->oh, oy = row % a->oh;
    for (size_t ox = 0; ox < a->ow; ++ox) {
      uint8_t* out = a->output + ((b * a->oh + oy) * a->ow + ox) * a->out_stride;
      for (size_t oc = 0; oc < oc_count; ++oc) {
        uint32_t acc = a->bias != nullptr ? static_cast<uint32_t>(a->bias[oc]) : 0u;
        const size_t ic = oc / a->multiplier;
        for (size_t ky = 0; ky < a->kh; ++ky) {
          size_t iy;
          if (!tap_inside(oy, a->stride_h, ky, a->dil_h, a->pad_top, a->h, &iy)) continue;
          for (size_t kx = 0; kx < a->kw; ++kx) {
            size_t ix;
            if (!tap_inside(ox, a->stride_w, kx, a->dil_w, a->pad_left, a->w, &ix)) continue;
            const int32_t x = a->input[((b * a->h + iy) * a->w + ix) * a->in_stride + ic];
            acc += static_cast<uint32_t>((x - a->input_zero_point) * a->weights[(ky * a->kw + kx) * oc_count + oc]);
          }
        }
        out[oc] = output_of(acc, a->rq, oc_count, oc, a->out);
      }
    }
  }
}

void qu8_maxpool__scalar(const Qu8PoolArgs* a, size_t row_begin, size_t row_end) {
  for (size_t row = row_begin; row < row_end; ++row) {
    const size_t b = row / a->oh, oy = row % a->oh;
    for (size_t ox = 0; ox < a->ow; ++ox) {
      uint8_t* out = a->output + ((b * a->oh + oy) * a->ow + ox) * a->out_stride;
      for (size_t c = 0; c < a->c; ++c) {
        uint8_t best = 0;
        for (size_t ky = 0; ky < a->kh; ++ky) {
          size_t iy;
          if (!tap_inside(oy, a->stride_h, ky, a->dil_h, a->pad_top, a->h, &iy)) continue;
          for (size_t kx = 0; kx < a->kw; ++kx) {
            size_t ix;
            if (!tap_inside(ox, a->stride_w, kx, a->dil_w, a->pad_left, a->w, &ix)) continue;
            const uint8_t v = a->input[((b * a->h + iy) * a->w + ix) * a->in_stride + c];
            best = v > best ? v : best;
          }
        }
        out[c] = best;
      }
    }
  }
}

void qu8_avgpool__scalar(const Qu8PoolArgs* a, size_t row_begin, size_t row_end) {
  const size_t entries = a->kh * a->kw + 1;
  for (size_t row = row_begin; row < row_end; ++row) {
    const size_t b = row / a->oh, oy = row % a->oh;
    for (size_t ox = 0; ox < a->ow; ++ox) {
      uint8_t* out = a->output + ((b * a->oh + oy) * a->ow + ox) * a->out_stride;
      // The divisor, as the fp32 kernels count it: taps inside the input, or (count_include_pad)
      // inside the padded input.
      size_t inside = 0, padded = 0;
      for (size_t ky = 0; ky < a->kh; ++ky) {
        const ptrdiff_t iy = static_cast<ptrdiff_t>(oy * a->stride_h + ky * a->dil_h) - static_cast<ptrdiff_t>(a->pad_top);
        for (size_t kx = 0; kx < a->kw; ++kx) {
          const ptrdiff_t ix =
              static_cast<ptrdiff_t>(ox * a->stride_w + kx * a->dil_w) - static_cast<ptrdiff_t>(a->pad_left);
          inside += iy >= 0 && iy < static_cast<ptrdiff_t>(a->h) && ix >= 0 && ix < static_cast<ptrdiff_t>(a->w);
          padded += iy < static_cast<ptrdiff_t>(a->h + a->pad_bottom) && ix < static_cast<ptrdiff_t>(a->w + a->pad_right);
        }
      }
      const size_t count = a->count_include_pad ? padded : inside;
      for (size_t c = 0; c < a->c; ++c) {
        uint32_t acc = 0;
        for (size_t ky = 0; ky < a->kh; ++ky) {
          size_t iy;
          if (!tap_inside(oy, a->stride_h, ky, a->dil_h, a->pad_top, a->h, &iy)) continue;
          for (size_t kx = 0; kx < a->kw; ++kx) {
            size_t ix;
            if (!tap_inside(ox, a->stride_w, kx, a->dil_w, a->pad_left, a->w, &ix)) continue;
            const int32_t x = a->input[((b * a->h + iy) * a->w + ix) * a->in_stride + c];
            acc += static_cast<uint32_t>(x - a->input_zero_point);
          }
        }
        out[c] = output_of(acc, a->rq, entries, count, a->out);
      }
    }
  }
}

void qu8_global_avgpool__scalar(const uint8_t* x, size_t pixels, size_t c, size_t in_stride, uint8_t* y,
                                int32_t input_zero_point, const Qu8Requant* rq, const Qu8Output* out) {
  for (size_t ch = 0; ch < c; ++ch) {
    uint32_t acc = 0;
    for (size_t p = 0; p < pixels; ++p) acc += static_cast<uint32_t>(x[p * in_stride + ch] - input_zero_point);
    y[ch] = output_of(acc, *rq, *out);
  }
}

void qu8_add__scalar(const Qu8BinaryArgs* a, size_t row_begin, size_t row_end) {
  const Qu8Requant& ra = a->a_rq;
  const Qu8Requant& rb = a->b_rq;
  for (size_t r = row_begin; r < row_end; ++r)
    for (size_t i = 0; i < a->c; ++i) {
      const size_t bi = a->broadcast == Broadcast::None ? r * a->c + i : a->broadcast == Broadcast::PerChannel ? i : 0;
      const int32_t xa = (a->a[r * a->c + i] - a->a_zero_point) * (1 << kQu8AddLeftShift);
      const int32_t xb = (a->b[bi] - a->b_zero_point) * (1 << kQu8AddLeftShift);
      const int32_t sa = qu8_requantize(xa, ra.multiplier, ra.left_shift - ra.right_shift);
      const int32_t sb = qu8_requantize(xb, rb.multiplier, rb.left_shift - rb.right_shift);
      const int32_t sum = saturate_int32(static_cast<int64_t>(sa) + sb);
      a->y[r * a->c + i] = output_of(static_cast<uint32_t>(sum), a->out_rq, a->out);
    }
}

void qu8_mul__scalar(const Qu8BinaryArgs* a, size_t row_begin, size_t row_end) {
  for (size_t r = row_begin; r < row_end; ++r)
    for (size_t i = 0; i < a->c; ++i) {
      const size_t bi = a->broadcast == Broadcast::None ? r * a->c + i : a->broadcast == Broadcast::PerChannel ? i : 0;
      const int32_t prod = (a->a[r * a->c + i] - a->a_zero_point) * (a->b[bi] - a->b_zero_point);
      a->y[r * a->c + i] = output_of(static_cast<uint32_t>(prod), a->out_rq, a->out);
    }
}

void qu8_requantize__scalar(const uint8_t* x, uint8_t* y, size_t n, int32_t input_zero_point, const Qu8Requant* rq,
                            const Qu8Output* out) {
  for (size_t i = 0; i < n; ++i) y[i] = output_of(static_cast<uint32_t>(x[i] - input_zero_point), *rq, *out);
}

// QuantizeLinear (qu8_ukernels.h): fp32 division, nearbyint in the default rounding mode (to
// nearest, halves to even), fp32 addition, NaN -> qmin, clamp, the code's low byte.
void qu8_quantize__scalar(const float* x, uint8_t* y, size_t n, const Qu8QuantizeParams* params) {
  const float lo = static_cast<float>(params->qmin), hi = static_cast<float>(params->qmax);
  for (size_t i = 0; i < n; ++i) {
    float t = std::nearbyint(x[i] / params->scale) + params->zero_point;
    t = std::isnan(t) ? lo : t < lo ? lo : t > hi ? hi : t;
    y[i] = static_cast<uint8_t>(static_cast<int32_t>(t));
  }
}

// DequantizeLinear (qu8_ukernels.h): the code less its zero point (exact), times the scale.
void qu8_dequantize__scalar(const uint8_t* x, float* y, size_t n, const Qu8DequantizeParams* params) {
  for (size_t i = 0; i < n; ++i) {
    const int32_t code = params->is_signed ? static_cast<int8_t>(x[i]) : x[i];
    y[i] = static_cast<float>(code - params->zero_point) * params->scale;
  }
}

#include "kernels/u8_interleave.inl"

void u8_interleave__scalar(const uint8_t* planes, size_t plane_stride, size_t c, uint8_t* y, size_t n) {
  u8_interleave_impl::interleave(planes, plane_stride, c, y, n);
}

// The reference of the qu8_lut family: one table read per byte, four a step.
void qu8_lut__scalar(const uint8_t* x, uint8_t* y, size_t n, const uint8_t* table) {
  for (; n >= 4; n -= 4, x += 4, y += 4) {
    const uint8_t a = table[x[0]], b = table[x[1]], c = table[x[2]], d = table[x[3]];
    y[0] = a;
    y[1] = b;
    y[2] = c;
    y[3] = d;
  }
  for (; n > 0; --n) *y++ = table[*x++];
}

}  // namespace edgesdk::kernels
