// LQ-Nets bitwise GEMM / convolution (lq.h): packing, the drivers, the scalar references, variant
// selection. The SIMD microkernels live in lq_x86.inl and lq_neon.inl, included below: they carry
// per-function target attributes instead of per-file flags, so this one translation unit builds
// everywhere without ISA flags (and cpu_native/tests/kernel_tests.cc can compile it in directly
// for the cross-built driver, whose source lists tests/test_native_kernels.py fixes). Every SIMD
// function is static and only ever called after the runtime check in lq_kernels().
#include "kernels/lq.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "cpu_features.h"
#include "kernels/thread_pool.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define EDGESDK_LQ_X86 1
#include <immintrin.h>
#endif
#if defined(__aarch64__)
#define EDGESDK_LQ_NEON 1
#include <arm_neon.h>
#endif

namespace edgesdk::kernels {
namespace {

inline int popcount64(uint64_t v) { return __builtin_popcountll(v); }

// ---------------------------------------------------------------------------------------------
// Scalar references.

void lq_gemm_4x8__scalar(size_t mr, size_t kc, size_t taps, const uint64_t* const* a, const ptrdiff_t* tap_off,
                         const uint64_t* w, size_t np, size_t panel_stride, int32_t* c) {
  for (size_t r = 0; r < mr; ++r)
    for (size_t j = 0; j < np; ++j) {
      int64_t acc[kLqNr] = {};
      for (size_t t = 0; t < taps; ++t) {
        const uint64_t* ap = a[r] + tap_off[t];
        const uint64_t* wp = w + j * panel_stride + t * kc * kLqNr;
        for (size_t k = 0; k < kc; ++k)
          for (size_t l = 0; l < kLqNr; ++l) acc[l] += popcount64(ap[k] & wp[k * kLqNr + l]);
      }
      for (size_t l = 0; l < kLqNr; ++l) c[(r * np + j) * kLqNr + l] = static_cast<int32_t>(acc[l]);
    }
}

void lq_combine_8__scalar(size_t pixels, size_t kx, size_t kw, const int32_t* c, const int32_t* cnt, const float* coef,
                          const float* base, size_t base_stride, float* y, size_t y_stride, float lo, float hi) {
  for (size_t p = 0; p < pixels; ++p, y += y_stride, base += base_stride, c += kx * kw * kLqNr, cnt += kx)
    for (size_t l = 0; l < kLqNr; ++l) {
      float acc = base[l];
      for (size_t j = 0; j < kw; ++j)
        for (size_t i = 0; i < kx; ++i)
          acc = std::fma(coef[(j * kx + i) * kLqNr + l], static_cast<float>(2 * c[(i * kw + j) * kLqNr + l] - cnt[i]), acc);
      acc = acc < lo ? lo : acc;
      y[l] = acc > hi ? hi : acc;
    }
}

}  // namespace

void lq_encode__scalar(const float* x, size_t rows, size_t n, const LqActQuant& q, size_t words, uint64_t* planes,
                       int32_t* cnt, uint8_t* nan_out) {
  const size_t levels = size_t{1} << q.kx;
  const float* thr = q.thresholds.data();
  for (size_t row = 0; row < rows; ++row, x += n, planes += q.kx * words, cnt += q.kx) {
    std::memset(planes, 0, q.kx * words * sizeof(uint64_t));
    bool nan = false;
    for (size_t k = 0; k < n; ++k) {
      const float v = x[k];
      nan |= v != v;
      size_t lo = 0, hi = levels - 1;  // the number of thresholds < v (ascending thresholds)
      while (lo < hi) {
        const size_t mid = (lo + hi) / 2;
        if (thr[mid] < v) lo = mid + 1;
        else hi = mid;
      }
      const unsigned code = q.codes[lo];
      for (size_t i = 0; i < q.kx; ++i)
        if ((code >> i) & 1u) planes[i * words + k / 64] |= uint64_t{1} << (k % 64);
    }
    for (size_t i = 0; i < q.kx; ++i) {
      int32_t c = 0;
      for (size_t k = 0; k < words; ++k) c += popcount64(planes[i * words + k]);
      cnt[i] = c;
    }
    nan_out[row] = nan;
  }
}

}  // namespace edgesdk::kernels

