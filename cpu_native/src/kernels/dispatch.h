// Runtime kernel dispatch: one KernelTable per ISA level, the best one the running CPU supports
// chosen from cpu::detect() (scalar < avx2 < avx512 on x86-64; neon on aarch64), overridable by
// the EDGESDK_CPU_ISA environment variable (read once) or set_active_isa() so tests can force
// every path.
#pragma once

#include <string>
#include <vector>

#include "kernels/ukernels.h"

namespace edgesdk::kernels {

enum class Isa { Scalar, Avx2, Avx512, Neon };

struct KernelTable {
  Isa isa;
  const char* name;  // "scalar", "avx2", "avx512", "neon"
  size_t gemm_mr, gemm_nr;
  IgemmUkernel igemm_f32w;
  IgemmUkernel igemm_f16w;
  ActivationUkernel activation;
  DepthwiseUkernel depthwise;
  PoolUkernel maxpool;
  PoolUkernel avgpool;
  GlobalAvgPoolUkernel global_avgpool;
  BinaryUkernel binary;
  SoftmaxUkernel softmax;
  size_t clustered_lanes;       // L of the lane-word layout
  size_t clustered_table_min;   // minimum table entries (replicated codebook)
  bool clustered_nibbles;       // 4-bit codes use the byte-plane nibble layout (ukernels.h)
  ClusteredGemvUkernel clustered_gemv;
  ClusteredDecodeUkernel clustered_decode;
  NnmGatherUkernel nnm_gather;
};

// ISA levels compiled into this binary for its arch, lowest first.
std::vector<Isa> compiled_isas();
// Compiled levels the running CPU (and OS) can execute, lowest first.
std::vector<Isa> supported_isas();
const char* isa_name(Isa isa);
// Parses "scalar", "avx2", "avx512", "neon"; throws std::invalid_argument otherwise.
Isa parse_isa(const std::string& name);

// The table for one level; throws std::runtime_error if this CPU cannot run it.
const KernelTable& kernels_for(Isa isa);
// The table operators use by default: the best supported level, or the override.
const KernelTable& active_kernels();
// Forces a level (throws if unsupported); process-wide, meant for tests and benchmarks.
void set_active_isa(Isa isa);
// Back to the best supported level (or EDGESDK_CPU_ISA when set).
void reset_active_isa();

}  // namespace edgesdk::kernels
