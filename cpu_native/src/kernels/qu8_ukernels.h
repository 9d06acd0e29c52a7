// qu8 microkernels beside the dispatch table's slots (ukernels.h, "Quantized uint8"): the packed
// weights of the x86 depthwise kernels, and QuantizeLinear (fp32 -> 8-bit codes).
//
// Packed depthwise weights. The x86 depthwise kernels (the table's qu8_depthwise slot on avx2,
// avx512 and avx512vnni) read their weights, folded bias and requantization constants from one
// buffer the operator packs once per weight set (operators_qu8.h, Qu8DepthwisePlan) with the
// level's Qu8DwPacker, and passes as Qu8DepthwiseArgs::weights_lo16 (the field's int32 type and
// 64-byte alignment; not the (int16 w, 0) lanes that ukernels.h's comment describes, which no
// kernel reads any more). Their arithmetic is the scalar kernel's, bit for bit: the input zero
// point is folded into the bias (bias - x_zp * sum of the KH*KW weights, modulo 2^32) and padding
// taps read x_zp, so every window is a full KH x KW sum of raw bytes times weights.
//
// The kernels interleave the KH taps of one input column (kernel rows ky) into vector lanes so one
// instruction multiplies several taps: avx512vnni groups 4 rows per int32 lane as bytes (vpdpbusd:
// u8 x s8, 4 products summed exactly into the lane), avx512 and avx2 2 rows per lane as int16
// (vpmaddwd: 2 products summed exactly); avx2's narrow kernel (qu8_depthwise_narrow_8c__avx2, for weights
// whose row pairs fit vpmaddubsw's int16 sums) packs avxvnni's 4 rows a lane as bytes. Kernel rows past
// KH in the last group have zero weights.
// The interleave of 16 channels of each row with two levels of in-lane unpacks leaves, per 128-bit
// lane L, channels 16L + 4v .. 16L + 4v + 3 in vector v (v = 0..3): channel
//   ch(v, i) = 16 * (i / 4) + 4 * v + i % 4     (i = int32 lane of a 128/256/512-bit vector v)
// and the packs that narrow four such vectors to bytes put the channels back in order, so the
// permutation exists only inside a block. Blocks of channels (the layouts below) hold, in 64-byte
// (avx512) or 32-byte (avx2) lines: the folded bias, the weights, the requantization constants in
// the form the level's requantization loads, and (avx512) a flags line.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/dispatch.h"
#include "kernels/ukernels.h"

