// Drivers of operators_nn.h: argument checks, work splitting over the thread pool, and for batched
// MatMul and ConvTranspose the packing and tiling around the GEMM microkernels.
#include "kernels/operators_nn.h"

#include <cstring>
#include <stdexcept>

#include "kernels/thread_pool.h"

namespace edgesdk::kernels {
namespace {

const KernelTable& table_or_active(const KernelTable* t) { return t != nullptr ? *t : active_kernels(); }

void require(bool ok, const char* what) {
  if (!ok) throw std::invalid_argument(what);
}

// Runs fn(unit_begin, unit_end) over `units` work units of about `unit_floats` floats each, in
// tasks of at least ~16K floats so that small units do not pay a scheduling step each.
template <class F>
void parallel_units(size_t units, size_t unit_floats, size_t threads, F fn) {
  const size_t per_task = max_size(1, 16384 / max_size(unit_floats, 1));
  parallel_for(div_up(units, per_task), threads, [&](size_t begin, size_t end) {
    fn(begin * per_task, min_size(units, end * per_task));
  });
}

// Columns per unit of the strided families: 64 (whole cache lines), fewer when that leaves too
// few units to share among the threads.
AxisShape axis_shape(size_t outer, size_t axis, size_t inner, size_t threads) {
  size_t block = 64;
  while (block > 16 && outer * div_up(inner, block) < 4 * threads) block /= 2;
  return AxisShape{axis, inner, block};
}

void fill(float* y, size_t n, float v) {
  for (size_t i = 0; i < n; ++i) y[i] = v;
}

}  // namespace

// ---- normalisation ---------------------------------------------------------------------------------

void layer_norm(const float* x, float* y, size_t rows, size_t cols, const float* scale, const float* bias, float eps,
                size_t threads, const KernelTable* t) {
  require(cols > 0 && scale != nullptr, "layer_norm: empty rows or no scale");
  const RowNormArgs args{x, y, cols, scale, bias, 1, true, eps};
  const RowNormUkernel kernel = table_or_active(t).row_norm;
  parallel_units(rows, cols, threads, [&](size_t b, size_t e) { kernel(&args, b, e); });
}

void instance_norm(const float* x, float* y, size_t n, size_t c, size_t s, const float* scale, const float* bias,
                   float eps, size_t threads, const KernelTable* t) {
  require(s > 0 && c > 0 && scale != nullptr, "instance_norm: empty rows or no scale");
  const RowNormArgs args{x, y, s, scale, bias, c, false, eps};
  const RowNormUkernel kernel = table_or_active(t).row_norm;
  parallel_units(n * c, s, threads, [&](size_t b, size_t e) { kernel(&args, b, e); });
}

// ---- softmax and reductions ---------------------------------------------------------------------------

void softmax_axis(const float* x, float* y, size_t outer, size_t axis, size_t inner, bool log, size_t threads,
                  const KernelTable* t) {
  if (outer * axis * inner == 0) return;
  const KernelTable& tab = table_or_active(t);
  if (inner == 1) {  // rows: the two-pass softmax kernel, or log-softmax
    parallel_units(outer, axis, threads, [&](size_t b, size_t e) {
      for (size_t r = b; r < e; ++r) {
        if (log) tab.log_softmax(x + r * axis, y + r * axis, axis);
        else tab.softmax(x + r * axis, y + r * axis, axis);
      }
    });
    return;
  }
  const SoftmaxAxisArgs args{x, y, axis_shape(outer, axis, inner, threads), log};
  parallel_units(outer * axis_blocks(args.shape), axis * args.shape.block, threads,
                 [&](size_t b, size_t e) { tab.softmax_axis(&args, b, e); });
}

void reduce(const float* x, float* y, size_t outer, size_t axis, size_t inner, ReduceOp op, size_t threads,
            const KernelTable* t) {
  if (outer * inner == 0) return;
  if (axis == 0) {  // the identity of the reduction (ukernels.h)
    const float inf = __builtin_inff();
    const float v = op == ReduceOp::Max || op == ReduceOp::LogSumExp ? -inf
                    : op == ReduceOp::Min                             ? inf
                    : op == ReduceOp::Mean                            ? __builtin_nanf("")
                                                                      : 0.0f;
    fill(y, outer * inner, v);
    return;
  }
  const ReduceArgs args{x, y, axis_shape(outer, axis, inner, threads), op};
  const ReduceUkernel kernel = table_or_active(t).reduce;
  const size_t units = inner == 1 ? outer : outer * axis_blocks(args.shape);
  parallel_units(units, axis * (inner == 1 ? 1 : args.shape.block), threads,
                 [&](size_t b, size_t e) { kernel(&args, b, e); });
}

void argreduce(const float* x, int64_t* y, size_t outer, size_t axis, size_t inner, bool is_max, bool select_last,
               size_t threads, const KernelTable* t) {
  require(axis > 0, "argreduce: empty axis");
  if (outer * inner == 0) return;
  const ArgReduceArgs args{x, y, axis_shape(outer, axis, inner, threads), is_max, select_last};
  const ArgReduceUkernel kernel = table_or_active(t).argreduce;
  const size_t units = inner == 1 ? outer : outer * axis_blocks(args.shape);
  parallel_units(units, axis * (inner == 1 ? 1 : args.shape.block), threads,
                 [&](size_t b, size_t e) { kernel(&args, b, e); });
}

// ---- batched MatMul -----------------------------------------------------------------------------------
namespace {

// Bytes of one packed B panel's K block: stays in L1 next to the A rows it meets (as in gemm()).
constexpr size_t kPanelBlockBytes = 20 * 1024;

// The tiling of one batched_matmul call. A work unit is (batch, row chunk, panel group); it packs
// its panels one K block at a time and runs them over its rows in blocks of mb.
struct MatmulTiling {
  size_t mr, nr, kc, mb, panels;
  size_t panel_groups, panels_per_group, row_chunks, rows_per_chunk;
  size_t units(size_t batch) const { return batch * row_chunks * panel_groups; }
};

MatmulTiling plan_matmul(const KernelTable& t, const BatchedMatmulShape& s, size_t threads) {
  MatmulTiling p{};
  p.mr = t.gemm_mr;
  p.nr = t.gemm_nr;
  p.panels = div_up(s.n, p.nr);
  // One row tile: B is used once, so no K blocking (it streams once, like gemm()'s GEMV case).
  const size_t max_kc = max_size(64, kPanelBlockBytes / (p.nr * sizeof(float)));
  p.kc = s.m <= p.mr ? s.k : div_up(s.k, div_up(s.k, max_kc));
  p.mb = p.mr * 16;
  // Enough units for 4 per thread: split the panels first (each group packs its own), then the
  // rows (each row chunk packs the same panels again, so only when the panels do not suffice).
  const size_t want = threads > 1 ? 4 * threads : 1;
  p.panel_groups = min_size(p.panels, div_up(want, s.batch));
  p.panels_per_group = div_up(p.panels, p.panel_groups);
  p.panel_groups = div_up(p.panels, p.panels_per_group);
  const size_t row_blocks = div_up(s.m, p.mb);
  p.row_chunks = min_size(row_blocks, div_up(want, s.batch * p.panel_groups));
  p.rows_per_chunk = div_up(row_blocks, p.row_chunks) * p.mb;
  p.row_chunks = div_up(s.m, p.rows_per_chunk);
  return p;
}

// Rows [k0, k0 + kc) of panels [p0, p1) of B (K x N, or N x K when transposed) into buf as
// [panel][kc][nr], columns past N zero.
void pack_b_block(const float* b, const BatchedMatmulShape& s, size_t nr, size_t p0, size_t p1, size_t k0, size_t kc,
                  float* buf) {
  for (size_t p = p0; p < p1; ++p) {
    float* dst = buf + (p - p0) * kc * nr;
    const size_t c0 = p * nr, cols = min_size(nr, s.n - c0);
    if (cols < nr) std::memset(dst, 0, kc * nr * sizeof(float));
    if (s.transpose_b) {
      for (size_t j = 0; j < cols; ++j) {
        const float* src = b + (c0 + j) * s.k + k0;
        for (size_t kk = 0; kk < kc; ++kk) dst[kk * nr + j] = src[kk];
      }
    } else {
      for (size_t kk = 0; kk < kc; ++kk) std::memcpy(dst + kk * nr, b + (k0 + kk) * s.n + c0, cols * sizeof(float));
    }
  }
}

struct MatmulCall {
  const KernelTable* t;
  const float* a;
  const float* b;
  float* y;
  BatchedMatmulShape s;
  const int64_t* a_index;
  const int64_t* b_index;
  Activation act;
  MinMax clamp;
  bool post;
  MatmulTiling p;
};

// Rows [m0, m1) of output batch `batch` against the packed panels [p0, p1) of one K block.
void matmul_block(const MatmulCall& c, size_t batch, size_t m0, size_t m1, size_t p0, size_t p1, size_t k0,
                  size_t kcur, const float* packed) {
  const BatchedMatmulShape& s = c.s;
  const float* a = c.a + static_cast<size_t>(c.a_index[batch]) * s.m * s.k + k0;
  float* y = c.y + batch * s.m * s.n;
  const uint32_t flags = (k0 > 0 ? kGemmAccumulate : 0u) | (k0 + kcur == s.k ? kGemmFinal : 0u);
  const float* rows[64];  // MR pointers (MR <= 64)
  for (size_t p = p0; p < p1; ++p) {
    const size_t ncur = min_size(c.p.nr, s.n - p * c.p.nr);
    const float* panel = packed + (p - p0) * kcur * c.p.nr;
    for (size_t i0 = m0; i0 < m1; i0 += c.p.mr) {
      const size_t mcur = min_size(c.p.mr, m1 - i0);
      for (size_t i = 0; i < c.p.mr; ++i) rows[i] = a + (i0 + min_size(i, mcur - 1)) * s.k;
      float* ct = y + i0 * s.n + p * c.p.nr;
      c.t->igemm_f32w(mcur, ncur, kcur, 1, rows, panel, nullptr, ct, s.n, flags, &c.clamp);
      if (c.post && (flags & kGemmFinal))
        for (size_t i = 0; i < mcur; ++i) c.t->activation(ct + i * s.n, ncur, &c.act);
    }
  }
}

void matmul_unit(const MatmulCall& c, size_t unit) {
  const MatmulTiling& p = c.p;
  const size_t g = unit % p.panel_groups, rc = unit / p.panel_groups % p.row_chunks;
  const size_t batch = unit / (p.panel_groups * p.row_chunks);
  const size_t p0 = g * p.panels_per_group, p1 = min_size(p.panels, p0 + p.panels_per_group);
  const size_t r0 = rc * p.rows_per_chunk, r1 = min_size(c.s.m, r0 + p.rows_per_chunk);
  const float* b = c.b + static_cast<size_t>(c.b_index[batch]) * c.s.k * c.s.n;
  thread_local AlignedBuffer<float> packed;
  if (packed.size() < (p1 - p0) * p.kc * p.nr) packed = AlignedBuffer<float>((p1 - p0) * p.kc * p.nr);
  for (size_t k0 = 0; k0 < c.s.k; k0 += p.kc) {
    const size_t kcur = min_size(p.kc, c.s.k - k0);
    pack_b_block(b, c.s, p.nr, p0, p1, k0, kcur, packed.data());
    for (size_t m0 = r0; m0 < r1; m0 += p.mb) matmul_block(c, batch, m0, min_size(r1, m0 + p.mb), p0, p1, k0, kcur, packed.data());
  }
}

}  // namespace

void batched_matmul(const float* a, const float* b, float* y, const BatchedMatmulShape& s, const int64_t* a_index,
                    const int64_t* b_index, const Activation& act, size_t threads, const KernelTable* t) {
  for (size_t i = 0; i < s.batch; ++i)
    require(a_index[i] >= 0 && static_cast<size_t>(a_index[i]) < s.a_batches && b_index[i] >= 0 &&
                static_cast<size_t>(b_index[i]) < s.b_batches,
            "batched_matmul: batch index out of range");
  if (s.batch == 0 || s.m == 0 || s.n == 0) return;
  if (s.k == 0) {  // empty sums: act(0)
    fill(y, s.batch * s.m * s.n, activate_reference(0.0f, act));
    return;
  }
  const KernelTable& tab = table_or_active(t);
  const MatmulCall call{&tab, a, b, y, s, a_index, b_index, act, clamp_part(act), needs_post_pass(act),
                        plan_matmul(tab, s, threads)};
  parallel_for(call.p.units(s.batch), threads, [&](size_t begin, size_t end) {
    for (size_t u = begin; u < end; ++u) matmul_unit(call, u);
  });
}

// ---- ConvTranspose ------------------------------------------------------------------------------------

ConvTransposeWeights pack_conv_transpose(const float* w, size_t c_in, size_t cout_g, size_t kh, size_t kw,
                                         size_t groups, const KernelTable* t) {
  require(groups > 0 && c_in > 0 && cout_g > 0 && kh > 0 && kw > 0 && c_in % groups == 0,
          "pack_conv_transpose: empty weights, or C_in not a multiple of the groups");
  require(kh <= kMaxCol2ImTaps && kw <= kMaxCol2ImTaps, "pack_conv_transpose: kernel too large");
  ConvTransposeWeights out;
  out.table = &table_or_active(t);
  out.c_in = c_in;
  out.c_out = cout_g * groups;
  out.groups = groups;
  out.kh = kh;
  out.kw = kw;
  const size_t cin_g = c_in / groups, taps = kh * kw;
  out.depthwise = cin_g == 1 && cout_g == 1;
  if (out.depthwise) {  // w[c][0][ky][kx] -> [tap][c]
    out.dw_weights = AlignedBuffer<float>(taps * c_in);
    for (size_t c = 0; c < c_in; ++c)
      for (size_t tap = 0; tap < taps; ++tap) out.dw_weights[tap * c_in + c] = w[c * taps + tap];
    return out;
  }
  // Group g as K x N = cin_g x (tap, oc): element [ci][tap * cout_g + oc] = w[g*cin_g + ci][oc][tap].
  std::vector<float> kn(cin_g * taps * cout_g);
  for (size_t g = 0; g < groups; ++g) {
    for (size_t ci = 0; ci < cin_g; ++ci)
      for (size_t oc = 0; oc < cout_g; ++oc)
        for (size_t tap = 0; tap < taps; ++tap)
          kn[ci * taps * cout_g + tap * cout_g + oc] = w[((g * cin_g + ci) * cout_g + oc) * taps + tap];
    out.packed.push_back(pack_gemm_weights(kn.data(), taps * cout_g, cin_g, WeightLayout::KN, nullptr,
                                           WeightType::F32, out.table));
  }
  return out;
}

size_t conv_transpose_output_size(size_t in, size_t kernel, size_t stride, size_t dilation, size_t pad0, size_t pad1,
                                  size_t out_pad) {
  require(in > 0 && kernel > 0 && stride > 0 && dilation > 0, "conv_transpose: empty input, kernel, stride or dilation");
  const size_t full = (in - 1) * stride + dilation * (kernel - 1) + out_pad + 1;
  require(full > pad0 + pad1, "conv_transpose: the pads remove the whole output");
  return full - pad0 - pad1;
}

namespace {

// Taps along one axis that can reach one output position: the tap index k steps by
// stride / gcd(stride, dilation) between them.
size_t max_reaching(size_t kernel, size_t stride, size_t dilation) {
  size_t a = stride, b = dilation;
  while (b != 0) {
    const size_t r = a % b;
    a = b;
    b = r;
  }
  return div_up(kernel, stride / a);
}

Col2ImArgs col2im_args(const ConvTransposeWeights& wts, const ConvTransposeGeometry& g, size_t h, size_t w,
                       const float* bias, const Activation& act) {
  Col2ImArgs a{};
  a.bias = bias;
  a.h = h; a.w = w;
  a.oh = conv_transpose_output_size(h, wts.kh, g.stride_h, g.dil_h, g.pad_top, g.pad_bottom, g.out_pad_h);
  a.ow = conv_transpose_output_size(w, wts.kw, g.stride_w, g.dil_w, g.pad_left, g.pad_right, g.out_pad_w);
  a.kh = wts.kh; a.kw = wts.kw;
  a.stride_h = g.stride_h; a.stride_w = g.stride_w; a.dil_h = g.dil_h; a.dil_w = g.dil_w;
  a.pad_top = g.pad_top; a.pad_left = g.pad_left;
  a.groups = wts.groups;
  a.cout_g = wts.c_out / wts.groups;
  a.c_out = wts.c_out;
  a.col_stride = wts.kh * wts.kw * wts.c_out;
  a.act = act;
  require(max_reaching(wts.kh, g.stride_h, g.dil_h) * max_reaching(wts.kw, g.stride_w, g.dil_w) <= kMaxCol2ImTaps,
          "conv_transpose: too many kernel taps reach one output pixel");
  return a;
}

// Floats of col buffer per call at most (more images are done in turn).
constexpr size_t kColBudget = size_t{8} << 20;

}  // namespace

void conv_transpose_nhwc(const float* x, size_t n, size_t h, size_t w, const ConvTransposeWeights& wts,
                         const ConvTransposeGeometry& g, const float* bias, float* y, const Activation& act,
                         size_t threads) {
  Col2ImArgs args = col2im_args(wts, g, h, w, bias, act);
  const KernelTable& t = *wts.table;
  auto gather = [&](size_t images) {
    args.n = images;
    parallel_units(images * args.oh, args.ow * args.c_out, threads, [&](size_t b, size_t e) { t.col2im(&args, b, e); });
  };
  if (wts.depthwise) {
    args.x = x;
    args.dw_weights = wts.dw_weights.data();
    args.y = y;
    gather(n);
    return;
  }
  const size_t pixels = h * w, cin_g = wts.c_in / wts.groups;
  const size_t per_chunk = max_size(1, min_size(n, kColBudget / max_size(1, pixels * args.col_stride)));
  thread_local AlignedBuffer<float> col;
  if (col.size() < per_chunk * pixels * args.col_stride) col = AlignedBuffer<float>(per_chunk * pixels * args.col_stride);
  for (size_t b0 = 0; b0 < n; b0 += per_chunk) {
    const size_t images = min_size(per_chunk, n - b0);
    const float* xb = x + b0 * pixels * wts.c_in;
    for (size_t grp = 0; grp < wts.groups; ++grp)
      gemm(xb + grp * cin_g, images * pixels, wts.c_in, wts.packed[grp], col.data() + grp * wts.kh * wts.kw * args.cout_g,
           args.col_stride, act_none(), threads);
    args.col = col.data();
    args.y = y + b0 * args.oh * args.ow * wts.c_out;
    gather(images);
  }
}

namespace {

// dst[b][j][i] = src[b][i][j] for `count` matrices of rows x cols, in 32 x 32 tiles.
void transpose_batch(const float* src, float* dst, size_t count, size_t rows, size_t cols, size_t threads) {
  constexpr size_t kTile = 32;
  const size_t row_tiles = div_up(rows, kTile);
  parallel_units(count * row_tiles, kTile * cols, threads, [&](size_t begin, size_t end) {
    for (size_t u = begin; u < end; ++u) {
      const size_t b = u / row_tiles, i0 = u % row_tiles * kTile, i1 = min_size(rows, i0 + kTile);
      const float* s = src + b * rows * cols;
      float* d = dst + b * rows * cols;
      for (size_t j0 = 0; j0 < cols; j0 += kTile)
        for (size_t i = i0; i < i1; ++i)
          for (size_t j = j0; j < min_size(cols, j0 + kTile); ++j) d[j * rows + i] = s[i * cols + j];
    }
  });
}

}  // namespace

void conv_transpose_nchw(const float* x, size_t n, size_t h, size_t w, const ConvTransposeWeights& wts,
                         const ConvTransposeGeometry& g, const float* bias, float* y, const Activation& act,
                         size_t threads) {
  const size_t oh = conv_transpose_output_size(h, wts.kh, g.stride_h, g.dil_h, g.pad_top, g.pad_bottom, g.out_pad_h);
  const size_t ow = conv_transpose_output_size(w, wts.kw, g.stride_w, g.dil_w, g.pad_left, g.pad_right, g.out_pad_w);
  AlignedBuffer<float> x_nhwc(n * h * w * wts.c_in), y_nhwc(n * oh * ow * wts.c_out);
  transpose_batch(x, x_nhwc.data(), n, wts.c_in, h * w, threads);
  conv_transpose_nhwc(x_nhwc.data(), n, h, w, wts, g, bias, y_nhwc.data(), act, threads);
  transpose_batch(y_nhwc.data(), y, n, oh * ow, wts.c_out, threads);
}

// ---- resize ------------------------------------------------------------------------------------------

namespace {

void require_indices(const int32_t* idx, size_t count, size_t extent, const char* what) {
  for (size_t i = 0; i < count; ++i) require(idx[i] >= 0 && static_cast<size_t>(idx[i]) < extent, what);
}

bool is_x2_nearest(const int32_t* ix, size_t ow) {
  for (size_t o = 0; o < ow; ++o)
    if (static_cast<size_t>(ix[o]) != o / 2) return false;
  return true;
}

}  // namespace

void resize(bool linear, const float* x, float* y, size_t n, size_t c, size_t h, size_t w, size_t oh, size_t ow,
            bool nhwc, const ResizeTables& tb, size_t threads, const KernelTable* t) {
  if (n * c * oh * ow == 0) return;
  require(h > 0 && w > 0, "resize: empty input");
  require_indices(tb.iy0, oh, h, "resize: iy index out of range");
  require_indices(tb.ix0, ow, w, "resize: ix index out of range");
  if (linear) {
    require_indices(tb.iy1, oh, h, "resize: iy1 index out of range");
    require_indices(tb.ix1, ow, w, "resize: ix1 index out of range");
  }
  const ResizeArgs args{x, y, n, c, h, w, oh, ow, nhwc, tb.iy0, tb.iy1, tb.wy, tb.ix0, tb.ix1, tb.wx,
                        !linear && !nhwc && is_x2_nearest(tb.ix0, ow)};
  const KernelTable& tab = table_or_active(t);
  const ResizeUkernel kernel = linear ? tab.resize_linear : tab.resize_nearest;
  const size_t rows = nhwc ? n * oh : n * c * oh;
  parallel_units(rows, nhwc ? ow * c : ow, threads, [&](size_t b, size_t e) {
    thread_local AlignedBuffer<float> scratch;
    if (scratch.size() < 2 * ow) scratch = AlignedBuffer<float>(2 * ow);
    kernel(&args, b, e, scratch.data());
  });
}

}  // namespace edgesdk::kernels
