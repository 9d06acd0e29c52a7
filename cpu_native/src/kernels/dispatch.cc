#include "kernels/dispatch.h"

#include <atomic>
#include <cstdlib>
#include <stdexcept>

#include "cpu_features.h"

namespace edgesdk::kernels {
namespace {

#define EDGESDK_TABLE(isa_enum, isa, mr, nr, lanes, table_min, nibbles)                              \
  KernelTable {                                                                                      \
    isa_enum, #isa, mr, nr, f32_igemm_##isa, f32_f16w_igemm_##isa, f32_activation_##isa,             \
        f32_depthwise_##isa, f32_maxpool_##isa, f32_avgpool_##isa, f32_global_avgpool_##isa,         \
        f32_binary_##isa, f32_softmax_##isa, lanes, table_min, nibbles, f32_clustered_gemv_##isa,    \
        f32_clustered_decode_##isa, f32_nnm_gather_##isa, 0, 0, nullptr, nullptr, nullptr,           \
        f32_row_norm_##isa, f32_log_softmax_##isa, f32_softmax_axis_##isa, f32_reduce_##isa,         \
        f32_argreduce_##isa, f32_col2im_##isa, f32_resize_nearest_##isa, f32_resize_linear_##isa     \
  }

constexpr KernelTable kScalarTable = EDGESDK_TABLE(Isa::Scalar, scalar, kScalarMR, kScalarNR, kScalarLanes, 1, false);
#if defined(__x86_64__) || defined(_M_X64)
// AVX2 looks 3-bit indices up with one 8-entry permute and 4-bit ones with vpshufb on the
// codebook's byte planes (two 8-entry permutes cost twice as much: vpermps is the bottleneck);
// AVX-512 looks 4-bit indices up with one 16-entry permute.
constexpr KernelTable kAvx2Table = EDGESDK_TABLE(Isa::Avx2, avx2, kAvx2MR, kAvx2NR, kAvx2Lanes, 8, true);
constexpr KernelTable kAvx512Table =
    EDGESDK_TABLE(Isa::Avx512, avx512, kAvx512MR, kAvx512NR, kAvx512Lanes, 16, false);
#endif
#if defined(__aarch64__)
// NEON looks up through byte tables of at least 16 bytes (vqtbl1q_u8): 4 fp32 entries.
constexpr KernelTable kNeonTable = EDGESDK_TABLE(Isa::Neon, neon, kNeonMR, kNeonNR, kNeonLanes, 4, false);
// The neon table (every fp32 kernel, and igemm_f16w for fp16 weights in fp32 sessions) plus the
// ARMv8.2-A fp16-arithmetic kernels, which only fp16 sessions ask for.
constexpr KernelTable neonfp16_table() {
  KernelTable t = kNeonTable;
  t.isa = Isa::NeonFp16;
  t.name = "neonfp16";
  t.f16_gemm_mr = kNeonFp16MR;
  t.f16_gemm_nr = kNeonFp16NR;
  t.igemm_f16 = f16_f32acc_igemm_neonfp16;
  t.depthwise_f16 = f16_f32acc_depthwise_neonfp16;
  t.convert_f32_f16 = f32_to_f16_neonfp16;
  return t;
}
constexpr KernelTable kNeonFp16Table = neonfp16_table();
#endif

bool has_flag(const cpu::CpuFeatures& f, const char* name) {
  for (const auto& [flag, present] : f.flags)
    if (flag == name) return present;
  return false;
}

bool cpu_supports(Isa isa) {
  static const cpu::CpuFeatures features = cpu::detect();
  switch (isa) {
    case Isa::Scalar: return true;
    case Isa::Avx2:
      return has_flag(features, "avx2") && has_flag(features, "fma") && has_flag(features, "f16c");
    case Isa::Avx512:
      return has_flag(features, "avx512f") && has_flag(features, "avx512bw") &&
             has_flag(features, "avx512vl") && has_flag(features, "avx512dq") &&
             has_flag(features, "f16c") && has_flag(features, "fma");
    case Isa::Neon: return has_flag(features, "neon");
    // "fp16" is HWCAP fphp + asimdhp (scalar and vector half arithmetic, cpu_features.cc). FHM
    // (FMLAL) is detected and reported but not needed: see gemm_neonfp16.cc.
    case Isa::NeonFp16: return has_flag(features, "neon") && has_flag(features, "fp16");
  }
  return false;
}

const KernelTable* table_of(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return &kScalarTable;
#if defined(__x86_64__) || defined(_M_X64)
    case Isa::Avx2: return &kAvx2Table;
    case Isa::Avx512: return &kAvx512Table;
#endif
#if defined(__aarch64__)
    case Isa::Neon: return &kNeonTable;
    case Isa::NeonFp16: return &kNeonFp16Table;
#endif
    default: return nullptr;
  }
}

const KernelTable* best_table() {
  const auto levels = supported_isas();
  const char* env = std::getenv("EDGESDK_CPU_ISA");
  if (env != nullptr && *env != '\0') return &kernels_for(parse_isa(env));
  return table_of(levels.back());
}

std::atomic<const KernelTable*> g_active{nullptr};

}  // namespace

std::vector<Isa> compiled_isas() {
  std::vector<Isa> out{Isa::Scalar};
#if defined(__x86_64__) || defined(_M_X64)
  out.push_back(Isa::Avx2);
  out.push_back(Isa::Avx512);
#endif
#if defined(__aarch64__)
  out.push_back(Isa::Neon);
  out.push_back(Isa::NeonFp16);
#endif
  return out;
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa isa : compiled_isas())
    if (cpu_supports(isa)) out.push_back(isa);
  return out;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
    case Isa::Neon: return "neon";
    case Isa::NeonFp16: return "neonfp16";
  }
  return "?";
}

Isa parse_isa(const std::string& name) {
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Neon, Isa::NeonFp16})
    if (name == isa_name(isa)) return isa;
  throw std::invalid_argument("unknown ISA '" + name + "' (expected scalar, avx2, avx512, neon or neonfp16)");
}

const KernelTable& kernels_for(Isa isa) {
  const KernelTable* t = table_of(isa);
  if (t == nullptr) throw std::runtime_error(std::string("ISA ") + isa_name(isa) + " is not compiled in for this arch");
  if (!cpu_supports(isa)) throw std::runtime_error(std::string("this CPU cannot run the ") + isa_name(isa) + " kernels");
  return *t;
}

const KernelTable& active_kernels() {
  const KernelTable* t = g_active.load(std::memory_order_acquire);
  if (t == nullptr) {
    t = best_table();
    g_active.store(t, std::memory_order_release);
  }
  return *t;
}

void set_active_isa(Isa isa) { g_active.store(&kernels_for(isa), std::memory_order_release); }

void reset_active_isa() { g_active.store(best_table(), std::memory_order_release); }

}  // namespace edgesdk::kernels
