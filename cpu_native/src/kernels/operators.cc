// Drivers around the microkernels: packing, cache blocking, tiling for threads, plans.
#include "kernels/operators.h"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/indirection.h"
#include "kernels/thread_pool.h"

namespace edgesdk::kernels {
namespace {

const KernelTable& table_or_active(const KernelTable* t) { return t != nullptr ? *t : active_kernels(); }

void require(bool ok, const char* what) {
  if (!ok) throw std::invalid_argument(what);
}

// Bytes of one packed B panel the microkernel streams per K block: sized to stay in L1 next to
// the MR rows of A it multiplies.
constexpr size_t kPanelBlockBytes = 20 * 1024;

// Splits K into equal blocks of at most the L1 budget.
size_t k_block(size_t k, size_t nr, size_t elem) {
  const size_t max_kc = max_size(64, kPanelBlockBytes / (nr * elem));
  const size_t blocks = div_up(k, max_kc);
  return div_up(k, blocks);
}

float source_value(const float* w, size_t i) { return w[i]; }
float source_value(const uint16_t* w, size_t i) { return fp16_to_fp32(w[i]); }
uint16_t source_half(const float* w, size_t i) { return fp32_to_fp16(w[i]); }
uint16_t source_half(const uint16_t* w, size_t i) { return w[i]; }

// Panel p of fp32 N x K weights: the transpose of its NR rows, by the level's SIMD transpose
// (rows past n as zeros). With window > 1 each row is first reordered from (c, s) to (s, c)
// columns (a C x window transpose) into `rows`, which holds NR rows. The element loop this replaced
// read NR rows K floats apart a value at a time and, with numpy's transposed copy of every KxK
// layer before it, took 60 ms of ResNet-18's session creation.
void pack_f32_panel(const KernelTable& t, const float* w, size_t n, size_t k, size_t window, size_t nr, size_t p,
                    float* rows, float* panel) {
  const size_t ncur = min_size(nr, n - p * nr);
  const float* src = w + p * nr * k;
  if (window > 1) {
    const size_t c = k / window;
    for (size_t j = 0; j < ncur; ++j) t.transpose_f32(src + j * k, window, rows + j * k, c, c, window);
    src = rows;
  }
  t.transpose_f32(src, k, panel, nr, ncur, k);
  if (ncur < nr)
    for (size_t kk = 0; kk < k; ++kk) std::memset(panel + kk * nr + ncur, 0, (nr - ncur) * sizeof(float));
}

template <class Src>
PackedGemmWeights pack_gemm_impl(const Src* w, size_t n, size_t k, WeightLayout layout, const float* bias,
                                 WeightType type, const KernelTable* t, bool f16_arith, size_t window) {
  require(n > 0 && k > 0, "pack_gemm_weights: empty matrix");
  require(window > 0 && k % window == 0 && (window == 1 || layout == WeightLayout::NK),
          "pack_gemm_weights: the window must divide K of N x K weights");
  PackedGemmWeights out;
  out.table = &table_or_active(t);
  out.n = n;
  out.k = k;
  out.type = type;
  out.f16_arith = f16_arith && type == WeightType::F16 && out.table->has_f16_arith();
  out.narrow = type == WeightType::F32 && !out.f16_arith && out.table->igemm_f32w_narrow != nullptr &&
               n <= out.table->gemm_narrow_nr;
  out.nr = out.f16_arith ? out.table->f16_gemm_nr : out.narrow ? out.table->gemm_narrow_nr : out.table->gemm_nr;
  const size_t nr = out.nr, panels = out.panel_count();
  out.panels = AlignedBuffer<uint8_t>(panels * k * nr * out.elem_size());
  out.bias = AlignedBuffer<float>(panels * nr);
  for (size_t j = 0; j < panels * nr; ++j) out.bias[j] = (bias != nullptr && j < n) ? bias[j] : 0.0f;
  if constexpr (std::is_same_v<Src, float>) {
    if (type == WeightType::F32 && layout == WeightLayout::NK) {
      AlignedBuffer<float> rows(window > 1 ? nr * k : 0);
      for (size_t p = 0; p < panels; ++p)
        pack_f32_panel(*out.table, w, n, k, window, nr, p, rows.data(),
                       reinterpret_cast<float*>(out.panels.data()) + p * k * nr);
      return out;
    }
  }
  const size_t channels = k / window;
  for (size_t p = 0; p < panels; ++p) {
    for (size_t kk = 0; kk < k; ++kk) {
      const size_t column = window > 1 ? kk % channels * window + kk / channels : kk;  // (s, c) <- (c, s)
      for (size_t j = 0; j < nr; ++j) {
        const size_t col = p * nr + j;
        const size_t dst = (p * k + kk) * nr + j;
        const bool live = col < n;
        const size_t src = layout == WeightLayout::NK ? col * k + column : kk * n + col;
        if (type == WeightType::F32) {
          reinterpret_cast<float*>(out.panels.data())[dst] = live ? source_value(w, src) : 0.0f;
        } else {
          reinterpret_cast<uint16_t*>(out.panels.data())[dst] = live ? source_half(w, src) : 0;
        }
      }
    }
  }
  return out;
}

IgemmUkernel ukernel_of(const PackedGemmWeights& w) { return w.igemm(); }

// Post-pass for activations the microkernel cannot fuse as a clamp (HardSwish, Sigmoid, ...):
// `rows` finished rows of `cols` values, `ldc` apart; one call when they are contiguous. The dense
// paths call it once per block of tiles, not per microtile: a call per 16- or 32-value tile row
// cost ~5 ns and doubled the time of MobileNetV3's 1x1 HardSwish layers (240 channels x 14 x 14:
// 29.7 us against OpenVINO's 16).
void post_activate(const KernelTable& t, float* c, size_t ldc, size_t rows, size_t cols, const Activation& act) {
  if (cols == ldc) {
    t.activation(c, rows * cols, &act);
    return;
  }
  for (size_t i = 0; i < rows; ++i) t.activation(c + i * ldc, cols, &act);
}

// kGemmHardSwish where the level's fp32 GEMM kernels apply ONNX's HardSwish themselves (then no
// post-pass), else 0.
uint32_t fused_activation(const KernelTable& t, const Activation& act) {
  const bool onnx_hardswish = act.kind == ActKind::HardSwish && act.alpha == 1.0f / 6.0f && act.beta == 0.5f;
  return t.igemm_hardswish && onnx_hardswish ? kGemmHardSwish : 0u;
}

// fp32 -> fp16 of `count` rows of `cols` values (source rows `src_stride` apart, destination rows
// packed), split over threads when there is enough of it.
void convert_rows_f16(const KernelTable& t, const float* src, size_t src_stride, uint16_t* dst, size_t count,
                      size_t cols, size_t threads) {
  if (src_stride == cols) {  // one contiguous run
    const size_t total = count * cols, chunk = 16384;
    parallel_for(div_up(total, chunk), total >= 4 * chunk ? threads : 1, [&](size_t begin, size_t end) {
      const size_t lo = begin * chunk, hi = min_size(total, end * chunk);
      t.convert_f32_f16(src + lo, dst + lo, hi - lo);
    });
    return;
  }
  const size_t rows_per_task = max_size(1, 16384 / max_size(cols, 1));
  parallel_for(div_up(count, rows_per_task), count * cols >= 65536 ? threads : 1, [&](size_t begin, size_t end) {
    for (size_t r = begin * rows_per_task; r < min_size(count, end * rows_per_task); ++r)
      t.convert_f32_f16(src + r * src_stride, dst + r * cols, cols);
  });
}

}  // namespace

PackedGemmWeights pack_gemm_weights(const float* w, size_t n, size_t k, WeightLayout layout, const float* bias,
                                    WeightType type, const KernelTable* t, bool f16_arith, size_t window) {
  return pack_gemm_impl(w, n, k, layout, bias, type, t, f16_arith, window);
}

PackedGemmWeights pack_gemm_weights_f16(const uint16_t* w, size_t n, size_t k, WeightLayout layout,
                                        const float* bias, WeightType type, const KernelTable* t, bool f16_arith,
                                        size_t window) {
  return pack_gemm_impl(w, n, k, layout, bias, type, t, f16_arith, window);
}

void gemm(const float* a, size_t m, size_t lda, const PackedGemmWeights& w, float* c, size_t ldc,
          const Activation& act, size_t threads) {
  if (m == 0) return;
  require(lda >= w.k && ldc >= w.n, "gemm: row stride smaller than the row");
  const KernelTable& t = *w.table;
  const IgemmUkernel ukernel = ukernel_of(w);
  const bool half = w.f16_arith;
  const size_t mr = w.mr(), nr = w.nr, k = w.k;
  // With a single row block the weights are not reused: no K blocking, so they stream from
  // memory in one sequential pass (GEMV is bandwidth-bound). The fp16-arithmetic kernel's
  // fp16 blocks must not straddle a K cut (ukernels.h): cuts at multiples of kF16KBlock.
  size_t kc = m <= mr ? k : k_block(k, nr, w.elem_size());
  if (half) kc = min_size(k, round_up(kc, kF16KBlock));
  const MinMax clamp = clamp_part(act);
  const uint32_t fused = half ? 0u : fused_activation(t, act);
  const bool post = needs_post_pass(act) && fused == 0;
  // Tiles: row blocks of 16 microtiles (A block ~ in L2 while its panels stream by), and the
  // panels split further when there are too few row blocks for 8 per thread (dynamic scheduling
  // then loses at most one unit in 8 to the imbalance of the last ones).
  const size_t mb = mr * 16;
  const size_t m_tiles = div_up(m, mb);
  const size_t panels = w.panel_count();
  size_t n_tiles = 1;
  if (threads > 1 && m_tiles < 8 * threads) n_tiles = min_size(panels, div_up(8 * threads, m_tiles));
  const size_t panels_per_tile = div_up(panels, n_tiles);
  n_tiles = div_up(panels, panels_per_tile);

  // A is copied into a compact row block when it is reused by enough panels: rows of a wide
  // matrix sit at a large power-of-two stride (4 KiB at K = 1024) and would all map to the same
  // L1 sets (seed 001 §2.1), while the copy costs 1/(panels) of the FLOPs.
  const size_t pack_stride = round_up(kc, 16) + 16;
  const bool pack_a = !half && m >= 2 * mr && panels_per_tile >= 4;
  // fp16 arithmetic: A is always converted into a compact fp16 row block (the same stride rule).
  const size_t half_stride = round_up(kc, 32) + 32;
  auto run_tile = [&](size_t tile) {
    const size_t mt = tile / n_tiles, nt = tile % n_tiles;  // row-major: see TileGrid
    const size_t m0 = mt * mb, m1 = min_size(m, m0 + mb);
    const size_t p0 = nt * panels_per_tile, p1 = min_size(panels, p0 + panels_per_tile);
    const float* rows[64];  // MR pointers (MR <= 64)
    const uint16_t* rows_f16[64];
    thread_local AlignedBuffer<float> a_block;
    thread_local AlignedBuffer<uint16_t> a_half;
    if (pack_a && a_block.size() < mb * pack_stride) a_block = AlignedBuffer<float>(mb * pack_stride);
    if (half && a_half.size() < mb * half_stride) a_half = AlignedBuffer<uint16_t>(mb * half_stride);
    for (size_t k0 = 0; k0 < k; k0 += kc) {
      const size_t kcur = min_size(kc, k - k0);
      const uint32_t flags = (k0 > 0 ? kGemmAccumulate : 0u) | (k0 + kcur == k ? kGemmFinal : 0u);
      if (half) {
        for (size_t i = m0; i < m1; ++i) t.convert_f32_f16(a + i * lda + k0, a_half.data() + (i - m0) * half_stride, kcur);
        for (size_t p = p0; p < p1; ++p) {
          const size_t ncur = min_size(nr, w.n - p * nr);
          const void* panel = w.panel(p, k0);
          for (size_t i0 = m0; i0 < m1; i0 += mr) {
            const size_t mcur = min_size(mr, m1 - i0);
            for (size_t i = 0; i < mr; ++i) rows_f16[i] = a_half.data() + (i0 - m0 + min_size(i, mcur - 1)) * half_stride;
            float* ct = c + i0 * ldc + p * nr;
            t.igemm_f16(mcur, ncur, kcur, 1, rows_f16, panel, w.bias.data() + p * nr, ct, ldc, flags, &clamp);
          }
        }
        continue;
      }
      const float* a_src = a + k0;
      size_t a_stride = lda, a_row0 = 0;
      if (pack_a) {
        for (size_t i = m0; i < m1; ++i)
          std::memcpy(a_block.data() + (i - m0) * pack_stride, a + i * lda + k0, kcur * sizeof(float));
        a_src = a_block.data();
        a_stride = pack_stride;
        a_row0 = m0;
      }
      for (size_t p = p0; p < p1; ++p) {
        const size_t ncur = min_size(nr, w.n - p * nr);
        const void* panel = w.panel(p, k0);
        for (size_t i0 = m0; i0 < m1; i0 += mr) {
          const size_t mcur = min_size(mr, m1 - i0);
          for (size_t i = 0; i < mr; ++i) rows[i] = a_src + (i0 - a_row0 + min_size(i, mcur - 1)) * a_stride;
          float* ct = c + i0 * ldc + p * nr;
          ukernel(mcur, ncur, kcur, 1, rows, panel, w.bias.data() + p * nr, ct, ldc, flags | fused, &clamp);
        }
      }
    }
    // The row block is final now (every K block done): its columns of this tile, still in L2.
    if (post) {
      const size_t col0 = p0 * nr, col1 = min_size(w.n, p1 * nr);
      post_activate(t, c + m0 * ldc + col0, ldc, m1 - m0, col1 - col0, act);
    }
  };
  parallel_for(m_tiles * n_tiles, threads, [&](size_t begin, size_t end) {
    for (size_t tile = begin; tile < end; ++tile) run_tile(tile);
  });
}

// ---------------------------------------------------------------------------------------------

size_t conv_output_size(size_t in, size_t kernel, size_t stride, size_t dilation, size_t pad0, size_t pad1) {
  require(kernel > 0 && stride > 0 && dilation > 0, "convolution: kernel, stride and dilation must be > 0");
  const size_t span = dilation * (kernel - 1) + 1;
  require(in + pad0 + pad1 >= span, "convolution: window larger than the padded input");
  return (in + pad0 + pad1 - span) / stride + 1;
}

ConvPlan::ConvPlan(size_t n, size_t h, size_t w, size_t c, const ConvGeometry& g, const PackedGemmWeights& weights,
                   ConvAlgorithm algorithm)
    : n_(n), h_(h), w_(w), c_(c), g_(g), weights_(&weights) {
  oh_ = conv_output_size(h, g.kh, g.stride_h, g.dil_h, g.pad_top, g.pad_bottom);
  ow_ = conv_output_size(w, g.kw, g.stride_w, g.dil_w, g.pad_left, g.pad_right);
  require(weights.k == g.kh * g.kw * c, "ConvPlan: packed weights K != KH*KW*C");
  direct_gemm_ = g.kh == 1 && g.kw == 1 && g.stride_h == 1 && g.stride_w == 1 && g.pad_top == 0 &&
                 g.pad_left == 0 && g.pad_bottom == 0 && g.pad_right == 0;
  if (!direct_gemm_) {
    zero_ = AlignedBuffer<float>(c);
    std::memset(zero_.data(), 0, c * sizeof(float));
  }
  const bool applies = winograd_applies(g, weights);
  require(algorithm != ConvAlgorithm::Winograd || applies,
          "ConvPlan: Winograd needs a 3x3 kernel, stride 1, dilation 1 and fp32 weights");
  const bool winograd = algorithm == ConvAlgorithm::Winograd ||
                        (algorithm == ConvAlgorithm::Auto && applies && winograd_enabled() &&
                         winograd_chosen(n, oh_, ow_, c, weights.n, *weights.table));
  if (winograd) {
    winograd_ = &winograd_weights(weights);
    tiles_h_ = div_up(oh_, kWinogradTile);
    tiles_w_ = div_up(ow_, kWinogradTile);
    tile_block_ = winograd_tile_block(n * tiles_h_ * tiles_w_, c, weights.n, weights.mr());
  }
}

const char* ConvPlan::algorithm_name() const {
  return winograd_ != nullptr ? "winograd43" : direct_gemm_ ? "gemm" : "indirect";
}


void ConvPlan::convert_input_f16(const float* input, size_t in_stride, size_t threads) {
  const KernelTable& t = *weights_->table;
  const size_t pixels_in = n_ * h_ * w_;
  if (input_f16_.size() == 0) {  // first run: the copy, its zero vector and the indirection into it
    input_f16_ = AlignedBuffer<uint16_t>(pixels_in * c_);
    zero_f16_ = AlignedBuffer<uint16_t>(c_);
    std::memset(zero_f16_.data(), 0, c_ * sizeof(uint16_t));
    fill_indirection<uint16_t>(indirection_f16_, input_f16_.data(), c_, zero_f16_.data(), weights_->mr(), n_, h_,
                               w_, oh_, ow_, g_);
  }
  convert_rows_f16(t, input, in_stride, input_f16_.data(), pixels_in, c_, threads);
}

void ConvPlan::build_indirection(const float* input, size_t in_stride) {
  fill_indirection<float>(indirection_, input, in_stride, zero_.data(), weights_->mr(), n_, h_, w_, oh_, ow_, g_);
  built_input_ = input;
  built_stride_ = in_stride;
}

void ConvPlan::run(const float* input, float* output, const Activation& act, size_t threads, size_t in_stride,
                   size_t out_stride) {
  const PackedGemmWeights& w = *weights_;
  if (in_stride == 0) in_stride = c_;
  if (out_stride == 0) out_stride = w.n;
  require(in_stride >= c_ && out_stride >= w.n, "ConvPlan::run: pixel stride smaller than the channels");
  if (winograd_ != nullptr) {
    run_winograd(input, output, act, threads, in_stride, out_stride);
    return;
  }
  if (direct_gemm_) {
    gemm(input, n_ * h_ * w_, in_stride, w, output, out_stride, act, threads);
    return;
  }
  const bool half = w.f16_arith;
  if (half) {
    convert_input_f16(input, in_stride, threads);
  } else if (input != built_input_ || in_stride != built_stride_ || indirection_.empty()) {
    build_indirection(input, in_stride);
  }
  const KernelTable& t = *w.table;
  const IgemmUkernel ukernel = ukernel_of(w);
  const size_t mr = w.mr(), nr = w.nr, ks = g_.kh * g_.kw;
  const size_t pixels = n_ * oh_ * ow_;
  const size_t tiles = div_up(pixels, mr);
  const size_t panels = w.panel_count();
  const MinMax clamp = clamp_part(act);
  const uint32_t fused = half ? 0u : fused_activation(t, act);
  const bool post = needs_post_pass(act) && fused == 0;
  const TileGrid grid(tiles, panels, threads);
  const float* const* ind = indirection_.data();
  const uint16_t* const* ind_f16 = indirection_f16_.data();
  grid.for_each_block(threads, [&](size_t t0, size_t t1, size_t p0, size_t p1) {
    for (size_t p = p0; p < p1; ++p) {
      const size_t ncur = min_size(nr, w.n - p * nr);
      for (size_t tile = t0; tile < t1; ++tile) {
        const size_t mcur = min_size(mr, pixels - tile * mr);
        float* ct = output + tile * mr * out_stride + p * nr;
        if (half)
          t.igemm_f16(mcur, ncur, c_, ks, ind_f16 + tile * ks * mr, w.panel(p), w.bias.data() + p * nr, ct,
                      out_stride, kGemmFinal, &clamp);
        else
          ukernel(mcur, ncur, c_, ks, ind + tile * ks * mr, w.panel(p), w.bias.data() + p * nr, ct, out_stride,
                  kGemmFinal | fused, &clamp);
      }
    }
    if (post) {  // the unit's pixels x panels, once, after its last panel (post_activate)
      const size_t px0 = t0 * mr, px1 = min_size(pixels, t1 * mr);
      const size_t col0 = p0 * nr, col1 = min_size(w.n, p1 * nr);
      post_activate(t, output + px0 * out_stride + col0, out_stride, px1 - px0, col1 - col0, act);
    }
  });
}

// ---------------------------------------------------------------------------------------------

void depthwise_conv(const float* input, size_t n, size_t h, size_t w, size_t c, size_t multiplier,
                    const ConvGeometry& g, const float* weights, const float* bias, float* output,
                    const Activation& act, size_t threads, const KernelTable* t, bool f16_arith) {
  require(multiplier > 0 && c > 0, "depthwise_conv: empty channels");
  DepthwiseArgs args{};
  args.input = input;
  args.weights = weights;
  args.bias = bias;
  args.output = output;
  args.n = n; args.h = h; args.w = w; args.c = c; args.multiplier = multiplier;
  set_window(args, g, h, w);
  args.in_stride = c;
  args.out_stride = c * multiplier;
  args.act = act;
  const KernelTable& tab = table_or_active(t);
  DepthwiseUkernel kernel = tab.depthwise;
  if (f16_arith && tab.depthwise_f16 != nullptr) {
    // fp16 copies in this thread's scratch (kept between calls: no allocation per layer and run).
    thread_local AlignedBuffer<uint16_t> input_f16, weights_f16;
    const size_t in_count = n * h * w * c, w_count = g.kh * g.kw * c * multiplier;
    if (input_f16.size() < in_count) input_f16 = AlignedBuffer<uint16_t>(in_count);
    if (weights_f16.size() < w_count) weights_f16 = AlignedBuffer<uint16_t>(w_count);
    convert_rows_f16(tab, input, in_count, input_f16.data(), 1, in_count, threads);
    tab.convert_f32_f16(weights, weights_f16.data(), w_count);
    args.input_f16 = input_f16.data();
    args.weights_f16 = weights_f16.data();
    kernel = tab.depthwise_f16;
  }
  parallel_for(n * args.oh, threads, [&](size_t begin, size_t end) { kernel(&args, begin, end); },
               Partition::Dynamic, 1);
}

void pool2d(PoolKind kind, const float* input, size_t n, size_t h, size_t w, size_t c, const ConvGeometry& g,
            bool count_include_pad, float* output, const Activation& act, size_t threads, const KernelTable* t) {
  PoolArgs args{};
  args.input = input;
  args.output = output;
  args.n = n; args.h = h; args.w = w; args.c = c;
  set_window(args, g, h, w);
  args.pad_bottom = g.pad_bottom; args.pad_right = g.pad_right;
  args.in_stride = c;
  args.out_stride = c;
  args.count_include_pad = count_include_pad;
  args.act = act;
  const KernelTable& tab = table_or_active(t);
  const PoolUkernel kernel = kind == PoolKind::Max ? tab.maxpool : tab.avgpool;
  parallel_for(n * args.oh, threads, [&](size_t begin, size_t end) { kernel(&args, begin, end); });
}

void global_avgpool(const float* input, size_t n, size_t hw, size_t c, float* output, const Activation& act,
                    size_t threads, const KernelTable* t) {
  const GlobalAvgPoolUkernel kernel = table_or_active(t).global_avgpool;
  parallel_for(n, threads, [&](size_t begin, size_t end) {
    for (size_t b = begin; b < end; ++b) kernel(input + b * hw * c, hw, c, c, output + b * c, &act);
  });
}

void binary(BinaryOp op, Broadcast broadcast, const float* a, const float* b, float* y, size_t rows, size_t c,
            const Activation& act, size_t threads, bool b_first, const KernelTable* t) {
  BinaryArgs args{a, b, y, c, c, c, c, op, broadcast, b_first, act};
  const BinaryUkernel kernel = table_or_active(t).binary;
  // Rows grouped so each task moves at least ~16K floats.
  const size_t rows_per_task = max_size(1, 16384 / max_size(c, 1));
  parallel_for(div_up(rows, rows_per_task), threads, [&](size_t begin, size_t end) {
    kernel(&args, begin * rows_per_task, min_size(rows, end * rows_per_task));
  });
}

void activation(float* x, size_t n, const Activation& act, size_t threads, const KernelTable* t) {
  const ActivationUkernel kernel = table_or_active(t).activation;
  const size_t chunk = 16384;
  parallel_for(div_up(n, chunk), threads, [&](size_t begin, size_t end) {
    const size_t lo = begin * chunk, hi = min_size(n, end * chunk);
    kernel(x + lo, hi - lo, &act);
  });
}

void softmax(const float* x, float* y, size_t rows, size_t n, size_t threads, const KernelTable* t) {
  const SoftmaxUkernel kernel = table_or_active(t).softmax;
  parallel_for(rows, threads, [&](size_t begin, size_t end) {
    for (size_t r = begin; r < end; ++r) kernel(x + r * n, y + r * n, n);
  });
}

// ---------------------------------------------------------------------------------------------

namespace {

template <class Book>
ClusteredWeights pack_clustered_impl(const uint8_t* indices, unsigned bits, size_t n, size_t k, const Book* codebook,
                                     bool per_row, const float* bias, const KernelTable* t) {
  require(bits >= 1 && bits <= 8, "pack_clustered: bits must be 1..8");
  require(n > 0 && k > 0, "pack_clustered: empty matrix");
  ClusteredWeights out;
  out.table = &table_or_active(t);
  out.n = n;
  out.k = k;
  out.bits = bits;
  out.per_row = per_row;
  const size_t entries = size_t{1} << bits;
  const uint32_t field_mask = static_cast<uint32_t>(entries - 1);
  out.nibbles = bits == 4 && out.table->clustered_nibbles;
  out.lanes = out.table->clustered_lanes;
  out.fields = 32 / bits;
  if (out.nibbles) {
    out.words_per_row = div_up(k, 64) * 8;
    out.padded_k = div_up(k, 64) * 64;
  } else {
    const size_t block = out.lanes * out.fields;
    out.words_per_row = div_up(k, block) * out.lanes;
    out.padded_k = div_up(k, block) * block;
  }
  out.words = AlignedBuffer<uint32_t>(n * out.words_per_row);
  std::memset(out.words.data(), 0, n * out.words_per_row * sizeof(uint32_t));
  // Where column `col` of a row goes: (word, bit offset) in that row's words.
  std::vector<size_t> nibble_byte_of(64);
  for (size_t p = 0; p < 32; ++p) {
    nibble_byte_of[nibble_column(p)] = p * 2;           // low nibble of byte p
    nibble_byte_of[32 + nibble_column(p)] = p * 2 + 1;  // high nibble
  }
  // Columns past k meet zeros in the padded input, so they add entry * 0: exactly 0 only when the
  // entry is finite (inf * 0 is NaN where ONNX Runtime, summing k columns, gives inf). Padding
  // points at the row's first finite entry (entry 0 when none is: the row is non-finite anyway).
  auto padding_index = [&](size_t r) -> uint32_t {
    const size_t g = per_row ? r : 0;
    for (size_t e = 0; e < entries; ++e)
      if (std::isfinite(source_value(codebook, g * entries + e))) return static_cast<uint32_t>(e);
    return 0;
  };
  for (size_t r = 0; r < n; ++r) {
    uint32_t* row = out.words.data() + r * out.words_per_row;
    const uint32_t pad_idx = padding_index(r);
    for (size_t col = 0; col < out.padded_k; ++col) {
      uint32_t idx = pad_idx;
      if (col < k) {  // entry (r, col) of the LSB-first bit stream; it may straddle two bytes
        const size_t bit = (r * k + col) * bits;
        uint32_t v = indices[bit / 8];
        if (bit % 8 + bits > 8) v |= static_cast<uint32_t>(indices[bit / 8 + 1]) << 8;
        idx = (v >> (bit % 8)) & field_mask;
      }
      if (out.nibbles) {
        const size_t nib = (col / 64) * 64 + nibble_byte_of[col % 64];  // nibble index in the row
        row[nib / 8] |= idx << (nib % 8 * 4);
      } else {
        const size_t block = out.lanes * out.fields;
        const size_t blk = col / block, within = col % block;
        const size_t lane = within % out.lanes, field = within / out.lanes;
        row[blk * out.lanes + lane] |= idx << (field * bits);
      }
    }
  }
  out.table_size = max_size(entries, out.table->clustered_table_min);
  const size_t books = per_row ? n : 1;
  out.tables = AlignedBuffer<float>(books * out.table_size);
  for (size_t g = 0; g < books; ++g) {
    float* table = out.tables.data() + g * out.table_size;
    for (size_t e = 0; e < out.table_size; ++e) table[e] = source_value(codebook, g * entries + (e & (entries - 1)));
    if (out.nibbles) {  // transpose the 16 x 4 bytes into 4 byte planes
      uint8_t planes[64];
      const uint8_t* bytes = reinterpret_cast<const uint8_t*>(table);
      for (size_t e = 0; e < 16; ++e)
        for (size_t j = 0; j < 4; ++j) planes[16 * j + e] = bytes[4 * e + j];
      std::memcpy(table, planes, 64);
    }
  }
  out.bias = AlignedBuffer<float>(round_up(n, 64));
  for (size_t j = 0; j < out.bias.size(); ++j) out.bias[j] = (bias != nullptr && j < n) ? bias[j] : 0.0f;
  return out;
}

}  // namespace

// Columns of one panel-decode chunk: whole code blocks (64 columns in the nibble layout, L * F in
// lane words), about 256 columns, so that the chunk's decoded rows (nr x 256 floats, 32 KiB at
// nr = 32) stay in L1 between the row decoder that writes them and the transpose that reads them.
size_t clustered_chunk_columns(const ClusteredWeights& w) {
  const size_t block = w.nibbles ? 64 : w.lanes * w.fields;
  return block * max_size(1, 256 / block);
}

// Panel p of w (rows p*nr .. p*nr+nr-1) decoded into the dense GEMM layout [K][nr] (rows past n
// as zeros), one chunk of columns at a time: the level's row decoder into `rows` (nr x chunk
// floats), then its SIMD transpose into the panel. Decoding whole rows and scattering them a
// column at a time touched a new cache line per value: ResNet-18's 7x7, 512 -> 512 layer took
// 2.5x the dense convolution's time, the decode more than the multiply.
void decode_clustered_panel(const ClusteredWeights& w, size_t p, size_t nr, float* rows, float* panel) {
  const KernelTable& t = *w.table;
  const size_t chunk = clustered_chunk_columns(w);
  const size_t block = w.nibbles ? 64 : w.lanes * w.fields, block_words = w.nibbles ? 8 : w.lanes;
  const size_t ncur = min_size(nr, w.n - p * nr);
  for (size_t k0 = 0; k0 < w.k; k0 += chunk) {
    const size_t kcur = min_size(chunk, w.k - k0);
    const size_t word0 = k0 / block * block_words, words = div_up(kcur, block) * block_words;
    for (size_t j = 0; j < ncur; ++j) {
      const size_t r = p * nr + j;
      t.clustered_decode(w.words.data() + r * w.words_per_row + word0, words,
                         w.tables.data() + (w.per_row ? r * w.table_size : 0), w.bits, w.nibbles, rows + j * chunk);
    }
    t.transpose_f32(rows, chunk, panel + k0 * nr, nr, ncur, kcur);
    if (ncur < nr)
      for (size_t kk = k0; kk < k0 + kcur; ++kk) std::memset(panel + kk * nr + ncur, 0, (nr - ncur) * sizeof(float));
  }
}

ClusteredWeights pack_clustered(const uint8_t* indices, unsigned bits, size_t n, size_t k, const float* codebook,
                                bool per_row, const float* bias, const KernelTable* t) {
  return pack_clustered_impl(indices, bits, n, k, codebook, per_row, bias, t);
}

ClusteredWeights pack_clustered_f16(const uint8_t* indices, unsigned bits, size_t n, size_t k,
                                    const uint16_t* codebook, bool per_row, const float* bias, const KernelTable* t) {
  return pack_clustered_impl(indices, bits, n, k, codebook, per_row, bias, t);
}

void clustered_gemm(const float* x, size_t m, size_t ldx, const ClusteredWeights& w, float* y, size_t ldy,
                    const Activation& act, size_t threads) {
  if (m == 0) return;
  const KernelTable& t = *w.table;
  const size_t kp = w.padded_k;
  if (m == 1) {
    // Batch 1: the GEMV kernel streams the packed indices once; x is zero-padded to whole blocks.
    AlignedBuffer<float> xpad(kp);
    std::memcpy(xpad.data(), x, w.k * sizeof(float));
    std::memset(xpad.data() + w.k, 0, (kp - w.k) * sizeof(float));
    ClusteredGemvArgs args{w.words.data(), w.words_per_row, w.tables.data(), w.table_size, w.per_row, w.bits,
                           w.nibbles, xpad.data(), w.bias.data(), y, act};
    const size_t rows_per_task = 16;
    parallel_for(div_up(w.n, rows_per_task), threads, [&](size_t begin, size_t end) {
      t.clustered_gemv(&args, begin * rows_per_task, min_size(w.n, end * rows_per_task));
    });
    return;
  }
  // Batch > 1: per NR-row panel, decode that panel only ([K][NR], in L2) and run the dense
  // microkernel over all M rows, so the decode cost is shared by the whole batch.
  const size_t mr = t.gemm_mr, nr = t.gemm_nr;
  const size_t panels = div_up(w.n, nr);
  const size_t kc = k_block(w.k, nr, sizeof(float));
  const MinMax clamp = clamp_part(act);
  const bool post = needs_post_pass(act);
  parallel_for(panels, threads, [&](size_t begin, size_t end) {
    AlignedBuffer<float> panel(w.k * nr);
    AlignedBuffer<float> rows(nr * clustered_chunk_columns(w));
    const float* rows_of_x[64];
    for (size_t p = begin; p < end; ++p) {
      const size_t ncur = min_size(nr, w.n - p * nr);
      decode_clustered_panel(w, p, nr, rows.data(), panel.data());
      for (size_t k0 = 0; k0 < w.k; k0 += kc) {
        const size_t kcur = min_size(kc, w.k - k0);
        const uint32_t flags = (k0 > 0 ? kGemmAccumulate : 0u) | (k0 + kcur == w.k ? kGemmFinal : 0u);
        for (size_t i0 = 0; i0 < m; i0 += mr) {
          const size_t mcur = min_size(mr, m - i0);
          for (size_t i = 0; i < mr; ++i) rows_of_x[i] = x + (i0 + min_size(i, mcur - 1)) * ldx + k0;
          float* ct = y + i0 * ldy + p * nr;
          t.igemm_f32w(mcur, ncur, kcur, 1, rows_of_x, panel.data() + k0 * nr, w.bias.data() + p * nr, ct, ldy, flags,
                       &clamp);
          if (post && (flags & kGemmFinal)) post_activate(t, ct, ldy, mcur, ncur, act);
        }
      }
    }
  });
}

ClusteredConvPlan::ClusteredConvPlan(size_t n, size_t h, size_t w, size_t c, const ConvGeometry& g,
                                     const ClusteredWeights& weights)
    : n_(n), h_(h), w_(w), c_(c), g_(g), weights_(&weights) {
  oh_ = conv_output_size(h, g.kh, g.stride_h, g.dil_h, g.pad_top, g.pad_bottom);
  ow_ = conv_output_size(w, g.kw, g.stride_w, g.dil_w, g.pad_left, g.pad_right);
  require(c > 0 && weights.k == g.kh * g.kw * c, "ClusteredConvPlan: clustered weights K != KH*KW*C");
  zero_ = AlignedBuffer<float>(c);
  std::memset(zero_.data(), 0, c * sizeof(float));
  winograd_ = winograd_geometry(g) && winograd_enabled() && clustered_winograd_chosen(n, oh_, ow_, c, weights.n);
  if (winograd_) {
    tiles_h_ = div_up(oh_, kWinogradTile);
    tiles_w_ = div_up(ow_, kWinogradTile);
    tile_block_ = clustered_winograd_tile_block(n * tiles_h_ * tiles_w_, c, weights.table->gemm_mr);
  }
}

size_t ClusteredConvPlan::panel_bytes() const {
  const size_t nr = weights_->table->gemm_nr;
  const size_t floats = (weights_->k + clustered_chunk_columns(*weights_)) * nr +
                        (winograd_ ? clustered_winograd_scratch_floats(c_, nr, tile_block_) : 0);
  return floats * sizeof(float);
}

void ClusteredConvPlan::run(const float* input, float* output, const Activation& act, size_t threads) {
  if (winograd_) {
    if (n_ * oh_ * ow_ > 0 && weights_->n > 0) run_winograd(input, output, act, threads);
    return;
  }
  const ClusteredWeights& w = *weights_;
  const KernelTable& t = *w.table;
  const size_t mr = t.gemm_mr, nr = t.gemm_nr, ks = g_.kh * g_.kw;
  if (input != built_input_ || indirection_.empty()) {
    fill_indirection<float>(indirection_, input, c_, zero_.data(), mr, n_, h_, w_, oh_, ow_, g_);
    built_input_ = input;
  }
  const size_t pixels = n_ * oh_ * ow_;
  if (pixels == 0 || w.n == 0) return;
  const size_t tiles = div_up(pixels, mr), panels = div_up(w.n, nr);
  // Each unit decodes its panel once, so units are whole panels (all tiles) when there are
  // enough of them to feed the threads; otherwise the tiles are cut into as many chunks as it
  // takes. A decode costs about 1/(2 * pixels in the unit) of the unit's multiply-adds.
  const size_t want_units = threads > 1 ? 4 * threads : 1;
  const size_t chunks = panels >= want_units ? 1 : min_size(tiles, div_up(want_units, panels));
  const size_t tiles_per_chunk = div_up(tiles, chunks);
  const MinMax clamp = clamp_part(act);
  const bool post = needs_post_pass(act);
  const float* const* ind = indirection_.data();
  parallel_for(panels * chunks, threads, [&](size_t begin, size_t end) {
    AlignedBuffer<float> panel(w.k * nr);
    AlignedBuffer<float> rows(nr * clustered_chunk_columns(w));
    for (size_t unit = begin; unit < end; ++unit) {
      const size_t p = unit / chunks, chunk = unit % chunks;
      const size_t ncur = min_size(nr, w.n - p * nr);
      decode_clustered_panel(w, p, nr, rows.data(), panel.data());
      const size_t t0 = chunk * tiles_per_chunk, t1 = min_size(tiles, t0 + tiles_per_chunk);
      for (size_t tile = t0; tile < t1; ++tile) {
        const size_t mcur = min_size(mr, pixels - tile * mr);
        float* ct = output + tile * mr * w.n + p * nr;
        t.igemm_f32w(mcur, ncur, c_, ks, ind + tile * ks * mr, panel.data(), w.bias.data() + p * nr, ct, w.n,
                     kGemmFinal, &clamp);
        if (post) post_activate(t, ct, w.n, mcur, ncur, act);
      }
    }
  });
}

void nnm_gather(const float* cent, size_t pixels, size_t cent_stride, size_t groups, size_t kc,
                const int32_t* assign, size_t k, const float* bias, float* out, size_t out_stride,
                const Activation& act, size_t threads, const KernelTable* t) {
  require(groups > 0 && kc > 0 && cent_stride >= groups * kc && out_stride >= k, "nnm_gather: bad shape");
  for (size_t i = 0; i < groups * k; ++i)
    require(assign[i] >= 0 && static_cast<size_t>(assign[i]) < kc, "nnm_gather: assignment out of range");
  NnmGatherArgs args{cent, assign, bias, out, k, kc, groups, cent_stride, out_stride, act};
  const NnmGatherUkernel kernel = table_or_active(t).nnm_gather;
  const size_t per_task = 16;
  parallel_for(div_up(pixels, per_task), threads, [&](size_t begin, size_t end) {
    kernel(&args, begin * per_task, min_size(pixels, end * per_task));
  });
}

}  // namespace edgesdk::kernels
