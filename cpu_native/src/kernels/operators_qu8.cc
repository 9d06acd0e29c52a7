// qu8 drivers: packing, the GEMM and convolution tiling, and the threaded element-wise and pooling
// operators around the qu8 microkernels (operators_qu8.h).
#include "kernels/operators_qu8.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/indirection.h"
#include "kernels/requantization.h"
#include "kernels/thread_pool.h"

namespace edgesdk::kernels {
namespace {

const KernelTable& table_or_active(const KernelTable* t) { return t != nullptr ? *t : active_kernels(); }

void require(bool ok, const char* what) {
  if (!ok) throw std::invalid_argument(what);
}

// (The messages are built only on failure: these run once per channel and call.)
void require_shift(int32_t shift, const char* what) {
  if (shift < -31 || shift > 30)
    throw std::invalid_argument(std::string(what) + ": shift " + std::to_string(shift) + " outside [-31, 30]");
}

void require_clamp(uint8_t qmin, uint8_t qmax, const char* what) {
  if (qmin > qmax) throw std::invalid_argument(std::string(what) + ": qmin > qmax");
}

// int64 -> int32 modulo 2^32: the accumulators' arithmetic (ukernels.h), so a folded bias that
// leaves int32 still gives the sum every kernel computes.
int32_t wrap_int32(int64_t v) { return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(v))); }

// Where weight (column j of the panel, kernel position s, channel kk) goes in the panel, as an
// element index (int8 or int16) of the level's Qu8Layout (ukernels.h).
size_t packed_index(Qu8Layout layout, size_t nr, size_t kcp, size_t s, size_t kk, size_t j) {
  switch (layout) {
    case Qu8Layout::KMajor: return (s * kcp + kk) * nr + j;
    case Qu8Layout::C4: return ((s * kcp / 4 + kk / 4) * nr + j) * 4 + kk % 4;
    case Qu8Layout::C4Split16: {
      const size_t step = s * kcp / 4 + kk / 4, t = kk % 4;
      return (step * 2 * nr + (t % 2) * nr + j) * 2 + t / 2;
    }
  }
  return 0;
}

Qu8Output make_output(uint8_t zp, uint8_t qmin, uint8_t qmax) { return Qu8Output{zp, qmin, qmax}; }

}  // namespace

PackedQu8Weights pack_qu8_gemm_weights(const int8_t* w, size_t n, size_t k, const int32_t* bias, uint8_t x_zp,
                                       const int32_t* multiplier, const int32_t* shift, uint8_t y_zp, uint8_t qmin,
                                       uint8_t qmax, const KernelTable* t, size_t kh, size_t kw) {
  require(n > 0 && k > 0, "pack_qu8_gemm_weights: empty matrix");
  require(kh > 0 && kw > 0 && k % (kh * kw) == 0, "pack_qu8_gemm_weights: K is not a multiple of KH*KW");
  require_clamp(qmin, qmax, "pack_qu8_gemm_weights");
  for (size_t o = 0; o < n; ++o) require_shift(shift[o], "pack_qu8_gemm_weights");
  PackedQu8Weights out;
  out.table = &table_or_active(t);
  const KernelTable& tab = *out.table;
  out.n = n;
  out.k = k;
  out.kh = kh;
  out.kw = kw;
  out.c = k / (kh * kw);
  out.mr = tab.qu8_gemm_mr;
  out.nr = tab.qu8_gemm_nr;
  out.kr = tab.qu8_gemm_kr;
  out.kcp = round_up(out.c, out.kr);
  out.input_zero_point = x_zp;
  out.out = make_output(y_zp, qmin, qmax);
  out.narrow = tab.qu8_igemm_narrow != nullptr && qu8_pairs_fit_int16(w, n, k, kh * kw);
  const size_t nr = out.nr, panels = out.panel_count(), ks = out.ks();
  const Qu8Layout layout = out.layout();
  out.panels = AlignedBuffer<uint8_t>(panels * out.panel_bytes());
  std::memset(out.panels.data(), 0, panels * out.panel_bytes());
  out.bias = AlignedBuffer<int32_t>(panels * nr);
  out.rq = AlignedBuffer<int32_t>(panels * kQu8RqRows * nr);
  auto* w8 = reinterpret_cast<int8_t*>(out.panels.data());
  auto* w16 = reinterpret_cast<int16_t*>(out.panels.data());
  for (size_t p = 0; p < panels; ++p) {
    int32_t* rq = out.rq.data() + p * kQu8RqRows * nr;
    for (size_t j = 0; j < nr; ++j) {
      const size_t col = p * nr + j;
      if (col >= n) {  // padding columns: zero weights and bias, computed and never stored
        out.bias[col] = 0;
        qu8_set_requant(rq, nr, j, qu8_requant_of(0, 0));
        continue;
      }
      int64_t sum = 0;
      for (size_t s = 0; s < ks; ++s)
        for (size_t kk = 0; kk < out.c; ++kk) {
          const int8_t v = w[col * k + s * out.c + kk];
          sum += v;
          const size_t idx = p * out.panel_bytes() / out.elem_size() + packed_index(layout, nr, out.kcp, s, kk, j);
          if (out.elem_size() == 2) w16[idx] = v;
          else w8[idx] = v;
        }
      const int64_t b = bias != nullptr ? bias[col] : 0;
      out.bias[col] = wrap_int32(b - static_cast<int64_t>(x_zp) * sum + (tab.qu8_xor80 ? 128 * sum : 0));
      qu8_set_requant(rq, nr, j, qu8_requant_of(multiplier[col], shift[col]));
    }
  }
  return out;
}

