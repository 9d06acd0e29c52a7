// Scalar kernels for every non-GEMM family: the portable path on CPUs without SIMD support and
// the references the SIMD kernels are tested against. Written for clarity, not speed.
#include <cmath>
#include <limits>

#include "kernels/ukernels.h"

namespace edgesdk::kernels {
namespace {

bool tap_inside(size_t o, size_t stride, size_t k, size_t dil, size_t pad, size_t extent, size_t* in) {
  const ptrdiff_t pos = static_cast<ptrdiff_t>(o * stride + k * dil) - static_cast<ptrdiff_t>(pad);
  if (pos < 0 || pos >= static_cast<ptrdiff_t>(extent)) return false;
  *in = static_cast<size_t>(pos);
  return true;
}

}  // namespace

void f32_activation_scalar(float* x, size_t n, const Activation* act) {
  for (size_t i = 0; i < n; ++i) x[i] = activate_reference(x[i], *act);
}

void f32_depthwise_scalar(const DepthwiseArgs* a, size_t row_begin, size_t row_end) {
  const size_t oc_count = a->c * a->multiplier;
  for (size_t row = row_begin; row < row_end; ++row) {
    const size_t b = row / a->oh, oy = row % a->oh;
    for (size_t ox = 0; ox < a->ow; ++ox) {
      float* out = a->output + ((b * a->oh + oy) * a->ow + ox) * a->out_stride;
      for (size_t oc = 0; oc < oc_count; ++oc) {
        float acc = a->bias != nullptr ? a->bias[oc] : 0.0f;
        const size_t ic = oc / a->multiplier;
        for (size_t ky = 0; ky < a->kh; ++ky) {
          size_t iy;
          if (!tap_inside(oy, a->stride_h, ky, a->dil_h, a->pad_top, a->h, &iy)) continue;
          for (size_t kx = 0; kx < a->kw; ++kx) {
            size_t ix;
            if (!tap_inside(ox, a->stride_w, kx, a->dil_w, a->pad_left, a->w, &ix)) continue;
            const float x = a->input[((b * a->h + iy) * a->w + ix) * a->in_stride + ic];
            acc += x * a->weights[(ky * a->kw + kx) * oc_count + oc];
          }
        }
        out[oc] = activate_reference(acc, a->act);
      }
    }
  }
}

void f32_maxpool_scalar(const PoolArgs* a, size_t row_begin, size_t row_end) {
  for (size_t row = row_begin; row < row_end; ++row) {
    const size_t b = row / a->oh, oy = row % a->oh;
    for (size_t ox = 0; ox < a->ow; ++ox) {
      float* out = a->output + ((b * a->oh + oy) * a->ow + ox) * a->out_stride;
      for (size_t c = 0; c < a->c; ++c) {
        float best = -std::numeric_limits<float>::infinity();
        for (size_t ky = 0; ky < a->kh; ++ky) {
          size_t iy;
          if (!tap_inside(oy, a->stride_h, ky, a->dil_h, a->pad_top, a->h, &iy)) continue;
          for (size_t kx = 0; kx < a->kw; ++kx) {
            size_t ix;
            if (!tap_inside(ox, a->stride_w, kx, a->dil_w, a->pad_left, a->w, &ix)) continue;
            const float v = a->input[((b * a->h + iy) * a->w + ix) * a->in_stride + c];
            // A NaN anywhere in the window makes the result NaN (numpy's max; std::fmax would skip it).
            if (v > best || std::isnan(v)) best = std::isnan(best) ? best : v;
          }
        }
        out[c] = activate_reference(best, a->act);
      }
    }
  }
}

void f32_avgpool_scalar(const PoolArgs* a, size_t row_begin, size_t row_end) {
  for (size_t row = row_begin; row < row_end; ++row) {
    const size_t b = row / a->oh, oy = row % a->oh;
    for (size_t ox = 0; ox < a->ow; ++ox) {
      float* out = a->output + ((b * a->oh + oy) * a->ow + ox) * a->out_stride;
      // Divisor: taps inside the input, or (count_include_pad) inside the padded input.
      size_t inside = 0, padded = 0;
      for (size_t ky = 0; ky < a->kh; ++ky) {
        const ptrdiff_t iy = static_cast<ptrdiff_t>(oy * a->stride_h + ky * a->dil_h) - static_cast<ptrdiff_t>(a->pad_top);
        for (size_t kx = 0; kx < a->kw; ++kx) {
          const ptrdiff_t ix = static_cast<ptrdiff_t>(ox * a->stride_w + kx * a->dil_w) - static_cast<ptrdiff_t>(a->pad_left);
          const bool in_y = iy >= 0 && iy < static_cast<ptrdiff_t>(a->h);
          const bool in_x = ix >= 0 && ix < static_cast<ptrdiff_t>(a->w);
          inside += in_y && in_x;
          padded += iy < static_cast<ptrdiff_t>(a->h + a->pad_bottom) && ix < static_cast<ptrdiff_t>(a->w + a->pad_right);
        }
      }
      const size_t count = a->count_include_pad ? padded : inside;
      for (size_t c = 0; c < a->c; ++c) {
        float sum = 0.0f;
        for (size_t ky = 0; ky < a->kh; ++ky) {
          size_t iy;
          if (!tap_inside(oy, a->stride_h, ky, a->dil_h, a->pad_top, a->h, &iy)) continue;
          for (size_t kx = 0; kx < a->kw; ++kx) {
            size_t ix;
            if (!tap_inside(ox, a->stride_w, kx, a->dil_w, a->pad_left, a->w, &ix)) continue;
            sum += a->input[((b * a->h + iy) * a->w + ix) * a->in_stride + c];
          }
        }
        out[c] = activate_reference(count > 0 ? sum / static_cast<float>(count) : 0.0f, a->act);
      }
    }
  }
}

void f32_global_avgpool_scalar(const float* x, size_t pixels, size_t c, size_t in_stride, float* y,
                               const Activation* act) {
  for (size_t ch = 0; ch < c; ++ch) {
    float sum = 0.0f;
    for (size_t p = 0; p < pixels; ++p) sum += x[p * in_stride + ch];
    y[ch] = activate_reference(sum / static_cast<float>(pixels), *act);
  }
}

void f32_binary_scalar(const BinaryArgs* a, size_t row_begin, size_t row_end) {
  for (size_t r = row_begin; r < row_end; ++r) {
    const float* ar = a->a + r * a->a_stride;
    float* yr = a->y + r * a->y_stride;
    for (size_t i = 0; i < a->c; ++i) {
      const float bv = a->broadcast == Broadcast::None ? a->b[r * a->b_stride + i]
                       : a->broadcast == Broadcast::PerChannel ? a->b[i]
                                                               : a->b[0];
      const float lhs = a->b_first ? bv : ar[i], rhs = a->b_first ? ar[i] : bv;
      const float v = a->op == BinaryOp::Add ? lhs + rhs : a->op == BinaryOp::Sub ? lhs - rhs : lhs * rhs;
      yr[i] = activate_reference(v, a->act);
    }
  }
}

void f32_softmax_scalar(const float* x, float* y, size_t n) {
  float mx = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < n; ++i) mx = std::fmax(mx, x[i]);
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i]) - mx);
  const double scale = 1.0 / sum;
  for (size_t i = 0; i < n; ++i) y[i] = static_cast<float>(std::exp(static_cast<double>(x[i]) - mx) * scale);
}

