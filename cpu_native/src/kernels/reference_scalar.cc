// Scalar kernels for every non-GEMM family: the portable path on CPUs without SIMD support and
// the references the SIMD kernels are tested against. Written for clarity, not speed.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/ukernels.h"

namespace edgesdk::kernels {
namespace {

// NaN-propagating max / min (std::fmax would skip a NaN).
float max_keep_nan(float a, float b) { return std::isnan(a) || std::isnan(b) ? std::nanf("") : (b > a ? b : a); }
float min_keep_nan(float a, float b) { return std::isnan(a) || std::isnan(b) ? std::nanf("") : (b < a ? b : a); }

// Calls f(column base pointer offset, output offset) for every column of the units (ukernels.h).
template <class F>
void for_each_column(const AxisShape& s, size_t unit_begin, size_t unit_end, F f) {
  const size_t blocks = axis_blocks(s);
  for (size_t u = unit_begin; u < unit_end; ++u) {
    const size_t o = u / blocks, c0 = s.inner == 1 ? 0 : (u % blocks) * s.block;
    const size_t c1 = std::min(c0 + (s.inner == 1 ? 1 : s.block), s.inner);
    for (size_t c = c0; c < c1; ++c) f(o * s.axis * s.inner + c, o * s.inner + c);
  }
}

bool tap_inside(size_t o, size_t stride, size_t k, size_t dil, size_t pad, size_t extent, size_t* in) {
  const ptrdiff_t pos = static_cast<ptrdiff_t>(o * stride + k * dil) - static_cast<ptrdiff_t>(pad);
  if (pos < 0 || pos >= static_cast<ptrdiff_t>(extent)) return false;
  *in = static_cast<size_t>(pos);
  return true;
}

}  // namespace

void f32_activation__scalar(float* x, size_t n, const Activation* act) {
  for (size_t i = 0; i < n; ++i) x[i] = activate_reference(x[i], *act);
}

void f32_depthwise__scalar(const DepthwiseArgs* a, size_t row_begin, size_t row_end) {
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

void f32_maxpool__scalar(const PoolArgs* a, size_t row_begin, size_t row_end) {
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

void f32_avgpool__scalar(const PoolArgs* a, size_t row_begin, size_t row_end) {
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

void f32_global_avgpool__scalar(const float* x, size_t pixels, size_t c, size_t in_stride, float* y,
                                const Activation* act) {
  for (size_t ch = 0; ch < c; ++ch) {
    float sum = 0.0f;
    for (size_t p = 0; p < pixels; ++p) sum += x[p * in_stride + ch];
    y[ch] = activate_reference(sum / static_cast<float>(pixels), *act);
  }
}

void f32_binary__scalar(const BinaryArgs* a, size_t row_begin, size_t row_end) {
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

void f32_softmax__scalar(const float* x, float* y, size_t n) {
  float mx = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < n; ++i) mx = std::fmax(mx, x[i]);
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i]) - mx);
  const double scale = 1.0 / sum;
  for (size_t i = 0; i < n; ++i) y[i] = static_cast<float>(std::exp(static_cast<double>(x[i]) - mx) * scale);
}

// Clustered, lane-word layout with L = kScalarLanes (see ukernels.h).
// (The scalar table has clustered_nibbles = false, so `nibbles` is never set here.)
void f32_clustered_decode__scalar(const uint32_t* words, size_t words_per_row, const float* table, unsigned bits,
                                  bool /*nibbles*/, float* out) {
  const size_t lanes = kScalarLanes, fields = 32 / bits;
  const uint32_t mask = (1u << bits) - 1u;
  for (size_t wi = 0; wi < words_per_row; ++wi) {
    const size_t blk = wi / lanes, lane = wi % lanes;
    for (size_t f = 0; f < fields; ++f)
      out[blk * lanes * fields + f * lanes + lane] = table[(words[wi] >> (f * bits)) & mask];
  }
}

void f32_clustered_gemv__scalar(const ClusteredGemvArgs* a, size_t row_begin, size_t row_end) {
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

void f32_nnm_gather__scalar(const NnmGatherArgs* a, size_t p_begin, size_t p_end) {
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

// ---- normalisation, softmax along an axis, reductions (double accumulation) -------------------------
void f32_row_norm__scalar(const RowNormArgs* a, size_t row_begin, size_t row_end) {
  const size_t n = a->n;
  for (size_t r = row_begin; r < row_end; ++r) {
    const float* x = a->x + r * n;
    float* y = a->y + r * n;
    double sum = 0.0, squares = 0.0;
    for (size_t i = 0; i < n; ++i) sum += x[i];
    const double mean = sum / static_cast<double>(n);
    for (size_t i = 0; i < n; ++i) squares += (x[i] - mean) * (x[i] - mean);
    const double inv = 1.0 / std::sqrt(squares / static_cast<double>(n) + a->eps);
    for (size_t i = 0; i < n; ++i) {
      const size_t p = a->per_column ? i : r % a->channels;
      const double b = a->bias != nullptr ? a->bias[p] : 0.0;
      y[i] = static_cast<float>((x[i] - mean) * inv * a->scale[p] + b);
    }
  }
}

// One softmax / log-softmax column: n values `stride` apart (x and y may alias).
static void softmax_column(const float* x, float* y, size_t n, size_t stride, bool log) {
  float mx = -std::numeric_limits<float>::infinity();
  for (size_t j = 0; j < n; ++j) mx = max_keep_nan(mx, x[j * stride]);
  double sum = 0.0;
  for (size_t j = 0; j < n; ++j) sum += std::exp(static_cast<double>(x[j * stride]) - mx);
  const double lse = std::log(sum);
  for (size_t j = 0; j < n; ++j) {
    const double d = static_cast<double>(x[j * stride]) - mx;
    y[j * stride] = static_cast<float>(log ? d - lse : std::exp(d) / sum);
  }
}

void f32_log_softmax__scalar(const float* x, float* y, size_t n) { softmax_column(x, y, n, 1, true); }

void f32_softmax_axis__scalar(const SoftmaxAxisArgs* a, size_t unit_begin, size_t unit_end) {
  for_each_column(a->shape, unit_begin, unit_end, [&](size_t in, size_t) {
    softmax_column(a->x + in, a->y + in, a->shape.axis, a->shape.inner, a->log);
  });
}

static float reduce_column(const float* x, size_t n, size_t stride, ReduceOp op) {
  const float inf = std::numeric_limits<float>::infinity();
  if (op == ReduceOp::Max || op == ReduceOp::Min || op == ReduceOp::LogSumExp) {
    float m = op == ReduceOp::Min ? inf : -inf;
    for (size_t j = 0; j < n; ++j) m = op == ReduceOp::Min ? min_keep_nan(m, x[j * stride]) : max_keep_nan(m, x[j * stride]);
    if (op != ReduceOp::LogSumExp || !std::isfinite(m)) return m;  // log-sum-exp of a +-inf or NaN max is it
    double sum = 0.0;
    for (size_t j = 0; j < n; ++j) sum += std::exp(static_cast<double>(x[j * stride]) - m);
    return static_cast<float>(m + std::log(sum));
  }
  const bool squares = op == ReduceOp::SumSquare || op == ReduceOp::L2;
  double sum = 0.0;
  for (size_t j = 0; j < n; ++j) sum += squares ? static_cast<double>(x[j * stride]) * x[j * stride] : x[j * stride];
  if (op == ReduceOp::Mean) return static_cast<float>(sum / static_cast<double>(n));
  return static_cast<float>(op == ReduceOp::L2 ? std::sqrt(sum) : sum);
}

void f32_reduce__scalar(const ReduceArgs* a, size_t unit_begin, size_t unit_end) {
  for_each_column(a->shape, unit_begin, unit_end, [&](size_t in, size_t out) {
    a->y[out] = reduce_column(a->x + in, a->shape.axis, a->shape.inner, a->op);
  });
}

// Does v replace the best so far? NaN is the extreme; ties go to the first (or last) index.
static bool arg_takes(float v, float best, bool is_max, bool last) {
  if (std::isnan(best)) return last && std::isnan(v);
  if (std::isnan(v)) return true;
  if (last) return is_max ? v >= best : v <= best;
  return is_max ? v > best : v < best;
}

void f32_argreduce__scalar(const ArgReduceArgs* a, size_t unit_begin, size_t unit_end) {
  for_each_column(a->shape, unit_begin, unit_end, [&](size_t in, size_t out) {
    const float* x = a->x + in;
    size_t best = 0;
    for (size_t j = 1; j < a->shape.axis; ++j)
      if (arg_takes(x[j * a->shape.inner], x[best * a->shape.inner], a->is_max, a->select_last)) best = j;
    a->y[out] = static_cast<int64_t>(best);
  });
}

// ---- transposed convolution gather ---------------------------------------------------------------------
// Does tap k of an axis take output position o from an input position (and which)?
static bool reaches(size_t o, size_t k, size_t pad, size_t stride, size_t dil, size_t extent, size_t* in) {
  const ptrdiff_t t = static_cast<ptrdiff_t>(o + pad) - static_cast<ptrdiff_t>(k * dil);
  if (t < 0 || t % static_cast<ptrdiff_t>(stride) != 0 || static_cast<size_t>(t) / stride >= extent) return false;
  *in = static_cast<size_t>(t) / stride;
  return true;
}

// Sum of the contributions to output channel oc of pixel (b, oy, ox).
static float col2im_sum(const Col2ImArgs* a, size_t b, size_t oy, size_t ox, size_t oc) {
  const size_t g = oc / a->cout_g, j = oc % a->cout_g;
  float acc = a->bias != nullptr ? a->bias[oc] : 0.0f;
  for (size_t ky = 0; ky < a->kh; ++ky) {
    size_t iy;
    if (!reaches(oy, ky, a->pad_top, a->stride_h, a->dil_h, a->h, &iy)) continue;
    for (size_t kx = 0; kx < a->kw; ++kx) {
      size_t ix;
      if (!reaches(ox, kx, a->pad_left, a->stride_w, a->dil_w, a->w, &ix)) continue;
      const size_t pixel = (b * a->h + iy) * a->w + ix, tap = ky * a->kw + kx;
      acc += a->col == nullptr ? a->x[pixel * a->c_out + oc] * a->dw_weights[tap * a->c_out + oc]
                               : a->col[pixel * a->col_stride + (g * a->kh * a->kw + tap) * a->cout_g + j];
    }
  }
  return acc;
}

void f32_col2im__scalar(const Col2ImArgs* a, size_t row_begin, size_t row_end) {
  for (size_t row = row_begin; row < row_end; ++row)
    for (size_t ox = 0; ox < a->ow; ++ox)
      for (size_t oc = 0; oc < a->c_out; ++oc)
        a->y[(row * a->ow + ox) * a->c_out + oc] = activate_reference(col2im_sum(a, row / a->oh, row % a->oh, ox, oc), a->act);
}

// ---- resize ----------------------------------------------------------------------------------------------
// Value at (plane, source y, source x, channel) of x: plane is n*C + c (nchw) or the image (nhwc).
static float resize_source(const ResizeArgs* a, size_t plane, int32_t y, int32_t x, size_t ch) {
  const size_t iy = static_cast<size_t>(y), ix = static_cast<size_t>(x);
  return a->nhwc ? a->x[((plane * a->h + iy) * a->w + ix) * a->c + ch] : a->x[(plane * a->h + iy) * a->w + ix];
}

template <class F>
static void for_each_resized(const ResizeArgs* a, size_t row_begin, size_t row_end, F value) {
  const size_t channels = a->nhwc ? a->c : 1;
  for (size_t row = row_begin; row < row_end; ++row)
    for (size_t ox = 0; ox < a->ow; ++ox)
      for (size_t ch = 0; ch < channels; ++ch)
        a->y[(row * a->ow + ox) * channels + ch] = value(row / a->oh, row % a->oh, ox, ch);
}

void f32_resize_nearest__scalar(const ResizeArgs* a, size_t row_begin, size_t row_end, float* /*scratch*/) {
  for_each_resized(a, row_begin, row_end, [&](size_t plane, size_t oy, size_t ox, size_t ch) {
    return resize_source(a, plane, a->iy0[oy], a->ix0[ox], ch);
  });
}

void f32_resize_linear__scalar(const ResizeArgs* a, size_t row_begin, size_t row_end, float* /*scratch*/) {
  for_each_resized(a, row_begin, row_end, [&](size_t plane, size_t oy, size_t ox, size_t ch) {
    const float wx = a->wx[ox], wy = a->wy[oy];
    auto along_x = [&](int32_t y) {
      return (1.0f - wx) * resize_source(a, plane, y, a->ix0[ox], ch) + wx * resize_source(a, plane, y, a->ix1[ox], ch);
    };
    return (1.0f - wy) * along_x(a->iy0[oy]) + wy * along_x(a->iy1[oy]);
  });
}

}  // namespace edgesdk::kernels