#if defined(EDGESDK_LQ_X86)
#include "kernels/lq_x86.inl"
#endif
#if defined(EDGESDK_LQ_NEON)
#include "kernels/lq_neon.inl"
#endif

namespace edgesdk::kernels {
namespace {

bool cpu_has_vpopcntdq() {
  static const bool has = [] {
    for (const auto& [name, present] : cpu::detect().flags)
      if (name == "avx512vpopcntdq") return present;
    return false;
  }();
  return has;
}

bool isa_supported(Isa isa) {
  for (Isa s : supported_isas())
    if (s == isa) return true;
  return false;
}

const LqKernels kScalar{LqVariant::Scalar, 4, lq_gemm_4x8__scalar, lq_combine_8__scalar, lq_encode__scalar, "b1_lqgemm_4x8__scalar",
                        "f32_lqencode__scalar"};

}  // namespace

const char* lq_variant_name(LqVariant v) {
  switch (v) {
    case LqVariant::Scalar: return "scalar";
    case LqVariant::Avx2: return "avx2";
    case LqVariant::Avx512Bw: return "avx512bw";
    case LqVariant::Avx512Vpopcnt: return "avx512vpopcnt";
    case LqVariant::Neon: return "neon";
  }
  return "?";
}

const LqKernels& lq_kernels(LqVariant v) {
  switch (v) {
    case LqVariant::Scalar: return kScalar;
#if defined(EDGESDK_LQ_X86)
    case LqVariant::Avx2:
      if (isa_supported(Isa::Avx2)) return kLqAvx2;
      break;
    case LqVariant::Avx512Bw:
      if (isa_supported(Isa::Avx512)) return kLqAvx512Bw;
      break;
    case LqVariant::Avx512Vpopcnt:
      if (isa_supported(Isa::Avx512) && cpu_has_vpopcntdq()) return kLqAvx512Vpopcnt;
      break;
#endif
#if defined(EDGESDK_LQ_NEON)
    case LqVariant::Neon:
      if (isa_supported(Isa::Neon)) return kLqNeon;
      break;
#endif
    default: break;
  }
  throw std::runtime_error(std::string("lq: the ") + lq_variant_name(v) + " kernels do not run on this CPU / build");
}

std::vector<LqVariant> lq_supported_variants() {
  std::vector<LqVariant> out;
  for (LqVariant v : {LqVariant::Scalar, LqVariant::Avx2, LqVariant::Avx512Bw, LqVariant::Avx512Vpopcnt,
                      LqVariant::Neon}) {
    try {
      (void)lq_kernels(v);
      out.push_back(v);
    } catch (const std::runtime_error&) {
    }
  }
  return out;
}

LqVariant lq_variant_for(Isa isa, const std::string& popcnt_arg) {
  std::string popcnt = popcnt_arg.empty() ? "auto" : popcnt_arg;
  const bool avx512 = isa == Isa::Avx512 || isa == Isa::Avx512Vnni || isa == Isa::Avx512Amx;
  bool from_env = false;
  if (popcnt == "auto") {
    const char* env = std::getenv("EDGESDK_LQ_POPCNT");
    if (env != nullptr && *env != '\0') popcnt = env, from_env = true;
  }
  if (popcnt != "auto" && popcnt != "shuffle" && popcnt != "vpopcnt")
    throw std::invalid_argument(std::string(from_env ? "EDGESDK_LQ_POPCNT" : "popcnt") +
                                " must be 'auto', 'shuffle' or 'vpopcnt' (got '" + popcnt + "')");
  if (from_env && !avx512) popcnt = "auto";  // the environment only steers the avx512 levels
  if (popcnt == "vpopcnt" && !(avx512 && cpu_has_vpopcntdq()))
    throw std::invalid_argument("popcnt='vpopcnt' needs an avx512 level on a CPU with AVX512_VPOPCNTDQ");
  switch (isa) {
    case Isa::Scalar: return LqVariant::Scalar;
    case Isa::Avx2:
    case Isa::AvxVnni: return LqVariant::Avx2;
    case Isa::Avx512:
    case Isa::Avx512Vnni:
    case Isa::Avx512Amx:
      return popcnt != "shuffle" && cpu_has_vpopcntdq() ? LqVariant::Avx512Vpopcnt : LqVariant::Avx512Bw;
    case Isa::Neon:
    case Isa::NeonFp16:
    case Isa::NeonDot: return LqVariant::Neon;
  }
  return LqVariant::Scalar;
}

// ---------------------------------------------------------------------------------------------
// Packing.

namespace {

void check_quant(const LqActQuant& q) {
  if (q.kx < 1 || q.kx > 8) throw std::invalid_argument("act_basis: 1..8 activation bits");
  const size_t levels = size_t{1} << q.kx;
  if (q.alpha.size() != q.kx) throw std::invalid_argument("act_basis: expected kx values");
  if (q.thresholds.size() != levels - 1)
    throw std::invalid_argument("thresholds: expected 2^kx - 1 = " + std::to_string(levels - 1) + " values");
  if (q.codes.size() != levels)
    throw std::invalid_argument("codes: expected 2^kx = " + std::to_string(levels) + " values");
  for (size_t t = 0; t < q.thresholds.size(); ++t) {
    if (std::isnan(q.thresholds[t])) throw std::invalid_argument("thresholds: NaN");
    if (t > 0 && !(q.thresholds[t - 1] <= q.thresholds[t])) throw std::invalid_argument("thresholds: not ascending");
  }
  for (uint8_t c : q.codes)
    if (c >= levels) throw std::invalid_argument("codes: a code >= 2^kx");
  for (float a : q.alpha)
    if (!std::isfinite(a)) throw std::invalid_argument("act_basis: not finite");
  if (!std::isfinite(q.offset)) throw std::invalid_argument("act_offset: not finite");
}

// bit k of (o, j)'s plane, from the uint32 format
inline bool plane_bit(const uint32_t* planes, size_t words32, size_t kw, size_t o, size_t j, size_t k) {
  return (planes[(o * kw + j) * words32 + k / 32] >> (k % 32)) & 1u;
}

void finish_layer(LqLayer& l, const float* basis, const float* bias, const std::vector<double>& wsum) {
  const size_t kx = l.q.kx;
  l.coef.assign(l.blocks * l.kw * kx * kLqNr, 0.0f);
  l.base.assign(l.blocks * kLqNr, 0.0f);
  l.bias.assign(l.o, 0.0f);
  for (size_t o = 0; o < l.o; ++o) {
    const size_t blk = o / kLqNr, lane = o % kLqNr;
    for (size_t j = 0; j < l.kw; ++j)
      for (size_t i = 0; i < kx; ++i)
        l.coef[((blk * l.kw + j) * kx + i) * kLqNr + lane] = l.q.alpha[i] * basis[o * l.kw + j];
    l.bias[o] = bias != nullptr ? bias[o] : 0.0f;
    l.base[o] = static_cast<float>(static_cast<double>(l.q.offset) * wsum[o] + l.bias[o]);
  }
}

void check_basis(const float* basis, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(basis[i])) throw std::invalid_argument("basis: not finite");
}

}  // namespace