// The next GEMM call from panel p (of [.., p_end)): two panels where the level has a two-panel
// kernel and two remain, else one.
struct PanelStep {
  size_t panels;
  Qu8IgemmUkernel kernel;
};
static PanelStep panel_step(const PackedQu8Weights& w, size_t p, size_t p_end) {
  if (w.kernel_x2() != nullptr && p + 1 < p_end) return {2, w.kernel_x2()};
  return {1, w.kernel()};
}

bool qu8_pairs_fit_int16(const int8_t* w, size_t n, size_t k, size_t ks) {
  const size_t c = k / ks;
  for (size_t o = 0; o < n; ++o)
    for (size_t s = 0; s < ks; ++s) {
      const int8_t* row = w + o * k + s * c;
      for (size_t kk = 0; kk < c; kk += 2) {  // pairs (0, 1), (2, 3), ...: C4's byte pairs
        const int w0 = row[kk], w1 = kk + 1 < c ? row[kk + 1] : 0;
        if (std::max(w0, 0) + std::max(w1, 0) > 128 || std::max(-w0, 0) + std::max(-w1, 0) > 128) return false;
      }
    }
  return true;
}

void Qu8RowGuard::plan(size_t rows, size_t stride, size_t width) {
  rows_ = rows;
  stride_ = stride;
  width_ = width;
  padded_ = round_up(width, 4);
  const size_t excess = padded_ - width;
  first_ = rows;
  while (first_ > 0 && (rows - first_) * stride < excess) --first_;  // row first_ - 1 is unsafe
  if (first_ < rows) {
    copies_ = AlignedBuffer<uint8_t>((rows - first_) * padded_);
    std::memset(copies_.data(), 0, copies_.size());
  }
}

void Qu8RowGuard::fill(const uint8_t* base) {
  for (size_t i = first_; i < rows_; ++i) std::memcpy(copies_.data() + (i - first_) * padded_, base + i * stride_, width_);
}

void qu8_gemm(const uint8_t* a, size_t m, size_t lda, const PackedQu8Weights& w, uint8_t* c, size_t ldc,
              size_t threads) {
  if (m == 0) return;
  require(w.ks() == 1, "qu8_gemm: the weights are packed for a convolution kernel larger than 1x1");
  require(lda >= w.k && ldc >= w.n, "qu8_gemm: row stride smaller than the row");
  const size_t mr = w.mr, nr = w.nr;
  Qu8RowGuard guard;  // a copy of the last rows when K % 4 != 0 (an allocation only then)
  guard.plan(m, lda, w.k);
  guard.fill(a);
  // Tiles as gemm() cuts them (operators.cc): row blocks of 16 microtiles, panels split further
  // only to feed the threads. No K blocking: the requantization is fused, so a tile needs its
  // whole sum in one call; a panel is K * NR bytes (int16: 2x), 74 KB at K = 4608, read from L2.
  const size_t mb = mr * 16;
  const size_t m_tiles = div_up(m, mb);
  const size_t panels = w.panel_count();
  size_t n_tiles = 1;
  if (threads > 1 && m_tiles < 8 * threads) n_tiles = min_size(panels, div_up(8 * threads, m_tiles));
  const size_t panels_per_tile = div_up(panels, n_tiles);
  n_tiles = div_up(panels, panels_per_tile);
  auto run_tile = [&](size_t tile) {
    const size_t mt = tile / n_tiles, nt = tile % n_tiles;  // row-major: see TileGrid
    const size_t m0 = mt * mb, m1 = min_size(m, m0 + mb);
    const size_t p0 = nt * panels_per_tile, p1 = min_size(panels, p0 + panels_per_tile);
    const uint8_t* rows[64];  // MR pointers (MR <= 64)
    for (size_t p = p0; p < p1;) {
      const PanelStep step = panel_step(w, p, p1);
      const size_t ncur = min_size(step.panels * nr, w.n - p * nr);
      for (size_t i0 = m0; i0 < m1; i0 += mr) {
        const size_t mcur = min_size(mr, m1 - i0);
        for (size_t i = 0; i < mr; ++i) rows[i] = guard.row(a, i0 + min_size(i, mcur - 1));
        step.kernel(mcur, ncur, w.k, 1, rows, w.panel(p), w.bias.data() + p * nr, w.panel_rq(p), c + i0 * ldc + p * nr,
                    ldc, &w.out);
      }
      p += step.panels;
    }
  };
  parallel_for(m_tiles * n_tiles, threads, [&](size_t begin, size_t end) {
    for (size_t tile = begin; tile < end; ++tile) run_tile(tile);
  });
}

