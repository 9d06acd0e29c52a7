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

void lq_gemm_4x8__scalar(size_t mr, size_t kc, size_t taps, const uint64_t* const* a, size_t a_stride,
                         const uint64_t* w, const float* const* coef, const int32_t* cnt, float* const* y) {
  for (size_t r = 0; r < mr; ++r) {
    int64_t acc[kLqNr] = {};
    for (size_t t = 0; t < taps; ++t) {
      const uint64_t* ap = a[t * a_stride + r];
      const uint64_t* wp = w + t * kc * kLqNr;
      for (size_t k = 0; k < kc; ++k)
        for (size_t l = 0; l < kLqNr; ++l) acc[l] += popcount64(ap[k] & wp[k * kLqNr + l]);
    }
    for (size_t l = 0; l < kLqNr; ++l)
      y[r][l] = std::fma(coef[r][l], static_cast<float>(2 * acc[l] - cnt[r]), y[r][l]);
  }
}

}  // namespace

bool lq_encode__scalar(const float* x, size_t n, const LqActQuant& q, size_t words, uint64_t* planes, int32_t* cnt) {
  std::memset(planes, 0, q.kx * words * sizeof(uint64_t));
  const size_t levels = size_t{1} << q.kx;
  const float* thr = q.thresholds.data();
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
  return nan;
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

const LqKernels kScalar{LqVariant::Scalar, 4, lq_gemm_4x8__scalar, lq_encode__scalar, "b1_lqgemm_4x8__scalar",
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
  if (popcnt == "auto") {
    const char* env = std::getenv("EDGESDK_LQ_POPCNT");
    if (env != nullptr && *env != '\0') popcnt = env;
  }
  if (popcnt != "auto" && popcnt != "shuffle" && popcnt != "vpopcnt")
    throw std::invalid_argument("popcnt must be 'auto', 'shuffle' or 'vpopcnt' (got '" + popcnt + "')");
  const bool avx512 = isa == Isa::Avx512 || isa == Isa::Avx512Vnni || isa == Isa::Avx512Amx;
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
  l.base.assign(l.o, 0.0f);
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

namespace {

inline float activate(float v, const Activation& act, const MinMax& mm, bool post) {
  if (post) return activate_reference(v, act);
  return std::min(std::max(v, mm.min), mm.max);
}

// Runs every (block, plane) panel over x-rows [0, rows) whose pointers are a[t*rows + r] and
// accumulates into ytile[row_of(r)][8], where row_of(r) = r / kx; then writes y rows with act.
struct TileRun {
  const LqLayer& l;
  size_t rows;                  // x-rows (pixels * kx)
  const uint64_t* const* a;     // [taps][rows]
  const int32_t* cnt;           // [rows]
  float* ytile;                 // [pixels][8]
  void run_panel(size_t blk, size_t j) const {
    const LqKernels& k = *l.k;
    const size_t kx = l.q.kx, mrmax = k.mr_max;
    const uint64_t* panel = l.panels.data() + (blk * l.kw + j) * l.taps * l.kc * kLqNr;
    const float* coef = l.coef.data() + (blk * l.kw + j) * kx * kLqNr;
    const float* cp[8];
    float* yp[8];
    for (size_t r0 = 0; r0 < rows; r0 += mrmax) {
      const size_t mr = min_size(mrmax, rows - r0);
      for (size_t r = 0; r < mr; ++r) {
        cp[r] = coef + ((r0 + r) % kx) * kLqNr;
        yp[r] = ytile + ((r0 + r) / kx) * kLqNr;
      }
      k.gemm(mr, l.kc, l.taps, a + r0, rows, panel, cp, cnt + r0, yp);
    }
  }
};

struct Scratch {
  std::vector<uint64_t> planes;
  std::vector<const uint64_t*> ptrs;
  std::vector<int32_t> cnt;
  std::vector<uint8_t> nan;
  AlignedBuffer<float> ytile;
  std::vector<float> base;  // conv border pixels: [pixel][8]
  std::vector<uint8_t> border;
  void ensure_ytile(size_t n) {
    if (ytile.size() < n) ytile = AlignedBuffer<float>(n);
  }
};

void store_block(const LqLayer& l, size_t blk, const float* ytile, size_t pixels, float* y, const Activation& act) {
  const MinMax mm = clamp_part(act);
  const bool post = needs_post_pass(act);
  const size_t o0 = blk * kLqNr, lanes = min_size(kLqNr, l.o - o0);
  for (size_t p = 0; p < pixels; ++p)
    for (size_t lane = 0; lane < lanes; ++lane) y[p * l.o + o0 + lane] = activate(ytile[p * kLqNr + lane], act, mm, post);
}

}  // namespace

void lq_gemm(const LqLayer& l, const float* x, size_t m, float* y, const Activation& act, size_t threads) {
  if (m == 0) return;
  if (threads < 1) threads = 1;
  const size_t kx = l.q.kx, words = l.kc;
  const size_t row_chunk = max_size(1, min_size(64, div_up(m, threads)));
  const size_t row_tasks = div_up(m, row_chunk);
  // Few rows (GEMV) on several threads: split the output channels too (the result is the same).
  const size_t blk_tasks = row_tasks >= threads ? 1 : min_size(l.blocks, div_up(threads, row_tasks));
  const size_t blk_chunk = div_up(l.blocks, blk_tasks);
  parallel_for(row_tasks * blk_tasks, threads, [&](size_t begin, size_t end) {
    Scratch s;
    for (size_t task = begin; task < end; ++task) {
      const size_t m0 = (task / blk_tasks) * row_chunk, m1 = min_size(m, m0 + row_chunk);
      const size_t b0 = (task % blk_tasks) * blk_chunk, b1 = min_size(l.blocks, b0 + blk_chunk);
      const size_t pix = m1 - m0, rows = pix * kx;
      s.planes.resize(rows * words);
      s.ptrs.resize(rows);
      s.cnt.resize(rows);
      s.nan.resize(pix);
      s.ensure_ytile(pix * kLqNr);
      for (size_t p = 0; p < pix; ++p)
        s.nan[p] = l.k->encode(x + (m0 + p) * l.n, l.n, l.q, words, s.planes.data() + p * kx * words,
                               s.cnt.data() + p * kx);
      for (size_t r = 0; r < rows; ++r) s.ptrs[r] = s.planes.data() + r * words;
      const TileRun tr{l, rows, s.ptrs.data(), s.cnt.data(), s.ytile.data()};
      for (size_t blk = b0; blk < b1; ++blk) {
        for (size_t p = 0; p < pix; ++p)
          for (size_t lane = 0; lane < kLqNr; ++lane) {
            const size_t oc = blk * kLqNr + lane;
            s.ytile[p * kLqNr + lane] = oc < l.o ? l.base[oc] : 0.0f;
          }
        for (size_t j = 0; j < l.kw; ++j) tr.run_panel(blk, j);
        store_block(l, blk, s.ytile.data(), pix, y + m0 * l.o, act);
      }
      const float qnan = std::numeric_limits<float>::quiet_NaN();
      for (size_t p = 0; p < pix; ++p)
        if (s.nan[p])
          for (size_t oc = b0 * kLqNr; oc < min_size(l.o, b1 * kLqNr); ++oc) y[(m0 + p) * l.o + oc] = qnan;
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
  const size_t kx = l.q.kx, kc = l.kc, c = l.n / l.taps, taps = l.taps;
  const size_t oh = lq_conv_out(h, g.kh, g.stride_h, g.dil_h, g.pad_top, g.pad_bottom);
  const size_t ow = lq_conv_out(w, g.kw, g.stride_w, g.dil_w, g.pad_left, g.pad_right);
  const size_t in_pix = b * h * w, out_pix = b * oh * ow;
  if (out_pix == 0) return;
  // Encode every input pixel once: kx planes of kc words, their popcounts, a NaN flag.
  AlignedBuffer<uint64_t> enc(in_pix * kx * kc + kx * kc);
  uint64_t* zero = enc.data() + in_pix * kx * kc;
  std::memset(zero, 0, kx * kc * sizeof(uint64_t));
  std::vector<int32_t> pcnt(in_pix * kx);
  std::vector<uint8_t> pnan(in_pix);
  parallel_for(div_up(in_pix, 64), threads, [&](size_t begin, size_t end) {
    for (size_t p = begin * 64; p < min_size(in_pix, end * 64); ++p)
      pnan[p] = l.k->encode(x + p * c, c, l.q, kc, enc.data() + p * kx * kc, pcnt.data() + p * kx);
  }, Partition::Static);
  const size_t chunk = 32;  // output pixels per task
  const double offset = l.q.offset;
  parallel_for(div_up(out_pix, chunk), threads, [&](size_t begin, size_t end) {
    Scratch s;
    for (size_t task = begin; task < end; ++task) {
      const size_t p0 = task * chunk, pix = min_size(out_pix, p0 + chunk) - p0, rows = pix * kx;
      s.ptrs.assign(taps * rows, nullptr);
      s.cnt.assign(rows, 0);
      s.nan.assign(pix, 0);
      s.border.assign(pix * taps, 1);  // valid tap flags
      std::vector<uint8_t> is_border(pix, 0);
      s.ensure_ytile(pix * kLqNr);
      for (size_t p = 0; p < pix; ++p) {
        const size_t q = p0 + p, bi = q / (oh * ow), oy = (q / ow) % oh, ox = q % ow;
        for (size_t ty = 0; ty < g.kh; ++ty)
          for (size_t tx = 0; tx < g.kw; ++tx) {
            const size_t t = ty * g.kw + tx;
            const ptrdiff_t iy = static_cast<ptrdiff_t>(oy * g.stride_h + ty * g.dil_h) - static_cast<ptrdiff_t>(g.pad_top);
            const ptrdiff_t ix = static_cast<ptrdiff_t>(ox * g.stride_w + tx * g.dil_w) - static_cast<ptrdiff_t>(g.pad_left);
            const bool valid = iy >= 0 && ix >= 0 && iy < static_cast<ptrdiff_t>(h) && ix < static_cast<ptrdiff_t>(w);
            if (valid) {
              const size_t ip = (bi * h + static_cast<size_t>(iy)) * w + static_cast<size_t>(ix);
              for (size_t i = 0; i < kx; ++i) {
                s.ptrs[t * rows + p * kx + i] = enc.data() + (ip * kx + i) * kc;
                s.cnt[p * kx + i] += pcnt[ip * kx + i];
              }
              s.nan[p] |= pnan[ip];
            } else {
              for (size_t i = 0; i < kx; ++i) s.ptrs[t * rows + p * kx + i] = zero;
              s.border[p * taps + t] = 0;
              is_border[p] = 1;
            }
          }
      }
      const TileRun tr{l, rows, s.ptrs.data(), s.cnt.data(), s.ytile.data()};
      for (size_t blk = 0; blk < l.blocks; ++blk) {
        for (size_t p = 0; p < pix; ++p)
          for (size_t lane = 0; lane < kLqNr; ++lane) {
            const size_t oc = blk * kLqNr + lane;
            float v = 0.0f;
            if (oc < l.o) {
              if (is_border[p] && offset != 0.0) {  // c * (the valid taps' weight sum) + bias
                double ws = 0.0;
                for (size_t t = 0; t < taps; ++t)
                  if (s.border[p * taps + t]) ws += l.wtap[oc * taps + t];
                v = static_cast<float>(offset * ws + l.bias[oc]);
              } else {
                v = l.base[oc];
              }
            }
            s.ytile[p * kLqNr + lane] = v;
          }
        for (size_t j = 0; j < l.kw; ++j) tr.run_panel(blk, j);
        store_block(l, blk, s.ytile.data(), pix, y + p0 * l.o, act);
      }
      const float qnan = std::numeric_limits<float>::quiet_NaN();
      for (size_t p = 0; p < pix; ++p)
        if (s.nan[p])
          for (size_t oc = 0; oc < l.o; ++oc) y[(p0 + p) * l.o + oc] = qnan;
    }
  }, Partition::Static);
}

}  // namespace edgesdk::kernels