LqLayer lq_prepare_gemm(const uint32_t* planes, const float* basis, size_t o, size_t kw, size_t n,
                        const LqActQuant& q, const float* bias, const LqKernels& k) {
  check_quant(q);
  if (kw < 1 || kw > 8) throw std::invalid_argument("basis: 1..8 weight bits");
  if (o == 0 || n == 0) throw std::invalid_argument("empty weights");
  check_basis(basis, o * kw);
  LqLayer l;
  l.o = o, l.kw = kw, l.n = n, l.taps = 1, l.kc = div_up(n, 64), l.blocks = div_up(o, kLqNr);
  l.q = q;
  l.k = &k;
  const size_t words32 = div_up(n, 32);
  l.panels = AlignedBuffer<uint64_t>(l.blocks * kw * l.kc * kLqNr);
  std::memset(l.panels.data(), 0, l.panels.size() * sizeof(uint64_t));
  std::vector<double> wsum(o, 0.0);
  for (size_t oc = 0; oc < o; ++oc) {
    const size_t blk = oc / kLqNr, lane = oc % kLqNr;
    for (size_t j = 0; j < kw; ++j) {
      uint64_t* panel = l.panels.data() + (blk * kw + j) * l.kc * kLqNr;
      const uint32_t* src = planes + (oc * kw + j) * words32;
      size_t pop = 0;
      for (size_t wd = 0; wd < l.kc; ++wd) {
        uint64_t v = src[2 * wd];
        if (2 * wd + 1 < words32) v |= static_cast<uint64_t>(src[2 * wd + 1]) << 32;
        if (wd == l.kc - 1 && n % 64 != 0) v &= (uint64_t{1} << (n % 64)) - 1;  // tail bits past n
        panel[wd * kLqNr + lane] = v;
        pop += static_cast<size_t>(popcount64(v));
      }
      wsum[oc] += static_cast<double>(basis[oc * kw + j]) * (2.0 * static_cast<double>(pop) - static_cast<double>(n));
    }
  }
  finish_layer(l, basis, bias, wsum);
  return l;
}

