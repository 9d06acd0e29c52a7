#include "kernels/dispatch.h"

#include <atomic>
#include <cstdlib>
#include <stdexcept>

#include "cpu_features.h"

#if defined(__linux__) && (defined(__x86_64__) || defined(_M_X64))
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace edgesdk::kernels {
namespace {

// Fills one slot of table t with a kernel and its name, both from the one token.
#define EDGESDK_SET(t, slot, kernel) (t.slot = kernel, t.names.slot = #kernel)

// The fp32 slots every level fills; the fp16-arithmetic ones (igemm_f16, depthwise_f16,
// convert_f32_f16) stay empty but on neonfp16.
constexpr KernelTable base_table(Isa isa, const char* name, size_t mr, size_t nr, size_t lanes, size_t table_min,
                                 bool nibbles) {
  KernelTable t{};
  t.isa = isa;
  t.name = name;
  t.gemm_mr = mr;
  t.gemm_nr = nr;
  t.clustered_lanes = lanes;
  t.clustered_table_min = table_min;
  t.clustered_nibbles = nibbles;
  // Portable on every level: the generic CHW depthwise convolution and the 1- and 8-byte transposes.
  EDGESDK_SET(t, dwconv_chw, f32_dwconv2d_chw__scalar);
  EDGESDK_SET(t, transpose_x8, x8_transpose__scalar);
  EDGESDK_SET(t, transpose_x64, x64_transpose__scalar);
  return t;
}

// The qu8 GEMM's tile, reduction step and packed layout (dispatch.h, KernelTable).
constexpr void set_qu8_gemm(KernelTable& t, size_t mr, size_t nr, size_t kr, Qu8Layout layout, bool xor80) {
  t.qu8_gemm_mr = mr;
  t.qu8_gemm_nr = nr;
  t.qu8_gemm_kr = kr;
  t.qu8_layout = layout;
  t.qu8_xor80 = xor80;
}

constexpr KernelTable scalar_table() {
  KernelTable t = base_table(Isa::Scalar, "scalar", kScalarMR, kScalarNR, kScalarLanes, 1, false);
  EDGESDK_SET(t, igemm_f32w, f32_igemm_4x4__scalar);
  EDGESDK_SET(t, igemm_f16w, f32_f16w_igemm_4x4__scalar);
  EDGESDK_SET(t, activation, f32_activation__scalar);
  EDGESDK_SET(t, depthwise, f32_depthwise__scalar);
  EDGESDK_SET(t, maxpool, f32_maxpool__scalar);
  EDGESDK_SET(t, avgpool, f32_avgpool__scalar);
  EDGESDK_SET(t, global_avgpool, f32_global_avgpool__scalar);
  EDGESDK_SET(t, binary, f32_binary__scalar);
  EDGESDK_SET(t, softmax, f32_softmax__scalar);
  EDGESDK_SET(t, clustered_gemv, f32_clustered_gemv__scalar);
  EDGESDK_SET(t, clustered_decode, f32_clustered_decode__scalar);
  EDGESDK_SET(t, nnm_gather, f32_nnm_gather__scalar);
  EDGESDK_SET(t, row_norm, f32_row_norm__scalar);
  EDGESDK_SET(t, log_softmax, f32_log_softmax__scalar);
  EDGESDK_SET(t, softmax_axis, f32_softmax_axis__scalar);
  EDGESDK_SET(t, reduce, f32_reduce__scalar);
  EDGESDK_SET(t, argreduce, f32_argreduce__scalar);
  EDGESDK_SET(t, col2im, f32_col2im__scalar);
  EDGESDK_SET(t, resize_nearest, f32_resize_nearest__scalar);
  EDGESDK_SET(t, resize_linear, f32_resize_linear__scalar);
  EDGESDK_SET(t, winograd_input, f32_winograd43_input__scalar);
  EDGESDK_SET(t, winograd_output, f32_winograd43_output__scalar);
  EDGESDK_SET(t, winograd_weights, f32_winograd43_weights__scalar);
  t.spmm_tile = 8;
  EDGESDK_SET(t, spmm_f32_nb1, f32_spmm_8x1__scalar);
  EDGESDK_SET(t, spmm_f32_nb2, f32_spmm_8x2__scalar);
  EDGESDK_SET(t, spmm_f32_nb4, f32_spmm_8x4__scalar);
  EDGESDK_SET(t, spmm_f16w_nb1, f32_f16w_spmm_8x1__scalar);
  EDGESDK_SET(t, spmm_f16w_nb2, f32_f16w_spmm_8x2__scalar);
  EDGESDK_SET(t, spmm_f16w_nb4, f32_f16w_spmm_8x4__scalar);
  EDGESDK_SET(t, spmm_cbw_nb1, f32_cbw_spmm_8x1__scalar);
  EDGESDK_SET(t, spmm_cbw_nb2, f32_cbw_spmm_8x2__scalar);
  EDGESDK_SET(t, spmm_cbw_nb4, f32_cbw_spmm_8x4__scalar);
  EDGESDK_SET(t, nonfinite_scan, f32_nonfinite_scan__scalar);
  EDGESDK_SET(t, gavgpool_chw, f32_gavgpool_chw__scalar);
  EDGESDK_SET(t, transpose_f32, f32_transpose__scalar);
  set_qu8_gemm(t, kScalarQu8MR, kScalarQu8NR, 1, Qu8Layout::KMajor, false);
  EDGESDK_SET(t, qu8_igemm, qu8_igemm_4x4__scalar);
  EDGESDK_SET(t, qu8_depthwise, qu8_depthwise__scalar);
  EDGESDK_SET(t, qu8_maxpool, qu8_maxpool__scalar);
  EDGESDK_SET(t, qu8_avgpool, qu8_avgpool__scalar);
  EDGESDK_SET(t, qu8_global_avgpool, qu8_global_avgpool__scalar);
  EDGESDK_SET(t, qu8_add, qu8_add__scalar);
  EDGESDK_SET(t, qu8_mul, qu8_mul__scalar);
  EDGESDK_SET(t, qu8_requantize, qu8_requantize__scalar);
  EDGESDK_SET(t, qu8_lut, qu8_lut__scalar);
  return t;
}
constexpr KernelTable kScalarTable = scalar_table();

#if defined(__x86_64__) || defined(_M_X64)
// AVX2 looks 3-bit indices up with one 8-entry permute and 4-bit ones with vpshufb on the
// codebook's byte planes (two 8-entry permutes cost twice as much: vpermps is the bottleneck).
constexpr KernelTable avx2_table() {
  KernelTable t = base_table(Isa::Avx2, "avx2", kAvx2MR, kAvx2NR, kAvx2Lanes, 8, true);
  EDGESDK_SET(t, igemm_f32w, f32_igemm_6x16__avx2);
  EDGESDK_SET(t, igemm_f16w, f32_f16w_igemm_6x16__avx2);
  t.igemm_hardswish = true;
  EDGESDK_SET(t, activation, f32_activation_8x__avx2);
  EDGESDK_SET(t, depthwise, f32_depthwise_8c__avx2);
  EDGESDK_SET(t, maxpool, f32_maxpool_8c__avx2);
  EDGESDK_SET(t, avgpool, f32_avgpool_8c__avx2);
  EDGESDK_SET(t, global_avgpool, f32_global_avgpool_32c__avx2);
  EDGESDK_SET(t, binary, f32_binary_8x__avx2);
  EDGESDK_SET(t, softmax, f32_softmax_8x__avx2);
  EDGESDK_SET(t, clustered_gemv, f32_clustered_gemv__avx2);
  EDGESDK_SET(t, clustered_decode, f32_clustered_decode__avx2);
  EDGESDK_SET(t, nnm_gather, f32_nnm_gather_8c__avx2);
  EDGESDK_SET(t, row_norm, f32_row_norm__avx2);
  EDGESDK_SET(t, log_softmax, f32_log_softmax__avx2);
  EDGESDK_SET(t, softmax_axis, f32_softmax_axis__avx2);
  EDGESDK_SET(t, reduce, f32_reduce__avx2);
  EDGESDK_SET(t, argreduce, f32_argreduce__avx2);
  EDGESDK_SET(t, col2im, f32_col2im__avx2);
  EDGESDK_SET(t, resize_nearest, f32_resize_nearest__avx2);
  EDGESDK_SET(t, resize_linear, f32_resize_linear__avx2);
  EDGESDK_SET(t, winograd_input, f32_winograd43_input_8c__avx2);
  EDGESDK_SET(t, winograd_output, f32_winograd43_output_8c__avx2);
  EDGESDK_SET(t, winograd_weights, f32_winograd43_weights_8x__avx2);
  t.spmm_tile = 32;
  EDGESDK_SET(t, spmm_f32_nb1, f32_spmm_32x1__avx2);
  EDGESDK_SET(t, spmm_f32_nb2, f32_spmm_32x2__avx2);
  EDGESDK_SET(t, spmm_f32_nb4, f32_spmm_16x4__avx2);
  EDGESDK_SET(t, spmm_f16w_nb1, f32_f16w_spmm_32x1__avx2);
  EDGESDK_SET(t, spmm_f16w_nb2, f32_f16w_spmm_32x2__avx2);
  EDGESDK_SET(t, spmm_f16w_nb4, f32_f16w_spmm_16x4__avx2);
  EDGESDK_SET(t, spmm_cbw_nb1, f32_cbw_spmm_32x1__avx2);
  EDGESDK_SET(t, spmm_cbw_nb2, f32_cbw_spmm_32x2__avx2);
  EDGESDK_SET(t, spmm_cbw_nb4, f32_cbw_spmm_16x4__avx2);
  EDGESDK_SET(t, nonfinite_scan, f32_nonfinite_scan_32x__avx2);
  EDGESDK_SET(t, dwconv_chw_3x3s1, f32_dwconv2d_chw_3x3s1__avx2);
  EDGESDK_SET(t, dwconv_chw_3x3s2, f32_dwconv2d_chw_3x3s2__avx2);
  EDGESDK_SET(t, dwconv_chw_5x5s1, f32_dwconv2d_chw_5x5s1__avx2);
  EDGESDK_SET(t, dwconv_chw_5x5s2, f32_dwconv2d_chw_5x5s2__avx2);
  EDGESDK_SET(t, gavgpool_chw, f32_gavgpool_chw__avx2);
  EDGESDK_SET(t, transpose_f32, f32_transpose_8x8__avx2);
  set_qu8_gemm(t, kAvx2Qu8MR, kAvx2Qu8NR, 4, Qu8Layout::C4Split16, false);
  EDGESDK_SET(t, qu8_igemm, qu8_igemm_4x16c4__avx2);
  EDGESDK_SET(t, qu8_igemm_narrow, qu8_igemm_narrow_4x16c4__avx2);
  EDGESDK_SET(t, qu8_depthwise, qu8_depthwise_8c__avx2);
  EDGESDK_SET(t, qu8_depthwise_narrow, qu8_depthwise_narrow_8c__avx2);
  EDGESDK_SET(t, qu8_maxpool, qu8_maxpool_32c__avx2);
  EDGESDK_SET(t, qu8_avgpool, qu8_avgpool_8c__avx2);
  EDGESDK_SET(t, qu8_global_avgpool, qu8_global_avgpool_32c__avx2);
  EDGESDK_SET(t, qu8_add, qu8_add_16x__avx2);
  EDGESDK_SET(t, qu8_mul, qu8_mul_16x__avx2);
  EDGESDK_SET(t, qu8_requantize, qu8_requantize_16x__avx2);
  EDGESDK_SET(t, qu8_lut, qu8_lut_32x__avx2);
  return t;
}
constexpr KernelTable kAvx2Table = avx2_table();

// A VNNI level: `base` (every fp32 kernel and the other qu8 ones) with a vpdpbusd qu8 GEMM packed C4
// (the caller sets it and the depthwise convolution). vpdpbusd forms 4 exact products a lane with
// any weights, so the level has no narrow-weight GEMM or depthwise kernel.
constexpr KernelTable vnni_level(KernelTable t, Isa isa, const char* name, size_t mr, size_t nr) {
  t.isa = isa;
  t.name = name;
  set_qu8_gemm(t, mr, nr, 4, Qu8Layout::C4, false);
  t.qu8_igemm_narrow = nullptr;
  t.names.qu8_igemm_narrow = nullptr;
  t.qu8_depthwise_narrow = nullptr;
  t.names.qu8_depthwise_narrow = nullptr;
  return t;
}

// The avx2 table plus the AVX-VNNI (256-bit vpdpbusd) qu8 GEMM and depthwise convolution.
constexpr KernelTable avxvnni_table() {
  KernelTable t = vnni_level(kAvx2Table, Isa::AvxVnni, "avxvnni", kAvxVnniQu8MR, kAvxVnniQu8NR);
  EDGESDK_SET(t, qu8_igemm, qu8_igemm_6x16c4__avxvnni);
  EDGESDK_SET(t, qu8_depthwise, qu8_depthwise_8c__avxvnni);
  return t;
}
constexpr KernelTable kAvxVnniTable = avxvnni_table();

// AVX-512 looks 4-bit indices up with one 16-entry permute.
constexpr KernelTable avx512_table() {
  KernelTable t = base_table(Isa::Avx512, "avx512", kAvx512MR, kAvx512NR, kAvx512Lanes, 16, false);
  EDGESDK_SET(t, igemm_f32w, f32_igemm_8x32__avx512f);
  EDGESDK_SET(t, igemm_f32w_narrow, f32_igemm_8x16__avx512f);
  t.gemm_narrow_nr = kAvx512NarrowNR;
  EDGESDK_SET(t, igemm_f16w, f32_f16w_igemm_8x32__avx512f);
  t.igemm_hardswish = true;
  EDGESDK_SET(t, activation, f32_activation_16x__avx512skx);
  EDGESDK_SET(t, depthwise, f32_depthwise_16c__avx512skx);
  EDGESDK_SET(t, maxpool, f32_maxpool_16c__avx512skx);
  EDGESDK_SET(t, avgpool, f32_avgpool_16c__avx512skx);
  EDGESDK_SET(t, global_avgpool, f32_global_avgpool_64c__avx512skx);
  EDGESDK_SET(t, binary, f32_binary_16x__avx512skx);
  EDGESDK_SET(t, softmax, f32_softmax_16x__avx512skx);
  EDGESDK_SET(t, clustered_gemv, f32_clustered_gemv__avx512skx);
  EDGESDK_SET(t, clustered_decode, f32_clustered_decode__avx512skx);
  EDGESDK_SET(t, nnm_gather, f32_nnm_gather_16c__avx512skx);
  EDGESDK_SET(t, row_norm, f32_row_norm__avx512skx);
  EDGESDK_SET(t, log_softmax, f32_log_softmax__avx512skx);
  EDGESDK_SET(t, softmax_axis, f32_softmax_axis__avx512skx);
  EDGESDK_SET(t, reduce, f32_reduce__avx512skx);
  EDGESDK_SET(t, argreduce, f32_argreduce__avx512skx);
  EDGESDK_SET(t, col2im, f32_col2im__avx512skx);
  EDGESDK_SET(t, resize_nearest, f32_resize_nearest__avx512skx);
  EDGESDK_SET(t, resize_linear, f32_resize_linear__avx512skx);
  EDGESDK_SET(t, winograd_input, f32_winograd43_input_16c__avx512f);
  EDGESDK_SET(t, winograd_output, f32_winograd43_output_16c__avx512f);
  EDGESDK_SET(t, winograd_weights, f32_winograd43_weights_16x__avx512f);
  t.spmm_tile = 64;
  EDGESDK_SET(t, spmm_f32_nb1, f32_spmm_64x1__avx512f);
  EDGESDK_SET(t, spmm_f32_nb2, f32_spmm_64x2__avx512f);
  EDGESDK_SET(t, spmm_f32_nb4, f32_spmm_64x4__avx512f);
  EDGESDK_SET(t, spmm_f32_nb8, f32_spmm_32x8__avx512f);
  EDGESDK_SET(t, spmm_f16w_nb1, f32_f16w_spmm_64x1__avx512f);
  EDGESDK_SET(t, spmm_f16w_nb2, f32_f16w_spmm_64x2__avx512f);
  EDGESDK_SET(t, spmm_f16w_nb4, f32_f16w_spmm_64x4__avx512f);
  EDGESDK_SET(t, spmm_f16w_nb8, f32_f16w_spmm_32x8__avx512f);
  EDGESDK_SET(t, spmm_cbw_nb1, f32_cbw_spmm_64x1__avx512f);
  EDGESDK_SET(t, spmm_cbw_nb2, f32_cbw_spmm_64x2__avx512f);
  EDGESDK_SET(t, spmm_cbw_nb4, f32_cbw_spmm_64x4__avx512f);
  EDGESDK_SET(t, spmm_cbw_nb8, f32_cbw_spmm_32x8__avx512f);
  EDGESDK_SET(t, nonfinite_scan, f32_nonfinite_scan_64x__avx512f);
  EDGESDK_SET(t, dwconv_chw_3x3s1, f32_dwconv2d_chw_3x3s1__avx512skx);
  EDGESDK_SET(t, dwconv_chw_3x3s2, f32_dwconv2d_chw_3x3s2__avx512skx);
  EDGESDK_SET(t, dwconv_chw_5x5s1, f32_dwconv2d_chw_5x5s1__avx512skx);
  EDGESDK_SET(t, dwconv_chw_5x5s2, f32_dwconv2d_chw_5x5s2__avx512skx);
  EDGESDK_SET(t, gavgpool_chw, f32_gavgpool_chw__avx512skx);
  EDGESDK_SET(t, transpose_f32, f32_transpose_16x16__avx512skx);
  set_qu8_gemm(t, kAvx512Qu8MR, kAvx512Qu8NR, 4, Qu8Layout::C4Split16, false);
  EDGESDK_SET(t, qu8_igemm, qu8_igemm_8x16c4__avx512skx);
  EDGESDK_SET(t, qu8_igemm_narrow, qu8_igemm_narrow_8x16c4__avx512skx);
  EDGESDK_SET(t, qu8_depthwise, qu8_depthwise_16c__avx512skx);
  EDGESDK_SET(t, qu8_maxpool, qu8_maxpool_64c__avx512skx);
  EDGESDK_SET(t, qu8_avgpool, qu8_avgpool_16c__avx512skx);
  EDGESDK_SET(t, qu8_global_avgpool, qu8_global_avgpool_64c__avx512skx);
  EDGESDK_SET(t, qu8_add, qu8_add_16x__avx512skx);
  EDGESDK_SET(t, qu8_mul, qu8_mul_16x__avx512skx);
  EDGESDK_SET(t, qu8_requantize, qu8_requantize_16x__avx512skx);
  EDGESDK_SET(t, qu8_lut, qu8_lut_64x__avx512skx);
  return t;
}
constexpr KernelTable kAvx512Table = avx512_table();

// The avx512 table plus the vpdpbusd qu8 GEMMs and depthwise convolution.
constexpr KernelTable avx512vnni_table() {
  KernelTable t = vnni_level(kAvx512Table, Isa::Avx512Vnni, "avx512vnni", kAvx512VnniQu8MR, kAvx512VnniQu8NR);
  EDGESDK_SET(t, qu8_igemm, qu8_igemm_8x16c4__avx512vnni);
  EDGESDK_SET(t, qu8_igemm_x2, qu8_igemm_8x32c4__avx512vnni);
  EDGESDK_SET(t, qu8_depthwise, qu8_depthwise_16c__avx512vnni);
  return t;
}
constexpr KernelTable kAvx512VnniTable = avx512vnni_table();

// The avx512vnni table plus the AMX tdpbusd qu8 GEMMs (16 rows a tile; the depthwise convolution and
// everything else stay avx512vnni's).
constexpr KernelTable avx512amx_table() {
  KernelTable t = vnni_level(kAvx512VnniTable, Isa::Avx512Amx, "avx512amx", kAvx512AmxQu8MR, kAvx512AmxQu8NR);
  EDGESDK_SET(t, qu8_igemm, qu8_igemm_16x16c4__avx512amx);
  EDGESDK_SET(t, qu8_igemm_x2, qu8_igemm_16x32c4__avx512amx);
  return t;
}
constexpr KernelTable kAvx512AmxTable = avx512amx_table();
#endif

#if defined(__aarch64__)
// NEON looks up through byte tables of at least 16 bytes (vqtbl1q_u8): 4 fp32 entries.
constexpr KernelTable neon_table() {
  KernelTable t = base_table(Isa::Neon, "neon", kNeonMR, kNeonNR, kNeonLanes, 4, false);
  EDGESDK_SET(t, igemm_f32w, f32_igemm_8x8__neon);
  EDGESDK_SET(t, igemm_f16w, f32_f16w_igemm_8x8__neon);
  EDGESDK_SET(t, activation, f32_activation_4x__neon);
  EDGESDK_SET(t, depthwise, f32_depthwise_4c__neon);
  EDGESDK_SET(t, maxpool, f32_maxpool_4c__neon);
  EDGESDK_SET(t, avgpool, f32_avgpool_4c__neon);
  EDGESDK_SET(t, global_avgpool, f32_global_avgpool_16c__neon);
  EDGESDK_SET(t, binary, f32_binary_4x__neon);
  EDGESDK_SET(t, softmax, f32_softmax_4x__neon);
  EDGESDK_SET(t, clustered_gemv, f32_clustered_gemv__neon);
  EDGESDK_SET(t, clustered_decode, f32_clustered_decode__neon);
  EDGESDK_SET(t, nnm_gather, f32_nnm_gather_4c__neon);
  EDGESDK_SET(t, row_norm, f32_row_norm__neon);
  EDGESDK_SET(t, log_softmax, f32_log_softmax__neon);
  EDGESDK_SET(t, softmax_axis, f32_softmax_axis__neon);
  EDGESDK_SET(t, reduce, f32_reduce__neon);
  EDGESDK_SET(t, argreduce, f32_argreduce__neon);
  EDGESDK_SET(t, col2im, f32_col2im__neon);
  EDGESDK_SET(t, resize_nearest, f32_resize_nearest__neon);
  EDGESDK_SET(t, resize_linear, f32_resize_linear__neon);
  EDGESDK_SET(t, winograd_input, f32_winograd43_input_4c__neon);
  EDGESDK_SET(t, winograd_output, f32_winograd43_output_4c__neon);
  EDGESDK_SET(t, winograd_weights, f32_winograd43_weights_4x__neon);
  t.spmm_tile = 16;
  EDGESDK_SET(t, spmm_f32_nb1, f32_spmm_16x1__neon);
  EDGESDK_SET(t, spmm_f32_nb2, f32_spmm_16x2__neon);
  EDGESDK_SET(t, spmm_f32_nb4, f32_spmm_8x4__neon);
  EDGESDK_SET(t, spmm_f16w_nb1, f32_f16w_spmm_16x1__neon);
  EDGESDK_SET(t, spmm_f16w_nb2, f32_f16w_spmm_16x2__neon);
  EDGESDK_SET(t, spmm_f16w_nb4, f32_f16w_spmm_8x4__neon);
  EDGESDK_SET(t, spmm_cbw_nb1, f32_cbw_spmm_16x1__neon);
  EDGESDK_SET(t, spmm_cbw_nb2, f32_cbw_spmm_16x2__neon);
  EDGESDK_SET(t, spmm_cbw_nb4, f32_cbw_spmm_8x4__neon);
  EDGESDK_SET(t, nonfinite_scan, f32_nonfinite_scan_16x__neon);
  EDGESDK_SET(t, dwconv_chw_3x3s1, f32_dwconv2d_chw_3x3s1__neon);
  EDGESDK_SET(t, dwconv_chw_3x3s2, f32_dwconv2d_chw_3x3s2__neon);
  EDGESDK_SET(t, dwconv_chw_5x5s1, f32_dwconv2d_chw_5x5s1__neon);
  EDGESDK_SET(t, dwconv_chw_5x5s2, f32_dwconv2d_chw_5x5s2__neon);
  EDGESDK_SET(t, gavgpool_chw, f32_gavgpool_chw__neon);
  EDGESDK_SET(t, transpose_f32, f32_transpose_4x4__neon);
  set_qu8_gemm(t, kNeonQu8MR, kNeonQu8NR, 1, Qu8Layout::KMajor, false);
  EDGESDK_SET(t, qu8_igemm, qu8_igemm_4x16__neon);
  EDGESDK_SET(t, qu8_depthwise, qu8_depthwise_8c__neon);
  EDGESDK_SET(t, qu8_maxpool, qu8_maxpool_16c__neon);
  EDGESDK_SET(t, qu8_avgpool, qu8_avgpool_8c__neon);
  EDGESDK_SET(t, qu8_global_avgpool, qu8_global_avgpool_16c__neon);
  EDGESDK_SET(t, qu8_add, qu8_add_8x__neon);
  EDGESDK_SET(t, qu8_mul, qu8_mul_8x__neon);
  EDGESDK_SET(t, qu8_requantize, qu8_requantize_8x__neon);
  EDGESDK_SET(t, qu8_lut, qu8_lut_16x__neon);
  return t;
}
constexpr KernelTable kNeonTable = neon_table();

// The neon table (every fp32 kernel, and igemm_f16w for fp16 weights in fp32 sessions) plus the
// ARMv8.2-A fp16-arithmetic kernels, which only fp16 sessions ask for.
constexpr KernelTable neonfp16_table() {
  KernelTable t = kNeonTable;
  t.isa = Isa::NeonFp16;
  t.name = "neonfp16";
  t.f16_gemm_mr = kNeonFp16MR;
  t.f16_gemm_nr = kNeonFp16NR;
  EDGESDK_SET(t, igemm_f16, f16_f32acc_igemm_4x16__neonfp16);
  EDGESDK_SET(t, depthwise_f16, f16_f32acc_depthwise_16c__neonfp16);
  EDGESDK_SET(t, convert_f32_f16, f32_f16_vcvt_8x__neonfp16);
  return t;
}
constexpr KernelTable kNeonFp16Table = neonfp16_table();

// The neonfp16 table plus the sdot qu8 GEMM (signed x signed: activations go in as x ^ 0x80).
constexpr KernelTable neondot_table() {
  KernelTable t = kNeonFp16Table;
  t.isa = Isa::NeonDot;
  t.name = "neondot";
  set_qu8_gemm(t, kNeonDotQu8MR, kNeonDotQu8NR, 4, Qu8Layout::C4, true);
  EDGESDK_SET(t, qu8_igemm, qu8_igemm_4x16c4__neondot);
  return t;
}
constexpr KernelTable kNeonDotTable = neondot_table();
#endif

#undef EDGESDK_SET

bool has_flag(const cpu::CpuFeatures& f, const char* name) {
  for (const auto& [flag, present] : f.flags)
    if (flag == name) return present;
  return false;
}

// Linux (5.16 and later) enables the AMX tile data state (XTILEDATA, XCR0 bit 18) for a process only
// once it asks for it: without ARCH_REQ_XCOMP_PERM the first tile instruction raises SIGILL
// (Documentation/arch/x86/xstate.rst). Asked once per process (the permission covers every thread
// and survives fork). The kernel refuses it (ENOSPC) when a thread's sigaltstack is too small for
// the 8 KB of tile data in a signal frame, and from then on refuses sigaltstacks that small; the
// level is then not offered and avx512vnni runs instead.
bool amx_permitted() {
#if defined(__linux__) && (defined(__x86_64__) || defined(_M_X64))
  static const bool granted = [] {
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return granted;
#else
  return false;  // other systems: no known way to enable it (Windows enables it by itself, untested)
#endif
}

bool cpu_supports(Isa isa) {
  static const cpu::CpuFeatures features = cpu::detect();
  switch (isa) {
    case Isa::Scalar: return true;
    case Isa::Avx2:
      return has_flag(features, "avx2") && has_flag(features, "fma") && has_flag(features, "f16c");
    case Isa::AvxVnni: return cpu_supports(Isa::Avx2) && has_flag(features, "avx_vnni");
    case Isa::Avx512:
      return has_flag(features, "avx512f") && has_flag(features, "avx512bw") &&
             has_flag(features, "avx512vl") && has_flag(features, "avx512dq") &&
             has_flag(features, "f16c") && has_flag(features, "fma");
    case Isa::Avx512Vnni: return cpu_supports(Isa::Avx512) && has_flag(features, "avx512vnni");
    // "amx_tile" / "amx_int8": CPUID.(7,0):EDX bits 24, 25 with XCR0 bits 17, 18 (cpu_features.cc).
    case Isa::Avx512Amx:
      return cpu_supports(Isa::Avx512Vnni) && has_flag(features, "amx_tile") && has_flag(features, "amx_int8") &&
             amx_permitted();
    case Isa::Neon: return has_flag(features, "neon");
    // "fp16" is HWCAP fphp + asimdhp (scalar and vector half arithmetic, cpu_features.cc). FHM
    // (FMLAL) is detected and reported but not needed: see gemm_neonfp16.cc.
    case Isa::NeonFp16: return has_flag(features, "neon") && has_flag(features, "fp16");
    // "dotprod" is HWCAP asimddp (SDOT/UDOT).
    case Isa::NeonDot: return cpu_supports(Isa::NeonFp16) && has_flag(features, "dotprod");
  }
  return false;
}

const KernelTable* table_of(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return &kScalarTable;
#if defined(__x86_64__) || defined(_M_X64)
    case Isa::Avx2: return &kAvx2Table;
    case Isa::AvxVnni: return &kAvxVnniTable;
    case Isa::Avx512: return &kAvx512Table;
    case Isa::Avx512Vnni: return &kAvx512VnniTable;
    case Isa::Avx512Amx: return &kAvx512AmxTable;
#endif
#if defined(__aarch64__)
    case Isa::Neon: return &kNeonTable;
    case Isa::NeonFp16: return &kNeonFp16Table;
    case Isa::NeonDot: return &kNeonDotTable;
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
  out.push_back(Isa::AvxVnni);
  out.push_back(Isa::Avx512);
  out.push_back(Isa::Avx512Vnni);
  out.push_back(Isa::Avx512Amx);
#endif
#if defined(__aarch64__)
  out.push_back(Isa::Neon);
  out.push_back(Isa::NeonFp16);
  out.push_back(Isa::NeonDot);
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
    case Isa::AvxVnni: return "avxvnni";
    case Isa::Avx512: return "avx512";
    case Isa::Neon: return "neon";
    case Isa::Avx512Vnni: return "avx512vnni";
    case Isa::Avx512Amx: return "avx512amx";
    case Isa::NeonFp16: return "neonfp16";
    case Isa::NeonDot: return "neondot";
  }
  return "?";
}

Isa parse_isa(const std::string& name) {
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::AvxVnni, Isa::Avx512, Isa::Avx512Vnni, Isa::Avx512Amx, Isa::Neon,
                  Isa::NeonFp16, Isa::NeonDot})
    if (name == isa_name(isa)) return isa;
  throw std::invalid_argument(
      "unknown ISA '" + name +
      "' (expected scalar, avx2, avxvnni, avx512, avx512vnni, avx512amx, neon, neonfp16 or neondot)");
}

std::vector<std::pair<const char*, const char*>> kernel_names(Isa isa) {
  const KernelTable* t = table_of(isa);
  if (t == nullptr) throw std::runtime_error(std::string("ISA ") + isa_name(isa) + " is not compiled in for this arch");
  std::vector<std::pair<const char*, const char*>> out;
#define EDGESDK_KERNEL_NAME(slot) \
  if (t->names.slot != nullptr) out.emplace_back(#slot, t->names.slot);
  EDGESDK_KERNEL_SLOTS(EDGESDK_KERNEL_NAME)
#undef EDGESDK_KERNEL_NAME
  return out;
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