// Clustered, lane-word layout with L = kScalarLanes (see ukernels.h).
// (The scalar table has clustered_nibbles = false, so `nibbles` is never set here.)
void f32_clustered_decode_scalar(const uint32_t* words, size_t words_per_row, const float* table, unsigned bits,
                                 bool /*nibbles*/, float* out) {
  const size_t lanes = kScalarLanes, fields = 32 / bits;
  const uint32_t mask = (1u << bits) - 1u;
  for (size_t wi = 0; wi < words_per_row; ++wi) {
    const size_t blk = wi / lanes, lane = wi % lanes;
    for (size_t f = 0; f < fields; ++f)
      out[blk * lanes * fields + f * lanes + lane] = table[(words[wi] >> (f * bits)) & mask];
  }
}

void f32_clustered_gemv_scalar(const ClusteredGemvArgs* a, size_t row_begin, size_t row_end) {
  const size_t lanes = kScalarLanes, fields = 32 / a->bits;
  const uint32_t mask = (1u << a->bits) - 1u;
  for (size_t r = row_begin; r < row_end; ++r) {
    const uint32_t* words = a->words + r * a->words_per_row;
    const float* table = a->tables + (a->per_row_table ? r * a->table_size : 0);
    float acc = a->bias != nullptr ? a->bias[r] : 0.0f;
    for (size_t wi = 0; wi < a->words_per_row; ++wi) {
      const size_t blk = wi / lanes, lane = wi % lanes;
      for (size_t f = 0; f < fields; ++f)
        acc += table[(words[wi] >> (f * a->bits)) & mask] * a->x[blk * lanes * fields + f * lanes + lane];
    }
    a->y[r] = activate_reference(acc, a->act);
  }
}

void f32_nnm_gather_scalar(const NnmGatherArgs* a, size_t p_begin, size_t p_end) {
  for (size_t p = p_begin; p < p_end; ++p) {
    const float* row = a->cent + p * a->cent_stride;
    float* out = a->out + p * a->out_stride;
    for (size_t k = 0; k < a->k; ++k) {
      float acc = a->bias != nullptr ? a->bias[k] : 0.0f;
      for (size_t g = 0; g < a->groups; ++g) acc += row[g * a->kc + static_cast<size_t>(a->assign[g * a->k + k])];
      out[k] = activate_reference(acc, a->act);
    }
  }
}

}  // namespace edgesdk::kernels
