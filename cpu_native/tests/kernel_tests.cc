// Standalone kernel test driver (no Python, no test framework): checks every kernel family of
// every ISA level this CPU can run (or only the one named by --isa / EDGESDK_CPU_ISA) against
// independent naive references (GEMM, convolution, clustered, NNM) and against the scalar
// kernels (the other families), on odd sizes and tails, and the qu8 (int8) families bit for bit
// against a naive int64 reference of the int8 formulas; levels with fp16-arithmetic kernels
// (neonfp16) also run f16_gemm, f16_conv and f16_depthwise against a scalar model of their
// rounding (and print an INFO line with their drift on K = 4608). Prints one line per family and ISA:
//   PASS <family> <isa> <cases>      or      FAIL <family> <isa> <first mismatch>
// after a "KERNELS <isa> <slot>=<kernel name> ..." line naming the level's microkernels, then
// "checked isas: ..." and exits 1 on any mismatch. Options: --isa NAME, --seed N, --quick (GEMM only up to
// M = 17, thread pool without the handoff stress: for emulators that run a whole OS, as Bochs for
// AVX-512, tools/avx512_under_bochs.py), --only test_<name> (one test function, e.g. test_spmm). Built natively and for aarch64 (run
// under qemu-aarch64) by tests/test_native_kernels.py.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

#include "kernels/dispatch.h"
#include "kernels/operators.h"
#include "kernels/operators_qu8.h"
#include "kernels/operators_sparse.h"
#include "kernels/thread_pool.h"
#include "kernels/lq.h"
#ifndef EDGESDK_LQ_IN_LIBRARY
// The LQ bitwise kernels are one translation unit without ISA flags (per-function target
// attributes): compiled in here where the library is not linked whole (the driver that
// tests/test_native_kernels.py builds natively and for aarch64 lists its sources without it).
#include "kernels/lq.cc"
#endif

using namespace edgesdk::kernels;