// ---------------------------------------------------------------------------------------------

Qu8ConvPlan::Qu8ConvPlan(size_t n, size_t h, size_t w, size_t c, const ConvGeometry& g,
                         const PackedQu8Weights& weights)
    : n_(n), h_(h), w_(w), c_(c), g_(g), weights_(&weights) {
  oh_ = conv_output_size(h, g.kh, g.stride_h, g.dil_h, g.pad_top, g.pad_bottom);
  ow_ = conv_output_size(w, g.kw, g.stride_w, g.dil_w, g.pad_left, g.pad_right);
  if (weights.kh != g.kh || weights.kw != g.kw)
    throw std::invalid_argument("Qu8ConvPlan: the weights are packed for a " + std::to_string(weights.kh) + "x" +
                                std::to_string(weights.kw) + " kernel, not " + std::to_string(g.kh) + "x" +
                                std::to_string(g.kw));
  require(weights.c == c, "Qu8ConvPlan: packed weights K != KH*KW*C");
  direct_gemm_ = g.kh == 1 && g.kw == 1 && g.stride_h == 1 && g.stride_w == 1 && g.pad_top == 0 &&
                 g.pad_left == 0 && g.pad_bottom == 0 && g.pad_right == 0;
  if (!direct_gemm_) {
    padding_ = AlignedBuffer<uint8_t>(round_up(c, 64));
    std::memset(padding_.data(), weights.input_zero_point, padding_.size());
  }
}

void Qu8ConvPlan::run(const uint8_t* input, uint8_t* output, size_t threads, size_t in_stride, size_t out_stride) {
  const PackedQu8Weights& w = *weights_;
  if (in_stride == 0) in_stride = c_;
  if (out_stride == 0) out_stride = w.n;
  require(in_stride >= c_ && out_stride >= w.n, "Qu8ConvPlan::run: pixel stride smaller than the channels");
  if (n_ * oh_ * ow_ == 0) return;
  if (direct_gemm_) {
    qu8_gemm(input, n_ * h_ * w_, in_stride, w, output, out_stride, threads);
    return;
  }
  if (input != built_input_ || in_stride != built_stride_ || indirection_.empty()) {
    fill_indirection<uint8_t>(indirection_, input, in_stride, padding_.data(), w.mr, n_, h_, w_, oh_, ow_, g_);
    guard_.plan(n_ * h_ * w_, in_stride, c_);
    if (guard_.first() < n_ * h_ * w_) {
      const uint8_t* unsafe = input + guard_.first() * in_stride;
      for (const uint8_t*& p : indirection_)
        if (p != padding_.data() && p >= unsafe) p = guard_.copy(static_cast<size_t>(p - input) / in_stride);
    }
    built_input_ = input;
    built_stride_ = in_stride;
  }
  guard_.fill(input);
  const size_t mr = w.mr, nr = w.nr, ks = w.ks();
  const size_t pixels = n_ * oh_ * ow_;
  const size_t tiles = div_up(pixels, mr);
  const size_t panels = w.panel_count();
  const TileGrid grid(tiles, panels, threads);
  const uint8_t* const* ind = indirection_.data();
  grid.for_each_block(threads, [&](size_t t0, size_t t1, size_t p0, size_t p1) {
    for (size_t p = p0; p < p1;) {
      const PanelStep step = panel_step(w, p, p1);
      const size_t ncur = min_size(step.panels * nr, w.n - p * nr);
      for (size_t tile = t0; tile < t1; ++tile) {
        const size_t mcur = min_size(mr, pixels - tile * mr);
        step.kernel(mcur, ncur, c_, ks, ind + tile * ks * mr, w.panel(p), w.bias.data() + p * nr, w.panel_rq(p),
                    output + tile * mr * out_stride + p * nr, out_stride, &w.out);
      }
      p += step.panels;
    }
  });
}

// ---------------------------------------------------------------------------------------------

Qu8DwPacker qu8_dw_packer(Isa isa, bool narrow) {
  Qu8DwPacker p;
  switch (isa) {
#if defined(__x86_64__) || defined(_M_X64)
    case Isa::Avx2:
      p.bytes = narrow ? qu8_dw_narrow_bytes__avx2 : qu8_dw_bytes__avx2;
      p.pack = narrow ? qu8_dw_narrow_pack__avx2 : qu8_dw_pack__avx2;
      p.block = 32;
      break;
    case Isa::AvxVnni: p.bytes = qu8_dw_bytes__avxvnni; p.pack = qu8_dw_pack__avxvnni; p.block = 32; break;
    case Isa::Avx512: p.bytes = qu8_dw_bytes__avx512skx; p.pack = qu8_dw_pack__avx512skx; p.block = 64; break;
    case Isa::Avx512Vnni:
    case Isa::Avx512Amx:  // avx512vnni's depthwise kernel
      p.bytes = qu8_dw_bytes__avx512vnni; p.pack = qu8_dw_pack__avx512vnni; p.block = 64; break;
#endif
    default: break;
  }
  return p;
}