LqLayer lq_prepare_conv(const uint32_t* planes, const float* basis, size_t o, size_t kw, size_t c, size_t kh,
                        size_t kwid, const LqActQuant& q, const float* bias, const LqKernels& k) {
  check_quant(q);
  if (kw < 1 || kw > 8) throw std::invalid_argument("basis: 1..8 weight bits");
  if (o == 0 || c == 0 || kh == 0 || kwid == 0) throw std::invalid_argument("empty weights");
  check_basis(basis, o * kw);
  LqLayer l;
  const size_t n = c * kh * kwid, taps = kh * kwid;
  l.o = o, l.kw = kw, l.n = n, l.taps = taps, l.kc = div_up(c, 64), l.blocks = div_up(o, kLqNr);
  l.q = q;
  l.k = &k;
  const size_t words32 = div_up(n, 32), row = taps * l.kc;
  l.panels = AlignedBuffer<uint64_t>(l.blocks * kw * row * kLqNr);
  std::memset(l.panels.data(), 0, l.panels.size() * sizeof(uint64_t));
  l.wtap.assign(o * taps, 0.0);
  std::vector<double> wsum(o, 0.0);
  for (size_t oc = 0; oc < o; ++oc) {
    const size_t blk = oc / kLqNr, lane = oc % kLqNr;
    for (size_t j = 0; j < kw; ++j) {
      uint64_t* panel = l.panels.data() + (blk * kw + j) * row * kLqNr;
      const double b = basis[oc * kw + j];
      for (size_t ty = 0; ty < kh; ++ty)
        for (size_t tx = 0; tx < kwid; ++tx) {
          const size_t t = ty * kwid + tx;
          size_t pop = 0;
          for (size_t ch = 0; ch < c; ++ch)
            if (plane_bit(planes, words32, kw, oc, j, (ch * kh + ty) * kwid + tx)) {
              panel[(t * l.kc + ch / 64) * kLqNr + lane] |= uint64_t{1} << (ch % 64);
              ++pop;
            }
          const double s = b * (2.0 * static_cast<double>(pop) - static_cast<double>(c));
          l.wtap[oc * taps + t] += s;
          wsum[oc] += s;
        }
    }
  }
  finish_layer(l, basis, bias, wsum);
  return l;
}