namespace {

unsigned g_seed = 12345;  // --seed N draws other cases (the default set is fixed)
bool g_quick = false;     // --quick: the reduced set (see the header)
std::string g_only;       // --only test_<name>: that test function alone (quicker runs while developing)
std::mt19937 rng(g_seed);

std::vector<float> random_vec(size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

float round_fp16(float x) { return fp16_to_fp32(fp32_to_fp16(x)); }

const Activation kActs[] = {act_none(), act_relu(), act_clip(-0.25f, 0.5f), act_hardswish(), act_hardsigmoid(),
                            act_sigmoid(), act_tanh(), act_leaky_relu(0.1f)};
constexpr size_t kActCount = sizeof(kActs) / sizeof(kActs[0]);

// One family's verdict: counts cases, keeps the first mismatch.
struct Family {
  Family(std::string n, std::string i) : name(std::move(n)), isa(std::move(i)) {}
  std::string name, isa;
  size_t cases = 0;
  std::string failure;
  bool ok() const { return failure.empty(); }
  // |got - want| <= rtol * max(|want|, floor); floor carries the scale of a sum's terms.
  bool check(const std::string& what, const float* got, const double* want, size_t n, double rtol = 1e-5,
             const double* floor = nullptr) {
    ++cases;
    for (size_t i = 0; i < n; ++i) {
      const double scale = std::max(std::fabs(want[i]), floor != nullptr ? floor[i] : 1e-30);
      const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
      const bool same_special = (std::isnan(got[i]) && std::isnan(want[i])) || static_cast<double>(got[i]) == want[i];
      if (!(err <= rtol * scale + 1e-30) && !same_special) {
        if (failure.empty()) {
          char buf[512];
          std::snprintf(buf, sizeof buf, "%s: element %zu got %.9g want %.9g", what.c_str(), i, got[i], want[i]);
          failure = buf;
        }
        return false;
      }
    }
    return true;
  }
  // Float references; `floor` (a constant) stands for the scale of the summed terms. Not
  // inlined: GCC 12 at -O3 reports a false -Wfree-nonheap-object on the inlined vector.
  [[gnu::noinline]] bool check(const std::string& what, const float* got, const float* want, size_t n, double rtol = 1e-5,
             double floor = 1e-30) {
    std::vector<double> w(n), f(n, floor);
    for (size_t i = 0; i < n; ++i) w[i] = want[i];
    return check(what, got, w.data(), n, rtol, f.data());
  }
};

std::vector<Family> g_results;

// Each family starts from the same seed, so a forced ISA sees the same cases as a full run.
void reseed() { rng.seed(g_seed); }

void report(const Family& f) {
  if (f.ok()) std::printf("PASS %s %s %zu\n", f.name.c_str(), f.isa.c_str(), f.cases);
  else std::printf("FAIL %s %s %s\n", f.name.c_str(), f.isa.c_str(), f.failure.c_str());
  std::fflush(stdout);
  g_results.push_back(f);
}

std::string dims(std::initializer_list<size_t> v) {
  std::string s;
  for (size_t x : v) s += (s.empty() ? "" : "x") + std::to_string(x);
  return s;
}

// ---- GEMM -----------------------------------------------------------------------------------
void test_gemm(const KernelTable& t) {
  reseed();
  Family fam{"gemm", t.name};
  const size_t ms[] = {1, 3, 7, 17, 33, 65};
  const size_t ns[] = {1, 3, 5, 16, 17, 33, 65};
  const size_t ks[] = {1, 3, 7, 17, 33, 65, 300, 700};
  size_t index = 0;
  for (size_t m : ms)
    for (size_t n : ns)
      for (size_t k : ks) {
        ++index;
        if (g_quick && m > 17) continue;  // still two row tiles and a tail, every K, act and variant
        const bool fp16 = index % 2 == 0;
        const Activation act = kActs[index % kActCount];
        const bool kn = index % 5 == 0;
        const size_t threads = 1 + index % 2;
        auto a = random_vec(m * k), w = random_vec(n * k), bias = random_vec(n);
        std::vector<float> wk(n * k);  // the same weights as K x N
        for (size_t i = 0; i < n; ++i)
          for (size_t j = 0; j < k; ++j) wk[j * n + i] = w[i * k + j];
        auto packed = pack_gemm_weights(kn ? wk.data() : w.data(), n, k, kn ? WeightLayout::KN : WeightLayout::NK,
                                        bias.data(), fp16 ? WeightType::F16 : WeightType::F32, &t);
        const size_t ldc = n + 3;  // a wider output row checks the stride
        std::vector<float> c(m * ldc, 7.0f);
        gemm(a.data(), m, k, packed, c.data(), ldc, act, threads);
        std::vector<double> want(m * n), floor(m * n);
        std::vector<float> got(m * n);
        for (size_t i = 0; i < m; ++i)
          for (size_t j = 0; j < n; ++j) {
            double s = bias[j], mag = std::fabs(bias[j]);
            for (size_t kk = 0; kk < k; ++kk) {
              const double wv = fp16 ? round_fp16(w[j * k + kk]) : w[j * k + kk];
              s += a[i * k + kk] * wv;
              mag += std::fabs(a[i * k + kk] * wv);
            }
            want[i * n + j] = activate_reference(static_cast<float>(s), act);
            floor[i * n + j] = mag / std::sqrt(static_cast<double>(k)) + 1e-3;
            got[i * n + j] = c[i * ldc + j];
          }
        bool pad_ok = true;  // columns past N untouched
        for (size_t i = 0; i < m; ++i)
          for (size_t j = n; j < ldc; ++j) pad_ok &= c[i * ldc + j] == 7.0f;
        if (!pad_ok && fam.failure.empty()) fam.failure = "gemm wrote past N " + dims({m, n, k});
        fam.check(std::string("gemm ") + dims({m, n, k}) + (fp16 ? " f16w " : " ") + act_name(act.kind), got.data(),
                  want.data(), m * n, 1e-5, floor.data());
      }
  report(fam);
}

// ---- convolution ----------------------------------------------------------------------------
struct ConvCase {
  size_t n, h, w, c, oc;
  ConvGeometry g;
};

void naive_conv(const ConvCase& cc, const float* x, const float* w, const float* bias, bool fp16, const Activation& act,
                size_t oh, size_t ow, std::vector<double>& want, std::vector<double>& floor) {
  const ConvGeometry& g = cc.g;
  want.assign(cc.n * oh * ow * cc.oc, 0.0);
  floor.assign(want.size(), 0.0);
  const size_t kdim = g.kh * g.kw * cc.c;
  for (size_t b = 0; b < cc.n; ++b)
    for (size_t oy = 0; oy < oh; ++oy)
      for (size_t ox = 0; ox < ow; ++ox)
        for (size_t o = 0; o < cc.oc; ++o) {
          double s = bias[o], mag = std::fabs(bias[o]);
          for (size_t ky = 0; ky < g.kh; ++ky)
            for (size_t kx = 0; kx < g.kw; ++kx) {
              const long iy = static_cast<long>(oy * g.stride_h + ky * g.dil_h) - static_cast<long>(g.pad_top);
              const long ix = static_cast<long>(ox * g.stride_w + kx * g.dil_w) - static_cast<long>(g.pad_left);
              if (iy < 0 || ix < 0 || iy >= static_cast<long>(cc.h) || ix >= static_cast<long>(cc.w)) continue;
              for (size_t ci = 0; ci < cc.c; ++ci) {
                double wv = w[o * kdim + (ky * g.kw + kx) * cc.c + ci];
                if (fp16) wv = round_fp16(static_cast<float>(wv));
                const double p = x[((b * cc.h + iy) * cc.w + ix) * cc.c + ci] * wv;
                s += p;
                mag += std::isfinite(p) ? std::fabs(p) : 0.0;  // nonfinite family: inf must not widen the bound
              }
            }
          const size_t idx = ((b * oh + oy) * ow + ox) * cc.oc + o;
          want[idx] = activate_reference(static_cast<float>(s), act);
          floor[idx] = mag / std::sqrt(static_cast<double>(kdim)) + 1e-3;
        }
}

ConvGeometry geom(size_t kh, size_t kw, size_t s, size_t d, size_t pt, size_t pl, size_t pb, size_t pr) {
  ConvGeometry g;
  g.kh = kh; g.kw = kw; g.stride_h = s; g.stride_w = s; g.dil_h = d; g.dil_w = d;
  g.pad_top = pt; g.pad_left = pl; g.pad_bottom = pb; g.pad_right = pr;
  return g;
}

// pack_gemm_weights(window = KH*KW) of OIHW filters gives the same panels, byte for byte, as
// packing the filters in (kh, kw, c) order: the fp32 transpose path and, from fp16 sources,
// the element loop.
void check_window_packing(Family& fam, const KernelTable& t, const std::string& what, const std::vector<float>& w,
                          size_t oc, size_t c, size_t window, const std::vector<float>& bias, bool fp16,
                          const PackedGemmWeights& want) {
  const size_t kdim = c * window;
  std::vector<float> oihw(w.size());
  std::vector<uint16_t> oihw_half(w.size()), w_half(w.size());
  for (size_t o = 0; o < oc; ++o)
    for (size_t s = 0; s < window; ++s)
      for (size_t ch = 0; ch < c; ++ch) oihw[(o * c + ch) * window + s] = w[o * kdim + s * c + ch];
  for (size_t i = 0; i < w.size(); ++i) {
    oihw_half[i] = fp32_to_fp16(oihw[i]);
    w_half[i] = fp32_to_fp16(w[i]);
  }
  const WeightType type = fp16 ? WeightType::F16 : WeightType::F32;
  const auto packed = pack_gemm_weights(oihw.data(), oc, kdim, WeightLayout::NK, bias.data(), type, &t, false, window);
  const auto from_half =
      pack_gemm_weights_f16(oihw_half.data(), oc, kdim, WeightLayout::NK, bias.data(), type, &t, false, window);
  const auto want_half = pack_gemm_weights_f16(w_half.data(), oc, kdim, WeightLayout::NK, bias.data(), type, &t);
  ++fam.cases;
  const size_t bytes = want.panels.size();
  const bool same = packed.panels.size() == bytes && from_half.panels.size() == want_half.panels.size() &&
                    std::memcmp(packed.panels.data(), want.panels.data(), bytes) == 0 &&
                    std::memcmp(from_half.panels.data(), want_half.panels.data(), want_half.panels.size()) == 0;
  if (!same && fam.failure.empty()) fam.failure = what + ": window packing differs from packing (kh, kw, c) rows";
}

void test_conv(const KernelTable& t) {
  reseed();
  Family fam{"conv", t.name};
  const ConvCase cases[] = {
      {1, 5, 7, 3, 5, geom(1, 1, 1, 1, 0, 0, 0, 0)},     // 1x1 stride 1: the GEMM path
      {2, 6, 5, 17, 33, geom(1, 1, 2, 1, 0, 0, 0, 0)},   // 1x1 stride 2: indirect
      {1, 7, 9, 5, 17, geom(3, 3, 1, 1, 1, 1, 1, 1)},
      {2, 9, 8, 3, 16, geom(3, 3, 2, 1, 1, 1, 1, 1)},
      {1, 11, 10, 1, 1, geom(5, 5, 1, 2, 4, 4, 4, 4)},   // dilation 2
      {1, 13, 13, 3, 24, geom(7, 7, 2, 1, 3, 3, 3, 3)},  // stem-like
      {1, 6, 7, 17, 5, geom(3, 2, 1, 1, 0, 1, 2, 0)},    // asymmetric kernel and padding
      {1, 4, 4, 65, 65, geom(3, 3, 1, 1, 1, 1, 1, 1)},
  };
  size_t index = 0;
  for (const ConvCase& cc : cases) {
    ++index;
    const bool fp16 = index % 3 == 0;
    const Activation act = kActs[index % kActCount];
    const size_t kdim = cc.g.kh * cc.g.kw * cc.c;
    auto x = random_vec(cc.n * cc.h * cc.w * cc.c), w = random_vec(cc.oc * kdim), bias = random_vec(cc.oc);
    auto packed = pack_gemm_weights(w.data(), cc.oc, kdim, WeightLayout::NK, bias.data(),
                                    fp16 ? WeightType::F16 : WeightType::F32, &t);
    ConvPlan plan(cc.n, cc.h, cc.w, cc.c, cc.g, packed);
    const size_t oh = plan.out_h(), ow = plan.out_w();
    std::vector<double> want, floor;
    naive_conv(cc, x.data(), w.data(), bias.data(), fp16, act, oh, ow, want, floor);
    std::vector<float> y(want.size());
    const std::string what = "conv " + dims({cc.n, cc.h, cc.w, cc.c, cc.oc, cc.g.kh, cc.g.kw, cc.g.stride_h});
    plan.run(x.data(), y.data(), act, 1 + index % 2);
    fam.check(what, y.data(), want.data(), y.size(), 1e-5, floor.data());
    // A second input buffer: the plan must notice the new pointer and rebuild its indirection.
    std::vector<float> x2(x.size());
    for (size_t i = 0; i < x.size(); ++i) x2[i] = -x[i];
    naive_conv(cc, x2.data(), w.data(), bias.data(), fp16, act, oh, ow, want, floor);
    plan.run(x2.data(), y.data(), act, 2);
    fam.check(what + " (new input)", y.data(), want.data(), y.size(), 1e-5, floor.data());
    check_window_packing(fam, t, what, w, cc.oc, cc.c, cc.g.kh * cc.g.kw, bias, fp16, packed);
  }
  report(fam);
}

// ---- depthwise / pooling / eltwise / softmax / activation vs the scalar kernels ---------------
const KernelTable& scalar_table() { return kernels_for(Isa::Scalar); }

void test_depthwise(const KernelTable& t) {
  reseed();
  Family fam{"depthwise", t.name};
  struct Case { size_t n, h, w, c, mult; ConvGeometry g; };
  const Case cases[] = {
      {1, 7, 8, 1, 1, geom(3, 3, 1, 1, 1, 1, 1, 1)},   {2, 9, 7, 3, 1, geom(3, 3, 2, 1, 1, 1, 1, 1)},
      {1, 8, 8, 5, 1, geom(3, 3, 1, 2, 2, 2, 2, 2)},   {1, 10, 9, 17, 1, geom(5, 5, 2, 1, 2, 2, 2, 2)},
      {1, 6, 6, 40, 1, geom(3, 3, 1, 1, 0, 0, 1, 1)},  {1, 5, 6, 67, 1, geom(3, 3, 2, 1, 1, 1, 0, 0)},
      {1, 6, 5, 3, 2, geom(3, 3, 1, 1, 1, 1, 1, 1)},   {1, 5, 5, 2, 9, geom(3, 3, 2, 1, 1, 1, 1, 1)},
      {1, 4, 4, 5, 17, geom(1, 1, 1, 1, 0, 0, 0, 0)},
      // Rows wide enough for the 8-pixel blocks of multiplier 1: interior blocks, border blocks
      // and single remainder pixels, dilated, strided, unpadded, channel tails.
      {1, 4, 37, 19, 1, geom(3, 3, 1, 1, 1, 1, 1, 1)}, {1, 5, 40, 33, 1, geom(5, 5, 1, 2, 4, 4, 4, 4)},
      {2, 5, 35, 16, 1, geom(3, 3, 2, 1, 1, 1, 1, 1)}, {1, 3, 20, 8, 1, geom(3, 3, 1, 1, 0, 0, 0, 0)},
      // ... and every compile-time window of the column kernels (3x3/5x5, stride 2, dilation 2).
      {1, 6, 44, 24, 1, geom(5, 5, 2, 1, 2, 2, 2, 2)}, {1, 5, 30, 20, 1, geom(3, 3, 1, 2, 2, 2, 2, 2)},
      {1, 6, 33, 12, 1, geom(5, 5, 1, 1, 2, 2, 2, 2)},
  };
  size_t index = 0;
  for (const Case& cs : cases) {
    for (size_t ai = 0; ai < kActCount; ai += 3) {
      ++index;
      const Activation act = kActs[(ai + index) % kActCount];
      const size_t oc = cs.c * cs.mult;
      auto x = random_vec(cs.n * cs.h * cs.w * cs.c), w = random_vec(cs.g.kh * cs.g.kw * oc), b = random_vec(oc);
      const size_t oh = conv_output_size(cs.h, cs.g.kh, cs.g.stride_h, cs.g.dil_h, cs.g.pad_top, cs.g.pad_bottom);
      const size_t ow = conv_output_size(cs.w, cs.g.kw, cs.g.stride_w, cs.g.dil_w, cs.g.pad_left, cs.g.pad_right);
      std::vector<float> got(cs.n * oh * ow * oc), want(got.size());
      const float* bias = index % 4 == 0 ? nullptr : b.data();
      depthwise_conv(x.data(), cs.n, cs.h, cs.w, cs.c, cs.mult, cs.g, w.data(), bias, got.data(), act, 1 + index % 2, &t);
      depthwise_conv(x.data(), cs.n, cs.h, cs.w, cs.c, cs.mult, cs.g, w.data(), bias, want.data(), act, 1, &scalar_table());
      fam.check("depthwise " + dims({cs.n, cs.h, cs.w, cs.c, cs.mult, cs.g.kh, cs.g.stride_h}) + " " + act_name(act.kind),
                got.data(), want.data(), got.size(), 1e-5, 0.1);
    }
  }
  // The scalar reference itself against a hand-computed value: 3x3 ones on ones, padded corner.
  {
    std::vector<float> x(4 * 4, 1.0f), w(9, 1.0f), y(16);
    depthwise_conv(x.data(), 1, 4, 4, 1, 1, geom(3, 3, 1, 1, 1, 1, 1, 1), w.data(), nullptr, y.data(), act_none(), 1, &t);
    const float want[4] = {4, 6, 6, 4};
    fam.check("depthwise hand case", y.data(), want, 4);
  }
  report(fam);
}

void test_pool(const KernelTable& t) {
  reseed();
  Family fam{"pool", t.name};
  struct Case { size_t n, h, w, c; ConvGeometry g; };
  const Case cases[] = {
      {1, 7, 7, 1, geom(3, 3, 2, 1, 1, 1, 1, 1)}, {2, 8, 8, 3, geom(2, 2, 2, 1, 0, 0, 0, 0)},
      {1, 6, 5, 5, geom(3, 3, 1, 1, 1, 1, 1, 1)}, {1, 9, 9, 17, geom(3, 3, 2, 1, 0, 0, 1, 1)},
      {1, 5, 6, 33, geom(5, 5, 1, 1, 2, 2, 2, 2)}, {1, 7, 7, 8, geom(3, 3, 1, 2, 2, 2, 2, 2)},
  };
  size_t index = 0;
  for (const Case& cs : cases) {
    for (int kind = 0; kind < 3; ++kind) {
      ++index;
      const PoolKind pk = kind == 0 ? PoolKind::Max : PoolKind::Average;
      const bool include_pad = kind == 2;
      const Activation act = kActs[index % kActCount];
      auto x = random_vec(cs.n * cs.h * cs.w * cs.c, -3.0f, 3.0f);
      const size_t oh = conv_output_size(cs.h, cs.g.kh, cs.g.stride_h, cs.g.dil_h, cs.g.pad_top, cs.g.pad_bottom);
      const size_t ow = conv_output_size(cs.w, cs.g.kw, cs.g.stride_w, cs.g.dil_w, cs.g.pad_left, cs.g.pad_right);
      std::vector<float> got(cs.n * oh * ow * cs.c), want(got.size());
      pool2d(pk, x.data(), cs.n, cs.h, cs.w, cs.c, cs.g, include_pad, got.data(), act, 1 + index % 2, &t);
      pool2d(pk, x.data(), cs.n, cs.h, cs.w, cs.c, cs.g, include_pad, want.data(), act, 1, &scalar_table());
      fam.check(std::string(kind == 0 ? "maxpool " : include_pad ? "avgpool+pad " : "avgpool ") +
                    dims({cs.n, cs.h, cs.w, cs.c, cs.g.kh, cs.g.stride_h}),
                got.data(), want.data(), got.size(), 1e-5, 0.1);
    }
  }
  for (size_t c : {1, 3, 5, 17, 70}) {
    auto x = random_vec(2 * 13 * c);
    std::vector<float> got(2 * c), want(2 * c);
    global_avgpool(x.data(), 2, 13, c, got.data(), act_none(), 2, &t);
    for (size_t b = 0; b < 2; ++b)
      for (size_t ch = 0; ch < c; ++ch) {
        double s = 0;
        for (size_t p = 0; p < 13; ++p) s += x[(b * 13 + p) * c + ch];
        want[b * c + ch] = static_cast<float>(s / 13);
      }
    fam.check("global_avgpool c=" + std::to_string(c), got.data(), want.data(), got.size(), 1e-5, 0.1);
  }
  // Hand case for the average divisors: 3x3 window, pad 1, on a 2x2 image of ones with corner
  // value 5: excluding padding the mean is (5+1+1+1)/4; including it, /9.
  {
    std::vector<float> x = {5, 1, 1, 1}, y(4);
    pool2d(PoolKind::Average, x.data(), 1, 2, 2, 1, geom(3, 3, 1, 1, 1, 1, 1, 1), false, y.data(), act_none(), 1, &t);
    const float excl[4] = {2, 2, 2, 2};
    fam.check("avgpool exclude-pad hand case", y.data(), excl, 4);
    pool2d(PoolKind::Average, x.data(), 1, 2, 2, 1, geom(3, 3, 1, 1, 1, 1, 1, 1), true, y.data(), act_none(), 1, &t);
    const float incl[4] = {8.0f / 9, 8.0f / 9, 8.0f / 9, 8.0f / 9};
    fam.check("avgpool include-pad hand case", y.data(), incl, 4);
  }
  report(fam);
}

void test_eltwise(const KernelTable& t) {
  reseed();
  Family fam{"eltwise", t.name};
  size_t index = 0;
  for (size_t c : {1, 3, 5, 17, 33, 100})
    for (BinaryOp op : {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul})
      for (Broadcast bc : {Broadcast::None, Broadcast::PerChannel, Broadcast::Scalar})
        for (bool b_first : {false, true}) {
          ++index;
          const Activation act = kActs[index % kActCount];
          const size_t rows = 3;
          auto a = random_vec(rows * c, -2.0f, 2.0f), b = random_vec(rows * c, -2.0f, 2.0f);
          std::vector<float> got(rows * c), want(rows * c);
          std::vector<double> ref(rows * c), floor(rows * c, 0.05);  // fma vs mul+add near cancellation
          binary(op, bc, a.data(), b.data(), got.data(), rows, c, act, 1 + index % 2, b_first, &t);
          for (size_t r = 0; r < rows; ++r)
            for (size_t i = 0; i < c; ++i) {
              const float bv = bc == Broadcast::None ? b[r * c + i] : bc == Broadcast::PerChannel ? b[i] : b[0];
              const float av = a[r * c + i];
              const float l = b_first ? bv : av, rr = b_first ? av : bv;
              const float v = op == BinaryOp::Add ? l + rr : op == BinaryOp::Sub ? l - rr : l * rr;
              ref[r * c + i] = activate_reference(v, act);
            }
          fam.check("binary c=" + std::to_string(c) + " op=" + std::to_string(static_cast<int>(op)) +
                        " bc=" + std::to_string(static_cast<int>(bc)) + " " + act_name(act.kind),
                    got.data(), ref.data(), got.size(), 1e-5, floor.data());
        }
  report(fam);
}

void test_activation(const KernelTable& t) {
  reseed();
  Family fam{"activation", t.name};
  for (const Activation& act : kActs)
    for (size_t n : {1, 7, 33, 1000}) {
      auto x = random_vec(n, -12.0f, 12.0f);
      for (size_t i = 0; i < n; i += 3) x[i] *= 1e-3f;  // small values: tanh's cancellation zone
      std::vector<float> got = x;
      std::vector<double> want(n);
      activation(got.data(), n, act, 2, &t);
      for (size_t i = 0; i < n; ++i) want[i] = activate_reference(x[i], act);
      // Sigmoid of very negative inputs is tiny: judged with an absolute floor; the hard ones
      // cancel in alpha*x + beta near the knee, where fma and mul+add round differently.
      const bool hard = act.kind == ActKind::HardSigmoid || act.kind == ActKind::HardSwish;
      std::vector<double> floor(n, act.kind == ActKind::Sigmoid ? 1e-7 : hard ? 1e-2 : 1e-30);
      fam.check(std::string("activation ") + act_name(act.kind) + " n=" + std::to_string(n), got.data(), want.data(), n,
                1e-5, floor.data());
    }
  report(fam);
}

void test_softmax(const KernelTable& t) {
  reseed();
  Family fam{"softmax", t.name};
  size_t index = 0;
  for (size_t n : {1, 3, 7, 8, 16, 17, 33, 1000})
    for (float spread : {1.0f, 30.0f})
      for (float shift : {0.0f, 1000.0f, -500.0f}) {
        ++index;
        auto x = random_vec(3 * n, -spread, spread);
        for (auto& v : x) v += shift;
        std::vector<float> got(3 * n);
        std::vector<double> want(3 * n), floor(3 * n);
        softmax(x.data(), got.data(), 3, n, 1 + index % 2, &t);
        for (size_t r = 0; r < 3; ++r) {
          double mx = -1e300, s = 0;
          for (size_t i = 0; i < n; ++i) mx = std::max(mx, static_cast<double>(x[r * n + i]));
          for (size_t i = 0; i < n; ++i) s += std::exp(x[r * n + i] - mx);
          for (size_t i = 0; i < n; ++i) {
            want[r * n + i] = std::exp(x[r * n + i] - mx) / s;
            floor[r * n + i] = 1e-30;  // relative everywhere; outputs can be tiny but not denormal here
          }
        }
        for (size_t i = 0; i < want.size(); ++i) floor[i] = want[i] < 1e-30 ? 1e-30 : 0.0;
        fam.check("softmax n=" + std::to_string(n) + " spread=" + std::to_string(spread), got.data(), want.data(),
                  want.size(), 2e-5, floor.data());
      }
  // In place.
  {
    auto x = random_vec(37, -5.0f, 5.0f);
    std::vector<float> ref(37);
    softmax(x.data(), ref.data(), 1, 37, 1, &t);
    softmax(x.data(), x.data(), 1, 37, 1, &t);
    fam.check("softmax in place", x.data(), ref.data(), 37, 0.0);
  }
  report(fam);
}

// ---- clustered ------------------------------------------------------------------------------
std::vector<uint8_t> pack_bits_lsb_first(const std::vector<uint32_t>& values, unsigned bits) {
  std::vector<uint8_t> out((values.size() * bits + 7) / 8 + 1, 0);
  for (size_t i = 0; i < values.size(); ++i)
    for (unsigned b = 0; b < bits; ++b)
      if ((values[i] >> b) & 1u) out[(i * bits + b) / 8] |= static_cast<uint8_t>(1u << ((i * bits + b) % 8));
  out.pop_back();  // exact length: the reader must not need a spare byte
  return out;
}

void test_clustered(const KernelTable& t) {
  reseed();
  Family fam{"clustered", t.name};
  size_t index = 0;
  for (unsigned bits = 1; bits <= 8; ++bits)
    for (size_t n : {1, 3, 17})
      for (size_t k : {1, 7, 33, 65, 300})
        for (size_t m : {1, 3}) {
          ++index;
          const bool per_row = index % 2 == 0, fp16_book = index % 3 == 0;
          const Activation act = kActs[index % kActCount];
          const size_t entries = size_t{1} << bits, books = per_row ? n : 1;
          std::vector<uint32_t> idx(n * k);
          for (auto& v : idx) v = static_cast<uint32_t>(rng() % entries);
          auto codebook = random_vec(books * entries);
          std::vector<uint16_t> codebook16(codebook.size());
          for (size_t i = 0; i < codebook.size(); ++i) codebook16[i] = fp32_to_fp16(codebook[i]);
          auto x = random_vec(m * k), bias = random_vec(n);
          const auto stream = pack_bits_lsb_first(idx, bits);
          ClusteredWeights cw = fp16_book ? pack_clustered_f16(stream.data(), bits, n, k, codebook16.data(), per_row, bias.data(), &t)
                                          : pack_clustered(stream.data(), bits, n, k, codebook.data(), per_row, bias.data(), &t);
          std::vector<float> y(m * n);
          clustered_gemm(x.data(), m, k, cw, y.data(), n, act, 1 + index % 2);
          std::vector<double> want(m * n), floor(m * n);
          for (size_t i = 0; i < m; ++i)
            for (size_t r = 0; r < n; ++r) {
              double s = bias[r], mag = std::fabs(bias[r]);
              for (size_t kk = 0; kk < k; ++kk) {
                const size_t e = (per_row ? r * entries : 0) + idx[r * k + kk];
                const double wv = fp16_book ? fp16_to_fp32(codebook16[e]) : codebook[e];
                s += wv * x[i * k + kk];
                mag += std::fabs(wv * x[i * k + kk]);
              }
              want[i * n + r] = activate_reference(static_cast<float>(s), act);
              floor[i * n + r] = mag / std::sqrt(static_cast<double>(k)) + 1e-3;
            }
          fam.check("clustered b=" + std::to_string(bits) + " " + dims({m, n, k}) + (per_row ? " per-row" : " per-layer") +
                        (fp16_book ? " fp16-book " : " ") + act_name(act.kind),
                    y.data(), want.data(), want.size(), 1e-5, floor.data());
        }
  // Batch > 1 wide enough to use several panels and K blocks.
  {
    const unsigned bits = 4;
    const size_t m = 9, n = 37, k = 1100;
    std::vector<uint32_t> idx(n * k);
    for (auto& v : idx) v = static_cast<uint32_t>(rng() % 16);
    auto codebook = random_vec(16), x = random_vec(m * k);
    const auto stream = pack_bits_lsb_first(idx, bits);
    auto cw = pack_clustered(stream.data(), bits, n, k, codebook.data(), false, nullptr, &t);
    std::vector<float> y(m * n);
    clustered_gemm(x.data(), m, k, cw, y.data(), n, act_relu(), 2);
    std::vector<double> want(m * n), floor(m * n);
    for (size_t i = 0; i < m; ++i)
      for (size_t r = 0; r < n; ++r) {
        double s = 0, mag = 0;
        for (size_t kk = 0; kk < k; ++kk) {
          s += codebook[idx[r * k + kk]] * x[i * k + kk];
          mag += std::fabs(codebook[idx[r * k + kk]] * x[i * k + kk]);
        }
        want[i * n + r] = s > 0 ? s : 0;
        floor[i * n + r] = mag / std::sqrt(static_cast<double>(k)) + 1e-3;
      }
    fam.check("clustered batch 9x37x1100", y.data(), want.data(), want.size(), 1e-5, floor.data());
  }
  report(fam);
}

void test_nnm(const KernelTable& t) {
  reseed();
  Family fam{"nnm_gather", t.name};
  size_t index = 0;
  for (size_t groups : {1, 3})
    for (size_t kc : {1, 5, 8, 13, 16, 20, 40})
      for (size_t k : {1, 5, 17, 33}) {
        ++index;
        const size_t pixels = 7, stride = groups * kc + 2;
        const Activation act = kActs[index % kActCount];
        auto cent = random_vec(pixels * stride), bias = random_vec(k);
        std::vector<int32_t> assign(groups * k);
        for (auto& a : assign) a = static_cast<int32_t>(rng() % kc);
        const size_t out_stride = k + 1;
        std::vector<float> out(pixels * out_stride);
        const float* b = index % 3 == 0 ? nullptr : bias.data();
        nnm_gather(cent.data(), pixels, stride, groups, kc, assign.data(), k, b, out.data(), out_stride, act,
                   1 + index % 2, &t);
        std::vector<double> want(pixels * k), floor(pixels * k, 0.1 * static_cast<double>(groups));
        std::vector<float> got(pixels * k);
        for (size_t p = 0; p < pixels; ++p)
          for (size_t j = 0; j < k; ++j) {
            double s = b != nullptr ? b[j] : 0.0;
            for (size_t g = 0; g < groups; ++g) s += cent[p * stride + g * kc + assign[g * k + j]];
            want[p * k + j] = activate_reference(static_cast<float>(s), act);
            got[p * k + j] = out[p * out_stride + j];
          }
        fam.check("nnm groups=" + std::to_string(groups) + " kc=" + std::to_string(kc) + " k=" + std::to_string(k),
                  got.data(), want.data(), want.size(), 1e-5, floor.data());
      }
  report(fam);
}

// ---- NaN and infinities -----------------------------------------------------------------------
// Every family with NaN, +inf and -inf in its inputs, against the naive references (GEMM, conv,
// clustered, NNM, eltwise, softmax) or the scalar kernels (depthwise, pooling, activation). The
// semantics are ONNX Runtime's (tests/test_nan_inf.py): NaN in, NaN out, through every activation
// and clamp; +-inf to the limits (Relu(-inf) = 0, Sigmoid(+inf) = 1, Tanh(-inf) = -1, ...); a NaN
// anywhere in a max pool window gives NaN. Family::check accepts a nonfinite value only when it
// equals the wanted one (or both are NaN), and the references' error floors count finite terms only.
const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

// Puts NaN, +inf, -inf, NaN, ... at positions first, first + stride, ...
void sprinkle(std::vector<float>& x, size_t first, size_t stride) {
  const float specials[3] = {kNaN, kInf, -kInf};
  for (size_t i = first, j = 0; i < x.size(); i += stride, ++j) x[i] = specials[j % 3];
}

// The activations' values at NaN, +inf and -inf (ONNX Runtime 1.x, checked by tests/test_nan_inf.py).
void check_activation_limits(Family& fam, const KernelTable& t) {
  struct Limit { Activation act; float at_nan, at_inf, at_neg_inf; };
  const Limit limits[] = {
      {act_none(), kNaN, kInf, -kInf},           {act_relu(), kNaN, kInf, 0.0f},
      {act_clip(-0.25f, 0.5f), kNaN, 0.5f, -0.25f}, {act_hardswish(), kNaN, kInf, kNaN},
      {act_hardsigmoid(), kNaN, 1.0f, 0.0f},     {act_sigmoid(), kNaN, 1.0f, 0.0f},
      {act_tanh(), kNaN, 1.0f, -1.0f},           {act_leaky_relu(0.1f), kNaN, kInf, -kInf},
  };
  for (const Limit& l : limits) {
    const float in[3] = {kNaN, kInf, -kInf};
    const float want[3] = {l.at_nan, l.at_inf, l.at_neg_inf};
    float ref[3], got[3] = {kNaN, kInf, -kInf};
    for (int i = 0; i < 3; ++i) ref[i] = activate_reference(in[i], l.act);
    fam.check(std::string("activate_reference limits ") + act_name(l.act.kind), ref, want, 3, 0.0);
    activation(got, 3, l.act, 1, &t);
    fam.check(std::string("activation limits ") + act_name(l.act.kind), got, want, 3, 0.0);
  }
}

void nonfinite_gemm(Family& fam, const KernelTable& t) {
  struct Case { size_t m, n, k; };
  const Case cases[] = {{1, 5, 7}, {1, 33, 300}, {3, 17, 33}, {9, 33, 65}, {7, 16, 700}};
  size_t index = 0;
  for (const Case& cs : cases)
    for (const Activation& act : kActs)
      for (bool fp16 : {false, true}) {
        ++index;
        auto a = random_vec(cs.m * cs.k), w = random_vec(cs.n * cs.k), bias = random_vec(cs.n);
        // One special per row at most (so rows show NaN, +inf and -inf alike), plus a finite row.
        for (size_t i = 0; i + 1 < cs.m || (cs.m == 1 && i == 0); ++i) {
          const float specials[3] = {kNaN, kInf, -kInf};
          a[i * cs.k + (i * 7 + index) % cs.k] = specials[(i + index) % 3];
        }
        auto packed = pack_gemm_weights(w.data(), cs.n, cs.k, WeightLayout::NK, bias.data(),
                                        fp16 ? WeightType::F16 : WeightType::F32, &t);
        std::vector<float> c(cs.m * cs.n);
        gemm(a.data(), cs.m, cs.k, packed, c.data(), cs.n, act, 1 + index % 2);
        std::vector<double> want(c.size()), floor(c.size());
        for (size_t i = 0; i < cs.m; ++i)
          for (size_t j = 0; j < cs.n; ++j) {
            double s = bias[j], mag = std::fabs(bias[j]);
            for (size_t kk = 0; kk < cs.k; ++kk) {
              const double p = a[i * cs.k + kk] * static_cast<double>(fp16 ? round_fp16(w[j * cs.k + kk]) : w[j * cs.k + kk]);
              s += p;
              mag += std::isfinite(p) ? std::fabs(p) : 0.0;
            }
            want[i * cs.n + j] = activate_reference(static_cast<float>(s), act);
            floor[i * cs.n + j] = mag / std::sqrt(static_cast<double>(cs.k)) + 1e-3;
          }
        fam.check("nonfinite gemm " + dims({cs.m, cs.n, cs.k}) + (fp16 ? " f16w " : " ") + act_name(act.kind), c.data(),
                  want.data(), want.size(), 1e-5, floor.data());
      }
}

void nonfinite_conv(Family& fam, const KernelTable& t) {
  const ConvCase cases[] = {
      {1, 5, 7, 3, 5, geom(1, 1, 1, 1, 0, 0, 0, 0)},    // the GEMM path
      {1, 7, 9, 5, 17, geom(3, 3, 1, 1, 1, 1, 1, 1)},   // indirect, padded
      {2, 9, 8, 3, 33, geom(3, 3, 2, 1, 1, 1, 1, 1)},
  };
  for (const ConvCase& cc : cases)
    for (const Activation& act : kActs) {
      const size_t kdim = cc.g.kh * cc.g.kw * cc.c;
      auto x = random_vec(cc.n * cc.h * cc.w * cc.c), w = random_vec(cc.oc * kdim), bias = random_vec(cc.oc);
      sprinkle(x, 4, 37);
      auto packed = pack_gemm_weights(w.data(), cc.oc, kdim, WeightLayout::NK, bias.data(), WeightType::F32, &t);
      ConvPlan plan(cc.n, cc.h, cc.w, cc.c, cc.g, packed);
      std::vector<double> want, floor;
      naive_conv(cc, x.data(), w.data(), bias.data(), false, act, plan.out_h(), plan.out_w(), want, floor);
      std::vector<float> y(want.size());
      plan.run(x.data(), y.data(), act, 2);
      fam.check("nonfinite conv " + dims({cc.n, cc.h, cc.w, cc.c, cc.oc, cc.g.kh}) + " " + act_name(act.kind), y.data(),
                want.data(), y.size(), 1e-5, floor.data());
    }
}

void nonfinite_vector_families(Family& fam, const KernelTable& t) {
  // Depthwise (plain, channel multiplier) against the scalar kernel.
  struct DwCase { size_t h, w, c, mult; ConvGeometry g; };
  const DwCase dw_cases[] = {{7, 8, 17, 1, geom(3, 3, 1, 1, 1, 1, 1, 1)}, {6, 6, 70, 1, geom(3, 3, 2, 1, 1, 1, 1, 1)},
                             {5, 5, 3, 9, geom(3, 3, 1, 1, 1, 1, 1, 1)}};
  for (const DwCase& cs : dw_cases)
    for (const Activation& act : kActs) {
      const size_t oc = cs.c * cs.mult;
      auto x = random_vec(cs.h * cs.w * cs.c), w = random_vec(9 * oc), b = random_vec(oc);
      sprinkle(x, 2, 29);
      const size_t oh = conv_output_size(cs.h, 3, cs.g.stride_h, 1, 1, 1), ow = conv_output_size(cs.w, 3, cs.g.stride_w, 1, 1, 1);
      std::vector<float> got(oh * ow * oc), want(got.size());
      depthwise_conv(x.data(), 1, cs.h, cs.w, cs.c, cs.mult, cs.g, w.data(), b.data(), got.data(), act, 2, &t);
      depthwise_conv(x.data(), 1, cs.h, cs.w, cs.c, cs.mult, cs.g, w.data(), b.data(), want.data(), act, 1, &scalar_table());
      fam.check("nonfinite depthwise " + dims({cs.h, cs.w, cs.c, cs.mult}) + " " + act_name(act.kind), got.data(),
                want.data(), got.size(), 1e-5, 0.1);
    }
  // Pooling: a NaN anywhere in a max window is NaN; averages follow IEEE sums.
  for (size_t c : {1, 5, 17, 33})
    for (int kind = 0; kind < 2; ++kind) {
      auto x = random_vec(8 * 8 * c, -3.0f, 3.0f);
      sprinkle(x, 3, 41);
      const PoolKind pk = kind == 0 ? PoolKind::Max : PoolKind::Average;
      std::vector<float> got(4 * 4 * c), want(got.size());
      pool2d(pk, x.data(), 1, 8, 8, c, geom(3, 3, 2, 1, 1, 1, 0, 0), false, got.data(), act_none(), 2, &t);
      pool2d(pk, x.data(), 1, 8, 8, c, geom(3, 3, 2, 1, 1, 1, 0, 0), false, want.data(), act_none(), 1, &scalar_table());
      fam.check(std::string(kind == 0 ? "nonfinite maxpool c=" : "nonfinite avgpool c=") + std::to_string(c), got.data(),
                want.data(), got.size(), 1e-5, 0.1);
    }
  {  // max pool order: the NaN first, in the middle and last of a window, against numpy's max
    for (size_t pos = 0; pos < 4; ++pos) {
      std::vector<float> x(4 * 16, 1.0f), y(16);
      for (size_t ch = 0; ch < 16; ++ch) x[pos * 16 + ch] = kNaN;
      pool2d(PoolKind::Max, x.data(), 1, 2, 2, 16, geom(2, 2, 1, 1, 0, 0, 0, 0), false, y.data(), act_none(), 1, &t);
      std::vector<float> want(16, kNaN);
      fam.check("nonfinite maxpool NaN at tap " + std::to_string(pos), y.data(), want.data(), 16, 0.0);
    }
    // +inf and -inf in one window (their sum is NaN, but no tap is): the max is +inf.
    std::vector<float> x(4 * 16, 1.0f), y(16);
    for (size_t ch = 0; ch < 16; ++ch) {
      x[ch] = -kInf;
      x[(1 + ch % 3) * 16 + ch] = kInf;
    }
    pool2d(PoolKind::Max, x.data(), 1, 2, 2, 16, geom(2, 2, 1, 1, 0, 0, 0, 0), false, y.data(), act_none(), 1, &t);
    std::vector<float> want(16, kInf);
    fam.check("nonfinite maxpool +inf and -inf", y.data(), want.data(), 16, 0.0);
  }
  for (size_t c : {3, 17, 70}) {
    auto x = random_vec(13 * c);
    sprinkle(x, 1, 23);
    std::vector<float> got(c);
    global_avgpool(x.data(), 1, 13, c, got.data(), act_none(), 1, &t);
    std::vector<double> want(c), floor(c);
    for (size_t ch = 0; ch < c; ++ch) {
      double s = 0, mag = 0;
      for (size_t p = 0; p < 13; ++p) {
        s += x[p * c + ch];
        mag += std::isfinite(x[p * c + ch]) ? std::fabs(x[p * c + ch]) : 0.0;
      }
      want[ch] = s / 13;
      floor[ch] = mag / 13;  // the terms' scale: a mean near zero (--seed 4, c = 70: 3.8e-4) is cancellation
    }
    fam.check("nonfinite global_avgpool c=" + std::to_string(c), got.data(), want.data(), c, 1e-5, floor.data());
  }
  // Element-wise: specials in both operands (inf - inf, 0 * inf), every activation.
  for (size_t c : {3, 17, 33})
    for (const Activation& act : kActs) {
      auto a = random_vec(3 * c, -2.0f, 2.0f), b = random_vec(3 * c, -2.0f, 2.0f);
      sprinkle(a, 0, 5);
      sprinkle(b, 1, 4);
      b[2] = 0.0f;
      for (BinaryOp op : {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul}) {
        std::vector<float> got(3 * c);
        std::vector<double> want(3 * c), floor(3 * c, 0.05);
        binary(op, Broadcast::None, a.data(), b.data(), got.data(), 3, c, act, 2, false, &t);
        for (size_t i = 0; i < 3 * c; ++i) {
          const float v = op == BinaryOp::Add ? a[i] + b[i] : op == BinaryOp::Sub ? a[i] - b[i] : a[i] * b[i];
          want[i] = activate_reference(v, act);
        }
        fam.check("nonfinite binary c=" + std::to_string(c) + " op=" + std::to_string(static_cast<int>(op)) + " " +
                      act_name(act.kind), got.data(), want.data(), got.size(), 1e-5, floor.data());
      }
    }
  // Activations: specials in every lane position of a vector and of its tail.
  for (const Activation& act : kActs)
    for (size_t n : {1, 7, 33}) {
      auto x = random_vec(n, -12.0f, 12.0f);
      sprinkle(x, n % 3, 2);
      std::vector<float> got = x;
      std::vector<double> want(n);
      activation(got.data(), n, act, 1, &t);
      for (size_t i = 0; i < n; ++i) want[i] = activate_reference(x[i], act);
      const bool hard = act.kind == ActKind::HardSigmoid || act.kind == ActKind::HardSwish;
      std::vector<double> floor(n, act.kind == ActKind::Sigmoid ? 1e-7 : hard ? 1e-2 : 1e-30);
      fam.check(std::string("nonfinite activation ") + act_name(act.kind) + " n=" + std::to_string(n), got.data(),
                want.data(), n, 1e-5, floor.data());
    }
}

// Softmax rows as ONNX Runtime computes them: e^(x - max) / sum, with max NaN if any x is.
void nonfinite_softmax(Family& fam, const KernelTable& t) {
  const float lowest = -std::numeric_limits<float>::max();
  for (size_t n : {1, 7, 17, 33}) {
    // Row kinds: one NaN, one +inf, one -inf, all -inf, a -3.4e38 mask, 2e6-scale finite values,
    // a -1e9 mask (the vector path: its m is garbage but finite, and weighs 2^(n - n_max) = 0).
    for (int kind = 0; kind < 7; ++kind) {
      auto x = random_vec(n, -4.0f, 4.0f);
      const size_t at = (n * 5 + static_cast<size_t>(kind)) % n;
      if (kind == 0) x[at] = kNaN;
      if (kind == 1) x[at] = kInf;
      if (kind == 2) x[at] = -kInf;
      if (kind == 3) std::fill(x.begin(), x.end(), -kInf);
      if (kind == 4) x[at] = lowest;
      if (kind == 5) for (auto& v : x) v = v * 0.5f - 2.0e6f;
      if (kind == 6) x[at] = -1.0e9f;
      std::vector<float> got(n);
      softmax(x.data(), got.data(), 1, n, 1, &t);
      double mx = -std::numeric_limits<double>::infinity();
      for (float v : x) mx = std::isnan(v) || std::isnan(mx) ? std::nan("") : std::max(mx, static_cast<double>(v));
      double s = 0;
      for (float v : x) s += std::exp(v - mx);
      std::vector<double> want(n), floor(n, 1e-30);
      for (size_t i = 0; i < n; ++i) want[i] = std::exp(x[i] - mx) / s;
      fam.check("nonfinite softmax n=" + std::to_string(n) + " kind=" + std::to_string(kind), got.data(), want.data(), n,
                2e-5, floor.data());
    }
  }
}

void nonfinite_compressed(Family& fam, const KernelTable& t) {
  {  // clustered GEMV / GEMM: specials in x reach every row
    const unsigned bits = 4;
    const size_t n = 17, k = 65;
    for (size_t m : {1, 3}) {
      std::vector<uint32_t> idx(n * k);
      for (auto& v : idx) v = static_cast<uint32_t>(rng() % 16);
      auto codebook = random_vec(16), x = random_vec(m * k), bias = random_vec(n);
      sprinkle(x, 5, 70);  // one special per row of x
      const auto stream = pack_bits_lsb_first(idx, bits);
      auto cw = pack_clustered(stream.data(), bits, n, k, codebook.data(), false, bias.data(), &t);
      for (const Activation& act : kActs) {
        std::vector<float> y(m * n);
        clustered_gemm(x.data(), m, k, cw, y.data(), n, act, 1);
        std::vector<double> want(m * n), floor(m * n, 0.1);
        for (size_t i = 0; i < m; ++i)
          for (size_t r = 0; r < n; ++r) {
            double s = bias[r];
            for (size_t kk = 0; kk < k; ++kk) s += static_cast<double>(codebook[idx[r * k + kk]]) * x[i * k + kk];
            want[i * n + r] = activate_reference(static_cast<float>(s), act);
          }
        fam.check("nonfinite clustered m=" + std::to_string(m) + " " + act_name(act.kind), y.data(), want.data(),
                  want.size(), 1e-5, floor.data());
      }
    }
  }
  {  // NNM gather: specials in the centroid responses
    const size_t groups = 2, kc = 8, k = 17, pixels = 5, stride = groups * kc;
    auto cent = random_vec(pixels * stride), bias = random_vec(k);
    sprinkle(cent, 3, 11);
    std::vector<int32_t> assign(groups * k);
    for (auto& a : assign) a = static_cast<int32_t>(rng() % kc);
    for (const Activation& act : kActs) {
      std::vector<float> out(pixels * k);
      nnm_gather(cent.data(), pixels, stride, groups, kc, assign.data(), k, bias.data(), out.data(), k, act, 1, &t);
      std::vector<double> want(pixels * k), floor(pixels * k, 0.2);
      for (size_t p = 0; p < pixels; ++p)
        for (size_t j = 0; j < k; ++j) {
          double s = bias[j];
          for (size_t g = 0; g < groups; ++g) s += cent[p * stride + g * kc + assign[g * k + j]];
          want[p * k + j] = activate_reference(static_cast<float>(s), act);
        }
      fam.check(std::string("nonfinite nnm ") + act_name(act.kind), out.data(), want.data(), want.size(), 1e-5,
                floor.data());
    }
  }
}

void nonfinite_chw(Family& fam, const KernelTable& t);  // with the CHW families below

void test_nonfinite(const KernelTable& t) {
  reseed();
  Family fam{"nonfinite", t.name};
  check_activation_limits(fam, t);
  nonfinite_gemm(fam, t);
  nonfinite_conv(fam, t);
  nonfinite_vector_families(fam, t);
  nonfinite_softmax(fam, t);
  nonfinite_compressed(fam, t);
  nonfinite_chw(fam, t);
  report(fam);
}

// ---- Winograd F(4x4, 3x3) ---------------------------------------------------------------------
// ConvPlan forced to Winograd (ConvAlgorithm::Winograd: the level's winograd_input / _output
// transforms around its igemm_f32w) against the naive float64 convolution: every H and W in 1..13
// (edge tiles of 1 to 4 rows and columns, images smaller than one tile), every padding 0..2 per side
// (cycled through the cases), batch 2, C and K below, between and past the vector widths (1 to 33
// input and 1 to 40 output channels), every activation (clamps fused, the others as a pass), 1 and 2
// threads; then tile blocks and panel groups (several of each: larger images, 2 threads), pixel
// strides wider than the channels, and NaN / inf inputs (the nonfinite outputs recomputed directly
// must equal the reference's, the others stay within the tolerance).
// Tolerance: |got - want| <= 2e-4 * max(|want|, floor), floor the conv family's (sum of |x w| over
// the window and |bias|, over sqrt(9 C), + 1e-3): about 2x the largest ratio measured over seeds 0-12
// on the scalar and avx512 levels (3.8e-5 to 8.9e-5). The conv family holds the direct kernels to
// 1e-5: Winograd's sums round terms of the whole 6x6 patch, scaled up to 8 x 5 (A^T, B^T), that
// cancel only in exact arithmetic. The INFO line prints the run's largest error / max(|want|, floor).
void test_winograd(const KernelTable& t) {
  reseed();
  Family fam{"f32_winograd", t.name};
  constexpr double kRtol = 2e-4;
  double worst = 0.0;
  auto run_case = [&](const ConvCase& cc, const Activation& act, size_t threads, size_t in_extra, size_t out_extra,
                      bool specials, size_t tile_block = 0) {
    const size_t kdim = 9 * cc.c, in_stride = cc.c + in_extra;
    auto w = random_vec(cc.oc * kdim), bias = random_vec(cc.oc);
    auto x = random_vec(cc.n * cc.h * cc.w * cc.c);
    if (specials) sprinkle(x, 3, 29);
    std::vector<float> xs(cc.n * cc.h * cc.w * in_stride, 5.0f);  // the input at its pixel stride
    for (size_t p = 0; p < cc.n * cc.h * cc.w; ++p)
      for (size_t ch = 0; ch < cc.c; ++ch) xs[p * in_stride + ch] = x[p * cc.c + ch];
    auto packed = pack_gemm_weights(w.data(), cc.oc, kdim, WeightLayout::NK, bias.data(), WeightType::F32, &t);
    ConvPlan plan(cc.n, cc.h, cc.w, cc.c, cc.g, packed, ConvAlgorithm::Winograd);
    if (tile_block != 0) plan.set_winograd_block(tile_block);
    const size_t oh = plan.out_h(), ow = plan.out_w(), out_stride = cc.oc + out_extra;
    std::vector<double> want, floor;
    naive_conv(cc, x.data(), w.data(), bias.data(), false, act, oh, ow, want, floor);
    std::vector<float> y(cc.n * oh * ow * out_stride, 7.0f);
    plan.run(xs.data(), y.data(), act, threads, in_stride, out_stride);
    std::vector<float> got(want.size());
    bool pad_ok = true;  // channels past K at a wider stride untouched
    for (size_t p = 0; p < cc.n * oh * ow; ++p) {
      for (size_t o = 0; o < cc.oc; ++o) got[p * cc.oc + o] = y[p * out_stride + o];
      for (size_t o = cc.oc; o < out_stride; ++o) pad_ok &= y[p * out_stride + o] == 7.0f;
    }
    const std::string what = std::string("winograd ") + plan.algorithm_name() + " " +
                             dims({cc.n, cc.h, cc.w, cc.c, cc.oc}) + " pads " +
                             dims({cc.g.pad_top, cc.g.pad_left, cc.g.pad_bottom, cc.g.pad_right}) + " " +
                             act_name(act.kind) + (specials ? " nonfinite" : "");
    if (!pad_ok && fam.failure.empty()) fam.failure = what + ": wrote past K";
    for (size_t i = 0; i < want.size(); ++i)
      if (std::isfinite(want[i]) && std::isfinite(got[i]))
        worst = std::max(worst, std::fabs(got[i] - want[i]) / std::max(std::fabs(want[i]), floor[i]));
    fam.check(what, got.data(), want.data(), got.size(), kRtol, floor.data());
  };
  size_t index = 0;
  const size_t channels[] = {1, 3, 8, 17, 33}, outputs[] = {1, 5, 16, 17, 40};
  for (size_t h = 1; h <= 13; ++h)
    for (size_t w = 1; w <= 13; ++w) {
      ++index;
      if (g_quick && index % 11 != 0) continue;  // 15 of the 169 shapes, each side still padded 0, 1 and 2
      ConvGeometry g = geom(3, 3, 1, 1, 0, 0, 0, 0);
      const size_t pads = index * 31 % 81;  // every (top, left, bottom, right) in 0..2 over the cases
      g.pad_top = pads % 3;
      g.pad_left = pads / 3 % 3;
      g.pad_bottom = pads / 9 % 3;
      g.pad_right = pads / 27;
      if (h + g.pad_top + g.pad_bottom < 3) g.pad_bottom = 3 - h - g.pad_top;  // no output at all otherwise
      if (w + g.pad_left + g.pad_right < 3) g.pad_right = 3 - w - g.pad_left;
      const ConvCase cc{2, h, w, channels[index % 5], outputs[index / 5 % 5], g};
      run_case(cc, kActs[index % kActCount], 1 + index % 2, 0, 0, false);
    }
  // Several tile blocks (the plan's own and forced small ones) and panel groups; transformed
  // weights past kWeightsInL2Bytes (operators_winograd.cc: 2 threads then share each block phase by
  // phase); pixel strides; a one-image batch.
  const ConvCase big[] = {
      {2, 23, 21, 70, 67, geom(3, 3, 1, 1, 1, 1, 1, 1)},
      {1, 11, 9, 100, 90, geom(3, 3, 1, 1, 1, 0, 1, 2)},  // U: 1.3 MB
      {1, 30, 17, 9, 130, geom(3, 3, 1, 1, 2, 0, 1, 2)},
      {3, 9, 10, 129, 33, geom(3, 3, 1, 1, 0, 2, 2, 1)},
  };
  for (size_t i = 0; i < 4; ++i) {
    if (g_quick && i % 2 == 0) continue;  // the 1.3 MB U case and one more
    run_case(big[i], kActs[(i * 3 + 1) % kActCount], 2, 0, 0, false);
    run_case(big[i], kActs[(i * 3 + 2) % kActCount], 1 + i % 2, 3 + i, 5, false);
    run_case(big[i], kActs[(i * 3) % kActCount], 2, 1, 0, false, 5);  // blocks of 5 tiles (rounded up to MR)
  }
  // NaN and infinities, through every activation.
  for (size_t a = 0; a < kActCount; ++a) {
    const ConvCase cc{2, 9, 7, 5 + a, 17, geom(3, 3, 1, 1, a % 3, 1, (a + 1) % 3, 2)};
    run_case(cc, kActs[a], 1 + a % 2, 0, 0, true);
  }
  // The weight transform alone (winograd_weights, made on every call by the clustered plan below):
  // n = 1..40 filters (vector tails), against G g G^T in float64; the floor is the sum of the
  // terms' magnitudes (the factored forms cancel them in another order).
  const double kG64[6][3] = {{1.0 / 4, 0, 0},         {-1.0 / 6, -1.0 / 6, -1.0 / 6}, {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                             {1.0 / 24, 1.0 / 12, 1.0 / 6}, {1.0 / 24, -1.0 / 12, 1.0 / 6}, {0, 0, 1}};
  for (size_t n = 1; n <= 40; n += g_quick ? 13 : 1) {
    const size_t g_stride = n + 3, u_stride = n + 5;
    auto g = random_vec(9 * g_stride);
    std::vector<float> u(36 * u_stride, 7.0f), got(36 * n);
    std::vector<double> want(36 * n), floor(36 * n);
    t.winograd_weights(g.data(), g_stride, n, u.data(), u_stride);
    for (size_t i = 0; i < n; ++i)
      for (size_t r = 0; r < 6; ++r)
        for (size_t c = 0; c < 6; ++c) {
          double s = 0.0, magnitude = 0.0;
          for (size_t y = 0; y < 3; ++y)
            for (size_t x = 0; x < 3; ++x) {
              const double term = kG64[r][y] * g[(3 * y + x) * g_stride + i] * kG64[c][x];
              s += term;
              magnitude += std::fabs(term);
            }
          want[(r * 6 + c) * n + i] = s;
          floor[(r * 6 + c) * n + i] = magnitude;
          got[(r * 6 + c) * n + i] = u[(r * 6 + c) * u_stride + i];
        }
    fam.check("winograd_weights n=" + std::to_string(n), got.data(), want.data(), got.size(), 1e-5, floor.data());
  }
  // ClusteredConvPlan's Winograd (operators_winograd.cc): 4-bit codes with per-row and per-layer
  // codebooks, each panel decoded and transformed on the call, input channels in blocks of 64
  // (C = 70, 130), panel tails (K = 40, 33, 17), batch 2, 1 and 2 threads, NaN / inf inputs. Its
  // weights are codebook[idx], so the naive reference and the tolerance above hold.
  const ConvCase clustered_cases[] = {
      {1, 16, 18, 20, 40, geom(3, 3, 1, 1, 1, 1, 1, 1)},
      {2, 9, 15, 70, 33, geom(3, 3, 1, 1, 0, 1, 2, 1)},
      {1, 17, 16, 130, 17, geom(3, 3, 1, 1, 1, 1, 1, 1)},
  };
  for (size_t i = 0; i < 3; ++i) {
    if (g_quick && i == 2) continue;  // Bochs: the C = 130 case costs more than the others together
    const ConvCase& cc = clustered_cases[i];
    const size_t kdim = 9 * cc.c, entries = 16;
    const bool per_row = i % 2 == 0;
    std::vector<uint32_t> idx(cc.oc * kdim);
    for (auto& v : idx) v = static_cast<uint32_t>(rng() % entries);
    auto codebook = random_vec((per_row ? cc.oc : 1) * entries), bias = random_vec(cc.oc);
    std::vector<float> w(cc.oc * kdim);
    for (size_t o = 0; o < cc.oc; ++o)
      for (size_t j = 0; j < kdim; ++j) w[o * kdim + j] = codebook[(per_row ? o * entries : 0) + idx[o * kdim + j]];
    const auto stream = pack_bits_lsb_first(idx, 4);
    ClusteredWeights cw = pack_clustered(stream.data(), 4, cc.oc, kdim, codebook.data(), per_row, bias.data(), &t);
    ClusteredConvPlan plan(cc.n, cc.h, cc.w, cc.c, cc.g, cw);
    const std::string what = "clustered winograd " + dims({cc.n, cc.h, cc.w, cc.c, cc.oc});
    if (!plan.is_winograd()) {
      if (fam.failure.empty()) fam.failure = what + ": the plan did not choose Winograd";
      continue;
    }
    for (bool specials : {false, true}) {
      const Activation act = kActs[(i * 2 + specials) % kActCount];
      auto x = random_vec(cc.n * cc.h * cc.w * cc.c);
      if (specials) sprinkle(x, 3, 29);
      const size_t oh = plan.out_h(), ow = plan.out_w();
      std::vector<double> want, floor;
      naive_conv(cc, x.data(), w.data(), bias.data(), false, act, oh, ow, want, floor);
      std::vector<float> y(cc.n * oh * ow * cc.oc);
      plan.run(x.data(), y.data(), act, 1 + (i + specials) % 2);
      fam.check(what + " " + act_name(act.kind) + (specials ? " nonfinite" : ""), y.data(), want.data(), y.size(),
                kRtol, floor.data());
    }
  }
  std::printf("INFO f32_winograd %s largest error %.2e of max(|want|, floor) (tolerance %.0e)\n", t.name, worst, kRtol);
  report(fam);
}

// ---- sparse 1x1 (f32_spmm) --------------------------------------------------------------------
// sparse_conv1x1 (operators_sparse.h: the level's spmm kernels, blocks of NB rows, the non-finite
// scan and the dense rule) against a float64 dense product W @ X of the same weights (fp32, fp16
// rounded, or looked up in the codebook), zeros included. What is guaranteed: every level sums
// each output in the same order (bias, then the stored channels ascending); the SIMD kernels fuse
// each multiply-add and the scalar ones round the product and the sum apart, so they agree to fp32
// rounding, not bit for bit. Each output is checked against the float64 value within the
// recursive-summation bound (n + 1) u sum(|bias| + |w x|) (u = 2^-24, n terms; Higham 2002 Thm 4.4),
// times 1.5 for the steepest activation, plus 1e-5 relative for the vector activations' own error.
// Non-finite inputs (NaN, +inf, -inf sprinkled over the images) must give exactly the dense
// product's NaN / inf. Cases: K and C across block and vector sizes, K % NB != 0, pixel counts
// 1..130 (tails of every tile), 0% to 100% sparsity, every NB of the level and the packer's own
// choice, the three value kinds (per-layer and per-channel codebooks, with and without a 0.0
// entry), CSR entries that are explicit zeros, batch 1-3, 1 and 2 threads (and the split of the
// output blocks between threads on small images).
void test_spmm(const KernelTable& t) {
  reseed();
  Family fam{"f32_spmm", t.name};
  const std::vector<size_t> offered = sparse_blocks(t);
  const size_t ks[] = {1, 5, 16, 19, 40}, cs[] = {1, 3, 17, 40, 67};
  const size_t hws[] = {1, 3, 7, 16, 31, 33, 49, 64, 65, 97, 130};
  const double densities[] = {1.0, 0.5, 0.1, 0.01, 0.0};
  const Activation acts[] = {act_none(), act_relu(), act_clip(-0.25f, 0.5f), act_hardswish(), act_sigmoid(),
                             act_leaky_relu(0.1f)};
  auto run_case = [&](size_t kk, size_t cc, size_t hw, double density, size_t block, SpmmValues kind, bool per_row,
                      const Activation& act, size_t n, size_t threads, bool specials) {
    std::uniform_real_distribution<float> u01(0.0f, 1.0f);
    // Codebook: T entries (0.0 first in half of the cases), per layer or per output channel.
    const size_t tsize = 1 + rng() % 20;
    const size_t groups = per_row ? kk : 1;
    auto book = random_vec(groups * tsize);
    const bool book_zero = rng() % 2 == 0;
    if (book_zero)
      for (size_t g = 0; g < groups; ++g) book[g * tsize] = 0.0f;
    std::vector<int64_t> row_ptr{0};
    std::vector<int32_t> cols;
    std::vector<float> vf;
    std::vector<uint16_t> vh;
    std::vector<uint8_t> vi;
    std::vector<float> dense(kk * cc, 0.0f);  // the weights as the kernels see them
    for (size_t r = 0; r < kk; ++r) {
      for (size_t ch = 0; ch < cc; ++ch) {
        const bool keep = u01(rng) < density, filler = !keep && rng() % 16 == 0;  // CSR zeros: dropped
        if (!keep && !filler) continue;
        cols.push_back(static_cast<int32_t>(ch));
        float v = keep ? random_vec(1)[0] : 0.0f;
        if (kind == SpmmValues::F16) {
          vh.push_back(fp32_to_fp16(v));
          v = fp16_to_fp32(vh.back());
        } else if (kind == SpmmValues::Codebook) {
          uint8_t idx = static_cast<uint8_t>(rng() % tsize);
          if (filler) {
            if (!book_zero) { cols.pop_back(); continue; }
            idx = 0;
          }
          vi.push_back(idx);
          v = book[(per_row ? r : 0) * tsize + idx];
        } else {
          vf.push_back(v);
        }
        dense[r * cc + ch] = v;
      }
      row_ptr.push_back(static_cast<int64_t>(cols.size()));
    }
    auto bias = random_vec(kk);
    auto x = random_vec(n * cc * hw);
    if (specials) sprinkle(x, rng() % 7, 5 + rng() % 23);
    const SparseConv1x1Weights w = pack_sparse_conv1x1(
        row_ptr.data(), cols.data(), kk, cc, kind, kind == SpmmValues::F32 ? vf.data() : nullptr,
        kind == SpmmValues::F16 ? vh.data() : nullptr, kind == SpmmValues::Codebook ? vi.data() : nullptr,
        kind == SpmmValues::Codebook ? book.data() : nullptr, groups, tsize, bias.data(), block, &t);
    std::vector<float> y(n * kk * hw, 12345.0f);
    sparse_conv1x1(x.data(), n, hw, w, y.data(), act, threads);
    std::vector<double> want(y.size()), floor(y.size());
    for (size_t b = 0; b < n; ++b)
      for (size_t r = 0; r < kk; ++r)
        for (size_t p = 0; p < hw; ++p) {
          double acc = bias[r], mag = std::fabs(bias[r]);
          size_t terms = 1;
          for (size_t ch = 0; ch < cc; ++ch) {
            const double term = static_cast<double>(dense[r * cc + ch]) * x[(b * cc + ch) * hw + p];
            acc += term;
            if (dense[r * cc + ch] != 0.0f) ++terms;
            if (std::isfinite(term)) mag += std::fabs(term);
          }
          const size_t i = (b * kk + r) * hw + p;
          want[i] = activate_reference(static_cast<float>(acc), act);
          const double bound = 1.5 * static_cast<double>(terms + 1) * std::ldexp(1.0, -24) * mag;
          floor[i] = bound / 1e-5;  // Family::check: |err| <= 1e-5 max(|want|, floor)
        }
    const char* kinds[] = {"f32", "f16", "codebook"};
    const std::string what = std::string("spmm ") + w.kernel_name() + " " + dims({n, kk, cc, hw}) + " density " +
                             std::to_string(density) + " nb " + std::to_string(w.block) + " " +
                             kinds[static_cast<int>(kind)] + (per_row ? " per-row" : "") + " " + act_name(act.kind) +
                             " threads " + std::to_string(threads) + (specials ? " nonfinite" : "");
    if (block != 0 && w.block != block && fam.failure.empty()) fam.failure = what + ": block not as forced";
    fam.check(what, y.data(), want.data(), y.size(), 1e-5, floor.data());
  };
  size_t index = 0;
  for (size_t bi = 0; bi <= offered.size(); ++bi) {
    const size_t block = bi == 0 ? 0 : offered[bi - 1];
    for (int kind = 0; kind < 3; ++kind)
      for (size_t d = 0; d < 5; ++d)
        for (size_t s = 0; s < 4; ++s) {
          ++index;
          if (g_quick && index % 3 != 0) continue;
          const size_t kk = ks[(index + s) % 5], cc = cs[(index * 3 + d) % 5], hw = hws[(index * 7 + s) % 11];
          const size_t n = 1 + index % 3, threads = 1 + index / 2 % 2;
          run_case(kk, cc, hw, densities[d], block, static_cast<SpmmValues>(kind), index % 4 == 1,
                   acts[index % 6], n, threads, false);
        }
  }
  // Larger layers (several pixel tiles, the block split of 7 x 7 images at 2 threads), then NaN and
  // infinities through every NB and value kind.
  const size_t big[][3] = {{96, 24, 200}, {24, 144, 49}, {160, 96, 49}, {33, 70, 257}};
  for (size_t i = 0; i < 4; ++i)
    for (size_t bi = 0; bi <= offered.size(); ++bi) {
      if (g_quick && bi % 2 == 1) continue;
      const size_t block = bi == 0 ? 0 : offered[bi - 1];
      run_case(big[i][0], big[i][1], big[i][2], i % 2 ? 0.1 : 0.3, block, static_cast<SpmmValues>((i + bi) % 3),
               bi % 2 == 0, acts[(i + bi) % 6], 1 + i % 2, 2, false);
    }
  for (size_t bi = 0; bi <= offered.size(); ++bi)
    for (int kind = 0; kind < 3; ++kind)
      for (size_t d = 0; d < 5; ++d) {
        const size_t block = bi == 0 ? 0 : offered[bi - 1];
        run_case(ks[(d + bi) % 5], cs[(d + kind) % 5], hws[(d * 3 + bi + kind) % 11], densities[d], block,
                 static_cast<SpmmValues>(kind), d % 2 == 1, acts[(d + kind) % 6], 1 + d % 2, 1 + (d + kind) % 2, true);
      }
  report(fam);
}

// ---- fp16 arithmetic (tables with igemm_f16: neonfp16) ----------------------------------------
// Two checks per output. (1) Against a scalar model of the kernels' own rounding sequence
// (ukernels.h, F16IgemmUkernel): fp16 fused multiply-adds into an fp16 accumulator, widened and
// added in fp32 after every kF16KBlock products of the flattened K (kernel position major,
// channel minor, padding taps included for the indirect GEMM; in-bounds taps in (ky, kx) order for
// depthwise) and at the end, starting from the fp32 bias. The model reproduces every rounding, so
// the kernels match it to the last bit up to the activation: the same rtol 1e-5 (with the same
// floor) as the fp32 families, which only covers the vector activation polynomials.
// (2) Against the exact result of the fp16-rounded operands (fp64 accumulation), within the
// rounding-error bound of that scheme (recursive summation, Higham 2002 Thm 4.4 with u = 2^-11 for
// binary16, 2^-24 for binary32): |err| <= (gamma16(KB) + gamma32(K/KB + 2)) * sum|a*w| plus
// K * 2^-25 for fp16 subnormal products, times 1.5 for the steepest activation (hardswish).
// This one does not trust the model and bounds the drift the block size allows.

// x rounded to the nearest binary16 value, ties to even, overflow to inf; from a double so that a
// fused multiply-add a*b + c of halves, exact in double, is rounded once.
double pow2(int e) {  // 2^e for -1022 <= e <= 1023, exact
  const uint64_t bits = static_cast<uint64_t>(e + 1023) << 52;
  double d;
  std::memcpy(&d, &bits, sizeof d);
  return d;
}

double round_half(double x) {
  if (x == 0.0 || !std::isfinite(x)) return x;
  uint64_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  const int e = static_cast<int>((bits >> 52) & 0x7FF) - 1022;  // |x| in [2^(e-1), 2^e) (x is normal here)
  const int q = std::max(e - 11, -24);                           // 11 significant bits; subnormal quantum 2^-24
  const double r = std::nearbyint(x * pow2(-q)) * pow2(q);        // scaling by powers of two is exact
  return std::fabs(r) > 65504.0 ? std::copysign(HUGE_VAL, r) : r;
}

// One output of the fp16-arithmetic scheme over n products a[i] * w[i] (operands already halves).
struct F16Dot {
  double h = 0.0;  // the fp16 accumulator (always a binary16 value)
  float acc;       // fp32 accumulator
  size_t pending = 0;
  explicit F16Dot(float bias) : acc(bias) {}
  void add(double a, double w) {
    h = round_half(a * w + h);
    if (++pending == kF16KBlock) flush();
  }
  void flush() {
    acc += static_cast<float>(h);
    h = 0.0;
    pending = 0;
  }
  float result() {
    if (pending != 0) flush();
    return acc;
  }
};

// Checks got[i] against the model (want) and the bound around the exact value.
void check_f16(Family& fam, const std::string& what, const std::vector<float>& got, const std::vector<double>& model,
               const std::vector<double>& exact, const std::vector<double>& mag, size_t k) {
  const double u16 = std::ldexp(1.0, -11), u32 = std::ldexp(1.0, -24);
  const double kb = static_cast<double>(kF16KBlock), blocks = static_cast<double>(k) / kb + 2.0;
  const double g16 = kb * u16 / (1.0 - kb * u16), g32 = blocks * u32 / (1.0 - blocks * u32);
  std::vector<double> floor(got.size()), bound(got.size());
  for (size_t i = 0; i < got.size(); ++i) {
    floor[i] = mag[i] / std::sqrt(static_cast<double>(k)) + 1e-3;
    bound[i] = 1.5 * ((g16 + g32) * mag[i] + static_cast<double>(k) * std::ldexp(1.0, -25)) +
               1e-5 * (std::fabs(exact[i]) + floor[i]);
  }
  if (!fam.check(what + " vs model", got.data(), model.data(), got.size(), 1e-5, floor.data())) return;
  ++fam.cases;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(std::fabs(got[i] - exact[i]) <= bound[i])) {
      if (fam.failure.empty()) {
        char buf[512];
        std::snprintf(buf, sizeof buf, "%s: element %zu got %.9g exact %.9g beyond the fp16-block bound %.3g",
                      what.c_str(), i, got[i], exact[i], bound[i]);
        fam.failure = buf;
      }
      return;
    }
  }
}

std::vector<float> halves_of(const std::vector<float>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = round_fp16(v[i]);
  return out;
}

// Operand scales: typical, tiny (products ~1e-6 to 1e-5, in or near the fp16 subnormal range) and
// large (products up to ~1e3: block sums well inside fp16 range, K sums beyond it).
const float kF16Scales[][2] = {{1.0f, 1.0f}, {1e-2f, 1e-3f}, {40.0f, 25.0f}};

void test_f16_gemm(const KernelTable& t) {
  reseed();
  Family fam{"f16_gemm", t.name};
  // m: GEMV, a partial tile, one tile, two, many, two row blocks; k = 1300 with m > 4 is cut into
  // K blocks (multiples of kF16KBlock).
  const size_t ms[] = {1, 3, 4, 5, 17, 66};
  const size_t ns[] = {1, 15, 16, 17, 33};
  const size_t ks[] = {1, 3, 8, 15, 16, 17, 33, 300, 1300};
  size_t index = 0;
  for (size_t m : ms)
    for (size_t n : ns)
      for (size_t k : ks) {
        ++index;
        if (m * n * k > 100000 && index % 4 != 0) continue;  // big ones: a quarter of them (qemu time)
        const Activation act = kActs[index % kActCount];
        const bool kn = index % 5 == 0;
        const size_t threads = 1 + index % 2;
        const float* scale = kF16Scales[index % 3];
        auto a = random_vec(m * k, -scale[0], scale[0]), w = random_vec(n * k, -scale[1], scale[1]),
             bias = random_vec(n);
        std::vector<float> wk(n * k);
        for (size_t i = 0; i < n; ++i)
          for (size_t j = 0; j < k; ++j) wk[j * n + i] = w[i * k + j];
        auto packed = pack_gemm_weights(kn ? wk.data() : w.data(), n, k, kn ? WeightLayout::KN : WeightLayout::NK,
                                        bias.data(), WeightType::F16, &t, /*f16_arith=*/true);
        const std::string what = "f16 gemm " + dims({m, n, k}) + " " + act_name(act.kind);
        if (!packed.f16_arith || packed.nr != t.f16_gemm_nr) {
          if (fam.failure.empty()) fam.failure = what + ": not packed for the fp16-arithmetic kernel";
          continue;
        }
        const size_t ldc = n + 3;
        std::vector<float> c(m * ldc, 7.0f);
        gemm(a.data(), m, k, packed, c.data(), ldc, act, threads);
        const auto ah = halves_of(a), wh = halves_of(w);
        std::vector<double> model(m * n), exact(m * n), mag(m * n);
        std::vector<float> got(m * n);
        for (size_t i = 0; i < m; ++i)
          for (size_t j = 0; j < n; ++j) {
            F16Dot dot(bias[j]);
            double s = bias[j], sm = std::fabs(bias[j]);
            for (size_t kk = 0; kk < k; ++kk) {
              dot.add(ah[i * k + kk], wh[j * k + kk]);
              s += static_cast<double>(ah[i * k + kk]) * wh[j * k + kk];
              sm += std::fabs(static_cast<double>(ah[i * k + kk]) * wh[j * k + kk]);
            }
            model[i * n + j] = activate_reference(dot.result(), act);
            exact[i * n + j] = activate_reference(static_cast<float>(s), act);
            mag[i * n + j] = sm;
            got[i * n + j] = c[i * ldc + j];
          }
        bool pad_ok = true;
        for (size_t i = 0; i < m; ++i)
          for (size_t j = n; j < ldc; ++j) pad_ok &= c[i * ldc + j] == 7.0f;
        if (!pad_ok && fam.failure.empty()) fam.failure = what + ": wrote past N";
        check_f16(fam, what, got, model, exact, mag, k);
      }
  report(fam);
}

void test_f16_conv(const KernelTable& t) {
  reseed();
  Family fam{"f16_conv", t.name};
  const ConvCase cases[] = {
      {1, 5, 7, 3, 5, geom(1, 1, 1, 1, 0, 0, 0, 0)},     // 1x1 stride 1: the GEMM path
      {2, 6, 5, 17, 33, geom(1, 1, 2, 1, 0, 0, 0, 0)},   // 1x1 stride 2: indirect
      {1, 7, 9, 5, 17, geom(3, 3, 1, 1, 1, 1, 1, 1)},    // blocks span kernel positions
      {2, 9, 8, 3, 16, geom(3, 3, 2, 1, 1, 1, 1, 1)},
      {1, 11, 10, 1, 1, geom(5, 5, 1, 2, 4, 4, 4, 4)},   // dilation 2, one channel
      {1, 13, 13, 3, 24, geom(7, 7, 2, 1, 3, 3, 3, 3)},  // stem-like
      {1, 6, 7, 17, 5, geom(3, 2, 1, 1, 0, 1, 2, 0)},    // asymmetric kernel and padding
      {1, 4, 4, 65, 65, geom(3, 3, 1, 1, 1, 1, 1, 1)},
      {1, 5, 5, 40, 19, geom(3, 3, 1, 1, 1, 1, 1, 1)},   // 16-aligned blocks inside a position
      {1, 9, 8, 70, 18, geom(1, 1, 1, 1, 0, 0, 0, 0)},   // 1x1 GEMM with several row tiles
  };
  size_t index = 0;
  for (const ConvCase& cc : cases) {
    ++index;
    const Activation act = kActs[index % kActCount];
    const float* scale = kF16Scales[index % 3];
    const size_t kdim = cc.g.kh * cc.g.kw * cc.c;
    auto x = random_vec(cc.n * cc.h * cc.w * cc.c, -scale[0], scale[0]);
    auto w = random_vec(cc.oc * kdim, -scale[1], scale[1]), bias = random_vec(cc.oc);
    auto packed = pack_gemm_weights(w.data(), cc.oc, kdim, WeightLayout::NK, bias.data(), WeightType::F16, &t, true);
    ConvPlan plan(cc.n, cc.h, cc.w, cc.c, cc.g, packed);
    const size_t oh = plan.out_h(), ow = plan.out_w(), pixels = cc.n * oh * ow;
    const std::string what = "f16 conv " + dims({cc.n, cc.h, cc.w, cc.c, cc.oc, cc.g.kh, cc.g.kw, cc.g.stride_h});
    // Runs: the input, a second buffer (negated) and the first again at a wider pixel stride.
    for (int run = 0; run < 3; ++run) {
      std::vector<float> xr = x;
      if (run == 1)
        for (auto& v : xr) v = -v;
      const size_t in_stride = run == 2 ? cc.c + 3 : cc.c;
      std::vector<float> xs(cc.n * cc.h * cc.w * in_stride, 1e30f);  // padding lanes must not be read
      for (size_t p = 0; p < cc.n * cc.h * cc.w; ++p)
        for (size_t ci = 0; ci < cc.c; ++ci) xs[p * in_stride + ci] = xr[p * cc.c + ci];
      std::vector<float> y(pixels * cc.oc);
      plan.run(xs.data(), y.data(), act, 1 + (index + run) % 2, in_stride);
      const auto xh = halves_of(xr), wh = halves_of(w);
      std::vector<double> model(y.size()), exact(y.size()), mag(y.size());
      const ConvGeometry& g = cc.g;
      for (size_t b = 0; b < cc.n; ++b)
        for (size_t oy = 0; oy < oh; ++oy)
          for (size_t ox = 0; ox < ow; ++ox)
            for (size_t o = 0; o < cc.oc; ++o) {
              F16Dot dot(bias[o]);
              double s = bias[o], sm = std::fabs(bias[o]);
              for (size_t ky = 0; ky < g.kh; ++ky)
                for (size_t kx = 0; kx < g.kw; ++kx) {
                  const long iy = static_cast<long>(oy * g.stride_h + ky * g.dil_h) - static_cast<long>(g.pad_top);
                  const long ix = static_cast<long>(ox * g.stride_w + kx * g.dil_w) - static_cast<long>(g.pad_left);
                  const bool inside = iy >= 0 && ix >= 0 && iy < static_cast<long>(cc.h) && ix < static_cast<long>(cc.w);
                  for (size_t ci = 0; ci < cc.c; ++ci) {
                    const double wv = wh[o * kdim + (ky * g.kw + kx) * cc.c + ci];
                    const double xv = inside ? xh[((b * cc.h + iy) * cc.w + ix) * cc.c + ci] : 0.0;
                    dot.add(xv, wv);  // padding taps count in the block too (they add 0)
                    s += xv * wv;
                    sm += std::fabs(xv * wv);
                  }
                }
              const size_t idx = ((b * oh + oy) * ow + ox) * cc.oc + o;
              model[idx] = activate_reference(dot.result(), act);
              exact[idx] = activate_reference(static_cast<float>(s), act);
              mag[idx] = sm;
            }
      check_f16(fam, what + (run == 1 ? " (new input)" : run == 2 ? " (pixel stride)" : ""), y, model, exact, mag, kdim);
    }
  }
  report(fam);
}

void test_f16_depthwise(const KernelTable& t) {
  reseed();
  Family fam{"f16_depthwise", t.name};
  struct Case { size_t n, h, w, c, mult; ConvGeometry g; };
  const Case cases[] = {
      {1, 7, 8, 1, 1, geom(3, 3, 1, 1, 1, 1, 1, 1)},   {2, 9, 7, 3, 1, geom(3, 3, 2, 1, 1, 1, 1, 1)},
      {1, 8, 8, 5, 1, geom(3, 3, 1, 2, 2, 2, 2, 2)},   {1, 10, 9, 17, 1, geom(5, 5, 2, 1, 2, 2, 2, 2)},
      {1, 6, 6, 40, 1, geom(3, 3, 1, 1, 0, 0, 1, 1)},  {1, 5, 6, 67, 1, geom(3, 3, 2, 1, 1, 1, 0, 0)},
      {1, 9, 9, 16, 1, geom(7, 7, 1, 1, 3, 3, 3, 3)},  {1, 6, 6, 24, 1, geom(5, 5, 1, 1, 2, 2, 2, 2)},
      {1, 6, 5, 3, 2, geom(3, 3, 1, 1, 1, 1, 1, 1)},   {1, 5, 5, 2, 9, geom(3, 3, 2, 1, 1, 1, 1, 1)},
      {1, 4, 4, 5, 17, geom(1, 1, 1, 1, 0, 0, 0, 0)},  {1, 7, 7, 3, 8, geom(5, 5, 1, 1, 2, 2, 2, 2)},
  };
  size_t index = 0;
  for (const Case& cs : cases) {
    for (size_t ai = 0; ai < kActCount; ai += 3) {
      ++index;
      const Activation act = kActs[(ai + index) % kActCount];
      const float* scale = kF16Scales[index % 3];
      const size_t oc = cs.c * cs.mult, taps = cs.g.kh * cs.g.kw;
      auto x = random_vec(cs.n * cs.h * cs.w * cs.c, -scale[0], scale[0]);
      auto w = random_vec(taps * oc, -scale[1], scale[1]), b = random_vec(oc);
      const size_t oh = conv_output_size(cs.h, cs.g.kh, cs.g.stride_h, cs.g.dil_h, cs.g.pad_top, cs.g.pad_bottom);
      const size_t ow = conv_output_size(cs.w, cs.g.kw, cs.g.stride_w, cs.g.dil_w, cs.g.pad_left, cs.g.pad_right);
      std::vector<float> got(cs.n * oh * ow * oc);
      const float* bias = index % 4 == 0 ? nullptr : b.data();
      depthwise_conv(x.data(), cs.n, cs.h, cs.w, cs.c, cs.mult, cs.g, w.data(), bias, got.data(), act, 1 + index % 2, &t,
                     /*f16_arith=*/true);
      const auto xh = halves_of(x), wh = halves_of(w);
      std::vector<double> model(got.size()), exact(got.size()), mag(got.size());
      const ConvGeometry& g = cs.g;
      for (size_t bi = 0; bi < cs.n; ++bi)
        for (size_t oy = 0; oy < oh; ++oy)
          for (size_t ox = 0; ox < ow; ++ox)
            for (size_t o = 0; o < oc; ++o) {
              const float b0 = bias != nullptr ? bias[o] : 0.0f;
              F16Dot dot(b0);
              double s = b0, sm = std::fabs(b0);
              for (size_t ky = 0; ky < g.kh; ++ky)
                for (size_t kx = 0; kx < g.kw; ++kx) {
                  const long iy = static_cast<long>(oy * g.stride_h + ky * g.dil_h) - static_cast<long>(g.pad_top);
                  const long ix = static_cast<long>(ox * g.stride_w + kx * g.dil_w) - static_cast<long>(g.pad_left);
                  if (iy < 0 || ix < 0 || iy >= static_cast<long>(cs.h) || ix >= static_cast<long>(cs.w)) continue;
                  const double xv = xh[((bi * cs.h + iy) * cs.w + ix) * cs.c + o / cs.mult];
                  const double wv = wh[(ky * g.kw + kx) * oc + o];
                  dot.add(xv, wv);
                  s += xv * wv;
                  sm += std::fabs(xv * wv);
                }
              const size_t idx = ((bi * oh + oy) * ow + ox) * oc + o;
              model[idx] = activate_reference(dot.result(), act);
              exact[idx] = activate_reference(static_cast<float>(s), act);
              mag[idx] = sm;
            }
      check_f16(fam, "f16 depthwise " + dims({cs.n, cs.h, cs.w, cs.c, cs.mult, cs.g.kh, cs.g.stride_h}) + " " +
                         act_name(act.kind),
                got, model, exact, mag, taps);
    }
  }
  report(fam);
}

// Not a check: the drift figure of the fp16 blocks on a long K, printed for the record. 16 rows x
// 64 columns, K = 4608 (a 3x3x512 convolution), post-ReLU N(0,1) activations and He-scaled
// N(0, 2/K) weights, against the exact result of the fp16 operands; "reference rounding" is what
// rounding that exact result to half (the reference fp16 model's output) costs.
// The fp16-arithmetic kernels (neonfp16) with NaN, +inf and -inf: they convert A / the input to
// half (which keeps NaN and inf) and clamp with vmaxq/vminq (which propagate NaN), so the
// nonfinite outputs must be exactly the fp32 references'; finite ones within fp16 accuracy.
void test_f16_nonfinite(const KernelTable& t) {
  reseed();
  Family fam{"f16_nonfinite", t.name};
  for (size_t m : {1, 5})
    for (const Activation& act : kActs) {
      const size_t n = 17, k = 40;
      auto a = random_vec(m * k), w = random_vec(n * k), bias = random_vec(n);
      sprinkle(a, 3, 29);
      auto packed = pack_gemm_weights(w.data(), n, k, WeightLayout::NK, bias.data(), WeightType::F16, &t,
                                      /*f16_arith=*/true);
      std::vector<float> c(m * n);
      gemm(a.data(), m, k, packed, c.data(), n, act, 1);
      const auto ah = halves_of(a), wh = halves_of(w);
      std::vector<double> want(m * n), floor(m * n);
      for (size_t i = 0; i < m; ++i)
        for (size_t j = 0; j < n; ++j) {
          double s = bias[j], mag = std::fabs(bias[j]);
          for (size_t kk = 0; kk < k; ++kk) {
            const double p = static_cast<double>(ah[i * k + kk]) * wh[j * k + kk];
            s += p;
            mag += std::isfinite(p) ? std::fabs(p) : 0.0;
          }
          want[i * n + j] = activate_reference(static_cast<float>(s), act);
          floor[i * n + j] = mag;
        }
      fam.check(std::string("f16 nonfinite gemm m=") + std::to_string(m) + " " + act_name(act.kind), c.data(),
                want.data(), want.size(), 1e-2, floor.data());
    }
  for (const Activation& act : kActs) {
    const size_t h = 6, wd = 7, ch = 16;
    auto x = random_vec(h * wd * ch), w = random_vec(9 * ch), b = random_vec(ch);
    sprinkle(x, 5, 53);
    std::vector<float> got(h * wd * ch), want(got.size());
    const ConvGeometry g = geom(3, 3, 1, 1, 1, 1, 1, 1);
    depthwise_conv(x.data(), 1, h, wd, ch, 1, g, w.data(), b.data(), got.data(), act, 1, &t, /*f16_arith=*/true);
    const auto xh = halves_of(x), whf = halves_of(w);
    depthwise_conv(xh.data(), 1, h, wd, ch, 1, g, whf.data(), b.data(), want.data(), act, 1, &scalar_table());
    fam.check(std::string("f16 nonfinite depthwise ") + act_name(act.kind), got.data(), want.data(), got.size(), 1e-2,
              1.0);
  }
  report(fam);
}

void measure_f16_gemm(const KernelTable& t) {
  reseed();
  const size_t m = 16, n = 64, k = 4608;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> a(m * k), w(n * k);
  for (auto& v : a) v = std::max(0.0f, normal(rng));
  for (auto& v : w) v = normal(rng) * std::sqrt(2.0f / static_cast<float>(k));
  auto packed = pack_gemm_weights(w.data(), n, k, WeightLayout::NK, nullptr, WeightType::F16, &t, true);
  std::vector<float> c(m * n);
  gemm(a.data(), m, k, packed, c.data(), n, act_none(), 2);
  const auto ah = halves_of(a), wh = halves_of(w);
  double sq = 0, max_err = 0, sq_err = 0, max_ref = 0;
  for (size_t i = 0; i < m; ++i)
    for (size_t j = 0; j < n; ++j) {
      double s = 0;
      for (size_t kk = 0; kk < k; ++kk) s += static_cast<double>(ah[i * k + kk]) * wh[j * k + kk];
      const double err = std::fabs(c[i * n + j] - s);
      sq += s * s;
      sq_err += err * err;
      max_err = std::max(max_err, err);
      max_ref = std::max(max_ref, std::fabs(round_half(s) - s));
    }
  const double rms = std::sqrt(sq / static_cast<double>(m * n));
  std::printf("INFO f16_gemm %s K=%zu error/rms(output): max %.2e, rms %.2e (reference rounding: max %.2e)\n", t.name,
              k, max_err / rms, std::sqrt(sq_err / static_cast<double>(m * n)) / rms, max_ref / rms);
}

// ---- qu8 (int8) -------------------------------------------------------------------------------
// Every qu8 family against an independent naive reference: the formulas of the int8 spec written
// out again here (int64 arithmetic, not requantization.h), so the scalar kernels are checked too,
// and every level must match them bit for bit (Family::check_bytes: no tolerance).
namespace qu8ref {

int32_t srdhm(int32_t a, int32_t b) {
  if (a == INT32_MIN && b == INT32_MIN) return INT32_MAX;
  const int64_t ab = static_cast<int64_t>(a) * b;
  const int64_t nudge = ab >= 0 ? (1 << 30) : (1 - (1 << 30));
  return static_cast<int32_t>((ab + nudge) / (1LL << 31));
}

int32_t rdbpot(int32_t x, int e) {
  const int32_t mask = static_cast<int32_t>((1LL << e) - 1), rem = x & mask;
  const int32_t threshold = (mask >> 1) + (x < 0 ? 1 : 0);
  return (x >> e) + (rem > threshold ? 1 : 0);
}

int32_t requantize(int64_t acc, int32_t mult, int32_t shift) {
  const int left = shift > 0 ? shift : 0, right = shift > 0 ? 0 : -shift;
  const int64_t shifted = acc * (int64_t{1} << left);  // acc may be the exact (int64) sum of Add
  const int32_t x = static_cast<int32_t>(std::clamp<int64_t>(shifted, INT32_MIN, INT32_MAX));
  return rdbpot(srdhm(x, mult), right);
}

uint8_t output(int64_t acc, int32_t mult, int32_t shift, int32_t zp, int qmin, int qmax) {
  return static_cast<uint8_t>(std::clamp<int64_t>(static_cast<int64_t>(requantize(acc, mult, shift)) + zp, qmin, qmax));
}

// int32 accumulation wraps modulo 2^32 (ukernels.h): the reference sums in int64 and wraps once.
int32_t wrap(int64_t v) { return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(v))); }

}  // namespace qu8ref