namespace edgesdk::kernels {

// What a packer reads: weights [KH][KW][C] (channel multiplier 1), bias_folded [C], rq
// (kQu8RqRows x C, requantization.h's table).
struct Qu8DwPackArgs {
  const int8_t* weights;
  const int32_t* bias_folded;
  const int32_t* rq;
  size_t c, kh, kw;
};

// A level's packing of depthwise weights: bytes(c, kh, kw) of buffer (64-byte aligned), and
// pack(args, out) fills it.
// Blocks are self-contained (bias, weights and requantization of their channels) and every block
// but the last is `block` channels wide, so the channels [c0, C) with c0 a multiple of `block` run
// as a problem of their own: input and output offset by c0, C - c0 channels (the strides kept),
// the packed weights from byte bytes(c0, kh, kw) on (Qu8DepthwisePlan::run's channel slices).
struct Qu8DwPacker {
  size_t (*bytes)(size_t c, size_t kh, size_t kw) = nullptr;
  void (*pack)(const Qu8DwPackArgs* args, void* out) = nullptr;
  size_t block = 0;
  bool packs() const { return pack != nullptr; }
};

// The packer of a level's qu8_depthwise kernel, or an empty one where the kernel reads the plain
// weights (scalar, NEON).
Qu8DwPacker qu8_dw_packer(Isa isa, bool narrow = false);

// True when every pair of kernel rows (4g, 4g+1) and (4g+2, 4g+3) of weights [KH][KW][C] (rows past
// KH: 0) keeps vpmaddubsw's int16 sum exact for any uint8 inputs (ukernels.h's bound: positive
// parts and negative parts each summing to at most 128): the qu8_depthwise_narrow slot's condition.
bool qu8_dw_pairs_fit_int16(const int8_t* w, size_t c, size_t kh, size_t kw);

// The largest window the packed kernels take (larger ones run the scalar kernel).
constexpr size_t kQu8DwMaxRows = 64, kQu8DwMaxTaps = 1024;

// AVX-512 blocks (qu8_avx512_dwconv.inl): 64 channels as 4 zmm accumulators, and for the last
// channels (when fewer than 64 remain) 64 (33..63 left), 32 (17..32: two zmm, vectors (0, 1) and
// (2, 3) as ymm halves) or 16 (1..16: one zmm, natural order) wide. Lines per block:
//   acc vectors NK = width / 16;  [0, NK) folded bias;  then for group g (4 rows on avx512vnni,
//   2 on avx512) and kernel column kx, NK weight lines (int32 lanes: the group's rows as bytes or
//   int16, first row lowest); then kQu8DwAvx512RqLines requantization lines per accumulator vector
//   (qu8_avx512.inl's RqVec: mult, mult_odd, left, round_even, round_odd, neg_even, neg_odd,
//   shift_even, shift_odd; then the fp32 form's scale, offset for x >= 0, offset for x < 0); then
//   one flags line (int32: any left shift, any INT32_MIN multiplier, odd_high, fp32 form valid).
// Every block but the last is 64 wide, so block b starts at b * qu8_dw_avx512_lines(64, ...).
constexpr size_t kQu8DwAvx512RqLines = 12;
static inline size_t qu8_dw_avx512_width(size_t remaining) {
  return remaining > 32 ? 64 : remaining > 16 ? 32 : 16;
}
static inline size_t qu8_dw_avx512_lines(size_t width, size_t groups, size_t kw) {
  const size_t nk = width / 16;
  return nk * (1 + groups * kw + kQu8DwAvx512RqLines) + 1;
}

// AVX2 blocks (qu8_avx2.inl): 32 channels as 4 ymm accumulators (vectors v = 0..3), the last block
// 32 wide too. Lines of 32 bytes per block: [0, 4) folded bias; 4 weight lines per (g, kx) of the
// row groups (avx2: 2 rows as int16 pairs; avxvnni: 4 rows as bytes, first row lowest); kQu8DwAvx2RqLines requantization lines per accumulator (qu8_avx2.cc's
// RqVec: mult, mult_odd, left, right, mask, threshold; then its fp32 form's scale and offsets for
// x >= 0 and x < 0); one flags line (int32: any left shift of accumulators 0..3, fp32 form valid).
constexpr size_t kQu8DwAvx2RqLines = 9;
static inline size_t qu8_dw_avx2_lines(size_t groups, size_t kw) {
  return 4 * (1 + groups * kw + kQu8DwAvx2RqLines) + 1;
}

// The channel of int32 lane i of interleaved vector v (see above).
static inline size_t qu8_dw_lane_channel(size_t v, size_t i) { return 16 * (i / 4) + 4 * v + i % 4; }

// The row groups of a KH-row window at `rows` kernel rows per int32 lane (the last padded with zero
// weights), and the packed int32 lane of one channel's rows of a group, first row lowest: 2 rows as
// int16 (vpmaddwd: avx2, avx512) or 4 as bytes (vpdpbusd: avxvnni, avx512vnni).
static inline size_t qu8_dw_groups(size_t kh, size_t rows) { return (kh + rows - 1) / rows; }
static inline int32_t qu8_dw_pair_lane(const int8_t* w) {
  return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint16_t>(w[0])) |
                              static_cast<uint32_t>(static_cast<uint16_t>(w[1])) << 16);
}
static inline int32_t qu8_dw_quad_lane(const int8_t* w) {
  uint32_t lane = 0;
  for (size_t t = 0; t < 4; ++t) lane |= static_cast<uint32_t>(static_cast<uint8_t>(w[t])) << (8 * t);
  return static_cast<int32_t>(lane);
}

#if defined(__x86_64__) || defined(_M_X64)
size_t qu8_dw_bytes__avx2(size_t c, size_t kh, size_t kw);
void qu8_dw_pack__avx2(const Qu8DwPackArgs* args, void* out);
size_t qu8_dw_narrow_bytes__avx2(size_t c, size_t kh, size_t kw);
void qu8_dw_narrow_pack__avx2(const Qu8DwPackArgs* args, void* out);
size_t qu8_dw_bytes__avxvnni(size_t c, size_t kh, size_t kw);
void qu8_dw_pack__avxvnni(const Qu8DwPackArgs* args, void* out);
size_t qu8_dw_bytes__avx512skx(size_t c, size_t kh, size_t kw);
void qu8_dw_pack__avx512skx(const Qu8DwPackArgs* args, void* out);
size_t qu8_dw_bytes__avx512vnni(size_t c, size_t kh, size_t kw);
void qu8_dw_pack__avx512vnni(const Qu8DwPackArgs* args, void* out);
#endif

