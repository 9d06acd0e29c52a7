// Micro-benchmarks of the kernel library on the running CPU:
//   GEMM GFLOPS at M=N=K=512 and 1024 (1 and 2 threads, packed fp32 weights);
//   a 4096x4096 fully-connected layer at batch 1: dense fp32 GEMV vs fp16 weights vs 4-bit
//   clustered (per-layer codebook), 1 and 2 threads.
// Each figure is the best of repeated runs over at least ~0.3 s (weights stay packed; inputs
// warm), the protocol of seed 001 §4 minus cache eviction.
// Usage: kernel_bench [--isa name] [--quick]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/operators.h"

using namespace edgesdk::kernels;

namespace {

template <class F>
double best_seconds(F&& f, double min_total = 0.3, int min_reps = 5) {
  f();  // warm-up
  double best = 1e30, total = 0;
  int reps = 0;
  while (total < min_total || reps < min_reps) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = s < best ? s : best;
    total += s;
    ++reps;
  }
  return best;
}

std::vector<float> random_vec(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  const KernelTable* t = &active_kernels();
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--isa" && i + 1 < argc) t = &kernels_for(parse_isa(argv[++i]));
    if (std::string(argv[i]) == "--quick") quick = true;
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
  return 0;
}