std::vector<uint8_t> random_u8(size_t n) {
  std::vector<uint8_t> v(n);
  for (auto& x : v) x = static_cast<uint8_t>(rng());
  return v;
}

std::vector<int8_t> random_i8(size_t n) {
  std::vector<int8_t> v(n);
  for (auto& x : v) x = static_cast<int8_t>(rng());
  return v;
}

// Weights the narrow GEMM takes (ukernels.h, qu8_igemm_narrow) for n rows of K = kernel positions
// x c channels: 7-bit ones, [-64, 64], and every 13th pair (channels 2b, 2b + 1 of a position) at an
// edge that still fits (positive or negative parts summing to exactly 128, or 127 against -128).
std::vector<int8_t> narrow_i8(size_t n, size_t k, size_t c) {
  static const int8_t edges[][2] = {{127, 1}, {64, 64}, {-128, 0}, {-64, -64}, {127, -128}, {-128, 127}, {0, 127}};
  std::vector<int8_t> v(n * k);
  for (auto& x : v) x = static_cast<int8_t>(static_cast<int>(rng() % 129) - 64);
  size_t pair = 0;
  for (size_t i = 0; i < n * k; ++i) {
    const size_t ch = i % k % c;
    if (ch % 2 != 0 || ch + 1 >= c || pair++ % 13 != 0) continue;
    v[i] = edges[pair / 13 % 7][0];
    v[i + 1] = edges[pair / 13 % 7][1];
  }
  return v;
}

