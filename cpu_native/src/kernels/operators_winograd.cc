// Winograd F(4x4, 3x3) convolution (ukernels.h; seed 001 ch. III; Lavin & Gray 2016): the weight
// transform, the rule that picks it, and ConvPlan's driver for it.
//
// The driver cuts the N x ceil(OH/4) x ceil(OW/4) output tiles into blocks of `tile_block` tiles.
// For a block it transforms the input patches (the level's winograd_input) into V [36][tiles][C],
// runs the 36 GEMMs M_e = V_e U_e with the level's igemm_f32w (the transformed weights U are packed
// as its panels), and transforms M [36][tiles][K] back into the block's NHWC output pixels
// (winograd_output, with the bias and the clamp part of the activation; the other activations as a
// pass over the tile). V and M are scratch of one block, no full-size transformed tensor exists.
// Threads: while U fits L2, each thread takes whole units (a block, or a block and a group of K
// panels when there are too few blocks to feed the threads) with its own V and M; beyond, the
// threads share each block phase by phase so that U streams once per block (run_winograd).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "kernels/operators.h"
#include "kernels/thread_pool.h"

namespace edgesdk::kernels {
namespace {

constexpr size_t kE = kWinogradPositions, kP = kWinogradPatch, kR = kWinogradTile;

// G of F(4x4, 3x3) (ukernels.h).
const double kG[kP][3] = {{1.0 / 4, 0.0, 0.0},         {-1.0 / 6, -1.0 / 6, -1.0 / 6}, {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                          {1.0 / 24, 1.0 / 12, 1.0 / 6}, {1.0 / 24, -1.0 / 12, 1.0 / 6}, {0.0, 0.0, 1.0}};

// Row strides of V and M: whole 64-byte lines.
size_t scratch_stride(size_t channels) { return round_up(channels, 16); }

// Tile blocks (kernel_bench --winograd). While the transformed weights U (36 C K floats) fit in L2
// (kWeightsInL2Bytes: this assumes 1 MiB or more of it), every block meets them there: a block's V
// and M then take at most kScratchBytes, so they stay in L2 beside U (56x56, 64 -> 64: 0.49 ms with
// 192-768 KiB, 0.64 ms with all 196 tiles in one block). Larger U streams from L3 or memory once per
// block, which costs more than V and M leaving L2: blocks then hold every tile, up to
// kMaxScratchBytes (28x28, 128 -> 128: 0.49 ms in one block, 0.79 ms in four; 56x56, 128 -> 128:
// 1.9 ms in one, 2.2 ms in two, 2.5 ms in five).
constexpr size_t kWeightsInL2Bytes = 1024 * 1024;
constexpr size_t kScratchBytes = 256 * 1024;
constexpr size_t kMaxScratchBytes = 16 * 1024 * 1024;

bool weights_in_l2(size_t c, size_t k) { return kE * c * k * sizeof(float) <= kWeightsInL2Bytes; }

size_t tile_count(size_t n, size_t oh, size_t ow) { return n * div_up(oh, kR) * div_up(ow, kR); }

// What both rules (winograd_chosen, clustered_winograd_chosen) ask first: C and K >= 8 and the
// 4x4 tiles at least 5/8 full on average.
bool winograd_shape_pays(size_t n, size_t oh, size_t ow, size_t c, size_t k) {
  return c >= 8 && k >= 8 && n * oh * ow >= 10 * tile_count(n, oh, ow);
}

// Tile blocks of at most `block` tiles (whole MR), as equal as they come; one block when all fit.
size_t equal_tile_blocks(size_t tiles, size_t block, size_t mr) {
  if (block >= tiles) return round_up(tiles, mr);
  return round_up(div_up(tiles, div_up(tiles, block)), mr);
}

void transform_weights(const PackedGemmWeights& w, WinogradWeights& out) {
  const size_t c = w.k / 9, k = w.n, nr = w.nr, panels = w.panel_count();
  out.c = c;
  out.k = k;
  out.nr = nr;
  out.u = AlignedBuffer<float>(kE * panels * c * nr);
  std::memset(out.u.data(), 0, out.u.size() * sizeof(float));
  const float* src = reinterpret_cast<const float*>(w.panels.data());
  // One panel column block (nr outputs) of one input channel at a time, the nr lanes innermost:
  // the panel's 9 taps are read as 9 contiguous rows and each of the 36 products written as one
  // contiguous row. (One output at a time wrote 36 scattered floats per filter: ResNet-18's
  // session took 150 ms, most of it here.)
  std::vector<double> g(9 * nr), gg(kP * 3 * nr);
  for (size_t p = 0; p < panels; ++p)
    for (size_t ch = 0; ch < c; ++ch) {
      const size_t lanes = std::min(nr, k - p * nr);  // the rest of the panel stays zero
      for (size_t tap = 0; tap < 9; ++tap) {  // g[tap][j]: the filter of output p*nr + j, channel ch
        const float* row = src + (p * w.k + tap * c + ch) * nr;
        for (size_t j = 0; j < lanes; ++j) g[tap * nr + j] = row[j];
      }
      for (size_t i = 0; i < kP; ++i)  // G g
        for (size_t x = 0; x < 3; ++x)
          for (size_t j = 0; j < lanes; ++j)
            gg[(i * 3 + x) * nr + j] = kG[i][0] * g[(0 * 3 + x) * nr + j] + kG[i][1] * g[(1 * 3 + x) * nr + j] +
                                       kG[i][2] * g[(2 * 3 + x) * nr + j];
      for (size_t i = 0; i < kP; ++i)  // (G g) G^T
        for (size_t x = 0; x < kP; ++x) {
          float* dst = out.u.data() + (((i * kP + x) * panels + p) * c + ch) * nr;
          for (size_t j = 0; j < lanes; ++j)
            dst[j] = static_cast<float>(gg[(i * 3 + 0) * nr + j] * kG[x][0] + gg[(i * 3 + 1) * nr + j] * kG[x][1] +
                                        gg[(i * 3 + 2) * nr + j] * kG[x][2]);
        }
    }
}

// Where the tiles of a Winograd convolution lie, and the two transforms both drivers (ConvPlan's
// dense weights, ClusteredConvPlan's decoded panels) run over them.
struct WinogradTiles {
  const KernelTable& t;
  size_t h, w, c, oh, ow, tiles_h, tiles_w, pad_top, pad_left;
  const float* zero;  // c zeros: the patch pixels in the padding
  const float* input;
  size_t in_stride;
  float* output;
  size_t out_stride;

  size_t per_image() const { return tiles_h * tiles_w; }

  // Input transform of tiles [t0 + i0, t0 + i1) of the block starting at tile t0: V[e][tile][C]
  // (tile stride cs, position stride tb * cs).
  void transform_input(size_t t0, size_t i0, size_t i1, float* v, size_t cs, size_t tb) const {
    const float* pixels[kP * kP];
    for (size_t i = i0; i < i1; ++i) {
      const size_t tile = t0 + i, b = tile / per_image(), ty = tile % per_image() / tiles_w, tx = tile % tiles_w;
      for (size_t py = 0; py < kP; ++py) {
        const ptrdiff_t iy = static_cast<ptrdiff_t>(ty * kR + py) - static_cast<ptrdiff_t>(pad_top);
        for (size_t px = 0; px < kP; ++px) {
          const ptrdiff_t ix = static_cast<ptrdiff_t>(tx * kR + px) - static_cast<ptrdiff_t>(pad_left);
          const bool inside = iy >= 0 && ix >= 0 && iy < static_cast<ptrdiff_t>(h) && ix < static_cast<ptrdiff_t>(w);
          pixels[py * kP + px] =
              inside ? input + ((b * h + static_cast<size_t>(iy)) * w + static_cast<size_t>(ix)) * in_stride : zero;
        }
      }
      t.winograd_input(pixels, c, v + i * cs, tb * cs);
    }
  }

  // Output transform of tiles [t0 + i0, t0 + i1) into the NHWC output, channels [k0, k1): m points
  // at column k0 of the block's first tile (tile stride ms, position stride tb * ms). `direct(o)`
  // is output o's direct 3x3 filter in the igemm layout ([9][C] with a channel stride of nr): a
  // tile's nonfinite outputs are recomputed from it as the direct convolution does (ukernels.h,
  // WinogradOutputUkernel), the NaN / inf semantics of the other paths.
  template <class Direct>
  void transform_output(size_t t0, size_t i0, size_t i1, size_t k0, size_t k1, const float* m, size_t ms,
                        size_t tb, const float* bias, const MinMax& clamp, const Activation& act, bool post,
                        size_t nr, Direct direct) const {
    for (size_t i = i0; i < i1; ++i) {
      const size_t tile = t0 + i, b = tile / per_image(), ty = tile % per_image() / tiles_w, tx = tile % tiles_w;
      const size_t oy0 = ty * kR, ox0 = tx * kR;
      const size_t rows = min_size(kR, oh - oy0), cols = min_size(kR, ow - ox0);
      float* y = output + ((b * oh + oy0) * ow + ox0) * out_stride;
      const bool nonfinite = t.winograd_output(m + i * ms, tb * ms, k1 - k0, bias + k0, y + k0, ow * out_stride,
                                               out_stride, rows, cols, &clamp);
      if (nonfinite) recompute_nonfinite(b, oy0, ox0, rows, cols, k0, k1, bias, clamp, nr, direct);
      if (post)
        for (size_t r = 0; r < rows; ++r)
          for (size_t col = 0; col < cols; ++col) t.activation(y + (r * ow + col) * out_stride + k0, k1 - k0, &act);
    }
  }

  template <class Direct>
  void recompute_nonfinite(size_t b, size_t oy0, size_t ox0, size_t rows, size_t cols, size_t k0, size_t k1,
                           const float* bias, const MinMax& clamp, size_t nr, Direct direct) const {
    for (size_t i = 0; i < rows; ++i)
      for (size_t j = 0; j < cols; ++j) {
        const size_t oy = oy0 + i, ox = ox0 + j;
        float* y = output + ((b * oh + oy) * ow + ox) * out_stride;
        for (size_t o = k0; o < k1; ++o) {
          if (std::isfinite(y[o])) continue;
          const float* filter = direct(o);
          float s = bias[o];
          for (size_t ky = 0; ky < 3; ++ky)
            for (size_t kx = 0; kx < 3; ++kx) {
              const ptrdiff_t iy = static_cast<ptrdiff_t>(oy + ky) - static_cast<ptrdiff_t>(pad_top);
              const ptrdiff_t ix = static_cast<ptrdiff_t>(ox + kx) - static_cast<ptrdiff_t>(pad_left);
              if (iy < 0 || ix < 0 || iy >= static_cast<ptrdiff_t>(h) || ix >= static_cast<ptrdiff_t>(w)) continue;
              const float* x = input + ((b * h + static_cast<size_t>(iy)) * w + static_cast<size_t>(ix)) * in_stride;
              const float* wk = filter + (ky * 3 + kx) * c * nr;
              for (size_t ch = 0; ch < c; ++ch) s += x[ch] * wk[ch * nr];
            }
          s = s < clamp.min ? clamp.min : s;  // bounds first: NaN stays NaN
          s = s > clamp.max ? clamp.max : s;
          y[o] = s;
        }
      }
  }
};

}  // namespace

const WinogradWeights& winograd_weights(const PackedGemmWeights& w) {
  if (w.type != WeightType::F32 || w.f16_arith || w.k % 9 != 0)
    throw std::invalid_argument("winograd_weights: needs fp32 weights of a 3x3 convolution");
  WinogradCache& cache = *w.winograd;
  std::call_once(cache.once, [&] { transform_weights(w, cache.weights); });
  return cache.weights;
}

bool winograd_geometry(const ConvGeometry& g) {
  return g.kh == 3 && g.kw == 3 && g.stride_h == 1 && g.stride_w == 1 && g.dil_h == 1 && g.dil_w == 1;
}

bool winograd_applies(const ConvGeometry& g, const PackedGemmWeights& w) {
  return winograd_geometry(g) && w.type == WeightType::F32 && !w.f16_arith;
}

bool winograd_enabled() {
  const char* env = std::getenv("EDGESDK_CPU_WINOGRAD");
  return env == nullptr || std::strcmp(env, "0") != 0;
}

// Measured at 1 thread with kernel_bench --winograd (31 layers, direct vs Winograd, warm caches and
// --cold) and per layer inside ResNet-18 and SqueezeNet (sess.profile, EDGESDK_CPU_WINOGRAD=0 / 1):
// * C and K >= 8: the GEMMs reduce over C, and at C = 3 (VGG's first layer, 224x224, 3 -> 64)
//   Winograd is 0.68x (avx512) and 0.83x (avx2) of the direct convolution; at C = K = 8 (56x56)
//   1.5x and 1.35x.
// * The 4x4 tiles at least 5/8 full on average (N OH OW >= 10 tiles): Winograd's products then
//   number at most 1/2.5 of the direct ones (7x7: 1/3.06, 13x13: 1/2.64; 5x5 would be 1/1.56).
// * At least 4 tiles while U (36 C K floats, 4x the direct weights) fits L2 (kWeightsInL2Bytes):
//   7x7, 64 -> 64 wins 1.3x at 4 tiles. A larger U comes from L3 or memory at each run inside a
//   network, and its extra bytes are paid back only by enough output pixels: N OH OW >= 144. In
//   ResNet-18, 14x14, 256 -> 256 (196 pixels, U 9.4 MB) gains 1.1x (avx512) and 1.4x (avx2) and
//   7x7, 512 -> 512 (49 pixels, U 37.7 MB) loses: avx2 4.8 ms against 2.6-3.9 ms direct (warm
//   caches alone had it 1.6x faster); in SqueezeNet 13x13, 48 -> 192 and 64 -> 256 (169 pixels)
//   gain 1.07-1.16x (avx512) and 1.14-1.29x (avx2). With every cache cold the break-even is near
//   100-170 pixels on both levels (10x10, 256 -> 256: 0.79x / 0.96x; two 7x7 images,
//   512 -> 512: 1.02x / 1.04x).
// The scalar level wins wherever avx2 does; the NEON levels follow the same rule (checked under
// qemu, not measured on hardware).
bool winograd_chosen(size_t n, size_t oh, size_t ow, size_t c, size_t k, const KernelTable& t) {
  (void)t;
  if (!winograd_shape_pays(n, oh, ow, c, k)) return false;
  return weights_in_l2(c, k) ? tile_count(n, oh, ow) >= 4 : n * oh * ow >= 144;
}

size_t winograd_tile_block(size_t tiles, size_t c, size_t k, size_t mr) {
  const size_t per_tile = kE * (scratch_stride(c) + scratch_stride(k)) * sizeof(float);
  const size_t budget = weights_in_l2(c, k) ? kScratchBytes : kMaxScratchBytes;
  return equal_tile_blocks(tiles, max_size(mr, budget / per_tile / mr * mr), mr);
}

void ConvPlan::set_winograd_block(size_t tiles) {
  if (winograd_ == nullptr) throw std::logic_error("set_winograd_block: not a Winograd plan");
  tile_block_ = round_up(max_size(tiles, 1), weights_->mr());
}

void ConvPlan::run_winograd(const float* input, float* output, const Activation& act, size_t threads,
                            size_t in_stride, size_t out_stride) const {
  const PackedGemmWeights& w = *weights_;
  const WinogradWeights& u = *winograd_;
  const KernelTable& t = *w.table;
  const size_t mr = w.mr(), nr = w.nr, panels = w.panel_count(), k = w.n;
  const IgemmUkernel gemm_kernel = w.igemm();  // U is packed with w's NR (transform_weights)
  const size_t tiles_per_image = tiles_h_ * tiles_w_, tiles = n_ * tiles_per_image;
  const size_t tb = tile_block_, blocks = div_up(tiles, tb);
  const size_t cs = scratch_stride(c_), ks = scratch_stride(k);
  const MinMax clamp = clamp_part(act);
  const MinMax no_clamp{-INFINITY, INFINITY};
  const bool post = needs_post_pass(act);
  const WinogradTiles tiling{t,           h_, w_,   c_, oh_, ow_, tiles_h_, tiles_w_, g_.pad_top, g_.pad_left,
                             zero_.data(), input, in_stride, output, out_stride};
  const float* direct_panels = reinterpret_cast<const float*>(w.panels.data());
  auto direct = [&](size_t o) { return direct_panels + o / nr * w.k * nr + o % nr; };
  auto transform_input = [&](size_t t0, size_t i0, size_t i1, float* v) {
    tiling.transform_input(t0, i0, i1, v, cs, tb);
  };
  auto transform_output = [&](size_t t0, size_t i0, size_t i1, size_t k0, size_t k1, const float* m) {
    tiling.transform_output(t0, i0, i1, k0, k1, m + k0, ks, tb, w.bias.data(), clamp, act, post, nr, direct);
  };
  // M_e[tile][k] = V_e[tile][:] U_e[:][k] for the block's nt tiles, panels [p0, p1) of position e.
  auto multiply = [&](size_t e, size_t p0, size_t p1, size_t nt, const float* v, float* m) {
    const float* rows[64];  // MR pointers (MR <= 64)
    const float* ve = v + e * tb * cs;
    float* me = m + e * tb * ks;
    for (size_t p = p0; p < p1; ++p) {
      const size_t ncur = min_size(nr, k - p * nr);
      const float* panel = u.panel(e, p);
      for (size_t i0 = 0; i0 < nt; i0 += mr) {
        const size_t mcur = min_size(mr, nt - i0);
        for (size_t i = 0; i < mr; ++i) rows[i] = ve + (i0 + min_size(i, mcur - 1)) * cs;
        gemm_kernel(mcur, ncur, c_, 1, rows, panel, nullptr, me + i0 * ks + p * nr, ks, 0, &no_clamp);
      }
    }
  };
  if (threads > 1 && !weights_in_l2(c_, k)) {
    // U outgrows L2: the threads share each block, phase by phase (input transform over tiles, the
    // 36 x panels GEMMs, output transform over tiles), so U streams once per block in all; per-thread
    // blocks would each stream it (or, split into panel groups, each transform the whole input).
    // The block's scratch is the calling thread's.
    thread_local AlignedBuffer<float> v_shared, m_shared;
    if (v_shared.size() < kE * tb * cs) v_shared = AlignedBuffer<float>(kE * tb * cs);
    if (m_shared.size() < kE * tb * ks) m_shared = AlignedBuffer<float>(kE * tb * ks);
    float* v = v_shared.data();
    float* m = m_shared.data();
    for (size_t blk = 0; blk < blocks; ++blk) {
      const size_t t0 = blk * tb, nt = min_size(tb, tiles - t0);
      parallel_for(nt, threads, [&](size_t i0, size_t i1) { transform_input(t0, i0, i1, v); });
      parallel_for(kE * panels, threads, [&](size_t u0, size_t u1) {
        for (size_t unit = u0; unit < u1; ++unit) multiply(unit / panels, unit % panels, unit % panels + 1, nt, v, m);
      });
      parallel_for(nt, threads, [&](size_t i0, size_t i1) { transform_output(t0, i0, i1, 0, k, m); });
    }
    return;
  }
  // Otherwise each thread takes whole units: a tile block, and a group of panels when there are too
  // few blocks to feed the threads (each group then transforms the block's input again: a few
  // percent of its GEMM work).
  size_t groups = 1;
  if (threads > 1 && blocks < 4 * threads) groups = min_size(panels, div_up(4 * threads, blocks));
  const size_t panels_per_group = div_up(panels, groups);
  groups = div_up(panels, panels_per_group);
  parallel_for(blocks * groups, threads, [&](size_t begin, size_t end) {
    thread_local AlignedBuffer<float> v_block, m_block;
    if (v_block.size() < kE * tb * cs) v_block = AlignedBuffer<float>(kE * tb * cs);
    if (m_block.size() < kE * tb * ks) m_block = AlignedBuffer<float>(kE * tb * ks);
    float* v = v_block.data();
    float* m = m_block.data();
    for (size_t unit = begin; unit < end; ++unit) {
      const size_t blk = unit / groups, grp = unit % groups;
      const size_t t0 = blk * tb, nt = min_size(tb, tiles - t0);
      const size_t p0 = grp * panels_per_group, p1 = min_size(panels, p0 + panels_per_group);
      transform_input(t0, 0, nt, v);
      for (size_t e = 0; e < kE; ++e) multiply(e, p0, p1, nt, v, m);
      transform_output(t0, 0, nt, p0 * nr, min_size(k, p1 * nr), m);
    }
  });
}

// ---- clustered weights ------------------------------------------------------------------------
// ClusteredConvPlan's Winograd: the weights exist only as codes, so each call decodes one panel (nr
// outputs) at a time, transforms it (the level's winograd_weights: ~2.5 operations per transformed
// value, against the tiles multiply-adds each value feeds) and runs that panel's 36 GEMMs over the
// block's tiles. A thread holds one panel's direct and transformed weights, never the layer's U
// (4x the dense weights).

// Measured with tools/bench_compressed_cpu.py clustered (ResNet-18's 3x3 layers, 4-bit per-channel
// codebooks, 1 thread, avx512): Winograd against this plan's direct path is 0.40x at 56x56 and
// 28x28 and 0.55x at 14x14 (16 tiles), but 1.4x at 7x7 (4 tiles: each panel's decode and
// transform then feeds too few tiles). So: the dense rule's tile fullness, and at least 16 tiles.
bool clustered_winograd_chosen(size_t n, size_t oh, size_t ow, size_t c, size_t k) {
  return winograd_shape_pays(n, oh, ow, c, k) && tile_count(n, oh, ow) >= 16;
}

// Tiles per block: all of them while V (36 x tiles x C floats, shared by the threads) takes at most
// kMaxClusteredVBytes; each block decodes and transforms every panel again.
size_t clustered_winograd_tile_block(size_t tiles, size_t c, size_t mr) {
  constexpr size_t kMaxClusteredVBytes = 8 * 1024 * 1024;
  const size_t per_tile = kE * scratch_stride(c) * sizeof(float);
  return equal_tile_blocks(tiles, max_size(mr, kMaxClusteredVBytes / per_tile / mr * mr), mr);
}

// Input channels whose transformed weights (36 x kc x nr floats: 288 KiB at nr = 32) a thread
// makes and multiplies at a time (see run_winograd).
constexpr size_t kClusteredWinogradChannels = 64;

size_t clustered_winograd_scratch_floats(size_t c, size_t nr, size_t tile_block) {
  return kE * min_size(c, kClusteredWinogradChannels) * nr + kE * tile_block * nr;  // U block, M of a panel
}

void ClusteredConvPlan::run_winograd(const float* input, float* output, const Activation& act,
                                     size_t threads) const {
  const ClusteredWeights& w = *weights_;
  const KernelTable& t = *w.table;
  const size_t mr = t.gemm_mr, nr = t.gemm_nr, k = w.n, panels = div_up(k, nr);
  const size_t tiles = n_ * tiles_h_ * tiles_w_, tb = tile_block_, blocks = div_up(tiles, tb);
  const size_t cs = scratch_stride(c_);
  const MinMax clamp = clamp_part(act);
  const MinMax no_clamp{-INFINITY, INFINITY};
  const bool post = needs_post_pass(act);
  const WinogradTiles tiling{t,           h_, w_, c_, oh_, ow_, tiles_h_, tiles_w_, g_.pad_top, g_.pad_left,
                             zero_.data(), input, c_, output, k};
  thread_local AlignedBuffer<float> v_shared;  // the calling thread's, shared by the workers
  if (v_shared.size() < kE * tb * cs) v_shared = AlignedBuffer<float>(kE * tb * cs);
  float* v = v_shared.data();
  for (size_t blk = 0; blk < blocks; ++blk) {
    const size_t t0 = blk * tb, nt = min_size(tb, tiles - t0);
    parallel_for(nt, threads, [&](size_t i0, size_t i1) { tiling.transform_input(t0, i0, i1, v, cs, tb); });
    parallel_for(panels, threads, [&](size_t p0, size_t p1) {
      thread_local AlignedBuffer<float> rows, panel, u, m;
      const size_t kc = min_size(c_, kClusteredWinogradChannels);
      if (rows.size() < nr * clustered_chunk_columns(w)) rows = AlignedBuffer<float>(nr * clustered_chunk_columns(w));
      if (panel.size() < w.k * nr) panel = AlignedBuffer<float>(w.k * nr);
      if (u.size() < kE * kc * nr) u = AlignedBuffer<float>(kE * kc * nr);
      if (m.size() < kE * tb * nr) m = AlignedBuffer<float>(kE * tb * nr);
      const float* a_rows[64];  // MR pointers (MR <= 64)
      for (size_t p = p0; p < p1; ++p) {
        const size_t ncur = min_size(nr, k - p * nr);
        decode_clustered_panel(w, p, nr, rows.data(), panel.data());
        // kc channels at a time: their U (36 x kc x nr floats) stays in L2 between the transform
        // that writes it and the GEMMs that read it; the products accumulate in M.
        for (size_t c0 = 0; c0 < c_; c0 += kc) {
          const size_t kcur = min_size(kc, c_ - c0);
          t.winograd_weights(panel.data() + c0 * nr, c_ * nr, kcur * nr, u.data(), kcur * nr);
          for (size_t e = 0; e < kE; ++e) {
            const float* ve = v + e * tb * cs + c0;
            for (size_t i0 = 0; i0 < nt; i0 += mr) {
              const size_t mcur = min_size(mr, nt - i0);
              for (size_t i = 0; i < mr; ++i) a_rows[i] = ve + (i0 + min_size(i, mcur - 1)) * cs;
              t.igemm_f32w(mcur, ncur, kcur, 1, a_rows, u.data() + e * kcur * nr, nullptr,
                           m.data() + (e * tb + i0) * nr, nr, c0 > 0 ? kGemmAccumulate : 0u, &no_clamp);
            }
          }
        }
        const float* decoded = panel.data();
        auto direct = [&](size_t o) { return decoded + (o - p * nr); };
        tiling.transform_output(t0, 0, nt, p * nr, p * nr + ncur, m.data(), nr, tb, w.bias.data(), clamp, act, post,
                                nr, direct);
      }
    });
  }
}

}  // namespace edgesdk::kernels