// ---------------------------------------------------------------------------------------------
// Drivers.
//
// A task takes a run of rows (GEMM) or output pixels (conv): it encodes / gathers their x-rows
// (pixel p's plane i is x-row p*kx + i); per block of 8 output channels the microkernel counts all
// kw panels over the x-rows and the combine kernel adds them to the base (c * weight sum + bias)
// and writes the output through the activation's clamp. Every output's sum runs in the same order
// (planes j, then i) whatever the tiling, so thread counts and variants give the same bits.

namespace {

struct Scratch {
  std::vector<uint64_t> planes;
  std::vector<const uint64_t*> ptrs;
  std::vector<int32_t> cnt, counts;
  std::vector<uint8_t> nan;
  std::vector<float> tail, base;
};

// Every block of [b0, b1) over the x-rows of `pixels` pixels (row r at a[r] + tap_off[t] for tap t):
// the counts of all kw panels, mr rows at a time, then the combination with base[p*base_stride +
// blk*8 ...] and the activation's clamp, written to y[p*y_stride + blk*8 ...] (the last block's
// valid lanes through a small buffer when o is no multiple of 8); then the activations that are no
// clamp, and NaN over the rows flagged.
void run_blocks(const LqLayer& l, size_t b0, size_t b1, size_t pixels, const uint64_t* const* a,
                const ptrdiff_t* tap_off, const int32_t* cnt, const float* base, size_t base_stride, float* y,
                size_t y_stride, const Activation& act, const uint8_t* nan, Scratch& s) {
  const LqKernels& k = *l.k;
  const size_t kx = l.q.kx, kw = l.kw, rows = pixels * kx, panel_words = l.taps * l.kc * kLqNr;
  s.counts.resize(rows * kw * kLqNr);
  int32_t* counts = s.counts.data();
  const bool post = needs_post_pass(act);
  const MinMax mm = post ? MinMax{-std::numeric_limits<float>::infinity(), std::numeric_limits<float>::infinity()}
                         : clamp_part(act);
  for (size_t blk = b0; blk < b1; ++blk) {
    const uint64_t* panels = l.panels.data() + blk * kw * panel_words;
    for (size_t r0 = 0; r0 < rows; r0 += k.mr_max)
      k.gemm(min_size(k.mr_max, rows - r0), l.kc, l.taps, a + r0, tap_off, panels, kw, panel_words,
             counts + r0 * kw * kLqNr);
    const float* coef = l.coef.data() + blk * kw * kx * kLqNr;
    const size_t o0 = blk * kLqNr, lanes = min_size(kLqNr, l.o - o0);
    if (lanes == kLqNr) {
      k.combine(pixels, kx, kw, counts, cnt, coef, base + o0, base_stride, y + o0, y_stride, mm.min, mm.max);
    } else {
      s.tail.resize(pixels * kLqNr);
      k.combine(pixels, kx, kw, counts, cnt, coef, base + o0, base_stride, s.tail.data(), kLqNr, mm.min, mm.max);
      for (size_t p = 0; p < pixels; ++p) std::memcpy(y + p * y_stride + o0, s.tail.data() + p * kLqNr, lanes * sizeof(float));
    }
  }
  const size_t o0 = b0 * kLqNr, o1 = min_size(l.o, b1 * kLqNr);
  for (size_t p = 0; p < pixels; ++p) {
    float* row = y + p * y_stride;
    if (nan[p]) {
      for (size_t oc = o0; oc < o1; ++oc) row[oc] = std::numeric_limits<float>::quiet_NaN();
    } else if (post) {
      for (size_t oc = o0; oc < o1; ++oc) row[oc] = activate_reference(row[oc], act);
    }
  }
}

}  // namespace