int32_t random_multiplier() { return static_cast<int32_t>((1u << 30) + rng() % (1u << 30)); }

// A shift that maps sums of typical magnitude `scale` to ~ +-60 (outputs that are neither all
// clamped nor all zero): multiplier/2^31 is in [0.5, 1), so 2^shift ~ 64 / scale.
int32_t shift_for(double scale) {
  const int s = static_cast<int>(std::lround(std::log2(64.0 / std::max(scale, 1.0))));
  return std::clamp(s, -31, 30);
}

// Extreme multipliers and shifts for a fraction of the channels.
const int32_t kQu8Multipliers[] = {0, 1, -1, INT32_MIN, INT32_MAX, 1 << 30, (1 << 30) + 1, 1518500250, -1518500250};
const int32_t kQu8Shifts[] = {-31, -30, -17, -1, 0, 1, 7, 30};

// Per-channel (multiplier, shift): realistic for sums of magnitude `scale`, every `extreme`-th one
// extreme.
void qu8_channel_scales(size_t n, double scale, size_t extreme, std::vector<int32_t>& mult, std::vector<int32_t>& shift) {
  mult.resize(n);
  shift.resize(n);
  for (size_t j = 0; j < n; ++j) {
    mult[j] = random_multiplier();
    shift[j] = shift_for(scale) + static_cast<int32_t>(rng() % 3) - 1;
    shift[j] = std::clamp(shift[j], -31, 30);
    if (extreme != 0 && j % extreme == extreme - 1) {
      mult[j] = kQu8Multipliers[rng() % (sizeof kQu8Multipliers / sizeof kQu8Multipliers[0])];
      shift[j] = kQu8Shifts[rng() % (sizeof kQu8Shifts / sizeof kQu8Shifts[0])];
    }
  }
}

// Zero points and clamps cycled through by the case index.
const uint8_t kQu8ZeroPoints[] = {0, 128, 255, 3, 77};
struct Qu8Clamp { int qmin, qmax; };
const Qu8Clamp kQu8Clamps[] = {{0, 255}, {0, 255}, {128, 255}, {10, 200}, {0, 255}, {37, 37}};

[[gnu::noinline]] bool check_bytes(Family& fam, const std::string& what, const uint8_t* got, const uint8_t* want,
                                   size_t n) {
  ++fam.cases;
  for (size_t i = 0; i < n; ++i)
    if (got[i] != want[i]) {
      if (fam.failure.empty()) {
        char buf[512];
        std::snprintf(buf, sizeof buf, "%s: byte %zu got %d want %d", what.c_str(), i, got[i], want[i]);
        fam.failure = buf;
      }
      return false;
    }
  return true;
}