bool qu8_dw_pairs_fit_int16(const int8_t* w, size_t c, size_t kh, size_t kw) {
  for (size_t ky = 0; ky < kh; ky += 2)  // rows (0, 1), (2, 3), ...: each 4-row group's byte pairs
    for (size_t kx = 0; kx < kw; ++kx)
      for (size_t ch = 0; ch < c; ++ch) {
        const int w0 = w[(ky * kw + kx) * c + ch], w1 = ky + 1 < kh ? w[((ky + 1) * kw + kx) * c + ch] : 0;
        if (std::max(w0, 0) + std::max(w1, 0) > 128 || std::max(-w0, 0) + std::max(-w1, 0) > 128) return false;
      }
  return true;
}

Qu8DepthwisePlan::Qu8DepthwisePlan(size_t n, size_t h, size_t w, size_t c, size_t multiplier, const ConvGeometry& g,
                                   const int8_t* weights, const int32_t* bias, uint8_t x_zp,
                                   const int32_t* out_multiplier, const int32_t* out_shift, uint8_t y_zp,
                                   uint8_t qmin, uint8_t qmax, const KernelTable* t) {
  require(multiplier > 0 && c > 0, "qu8_depthwise_conv: empty channels");
  require(g.kh > 0 && g.kw > 0, "qu8_depthwise_conv: empty kernel");
  require_clamp(qmin, qmax, "qu8_depthwise_conv");
  const size_t oc = c * multiplier, taps = g.kh * g.kw;
  for (size_t o = 0; o < oc; ++o) require_shift(out_shift[o], "qu8_depthwise_conv");
  Qu8DepthwiseArgs& args = args_;
  args.n = n; args.h = h; args.w = w; args.c = c; args.multiplier = multiplier;
  set_window(args, g, h, w);
  args.in_stride = c;
  args.out_stride = oc;
  args.input_zero_point = x_zp;
  args.out = make_output(y_zp, qmin, qmax);
  weights_ = AlignedBuffer<int8_t>(taps * oc);
  std::memcpy(weights_.data(), weights, taps * oc);
  if (bias != nullptr) {
    bias_ = AlignedBuffer<int32_t>(oc);
    std::memcpy(bias_.data(), bias, oc * sizeof(int32_t));
  }
  rq_ = AlignedBuffer<int32_t>(kQu8RqRows * oc);
  for (size_t o = 0; o < oc; ++o) qu8_set_requant(rq_.data(), oc, o, qu8_requant_of(out_multiplier[o], out_shift[o]));
  // folded = bias - x_zp * sum of the taps' weights, modulo 2^32 (uint32 arithmetic).
  folded_ = AlignedBuffer<int32_t>(oc);
  auto* fold = reinterpret_cast<uint32_t*>(folded_.data());
  for (size_t o = 0; o < oc; ++o) fold[o] = bias != nullptr ? static_cast<uint32_t>(bias[o]) : 0u;
  for (size_t tap = 0; tap < taps; ++tap)
    for (size_t o = 0; o < oc; ++o) fold[o] -= static_cast<uint32_t>(x_zp * weights[tap * oc + o]);
  args.weights = weights_.data();
  args.bias = bias != nullptr ? bias_.data() : nullptr;
  args.bias_folded = folded_.data();
  args.rq = rq_.data();
  const KernelTable& tab = table_or_active(t);
  const bool narrow = tab.qu8_depthwise_narrow != nullptr && multiplier == 1 &&
                      qu8_dw_pairs_fit_int16(weights, c, g.kh, g.kw);
  const Qu8DwPacker packer = qu8_dw_packer(tab.isa, narrow);
  const bool packed_window = g.kh <= kQu8DwMaxRows && taps <= kQu8DwMaxTaps;
  if (multiplier != 1 || (packer.packs() && !packed_window)) {
    kernel_ = qu8_depthwise__scalar;
    name_ = "qu8_depthwise__scalar";
    return;
  }
  kernel_ = narrow ? tab.qu8_depthwise_narrow : tab.qu8_depthwise;
  name_ = narrow ? tab.names.qu8_depthwise_narrow : tab.names.qu8_depthwise;
  if (packer.packs()) {
    packed_ = AlignedBuffer<uint8_t>(packer.bytes(c, g.kh, g.kw));
    const Qu8DwPackArgs pa{weights_.data(), folded_.data(), rq_.data(), c, g.kh, g.kw};
    packer.pack(&pa, packed_.data());
    args.weights_lo16 = reinterpret_cast<const int32_t*>(packed_.data());
    slice_ = packer.block;
    packed_bytes_ = packer.bytes;
  }
}