void lq_gemm(const LqLayer& l, const float* x, size_t m, float* y, const Activation& act, size_t threads) {
  if (m == 0) return;
  if (threads < 1) threads = 1;
  const size_t kx = l.q.kx, words = l.kc;
  const size_t row_chunk = max_size(1, min_size(16, div_up(m, threads)));
  const size_t row_tasks = div_up(m, row_chunk);
  // Few rows (GEMV) on several threads: split the output channels too (the result is the same).
  const size_t blk_tasks = row_tasks >= threads ? 1 : min_size(l.blocks, div_up(threads, row_tasks));
  const size_t blk_chunk = div_up(l.blocks, blk_tasks);
  parallel_for(row_tasks * blk_tasks, threads, [&](size_t begin, size_t end) {
    Scratch s;
    for (size_t task = begin; task < end; ++task) {
      const size_t m0 = (task / blk_tasks) * row_chunk, m1 = min_size(m, m0 + row_chunk);
      const size_t b0 = (task % blk_tasks) * blk_chunk, b1 = min_size(l.blocks, b0 + blk_chunk);
      if (b0 >= b1) continue;
      const size_t pix = m1 - m0, rows = pix * kx;
      s.planes.resize(rows * words);
      s.ptrs.resize(rows);
      s.cnt.resize(rows);
      s.nan.resize(pix);
      l.k->encode(x + m0 * l.n, pix, l.n, l.q, words, s.planes.data(), s.cnt.data(), s.nan.data());
      for (size_t r = 0; r < rows; ++r) s.ptrs[r] = s.planes.data() + r * words;
      static const ptrdiff_t kNoOffset = 0;
      run_blocks(l, b0, b1, pix, s.ptrs.data(), &kNoOffset, s.cnt.data(), l.base.data(), 0, y + m0 * l.o, l.o, act,
                 s.nan.data(), s);
    }
  }, Partition::Static);
}

size_t lq_conv_out(size_t in, size_t k, size_t stride, size_t dil, size_t pad0, size_t pad1) {
  const size_t span = dil * (k - 1) + 1, padded = in + pad0 + pad1;
  return padded < span ? 0 : (padded - span) / stride + 1;
}