// The naive convolution (groups 1, OHWI weights): padding adds (x_zp - x_zp) * w = 0.
std::vector<uint8_t> qu8_naive_conv(const ConvCase& cc, const uint8_t* x, const int8_t* w, const int32_t* bias,
                                    int x_zp, const int32_t* mult, const int32_t* shift, int y_zp, Qu8Clamp cl,
                                    size_t oh, size_t ow) {
  const ConvGeometry& g = cc.g;
  const size_t kdim = g.kh * g.kw * cc.c;
  std::vector<uint8_t> y(cc.n * oh * ow * cc.oc);
  for (size_t b = 0; b < cc.n; ++b)
    for (size_t oy = 0; oy < oh; ++oy)
      for (size_t ox = 0; ox < ow; ++ox)
        for (size_t o = 0; o < cc.oc; ++o) {
          int64_t acc = bias != nullptr ? bias[o] : 0;
          for (size_t ky = 0; ky < g.kh; ++ky)
            for (size_t kx = 0; kx < g.kw; ++kx) {
              const long iy = static_cast<long>(oy * g.stride_h + ky * g.dil_h) - static_cast<long>(g.pad_top);
              const long ix = static_cast<long>(ox * g.stride_w + kx * g.dil_w) - static_cast<long>(g.pad_left);
              if (iy < 0 || ix < 0 || iy >= static_cast<long>(cc.h) || ix >= static_cast<long>(cc.w)) continue;
              for (size_t ci = 0; ci < cc.c; ++ci)
                acc += (x[((b * cc.h + iy) * cc.w + ix) * cc.c + ci] - x_zp) * w[o * kdim + (ky * g.kw + kx) * cc.c + ci];
            }
          y[((b * oh + oy) * ow + ox) * cc.oc + o] =
              qu8ref::output(qu8ref::wrap(acc), mult[o], shift[o], y_zp, cl.qmin, cl.qmax);
        }
  return y;
}

// Requantization at the edges, through the GEMM (whose accumulator is bias + (x - x_zp) * w, so a
// bias sets it to any int32) and through the tensor rescale kernel. Every shift from -31 to 30,
// with multipliers near 0.5 and 1 and extreme ones; accumulators placed so that the rounding of
// srdhm or rdbpot meets an exact half (neighbours +-1, +-2 in other rows), INT32_MIN / MAX and
// their neighbours, and left shifts that saturate.
void test_qu8_requant(const KernelTable& t) {
  reseed();
  Family fam{"qu8_requant", t.name};
  std::vector<int32_t> bias, mult, shift;
  const int32_t base_mults[] = {1 << 30, (1 << 30) + 1, 1518500250, INT32_MAX, 1073741823 + 536870912};
  for (int32_t s = -31; s <= 30; ++s)
    for (int32_t m0 : base_mults)
      for (int rep = 0; rep < (g_quick ? 1 : 2); ++rep) {
        const int32_t m = rep == 0 ? m0 : random_multiplier();
        // Target: y = t * 2^e + 2^(e-1) after srdhm (a tie of rdbpot), t small so the output byte
        // shows it; acc ~ y * 2^31 / m (srdhm's own half sits among the neighbours).
        const int e = s < 0 ? -s : 0;
        const double tval = static_cast<double>(static_cast<int>(rng() % 200) - 100);
        double y = std::ldexp(tval, e) + (e > 0 ? std::ldexp(1.0, e - 1) : 0.5);
        if (s > 0) y = std::ldexp(y, -s);  // a left shift multiplies acc first
        const double acc = std::clamp(y * 2147483648.0 / m, -2147483648.0, 2147483647.0);
        bias.push_back(static_cast<int32_t>(std::llround(acc)));
        mult.push_back(m);
        shift.push_back(s);
      }
  const int32_t edges[] = {INT32_MIN, INT32_MIN + 1, INT32_MIN + 2, -1, 0, 1, INT32_MAX - 1, INT32_MAX, 1 << 30,
                           -(1 << 30), (1 << 30) + 1, 3, -3};
  for (int32_t acc : edges)
    for (int32_t m : kQu8Multipliers)
      for (int32_t s : kQu8Shifts) {
        bias.push_back(acc);
        mult.push_back(m);
        shift.push_back(s);
      }
  const size_t n = bias.size();
  const int deltas[] = {0, 1, -1, 2, -2, 100, -128, 127, 3};
  const size_t m_rows = sizeof deltas / sizeof deltas[0];
  for (size_t kdim : {size_t{1}, size_t{6}}) {
    const int x_zp = 128;
    auto w = random_i8(n * kdim);
    for (size_t j = 0; j < n; ++j) w[j * kdim] = 1;  // column j: acc = bias[j] + delta
    std::vector<uint8_t> a(m_rows * kdim, static_cast<uint8_t>(x_zp));
    for (size_t i = 0; i < m_rows; ++i) a[i * kdim] = static_cast<uint8_t>(x_zp + deltas[i]);
    for (const Qu8Clamp cl : {Qu8Clamp{0, 255}, Qu8Clamp{1, 254}}) {
      const int y_zp = 128;
      auto packed = pack_qu8_gemm_weights(w.data(), n, kdim, bias.data(), x_zp, mult.data(), shift.data(), y_zp,
                                          cl.qmin, cl.qmax, &t);
      std::vector<uint8_t> got(m_rows * n), want(m_rows * n);
      qu8_gemm(a.data(), m_rows, kdim, packed, got.data(), n, 2);
      for (size_t i = 0; i < m_rows; ++i)
        for (size_t j = 0; j < n; ++j)
          want[i * n + j] = qu8ref::output(qu8ref::wrap(static_cast<int64_t>(bias[j]) + deltas[i]), mult[j], shift[j],
                                           y_zp, cl.qmin, cl.qmax);
      check_bytes(fam, "requant via gemm K=" + std::to_string(kdim) + " clamp " + std::to_string(cl.qmin), got.data(),
                  want.data(), got.size());
    }
  }
  // The tensor rescale: x - x_zp in [-255, 255] through every shift and the extreme multipliers.
  size_t index = 0;
  for (int32_t s = -31; s <= 30; s += g_quick ? 3 : 1) {
    ++index;
    const size_t count = 1 + index * 7 % 70;
    const int x_zp = kQu8ZeroPoints[index % 5], y_zp = kQu8ZeroPoints[(index + 2) % 5];
    const Qu8Clamp cl = kQu8Clamps[index % 6];
    const int32_t m = index % 3 == 0 ? kQu8Multipliers[index % 9] : random_multiplier();
    auto x = random_u8(count);
    std::vector<uint8_t> got(count), want(count);
    qu8_requantize(x.data(), count, x_zp, got.data(), y_zp, m, s, cl.qmin, cl.qmax, 1 + index % 2, &t);
    for (size_t i = 0; i < count; ++i) want[i] = qu8ref::output(x[i] - x_zp, m, s, y_zp, cl.qmin, cl.qmax);
    check_bytes(fam, "requantize shift=" + std::to_string(s) + " n=" + std::to_string(count), got.data(), want.data(),
                count);
  }
  report(fam);
}

// Whether packed weights took the narrow GEMM as expected (and report its kernel name).
void expect_narrow(Family& fam, const PackedQu8Weights& packed, bool want, const std::string& what) {
  if (packed.narrow != want && fam.failure.empty())
    fam.failure = what + ": packed for " + packed.kernel_name() + (want ? ", not the narrow GEMM" : ", not qu8_igemm");
}

// The narrow GEMM's admission (ukernels.h, qu8_pairs_fit_int16) at its edges: one layer per weight
// pair, the pair in every column and kernel position (K = 2 * 3 per position, 3x3 kernels and 1x1),
// run on activations of 255 (the largest products: a saturated int16 pair shifts the accumulator
// by at least 127, which the output scale of 1/4 shows as ~32 LSB), 0 and random bytes. Pairs
// past the edge must run the exact GEMM and still match.
void test_qu8_narrow_pairs(const KernelTable& t) {
  reseed();
  Family fam{"qu8_narrow_pairs", t.name};
  struct Pair { int w0, w1; bool fits; };
  const Pair pairs[] = {{127, 1, true},     {64, 64, true},    {65, 64, false},   {127, 2, false},
                        {-128, 0, true},    {-64, -64, true},  {-65, -64, false}, {-128, -1, false},
                        {127, -128, true},  {-128, 127, true}, {1, 127, true},    {127, 127, false},
                        {-128, -128, false}, {0, 0, true},     {-1, -128, false}, {2, 126, true},   {3, 126, false}};
  for (size_t kernel : {size_t{1}, size_t{3}}) {
    ConvCase cc{1, 5, 6, 5, 19, geom(kernel, kernel, 1, 1, kernel / 2, kernel / 2, kernel / 2, kernel / 2)};
    const size_t kdim = kernel * kernel * cc.c;
    for (const Pair& pr : pairs) {
      std::vector<int8_t> w(cc.oc * kdim);
      for (size_t o = 0; o < cc.oc; ++o)
        for (size_t s = 0; s < kernel * kernel; ++s)
          for (size_t ci = 0; ci < cc.c; ++ci)  // C = 5: pairs (0, 1), (2, 3), then 4 against zero
            w[o * kdim + s * cc.c + ci] = static_cast<int8_t>(ci == 4 ? (o % 2 ? pr.w0 : 0) : ci % 2 ? pr.w1 : pr.w0);
      for (int fill : {255, 0, -1}) {
        const int x_zp = fill == 0 ? 0 : 128;
        std::vector<uint8_t> x(cc.n * cc.h * cc.w * cc.c);
        for (auto& v : x) v = fill >= 0 ? static_cast<uint8_t>(fill) : static_cast<uint8_t>(rng());
        // Bias: the centre pixel's sum with all-255 inputs cancelled, so it sits at the output zero point.
        std::vector<int32_t> bias(cc.oc), mult(cc.oc, 1 << 30), shift(cc.oc, -1);  // 1/4
        for (size_t o = 0; o < cc.oc; ++o) {
          int64_t sum = 0;
          for (size_t kk = 0; kk < kdim; ++kk) sum += w[o * kdim + kk];
          bias[o] = static_cast<int32_t>(-(255 - x_zp) * sum);
        }
        const Qu8Clamp cl{0, 255};
        auto packed = pack_qu8_gemm_weights(w.data(), cc.oc, kdim, bias.data(), x_zp, mult.data(), shift.data(), 128,
                                            0, 255, &t, kernel, kernel);
        const std::string what = "pair (" + std::to_string(pr.w0) + ", " + std::to_string(pr.w1) + ") " +
                                 std::to_string(kernel) + "x" + std::to_string(kernel) + " fill " + std::to_string(fill);
        expect_narrow(fam, packed, pr.fits && t.qu8_igemm_narrow != nullptr, what);
        Qu8ConvPlan plan(cc.n, cc.h, cc.w, cc.c, cc.g, packed);
        std::vector<uint8_t> y(cc.n * plan.out_h() * plan.out_w() * cc.oc);
        plan.run(x.data(), y.data(), 2);
        const auto want = qu8_naive_conv(cc, x.data(), w.data(), bias.data(), x_zp, mult.data(), shift.data(), 128, cl,
                                         plan.out_h(), plan.out_w());
        check_bytes(fam, what, y.data(), want.data(), y.size());
      }
    }
  }
  report(fam);
}

void test_qu8_gemm(const KernelTable& t) {
  reseed();
  Family fam{"qu8_gemm", t.name};
  const size_t ms[] = {1, 2, 3, 5, 8, 9, 17, 33};
  const size_t ns[] = {1, 3, 15, 16, 17, 33, 40};
  const size_t ks[] = {1, 3, 4, 5, 7, 8, 16, 17, 33, 100, 300};
  size_t index = 0;
  for (size_t m : ms)
    for (size_t n : ns)
      for (size_t k : ks) {
        ++index;
        if (g_quick && (index % 4 != 0 || m > 17)) continue;
        const int x_zp = kQu8ZeroPoints[index % 5], y_zp = kQu8ZeroPoints[(index / 5) % 5];
        const Qu8Clamp cl = kQu8Clamps[index % 6];
        const size_t lda = k + index % 3, ldc = n + 2;
        auto a = random_u8(m * lda);
        if (index % 3 == 0) std::fill(a.begin(), a.begin() + lda, uint8_t{255});  // the largest products
        const bool narrow = index % 2 == 0;  // weights the narrow GEMM takes (on levels that have one)
        auto w = narrow ? narrow_i8(n, k, k) : random_i8(n * k);
        std::vector<int32_t> bias(n), mult, shift;
        for (auto& b : bias) b = static_cast<int32_t>(rng() % 20001) - 10000;
        qu8_channel_scales(n, std::sqrt(static_cast<double>(k)) * 74 * 74, 7, mult, shift);
        const int32_t* bp = index % 4 == 1 ? nullptr : bias.data();
        auto packed = pack_qu8_gemm_weights(w.data(), n, k, bp, x_zp, mult.data(), shift.data(), y_zp, cl.qmin, cl.qmax, &t);
        expect_narrow(fam, packed, narrow ? t.qu8_igemm_narrow != nullptr : packed.narrow, dims({m, n, k}));
        std::vector<uint8_t> c(m * ldc, 0xA5);
        qu8_gemm(a.data(), m, lda, packed, c.data(), ldc, 1 + index % 2);
        std::vector<uint8_t> got(m * n), want(m * n);
        bool pad_ok = true;
        for (size_t i = 0; i < m; ++i) {
          for (size_t j = 0; j < n; ++j) {
            int64_t acc = bp != nullptr ? bp[j] : 0;
            for (size_t kk = 0; kk < k; ++kk) acc += (a[i * lda + kk] - x_zp) * w[j * k + kk];
            want[i * n + j] = qu8ref::output(qu8ref::wrap(acc), mult[j], shift[j], y_zp, cl.qmin, cl.qmax);
            got[i * n + j] = c[i * ldc + j];
          }
          for (size_t j = n; j < ldc; ++j) pad_ok &= c[i * ldc + j] == 0xA5;
        }
        if (!pad_ok && fam.failure.empty()) fam.failure = "qu8 gemm wrote past N " + dims({m, n, k});
        check_bytes(fam, "qu8 gemm " + dims({m, n, k}) + " x_zp=" + std::to_string(x_zp), got.data(), want.data(),
                    got.size());
      }
  report(fam);
}

void test_qu8_conv(const KernelTable& t) {
  reseed();
  Family fam{"qu8_conv", t.name};
  const ConvCase cases[] = {
      {1, 5, 7, 3, 5, geom(1, 1, 1, 1, 0, 0, 0, 0)},     // 1x1 stride 1: the GEMM path
      {2, 6, 5, 17, 33, geom(1, 1, 2, 1, 0, 0, 0, 0)},   // 1x1 stride 2: indirect
      {1, 7, 9, 5, 17, geom(3, 3, 1, 1, 1, 1, 1, 1)},    // C not a multiple of 4
      {2, 9, 8, 3, 16, geom(3, 3, 2, 1, 1, 1, 1, 1)},    // RGB-like stem
      {1, 11, 10, 1, 1, geom(5, 5, 1, 2, 4, 4, 4, 4)},   // dilation 2
      {1, 13, 13, 3, 24, geom(7, 7, 2, 1, 3, 3, 3, 3)},  // stem-like
      {1, 6, 7, 17, 5, geom(3, 2, 1, 1, 0, 1, 2, 0)},    // asymmetric kernel and padding
      {1, 4, 4, 65, 65, geom(3, 3, 1, 1, 1, 1, 1, 1)},
      {1, 6, 6, 32, 40, geom(3, 3, 1, 1, 1, 1, 1, 1)},   // C a multiple of 4 and 16
      {1, 3, 3, 8, 19, geom(3, 3, 1, 1, 2, 2, 2, 2)},    // windows entirely in the padding
  };
  size_t index = 0;
  for (const ConvCase& cc : cases) {
    ++index;
    const int x_zp = kQu8ZeroPoints[index % 5], y_zp = kQu8ZeroPoints[(index + 1) % 5];
    const Qu8Clamp cl = kQu8Clamps[index % 6];
    const size_t kdim = cc.g.kh * cc.g.kw * cc.c;
    auto x = random_u8(cc.n * cc.h * cc.w * cc.c);
    const bool narrow = index % 2 == 0;  // weights the narrow GEMM takes (on levels that have one)
    auto w = narrow ? narrow_i8(cc.oc, kdim, cc.c) : random_i8(cc.oc * kdim);
    std::vector<int32_t> bias(cc.oc), mult, shift;
    for (auto& b : bias) b = static_cast<int32_t>(rng() % 200001) - 100000;
    qu8_channel_scales(cc.oc, std::sqrt(static_cast<double>(kdim)) * 74 * 74, 5, mult, shift);
    const int32_t* bp = index % 3 == 2 ? nullptr : bias.data();
    auto packed = pack_qu8_gemm_weights(w.data(), cc.oc, kdim, bp, x_zp, mult.data(), shift.data(), y_zp, cl.qmin,
                                        cl.qmax, &t, cc.g.kh, cc.g.kw);
    if (narrow) expect_narrow(fam, packed, t.qu8_igemm_narrow != nullptr, "conv case " + std::to_string(index));
    Qu8ConvPlan plan(cc.n, cc.h, cc.w, cc.c, cc.g, packed);
    const size_t oh = plan.out_h(), ow = plan.out_w(), pixels = cc.n * oh * ow;
    const std::string what = "qu8 conv " + dims({cc.n, cc.h, cc.w, cc.c, cc.oc, cc.g.kh, cc.g.kw, cc.g.stride_h});
    // Runs: the input, a second buffer (inverted bytes: the indirection must be rebuilt) and the
    // first again at a wider pixel stride (with a wider output stride too).
    for (int run = 0; run < 3; ++run) {
      std::vector<uint8_t> xr = x;
      if (run == 1)
        for (auto& v : xr) v = static_cast<uint8_t>(255 - v);
      const size_t in_stride = run == 2 ? cc.c + 5 : cc.c, out_stride = run == 2 ? cc.oc + 3 : cc.oc;
      std::vector<uint8_t> xs(cc.n * cc.h * cc.w * in_stride, 0xEE);
      for (size_t p = 0; p < cc.n * cc.h * cc.w; ++p)
        for (size_t ci = 0; ci < cc.c; ++ci) xs[p * in_stride + ci] = xr[p * cc.c + ci];
      std::vector<uint8_t> y(pixels * out_stride, 0x5A);
      plan.run(xs.data(), y.data(), 1 + (index + run) % 2, in_stride, out_stride);
      const auto want = qu8_naive_conv(cc, xr.data(), w.data(), bp, x_zp, mult.data(), shift.data(), y_zp, cl, oh, ow);
      std::vector<uint8_t> got(pixels * cc.oc);
      bool pad_ok = true;
      for (size_t p = 0; p < pixels; ++p) {
        for (size_t o = 0; o < cc.oc; ++o) got[p * cc.oc + o] = y[p * out_stride + o];
        for (size_t o = cc.oc; o < out_stride; ++o) pad_ok &= y[p * out_stride + o] == 0x5A;
      }
      if (!pad_ok && fam.failure.empty()) fam.failure = what + " wrote past the output channels";
      check_bytes(fam, what + (run == 1 ? " (new input)" : run == 2 ? " (pixel stride)" : ""), got.data(), want.data(),
                  got.size());
    }
  }
  report(fam);
}

