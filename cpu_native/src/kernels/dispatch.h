// Runtime kernel dispatch: one KernelTable per ISA level, the best one the running CPU supports
// chosen from cpu::detect() (scalar < avx2 < avxvnni < avx512 < avx512vnni < avx512amx on x86-64; scalar < neon <
// neonfp16 < neondot on aarch64), overridable by the EDGESDK_CPU_ISA environment variable (read
// once) or set_active_isa() so tests can force every path. neonfp16 (HWCAP fphp + asimdhp) is the
// neon table plus the fp16-arithmetic kernels that fp16 sessions ask for; fp32 work runs the same
// NEON fp32 kernels on both levels. The int8 levels follow that model: avx512vnni (AVX512_VNNI on
// top of the avx512 requirements) is the avx512 table plus the vpdpbusd qu8 GEMM and vpdpwssd
// depthwise convolution, avx512amx (AMX-TILE and AMX-INT8 on top of avx512vnni's, with the OS's
// XTILEDATA state enabled and granted to the process: Sapphire Rapids and later) the avx512vnni
// table plus the tdpbusd qu8 GEMMs (16 x 16 and 16 x 32 tiles), and neondot
// (HWCAP asimddp on top of neonfp16's) the neonfp16 table plus the sdot qu8 GEMM; everything else
// runs the kernels of the level below. avxvnni (AVX-VNNI on top of avx2's requirements: Alder Lake
// and later client cores without AVX-512) is the avx2 table plus the 256-bit vpdpbusd qu8 GEMM and
// depthwise convolution; no CPU has AVX-VNNI and AVX-512 without AVX512_VNNI, so the order is total. The plain avx512 level keeps an AVX-512BW qu8 GEMM, so it
// still runs on Skylake-X (no VNNI), where tools/avx512_under_bochs.py checks it. A CPU with the
// dot product but without FEAT_FP16 (none of the common cores: A55, A75, A76+, Neoverse N1 have
// both) stays at neon, whose qu8 GEMM widens to 16 bits.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "kernels/ukernels.h"