// QuantizeLinear per tensor, ONNX's arithmetic as edgesdk's numpy lowering computes it: t = x /
// scale (fp32 division), rounded to the nearest integer, halves to even, + zero_point (fp32
// addition), NaN -> qmin (what ONNX Runtime gives), clamped to [qmin, qmax] (-128 <= qmin <= qmax
// <= 255: uint8 or int8 codes), stored as the code's low byte. n values.
struct Qu8QuantizeParams {
  float scale, zero_point;
  int32_t qmin, qmax;
};
using Qu8QuantizeUkernel = void (*)(const float* x, uint8_t* y, size_t n, const Qu8QuantizeParams* params);

void qu8_quantize__scalar(const float* x, uint8_t* y, size_t n, const Qu8QuantizeParams* params);
#if defined(__x86_64__) || defined(_M_X64)
void qu8_quantize_32x__avx2(const float* x, uint8_t* y, size_t n, const Qu8QuantizeParams* params);
void qu8_quantize_64x__avx512skx(const float* x, uint8_t* y, size_t n, const Qu8QuantizeParams* params);
#endif
#if defined(__aarch64__)
void qu8_quantize_16x__neon(const float* x, uint8_t* y, size_t n, const Qu8QuantizeParams* params);
#endif

// Bytes of c planes (plane_stride apart) to n pixels of c interleaved bytes: y[p * c + ch] =
// planes[ch * plane_stride + p]. QuantizeLinear into NHWC quantizes planes, then interleaves.
using U8InterleaveUkernel = void (*)(const uint8_t* planes, size_t plane_stride, size_t c, uint8_t* y, size_t n);
void u8_interleave__scalar(const uint8_t* planes, size_t plane_stride, size_t c, uint8_t* y, size_t n);
#if defined(__x86_64__) || defined(_M_X64)
void u8_interleave__avx2(const uint8_t* planes, size_t plane_stride, size_t c, uint8_t* y, size_t n);
void u8_interleave__avx512skx(const uint8_t* planes, size_t plane_stride, size_t c, uint8_t* y, size_t n);
#endif
#if defined(__aarch64__)
void u8_interleave__neon(const uint8_t* planes, size_t plane_stride, size_t c, uint8_t* y, size_t n);
#endif
U8InterleaveUkernel u8_interleave_kernel(Isa isa);

// The level's QuantizeLinear kernel and its name (avx512vnni runs avx512's, neonfp16 and neondot
// neon's).
Qu8QuantizeUkernel qu8_quantize_kernel(Isa isa, const char** name = nullptr);

// DequantizeLinear per tensor, ONNX's arithmetic as edgesdk's numpy lowering computes it: y =
// float(x - zero_point) * scale (the difference exact in fp32, one rounded multiply), x uint8 or
// (is_signed) int8 codes. n values.
struct Qu8DequantizeParams {
  float scale;
  int32_t zero_point;
  bool is_signed;
};
using Qu8DequantizeUkernel = void (*)(const uint8_t* x, float* y, size_t n, const Qu8DequantizeParams* params);

void qu8_dequantize__scalar(const uint8_t* x, float* y, size_t n, const Qu8DequantizeParams* params);
#if defined(__x86_64__) || defined(_M_X64)
void qu8_dequantize_32x__avx2(const uint8_t* x, float* y, size_t n, const Qu8DequantizeParams* params);
void qu8_dequantize_64x__avx512skx(const uint8_t* x, float* y, size_t n, const Qu8DequantizeParams* params);
#endif
#if defined(__aarch64__)
void qu8_dequantize_16x__neon(const uint8_t* x, float* y, size_t n, const Qu8DequantizeParams* params);
#endif
Qu8DequantizeUkernel qu8_dequantize_kernel(Isa isa, const char** name = nullptr);

}  // namespace edgesdk::kernels