// Inputs that end where an inaccessible page begins: the GEMM kernels read round_up(K, 4) bytes of
// a row (ukernels.h), so qu8_gemm and Qu8ConvPlan must run the last rows from copies (Qu8RowGuard)
// when K % 4 != 0; a read past the end here is a SIGSEGV, not a wrong number.
class GuardedBytes {
 public:
  explicit GuardedBytes(size_t bytes) {
    page_ = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    span_ = (bytes + page_ - 1) / page_ * page_ + page_;
    base_ = static_cast<uint8_t*>(mmap(nullptr, span_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (base_ == MAP_FAILED) std::abort();
    mprotect(base_ + span_ - page_, page_, PROT_NONE);
    data_ = base_ + span_ - page_ - bytes;
  }
  ~GuardedBytes() { munmap(base_, span_); }
  uint8_t* data() { return data_; }

 private:
  uint8_t *base_, *data_;
  size_t page_, span_;
};

void test_qu8_overread(const KernelTable& t) {
  reseed();
  Family fam{"qu8_overread", t.name};
  const Qu8Clamp cl = kQu8Clamps[0];
  for (size_t k : {1, 2, 3, 5, 7, 27}) {
    for (size_t lda : {k, k + 1}) {
      const size_t m = 9, n = 17;
      GuardedBytes a(m * lda - (lda - k));  // the last row ends the buffer
      auto src = random_u8(m * lda);
      std::memcpy(a.data(), src.data(), m * lda - (lda - k));
      auto w = random_i8(n * k);
      std::vector<int32_t> mult, shift;
      qu8_channel_scales(n, std::sqrt(static_cast<double>(k)) * 74 * 74, 7, mult, shift);
      auto packed = pack_qu8_gemm_weights(w.data(), n, k, nullptr, 3, mult.data(), shift.data(), 7, cl.qmin, cl.qmax, &t);
      std::vector<uint8_t> c(m * n), want(m * n);
      qu8_gemm(a.data(), m, lda, packed, c.data(), n, 2);
      for (size_t i = 0; i < m; ++i)
        for (size_t j = 0; j < n; ++j) {
          int64_t acc = 0;
          for (size_t kk = 0; kk < k; ++kk) acc += (src[i * lda + kk] - 3) * w[j * k + kk];
          want[i * n + j] = qu8ref::output(qu8ref::wrap(acc), mult[j], shift[j], 7, cl.qmin, cl.qmax);
        }
      check_bytes(fam, "qu8 gemm at a page end " + dims({m, n, k, lda}), c.data(), want.data(), c.size());
    }
  }
  const ConvCase cases[] = {{1, 9, 9, 3, 16, geom(3, 3, 2, 1, 1, 1, 1, 1)}, {1, 8, 8, 1, 5, geom(3, 3, 1, 1, 1, 1, 1, 1)},
                            {2, 7, 7, 3, 9, geom(7, 7, 2, 1, 3, 3, 3, 3)}, {1, 5, 5, 6, 4, geom(1, 1, 1, 1, 0, 0, 0, 0)}};
  for (const ConvCase& cc : cases) {
    const size_t kdim = cc.g.kh * cc.g.kw * cc.c, bytes = cc.n * cc.h * cc.w * cc.c;
    GuardedBytes x(bytes);
    const auto src = random_u8(bytes);
    auto w = random_i8(cc.oc * kdim);
    std::vector<int32_t> mult, shift;
    qu8_channel_scales(cc.oc, std::sqrt(static_cast<double>(kdim)) * 74 * 74, 5, mult, shift);
    auto packed = pack_qu8_gemm_weights(w.data(), cc.oc, kdim, nullptr, 11, mult.data(), shift.data(), 5, cl.qmin,
                                        cl.qmax, &t, cc.g.kh, cc.g.kw);
    Qu8ConvPlan plan(cc.n, cc.h, cc.w, cc.c, cc.g, packed);
    const size_t pixels = cc.n * plan.out_h() * plan.out_w();
    for (int run = 0; run < 2; ++run) {  // new bytes in the same buffer: the copies must follow
      std::vector<uint8_t> xr = src;
      if (run == 1)
        for (auto& v : xr) v = static_cast<uint8_t>(255 - v);
      std::memcpy(x.data(), xr.data(), bytes);
      const auto want = qu8_naive_conv(cc, xr.data(), w.data(), nullptr, 11, mult.data(), shift.data(), 5, cl,
                                       plan.out_h(), plan.out_w());
      std::vector<uint8_t> y(pixels * cc.oc);
      plan.run(x.data(), y.data(), 2);
      check_bytes(fam, "qu8 conv at a page end " + dims({cc.n, cc.h, cc.w, cc.c, cc.g.kh}) + (run ? " (new bytes)" : ""),
                  y.data(), want.data(), y.size());
    }
  }
  report(fam);
}

#if defined(__x86_64__)
// What another AMX user on the thread (oneDNN, say) may leave between two calls of the avx512amx
// kernels, which check the tile configuration rather than load it every call: how = 1 the tiles
// released (init state), 2 a configuration of its own (12 rows x 48 bytes per tile) with junk in
// every tile. Inline asm: no compiler flags needed; run only where the level runs.
void disturb_amx_tiles(int how) {
  if (how == 1) {
    __asm__ volatile("tilerelease" ::: "memory");
    return;
  }
  struct alignas(64) Config { uint8_t palette, start_row, reserved[14]; uint16_t colsb[16]; uint8_t rows[16]; } cfg{};
  cfg.palette = 1;
  for (int tile = 0; tile < 8; ++tile) {
    cfg.colsb[tile] = 48;
    cfg.rows[tile] = 12;
  }
  alignas(64) uint8_t junk[12 * 48];
  for (auto& b : junk) b = static_cast<uint8_t>(rng());
  __asm__ volatile("ldtilecfg %0" ::"m"(cfg));
#define EDGESDK_JUNK(t) __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #t ::"r"(junk), "r"(48L) : "memory")
  EDGESDK_JUNK(0); EDGESDK_JUNK(1); EDGESDK_JUNK(2); EDGESDK_JUNK(3);
  EDGESDK_JUNK(4); EDGESDK_JUNK(5); EDGESDK_JUNK(6); EDGESDK_JUNK(7);
#undef EDGESDK_JUNK
}
#endif

// The level's qu8 GEMM microkernels called directly (ukernels.h, Qu8IgemmUkernel: the operators
// above reach them only through their own tiling): qu8_igemm with every mr in 1..MR and nr in
// 1..NR, and qu8_igemm_x2 (where the level has it) with nr in NR+1..2NR; kc 1..67 (tails of 4 bytes,
// and of 64 bytes of K' = ks * round_up(kc, 4), AMX's tail tiles), ks 1..9, and long K (3x3 x 512
// channels, 4096, ...). Every row is round_up(kc, KR) readable bytes (junk past kc: the weights there
// are zero) in a buffer that ends where an inaccessible page begins; a kernel position's rows are
// either distinct rows dealt at random or evenly spaced (ascending, descending, gaps between rows,
// all one pointer: what AMX's kernels read in place; rotating per case and per position), and the
// last row of the buffer ends the page; the slots of rows >= mr hold null (only rows < mr may be
// read). Bias, weights and the requantization come from pack_qu8_gemm_weights with input zero
// point 0 (the packed bias is the bias); channels with realistic scales (the fp32 form of the
// AVX-512 requantization) and, in some cases, every third one extreme (the integer form); clamps:
// none, Relu (qmin = zero point), Relu6-like, narrow; biases near INT32_MAX (the sum wraps). The
// output rows are ldc > nr apart: bytes outside the mr x nr block must keep their sentinel. On
// avx512amx, two calls in three find the tiles released or configured by someone else
// (disturb_amx_tiles); the third finds them as the previous call left them.
void test_qu8_igemm_ukernel(const KernelTable& t) {
  reseed();
  Family fam{"qu8_igemm_ukernel", t.name};
  const size_t MR = t.qu8_gemm_mr, NR = t.qu8_gemm_nr, KR = t.qu8_gemm_kr;
  const size_t max_nr = t.qu8_igemm_x2 != nullptr ? 2 * NR : NR;
  struct Case { size_t mr, nr, kc, ks; };
  std::vector<Case> cases;
  size_t index = 0;
  for (size_t kc = 1; kc <= 67; ++kc)
    for (size_t ks = 1; ks <= 9; ks += g_quick ? 4 : 1) {
      ++index;
      cases.push_back({1 + index * 7 % MR, 1 + index * 11 % max_nr, kc, ks});
    }
  for (size_t mr = 1; mr <= MR; ++mr)
    for (size_t nr = 1; nr <= max_nr; ++nr) {
      cases.push_back({mr, nr, 67, 2});  // a position of 68 bytes (AMX: a 64-byte tile and a tail of 4)
      if (!g_quick) {
        cases.push_back({mr, nr, 64, 1});  // one tile exactly
        cases.push_back({mr, nr, 21, 1});  // (avx512amx runs these two on vpdpbusd)
        cases.push_back({mr, nr, 5, 3});
      }
    }
  const std::pair<size_t, size_t> long_k[] = {{512, 9}, {4096, 1}, {255, 9}, {3, 49}, {1000, 3}, {130, 5}};
  for (const auto& [kc, ks] : long_k) {
    cases.push_back({MR, max_nr, kc, ks});
    cases.push_back({(MR + 1) / 2, NR > 1 ? NR - 1 : 1, kc, ks});
  }
  index = 0;
  for (const Case& cs : cases) {
    ++index;
    const size_t kcp = round_up(cs.kc, KR), k = cs.ks * cs.kc, n = cs.nr;
    const bool x2 = cs.nr > NR;
    // The rows of each position: 0 distinct rows in a random order (all positions sharing one
    // shuffled pool), 1 evenly spaced kcp apart (a GEMM's rows), 2 with a gap of `gap` bytes, 3
    // descending, 4 one pointer for all (padding). Case index % 3: all positions layout 0, all 1,
    // or each its own at random. Positions are laid out one after the other, the last one ending
    // the buffer.
    const size_t gap = index % 2 == 0 ? 4 : 60;
    std::vector<int> layout(cs.ks);
    for (size_t s = 0; s < cs.ks; ++s) layout[s] = index % 3 == 0 ? 0 : index % 3 == 1 ? 1 : static_cast<int>(rng() % 5);
    auto span = [&](int l) {  // bytes a position's rows take
      return l == 4 ? kcp : l == 2 || l == 3 ? (cs.mr - 1) * (kcp + gap) + kcp : cs.mr * kcp;
    };
    size_t total = 0;
    for (size_t s = 0; s < cs.ks; ++s) total += span(layout[s]);
    GuardedBytes buf(total);
    const auto bytes = random_u8(total);
    std::memcpy(buf.data(), bytes.data(), total);
    if (index % 5 == 0) std::memset(buf.data(), 255, total);  // the largest products
    std::vector<const uint8_t*> a(cs.ks * MR, nullptr);
    std::vector<const uint8_t*> pool;  // the rows of layout-0 positions, dealt at random
    size_t offset = 0;
    for (size_t s = 0; s < cs.ks; ++s) {
      const uint8_t* base = buf.data() + offset;
      for (size_t m = 0; m < cs.mr; ++m) {
        const uint8_t* row = base + m * kcp;
        if (layout[s] == 2) row = base + m * (kcp + gap);
        if (layout[s] == 3) row = base + (cs.mr - 1 - m) * (kcp + gap);
        if (layout[s] == 4) row = base;
        if (layout[s] == 0) pool.push_back(row);
        else a[s * MR + m] = row;
      }
      offset += span(layout[s]);
    }
    std::shuffle(pool.begin(), pool.end(), rng);
    for (size_t s = 0, next = 0; s < cs.ks; ++s)
      for (size_t m = 0; m < cs.mr && layout[s] == 0; ++m) a[s * MR + m] = pool[next++];
    auto w = random_i8(n * k);
    if (index % 5 == 0)
      for (auto& v : w) v = static_cast<int8_t>(rng() % 2 ? 127 : -128);
    std::vector<int32_t> bias(n), mult, shift;
    for (auto& b : bias) b = static_cast<int32_t>(rng() % 200001) - 100000;
    if (index % 7 == 3)
      for (auto& b : bias) b = INT32_MAX - static_cast<int32_t>(rng() % 1000);
    qu8_channel_scales(n, std::sqrt(static_cast<double>(k)) * 74 * 74, index % 2 == 0 ? 3 : 0, mult, shift);
    const int y_zp = kQu8ZeroPoints[index % 5];
    Qu8Clamp cl = kQu8Clamps[index % 6];
    if (index % 4 == 1) cl = {y_zp, 255};                          // Relu
    if (index % 4 == 3) cl = {y_zp, std::min(255, y_zp + 100)};   // Relu6-like
    const int32_t* bp = index % 9 == 4 ? nullptr : bias.data();
    auto packed = pack_qu8_gemm_weights(w.data(), n, k, bp, 0, mult.data(), shift.data(), static_cast<uint8_t>(y_zp),
                                        static_cast<uint8_t>(cl.qmin), static_cast<uint8_t>(cl.qmax), &t, cs.ks, 1);
    const Qu8IgemmUkernel kernel = x2 ? packed.kernel_x2() : packed.kernel();
    const std::string what = std::string(x2 ? "x2 " : "") + "mr=" + std::to_string(cs.mr) + " nr=" +
                             std::to_string(cs.nr) + " kc=" + std::to_string(cs.kc) + " ks=" + std::to_string(cs.ks);
    if (kernel == nullptr) {
      if (fam.failure.empty()) fam.failure = what + ": no kernel";
      continue;
    }
    const size_t ldc = max_nr + 5;
    std::vector<uint8_t> c(MR * ldc, 0xA5);
#if defined(__x86_64__)
    if (t.isa == Isa::Avx512Amx && index % 3 != 0) disturb_amx_tiles(static_cast<int>(index % 3));
#endif
    kernel(cs.mr, cs.nr, cs.kc, cs.ks, a.data(), packed.panel(0), packed.bias.data(), packed.panel_rq(0), c.data(), ldc,
           &packed.out);
    std::vector<uint8_t> got(cs.mr * n), want(cs.mr * n);
    bool sentinel_ok = true;
    for (size_t i = 0; i < MR; ++i)
      for (size_t j = 0; j < ldc; ++j) {
        if (i < cs.mr && j < n) {
          int64_t acc = bp != nullptr ? bp[j] : 0;
          for (size_t s = 0; s < cs.ks; ++s)
            for (size_t kk = 0; kk < cs.kc; ++kk) acc += a[s * MR + i][kk] * w[j * k + s * cs.kc + kk];
          want[i * n + j] = qu8ref::output(qu8ref::wrap(acc), mult[j], shift[j], y_zp, cl.qmin, cl.qmax);
          got[i * n + j] = c[i * ldc + j];
        } else {
          sentinel_ok &= c[i * ldc + j] == 0xA5;
        }
      }
    if (!sentinel_ok && fam.failure.empty()) fam.failure = what + ": wrote outside the mr x nr block";
    check_bytes(fam, what, got.data(), want.data(), got.size());
  }
  report(fam);
}

void test_qu8_depthwise(const KernelTable& t) {
  reseed();
  Family fam{"qu8_depthwise", t.name};
  struct Case { size_t n, h, w, c, mult; ConvGeometry g; };
  const Case cases[] = {
      {1, 7, 8, 1, 1, geom(3, 3, 1, 1, 1, 1, 1, 1)},   {2, 9, 7, 3, 1, geom(3, 3, 2, 1, 1, 1, 1, 1)},
      {1, 8, 8, 5, 1, geom(3, 3, 1, 2, 2, 2, 2, 2)},   {1, 10, 9, 17, 1, geom(5, 5, 2, 1, 2, 2, 2, 2)},
      {1, 6, 6, 40, 1, geom(3, 3, 1, 1, 0, 0, 1, 1)},  {1, 5, 6, 67, 1, geom(3, 3, 2, 1, 1, 1, 0, 0)},
      {1, 6, 5, 3, 2, geom(3, 3, 1, 1, 1, 1, 1, 1)},   {1, 5, 5, 2, 9, geom(3, 3, 2, 1, 1, 1, 1, 1)},
      {1, 4, 4, 5, 17, geom(1, 1, 1, 1, 0, 0, 0, 0)},  {1, 4, 37, 19, 1, geom(3, 3, 1, 1, 1, 1, 1, 1)},
      {1, 5, 12, 33, 1, geom(5, 5, 1, 2, 4, 4, 4, 4)}, {1, 3, 3, 16, 1, geom(3, 3, 1, 1, 3, 3, 3, 3)},
      {1, 6, 7, 96, 1, geom(3, 3, 2, 1, 1, 1, 1, 1)},
  };
  // Each case with three weight sets: full 8-bit (the level's qu8_depthwise), 7-bit ([-64, 64]) and
  // kernel-row pairs at vpmaddubsw's bound (positive or negative parts summing to exactly 128): both
  // fit qu8_dw_pairs_fit_int16, so levels with a qu8_depthwise_narrow kernel run it on them.
  const int8_t kEdgePairs[][2] = {{127, 1}, {1, 127}, {-128, 0}, {0, -128}, {64, 64}, {-64, -64}, {127, -128}};
  auto weights_of = [&](size_t kind, const ConvGeometry& g, size_t oc) {
    std::vector<int8_t> w = random_i8(g.kh * g.kw * oc);
    if (kind == 1)
      for (auto& v : w) v = static_cast<int8_t>(static_cast<int>(rng() % 129) - 64);
    if (kind == 2)
      for (size_t ky = 0; ky < g.kh; ky += 2)
        for (size_t i = 0; i < g.kw * oc; ++i) {
          const int8_t* pair = kEdgePairs[rng() % 7];
          w[ky * g.kw * oc + i] = pair[0];
          if (ky + 1 < g.kh) w[(ky + 1) * g.kw * oc + i] = pair[1];
        }
    return w;
  };
  size_t index = 0;
  for (size_t kind = 0; kind < 3; ++kind)
  for (const Case& cs : cases) {
    ++index;
    const int x_zp = kQu8ZeroPoints[index % 5], y_zp = kQu8ZeroPoints[(index + 3) % 5];
    const Qu8Clamp cl = kQu8Clamps[index % 6];
    const size_t oc = cs.c * cs.mult, taps = cs.g.kh * cs.g.kw;
    auto x = random_u8(cs.n * cs.h * cs.w * cs.c);
    if (kind == 2)  // inputs at 0 and 255 too, where vpmaddubsw's sums reach the bound
      for (auto& v : x) v = rng() % 3 == 0 ? 255 : rng() % 3 == 0 ? 0 : v;
    auto w = weights_of(kind, cs.g, oc);
    std::vector<int32_t> bias(oc), mult, shift;
    for (auto& b : bias) b = static_cast<int32_t>(rng() % 20001) - 10000;
    qu8_channel_scales(oc, std::sqrt(static_cast<double>(taps)) * 74 * 74, 6, mult, shift);
    const int32_t* bp = index % 4 == 0 ? nullptr : bias.data();
    const size_t oh = conv_output_size(cs.h, cs.g.kh, cs.g.stride_h, cs.g.dil_h, cs.g.pad_top, cs.g.pad_bottom);
    const size_t ow = conv_output_size(cs.w, cs.g.kw, cs.g.stride_w, cs.g.dil_w, cs.g.pad_left, cs.g.pad_right);
    std::vector<uint8_t> got(cs.n * oh * ow * oc), want(got.size());
    qu8_depthwise_conv(x.data(), cs.n, cs.h, cs.w, cs.c, cs.mult, cs.g, w.data(), bp, x_zp, mult.data(), shift.data(),
                       y_zp, cl.qmin, cl.qmax, got.data(), 1 + index % 2, &t);
    const ConvGeometry& g = cs.g;
    for (size_t b = 0; b < cs.n; ++b)
      for (size_t oy = 0; oy < oh; ++oy)
        for (size_t ox = 0; ox < ow; ++ox)
          for (size_t o = 0; o < oc; ++o) {
            int64_t acc = bp != nullptr ? bp[o] : 0;
            for (size_t ky = 0; ky < g.kh; ++ky)
              for (size_t kx = 0; kx < g.kw; ++kx) {
                const long iy = static_cast<long>(oy * g.stride_h + ky * g.dil_h) - static_cast<long>(g.pad_top);
                const long ix = static_cast<long>(ox * g.stride_w + kx * g.dil_w) - static_cast<long>(g.pad_left);
                if (iy < 0 || ix < 0 || iy >= static_cast<long>(cs.h) || ix >= static_cast<long>(cs.w)) continue;
                acc += (x[((b * cs.h + iy) * cs.w + ix) * cs.c + o / cs.mult] - x_zp) * w[(ky * g.kw + kx) * oc + o];
              }
            want[((b * oh + oy) * ow + ox) * oc + o] =
                qu8ref::output(qu8ref::wrap(acc), mult[o], shift[o], y_zp, cl.qmin, cl.qmax);
          }
    check_bytes(fam, "qu8 depthwise w" + std::to_string(kind) + " " +
                         dims({cs.n, cs.h, cs.w, cs.c, cs.mult, cs.g.kh, cs.g.stride_h}), got.data(),
                want.data(), got.size());
  }
  // The narrow kernel is taken exactly where the weights fit: the 7-bit set, not an (127, 2) pair.
  if (t.qu8_depthwise_narrow != nullptr) {
    const ConvGeometry g = geom(3, 3, 1, 1, 1, 1, 1, 1);
    const std::vector<int32_t> mult(8, 1 << 30), shift(8, 8);
    for (int bad = 0; bad < 2; ++bad) {
      std::vector<int8_t> w = weights_of(1, g, 8);
      if (bad) {
        w[8 * 3 + 5] = 127;  // rows 0 and 1 of kernel column 0, channel 5: 127 + 2 > 128
        w[5] = 2;
      }
      const Qu8DepthwisePlan plan(1, 4, 4, 8, 1, g, w.data(), nullptr, 3, mult.data(), shift.data(), 0, 0, 255, &t);
      const bool narrow = std::string(plan.kernel_name()) == t.names.qu8_depthwise_narrow;
      if (narrow == static_cast<bool>(bad) && fam.failure.empty())
        fam.failure = std::string("kernel choice: ") + plan.kernel_name() + (bad ? " for weights past the bound" : "");
      ++fam.cases;
    }
  }
  report(fam);
}

// Table lookup and concat: every byte value through random tables, odd lengths and tails; the concat
// of copied and rescaled parts (rows narrower and wider than a task) against the scalar formulas.
void test_qu8_lut_concat(const KernelTable& t) {
  reseed();
  Family fam{"qu8_lut_concat", t.name};
  for (size_t n : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{31}, size_t{33}, size_t{63}, size_t{64},
                   size_t{65}, size_t{256}, size_t{257}, size_t{70001}}) {
    auto table = random_u8(256);
    auto x = random_u8(n);
    for (size_t i = 0; i < n && i < 256; ++i) x[i] = static_cast<uint8_t>(i);
    std::vector<uint8_t> got(n), want(n);
    qu8_lut(x.data(), n, table.data(), got.data(), 1 + n % 2, &t);
    for (size_t i = 0; i < n; ++i) want[i] = table[x[i]];
    check_bytes(fam, "lut n=" + std::to_string(n), got.data(), want.data(), n);
  }
  struct Case { size_t rows; std::vector<size_t> widths; };
  const Case cases[] = {{1, {3}}, {7, {1, 16, 33}}, {40, {64, 5, 200, 2}}, {1, {40000, 17}}, {3, {20000, 1}}};
  size_t index = 0;
  for (const Case& cs : cases) {
    const int y_zp = kQu8ZeroPoints[index % 5];
    std::vector<std::vector<uint8_t>> xs;
    std::vector<Qu8ConcatPart> parts;
    size_t total = 0;
    for (size_t p = 0; p < cs.widths.size(); ++p, ++index) {
      xs.push_back(random_u8(cs.rows * cs.widths[p]));
      const bool copy = p == 0;
      const int32_t m = index % 3 == 0 ? kQu8Multipliers[index % 9] : random_multiplier();
      parts.push_back({xs.back().data(), cs.widths[p], static_cast<uint8_t>(kQu8ZeroPoints[(index + 2) % 5]),
                       copy ? 0 : m, copy ? 0 : kQu8Shifts[index % 8], copy});
      total += cs.widths[p];
    }
    std::vector<uint8_t> got(cs.rows * total), want(got.size());
    qu8_concat(parts.data(), parts.size(), cs.rows, got.data(), static_cast<uint8_t>(y_zp), 1 + index % 2, &t);
    for (size_t r = 0; r < cs.rows; ++r) {
      size_t offset = 0;
      for (const Qu8ConcatPart& part : parts) {
        for (size_t c = 0; c < part.width; ++c) {
          const uint8_t v = part.x[r * part.width + c];
          want[r * total + offset + c] =
              part.copy ? v : qu8ref::output(v - part.x_zp, part.mult, part.shift, y_zp, 0, 255);
        }
        offset += part.width;
      }
    }
    check_bytes(fam, "concat rows=" + std::to_string(cs.rows), got.data(), want.data(), got.size());
  }
  report(fam);
}

// QuantizeLinear and DequantizeLinear per tensor at the level against the scalar formulas: random
// values, the special floats (NaN, infinities, signed zeros, subnormals, extremes) and the rounding
// ties of QuantizeLinear; every code of DequantizeLinear, uint8 and int8; lengths that leave tails.
void test_qu8_convert(const KernelTable& t) {
  reseed();
  Family fam{"qu8_convert", t.name};
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const float scales[] = {0.5f, 0.0173f, 3.7f, 2e-5f};
  for (float scale : scales) {
    std::vector<float> x = random_vec(300, -300.0f * scale, 300.0f * scale);
    for (float v : {nan, -nan, inf, -inf, 0.0f, -0.0f, 1e-40f, -1e-40f, 3.4e38f, -3.4e38f, 2147483648.0f})
      x.push_back(v);
    for (int k = -20; k < 20; ++k) x.push_back((static_cast<float>(k) + 0.5f) * scale);
    for (int zp : {0, 128, 255, -128, -5, 127}) {
      const int32_t qmin = zp < 0 || zp == 127 ? -128 : 0, qmax = qmin == 0 ? 255 : 127;
      for (size_t n : {x.size(), size_t{1}, size_t{15}, size_t{17}, size_t{63}, size_t{65}}) {
        std::vector<uint8_t> got(n), want(n);
        const Qu8QuantizeParams params{scale, static_cast<float>(zp), qmin, qmax};
        qu8_quantize__scalar(x.data(), want.data(), n, &params);
        qu8_quantize_linear(x.data(), n, scale, static_cast<float>(zp), qmin, qmax, got.data(), 1 + n % 2, &t);
        check_bytes(fam, "quantize scale=" + std::to_string(scale) + " zp=" + std::to_string(zp) + " n=" +
                             std::to_string(n), got.data(), want.data(), n);
      }
    }
  }
  std::vector<uint8_t> codes(256 + 200);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = i < 256 ? static_cast<uint8_t>(i) : static_cast<uint8_t>(rng());
  for (bool is_signed : {false, true})
    for (int zp : is_signed ? std::vector<int>{-128, 0, 127, -5} : std::vector<int>{0, 128, 255, 3})
      for (float scale : {0.5f, 0.0173f, 3.7e-7f, -2.5f})
        for (size_t n : {codes.size(), size_t{1}, size_t{7}, size_t{8}, size_t{17}, size_t{33}, size_t{65}}) {
          std::vector<float> got(n + 1, 7.0f), want(n + 1, 7.0f);
          for (size_t i = 0; i < n; ++i) {
            const int32_t code = is_signed ? static_cast<int8_t>(codes[i]) : codes[i];
            want[i] = static_cast<float>(code - zp) * scale;
          }
          qu8_dequantize_linear(codes.data(), is_signed, n, scale, zp, got.data(), 1 + n % 2, &t);
          // Bit patterns: the kernel must give the formula's fp32 values exactly (and write nothing past n).
          check_bytes(fam, std::string("dequantize ") + (is_signed ? "int8" : "uint8") + " zp=" + std::to_string(zp) +
                               " n=" + std::to_string(n),
                      reinterpret_cast<const uint8_t*>(got.data()), reinterpret_cast<const uint8_t*>(want.data()),
                      (n + 1) * sizeof(float));
        }
  report(fam);
}

void test_qu8_eltwise(const KernelTable& t) {
  reseed();
  Family fam{"qu8_eltwise", t.name};
  size_t index = 0;
  for (size_t c : {1, 3, 8, 15, 16, 17, 33, 100})
    for (Broadcast bc : {Broadcast::None, Broadcast::PerChannel, Broadcast::Scalar})
      for (int op = 0; op < 2; ++op) {
        ++index;
        const size_t rows = 3;
        const int a_zp = kQu8ZeroPoints[index % 5], b_zp = kQu8ZeroPoints[(index + 1) % 5];
        const int y_zp = kQu8ZeroPoints[(index + 2) % 5];
        const Qu8Clamp cl = kQu8Clamps[index % 6];
        auto a = random_u8(rows * c), b = random_u8(bc == Broadcast::None ? rows * c : bc == Broadcast::PerChannel ? c : 1);
        std::vector<uint8_t> got(rows * c), want(rows * c);
        const bool extreme = index % 5 == 4;
        if (op == 0) {
          // TFLite-like: inputs scaled to < 1 of twice the larger input scale, then the sum back.
          int32_t am = random_multiplier(), as = -1 - static_cast<int32_t>(rng() % 3);
          int32_t bm = random_multiplier(), bs = -1 - static_cast<int32_t>(rng() % 3);
          int32_t om = random_multiplier(), os = -18 - static_cast<int32_t>(rng() % 3);
          if (extreme) {  // left shifts that saturate sa and sb, and their saturating sum
            as = kQu8Shifts[index % 8];
            bs = kQu8Shifts[(index + 3) % 8];
            am = kQu8Multipliers[index % 9];
            os = kQu8Shifts[(index + 5) % 8];
          }
          qu8_add(a.data(), a_zp, b.data(), b_zp, got.data(), y_zp, rows, c, bc, am, as, bm, bs, om, os, cl.qmin,
                  cl.qmax, 1 + index % 2, &t);
          for (size_t r = 0; r < rows; ++r)
            for (size_t i = 0; i < c; ++i) {
              const int bv = bc == Broadcast::None ? b[r * c + i] : bc == Broadcast::PerChannel ? b[i] : b[0];
              const int64_t sa = qu8ref::requantize(static_cast<int64_t>(a[r * c + i] - a_zp) * (1 << 20), am, as);
              const int64_t sb = qu8ref::requantize(static_cast<int64_t>(bv - b_zp) * (1 << 20), bm, bs);
              want[r * c + i] = qu8ref::output(sa + sb, om, os, y_zp, cl.qmin, cl.qmax);
            }
        } else {
          int32_t m = random_multiplier(), s = -8 - static_cast<int32_t>(rng() % 3);
          if (extreme) {
            m = kQu8Multipliers[index % 9];
            s = kQu8Shifts[index % 8];
          } else if (index % 5 == 2) {  // x * 2^-3 exactly: rdbpot's halves on every eighth product
            m = 1 << 30;
            s = -2;
          }
          qu8_mul(a.data(), a_zp, b.data(), b_zp, got.data(), y_zp, rows, c, bc, m, s, cl.qmin, cl.qmax, 1 + index % 2,
                  &t);
          for (size_t r = 0; r < rows; ++r)
            for (size_t i = 0; i < c; ++i) {
              const int bv = bc == Broadcast::None ? b[r * c + i] : bc == Broadcast::PerChannel ? b[i] : b[0];
              want[r * c + i] = qu8ref::output((a[r * c + i] - a_zp) * (bv - b_zp), m, s, y_zp, cl.qmin, cl.qmax);
            }
        }
        check_bytes(fam, std::string(op == 0 ? "qu8 add" : "qu8 mul") + " c=" + std::to_string(c) + " bc=" +
                             std::to_string(static_cast<int>(bc)),
                    got.data(), want.data(), got.size());
      }
  report(fam);
}

void test_qu8_pool(const KernelTable& t) {
  reseed();
  Family fam{"qu8_pool", t.name};
  struct Case { size_t n, h, w, c; ConvGeometry g; };
  const Case cases[] = {
      {1, 7, 7, 1, geom(3, 3, 2, 1, 1, 1, 1, 1)}, {2, 8, 8, 3, geom(2, 2, 2, 1, 0, 0, 0, 0)},
      {1, 6, 5, 5, geom(3, 3, 1, 1, 1, 1, 1, 1)}, {1, 9, 9, 17, geom(3, 3, 2, 1, 0, 0, 1, 1)},
      {1, 5, 6, 33, geom(5, 5, 1, 1, 2, 2, 2, 2)}, {1, 7, 7, 8, geom(3, 3, 1, 2, 2, 2, 2, 2)},
      {1, 4, 5, 70, geom(3, 3, 1, 1, 1, 1, 1, 1)}, {1, 2, 2, 16, geom(1, 1, 1, 1, 1, 1, 1, 1)},  // windows in padding only
  };
  size_t index = 0;
  for (const Case& cs : cases) {
    const ConvGeometry& g = cs.g;
    const size_t oh = conv_output_size(cs.h, g.kh, g.stride_h, g.dil_h, g.pad_top, g.pad_bottom);
    const size_t ow = conv_output_size(cs.w, g.kw, g.stride_w, g.dil_w, g.pad_left, g.pad_right);
    auto x = random_u8(cs.n * cs.h * cs.w * cs.c);
    std::vector<uint8_t> got(cs.n * oh * ow * cs.c), want(got.size());
    {
      ++index;
      qu8_maxpool(x.data(), cs.n, cs.h, cs.w, cs.c, g, got.data(), 1 + index % 2, &t);
      for (size_t b = 0; b < cs.n; ++b)
        for (size_t oy = 0; oy < oh; ++oy)
          for (size_t ox = 0; ox < ow; ++ox)
            for (size_t ch = 0; ch < cs.c; ++ch) {
              int best = 0;
              for (size_t ky = 0; ky < g.kh; ++ky)
                for (size_t kx = 0; kx < g.kw; ++kx) {
                  const long iy = static_cast<long>(oy * g.stride_h + ky * g.dil_h) - static_cast<long>(g.pad_top);
                  const long ix = static_cast<long>(ox * g.stride_w + kx * g.dil_w) - static_cast<long>(g.pad_left);
                  if (iy < 0 || ix < 0 || iy >= static_cast<long>(cs.h) || ix >= static_cast<long>(cs.w)) continue;
                  best = std::max<int>(best, x[((b * cs.h + iy) * cs.w + ix) * cs.c + ch]);
                }
              want[((b * oh + oy) * ow + ox) * cs.c + ch] = static_cast<uint8_t>(best);
            }
      check_bytes(fam, "qu8 maxpool " + dims({cs.n, cs.h, cs.w, cs.c, g.kh, g.stride_h}), got.data(), want.data(),
                  got.size());
    }
    for (bool include_pad : {false, true}) {
      ++index;
      const int x_zp = kQu8ZeroPoints[index % 5], y_zp = kQu8ZeroPoints[(index + 1) % 5];
      const Qu8Clamp cl = kQu8Clamps[index % 6];
      const size_t entries = g.kh * g.kw + 1;
      std::vector<int32_t> mult(entries), shift(entries);
      for (size_t e = 0; e < entries; ++e) {  // ~ 1/e, as the Python side folds it
        mult[e] = random_multiplier();
        shift[e] = e == 0 ? 0 : -static_cast<int32_t>(std::ceil(std::log2(static_cast<double>(e))));
        if (index % 3 == 0 && e % 4 == 1) {
          mult[e] = kQu8Multipliers[e % 9];
          shift[e] = kQu8Shifts[e % 8];
        } else if (index % 3 == 1) {  // sum / 4 exactly: rdbpot's halves on every fourth sum
          mult[e] = 1 << 30;
          shift[e] = -1;
        }
      }
      qu8_avgpool(x.data(), cs.n, cs.h, cs.w, cs.c, x_zp, g, include_pad, mult.data(), shift.data(), y_zp, cl.qmin,
                  cl.qmax, got.data(), 1 + index % 2, &t);
      for (size_t b = 0; b < cs.n; ++b)
        for (size_t oy = 0; oy < oh; ++oy)
          for (size_t ox = 0; ox < ow; ++ox) {
            size_t inside = 0, padded = 0;
            for (size_t ky = 0; ky < g.kh; ++ky)
              for (size_t kx = 0; kx < g.kw; ++kx) {
                const long iy = static_cast<long>(oy * g.stride_h + ky * g.dil_h) - static_cast<long>(g.pad_top);
                const long ix = static_cast<long>(ox * g.stride_w + kx * g.dil_w) - static_cast<long>(g.pad_left);
                inside += iy >= 0 && ix >= 0 && iy < static_cast<long>(cs.h) && ix < static_cast<long>(cs.w);
                padded += iy < static_cast<long>(cs.h + g.pad_bottom) && ix < static_cast<long>(cs.w + g.pad_right);
              }
            const size_t count = include_pad ? padded : inside;
            for (size_t ch = 0; ch < cs.c; ++ch) {
              int64_t acc = 0;
              for (size_t ky = 0; ky < g.kh; ++ky)
                for (size_t kx = 0; kx < g.kw; ++kx) {
                  const long iy = static_cast<long>(oy * g.stride_h + ky * g.dil_h) - static_cast<long>(g.pad_top);
                  const long ix = static_cast<long>(ox * g.stride_w + kx * g.dil_w) - static_cast<long>(g.pad_left);
                  if (iy < 0 || ix < 0 || iy >= static_cast<long>(cs.h) || ix >= static_cast<long>(cs.w)) continue;
                  acc += x[((b * cs.h + iy) * cs.w + ix) * cs.c + ch] - x_zp;
                }
              want[((b * oh + oy) * ow + ox) * cs.c + ch] =
                  qu8ref::output(acc, mult[count], shift[count], y_zp, cl.qmin, cl.qmax);
            }
          }
      check_bytes(fam, std::string("qu8 avgpool") + (include_pad ? "+pad " : " ") +
                           dims({cs.n, cs.h, cs.w, cs.c, g.kh, g.stride_h}),
                  got.data(), want.data(), got.size());
    }
  }
  for (size_t c : {1, 3, 17, 64, 70, 130}) {
    ++index;
    const size_t n = 2, hw = index % 2 ? 13 : 49;
    const int x_zp = kQu8ZeroPoints[index % 5], y_zp = kQu8ZeroPoints[(index + 1) % 5];
    const Qu8Clamp cl = kQu8Clamps[index % 6];
    const int32_t m = random_multiplier(), s = -static_cast<int32_t>(std::ceil(std::log2(static_cast<double>(hw))));
    auto x = random_u8(n * hw * c);
    std::vector<uint8_t> got(n * c), want(n * c);
    qu8_global_avgpool(x.data(), n, hw, c, x_zp, got.data(), y_zp, m, s, cl.qmin, cl.qmax, 2, &t);
    for (size_t b = 0; b < n; ++b)
      for (size_t ch = 0; ch < c; ++ch) {
        int64_t acc = 0;
        for (size_t p = 0; p < hw; ++p) acc += x[(b * hw + p) * c + ch] - x_zp;
        want[b * c + ch] = qu8ref::output(acc, m, s, y_zp, cl.qmin, cl.qmax);
      }
    check_bytes(fam, "qu8 global_avgpool c=" + std::to_string(c), got.data(), want.data(), got.size());
  }
  report(fam);
}

// ---- thread pool ----------------------------------------------------------------------------
// The spin/sleep hand-off: thousands of back-to-back jobs (a worker still finishing the previous
// one when the next is published), jobs after the workers fell asleep, pools that always sleep
// (spin 0) or always spin, nested calls (inline) and several callers at once (serialised).
// ---- CHW (planar) kernels -------------------------------------------------------------------------
// NCHW <-> NHWC of one float tensor (test helper, plain loops).
std::vector<float> nchw_to_nhwc(const std::vector<float>& x, size_t n, size_t c, size_t hw) {
  std::vector<float> y(x.size());
  for (size_t b = 0; b < n; ++b)
    for (size_t ch = 0; ch < c; ++ch)
      for (size_t p = 0; p < hw; ++p) y[(b * hw + p) * c + ch] = x[(b * c + ch) * hw + p];
  return y;
}

// Depthwise CHW at this level against (1) the generic scalar kernel: the same FMA chain per output,
// so equal bits before the activation (rtol 0 for the activations that are exact: none, relu,
// clip, leaky relu), and (2) the NHWC scalar depthwise kernel on transposed data (an independent
// reference: mul-then-add sums, tolerance). Every specialised window with odd sizes, 1x1 planes,
// W tails around the vector widths (4, 8, 16 lanes: one, several and partial vectors), pads 0 to
// K-1 per side (asymmetric), batch 2, multiplier 2 and 3, and generic geometries (dilation,
// unequal strides, 7x7, 2x3); the input ends at an inaccessible page (an over-read is a SIGSEGV)
// and the output is followed by canaries. Threads 1 to 3 (3 splits the rows of few planes).
void test_dwconv_chw(const KernelTable& t) {
  reseed();
  Family fam{"dwconv_chw", t.name};
  struct Case { size_t n, c, h, w, mult; ConvGeometry g; const char* want; };
  const Case cases[] = {
      {1, 3, 7, 9, 1, geom(3, 3, 1, 1, 1, 1, 1, 1), "3x3s1"},   {2, 2, 1, 1, 1, geom(3, 3, 1, 1, 1, 1, 1, 1), "3x3s1"},
      {1, 2, 5, 17, 1, geom(3, 3, 1, 1, 1, 1, 1, 1), "3x3s1"},  {1, 1, 6, 33, 1, geom(3, 3, 1, 1, 0, 0, 0, 0), "3x3s1"},
      {1, 2, 4, 64, 1, geom(3, 3, 1, 1, 2, 0, 1, 2), "3x3s1"},  {1, 1, 9, 112, 1, geom(3, 3, 1, 1, 1, 1, 1, 1), "3x3s1"},
      {1, 2, 3, 70, 2, geom(3, 3, 1, 1, 1, 1, 1, 1), "3x3s1"},  {1, 3, 8, 8, 1, geom(3, 3, 2, 1, 1, 1, 1, 1), "3x3s2"},
      {2, 2, 9, 7, 1, geom(3, 3, 2, 1, 1, 1, 1, 1), "3x3s2"},   {1, 1, 1, 1, 1, geom(3, 3, 2, 1, 1, 1, 1, 1), "3x3s2"},
      {1, 2, 6, 34, 1, geom(3, 3, 2, 1, 0, 0, 1, 1), "3x3s2"},  {1, 1, 7, 65, 1, geom(3, 3, 2, 1, 2, 2, 0, 1), "3x3s2"},
      {1, 2, 5, 112, 1, geom(3, 3, 2, 1, 1, 1, 1, 1), "3x3s2"}, {1, 1, 6, 37, 3, geom(3, 3, 2, 1, 1, 1, 1, 1), "3x3s2"},
      {1, 2, 7, 11, 1, geom(5, 5, 1, 1, 2, 2, 2, 2), "5x5s1"},  {1, 1, 2, 2, 1, geom(5, 5, 1, 1, 2, 2, 2, 2), "5x5s1"},
      {1, 2, 5, 40, 1, geom(5, 5, 1, 1, 4, 3, 0, 1), "5x5s1"},  {2, 1, 6, 71, 1, geom(5, 5, 1, 1, 2, 2, 2, 2), "5x5s1"},
      {1, 2, 9, 13, 1, geom(5, 5, 2, 1, 2, 2, 2, 2), "5x5s2"},  {1, 1, 3, 3, 1, geom(5, 5, 2, 1, 2, 2, 2, 2), "5x5s2"},
      {1, 2, 8, 66, 1, geom(5, 5, 2, 1, 1, 1, 2, 2), "5x5s2"},  {1, 1, 5, 129, 2, geom(5, 5, 2, 1, 2, 2, 2, 2), "5x5s2"},
      // The generic kernel: dilation, pads past K-1, unequal strides, other windows.
      {1, 2, 9, 10, 1, geom(3, 3, 1, 2, 2, 2, 2, 2), nullptr},  {1, 3, 8, 9, 2, geom(3, 3, 1, 1, 3, 3, 3, 3), nullptr},
      {1, 2, 11, 12, 1, geom(7, 7, 1, 1, 3, 3, 3, 3), nullptr}, {2, 2, 6, 7, 1, geom(2, 3, 1, 1, 0, 1, 1, 0), nullptr},
      {1, 2, 9, 9, 2, geom(3, 3, 3, 1, 1, 1, 1, 1), nullptr},   {1, 1, 5, 5, 1, geom(1, 1, 1, 1, 0, 0, 0, 0), nullptr},
  };
  const Activation exact_acts[] = {act_none(), act_relu(), act_clip(-0.25f, 0.5f), act_leaky_relu(0.1f)};
  size_t index = 0;
  for (Case cs : cases) {
    for (size_t ai = 0; ai < 3; ++ai) {
      ++index;
      if (index % 5 == 0) { cs.g.stride_w = cs.g.stride_w == 1 && cs.want == nullptr ? 2 : cs.g.stride_w; }
      const bool exact = ai < 2;
      const Activation act = exact ? exact_acts[(index + ai) % 4] : kActs[(index + ai) % kActCount];
      const ConvGeometry& g = cs.g;
      const size_t oc = cs.c * cs.mult;
      const size_t oh = conv_output_size(cs.h, g.kh, g.stride_h, g.dil_h, g.pad_top, g.pad_bottom);
      const size_t ow = conv_output_size(cs.w, g.kw, g.stride_w, g.dil_w, g.pad_left, g.pad_right);
      const size_t in_count = cs.n * cs.c * cs.h * cs.w, out_count = cs.n * oc * oh * ow;
      GuardedBytes guarded(in_count * sizeof(float));
      float* x = reinterpret_cast<float*>(guarded.data());
      const auto xv = random_vec(in_count);
      std::copy(xv.begin(), xv.end(), x);
      auto w = random_vec(oc * g.kh * g.kw), b = random_vec(oc);
      const float* bias = index % 4 == 0 ? nullptr : b.data();
      const float canary = 12345.0f;
      std::vector<float> got(out_count + 17, canary), ref(out_count);
      const size_t threads = 1 + index % 3;
      const char* name = depthwise_conv_chw(x, cs.n, cs.c, cs.h, cs.w, cs.mult, g, w.data(), bias, got.data(), act,
                                            threads, &t);
      depthwise_conv_chw(x, cs.n, cs.c, cs.h, cs.w, cs.mult, g, w.data(), bias, ref.data(), act, 1, &scalar_table());
      const std::string what = "dwconv_chw " + dims({cs.n, cs.c, cs.h, cs.w, cs.mult, g.kh, g.kw, g.stride_h,
                                                     g.stride_w, g.dil_h, g.pad_top, g.pad_left, g.pad_bottom,
                                                     g.pad_right}) + " " + act_name(act.kind) + " " + name;
      fam.check(what + " vs generic", got.data(), ref.data(), out_count, exact ? 0.0 : 1e-5, exact ? 1e-30 : 0.05);
      ++fam.cases;
      for (size_t i = out_count; i < got.size(); ++i)
        if (got[i] != canary && fam.failure.empty()) fam.failure = what + ": wrote past the output";
      // The kernel it ran: the specialised one for its window on SIMD levels, the generic one else.
      const bool special = cs.want != nullptr && g.stride_w == g.stride_h && t.dwconv_chw_3x3s1 != nullptr;
      const std::string want_name = special ? std::string("f32_dwconv2d_chw_") + cs.want + "__" : "f32_dwconv2d_chw__";
      ++fam.cases;
      if (std::string(name).rfind(want_name, 0) != 0 && fam.failure.empty())
        fam.failure = what + ": ran " + name + ", want " + want_name + "*";
      // NHWC oracle: weights [KH][KW][OC], output back to CHW.
      std::vector<float> wn(w.size()), yn(out_count);
      for (size_t o = 0; o < oc; ++o)
        for (size_t kk = 0; kk < g.kh * g.kw; ++kk) wn[kk * oc + o] = w[o * g.kh * g.kw + kk];
      const auto xn = nchw_to_nhwc(xv, cs.n, cs.c, cs.h * cs.w);
      depthwise_conv(xn.data(), cs.n, cs.h, cs.w, cs.c, cs.mult, g, wn.data(), bias, yn.data(), act, 1, &scalar_table());
      const auto want = nchw_to_nhwc(got, cs.n, oc, oh * ow);  // got (CHW) as NHWC
      fam.check(what + " vs nhwc", want.data(), yn.data(), out_count, 1e-5, 0.1);
    }
  }
  report(fam);
}

// Global average pooling CHW against the scalar kernel and a double sum: hw below, at and past the
// vector widths and their 4x unroll, 1x1 planes, activations.
void test_gavgpool_chw(const KernelTable& t) {
  reseed();
  Family fam{"gavgpool_chw", t.name};
  struct Case { size_t n, c, hw; };
  const Case cases[] = {{1, 1, 1}, {2, 3, 1}, {1, 5, 3}, {1, 17, 7}, {2, 9, 16}, {1, 33, 49}, {1, 4, 64},
                        {1, 3, 65}, {1, 70, 196}, {2, 2, 12544}};
  size_t index = 0;
  for (const Case& cs : cases) {
    ++index;
    const Activation act = kActs[index % kActCount];
    auto x = random_vec(cs.n * cs.c * cs.hw);
    std::vector<float> got(cs.n * cs.c + 5, 777.0f), ref(cs.n * cs.c);
    global_avgpool_chw(x.data(), cs.n, cs.c, cs.hw, got.data(), act, 1 + index % 2, &t);
    global_avgpool_chw(x.data(), cs.n, cs.c, cs.hw, ref.data(), act, 1, &scalar_table());
    std::vector<double> want(ref.size()), floor(ref.size());
    for (size_t p = 0; p < ref.size(); ++p) {
      double s = 0, mag = 0;
      for (size_t i = 0; i < cs.hw; ++i) s += x[p * cs.hw + i], mag += std::fabs(x[p * cs.hw + i]);
      want[p] = activate_reference(static_cast<float>(s / static_cast<double>(cs.hw)), act);
      floor[p] = mag / static_cast<double>(cs.hw) + 1e-3;
    }
    const std::string what = "gavgpool_chw " + dims({cs.n, cs.c, cs.hw}) + " " + act_name(act.kind);
    fam.check(what + " vs double", got.data(), want.data(), ref.size(), 1e-5, floor.data());
    fam.check(what + " vs scalar", got.data(), ref.data(), ref.size(), 1e-5, 0.05);
    ++fam.cases;
    for (size_t i = ref.size(); i < got.size(); ++i)
      if (got[i] != 777.0f && fam.failure.empty()) fam.failure = what + ": wrote past the output";
  }
  report(fam);
}

// Transposes of 1-, 4- and 8-byte elements: exact, every tile tail (rows and columns 1 to 2 tiles
// and past), C = 3 image inputs both ways, 1-row / 1-column images, blocks past one cache block,
// batch, threads; the source ends at an inaccessible page, the destination has canaries; NaN
// payloads survive (bits are moved).
template <class E>
void check_transpose(Family& fam, const KernelTable& t, size_t n, size_t rows, size_t cols, size_t threads) {
  const size_t count = n * rows * cols;
  GuardedBytes guarded(count * sizeof(E));
  E* src = reinterpret_cast<E*>(guarded.data());
  for (size_t i = 0; i < count; ++i) src[i] = static_cast<E>(rng());
  std::vector<E> dst(count + 9, static_cast<E>(0x5a));
  transpose_2d(src, dst.data(), n, rows, cols, sizeof(E), threads, &t);
  ++fam.cases;
  for (size_t b = 0; b < n && fam.failure.empty(); ++b)
    for (size_t i = 0; i < rows; ++i)
      for (size_t j = 0; j < cols; ++j)
        if (dst[(b * cols + j) * rows + i] != src[(b * rows + i) * cols + j] && fam.failure.empty())
          fam.failure = "transpose x" + std::to_string(8 * sizeof(E)) + " " + dims({n, rows, cols}) + ": element " +
                        dims({b, i, j}) + " wrong";
  for (size_t i = count; i < dst.size(); ++i)
    if (dst[i] != static_cast<E>(0x5a) && fam.failure.empty())
      fam.failure = "transpose " + dims({n, rows, cols}) + ": wrote past the output";
}

void test_transpose(const KernelTable& t) {
  reseed();
  Family fam{"transpose", t.name};
  struct Case { size_t n, rows, cols; };
  const Case cases[] = {{1, 1, 1},   {1, 1, 37},  {2, 37, 1},   {1, 2, 3},     {1, 3, 50},    {1, 50, 3},
                        {2, 4, 4},   {1, 8, 8},   {1, 16, 16},  {1, 17, 15},   {1, 31, 33},   {3, 5, 19},
                        {1, 64, 64}, {1, 65, 130}, {1, 3, 4099}, {1, 4099, 3}, {1, 200, 150}, {2, 96, 49},
                        {1, 16, 1}};
  size_t index = 0;
  for (const Case& cs : cases) {
    ++index;
    check_transpose<uint32_t>(fam, t, cs.n, cs.rows, cs.cols, 1 + index % 3);
    check_transpose<uint8_t>(fam, t, cs.n, cs.rows, cs.cols, 1 + index % 2);
    check_transpose<uint64_t>(fam, t, cs.n, cs.rows, cs.cols, 1 + index % 2);
  }
  {  // NaN payloads and infinities move as bits
    const size_t rows = 9, cols = 21;
    std::vector<float> x = random_vec(rows * cols), y(rows * cols);
    sprinkle(x, 1, 5);
    uint32_t payload = 0x7fc01234u;
    std::memcpy(&x[3], &payload, 4);
    transpose_2d(x.data(), y.data(), 1, rows, cols, 4, 1, &t);
    ++fam.cases;
    for (size_t i = 0; i < rows; ++i)
      for (size_t j = 0; j < cols; ++j)
        if (std::memcmp(&y[j * rows + i], &x[i * cols + j], 4) != 0 && fam.failure.empty())
          fam.failure = "transpose f32 specials: element " + dims({i, j}) + " changed";
  }
  report(fam);
}

// NaN, +inf and -inf in the CHW depthwise input (against the generic scalar kernel: equal bits,
// NaN for NaN) and in global average pooling (against a double sum).
void nonfinite_chw(Family& fam, const KernelTable& t) {
  struct DwCase { size_t c, h, w; ConvGeometry g; };
  const DwCase cases[] = {{3, 7, 19, geom(3, 3, 1, 1, 1, 1, 1, 1)}, {2, 9, 35, geom(3, 3, 2, 1, 1, 1, 1, 1)},
                          {2, 6, 23, geom(5, 5, 1, 1, 2, 2, 2, 2)}, {2, 8, 40, geom(5, 5, 2, 1, 2, 2, 2, 2)},
                          {2, 6, 9, geom(3, 3, 1, 2, 2, 2, 2, 2)}};
  for (const DwCase& cs : cases)
    for (const Activation& act : kActs) {
      const size_t oh = conv_output_size(cs.h, cs.g.kh, cs.g.stride_h, 1 * cs.g.dil_h, cs.g.pad_top, cs.g.pad_bottom);
      const size_t ow = conv_output_size(cs.w, cs.g.kw, cs.g.stride_w, cs.g.dil_w, cs.g.pad_left, cs.g.pad_right);
      auto x = random_vec(cs.c * cs.h * cs.w), w = random_vec(cs.c * cs.g.kh * cs.g.kw), b = random_vec(cs.c);
      sprinkle(x, 2, 29);
      x[0] = kNaN;                          // a corner: reached by padded windows
      x[cs.h * cs.w - 1] = kInf;            // the other corner
      std::vector<float> got(cs.c * oh * ow), want(got.size());
      depthwise_conv_chw(x.data(), 1, cs.c, cs.h, cs.w, 1, cs.g, w.data(), b.data(), got.data(), act, 2, &t);
      depthwise_conv_chw(x.data(), 1, cs.c, cs.h, cs.w, 1, cs.g, w.data(), b.data(), want.data(), act, 1,
                         &scalar_table());
      fam.check("nonfinite dwconv_chw " + dims({cs.c, cs.h, cs.w, cs.g.kh, cs.g.stride_h}) + " " + act_name(act.kind),
                got.data(), want.data(), got.size(), 1e-5, 0.05);
    }
  for (size_t hw : {3, 17, 70}) {
    auto x = random_vec(3 * hw);
    sprinkle(x, 1, 23);
    std::vector<float> got(3);
    global_avgpool_chw(x.data(), 1, 3, hw, got.data(), act_none(), 1, &t);
    std::vector<double> want(3), floor(3);
    for (size_t p = 0; p < 3; ++p) {
      double s = 0, mag = 0;
      for (size_t i = 0; i < hw; ++i) {
        s += x[p * hw + i];
        mag += std::isfinite(x[p * hw + i]) ? std::fabs(x[p * hw + i]) : 0.0;
      }
      want[p] = s / static_cast<double>(hw);
      floor[p] = mag / static_cast<double>(hw);
    }
    fam.check("nonfinite gavgpool_chw hw=" + std::to_string(hw), got.data(), want.data(), 3, 1e-5, floor.data());
  }
}

void test_pool_handoff(Family& fam) {
  const auto expect = [&](bool ok, const std::string& what) {
    ++fam.cases;
    if (!ok && fam.failure.empty()) fam.failure = what;
  };
  for (uint64_t spin_ns : {uint64_t{0}, uint64_t{200000}}) {
    for (size_t workers : {1, 3}) {
      ThreadPool pool(workers, spin_ns);
      std::atomic<size_t> sum{0};
      size_t want = 0;
      for (size_t job = 0; job < 3000; ++job) {
        const size_t n = 1 + job % 7, threads = 2 + job % (workers + 1);
        pool.parallel_for(n, threads, [&](size_t b, size_t e) {
          for (size_t i = b; i < e; ++i) sum.fetch_add(i + 1, std::memory_order_relaxed);
        }, job % 2 ? Partition::Dynamic : Partition::Static);
        want += n * (n + 1) / 2;
        if (job % 1000 == 999) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // workers asleep
      }
      expect(sum.load() == want, "back-to-back jobs: sum " + std::to_string(sum.load()) + " != " +
                                     std::to_string(want) + " (spin " + std::to_string(spin_ns) + " ns)");
      std::atomic<size_t> nested{0};
      pool.parallel_for(4, workers + 1, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i)
          pool.parallel_for(5, workers + 1, [&](size_t b2, size_t e2) { nested.fetch_add(e2 - b2); });
      });
      expect(nested.load() == 20, "nested parallel_for visited " + std::to_string(nested.load()) + " of 20");
      std::atomic<size_t> concurrent{0};
      std::vector<std::thread> callers;
      for (int c = 0; c < 3; ++c)
        callers.emplace_back([&] {
          for (int job = 0; job < 300; ++job)
            pool.parallel_for(9, workers + 1, [&](size_t b, size_t e) { concurrent.fetch_add(e - b); });
        });
      for (auto& t : callers) t.join();
      expect(concurrent.load() == 3 * 300 * 9, "concurrent callers visited " + std::to_string(concurrent.load()));
    }
  }
}