namespace edgesdk::kernels {

enum class Isa { Scalar, Avx2, AvxVnni, Avx512, Avx512Vnni, Avx512Amx, Neon, NeonFp16, NeonDot };

// The microkernel slots of a KernelTable, in table order: X(slot) for each.
#define EDGESDK_KERNEL_SLOTS(X)                                                                      \
  X(igemm_f32w) X(igemm_f32w_narrow) X(igemm_f16w) X(activation) X(depthwise) X(maxpool) X(avgpool) X(global_avgpool)     \
  X(binary) X(softmax) X(clustered_gemv) X(clustered_decode) X(nnm_gather) X(igemm_f16)              \
  X(depthwise_f16) X(convert_f32_f16) X(row_norm) X(log_softmax) X(softmax_axis) X(reduce)          \
  X(argreduce) X(col2im) X(resize_nearest) X(resize_linear) X(winograd_input) X(winograd_output) X(winograd_weights) \
  X(dwconv_chw) X(dwconv_chw_3x3s1) X(dwconv_chw_3x3s2) X(dwconv_chw_5x5s1) X(dwconv_chw_5x5s2) X(gavgpool_chw) X(transpose_x8) X(transpose_f32) X(transpose_x64) \
  X(spmm_f32_nb1) X(spmm_f32_nb2) X(spmm_f32_nb4) X(spmm_f32_nb8) X(spmm_f16w_nb1) X(spmm_f16w_nb2) X(spmm_f16w_nb4)   \
  X(spmm_f16w_nb8) X(spmm_cbw_nb1) X(spmm_cbw_nb2) X(spmm_cbw_nb4) X(spmm_cbw_nb8) X(nonfinite_scan) X(qu8_igemm) X(qu8_igemm_x2) X(qu8_igemm_narrow) X(qu8_depthwise) X(qu8_depthwise_narrow) X(qu8_maxpool)   \
  X(qu8_avgpool) X(qu8_global_avgpool) X(qu8_add) X(qu8_mul) X(qu8_requantize) X(qu8_lut)

// The function name (ukernels.h: <datatype>_<op>_<tile>__<isa>) in each slot of a table; null
// where the slot is empty.
struct KernelNames {
#define EDGESDK_KERNEL_NAME_FIELD(slot) const char* slot = nullptr;
  EDGESDK_KERNEL_SLOTS(EDGESDK_KERNEL_NAME_FIELD)
#undef EDGESDK_KERNEL_NAME_FIELD
};

struct KernelTable {
  Isa isa;
  const char* name;  // "scalar", "avx2", "avxvnni", "avx512", "avx512vnni", "avx512amx", "neon", "neonfp16", "neondot"
  size_t gemm_mr, gemm_nr;
  IgemmUkernel igemm_f32w;
  // fp32 weights of at most gemm_narrow_nr output channels, where a level has a narrower tile than
  // igemm_f32w's (same MR): packed with NR = gemm_narrow_nr (pack_gemm_weights). Null elsewhere.
  size_t gemm_narrow_nr;
  IgemmUkernel igemm_f32w_narrow;
  IgemmUkernel igemm_f16w;
  // igemm_f32w, igemm_f32w_narrow and igemm_f16w apply kGemmHardSwish in their epilogue (ukernels.h):
  // MobileNetV3's HardSwish layers then skip the post-pass over their output.
  bool igemm_hardswish;
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
  // Winograd F(4x4, 3x3) transforms (ukernels.h); the 36 GEMMs between them run on igemm_f32w.
  WinogradInputUkernel winograd_input;
  WinogradOutputUkernel winograd_output;
  WinogradWeightsUkernel winograd_weights;
  // Sparse 1x1 convolution in CHW (ukernels.h, SpmmUkernel; operators_sparse.h): one kernel per
  // block height NB (1, 2, 4; 8 on the avx512 levels only, null elsewhere) and value kind (fp32,
  // fp16 weights widened in the kernel, uint8 codebook indices), and the scan for non-finite inputs.
  // spmm_tile: the pixels of the level's widest tile (the driver's unit of work and of the scan).
  size_t spmm_tile;
  SpmmUkernel spmm_f32_nb1, spmm_f32_nb2, spmm_f32_nb4, spmm_f32_nb8;
  SpmmUkernel spmm_f16w_nb1, spmm_f16w_nb2, spmm_f16w_nb4, spmm_f16w_nb8;
  SpmmUkernel spmm_cbw_nb1, spmm_cbw_nb2, spmm_cbw_nb4, spmm_cbw_nb8;
  NonfiniteScanUkernel nonfinite_scan;
  // CHW kernels (ukernels.h): the generic depthwise convolution (the scalar one on every level) and
  // the specialised ones for the MobileNet/EfficientNet windows (any padding up to KH-1 / KW-1;
  // null on the scalar level, which runs the generic one), global average pooling, transposes.
  DwChwUkernel dwconv_chw;
  DwChwUkernel dwconv_chw_3x3s1, dwconv_chw_3x3s2, dwconv_chw_5x5s1, dwconv_chw_5x5s2;
  GavgpoolChwUkernel gavgpool_chw;
  TransposeUkernel transpose_x8, transpose_f32, transpose_x64;
  // qu8 (ukernels.h, "Quantized uint8"): the GEMM's tile, its reduction step KR (the packed
  // weights' K per kernel position is rounded up to it), packed layout, and whether it takes
  // activations as x ^ 0x80 (signed dot products: the packed bias compensates).
  size_t qu8_gemm_mr, qu8_gemm_nr, qu8_gemm_kr;
  Qu8Layout qu8_layout;
  bool qu8_xor80;
  Qu8IgemmUkernel qu8_igemm;
  Qu8IgemmUkernel qu8_igemm_x2;  // two panels a call (ukernels.h); null on most levels
  // For weights whose pairs fit vpmaddubsw's int16 sums (ukernels.h, qu8_pairs_fit_int16), packed
  // Qu8Layout::C4 with the level's tile: filled on avx2 and avx512, whose qu8_igemm widens to 16
  // bits; null elsewhere (vpdpbusd and sdot need no narrow weights).
  Qu8IgemmUkernel qu8_igemm_narrow;
  Qu8DepthwiseUkernel qu8_depthwise;
  // For depthwise weights whose kernel-row pairs fit vpmaddubsw's int16 sums
  // (qu8_dw_pairs_fit_int16), packed by the level's narrow packer (qu8_dw_packer): avx2 only.
  Qu8DepthwiseUkernel qu8_depthwise_narrow;
  Qu8PoolUkernel qu8_maxpool;
  Qu8PoolUkernel qu8_avgpool;
  Qu8GlobalAvgPoolUkernel qu8_global_avgpool;
  Qu8BinaryUkernel qu8_add;
  Qu8BinaryUkernel qu8_mul;
  Qu8RequantizeUkernel qu8_requantize;
  Qu8LutUkernel qu8_lut;
  KernelNames names;  // of the kernels above, slot by slot
  bool has_f16_arith() const { return igemm_f16 != nullptr; }
};

// ISA levels compiled into this binary for its arch, lowest first.
std::vector<Isa> compiled_isas();
// Compiled levels the running CPU (and OS) can execute, lowest first.
std::vector<Isa> supported_isas();
const char* isa_name(Isa isa);
// Parses "scalar", "avx2", "avxvnni", "avx512", "avx512vnni", "avx512amx", "neon", "neonfp16", "neondot"; throws
// std::invalid_argument otherwise.
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
