// Micro-benchmarks of the kernel library on the running CPU:
//   GEMM GFLOPS at M=N=K=512 and 1024 (1 and 2 threads, packed fp32 weights);
//   a 4096x4096 fully-connected layer at batch 1: dense fp32 GEMV vs fp16 weights vs 4-bit
//   clustered (per-layer codebook), 1 and 2 threads.
//   int8 (--qu8, or --qu8-only for that alone): the qu8 convolution (Qu8ConvPlan, requantization
//   fused) against the fp32 one (ConvPlan) on the same shapes at 1 thread: MobileNetV2's 1x1
//   convolutions (224 x 224 input) and ResNet-18's 3x3 ones; GOPS (2 x MACs per second) of each and
//   their ratio, per shape and over each network's list (total MACs / total time); and MobileNetV2's
//   3x3 depthwise convolutions, qu8 against fp32.
// Each figure is the best of repeated runs over at least ~0.3 s (weights stay packed; inputs
// warm), the protocol of seed 001 §4 minus cache eviction.
//   Winograd (--winograd, alone): F(4x4, 3x3) against the direct convolution on 3x3 stride-1 layers
//   (ResNet-18's and others), 1 and 2 threads (--threads N: N only), and what ConvPlan's rule picks;
//   --cold evicts the caches before each run (the weights then come from memory, as in a network).
//   Sparse 1x1 (--sparse, alone): sparse_conv1x1 (CHW, unstructured pruning at 50-95%, the packer's
//   block choice) against the dense fp32 1x1 convolution the session runs (ConvPlan: one GEMM over NHWC)
//   on MobileNetV2's pointwise shapes, 1 thread (--threads N: N); the ratio per shape and sparsity, the
//   geometric mean per sparsity and the crossover; the non-finite scan's share of the sparse time; and
//   the cost of a stored entry per block height (what sparse_block_cost() encodes).
//   CHW (--chw, alone): the CHW depthwise kernels (depthwise_conv_chw) against the NHWC ones
//   (depthwise_conv) on MobileNetV2's depthwise layers (224 x 224) and MobileNetV3's 5x5 ones, 1 thread
//   (--threads N: N), ReLU6 fused; CHW global average pooling against NHWC; the f32 transpose
//   (NCHW -> NHWC and back) against a plain loop.
//   LQ (--lq, alone): the LQ-Nets bitwise GEMM / convolution (lq.h), every variant this CPU runs
//   (scalar, avx2, avx512bw, avx512vpopcnt; --variant NAME: that one), (Kw, Kx) = (1, 1), (2, 2),
//   (3, 3), against the fp32 GEMM / ConvPlan of the same shape, 1 thread (--threads N: N): the
//   LQ-Nets thesis MLP layer (M=1, 784 -> 700), M=64 1024 -> 1024, a 3x3 convolution 56x56x64 -> 64.
// Usage: kernel_bench [--isa name] [--quick] [--qu8 | --qu8-only | --winograd [--threads N] [--cold] |
//                      --sparse [--threads N] | --chw [--threads N] | --lq [--variant NAME] [--threads N]]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/operators.h"
#include "kernels/operators_qu8.h"
#include "kernels/operators_sparse.h"
#include "kernels/lq.h"

using namespace edgesdk::kernels;

