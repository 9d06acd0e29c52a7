// Runtime kernel dispatch: one KernelTable per ISA level, the best one the running CPU supports
// chosen from cpu::detect() (scalar < avx2 < avx512 on x86-64; scalar < neon < neonfp16 on
// aarch64), overridable by the EDGESDK_CPU_ISA environment variable (read once) or
// set_active_isa() so tests can force every path. neonfp16 (HWCAP fphp + asimdhp) is the neon
// table plus the fp16-arithmetic kernels that fp16 sessions ask for; fp32 work runs the same
// NEON fp32 kernels on both levels.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "kernels/ukernels.h"

namespace edgesdk::kernels {

enum class Isa { Scalar, Avx2, Avx512, Neon, NeonFp16 };

// The microkernel slots of a KernelTable, in table order: X(slot) for each.
#define EDGESDK_KERNEL_SLOTS(X)                                                                      \
  X(igemm_f32w) X(igemm_f16w) X(activation) X(depthwise) X(maxpool) X(avgpool) X(global_avgpool)     \
  X(binary) X(softmax) X(clustered_gemv) X(clustered_decode) X(nnm_gather) X(igemm_f16)              \
  X(depthwise_f16) X(convert_f32_f16) X(row_norm) X(log_softmax) X(softmax_axis) X(reduce)          \
  X(argreduce) X(col2im) X(resize_nearest) X(resize_linear)

// The function name (ukernels.h: <datatype>_<op>_<tile>__<isa>) in each slot of a table; null
// where the slot is empty.
struct KernelNames {
#define EDGESDK_KERNEL_NAME_FIELD(slot) const char* slot = nullptr;
  EDGESDK_KERNEL_SLOTS(EDGESDK_KERNEL_NAME_FIELD)
#undef EDGESDK_KERNEL_NAME_FIELD
};

struct KernelTable {
  Isa isa;
  const char* name;  // "scalar", "avx2", "avx512", "neon", "neonfp16"
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
  // fp16 arithmetic (ukernels.h, F16IgemmUkernel): null on levels without it, where fp16 weights
  // run through igemm_f16w / depthwise in fp32 arithmetic instead.
  size_t f16_gemm_mr, f16_gemm_nr;
  F16IgemmUkernel igemm_f16;
  DepthwiseUkernel depthwise_f16;
  ConvertF32F16Ukernel convert_f32_f16;
  // Normalisation, axis softmax, reductions, transposed-convolution gather, resize (ukernels.h).
  RowNormUkernel row_norm;
  LogSoftmaxUkernel log_softmax;
  SoftmaxAxisUkernel softmax_axis;
  ReduceUkernel reduce;
  ArgReduceUkernel argreduce;
  Col2ImUkernel col2im;
  ResizeUkernel resize_nearest;
  ResizeUkernel resize_linear;
  KernelNames names;  // of the kernels above, slot by slot
  bool has_f16_arith() const { return igemm_f16 != nullptr; }
};

// ISA levels compiled into this binary for its arch, lowest first.
std::vector<Isa> compiled_isas();
// Compiled levels the running CPU (and OS) can execute, lowest first.
std::vector<Isa> supported_isas();
const char* isa_name(Isa isa);
// Parses "scalar", "avx2", "avx512", "neon", "neonfp16"; throws std::invalid_argument otherwise.
Isa parse_isa(const std::string& name);
// (slot, kernel name) of every filled slot of a level's table, in table order, whether or not this
// CPU can run it; throws std::runtime_error for a level not compiled in for this arch.
std::vector<std::pair<const char*, const char*>> kernel_names(Isa isa);

// The table for one level; throws std::runtime_error if this CPU cannot run it.
const KernelTable& kernels_for(Isa isa);
// The table operators use by default: the best supported level, or the override.
const KernelTable& active_kernels();
// Forces a level (throws if unsupported); process-wide, meant for tests and benchmarks.
void set_active_isa(Isa isa);
// Back to the best supported level (or EDGESDK_CPU_ISA when set).
void reset_active_isa();

}  // namespace edgesdk::kernels