void test_thread_pool() {
  Family fam{"thread_pool", "any"};
  for (Partition part : {Partition::Static, Partition::Dynamic})
    for (size_t threads : {1, 2, 3, 8})
      for (size_t n : {1, 2, 5, 13, 1000})
        for (size_t chunk : {1, 3, 64}) {  // Dynamic: own range first, then stolen chunks
        std::vector<std::atomic<int>> hits(n);
        for (auto& h : hits) h = 0;
        parallel_for(n, threads, [&](size_t b, size_t e) {
          for (size_t i = b; i < e; ++i) hits[i].fetch_add(1);
        }, part, chunk);
        ++fam.cases;
        for (size_t i = 0; i < n; ++i)
          if (hits[i] != 1 && fam.failure.empty())
            fam.failure = "index " + std::to_string(i) + " visited " + std::to_string(hits[i].load()) + " times";
      }
  if (!g_quick) test_pool_handoff(fam);
  report(fam);
}


// ---------------------------------------------------------------------------------------------
// LQ-Nets bitwise GEMM / convolution (lq.h): each variant of the level (avx512: the vpshufb one and,
// where the CPU has it, VPOPCNTDQ) bit for bit against the scalar microkernel and encoder, and whole
// layers (GEMM and convolution, 1 and 3 threads) bit for bit against the scalar variant and within
// 1e-5 of a double dense evaluation (decoded weights, quantized inputs, zero padding).