void Qu8DepthwisePlan::run(const uint8_t* input, uint8_t* output, size_t threads) const {
  Qu8DepthwiseArgs args = args_;
  args.input = input;
  args.output = output;
  if (args.n * args.oh * args.ow == 0) return;
  const Qu8DepthwiseUkernel kernel = kernel_;
  const size_t rows = args.n * args.oh, c = args.c;
  // Late MobileNet layers have 7 or 14 output rows: split by rows alone, 2 threads get 4 and 3
  // (or 7 and 7 with nothing to even out a slow start). Under 8 rows a thread, rows are split
  // into channel slices too (packed levels: whole blocks, see Qu8DwPacker).
  size_t slices = 1;
  if (threads > 1 && slice_ > 0 && rows < 8 * threads) slices = min_size(div_up(c, slice_), div_up(8 * threads, rows));
  if (slices <= 1) {
    parallel_for(rows, threads, [&](size_t begin, size_t end) { kernel(&args, begin, end); }, Partition::Dynamic, 1);
    return;
  }
  const size_t per = round_up(div_up(c, slices), slice_);  // channels per slice
  slices = div_up(c, per);
  const auto* packed = reinterpret_cast<const uint8_t*>(args.weights_lo16);
  parallel_for(rows * slices, threads, [&](size_t begin, size_t end) {
    for (size_t unit = begin; unit < end; ++unit) {
      const size_t row = unit / slices, c0 = unit % slices * per;
      Qu8DepthwiseArgs part = args;
      part.c = min_size(per, c - c0);
      part.input += c0;
      part.output += c0;
      part.weights_lo16 = reinterpret_cast<const int32_t*>(packed + packed_bytes_(c0, args.kh, args.kw));
      kernel(&part, row, row + 1);
    }
  }, Partition::Dynamic, 1);
}

void qu8_depthwise_conv(const uint8_t* input, size_t n, size_t h, size_t w, size_t c, size_t multiplier,
                        const ConvGeometry& g, const int8_t* weights, const int32_t* bias, uint8_t x_zp,
                        const int32_t* out_multiplier, const int32_t* out_shift, uint8_t y_zp, uint8_t qmin,
                        uint8_t qmax, uint8_t* output, size_t threads, const KernelTable* t) {
  Qu8DepthwisePlan(n, h, w, c, multiplier, g, weights, bias, x_zp, out_multiplier, out_shift, y_zp, qmin, qmax, t)
      .run(input, output, threads);
}

// ---------------------------------------------------------------------------------------------

// The streaming kernels (QuantizeLinear, DequantizeLinear, the NHWC interleave) have one variant
// per register width, shared by the levels of that width: which width a level is, in one place.
enum class StreamWidth { Scalar, Avx2, Avx512, Neon };
static StreamWidth stream_width(Isa isa) {
  switch (isa) {
    case Isa::Avx2:
    case Isa::AvxVnni: return StreamWidth::Avx2;
    case Isa::Avx512:
    case Isa::Avx512Vnni:
    case Isa::Avx512Amx: return StreamWidth::Avx512;
    case Isa::Neon:
    case Isa::NeonFp16:
    case Isa::NeonDot: return StreamWidth::Neon;
    default: return StreamWidth::Scalar;
  }
}

// kernel, its symbol's spelling stored in *name (when asked for).
template <class K>
static K named(K kernel, const char* spelled, const char** name) {
  if (name != nullptr) *name = spelled;
  return kernel;
}
#define EDGESDK_NAMED(kernel) named(kernel, #kernel, name)

Qu8QuantizeUkernel qu8_quantize_kernel(Isa isa, const char** name) {
  switch (stream_width(isa)) {
#if defined(__x86_64__) || defined(_M_X64)
    case StreamWidth::Avx2: return EDGESDK_NAMED(qu8_quantize_32x__avx2);
    case StreamWidth::Avx512: return EDGESDK_NAMED(qu8_quantize_64x__avx512skx);
#endif
#if defined(__aarch64__)
    case StreamWidth::Neon: return EDGESDK_NAMED(qu8_quantize_16x__neon);
#endif
    default: return EDGESDK_NAMED(qu8_quantize__scalar);
  }
}

Qu8DequantizeUkernel qu8_dequantize_kernel(Isa isa, const char** name) {
  switch (stream_width(isa)) {
#if defined(__x86_64__) || defined(_M_X64)
    case StreamWidth::Avx2: return EDGESDK_NAMED(qu8_dequantize_32x__avx2);
    case StreamWidth::Avx512: return EDGESDK_NAMED(qu8_dequantize_64x__avx512skx);
#endif
#if defined(__aarch64__)
    case StreamWidth::Neon: return EDGESDK_NAMED(qu8_dequantize_16x__neon);
#endif
    default: return EDGESDK_NAMED(qu8_dequantize__scalar);
  }
}
#undef EDGESDK_NAMED