namespace {

// Best of repeated runs of f, each after evict() (not timed): at least min_reps runs and min_total
// seconds of f.
template <class F, class E>
double best_seconds_after(F&& f, E&& evict, double min_total = 0.3, int min_reps = 5) {
  f();  // warm-up
  double best = 1e30, total = 0;
  int reps = 0;
  while (total < min_total || reps < min_reps) {
    evict();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = s < best ? s : best;
    total += s;
    ++reps;
  }
  return best;
}

// Best of repeated runs of f (warm caches): at least min_reps runs and min_total seconds of f.
template <class F>
double best_seconds(F&& f, double min_total = 0.3, int min_reps = 5) {
  return best_seconds_after(f, [] {}, min_total, min_reps);
}

// Writes one byte per 64-byte line of a 256 MiB buffer: pushes a layer's weights out of the caches,
// as the other layers of a network do between two runs of it.
void evict_caches() {
  static std::vector<char> buffer(256u << 20);
  static char round = 0;
  ++round;
  for (size_t i = 0; i < buffer.size(); i += 64) buffer[i] = round;
}

std::vector<float> random_vec(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

struct ConvShape {
  const char* net;
  size_t h, w, cin, cout, k, stride;
};

// MobileNetV2 (224 x 224): the expansion and projection 1x1 convolutions of each resolution.
const ConvShape kQu8Shapes[] = {
    {"mobilenetv2", 112, 112, 32, 16, 1, 1},  {"mobilenetv2", 112, 112, 16, 96, 1, 1},
    {"mobilenetv2", 56, 56, 24, 144, 1, 1},   {"mobilenetv2", 56, 56, 144, 24, 1, 1},
    {"mobilenetv2", 28, 28, 32, 192, 1, 1},   {"mobilenetv2", 28, 28, 192, 32, 1, 1},
    {"mobilenetv2", 14, 14, 64, 384, 1, 1},   {"mobilenetv2", 14, 14, 384, 64, 1, 1},
    {"mobilenetv2", 14, 14, 96, 576, 1, 1},   {"mobilenetv2", 14, 14, 576, 96, 1, 1},
    {"mobilenetv2", 7, 7, 160, 960, 1, 1},    {"mobilenetv2", 7, 7, 960, 160, 1, 1},
    {"mobilenetv2", 7, 7, 320, 1280, 1, 1},
    // ResNet-18: the 3x3 stride-1 convolutions of each stage.
    {"resnet18", 56, 56, 64, 64, 3, 1},       {"resnet18", 28, 28, 128, 128, 3, 1},
    {"resnet18", 14, 14, 256, 256, 3, 1},     {"resnet18", 7, 7, 512, 512, 3, 1},
};

void bench_qu8(const KernelTable* t, bool quick) {
  std::printf("int8 vs fp32 convolution at 1 thread (%s: qu8 %s, fp32 %s)\n", t->name, t->names.qu8_igemm,
              t->names.igemm_f32w);
  std::mt19937 rng(11);
  std::string net;
  double net_macs = 0, net_f32 = 0, net_qu8 = 0;
  auto flush = [&] {
    if (!net.empty())
      std::printf("  %-12s total: fp32 %.1f GOPS, qu8 %.1f GOPS, qu8/fp32 %.2fx\n", net.c_str(),
                  2 * net_macs / net_f32 * 1e-9, 2 * net_macs / net_qu8 * 1e-9, net_f32 / net_qu8);
    net_macs = net_f32 = net_qu8 = 0;
  };
  for (const ConvShape& s : kQu8Shapes) {
    if (net != s.net) {
      flush();
      net = s.net;
    }
    ConvGeometry g;
    g.kh = g.kw = s.k;
    g.stride_h = g.stride_w = s.stride;
    g.pad_top = g.pad_left = g.pad_bottom = g.pad_right = s.k / 2;
    const size_t kdim = s.k * s.k * s.cin;
    auto wf = random_vec(s.cout * kdim, rng), xf = random_vec(s.h * s.w * s.cin, rng);
    std::vector<int8_t> w8(wf.size());
    std::vector<uint8_t> x8(xf.size());
    for (size_t i = 0; i < wf.size(); ++i) w8[i] = static_cast<int8_t>(wf[i] * 127);
    for (size_t i = 0; i < xf.size(); ++i) x8[i] = static_cast<uint8_t>((xf[i] + 1) * 127);
    std::vector<int32_t> bias(s.cout, 100), mult(s.cout, 1 << 30), shift(s.cout, -10);
    auto packed_f32 = pack_gemm_weights(wf.data(), s.cout, kdim, WeightLayout::NK, nullptr, WeightType::F32, t);
    auto packed_qu8 = pack_qu8_gemm_weights(w8.data(), s.cout, kdim, bias.data(), 128, mult.data(), shift.data(), 128,
                                            0, 255, t, s.k, s.k);
    ConvPlan plan_f32(1, s.h, s.w, s.cin, g, packed_f32);
    Qu8ConvPlan plan_qu8(1, s.h, s.w, s.cin, g, packed_qu8);
    std::vector<float> yf(plan_f32.out_h() * plan_f32.out_w() * s.cout);
    std::vector<uint8_t> y8(yf.size());
    const double min_time = quick ? 0.05 : 0.3;
    const double tf = best_seconds([&] { plan_f32.run(xf.data(), yf.data(), act_none(), 1); }, min_time);
    const double tq = best_seconds([&] { plan_qu8.run(x8.data(), y8.data(), 1); }, min_time);
    const double macs = static_cast<double>(plan_f32.out_h() * plan_f32.out_w()) * s.cout * kdim;
    std::printf("  %-12s %3zux%-3zu %4zu->%-4zu %zux%zu: fp32 %6.1f GOPS (%7.3f ms), qu8 %6.1f GOPS (%7.3f ms): %.2fx\n",
                s.net, s.h, s.w, s.cin, s.cout, s.k, s.k, 2 * macs / tf * 1e-9, tf * 1e3, 2 * macs / tq * 1e-9, tq * 1e3,
                tf / tq);
    net_macs += macs;
    net_f32 += tf;
    net_qu8 += tq;
  }
  flush();
  // MobileNetV2's 3x3 depthwise convolutions: int8 against fp32 (memory-bound more than compute-bound).
  struct DwShape { size_t h, w, c, stride; };
  const DwShape dw_shapes[] = {{112, 112, 32, 1}, {112, 112, 96, 2}, {56, 56, 144, 1}, {56, 56, 144, 2},
                               {28, 28, 192, 1}, {14, 14, 384, 1}, {14, 14, 576, 1}, {7, 7, 960, 1}};
  double dw_macs = 0, dw_f32 = 0, dw_qu8 = 0, dw_qu8_7 = 0;
  for (const DwShape& s : dw_shapes) {
    ConvGeometry g;
    g.kh = g.kw = 3;
    g.stride_h = g.stride_w = s.stride;
    g.pad_top = g.pad_left = g.pad_bottom = g.pad_right = 1;
    const size_t oh = conv_output_size(s.h, 3, s.stride, 1, 1, 1), ow = conv_output_size(s.w, 3, s.stride, 1, 1, 1);
    auto xf = random_vec(s.h * s.w * s.c, rng), wf = random_vec(9 * s.c, rng), bf = random_vec(s.c, rng);
    std::vector<uint8_t> x8(xf.size()), y8(oh * ow * s.c);
    std::vector<int8_t> w8(wf.size());
    for (size_t i = 0; i < xf.size(); ++i) x8[i] = static_cast<uint8_t>((xf[i] + 1) * 127);
    for (size_t i = 0; i < wf.size(); ++i) w8[i] = static_cast<int8_t>(wf[i] * 127);
    std::vector<int8_t> w7(w8.size());  // 7-bit weights ([-64, 64]): the narrow kernel where a level has one
    for (size_t i = 0; i < w8.size(); ++i) w7[i] = static_cast<int8_t>(w8[i] / 2);
    std::vector<int32_t> bias(s.c, 100), mult(s.c, 1 << 30), shift(s.c, -10);
    std::vector<float> yf(y8.size());
    const double min_time = quick ? 0.05 : 0.3;
    const double tf = best_seconds([&] {
      depthwise_conv(xf.data(), 1, s.h, s.w, s.c, 1, g, wf.data(), bf.data(), yf.data(), act_none(), 1, t);
    }, min_time);
    // Plans built once, as a session does (packing is not timed).
    const Qu8DepthwisePlan plan8(1, s.h, s.w, s.c, 1, g, w8.data(), bias.data(), 128, mult.data(), shift.data(), 128,
                                 0, 255, t);
    const Qu8DepthwisePlan plan7(1, s.h, s.w, s.c, 1, g, w7.data(), bias.data(), 128, mult.data(), shift.data(), 128,
                                 0, 255, t);
    const double tq = best_seconds([&] { plan8.run(x8.data(), y8.data(), 1); }, min_time);
    const double t7 = best_seconds([&] { plan7.run(x8.data(), y8.data(), 1); }, min_time);
    const double macs = 9.0 * oh * ow * s.c;
    std::printf("  depthwise    %3zux%-3zu %4zu s%zu 3x3: fp32 %6.1f GOPS (%7.3f ms), qu8 %6.1f GOPS (%7.3f ms): %.2fx;"
                " 7-bit w %7.3f ms: %.2fx\n",
                s.h, s.w, s.c, s.stride, 2 * macs / tf * 1e-9, tf * 1e3, 2 * macs / tq * 1e-9, tq * 1e3, tf / tq,
                t7 * 1e3, tf / t7);
    dw_macs += macs;
    dw_f32 += tf;
    dw_qu8 += tq;
    dw_qu8_7 += t7;
  }
  std::printf("  depthwise    total: fp32 %.1f GOPS, qu8 %.1f GOPS, qu8/fp32 %.2fx, 7-bit w %.2fx (%s)\n",
              2 * dw_macs / dw_f32 * 1e-9,
              2 * dw_macs / dw_qu8 * 1e-9, dw_f32 / dw_qu8, dw_f32 / dw_qu8_7,
              t->names.qu8_depthwise_narrow != nullptr ? t->names.qu8_depthwise_narrow : t->names.qu8_depthwise);
}

// Winograd F(4x4, 3x3) against the direct (indirect GEMM) convolution on 3x3 stride-1 layers, pad 1:
// GOPS counted as the direct convolution's MACs (2 x N x OH x OW x C x K x 9 per second) for both,
// so the figures compare times; the max difference between the two relative to the output's
// largest magnitude (and on ResNet-18's and SqueezeNet's layers each one's error against a float64
// convolution); and whether ConvPlan's Auto rule picks Winograd there.
void bench_winograd(const KernelTable* t, bool quick, const std::vector<size_t>& thread_counts, bool cold) {
  std::printf("winograd F(4x4,3x3) vs direct convolution (%s: gemm %s, transforms %s / %s), %s\n", t->name,
              t->names.igemm_f32w, t->names.winograd_input, t->names.winograd_output,
              cold ? "cold caches (256 MiB written before each run)" : "warm caches");
  const auto no_eviction = [] {};
  struct Shape { const char* net; size_t n, h, w, c, k; };
  const Shape shapes[] = {
      // ResNet-18 (224 x 224): the 3x3 stride-1 convolutions of each stage.
      {"resnet18", 1, 56, 56, 64, 64},     {"resnet18", 1, 28, 28, 128, 128},  {"resnet18", 1, 14, 14, 256, 256},
      {"resnet18", 1, 7, 7, 512, 512},
      // SqueezeNet 1.1 (224 x 224): the fire modules' 3x3 expansions.
      {"squeezenet", 1, 55, 55, 16, 64},   {"squeezenet", 1, 27, 27, 32, 128}, {"squeezenet", 1, 13, 13, 48, 192},
      {"squeezenet", 1, 13, 13, 64, 256},
      // VGG-16 (224 x 224) and others: the rule's edges (channels, tiles, weight size, batch).
      {"vgg16", 1, 224, 224, 3, 64},       {"vgg16", 1, 224, 224, 64, 64},     {"vgg16", 1, 112, 112, 128, 128},
      {"vgg16", 1, 56, 56, 256, 256},      {"vgg16", 1, 28, 28, 512, 512},     {"vgg16", 1, 14, 14, 512, 512},
      {"other", 1, 112, 112, 32, 32},      {"other", 1, 56, 56, 8, 8},         {"other", 1, 56, 56, 16, 16},
      {"other", 1, 28, 28, 8, 32},         {"other", 1, 28, 28, 32, 8},        {"other", 1, 28, 28, 16, 16},
      {"other", 1, 14, 14, 32, 32},        {"other", 1, 14, 14, 64, 64},       {"other", 1, 14, 14, 128, 128},
      {"other", 1, 10, 10, 256, 256},      {"other", 1, 7, 7, 64, 64},         {"other", 1, 7, 7, 128, 128},
      {"other", 1, 7, 7, 256, 256},        {"other", 2, 7, 7, 512, 512},       {"other", 4, 7, 7, 512, 512},
      {"other", 1, 56, 56, 128, 128},      {"other", 1, 28, 28, 256, 256},
  };
  std::mt19937 rng(13);
  for (size_t threads : thread_counts) {
    double net_macs = 0, net_direct = 0, net_best = 0;
    for (const Shape& s : shapes) {
      ConvGeometry g;
      g.kh = g.kw = 3;
      g.pad_top = g.pad_left = g.pad_bottom = g.pad_right = 1;
      const size_t kdim = 9 * s.c;
      // ResNet-like data: post-ReLU inputs, He-scaled weights, small biases.
      std::normal_distribution<float> normal(0.0f, 1.0f);
      std::vector<float> wf(s.k * kdim), xf(s.n * s.h * s.w * s.c), bf(s.k);
      for (auto& v : wf) v = normal(rng) * std::sqrt(2.0f / static_cast<float>(kdim));
      for (auto& v : xf) v = std::max(0.0f, normal(rng));
      for (auto& v : bf) v = 0.1f * normal(rng);
      auto packed = pack_gemm_weights(wf.data(), s.k, kdim, WeightLayout::NK, bf.data(), WeightType::F32, t);
      ConvPlan direct(s.n, s.h, s.w, s.c, g, packed, ConvAlgorithm::Direct);
      ConvPlan wino(s.n, s.h, s.w, s.c, g, packed, ConvAlgorithm::Winograd);
      ConvPlan autoplan(s.n, s.h, s.w, s.c, g, packed);
      std::vector<float> yd(s.n * s.h * s.w * s.k), yw(yd.size());
      const double min_time = quick ? 0.05 : 0.3;
      const auto run_direct = [&] { direct.run(xf.data(), yd.data(), act_none(), threads); };
      const auto run_wino = [&] { wino.run(xf.data(), yw.data(), act_none(), threads); };
      // (cold: the best of 10 runs, whatever their time; each eviction takes ~50 ms)
      const double td = cold ? best_seconds_after(run_direct, evict_caches, 0.0, 10)
                             : best_seconds_after(run_direct, no_eviction, min_time);
      const double tw = cold ? best_seconds_after(run_wino, evict_caches, 0.0, 10)
                             : best_seconds_after(run_wino, no_eviction, min_time);
      double scale = 0, diff = 0;
      for (size_t i = 0; i < yd.size(); ++i) {
        scale = std::max(scale, static_cast<double>(std::fabs(yd[i])));
        diff = std::max(diff, static_cast<double>(std::fabs(yd[i] - yw[i])));
      }
      std::string accuracy;
      if (std::string(s.net) == "resnet18" || std::string(s.net) == "squeezenet") {
        // Both against a float64 direct convolution: the largest error over max |y| (the scale of
        // the tests/ops tolerance) and over the RMS of y (seed 001's table).
        const size_t oh = direct.out_h(), ow = direct.out_w();
        std::vector<double> ref(yd.size());
        for (size_t b = 0; b < s.n; ++b)
          for (size_t oy = 0; oy < oh; ++oy)
            for (size_t ox = 0; ox < ow; ++ox)
              for (size_t o = 0; o < s.k; ++o) {
                double acc = bf[o];
                for (size_t ky = 0; ky < 3; ++ky)
                  for (size_t kx = 0; kx < 3; ++kx) {
                    const long iy = static_cast<long>(oy + ky) - 1, ix = static_cast<long>(ox + kx) - 1;
                    if (iy < 0 || ix < 0 || iy >= static_cast<long>(s.h) || ix >= static_cast<long>(s.w)) continue;
                    const float* xp = xf.data() + ((b * s.h + iy) * s.w + ix) * s.c;
                    const float* wp = wf.data() + o * kdim + (ky * 3 + kx) * s.c;
                    for (size_t ch = 0; ch < s.c; ++ch) acc += static_cast<double>(xp[ch]) * wp[ch];
                  }
                ref[((b * oh + oy) * ow + ox) * s.k + o] = acc;
              }
        double ref_max = 0, ref_sq = 0, err_d = 0, err_w = 0;
        for (size_t i = 0; i < ref.size(); ++i) {
          ref_max = std::max(ref_max, std::fabs(ref[i]));
          ref_sq += ref[i] * ref[i];
          err_d = std::max(err_d, std::fabs(yd[i] - ref[i]));
          err_w = std::max(err_w, std::fabs(yw[i] - ref[i]));
        }
        const double rms = std::sqrt(ref_sq / static_cast<double>(ref.size()));
        char buf[160];
        std::snprintf(buf, sizeof buf, "; vs fp64: direct %.1e max|y| %.1e rms, winograd %.1e max|y| %.1e rms",
                      err_d / ref_max, err_d / rms, err_w / ref_max, err_w / rms);
        accuracy = buf;
      }
      const double macs = static_cast<double>(s.n * s.h * s.w) * s.k * kdim;
      std::printf("  %-10s %zux%3zux%-3zu %4zu->%-4zu threads=%zu: direct %6.1f GOPS (%7.3f ms), winograd %6.1f GOPS "
                  "(%7.3f ms): %.2fx, max diff %.1e of max |y|, auto: %s%s\n",
                  s.net, s.n, s.h, s.w, s.c, s.k, threads, 2 * macs / td * 1e-9, td * 1e3, 2 * macs / tw * 1e-9, tw * 1e3,
                  td / tw, diff / scale, autoplan.algorithm_name(), accuracy.c_str());
      if (std::string(s.net) == "resnet18") {
        net_macs += macs;
        net_direct += td;
        net_best += autoplan.is_winograd() ? tw : td;
      }
    }
    std::printf("  resnet18 3x3 stride-1 layers threads=%zu: direct %.3f ms, auto %.3f ms (%.2fx)\n", threads,
                net_direct * 1e3, net_best * 1e3, net_direct / net_best);
  }
}


// Sparse 1x1 against the dense one (see the header).
void bench_sparse(const KernelTable* t, bool quick, size_t threads) {
  std::printf("sparse 1x1 (CHW, %s / %s / %s) vs dense 1x1 ConvPlan (NHWC, %s), %s, threads=%zu\n",
              t->names.spmm_f32_nb1, t->names.spmm_f32_nb2, t->names.spmm_f32_nb4, t->names.igemm_f32w, t->name, threads);
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> u01(0.0f, 1.0f);
  const double sparsities[] = {0.5, 0.7, 0.8, 0.9, 0.95};
  constexpr size_t kS = sizeof(sparsities) / sizeof(sparsities[0]);
  double log_sum[kS] = {}, scan_share = 0;
  size_t shapes = 0;
  const double min_time = quick ? 0.03 : 0.15;
  std::printf("  %-22s %9s", "shape (C->K @ HxW)", "dense ms");
  for (double sp : sparsities) std::printf("   %2.0f%%: ms  x dense NB", sp * 100);
  std::printf("   scan\n");
  for (const ConvShape& s : kQu8Shapes) {
    if (s.k != 1) continue;
    const size_t hw = s.h * s.w, c = s.cin, k = s.cout;
    auto wf = random_vec(k * c, rng), x = random_vec(c * hw, rng), bias = random_vec(k, rng);
    auto packed = pack_gemm_weights(wf.data(), k, c, WeightLayout::NK, bias.data(), WeightType::F32, t);
    ConvGeometry g;
    ConvPlan plan(1, s.h, s.w, c, g, packed);
    std::vector<float> y(k * hw);
    const double td = best_seconds([&] { plan.run(x.data(), y.data(), act_clip(0.0f, 6.0f), threads); }, min_time);
    std::printf("  %4zu->%-4zu @ %3zux%-3zu     %9.3f", c, k, s.h, s.w, td * 1e3);
    double scan_s = 0, sparse_90 = 0;
    for (size_t i = 0; i < kS; ++i) {
      std::vector<int64_t> row_ptr{0};
      std::vector<int32_t> cols;
      std::vector<float> vals;
      for (size_t r = 0; r < k; ++r) {
        for (size_t ch = 0; ch < c; ++ch)
          if (u01(rng) >= sparsities[i]) {
            cols.push_back(static_cast<int32_t>(ch));
            vals.push_back(wf[r * c + ch]);
          }
        row_ptr.push_back(static_cast<int64_t>(cols.size()));
      }
      const SparseConv1x1Weights w = pack_sparse_conv1x1(row_ptr.data(), cols.data(), k, c, SpmmValues::F32,
                                                         vals.data(), nullptr, nullptr, nullptr, 0, 0, bias.data(), 0, t);
      const double ts = best_seconds([&] { sparse_conv1x1(x.data(), 1, hw, w, y.data(), act_clip(0.0f, 6.0f), threads); },
                                     min_time);
      std::printf("   %7.3f %5.2fx %2zu", ts * 1e3, td / ts, w.block);
      log_sum[i] += std::log(td / ts);
      if (sparsities[i] == 0.9) sparse_90 = ts;
    }
    // The scan alone over the image, as the driver runs it (tile by tile).
    scan_s = best_seconds([&] {
      volatile bool any = false;
      for (size_t p0 = 0; p0 < hw; p0 += t->spmm_tile)
        any = any | t->nonfinite_scan(x.data() + p0, c, hw, std::min(t->spmm_tile, hw - p0));
    }, min_time);
    std::printf("   %4.1f%% of 90%%\n", 100 * scan_s / sparse_90);
    scan_share += scan_s / sparse_90;
    ++shapes;
  }
  std::printf("  geometric mean of dense/sparse:");
  double prev_sp = 0, prev_g = 0, crossover = -1;
  for (size_t i = 0; i < kS; ++i) {
    const double gm = std::exp(log_sum[i] / static_cast<double>(shapes));
    std::printf("  %2.0f%% %.2fx", sparsities[i] * 100, gm);
    if (crossover < 0 && gm >= 1.0)
      crossover = i == 0 ? sparsities[0] : prev_sp + (sparsities[i] - prev_sp) * (1.0 - prev_g) / (gm - prev_g);
    prev_sp = sparsities[i];
    prev_g = gm;
  }
  std::printf("\n  crossover (geometric mean = 1, interpolated): %s sparsity; scan: %.1f%% of the 90%% time on average\n",
              crossover < 0 ? "above 95%" : (std::to_string(static_cast<int>(crossover * 1000 + 0.5) / 10.0).substr(0, 4) + "%").c_str(),
              100 * scan_share / static_cast<double>(shapes));
  // Block cost: every row dense (no padding), time per stored entry per block height over NB = 1.
  std::printf("  block cost (time per stored entry, NB=1 = 1; sparse_block_cost() in parentheses):");
  const size_t c = 96, k = 96, hw = 28 * 28;
  auto wf = random_vec(k * c, rng), x = random_vec(c * hw, rng);
  std::vector<int64_t> row_ptr{0};
  std::vector<int32_t> cols;
  std::vector<float> vals;
  for (size_t r = 0; r < k; ++r) {
    for (size_t ch = 0; ch < c; ch += 4) {  // 25% density, the same columns in every row
      cols.push_back(static_cast<int32_t>(ch));
      vals.push_back(wf[r * c + ch]);
    }
    row_ptr.push_back(static_cast<int64_t>(cols.size()));
  }
  std::vector<float> y(k * hw);
  double base = 0;
  for (size_t nb : sparse_blocks(*t)) {
    const SparseConv1x1Weights w = pack_sparse_conv1x1(row_ptr.data(), cols.data(), k, c, SpmmValues::F32, vals.data(),
                                                       nullptr, nullptr, nullptr, 0, 0, nullptr, nb, t);
    const double ts = best_seconds([&] { sparse_conv1x1(x.data(), 1, hw, w, y.data(), act_none(), 1); }, min_time);
    const double per_entry = ts / static_cast<double>(w.stored / nb);
    if (nb == 1) base = per_entry;
    std::printf(" NB=%zu %.2f (%.2f)", nb, per_entry / base, sparse_block_cost(*t, nb));
  }
  std::printf("\n");
}

}  // namespace

// ---- CHW (--chw) ---------------------------------------------------------------------------------
void bench_chw(const KernelTable* t, bool quick, size_t threads) {
  std::mt19937 rng(11);
  const double min_total = quick ? 0.05 : 0.3;
  struct DwShape {
    const char* net;
    size_t c, h, k, stride;
  };
  const DwShape shapes[] = {
      {"mbv2", 32, 112, 3, 1},  {"mbv2", 96, 112, 3, 2}, {"mbv2", 144, 56, 3, 1}, {"mbv2", 144, 56, 3, 2},
      {"mbv2", 192, 28, 3, 1},  {"mbv2", 192, 28, 3, 2}, {"mbv2", 384, 14, 3, 1}, {"mbv2", 576, 14, 3, 1},
      {"mbv2", 576, 14, 3, 2},  {"mbv2", 960, 7, 3, 1},  {"mbv3", 72, 56, 5, 2},  {"mbv3", 120, 28, 5, 1},
      {"mbv3", 240, 28, 5, 1},  {"mbv3", 480, 14, 5, 1}, {"mbv3", 672, 14, 5, 2}, {"mbv3", 960, 7, 5, 1},
  };
  std::printf("isa: %s, %zu thread(s); depthwise CHW vs NHWC (%s), ReLU6 fused\n", t->name, threads, t->names.depthwise);
  std::printf("%-5s %-14s %-34s %10s %10s %8s %8s\n", "net", "layer", "chw kernel", "chw us", "nhwc us", "chw GF/s",
              "nhwc/chw");
  double total_chw = 0, total_nhwc = 0;
  for (const DwShape& s : shapes) {
    ConvGeometry g;
    g.kh = g.kw = s.k;
    g.stride_h = g.stride_w = s.stride;
    g.pad_top = g.pad_left = g.pad_bottom = g.pad_right = s.k / 2;
    const size_t oh = conv_output_size(s.h, s.k, s.stride, 1, s.k / 2, s.k / 2);
    auto x = random_vec(s.c * s.h * s.h, rng), w = random_vec(s.c * s.k * s.k, rng), b = random_vec(s.c, rng);
    std::vector<float> y(s.c * oh * oh);
    const Activation act = act_clip(0.0f, 6.0f);
    const char* name = nullptr;
    const double sc = best_seconds([&] {
      name = depthwise_conv_chw(x.data(), 1, s.c, s.h, s.h, 1, g, w.data(), b.data(), y.data(), act, threads, t);
    }, min_total);
    const double sn = best_seconds([&] {
      depthwise_conv(x.data(), 1, s.h, s.h, s.c, 1, g, w.data(), b.data(), y.data(), act, threads, t);
    }, min_total);
    total_chw += sc;
    total_nhwc += sn;
    char layer[64];
    std::snprintf(layer, sizeof layer, "%zu@%zu %zux%zu s%zu", s.c, s.h, s.k, s.k, s.stride);
    std::printf("%-5s %-14s %-34s %10.1f %10.1f %8.2f %8.2f\n", s.net, layer, name, sc * 1e6, sn * 1e6,
                2.0 * s.c * oh * oh * s.k * s.k / sc * 1e-9, sn / sc);
  }
  std::printf("total: chw %.1f us, nhwc %.1f us: nhwc/chw %.2f\n", total_chw * 1e6, total_nhwc * 1e6,
              total_nhwc / total_chw);
  for (const auto& [c, hw] : {std::pair<size_t, size_t>{1280, 49}, {960, 49}, {576, 49}, {64, 3136}}) {
    auto x = random_vec(c * hw, rng);
    std::vector<float> y(c);
    const double sc = best_seconds([&] { global_avgpool_chw(x.data(), 1, c, hw, y.data(), act_none(), threads, t); },
                                   min_total);
    const double sn = best_seconds([&] { global_avgpool(x.data(), 1, hw, c, y.data(), act_none(), threads, t); },
                                   min_total);
    std::printf("global avgpool %zu x %zu: chw %.2f us, nhwc %.2f us\n", c, hw, sc * 1e6, sn * 1e6);
  }
  struct TShape {
    size_t c, h, w;
  };
  for (const TShape& s : {TShape{32, 112, 112}, TShape{96, 56, 56}, TShape{3, 224, 224}, TShape{1280, 7, 7},
                          TShape{16, 1, 1}, TShape{64, 56, 56}}) {
    const size_t hw = s.h * s.w;
    auto x = random_vec(s.c * hw, rng);
    std::vector<float> y(x.size());
    const double st = best_seconds([&] { transpose_2d(x.data(), y.data(), 1, s.c, hw, 4, threads, t); }, min_total);
    const double sb = best_seconds([&] { transpose_2d(y.data(), x.data(), 1, hw, s.c, 4, threads, t); }, min_total);
    const double sl = best_seconds([&] {
      for (size_t j = 0; j < hw; ++j)
        for (size_t i = 0; i < s.c; ++i) y[j * s.c + i] = x[i * hw + j];
    }, min_total);
    std::printf("transpose %zux%zux%zu (%s): nchw->nhwc %.1f us (%.1f GB/s), nhwc->nchw %.1f us, naive loop %.1f us\n",
                s.c, s.h, s.w, t->names.transpose_f32, st * 1e6, 2.0 * 4 * x.size() / st * 1e-9, sb * 1e6, sl * 1e6);
  }
}

// ---- LQ (--lq) -----------------------------------------------------------------------------------
namespace {

LqActQuant lq_bench_quant(size_t kx) {
  LqActQuant q;
  q.kx = kx;
  for (size_t i = 0; i < kx; ++i) q.alpha.push_back(0.25f * static_cast<float>(1u << i));
  const size_t levels = size_t{1} << kx;
  for (size_t l = 0; l < levels; ++l) q.codes.push_back(static_cast<uint8_t>(l));  // ascending alpha: binary order
  for (size_t l = 0; l + 1 < levels; ++l) q.thresholds.push_back(0.25f * (static_cast<float>(l) + 0.5f) - 1.0f);
  return q;
}

void bench_lq(const KernelTable* t, bool quick, size_t threads, const std::string& only) {
  std::mt19937 rng(11);
  const double min_total = quick ? 0.05 : 0.3;
  std::printf("LQ bitwise GEMM / conv vs fp32 (%s), %zu thread(s); times in microseconds (best of runs)\n", t->name,
              threads);
  std::printf("%-28s %-14s %5s %10s %10s %7s\n", "case", "variant", "Kw/Kx", "fp32", "lq", "ratio");
  struct Shape { const char* name; size_t m, n, o; bool conv; };
  for (const Shape& sh : {Shape{"mlp M=1 784->700", 1, 784, 700, false}, Shape{"M=64 1024->1024", 64, 1024, 1024, false},
                          Shape{"conv3x3 56x56x64->64", 56 * 56, 9 * 64, 64, true}}) {
    const auto x = random_vec(sh.conv ? 56 * 56 * 64 : sh.m * sh.n, rng);
    const auto w = random_vec(sh.o * sh.n, rng);
    auto packed = pack_gemm_weights(w.data(), sh.o, sh.n, WeightLayout::NK, nullptr, WeightType::F32, t);
    std::vector<float> y(sh.m * sh.o);
    double fp32;
    ConvGeometry g;
    g.kh = g.kw = 3;
    g.pad_top = g.pad_left = g.pad_bottom = g.pad_right = 1;
    if (sh.conv) {
      ConvPlan plan(1, 56, 56, 64, g, packed);
      fp32 = best_seconds([&] { plan.run(x.data(), y.data(), act_none(), threads); }, min_total);
    } else {
      fp32 = best_seconds([&] { gemm(x.data(), sh.m, sh.n, packed, y.data(), sh.o, act_none(), threads); }, min_total);
    }
    for (LqVariant v : lq_supported_variants()) {
      if (!only.empty() && only != lq_variant_name(v)) continue;
      for (size_t bits : {1, 2, 3}) {
        const LqActQuant q = lq_bench_quant(bits);
        std::vector<uint32_t> planes(sh.o * bits * ((sh.n + 31) / 32));
        for (auto& p : planes) p = static_cast<uint32_t>(rng());
        const std::vector<float> basis = random_vec(sh.o * bits, rng);
        double s;
        if (sh.conv) {
          const LqLayer l = lq_prepare_conv(planes.data(), basis.data(), sh.o, bits, 64, 3, 3, q, nullptr, lq_kernels(v));
          LqConvGeometry lg;
          lg.kh = lg.kw = 3;
          lg.pad_top = lg.pad_left = lg.pad_bottom = lg.pad_right = 1;
          s = best_seconds([&] { lq_conv(l, x.data(), 1, 56, 56, lg, y.data(), act_none(), threads); }, min_total);
        } else {
          const LqLayer l = lq_prepare_gemm(planes.data(), basis.data(), sh.o, bits, sh.n, q, nullptr, lq_kernels(v));
          s = best_seconds([&] { lq_gemm(l, x.data(), sh.m, y.data(), act_none(), threads); }, min_total);
        }
        std::printf("%-28s %-14s %3zu/%zu %10.1f %10.1f %6.1fx\n", sh.name, lq_variant_name(v), bits, bits, fp32 * 1e6,
                    s * 1e6, fp32 / s);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const KernelTable* t = &active_kernels();
  bool quick = false, qu8 = false, qu8_only = false, winograd = false, cold = false, sparse = false, chw = false;
  size_t threads_arg = 0;
  bool lq = false;
  std::string lq_variant;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--isa" && i + 1 < argc) t = &kernels_for(parse_isa(argv[++i]));
    if (std::string(argv[i]) == "--quick") quick = true;
    if (std::string(argv[i]) == "--qu8") qu8 = true;
    if (std::string(argv[i]) == "--qu8-only") qu8 = qu8_only = true;
    if (std::string(argv[i]) == "--winograd") winograd = true;
    if (std::string(argv[i]) == "--cold") cold = true;
    if (std::string(argv[i]) == "--sparse") sparse = true;
    if (std::string(argv[i]) == "--chw") chw = true;
    if (std::string(argv[i]) == "--lq") lq = true;
    if (std::string(argv[i]) == "--variant" && i + 1 < argc) lq_variant = argv[++i];
    if (std::string(argv[i]) == "--threads" && i + 1 < argc) threads_arg = std::strtoul(argv[++i], nullptr, 10);
  }
  if (lq) {
    bench_lq(t, quick, threads_arg != 0 ? threads_arg : 1, lq_variant);
    return 0;
  }
  if (chw) {
    bench_chw(t, quick, threads_arg != 0 ? threads_arg : 1);
    return 0;
  }
  if (sparse) {
    bench_sparse(t, quick, threads_arg != 0 ? threads_arg : 1);
    return 0;
  }
  if (winograd) {
    if (threads_arg != 0) bench_winograd(t, quick, {threads_arg}, cold);
    else bench_winograd(t, quick, {1, 2}, cold);
    return 0;
  }
  if (qu8_only) {
    bench_qu8(t, quick);
    return 0;
  }
  std::mt19937 rng(7);
  std::printf("isa: %s (gemm %s, fp16 weights %s)\n", t->name, t->names.igemm_f32w, t->names.igemm_f16w);
  for (size_t n : {512, 1024}) {
    auto a = random_vec(n * n, rng), b = random_vec(n * n, rng);
    auto packed = pack_gemm_weights(b.data(), n, n, WeightLayout::NK, nullptr, WeightType::F32, t);
    std::vector<float> c(n * n);
    for (size_t threads : {1, 2}) {
      const double s = best_seconds([&] { gemm(a.data(), n, n, packed, c.data(), n, act_none(), threads); },
                                    quick ? 0.05 : 0.3);
      std::printf("gemm %zux%zux%zu threads=%zu: %.2f ms  %.1f GFLOPS\n", n, n, n, threads, s * 1e3,
                  2.0 * n * n * n / s * 1e-9);
    }
  }
  const size_t n = 4096, k = 4096;
  auto w = random_vec(n * k, rng), x = random_vec(k, rng);
  std::vector<float> y(n);
  auto dense = pack_gemm_weights(w.data(), n, k, WeightLayout::NK, nullptr, WeightType::F32, t);
  auto half = pack_gemm_weights(w.data(), n, k, WeightLayout::NK, nullptr, WeightType::F16, t);
  std::vector<uint8_t> stream(n * k / 2);
  for (auto& byte : stream) byte = static_cast<uint8_t>(rng());
  auto book = random_vec(16, rng);
  auto clustered = pack_clustered(stream.data(), 4, n, k, book.data(), false, nullptr, t);
  auto clustered_rows = [&] {
    std::vector<float> books = random_vec(16 * n, rng);
    return pack_clustered(stream.data(), 4, n, k, books.data(), true, nullptr, t);
  }();
  for (size_t threads : {1, 2}) {
    const double sd = best_seconds([&] { gemm(x.data(), 1, k, dense, y.data(), n, act_none(), threads); });
    const double sh = best_seconds([&] { gemm(x.data(), 1, k, half, y.data(), n, act_none(), threads); });
    const double sc = best_seconds([&] { clustered_gemm(x.data(), 1, k, clustered, y.data(), n, act_none(), threads); });
    const double sr = best_seconds([&] { clustered_gemm(x.data(), 1, k, clustered_rows, y.data(), n, act_none(), threads); });
    std::printf("fc 4096x4096 batch1 threads=%zu: dense fp32 %.3f ms (%.1f GB/s), fp16 weights %.3f ms, "
                "4-bit clustered %.3f ms (per-channel books %.3f ms): clustered is %.2fx faster than dense\n",
                threads, sd * 1e3, n * k * 4.0 / sd * 1e-9, sh * 1e3, sc * 1e3, sr * 1e3, sd / sc);
  }
  if (qu8) bench_qu8(t, quick);
  return 0;
}