void lq_conv(const LqLayer& l, const float* x, size_t b, size_t h, size_t w, const LqConvGeometry& g, float* y,
             const Activation& act, size_t threads) {
  if (threads < 1) threads = 1;
  const size_t kx = l.q.kx, kc = l.kc, c = l.n / l.taps, taps = l.taps, pw = kx * kc;
  const size_t oh = lq_conv_out(h, g.kh, g.stride_h, g.dil_h, g.pad_top, g.pad_bottom);
  const size_t ow = lq_conv_out(w, g.kw, g.stride_w, g.dil_w, g.pad_left, g.pad_right);
  const size_t out_pix = b * oh * ow;
  if (out_pix == 0) return;
  // Encode every input pixel once into a zero-padded grid (padded taps read zero planes, count 0):
  // kx planes of kc words per pixel, their popcounts, a NaN flag.
  const size_t hp = h + g.pad_top + g.pad_bottom, wp = w + g.pad_left + g.pad_right, pad_pix = b * hp * wp;
  AlignedBuffer<uint64_t> enc(pad_pix * pw);
  std::vector<int32_t> pcnt(pad_pix * kx, 0);
  std::vector<uint8_t> pnan(pad_pix, 0);
  const bool padded = hp != h || wp != w;
  if (padded) std::memset(enc.data(), 0, pad_pix * pw * sizeof(uint64_t));
  parallel_for(b * h, threads, [&](size_t begin, size_t end) {
    for (size_t row = begin; row < end; ++row) {  // one input row of w pixels a call
      const size_t bi = row / h, iy = row % h;
      const size_t q0 = (bi * hp + iy + g.pad_top) * wp + g.pad_left;
      l.k->encode(x + row * w * c, w, c, l.q, kc, enc.data() + q0 * pw, pcnt.data() + q0 * kx, pnan.data() + q0);
    }
  }, Partition::Static);
  // Per tap: the word offset from the window's corner (and the row / column offsets, for the
  // border pixels' weight sums).
  std::vector<ptrdiff_t> tap_off(taps), tap_pix(taps);
  std::vector<size_t> tap_dy(taps), tap_dx(taps);
  for (size_t ty = 0; ty < g.kh; ++ty)
    for (size_t tx = 0; tx < g.kw; ++tx) {
      const size_t t = ty * g.kw + tx;
      tap_pix[t] = static_cast<ptrdiff_t>(ty * g.dil_h * wp + tx * g.dil_w);
      tap_off[t] = tap_pix[t] * static_cast<ptrdiff_t>(pw);
      tap_dy[t] = ty * g.dil_h;
      tap_dx[t] = tx * g.dil_w;
    }
  const size_t stride = l.blocks * kLqNr;
  const size_t chunk = 32;  // output pixels per task
  const double offset = l.q.offset;
  parallel_for(div_up(out_pix, chunk), threads, [&](size_t begin, size_t end) {
    Scratch s;
    for (size_t task = begin; task < end; ++task) {
      const size_t p0 = task * chunk, pix = min_size(out_pix, p0 + chunk) - p0, rows = pix * kx;
      s.ptrs.resize(rows);
      s.cnt.resize(rows);
      s.nan.resize(pix);
      bool border_base = false;  // a border pixel in this task whose c * sum(w) needs the valid taps only
      size_t bi = p0 / (oh * ow), oy = (p0 / ow) % oh, ox = p0 % ow;  // stepped along (no division per pixel)
      for (size_t p = 0; p < pix; ++p, ++ox) {
        if (ox == ow) {
          ox = 0;
          if (++oy == oh) oy = 0, ++bi;
        }
        const size_t py = oy * g.stride_h, px = ox * g.stride_w;  // the window's corner, padded coordinates
        const size_t corner = (bi * hp + py) * wp + px;
        uint8_t nan = 0;
        for (size_t t = 0; t < taps; ++t) nan |= pnan[corner + static_cast<size_t>(tap_pix[t])];
        s.nan[p] = nan;
        for (size_t i = 0; i < kx; ++i) {
          s.ptrs[p * kx + i] = enc.data() + corner * pw + i * kc;
          int32_t sum = 0;
          for (size_t t = 0; t < taps; ++t) sum += pcnt[(corner + static_cast<size_t>(tap_pix[t])) * kx + i];
          s.cnt[p * kx + i] = sum;
        }
        const bool inside = py >= g.pad_top && px >= g.pad_left && py + g.dil_h * (g.kh - 1) < g.pad_top + h &&
                            px + g.dil_w * (g.kw - 1) < g.pad_left + w;
        if (inside || offset == 0.0) continue;
        if (!border_base) {  // per-pixel bases for this task: the layer's, then the border pixels'
          border_base = true;
          s.base.resize(pix * stride);
          for (size_t q = 0; q < pix; ++q) std::memcpy(s.base.data() + q * stride, l.base.data(), stride * sizeof(float));
        }
        float* brow = s.base.data() + p * stride;  // c * (the valid taps' weight sum) + bias
        for (size_t oc = 0; oc < l.o; ++oc) {
          double ws = 0.0;
          for (size_t t = 0; t < taps; ++t) {
            const size_t iy = py + tap_dy[t], ix = px + tap_dx[t];
            if (iy >= g.pad_top && iy < g.pad_top + h && ix >= g.pad_left && ix < g.pad_left + w)
              ws += l.wtap[oc * taps + t];
          }
          brow[oc] = static_cast<float>(offset * ws + l.bias[oc]);
        }
      }
      run_blocks(l, 0, l.blocks, pix, s.ptrs.data(), tap_off.data(), s.cnt.data(),
                 border_base ? s.base.data() : l.base.data(), border_base ? stride : 0, y + p0 * l.o, l.o, act,
                 s.nan.data(), s);
    }
  }, Partition::Static);
}

}  // namespace edgesdk::kernels