// QuantizeLinear's codes: uint8 or int8 values.
static void require_code_range(int32_t qmin, int32_t qmax) {
  require(qmin >= -128 && qmin <= qmax && qmax <= 255, "qu8_quantize_linear: need -128 <= qmin <= qmax <= 255");
}

U8InterleaveUkernel u8_interleave_kernel(Isa isa) {
  switch (stream_width(isa)) {
#if defined(__x86_64__) || defined(_M_X64)
    case StreamWidth::Avx2: return u8_interleave__avx2;
    case StreamWidth::Avx512: return u8_interleave__avx512skx;
#endif
#if defined(__aarch64__)
    case StreamWidth::Neon: return u8_interleave__neon;
#endif
    default: return u8_interleave__scalar;
  }
}

const char* qu8_quantize_kernel_name(const KernelTable* t) {
  const char* name = nullptr;
  qu8_quantize_kernel(table_or_active(t).isa, &name);
  return name;
}

void qu8_quantize_linear(const float* x, size_t count, float scale, float zero_point, int32_t qmin, int32_t qmax,
                         uint8_t* y, size_t threads, const KernelTable* t) {
  require_code_range(qmin, qmax);
  const Qu8QuantizeUkernel kernel = qu8_quantize_kernel(table_or_active(t).isa);
  const Qu8QuantizeParams params{scale, zero_point, qmin, qmax};
  const size_t chunk = 16384;
  parallel_for(div_up(count, chunk), threads, [&](size_t begin, size_t end) {
    const size_t lo = begin * chunk, hi = min_size(count, end * chunk);
    kernel(x + lo, y + lo, hi - lo, &params);
  });
}

const char* qu8_dequantize_kernel_name(const KernelTable* t) {
  const char* name = nullptr;
  qu8_dequantize_kernel(table_or_active(t).isa, &name);
  return name;
}

void qu8_dequantize_linear(const uint8_t* x, bool is_signed, size_t count, float scale, int32_t zero_point, float* y,
                           size_t threads, const KernelTable* t) {
  require(zero_point >= (is_signed ? -128 : 0) && zero_point <= (is_signed ? 127 : 255),
          "qu8_dequantize_linear: the zero point is not a code of the input's type");
  const Qu8DequantizeUkernel kernel = qu8_dequantize_kernel(table_or_active(t).isa);
  const Qu8DequantizeParams params{scale, zero_point, is_signed};
  const size_t chunk = 16384;
  parallel_for(div_up(count, chunk), threads, [&](size_t begin, size_t end) {
    const size_t lo = begin * chunk, hi = min_size(count, end * chunk);
    kernel(x + lo, y + lo, hi - lo, &params);
  });
}

void qu8_quantize_linear_to_nhwc(const float* x, size_t n, size_t c, size_t hw, float scale, float zero_point,
                                 int32_t qmin, int32_t qmax, uint8_t* y, size_t threads, const KernelTable* t) {
  require_code_range(qmin, qmax);
  const Isa isa = table_or_active(t).isa;
  const Qu8QuantizeUkernel quantize = qu8_quantize_kernel(isa);
  const U8InterleaveUkernel interleave = u8_interleave_kernel(isa);
  const Qu8QuantizeParams params{scale, zero_point, qmin, qmax};
  // Tasks of ~16K values, in blocks of pixels whose c planes of codes (at most 16 KB) stay in L1
  // between the quantize pass and the interleave.
  const size_t block = max_size(64, round_up(div_up(16384, max_size(c, 1)), 64));
  const size_t blocks = div_up(hw, block);
  parallel_for(n * blocks, threads, [&](size_t begin, size_t end) {
    thread_local AlignedBuffer<uint8_t> planes;
    if (planes.size() < c * block) planes = AlignedBuffer<uint8_t>(c * block);
    for (size_t task = begin; task < end; ++task) {
      const size_t b = task / blocks, p0 = task % blocks * block, count = min_size(block, hw - p0);
      for (size_t ch = 0; ch < c; ++ch) quantize(x + (b * c + ch) * hw + p0, planes.data() + ch * block, count, &params);
      interleave(planes.data(), block, c, y + (b * hw + p0) * c, count);
    }
  });
}

namespace {

void run_binary(Qu8BinaryUkernel kernel, const Qu8BinaryArgs& args, size_t rows, size_t threads) {
  if (args.broadcast == Broadcast::None) {
    // Same-shape operands are one flat run of rows * C values: tasks of about 4K values (~3 us
    // each, so a 14x14x64 residual add splits too), a multiple of 64 so every task but the last
    // fills whole vectors (rows of C = 24 left a third of the second 16-lane vector idle), and
    // as many as makes equal shares (12544 values as 4 x 3136, not 3 x 4096 + 256), each one
    // row of the kernel.
    const size_t total = rows * args.c;
    size_t tasks = div_up(total, 4096);
    if (threads > 1) tasks = round_up(tasks, threads);
    const size_t per_task = round_up(div_up(total, tasks), 64);
    parallel_for(div_up(total, per_task), threads, [&](size_t begin, size_t end) {
      Qu8BinaryArgs part = args;
      const size_t first = begin * per_task;
      part.a += first;
      part.b += first;
      part.y += first;
      part.c = min_size(total, end * per_task) - first;
      kernel(&part, 0, 1);
    });
    return;
  }
  // Rows grouped so each task moves at least ~16K values.
  const size_t rows_per_task = max_size(1, 16384 / max_size(args.c, 1));
  parallel_for(div_up(rows, rows_per_task), threads, [&](size_t begin, size_t end) {
    kernel(&args, begin * rows_per_task, min_size(rows, end * rows_per_task));
  });
}

}  // namespace