LqActQuant lq_random_quant(size_t kx, float offset) {
  LqActQuant q;
  q.kx = kx;
  q.offset = offset;
  q.alpha = random_vec(kx, 0.1f, 1.0f);
  std::sort(q.alpha.begin(), q.alpha.end());
  const size_t levels = size_t{1} << kx;
  std::vector<std::pair<double, unsigned>> lv(levels);
  for (unsigned v = 0; v < levels; ++v) {
    double s = offset;
    for (size_t i = 0; i < kx; ++i) s += ((v >> i) & 1u) ? q.alpha[i] : 0.0f;
    lv[v] = {s, v};
  }
  std::stable_sort(lv.begin(), lv.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t l = 0; l < levels; ++l) q.codes.push_back(static_cast<uint8_t>(lv[l].second));
  for (size_t l = 0; l + 1 < levels; ++l) q.thresholds.push_back(static_cast<float>((lv[l].first + lv[l + 1].first) / 2));
  return q;
}

double lq_level(const LqActQuant& q, float x) {
  size_t l = 0;
  for (float t : q.thresholds) l += t < x;
  double s = q.offset;
  for (size_t i = 0; i < q.kx; ++i) s += ((q.codes[l] >> i) & 1u) ? q.alpha[i] : 0.0f;
  return s;
}

// Inputs with ties on thresholds and infinities.
std::vector<float> lq_random_input(size_t n, const LqActQuant& q) {
  std::vector<float> x = random_vec(n, -2.0f, 2.0f);
  for (size_t i = 0; i < n; i += 5) x[i] = q.thresholds[(i / 5) % q.thresholds.size()];
  if (n > 3) x[3] = std::numeric_limits<float>::infinity();
  if (n > 8) x[8] = -std::numeric_limits<float>::infinity();
  return x;
}

// Weight planes in the uint32 format (O, kw, ceil(n/32)), tails zero; basis ascending.
void lq_random_weights(size_t o, size_t kw, size_t n, std::vector<uint32_t>& planes, std::vector<float>& basis,
                       std::vector<double>& dense) {
  const size_t w32 = (n + 31) / 32;
  planes.assign(o * kw * w32, 0);
  for (size_t i = 0; i < planes.size(); ++i) planes[i] = static_cast<uint32_t>(rng());
  for (size_t r = 0; r < o * kw; ++r)
    if (n % 32) planes[r * w32 + w32 - 1] &= (1u << (n % 32)) - 1;
  basis = random_vec(o * kw, 0.05f, 1.0f);
  for (size_t oc = 0; oc < o; ++oc) std::sort(basis.begin() + oc * kw, basis.begin() + (oc + 1) * kw);
  dense.assign(o * n, 0.0);
  for (size_t oc = 0; oc < o; ++oc)
    for (size_t j = 0; j < kw; ++j)
      for (size_t k = 0; k < n; ++k) {
        const bool bit = (planes[(oc * kw + j) * w32 + k / 32] >> (k % 32)) & 1u;
        dense[oc * n + k] += basis[oc * kw + j] * (bit ? 1.0 : -1.0);
      }
}

bool same_bits(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

void test_lq(const KernelTable& t) {
  reseed();
  std::vector<LqVariant> variants{lq_variant_for(t.isa, "shuffle")};
  if (lq_variant_for(t.isa, "auto") != variants[0]) variants.push_back(lq_variant_for(t.isa, "auto"));
  const LqKernels& ref = lq_kernels(LqVariant::Scalar);
  for (LqVariant v : variants) {
    const LqKernels& k = lq_kernels(v);
    Family fam{std::string("lq_") + lq_variant_name(v), t.name};
    auto expect = [&](bool ok, const std::string& what) {
      ++fam.cases;
      if (!ok && fam.failure.empty()) fam.failure = what + " (" + k.gemm_name + ")";
    };
    // The microkernel: every mr, 1-3 panels, word counts past the 31-word byte-count flush.
    for (size_t mr = 1; mr <= k.mr_max; ++mr)
      for (size_t kc : {1, 2, 3, 13, 40})
        for (size_t taps : {1, 3, 9}) {
          const size_t np = 1 + (mr + kc) % 3, pstride = taps * kc * kLqNr + 8 * (kc % 2);
          // Each x-row reads its taps at shuffled word offsets of its own buffer.
          std::vector<uint64_t> words(taps * mr * kc), w(np * pstride);
          for (auto& x : words) x = (static_cast<uint64_t>(rng()) << 32) | rng();
          for (auto& x : w) x = (static_cast<uint64_t>(rng()) << 32) | rng();
          std::vector<const uint64_t*> a(mr);
          for (size_t r = 0; r < mr; ++r) a[r] = words.data() + r * taps * kc;
          std::vector<ptrdiff_t> tap_off(taps);
          for (size_t t = 0; t < taps; ++t) tap_off[t] = static_cast<ptrdiff_t>(((t * 5 + 2) % taps) * kc);
          std::vector<int32_t> c1(mr * np * kLqNr, -1), c2(mr * np * kLqNr, -2);
          ref.gemm(mr, kc, taps, a.data(), tap_off.data(), w.data(), np, pstride, c1.data());
          k.gemm(mr, kc, taps, a.data(), tap_off.data(), w.data(), np, pstride, c2.data());
          expect(c1 == c2, "ukernel mr=" + std::to_string(mr) + " kc=" + std::to_string(kc) + " taps=" +
                               std::to_string(taps) + " np=" + std::to_string(np));
        }
    // The combination: bit for bit the scalar one (fused multiply-adds in the same order).
    for (size_t kx : {1, 3, 8})
      for (size_t kw : {1, 2, 8}) {
        const size_t pixels = 5, stride = 24;
        std::vector<int32_t> c(pixels * kx * kw * kLqNr), cnt(pixels * kx);
        for (auto& v : c) v = static_cast<int32_t>(rng() % 2000);
        for (auto& v : cnt) v = static_cast<int32_t>(rng() % 2000);
        const std::vector<float> coef = random_vec(kw * kx * kLqNr);
        const std::vector<float> base = random_vec(pixels * stride, -10.0f, 10.0f);
        std::vector<float> y1(pixels * stride, 1.0f), y2(pixels * stride, 1.0f);
        const size_t bstride = kx == 3 ? 0 : stride;  // one shared base row, or one a pixel
        const float lo = kw == 2 ? -200.0f : -std::numeric_limits<float>::infinity();
        const float hi = kw == 2 ? 300.0f : std::numeric_limits<float>::infinity();
        ref.combine(pixels, kx, kw, c.data(), cnt.data(), coef.data(), base.data(), bstride, y1.data(), stride, lo, hi);
        k.combine(pixels, kx, kw, c.data(), cnt.data(), coef.data(), base.data(), bstride, y2.data(), stride, lo, hi);
        expect(same_bits(y1.data(), y2.data(), y1.size()), "combine kx=" + std::to_string(kx) + " kw=" + std::to_string(kw));
      }
    // The encoder: every kx, tails, ties, infinities, NaN; words past n must come back zero.
    for (size_t kx = 1; kx <= 8; ++kx)
      for (size_t n : {1, 7, 16, 33, 64, 100, 257})
        for (bool nan : {false, true}) {
          const LqActQuant q = lq_random_quant(kx, kx % 2 ? -0.5f : 0.0f);
          std::vector<float> x = lq_random_input(n, q);
          if (nan) x[n / 2] = std::numeric_limits<float>::quiet_NaN();
          const size_t words = (n + 63) / 64 + 1;
          std::vector<uint64_t> p1(kx * words, ~uint64_t{0}), p2(kx * words, ~uint64_t{0});
          std::vector<int32_t> c1(kx), c2(kx);
          uint8_t n1 = 2, n2 = 2;
          ref.encode(x.data(), 1, n, q, words, p1.data(), c1.data(), &n1);
          k.encode(x.data(), 1, n, q, words, p2.data(), c2.data(), &n2);
          expect(n1 == nan && n2 == nan && p1 == p2 && c1 == c2,
                 std::string("encode ") + k.encode_name + " kx=" + std::to_string(kx) + " n=" + std::to_string(n));
          // Three rows a call: the same as one at a time.
          std::vector<float> x3 = lq_random_input(3 * n, q);
          x3[n + n / 2] = std::numeric_limits<float>::quiet_NaN();
          std::vector<uint64_t> p3(3 * kx * words, ~uint64_t{0}), p4(3 * kx * words);
          std::vector<int32_t> c3(3 * kx), c4(3 * kx);
          uint8_t n3[3], n4[3];
          k.encode(x3.data(), 3, n, q, words, p3.data(), c3.data(), n3);
          for (size_t r = 0; r < 3; ++r)
            ref.encode(x3.data() + r * n, 1, n, q, words, p4.data() + r * kx * words, c4.data() + r * kx, n4 + r);
          expect(p3 == p4 && c3 == c4 && std::memcmp(n3, n4, 3) == 0 && n3[1] == 1,
                 std::string("encode 3 rows ") + k.encode_name + " kx=" + std::to_string(kx) + " n=" + std::to_string(n));
        }
    // Whole GEMM layers.
    struct GemmCase { size_t kw, kx, n, m, o; float offset; bool bias; };
    for (const GemmCase& gc : {GemmCase{1, 1, 784, 1, 70, 0.0f, true}, GemmCase{2, 3, 65, 5, 13, -0.7f, false},
                               GemmCase{3, 2, 700, 3, 10, 0.4f, true}, GemmCase{8, 8, 130, 2, 9, -0.2f, true},
                               GemmCase{4, 4, 5, 9, 17, 0.0f, false}}) {
      const LqActQuant q = lq_random_quant(gc.kx, gc.offset);
      std::vector<uint32_t> planes;
      std::vector<float> basis;
      std::vector<double> dense;
      lq_random_weights(gc.o, gc.kw, gc.n, planes, basis, dense);
      const std::vector<float> bias = random_vec(gc.o);
      const std::vector<float> x = lq_random_input(gc.m * gc.n, q);
      const LqLayer l0 = lq_prepare_gemm(planes.data(), basis.data(), gc.o, gc.kw, gc.n, q, gc.bias ? bias.data() : nullptr, ref);
      const LqLayer l1 = lq_prepare_gemm(planes.data(), basis.data(), gc.o, gc.kw, gc.n, q, gc.bias ? bias.data() : nullptr, k);
      std::vector<float> y0(gc.m * gc.o), y1(gc.m * gc.o), y3(gc.m * gc.o);
      lq_gemm(l0, x.data(), gc.m, y0.data(), act_none(), 1);
      lq_gemm(l1, x.data(), gc.m, y1.data(), act_none(), 1);
      lq_gemm(l1, x.data(), gc.m, y3.data(), act_none(), 3);
      const std::string what = "gemm " + dims({gc.kw, gc.kx, gc.n, gc.m, gc.o});
      expect(same_bits(y0.data(), y1.data(), y0.size()) && same_bits(y1.data(), y3.data(), y1.size()), what + " vs scalar");
      std::vector<double> want(gc.m * gc.o), floor(gc.m * gc.o);
      for (size_t r = 0; r < gc.m; ++r)
        for (size_t oc = 0; oc < gc.o; ++oc) {
          double s = gc.bias ? bias[oc] : 0.0, f = gc.bias ? std::fabs(bias[oc]) : 0.0;
          for (size_t kk = 0; kk < gc.n; ++kk) {
            const double lv = lq_level(q, x[r * gc.n + kk]);
            s += lv * dense[oc * gc.n + kk];
            f += std::fabs(lv * dense[oc * gc.n + kk]);
          }
          want[r * gc.o + oc] = s;
          floor[r * gc.o + oc] = std::max(f, 1.0);
        }
      fam.check(what + " vs dense", y1.data(), want.data(), want.size(), 1e-5, floor.data());
    }
    // Whole convolution layers: padding with c != 0 (border sums), strides, dilations.
    struct ConvCase { size_t c, o, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, h, w, bits; float offset; };
    for (const ConvCase& cc : {ConvCase{3, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 6, 5, 1, 0.0f},
                               ConvCase{70, 10, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 7, 6, 2, -0.6f},
                               ConvCase{16, 9, 3, 2, 1, 2, 2, 1, 2, 0, 1, 3, 7, 8, 3, 0.5f},
                               ConvCase{64, 17, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 4, 5, 1, -0.3f}}) {
      const size_t n = cc.c * cc.kh * cc.kw, kwb = cc.bits, kx = 4 - cc.bits + 1;
      const LqActQuant q = lq_random_quant(kx, cc.offset);
      std::vector<uint32_t> planes;
      std::vector<float> basis;
      std::vector<double> dense;
      lq_random_weights(cc.o, kwb, n, planes, basis, dense);
      const std::vector<float> bias = random_vec(cc.o);
      std::vector<float> x = lq_random_input(2 * cc.h * cc.w * cc.c, q);
      x[5 * cc.c + 1] = std::numeric_limits<float>::quiet_NaN();  // image 0, pixel 5
      LqConvGeometry g;
      g.kh = cc.kh, g.kw = cc.kw, g.stride_h = cc.sh, g.stride_w = cc.sw, g.dil_h = cc.dh, g.dil_w = cc.dw;
      g.pad_top = cc.pt, g.pad_left = cc.pl, g.pad_bottom = cc.pb, g.pad_right = cc.pr;
      const size_t oh = lq_conv_out(cc.h, cc.kh, cc.sh, cc.dh, cc.pt, cc.pb);
      const size_t ow = lq_conv_out(cc.w, cc.kw, cc.sw, cc.dw, cc.pl, cc.pr);
      const LqLayer l0 = lq_prepare_conv(planes.data(), basis.data(), cc.o, kwb, cc.c, cc.kh, cc.kw, q, bias.data(), ref);
      const LqLayer l1 = lq_prepare_conv(planes.data(), basis.data(), cc.o, kwb, cc.c, cc.kh, cc.kw, q, bias.data(), k);
      const size_t total = 2 * oh * ow * cc.o;
      std::vector<float> y0(total), y1(total), y3(total);
      lq_conv(l0, x.data(), 2, cc.h, cc.w, g, y0.data(), act_relu(), 1);
      lq_conv(l1, x.data(), 2, cc.h, cc.w, g, y1.data(), act_relu(), 1);
      lq_conv(l1, x.data(), 2, cc.h, cc.w, g, y3.data(), act_relu(), 3);
      const std::string what = "conv " + dims({cc.c, cc.o, cc.kh, cc.kw, cc.sh, cc.dh, cc.pt, cc.pr, kwb, kx});
      expect(same_bits(y0.data(), y1.data(), total) && same_bits(y1.data(), y3.data(), total), what + " vs scalar");
      std::vector<double> want(total), floor(total);
      for (size_t b = 0; b < 2; ++b)
        for (size_t oy = 0; oy < oh; ++oy)
          for (size_t ox = 0; ox < ow; ++ox)
            for (size_t oc = 0; oc < cc.o; ++oc) {
              double s = bias[oc], f = std::fabs(bias[oc]);
              bool nan = false;
              for (size_t ty = 0; ty < cc.kh; ++ty)
                for (size_t tx = 0; tx < cc.kw; ++tx) {
                  const long iy = static_cast<long>(oy * cc.sh + ty * cc.dh) - static_cast<long>(cc.pt);
                  const long ix = static_cast<long>(ox * cc.sw + tx * cc.dw) - static_cast<long>(cc.pl);
                  if (iy < 0 || ix < 0 || iy >= static_cast<long>(cc.h) || ix >= static_cast<long>(cc.w)) continue;
                  for (size_t ch = 0; ch < cc.c; ++ch) {
                    const float xv = x[((b * cc.h + static_cast<size_t>(iy)) * cc.w + static_cast<size_t>(ix)) * cc.c + ch];
                    nan |= std::isnan(xv);
                    const double term = lq_level(q, xv) * dense[oc * n + (ch * cc.kh + ty) * cc.kw + tx];
                    s += term;
                    f += std::fabs(term);
                  }
                }
              const size_t i = ((b * oh + oy) * ow + ox) * cc.o + oc;
              want[i] = nan ? std::numeric_limits<double>::quiet_NaN() : std::max(s, 0.0);
              floor[i] = std::max(f, 1.0);
            }
      fam.check(what + " vs dense", y1.data(), want.data(), total, 1e-5, floor.data());
    }
    report(fam);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<Isa> isas = supported_isas();
  const char* env = std::getenv("EDGESDK_CPU_ISA");
  std::string only = env != nullptr ? env : "";
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--quick") g_quick = true;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--isa") only = argv[i + 1];
    if (std::string(argv[i]) == "--only") g_only = argv[i + 1];
    if (std::string(argv[i]) == "--seed") g_seed = static_cast<unsigned>(std::strtoul(argv[i + 1], nullptr, 10));
  }
  if (!only.empty()) {
    try {
      isas = {parse_isa(only)};
      (void)kernels_for(isas[0]);
    } catch (const std::exception& e) {
      std::printf("FAIL setup %s %s\n", only.c_str(), e.what());
      return 2;
    }
  }
  std::printf("supported isas:");
  for (Isa isa : supported_isas()) std::printf(" %s", isa_name(isa));
  std::printf("\n");
  test_thread_pool();
  std::string checked;
  for (Isa isa : isas) {
    const KernelTable& t = kernels_for(isa);
    std::printf("KERNELS %s", t.name);
    for (const auto& [slot, name] : kernel_names(isa)) std::printf(" %s=%s", slot, name);
    std::printf("\n");
    if (g_only.empty() || g_only == "test_gemm") test_gemm(t);
    if (g_only.empty() || g_only == "test_conv") test_conv(t);
    if (g_only.empty() || g_only == "test_depthwise") test_depthwise(t);
    if (g_only.empty() || g_only == "test_pool") test_pool(t);
    if (g_only.empty() || g_only == "test_eltwise") test_eltwise(t);
    if (g_only.empty() || g_only == "test_activation") test_activation(t);
    if (g_only.empty() || g_only == "test_softmax") test_softmax(t);
    if (g_only.empty() || g_only == "test_clustered") test_clustered(t);
    if (g_only.empty() || g_only == "test_nnm") test_nnm(t);
    if (g_only.empty() || g_only == "test_nonfinite") test_nonfinite(t);
    if (g_only.empty() || g_only == "test_winograd") test_winograd(t);
    if (g_only.empty() || g_only == "test_spmm") test_spmm(t);
    if (g_only.empty() || g_only == "test_qu8_requant") test_qu8_requant(t);
    if (g_only.empty() || g_only == "test_qu8_gemm") test_qu8_gemm(t);
    if (g_only.empty() || g_only == "test_qu8_conv") test_qu8_conv(t);
    if (g_only.empty() || g_only == "test_qu8_narrow_pairs") test_qu8_narrow_pairs(t);
    if (g_only.empty() || g_only == "test_qu8_overread") test_qu8_overread(t);
    if (g_only.empty() || g_only == "test_qu8_igemm_ukernel") test_qu8_igemm_ukernel(t);
    if (g_only.empty() || g_only == "test_qu8_depthwise") test_qu8_depthwise(t);
    if (g_only.empty() || g_only == "test_qu8_eltwise") test_qu8_eltwise(t);
    if (g_only.empty() || g_only == "test_qu8_lut_concat") test_qu8_lut_concat(t);
    if (g_only.empty() || g_only == "test_qu8_pool") test_qu8_pool(t);
    if (g_only.empty() || g_only == "test_qu8_convert") test_qu8_convert(t);
    if (g_only.empty() || g_only == "test_dwconv_chw") test_dwconv_chw(t);
    if (g_only.empty() || g_only == "test_gavgpool_chw") test_gavgpool_chw(t);
    if (g_only.empty() || g_only == "test_transpose") test_transpose(t);
    if (g_only.empty() || g_only == "test_lq") test_lq(t);
    if (t.has_f16_arith()) {
      if (g_only.empty() || g_only == "test_f16_gemm") test_f16_gemm(t);
      if (g_only.empty() || g_only == "test_f16_conv") test_f16_conv(t);
      if (g_only.empty() || g_only == "test_f16_depthwise") test_f16_depthwise(t);
      if (g_only.empty() || g_only == "test_f16_nonfinite") test_f16_nonfinite(t);
      if (g_only.empty() || g_only == "measure_f16_gemm") measure_f16_gemm(t);
    }
    checked += std::string(checked.empty() ? "" : " ") + t.name;
  }
  std::printf("checked isas: %s\n", checked.c_str());
  for (const Family& f : g_results)
    if (!f.ok()) return 1;
  return 0;
}