bool qu8_add_takes_fp32(int32_t a_mult, int32_t a_shift, int32_t b_mult, int32_t b_shift, int32_t out_mult,
                        int32_t out_shift) {
  Qu8BinaryArgs args{};
  args.a_rq = qu8_requant_of(a_mult, a_shift);
  args.b_rq = qu8_requant_of(b_mult, b_shift);
  args.out_rq = qu8_requant_of(out_mult, out_shift);
  Qu8AddFp unused;
  return qu8_add_fp(args, &unused);
}

void qu8_add(const uint8_t* a, uint8_t a_zp, const uint8_t* b, uint8_t b_zp, uint8_t* y, uint8_t y_zp, size_t rows,
             size_t c, Broadcast broadcast, int32_t a_mult, int32_t a_shift, int32_t b_mult, int32_t b_shift,
             int32_t out_mult, int32_t out_shift, uint8_t qmin, uint8_t qmax, size_t threads, const KernelTable* t) {
  require_shift(a_shift, "qu8_add");
  require_shift(b_shift, "qu8_add");
  require_shift(out_shift, "qu8_add");
  require_clamp(qmin, qmax, "qu8_add");
  const KernelTable& tab = table_or_active(t);
  const Qu8BinaryArgs args{a, b, y, c, broadcast, a_zp, b_zp, qu8_requant_of(a_mult, a_shift),
                           qu8_requant_of(b_mult, b_shift), qu8_requant_of(out_mult, out_shift),
                           make_output(y_zp, qmin, qmax)};
  run_binary(tab.qu8_add, args, rows, threads);
}

void qu8_mul(const uint8_t* a, uint8_t a_zp, const uint8_t* b, uint8_t b_zp, uint8_t* y, uint8_t y_zp, size_t rows,
             size_t c, Broadcast broadcast, int32_t mult, int32_t shift, uint8_t qmin, uint8_t qmax, size_t threads,
             const KernelTable* t) {
  require_shift(shift, "qu8_mul");
  require_clamp(qmin, qmax, "qu8_mul");
  const KernelTable& tab = table_or_active(t);
  const Qu8Requant none = qu8_requant_of(0, 0);
  const Qu8BinaryArgs args{a, b, y, c, broadcast, a_zp, b_zp, none, none, qu8_requant_of(mult, shift),
                           make_output(y_zp, qmin, qmax)};
  run_binary(tab.qu8_mul, args, rows, threads);
}

void qu8_global_avgpool(const uint8_t* x, size_t n, size_t hw, size_t c, uint8_t x_zp, uint8_t* y, uint8_t y_zp,
                        int32_t mult, int32_t shift, uint8_t qmin, uint8_t qmax, size_t threads,
                        const KernelTable* t) {
  require_shift(shift, "qu8_global_avgpool");
  require_clamp(qmin, qmax, "qu8_global_avgpool");
  const Qu8GlobalAvgPoolUkernel kernel = table_or_active(t).qu8_global_avgpool;
  const Qu8Requant rq = qu8_requant_of(mult, shift);
  const Qu8Output out = make_output(y_zp, qmin, qmax);
  parallel_for(n, threads, [&](size_t begin, size_t end) {
    for (size_t b = begin; b < end; ++b) kernel(x + b * hw * c, hw, c, c, y + b * c, x_zp, &rq, &out);
  });
}

namespace {

Qu8PoolArgs pool_args(const uint8_t* x, size_t n, size_t h, size_t w, size_t c, const ConvGeometry& g, uint8_t* y) {
  Qu8PoolArgs args{};
  args.input = x;
  args.output = y;
  args.n = n; args.h = h; args.w = w; args.c = c;
  set_window(args, g, h, w);
  args.pad_bottom = g.pad_bottom; args.pad_right = g.pad_right;
  args.in_stride = c;
  args.out_stride = c;
  return args;
}

}  // namespace

void qu8_avgpool(const uint8_t* x, size_t n, size_t h, size_t w, size_t c, uint8_t x_zp, const ConvGeometry& g,
                 bool count_include_pad, const int32_t* mult, const int32_t* shift, uint8_t y_zp, uint8_t qmin,
                 uint8_t qmax, uint8_t* y, size_t threads, const KernelTable* t) {
  require_clamp(qmin, qmax, "qu8_avgpool");
  Qu8PoolArgs args = pool_args(x, n, h, w, c, g, y);
  const size_t entries = g.kh * g.kw + 1;
  AlignedBuffer<int32_t> rq(kQu8RqRows * entries);
  for (size_t e = 0; e < entries; ++e) {
    require_shift(shift[e], "qu8_avgpool");
    qu8_set_requant(rq.data(), entries, e, qu8_requant_of(mult[e], shift[e]));
  }
  args.count_include_pad = count_include_pad;
  args.input_zero_point = x_zp;
  args.rq = rq.data();
  args.out = make_output(y_zp, qmin, qmax);
  const Qu8PoolUkernel kernel = table_or_active(t).qu8_avgpool;
  parallel_for(n * args.oh, threads, [&](size_t begin, size_t end) { kernel(&args, begin, end); });
}

void qu8_maxpool(const uint8_t* x, size_t n, size_t h, size_t w, size_t c, const ConvGeometry& g, uint8_t* y,
                 size_t threads, const KernelTable* t) {
  const Qu8PoolArgs args = pool_args(x, n, h, w, c, g, y);
  const Qu8PoolUkernel kernel = table_or_active(t).qu8_maxpool;
  parallel_for(n * args.oh, threads, [&](size_t begin, size_t end) { kernel(&args, begin, end); });
}

void qu8_requantize(const uint8_t* x, size_t count, uint8_t x_zp, uint8_t* y, uint8_t y_zp, int32_t mult,
                    int32_t shift, uint8_t qmin, uint8_t qmax, size_t threads, const KernelTable* t) {
  require_shift(shift, "qu8_requantize");
  require_clamp(qmin, qmax, "qu8_requantize");
  const Qu8RequantizeUkernel kernel = table_or_active(t).qu8_requantize;
  const Qu8Requant rq = qu8_requant_of(mult, shift);
  const Qu8Output out = make_output(y_zp, qmin, qmax);
  const size_t chunk = 16384;
  parallel_for(div_up(count, chunk), threads, [&](size_t begin, size_t end) {
    const size_t lo = begin * chunk, hi = min_size(count, end * chunk);
    kernel(x + lo, y + lo, hi - lo, x_zp, &rq, &out);
  });
}

void qu8_concat(const Qu8ConcatPart* parts, size_t count, size_t rows, uint8_t* y, uint8_t y_zp, size_t threads,
                const KernelTable* t) {
  const Qu8RequantizeUkernel kernel = table_or_active(t).qu8_requantize;
  const Qu8Output out = make_output(y_zp, 0, 255);
  size_t y_width = 0;
  for (size_t p = 0; p < count; ++p) {
    if (!parts[p].copy) require_shift(parts[p].shift, "qu8_concat");
    y_width += parts[p].width;
  }
  // Tasks of about `chunk` bytes: whole rows where they are narrower, else pieces of one row
  // (a batch-1 NCHW concat is one row per part).
  const size_t chunk = 16384;
  size_t offset = 0;
  for (size_t p = 0; p < count; ++p) {
    const Qu8ConcatPart& part = parts[p];
    const Qu8Requant rq = qu8_requant_of(part.mult, part.shift);
    const size_t width = part.width, pieces = div_up(width, chunk), rows_per_task = std::max<size_t>(1, chunk / std::max<size_t>(width, 1));
    const size_t tasks = width >= chunk ? rows * pieces : div_up(rows, rows_per_task);
    uint8_t* const yp = y + offset;
    auto span = [&](size_t r, size_t c0, size_t c1) {
      const uint8_t* src = part.x + r * width + c0;
      uint8_t* dst = yp + r * y_width + c0;
      if (part.copy) {
        std::memcpy(dst, src, c1 - c0);
      } else {
        kernel(src, dst, c1 - c0, part.x_zp, &rq, &out);
      }
    };
    if (width > 0 && rows > 0) {
      parallel_for(tasks, threads, [&](size_t begin, size_t end) {
        for (size_t task = begin; task < end; ++task) {
          if (width >= chunk) {
            const size_t r = task / pieces, c0 = (task % pieces) * chunk;
            span(r, c0, min_size(width, c0 + chunk));
          } else {
            for (size_t r = task * rows_per_task; r < min_size(rows, (task + 1) * rows_per_task); ++r) span(r, 0, width);
          }
        }
      });
    }
    offset += width;
  }
}

void qu8_lut(const uint8_t* x, size_t count, const uint8_t* table, uint8_t* y, size_t threads, const KernelTable* t) {
  const Qu8LutUkernel kernel = table_or_active(t).qu8_lut;
  const size_t chunk = 32768;
  parallel_for(div_up(count, chunk), threads, [&](size_t begin, size_t end) {
    const size_t lo = begin * chunk, hi = min_size(count, end * chunk);
    kernel(x + lo, y + lo, hi - lo, table);
  });
}

}  // namespace edgesdk::kernels
