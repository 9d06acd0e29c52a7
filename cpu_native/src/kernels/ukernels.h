// Microkernel interfaces: the argument structs and function-pointer types every ISA implements,
// and the per-ISA entry points. Operators (operators.h) pick them through a KernelTable
// (dispatch.h); nothing here allocates or threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/common.h"

namespace edgesdk::kernels {

// ---------------------------------------------------------------------------------------------
// GEMM / indirect GEMM. One microkernel form serves both: A rows come from a pointer array,
// ks groups of MR pointers (one group per kernel position; plain GEMM has ks = 1). Packed
// weights for one NR-wide panel are [ks][kc][NR] (fp32, or fp16 bits for the f16w variant).
//   c[i][j] = (accumulate ? c[i][j] : bias[j]) + sum_s sum_k a[s*MR+i][k] * w[s][k][j]
// then, when kGemmFinal is set, clamped to [min, max]. Rows >= mr of the pointer array must be
// readable (drivers repeat the last row); only rows < mr and columns < nr are written.
// kGemmHardSwish (with kGemmFinal): ONNX HardSwish, x * clamp(x / 6 + 1/2, 0, 1), before the clamp;
// read only by the kernels of tables with igemm_hardswish set (dispatch.h), which the drivers check.
enum : uint32_t { kGemmAccumulate = 1u, kGemmFinal = 2u, kGemmHardSwish = 4u };

using IgemmUkernel = void (*)(size_t mr, size_t nr, size_t kc, size_t ks, const float* const* a,
                              const void* w, const float* bias, float* c, size_t ldc,
                              uint32_t flags, const MinMax* clamp);

// The fp16-arithmetic form (fp16 sessions on CPUs with ARMv8.2-A FEAT_FP16): A rows and the packed
// panels are fp16 (IEEE binary16 bits; the drivers convert the fp32 activations when they pack A or
// build the indirection), bias and C stay fp32. Products are formed in half and accumulated in
// fp32: the kernel multiply-adds into fp16 accumulators (one rounding per fused multiply-add) and
// widens them into fp32 accumulators after every kF16KBlock products of the flattened K, counted
// from the start of the call (kernel position major, channel minor). Drivers cut K only at
// multiples of kF16KBlock, so a result does not depend on how K was blocked.
using F16IgemmUkernel = void (*)(size_t mr, size_t nr, size_t kc, size_t ks, const uint16_t* const* a,
                                 const void* w, const float* bias, float* c, size_t ldc,
                                 uint32_t flags, const MinMax* clamp);
constexpr size_t kF16KBlock = 16;

// fp32 -> fp16 (round to nearest even, overflow to inf) of n contiguous values.
using ConvertF32F16Ukernel = void (*)(const float* x, uint16_t* y, size_t n);

// In-place activation of n contiguous floats (the non-clamp kinds, and any kind).
using ActivationUkernel = void (*)(float* x, size_t n, const Activation* act);

// ---------------------------------------------------------------------------------------------
// Depthwise convolution, NHWC. Weights [KH][KW][C*multiplier], output channel oc = c*mult + j
// reads input channel c. The kernel computes output rows [row_begin, row_end) of N*OH rows.
struct DepthwiseArgs {
  const float* input;   // [N][H][W][C], pixel stride in_stride
  const float* weights; // [KH][KW][OC]
  // fp16-arithmetic kernels only (null otherwise): the same input and weights as fp16 bits, in the
  // same layout and strides. Those kernels accumulate in fp16 and widen into fp32 after every
  // kF16KBlock in-bounds taps in (ky, kx) order; bias and output stay fp32.
  const uint16_t* input_f16;
  const uint16_t* weights_f16;
  const float* bias;    // [OC] or null
  float* output;        // [N][OH][OW][OC], pixel stride out_stride
  size_t n, h, w, c, multiplier;
  size_t kh, kw, stride_h, stride_w, dil_h, dil_w, pad_top, pad_left;
  size_t oh, ow;
  size_t in_stride, out_stride;
  Activation act;
};
using DepthwiseUkernel = void (*)(const DepthwiseArgs* args, size_t row_begin, size_t row_end);

// ---------------------------------------------------------------------------------------------
// Pooling, NHWC. Rows [row_begin, row_end) of N*OH output rows.
struct PoolArgs {
  const float* input;
  float* output;
  size_t n, h, w, c;
  size_t kh, kw, stride_h, stride_w, dil_h, dil_w, pad_top, pad_left, pad_bottom, pad_right;
  size_t oh, ow;
  size_t in_stride, out_stride;
  bool count_include_pad;  // average only
  Activation act;
};
using PoolUkernel = void (*)(const PoolArgs* args, size_t row_begin, size_t row_end);
// Global average pooling of one image: mean over `pixels` rows of C channels.
using GlobalAvgPoolUkernel = void (*)(const float* x, size_t pixels, size_t c, size_t in_stride,
                                      float* y, const Activation* act);

// ---------------------------------------------------------------------------------------------
// CHW (planar) kernels: a network whose 1x1 convolutions run on planes (sparse 1x1 kernels read a
// whole [C][H*W] activation as a K x N matrix) stays in CHW between them, so its depthwise
// convolutions and global average pooling need planar forms too, and the layout conversions at the
// edges of a CHW run need a fast transpose.
//
// Depthwise convolution, CHW: input [N][C][H][W], weights [C*m][KH][KW], bias [C*m] or null,
// output [N][C*m][OH][OW]; output channel oc reads input channel oc / m. The kernel computes output
// rows [row_begin, row_end) of one output plane, plane = b * C*m + oc. Every output is
//   act(fma(x_t, w_t, ... fma(x_0, w_0, bias)))  over its in-bounds taps t in (ky, kx) order,
// one fused multiply-add a tap from the bias (0 without one). The specialised SIMD kernels read a
// padding tap as 0 and add 0 * w, which leaves the sum unchanged (w finite), so they and the
// generic scalar kernel give the same bits before the activation (ukernels.h's activation
// post-processing may then differ in the last bits for the transcendental kinds).
struct DwChwArgs {
  const float* input;
  const float* weights;
  const float* bias;
  float* output;
  size_t n, c, h, w, multiplier;
  size_t kh, kw, stride_h, stride_w, dil_h, dil_w, pad_top, pad_left;
  size_t oh, ow;
  Activation act;
};
using DwChwUkernel = void (*)(const DwChwArgs* args, size_t plane, size_t row_begin, size_t row_end);

// Global average pooling, CHW: y[p] = act(mean of the hw values of plane p) for `planes`
// consecutive planes of x ([planes][hw]).
using GavgpoolChwUkernel = void (*)(const float* x, size_t planes, size_t hw, float* y, const Activation* act);

// 2-D transpose of one block: dst[j * dst_stride + i] = src[i * src_stride + j] for i < rows,
// j < cols (strides in elements; the element size is the kernel's: x8, f32 (any 32-bit), x64).
// The drivers cut an image into cache-sized blocks; the kernels step in SIMD tiles with tails.
using TransposeUkernel = void (*)(const void* src, size_t src_stride, void* dst, size_t dst_stride, size_t rows,
                                  size_t cols);

// ---------------------------------------------------------------------------------------------
// Element-wise binary op over rows of C values: y = act(a op b).
enum class BinaryOp : uint8_t { Add, Sub, Mul };
enum class Broadcast : uint8_t { None /*b is [rows][C]*/, PerChannel /*b is [C]*/, Scalar /*b is [1]*/ };
struct BinaryArgs {
  const float* a;
  const float* b;
  float* y;
  size_t c;  // row length
  size_t a_stride, b_stride, y_stride;  // row strides (b_stride unused unless Broadcast::None)
  BinaryOp op;
  Broadcast broadcast;
  bool b_first;  // compute b op a (for Sub with a broadcast left operand)
  Activation act;
};
using BinaryUkernel = void (*)(const BinaryArgs* args, size_t row_begin, size_t row_end);

// Softmax of one row of n values (x and y may alias).
using SoftmaxUkernel = void (*)(const float* x, float* y, size_t n);

// ---------------------------------------------------------------------------------------------
// Normalisation, softmax along an axis, reductions, transposed-convolution gather, resize.
// Tensors are seen as (outer, axis, inner): the op runs along the middle dimension.

// Row normalisation (LayerNormalization, InstanceNormalization): each row of n values becomes
// (x - mean) / sqrt(var + eps) * scale + bias, var the population variance, computed in two
// passes (the mean, then the squared deviations from it) with blocked accumulation.
struct RowNormArgs {
  const float* x;
  float* y;             // may alias x
  size_t n;             // row length
  const float* scale;   // per_column: [n]; else [channels], row r uses channel r % channels
  const float* bias;    // like scale, or null
  size_t channels;
  bool per_column;      // layer norm (true) or instance norm (false)
  float eps;
};
using RowNormUkernel = void (*)(const RowNormArgs* args, size_t row_begin, size_t row_end);

// Log-softmax of one row of n values: x - max - log(sum e^(x - max)) (x and y may alias).
using LogSoftmaxUkernel = void (*)(const float* x, float* y, size_t n);

// Work units of the strided families (inner > 1): unit u covers slice o = u / blocks and the
// columns [c0, min(c0 + block, inner)) with c0 = (u % blocks) * block, blocks = ceil(inner/block).
// With inner == 1, unit u is row u.
struct AxisShape {
  size_t axis, inner, block;
};
// (static inline, not a member: see the ODR note in common.h.)
static inline size_t axis_blocks(const AxisShape& s) { return s.inner == 1 ? 1 : div_up(s.inner, s.block); }

// Softmax (or log-softmax) along the axis, vectorised across inner columns (inner > 1).
struct SoftmaxAxisArgs {
  const float* x;
  float* y;  // may alias x
  AxisShape shape;
  bool log;
};
using SoftmaxAxisUkernel = void (*)(const SoftmaxAxisArgs* args, size_t unit_begin, size_t unit_end);

// y[o][c] = reduction of x[o][:][c]. Max and Min propagate NaN (numpy, ONNX Runtime); over an
// empty axis: Sum, SumSquare, L2 give 0, Mean NaN, Max -inf, Min +inf, LogSumExp -inf.
enum class ReduceOp : uint8_t { Sum, Mean, Max, Min, L2, SumSquare, LogSumExp };
struct ReduceArgs {
  const float* x;
  float* y;
  AxisShape shape;
  ReduceOp op;
};
using ReduceUkernel = void (*)(const ReduceArgs* args, size_t unit_begin, size_t unit_end);

// y[o][c] = index along the axis of the max (is_max) or min of x[o][:][c]: the first one, or the
// last with select_last. NaN counts as the extreme (numpy's argmax/argmin: the first NaN wins;
// with select_last, the last NaN). axis >= 1.
struct ArgReduceArgs {
  const float* x;
  int64_t* y;
  AxisShape shape;
  bool is_max;
  bool select_last;
};
using ArgReduceUkernel = void (*)(const ArgReduceArgs* args, size_t unit_begin, size_t unit_end);

// Transposed convolution, NHWC, as a gather: output pixel (oy, ox) sums the contributions of every
// input pixel (iy, ix) and tap (ky, kx) with oy = iy*stride_h - pad_top + ky*dil_h (same in x).
// Contributions come from `col`, the GEMM of the input with the weights: row (b, iy, ix) holds
// [groups][kh*kw][cout_g] values at row stride col_stride. Without col (depthwise: one input and
// one output channel per group) they are x[b][iy][ix][c] * dw_weights[ky*kw + kx][c].
// Output channel g*cout_g + j gets bias, then the activation. Rows [row_begin, row_end) of N*OH.
struct Col2ImArgs {
  const float* col;
  size_t col_stride;
  const float* x;           // depthwise only: [N][H][W][C]
  const float* dw_weights;  // depthwise only: [kh*kw][C]
  const float* bias;        // [c_out] or null
  float* y;                 // [N][OH][OW][c_out]
  size_t n, h, w, oh, ow;
  size_t kh, kw, stride_h, stride_w, dil_h, dil_w, pad_top, pad_left;
  size_t groups, cout_g, c_out;
  Activation act;
};
using Col2ImUkernel = void (*)(const Col2ImArgs* args, size_t row_begin, size_t row_end);
// Bound on kh, kw and on the taps reaching one output pixel (the drivers check it).
constexpr size_t kMaxCol2ImTaps = 1024;

// Resize over the two spatial axes with caller-computed source indices (validated in range) and
// weights of the second tap: linear is (1 - wx)*v0 + wx*v1 along x, then the same along y; nearest
// reads (iy0, ix0). nchw: rows are the N*C*OH output rows; nhwc: the N*OH output rows (C per pixel).
// x2_nearest (nchw nearest): ix0[ox] == ox / 2 for every ox, each input value written twice.
struct ResizeArgs {
  const float* x;
  float* y;
  size_t n, c, h, w, oh, ow;
  bool nhwc;
  const int32_t* iy0;
  const int32_t* iy1;
  const float* wy;
  const int32_t* ix0;
  const int32_t* ix1;
  const float* wx;
  bool x2_nearest;
};
// scratch: 2*OW floats (linear nchw keeps the two horizontally interpolated source rows).
using ResizeUkernel = void (*)(const ResizeArgs* args, size_t row_begin, size_t row_end, float* scratch);

// ---------------------------------------------------------------------------------------------
// Winograd F(4x4, 3x3) (Lavin & Gray 2016; seed 001 ch. III): a 3x3 stride-1 convolution as
// Y = A^T [ (G g G^T) . (B^T d B) ] A per 4x4 output tile, d the 6x6 input patch around it, g a 3x3
// filter: 36 products per tile and channel pair where the direct convolution has 144. With the
// interpolation points 0, +-1, +-2 and infinity:
//   B^T = [4  0 -5  0  1  0]   G = [ 1/4     0     0]   A^T = [1  1  1  1  1  0]
//         [0 -4 -4  1  1  0]       [-1/6  -1/6  -1/6]         [0  1 -1  2 -2  0]
//         [0  4 -4 -1  1  0]       [-1/6   1/6  -1/6]         [0  1  1  4  4  0]
//         [0 -2 -1  2  1  0]       [1/24  1/12   1/6]         [0  1 -1  8 -8  1]
//         [0  2 -1 -2  1  0]       [1/24 -1/12   1/6]
//         [0  4  0 -5  0  1]       [   0     0     1]
// Transform positions e = 6*row + column of the 6x6 products. The drivers (operators.h, ConvPlan)
// transform the weights once (U = G g G^T, packed per position as igemm_f32w panels), transform a
// block of tiles with the input kernel into V [36][tiles][C], run the 36 GEMMs M_e = V_e U_e with
// the level's igemm_f32w, and take M [36][tiles][K] back to NHWC with the output kernel.
constexpr size_t kWinogradTile = 4;     // output pixels per tile side
constexpr size_t kWinogradPatch = 6;    // input pixels per tile side (tile + 3 - 1)
constexpr size_t kWinogradPositions = 36;

// Input transform of one tile, channels vectorised (NHWC): v[e * v_stride + ch] = (B^T d B)[e] for
// ch < channels, d[i][j] = pixels[6*i + j][ch]. pixels are the patch's 36 pixel pointers, row-major,
// each to `channels` floats (a zero vector where the patch leaves the input: padding, edge tiles).
using WinogradInputUkernel = void (*)(const float* const* pixels, size_t channels, float* v, size_t v_stride);

// Weight transform of n independent 3x3 filters, vectorised across them: u[e * u_stride + i] =
// (G g G^T)[e] for i < n, the filter's taps at g[(3 * tap_row + tap_col) * g_stride + i] (a
// clustered panel's [9][C][NR] floats with g_stride = C * NR, decoded on every call, so it must
// be cheap). G is
// exact only in real arithmetic (1/6, 1/12, 1/24): the SIMD kernels' factored forms and the
// scalar reference's written-out products differ in the last bits.
using WinogradWeightsUkernel = void (*)(const float* g, size_t g_stride, size_t n, float* u, size_t u_stride);

// Output transform of one tile: for ch < channels, the 4x4 values (A^T m A)[i][j] + bias[ch], m[e] =
// m[e * m_stride + ch], clamped to [min, max] (NaN stays NaN), stored at
// y[i * y_row_stride + j * y_pixel_stride + ch] for i < rows, j < cols (edge tiles store less).
// Returns whether a stored value is NaN or infinite: the drivers then recompute those outputs
// directly. Winograd sums combine every input of the 6x6 patch and cancel the ones outside an
// output's 3x3 window only in exact arithmetic, so an infinite input gives inf - inf = NaN where the
// direct convolution's result is finite or infinite (tests/test_nan_inf.py); finite inputs do so
// only where a transform overflows.
using WinogradOutputUkernel = bool (*)(const float* m, size_t m_stride, size_t channels, const float* bias,
                                       float* y, size_t y_row_stride, size_t y_pixel_stride, size_t rows,
                                       size_t cols, const MinMax* clamp);

// ---------------------------------------------------------------------------------------------
// Clustered weights (k-means weight sharing): b-bit indices into a codebook.
// Kernel layout ("lane words"): a row of K indices is cut into blocks of L*F indices, where L is
// the ISA's lane count and F = floor(32 / b) the fields per 32-bit word. A block is L words;
// field j (bits [j*b, (j+1)*b)) of word i holds the index of column kb + j*L + i, so one vector
// load gives L lanes and shifting by b walks the fields while x is read contiguously. Columns
// past K hold index 0 and meet zero-padded x. Tables are per row (per-channel codebooks) or one
// (per-layer), each with T = max(2^b, table_min) fp32 entries, entry t = codebook[t mod 2^b], so
// a lookup that sees extra high bits of the next field still gets the right value.
//
// Nibble layout (4-bit codes on ISAs whose table sets clustered_nibbles, i.e. AVX2): a row is
// cut into blocks of 64 columns stored in 32 bytes (8 words); byte p holds column
// c0 + nibble_column(p) in its low nibble and c0 + 32 + nibble_column(p) in its high nibble, with
// nibble_column(p) = 8*(p%16/4) + p%4 + (p<16 ? 0 : 4). That is the order in which four vpshufb
// lookups (one per byte plane of the fp32 codebook) and the unpack-lo/hi byte and word
// interleaves deliver floats, so x is read contiguously. Each table is then 64 bytes: byte
// plane j (byte j of every entry) at [16j, 16j+16).
static inline size_t nibble_column(size_t p) { return 8 * (p % 16 / 4) + p % 4 + (p < 16 ? 0 : 4); }

struct ClusteredGemvArgs {
  const uint32_t* words;   // rows * words_per_row
  size_t words_per_row;    // blocks * L
  const float* tables;     // tables_count * table_size
  size_t table_size;
  bool per_row_table;
  unsigned bits;           // 4 with nibbles = the nibble layout
  bool nibbles;
  const float* x;          // padded to whole blocks, zeros past K
  const float* bias;       // [N] or null
  float* y;                // [N]
  Activation act;
};
// y[n] for rows [row_begin, row_end).
using ClusteredGemvUkernel = void (*)(const ClusteredGemvArgs* args, size_t row_begin, size_t row_end);
// Decodes one row (all blocks) to floats: out has the row's padded length.
using ClusteredDecodeUkernel = void (*)(const uint32_t* words, size_t words_per_row, const float* table,
                                        unsigned bits, bool nibbles, float* out);

// NNM gather-accumulate: out[p][k] = act(bias[k] + sum_g cent[p][g*kc + assign[g*K + k]]).
struct NnmGatherArgs {
  const float* cent;      // [P][groups*kc], row stride cent_stride
  const int32_t* assign;  // [groups][K], values in [0, kc)
  const float* bias;      // [K] or null
  float* out;             // [P][K], row stride out_stride
  size_t k, kc, groups, cent_stride, out_stride;
  Activation act;
};
using NnmGatherUkernel = void (*)(const NnmGatherArgs* args, size_t p_begin, size_t p_end);

// ---------------------------------------------------------------------------------------------
// Quantized uint8 ("qu8"): asymmetric uint8 activations with a per-tensor zero point, int8 weights
// symmetric per output channel (zero point 0), int32 bias, int32 accumulation, and gemmlowp
// requantization fused into every kernel's epilogue (uint8 in, uint8 out). The arithmetic is
// defined once in requantization.h (the scalar formulas every SIMD kernel reproduces bit for bit):
//   y = clamp(rdbpot(srdhm(sat(acc << left), multiplier), right) + zero_point, qmin, qmax)
// with multiplier, shift (left = max(shift, 0), right = max(-shift, 0)) per output channel.
// Accumulation wraps modulo 2^32 in every variant (vpdpbusd, vpmaddwd + vpaddd, sdot, smlal all
// wrap; the scalar kernels add in uint32), so results agree bit for bit even past int32; an exact
// sum needs |bias| + K * 255 * 128 < 2^31 (K < 65793 without bias).

// Requantization constants of one output scale (qu8_requant_of in requantization.h):
// rounding_mask = 2^right - 1 and rounding_threshold = rounding_mask >> 1 are rdbpot's.
struct Qu8Requant {
  int32_t multiplier, left_shift, right_shift, rounding_mask, rounding_threshold;
};
// Per-channel constants of `count` channels are stored as rows: row r (kQu8Rq*) of channel j at
// rq[r * count + j], so a kernel loads one vector of each row per channel block.
// The last three rows hold the fp32 form's constants as float bits (qu8_fp_requant in
// requantization.h; scale 0 where that form does not apply), so a GEMM tile loads them rather than
// deriving them from the integer rows on every call.
enum : size_t {
  kQu8RqMultiplier = 0, kQu8RqLeft, kQu8RqRight, kQu8RqMask, kQu8RqThreshold,
  kQu8RqFpScale, kQu8RqFpOffsetPos, kQu8RqFpOffsetNeg, kQu8RqRows
};

// The output's zero point and the clamp [qmin, qmax] that carries fused activations (Relu clamps
// at the zero point, Relu6 at [zero point, quant(6)]; 0..255 without one).
struct Qu8Output {
  int32_t zero_point;
  uint8_t qmin, qmax;
};

// Indirect GEMM, the fp32 form's (ks groups of MR row pointers, only rows < mr read): for output
// row i and column j < nr,
//   acc = bias[j] + sum_s sum_k a[s*MR+i][k] * w[s][k][j]   (raw uint8 times int8, kc per s)
//   c[i*ldc + j] = requantize(acc, channel j of rq (kQu8RqRows x NR), out).
// The input zero point is folded into the packed bias (operators_qu8.h): padding rows point at a
// vector of zero-point bytes, which the folded bias cancels. Packed weights of one NR-wide panel
// are [ks][round_up(kc, KR)][NR] in the level's Qu8Layout (below); past kc they are zero. A kernel
// may read round_up(kc, 4) bytes of every row, as XNNPACK's do: the bytes past kc meet zero
// weights, so their values never matter, but they must be readable. The callers guarantee it
// (operators_qu8.cc: Qu8RowGuard). Byte-by-byte tails made C = 3 inputs (an RGB network's first
// convolution: every tap a tail) 2x slower.
// The qu8_igemm_x2 slot (levels that fill it) takes two consecutive panels in one call, as one
// 2*NR-wide tile: w the first panel, the second right after it (ks * round_up(kc, KR) * NR bytes
// on), bias and rq of both (2*NR entries, and the rq tables of both panels one after the other),
// nr in (NR, 2*NR]. It shares each row's activation broadcast between the two panels: MobileNets'
// 1x1 expansions (K = 16-32) spent a third of a one-panel call loading them.
using Qu8IgemmUkernel = void (*)(size_t mr, size_t nr, size_t kc, size_t ks, const uint8_t* const* a, const void* w,
                                 const int32_t* bias, const int32_t* rq, uint8_t* c, size_t ldc, const Qu8Output* out);

// The qu8_igemm_narrow slot (avx2, avx512: levels without a 4-product instruction) multiplies with
// vpmaddubsw: per 16-bit lane, two uint8 activations times two int8 weights summed with int16
// saturation, then vpmaddwd by 1 into int32 lanes, 3 instructions per vector of 4 k where the
// 16-bit widening takes 5. It is exact only for weights whose pairs (k = 4b, 4b+1 and 4b+2, 4b+3
// of a kernel position, the pairs of Qu8Layout::C4) can never leave int16: for every pair,
//   255 * (max(w0, 0) + max(w1, 0)) <= 32767 and 255 * (max(-w0, 0) + max(-w1, 0)) <= 32768,
// that is positive parts and negative parts each summing to at most 128. 7-bit weights ([-64, 64],
// ONNX Runtime's reduce_range) always pass; full 8-bit ones rarely do. pack_qu8_gemm_weights checks
// every pair (qu8_pairs_fit_int16) and takes this kernel, packed C4, only when all pass, so results
// stay bit-exact whatever the weights; other layers run the level's qu8_igemm.
bool qu8_pairs_fit_int16(const int8_t* w, size_t n, size_t k, size_t ks);

// How a level's qu8 GEMM wants one panel's weights (kernel position s, reduction step kb of KR):
//   KMajor     KR = 1: int8 w[k][j] at (s*kcp + k)*NR + j (scalar, NEON smlal).
//   C4         KR = 4: int8 w[4kb+t][j] at ((s*kcp/4 + kb)*NR + j)*4 + t: four consecutive k of a
//              column in one 32-bit lane (vpdpbusd, sdot).
//   C4Split16  KR = 4: int16 pairs per 32-bit lane, (w[4kb][j], w[4kb+2][j]) in the first NR lanes
//              of a step and (w[4kb+1][j], w[4kb+3][j]) in the next NR: vpmaddwd's operands against
//              the activations' bytes 0 and 2 (mask 0x00FF00FF) and 1 and 3 (16-bit shift by 8) of
//              a broadcast 32-bit load, which needs no shuffle to widen them.
// Xor80 levels (NEON sdot, signed x signed) feed the kernel x ^ 0x80 = x - 128 as int8; their
// packed bias adds 128 * sum_k w[k][j] back.
enum class Qu8Layout : uint8_t { KMajor, C4, C4Split16 };

// Depthwise convolution NHWC, weights [KH][KW][C*multiplier], output channel oc = c*mult + j from
// input channel c: acc = bias[oc] + sum over in-bounds taps of (x - input_zero_point) * w (padding
// taps are skipped: they stand for the zero point and add 0), then requantized with channel oc of
// rq (kQu8RqRows x C*mult). A pixel whose window lies inside the input may start from bias_folded
// instead and multiply the raw bytes: the same sum. Output rows [row_begin, row_end) of N*OH.
struct Qu8DepthwiseArgs {
  const uint8_t* input;        // [N][H][W][C], pixel stride in_stride
  const int8_t* weights;       // [KH][KW][OC]
  const int32_t* weights_lo16; // the same as int32 lanes holding (int16 w, 0): vpmaddwd's operand (x86)
  const int32_t* bias;         // [OC] or null
  const int32_t* bias_folded;  // [OC]: bias - input_zero_point * (sum of the KH*KW weights), modulo 2^32
  const int32_t* rq;           // kQu8RqRows x OC
  uint8_t* output;             // [N][OH][OW][OC], pixel stride out_stride
  size_t n, h, w, c, multiplier;
  size_t kh, kw, stride_h, stride_w, dil_h, dil_w, pad_top, pad_left;
  size_t oh, ow;
  size_t in_stride, out_stride;
  int32_t input_zero_point;
  Qu8Output out;
};
using Qu8DepthwiseUkernel = void (*)(const Qu8DepthwiseArgs* args, size_t row_begin, size_t row_end);

// Pooling NHWC, rows [row_begin, row_end) of N*OH. Max: the largest in-bounds tap (padding never
// wins; 0 for a window with none). Average: acc = sum of the in-bounds taps' (x - input_zero_point)
// (padding adds 0), requantized with entry `count` of rq (kQu8RqRows x (KH*KW + 1)), count the
// in-bounds taps or, with count_include_pad, the taps inside the padded input.
struct Qu8PoolArgs {
  const uint8_t* input;
  uint8_t* output;
  size_t n, h, w, c;
  size_t kh, kw, stride_h, stride_w, dil_h, dil_w, pad_top, pad_left, pad_bottom, pad_right;
  size_t oh, ow;
  size_t in_stride, out_stride;
  bool count_include_pad;
  int32_t input_zero_point;
  const int32_t* rq;  // average only
  Qu8Output out;      // average only
};
using Qu8PoolUkernel = void (*)(const Qu8PoolArgs* args, size_t row_begin, size_t row_end);
// Global average pooling of one image: y[c] = requantize(sum over `pixels` rows of (x - x_zp)).
using Qu8GlobalAvgPoolUkernel = void (*)(const uint8_t* x, size_t pixels, size_t c, size_t in_stride, uint8_t* y,
                                         int32_t input_zero_point, const Qu8Requant* rq, const Qu8Output* out);

// Element-wise over rows of C values, b as [rows][C], [C] or [1] (Broadcast):
//   add (TFLite's quantized Add, left shift 20):
//     sa = requantize((a - a_zp) << 20, a_rq), sb = requantize((b - b_zp) << 20, b_rq),
//     y = clamp(requantize(sa + sb, out_rq) + zp, qmin, qmax), sa + sb summed exactly (as
//     requantize then clamps it to int32, a saturating int32 add gives the same);
//   mul: y = clamp(requantize((a - a_zp) * (b - b_zp), out_rq) + zp, qmin, qmax).
struct Qu8BinaryArgs {
  const uint8_t* a;
  const uint8_t* b;
  uint8_t* y;
  size_t c;
  Broadcast broadcast;
  int32_t a_zero_point, b_zero_point;
  Qu8Requant a_rq, b_rq, out_rq;  // add uses all three, mul out_rq
  Qu8Output out;
};
using Qu8BinaryUkernel = void (*)(const Qu8BinaryArgs* args, size_t row_begin, size_t row_end);
constexpr int kQu8AddLeftShift = 20;

// Rescale of n values: y = clamp(requantize(x - x_zp, rq) + zp, qmin, qmax).
using Qu8RequantizeUkernel = void (*)(const uint8_t* x, uint8_t* y, size_t n, int32_t input_zero_point,
                                      const Qu8Requant* rq, const Qu8Output* out);

// Table lookup of n bytes: y[i] = table[x[i]] (256 entries; QLinearLookup's activations).
using Qu8LutUkernel = void (*)(const uint8_t* x, uint8_t* y, size_t n, const uint8_t* table);

// qu8 GEMM tiles (MR x NR, reduction step KR = the c4 of the name) per level.
constexpr size_t kScalarQu8MR = 4, kScalarQu8NR = 4;
constexpr size_t kAvx2Qu8MR = 4, kAvx2Qu8NR = 16;
constexpr size_t kAvxVnniQu8MR = 6, kAvxVnniQu8NR = 16;
constexpr size_t kAvx512Qu8MR = 8, kAvx512Qu8NR = 16;
constexpr size_t kAvx512VnniQu8MR = 8, kAvx512VnniQu8NR = 16;
// AMX (qu8_avx512amx.cc): one 16-row tile of int32 accumulators per 16-column panel.
constexpr size_t kAvx512AmxQu8MR = 16, kAvx512AmxQu8NR = 16;
constexpr size_t kNeonQu8MR = 4, kNeonQu8NR = 16;
constexpr size_t kNeonDotQu8MR = 4, kNeonDotQu8NR = 16;

// ---------------------------------------------------------------------------------------------
// Sparse x dense product in CHW layout (1x1 convolutions with pruned weights; XNNPACK's f32-spmm
// design): Y[k][p] = clamp(bias[k] + sum_c W[k][c] * X[c][p]) for a group of output-channel blocks
// of NB rows each (operators_sparse.h packs them). A block stores, for each input channel where any
// of its NB rows is non-zero, NB weights (explicit zeros where a row has none) and the channel
// delta to the block's next stored channel. Per output element the sum runs bias first, then the
// stored channels in increasing order, on every level (the SIMD kernels fuse each multiply-add,
// the scalar ones round the product and the sum separately).
enum class SpmmValues : uint8_t { F32, F16, Codebook };
struct SpmmBlocks {
  const void* values;       // per block: count x NB entries, entry-major (fp32, fp16 bits or uint8 indices)
  const int32_t* deltas;    // per stored entry: channels to the block's next stored one (last: 0)
  const uint32_t* counts;   // stored entries of each block
  const uint32_t* first;    // first stored channel of each block (0 for an empty block)
  const float* bias;        // NB per block (zeros without a bias)
  // Codebook values only: row r of the group reads tables + r * table_stride (table_stride 0: one
  // table for every row), indexed by the entry's uint8.
  const float* tables;
  size_t table_stride;
};
// mc pixels (any count: the kernels step MR pixels, then shorter tails) of nblocks blocks; x points
// at channel 0 of the first pixel, channels x_stride floats apart; y at the first block's first row,
// rows y_stride floats apart. Only the mc pixels of each row are read and written.
using SpmmUkernel = void (*)(size_t mc, size_t nblocks, const float* x, size_t x_stride, const SpmmBlocks* w,
                             float* y, size_t y_stride, const MinMax* clamp);
// True when any of rows x rows n pixels (rows x_stride floats apart) is NaN or +-inf: the sparse
// driver's scan that sends such pixels to the dense rule (operators_sparse.h).
using NonfiniteScanUkernel = bool (*)(const float* x, size_t rows, size_t x_stride, size_t n);

// ---------------------------------------------------------------------------------------------
// Register-block sizes (MR x NR) of each ISA's GEMM microkernel, and clustered lane counts.
constexpr size_t kScalarMR = 4, kScalarNR = 4, kScalarLanes = 4;
constexpr size_t kAvx2MR = 6, kAvx2NR = 16, kAvx2Lanes = 8;
constexpr size_t kAvx512MR = 8, kAvx512NR = 32, kAvx512NarrowNR = 16, kAvx512Lanes = 16;
constexpr size_t kNeonMR = 8, kNeonNR = 8, kNeonLanes = 4;
// fp16-arithmetic GEMM tile: 4 rows x 16 columns is 8 fp16 + 16 fp32 accumulator registers, 4 A
// and 2 W registers: 30 of the 32 NEON registers (gemm_neonfp16.cc).
constexpr size_t kNeonFp16MR = 4, kNeonFp16NR = 16;

// ---------------------------------------------------------------------------------------------
// The microkernels, named as XNNPACK names its own: <datatype>_<op>_<tile>__<isa>.
//   datatype  f32 (fp32 in and out); f32_f16w (fp32 activations, fp16 weights widened on load);
//             f16_f32acc (fp16 products, fp32 accumulation); f32_f16 (fp32 -> fp16 conversion);
//             qu8 (uint8 activations, int8 weights, int32 accumulation, uint8 out).
//   tile      the unit of the kernel's main loop, only where it has one: MRxNR for a GEMM register
//             tile (the k*MR/k*NR constants above), MRxNRc4 for one that reduces 4 k per step
//             (XNNPACK's "c4"), <N>c for NHWC channels in blocks of N
//             (XNNPACK's dwconv "8c"), <N>x for N contiguous elements per step. Kernels whose loops
//             step in several widths (row and strided-column paths, 4-vector sums then single
//             vectors) and the scalar references (one element at a time) name none.
//   isa       what the code is compiled for and needs: scalar (portable C++), avx2 (AVX2 + FMA +
//             F16C), avxvnni (avx2 + AVX-VNNI's 256-bit vpdpbusd), avx512f (AVX-512 F only: gemm_avx512.cc is compiled with -mavx512f alone),
//             avx512skx (AVX-512 F + BW + DQ + VL, Skylake-X: the vector kernels use DQ mask moves),
//             avx512vnni (avx512skx + AVX512_VNNI's vpdpbusd), avx512amx (avx512vnni + AMX-TILE and
//             AMX-INT8's tdpbusd), neon (AArch64 Advanced SIMD),
//             neonfp16 (ARMv8.2-A FEAT_FP16 arithmetic), neondot (ARMv8.2-A FEAT_DotProd sdot).
// The dispatch tables (dispatch.cc) pick them per ISA level (the level names scalar, avx2, avxvnni,
// avx512, avx512vnni, avx512amx, neon, neonfp16, neondot are dispatch.h's) and report the names (kernel_names()). The
// scalar ones are the references the SIMD ones are tested against (cpu_native/tests/kernel_tests.cc);
// each SIMD file sits beside its scalar counterpart (gemm_<isa>.cc by gemm_scalar.cc,
// vector_kernels_<isa>.cc by reference_scalar.cc, qu8_<isa>.cc by qu8_scalar.cc).
template <class Ukernel>
using UkernelFunction = std::remove_pointer_t<Ukernel>;  // declares a function of that pointer type

// Portable C++ (gemm_scalar.cc, reference_scalar.cc).
UkernelFunction<IgemmUkernel> f32_igemm_4x4__scalar, f32_f16w_igemm_4x4__scalar;
UkernelFunction<ActivationUkernel> f32_activation__scalar;
UkernelFunction<DepthwiseUkernel> f32_depthwise__scalar;
UkernelFunction<PoolUkernel> f32_maxpool__scalar, f32_avgpool__scalar;
UkernelFunction<GlobalAvgPoolUkernel> f32_global_avgpool__scalar;
UkernelFunction<BinaryUkernel> f32_binary__scalar;
UkernelFunction<SoftmaxUkernel> f32_softmax__scalar;
UkernelFunction<ClusteredGemvUkernel> f32_clustered_gemv__scalar;
UkernelFunction<ClusteredDecodeUkernel> f32_clustered_decode__scalar;
UkernelFunction<NnmGatherUkernel> f32_nnm_gather__scalar;
UkernelFunction<RowNormUkernel> f32_row_norm__scalar;
UkernelFunction<LogSoftmaxUkernel> f32_log_softmax__scalar;
UkernelFunction<SoftmaxAxisUkernel> f32_softmax_axis__scalar;
UkernelFunction<ReduceUkernel> f32_reduce__scalar;
UkernelFunction<ArgReduceUkernel> f32_argreduce__scalar;
UkernelFunction<Col2ImUkernel> f32_col2im__scalar;
UkernelFunction<ResizeUkernel> f32_resize_nearest__scalar, f32_resize_linear__scalar;
// Winograd F(4x4, 3x3) transforms (winograd_scalar.cc: the matrices applied as written).
UkernelFunction<WinogradInputUkernel> f32_winograd43_input__scalar;
UkernelFunction<WinogradOutputUkernel> f32_winograd43_output__scalar;
UkernelFunction<WinogradWeightsUkernel> f32_winograd43_weights__scalar;
// Sparse 1x1 (spmm_scalar.cc): 8 pixels a step, blocks of 1, 2 and 4 rows; fp32, fp16 and codebook values.
UkernelFunction<SpmmUkernel> f32_spmm_8x1__scalar, f32_spmm_8x2__scalar, f32_spmm_8x4__scalar;
UkernelFunction<SpmmUkernel> f32_f16w_spmm_8x1__scalar, f32_f16w_spmm_8x2__scalar, f32_f16w_spmm_8x4__scalar;
UkernelFunction<SpmmUkernel> f32_cbw_spmm_8x1__scalar, f32_cbw_spmm_8x2__scalar, f32_cbw_spmm_8x4__scalar;
UkernelFunction<NonfiniteScanUkernel> f32_nonfinite_scan__scalar;
// CHW kernels (chw_scalar.cc): the generic depthwise convolution (every geometry), global average
// pooling, and blocked transposes of 1-, 4- and 8-byte elements.
UkernelFunction<DwChwUkernel> f32_dwconv2d_chw__scalar;
UkernelFunction<GavgpoolChwUkernel> f32_gavgpool_chw__scalar;
UkernelFunction<TransposeUkernel> x8_transpose__scalar, f32_transpose__scalar, x64_transpose__scalar;
// qu8 (qu8_scalar.cc).
UkernelFunction<Qu8IgemmUkernel> qu8_igemm_4x4__scalar;
UkernelFunction<Qu8DepthwiseUkernel> qu8_depthwise__scalar;
UkernelFunction<Qu8PoolUkernel> qu8_maxpool__scalar, qu8_avgpool__scalar;
UkernelFunction<Qu8GlobalAvgPoolUkernel> qu8_global_avgpool__scalar;
UkernelFunction<Qu8BinaryUkernel> qu8_add__scalar, qu8_mul__scalar;
UkernelFunction<Qu8RequantizeUkernel> qu8_requantize__scalar;
UkernelFunction<Qu8LutUkernel> qu8_lut__scalar;

#if defined(__x86_64__) || defined(_M_X64)
// AVX2 + FMA + F16C (gemm_avx2.cc; vector_kernels_avx2.cc: 8-lane vectors).
UkernelFunction<IgemmUkernel> f32_igemm_6x16__avx2, f32_f16w_igemm_6x16__avx2;
UkernelFunction<ActivationUkernel> f32_activation_8x__avx2;
UkernelFunction<DepthwiseUkernel> f32_depthwise_8c__avx2;
UkernelFunction<PoolUkernel> f32_maxpool_8c__avx2, f32_avgpool_8c__avx2;
UkernelFunction<GlobalAvgPoolUkernel> f32_global_avgpool_32c__avx2;
UkernelFunction<BinaryUkernel> f32_binary_8x__avx2;
UkernelFunction<SoftmaxUkernel> f32_softmax_8x__avx2;
UkernelFunction<ClusteredGemvUkernel> f32_clustered_gemv__avx2;
UkernelFunction<ClusteredDecodeUkernel> f32_clustered_decode__avx2;
UkernelFunction<NnmGatherUkernel> f32_nnm_gather_8c__avx2;
UkernelFunction<RowNormUkernel> f32_row_norm__avx2;
UkernelFunction<LogSoftmaxUkernel> f32_log_softmax__avx2;
UkernelFunction<SoftmaxAxisUkernel> f32_softmax_axis__avx2;
UkernelFunction<ReduceUkernel> f32_reduce__avx2;
UkernelFunction<ArgReduceUkernel> f32_argreduce__avx2;
UkernelFunction<Col2ImUkernel> f32_col2im__avx2;
UkernelFunction<ResizeUkernel> f32_resize_nearest__avx2, f32_resize_linear__avx2;
// Winograd F(4x4, 3x3) transforms (winograd_avx2.cc: 8 channels a step).
UkernelFunction<WinogradInputUkernel> f32_winograd43_input_8c__avx2;
UkernelFunction<WinogradOutputUkernel> f32_winograd43_output_8c__avx2;
UkernelFunction<WinogradWeightsUkernel> f32_winograd43_weights_8x__avx2;
// Sparse 1x1 (spmm_avx2.cc, AVX2 + FMA + F16C): MR pixels (4 or 2 vectors) x NB rows.
UkernelFunction<SpmmUkernel> f32_spmm_32x1__avx2, f32_spmm_32x2__avx2, f32_spmm_16x4__avx2;
UkernelFunction<SpmmUkernel> f32_f16w_spmm_32x1__avx2, f32_f16w_spmm_32x2__avx2, f32_f16w_spmm_16x4__avx2;
UkernelFunction<SpmmUkernel> f32_cbw_spmm_32x1__avx2, f32_cbw_spmm_32x2__avx2, f32_cbw_spmm_16x4__avx2;
UkernelFunction<NonfiniteScanUkernel> f32_nonfinite_scan_32x__avx2;
// CHW kernels (chw_simd.inl in vector_kernels_avx2.cc: 8 outputs of a row a step, 8x8 transpose tiles).
UkernelFunction<DwChwUkernel> f32_dwconv2d_chw_3x3s1__avx2, f32_dwconv2d_chw_3x3s2__avx2;
UkernelFunction<DwChwUkernel> f32_dwconv2d_chw_5x5s1__avx2, f32_dwconv2d_chw_5x5s2__avx2;
UkernelFunction<GavgpoolChwUkernel> f32_gavgpool_chw__avx2;
UkernelFunction<TransposeUkernel> f32_transpose_8x8__avx2;
// qu8 (qu8_avx2.cc: 8 int32 lanes).
UkernelFunction<Qu8IgemmUkernel> qu8_igemm_4x16c4__avx2;
UkernelFunction<Qu8IgemmUkernel> qu8_igemm_narrow_4x16c4__avx2;  // vpmaddubsw (the qu8_igemm_narrow slot)
UkernelFunction<Qu8DepthwiseUkernel> qu8_depthwise_8c__avx2;
UkernelFunction<Qu8DepthwiseUkernel> qu8_depthwise_narrow_8c__avx2;  // vpmaddubsw (the qu8_depthwise_narrow slot)
UkernelFunction<Qu8PoolUkernel> qu8_maxpool_32c__avx2, qu8_avgpool_8c__avx2;
UkernelFunction<Qu8GlobalAvgPoolUkernel> qu8_global_avgpool_32c__avx2;
UkernelFunction<Qu8BinaryUkernel> qu8_add_16x__avx2, qu8_mul_16x__avx2;
UkernelFunction<Qu8RequantizeUkernel> qu8_requantize_16x__avx2;
UkernelFunction<Qu8LutUkernel> qu8_lut_32x__avx2;
// AVX-VNNI (qu8_avxvnni.cc, also AVX2 + FMA + F16C): the avxvnni level adds these to the avx2 table.
UkernelFunction<Qu8IgemmUkernel> qu8_igemm_6x16c4__avxvnni;
UkernelFunction<Qu8DepthwiseUkernel> qu8_depthwise_8c__avxvnni;

// AVX-512: the GEMM needs F only (gemm_avx512.cc); the vector kernels F + BW + DQ + VL
// (vector_kernels_avx512.cc: 16-lane vectors).
UkernelFunction<IgemmUkernel> f32_igemm_8x32__avx512f, f32_f16w_igemm_8x32__avx512f;
// fp32 weights of at most 16 output channels (the igemm_f32w_narrow slot, dispatch.h): NR = 16.
UkernelFunction<IgemmUkernel> f32_igemm_8x16__avx512f;
UkernelFunction<ActivationUkernel> f32_activation_16x__avx512skx;
UkernelFunction<DepthwiseUkernel> f32_depthwise_16c__avx512skx;
UkernelFunction<PoolUkernel> f32_maxpool_16c__avx512skx, f32_avgpool_16c__avx512skx;
UkernelFunction<GlobalAvgPoolUkernel> f32_global_avgpool_64c__avx512skx;
UkernelFunction<BinaryUkernel> f32_binary_16x__avx512skx;
UkernelFunction<SoftmaxUkernel> f32_softmax_16x__avx512skx;
UkernelFunction<ClusteredGemvUkernel> f32_clustered_gemv__avx512skx;
UkernelFunction<ClusteredDecodeUkernel> f32_clustered_decode__avx512skx;
UkernelFunction<NnmGatherUkernel> f32_nnm_gather_16c__avx512skx;
UkernelFunction<RowNormUkernel> f32_row_norm__avx512skx;
UkernelFunction<LogSoftmaxUkernel> f32_log_softmax__avx512skx;
UkernelFunction<SoftmaxAxisUkernel> f32_softmax_axis__avx512skx;
UkernelFunction<ReduceUkernel> f32_reduce__avx512skx;
UkernelFunction<ArgReduceUkernel> f32_argreduce__avx512skx;
UkernelFunction<Col2ImUkernel> f32_col2im__avx512skx;
UkernelFunction<ResizeUkernel> f32_resize_nearest__avx512skx, f32_resize_linear__avx512skx;
// Winograd F(4x4, 3x3) transforms (winograd_avx512.cc: AVX-512 F alone, as the GEMM; 16 channels a step).
UkernelFunction<WinogradInputUkernel> f32_winograd43_input_16c__avx512f;
UkernelFunction<WinogradOutputUkernel> f32_winograd43_output_16c__avx512f;
UkernelFunction<WinogradWeightsUkernel> f32_winograd43_weights_16x__avx512f;
// Sparse 1x1 (spmm_avx512.cc, AVX-512 F + FMA + F16C): MR pixels x NB rows (NB 8 on this level only).
UkernelFunction<SpmmUkernel> f32_spmm_64x1__avx512f, f32_spmm_64x2__avx512f, f32_spmm_64x4__avx512f,
    f32_spmm_32x8__avx512f;
UkernelFunction<SpmmUkernel> f32_f16w_spmm_64x1__avx512f, f32_f16w_spmm_64x2__avx512f, f32_f16w_spmm_64x4__avx512f,
    f32_f16w_spmm_32x8__avx512f;
UkernelFunction<SpmmUkernel> f32_cbw_spmm_64x1__avx512f, f32_cbw_spmm_64x2__avx512f, f32_cbw_spmm_64x4__avx512f,
    f32_cbw_spmm_32x8__avx512f;
UkernelFunction<NonfiniteScanUkernel> f32_nonfinite_scan_64x__avx512f;
// CHW kernels (chw_simd.inl in vector_kernels_avx512.cc: 16 outputs a step, 16x16 transpose tiles).
UkernelFunction<DwChwUkernel> f32_dwconv2d_chw_3x3s1__avx512skx, f32_dwconv2d_chw_3x3s2__avx512skx;
UkernelFunction<DwChwUkernel> f32_dwconv2d_chw_5x5s1__avx512skx, f32_dwconv2d_chw_5x5s2__avx512skx;
UkernelFunction<GavgpoolChwUkernel> f32_gavgpool_chw__avx512skx;
UkernelFunction<TransposeUkernel> f32_transpose_16x16__avx512skx;
// qu8 (qu8_avx512skx.cc: F + BW + DQ + VL, 16 int32 lanes; the GEMM widens to 16 bits).
UkernelFunction<Qu8IgemmUkernel> qu8_igemm_8x16c4__avx512skx;
UkernelFunction<Qu8IgemmUkernel> qu8_igemm_narrow_8x16c4__avx512skx;  // vpmaddubsw (the qu8_igemm_narrow slot)
UkernelFunction<Qu8DepthwiseUkernel> qu8_depthwise_16c__avx512skx;
UkernelFunction<Qu8PoolUkernel> qu8_maxpool_64c__avx512skx, qu8_avgpool_16c__avx512skx;
UkernelFunction<Qu8GlobalAvgPoolUkernel> qu8_global_avgpool_64c__avx512skx;
UkernelFunction<Qu8BinaryUkernel> qu8_add_16x__avx512skx, qu8_mul_16x__avx512skx;
UkernelFunction<Qu8RequantizeUkernel> qu8_requantize_16x__avx512skx;
UkernelFunction<Qu8LutUkernel> qu8_lut_64x__avx512skx;
// AVX512_VNNI (qu8_avx512vnni.cc, also F + BW + DQ + VL): the avx512vnni level adds these to the
// avx512 table.
UkernelFunction<Qu8IgemmUkernel> qu8_igemm_8x16c4__avx512vnni;
// Two panels per call (the qu8_igemm_x2 slot): 8 x 32, nr in (16, 32].
UkernelFunction<Qu8IgemmUkernel> qu8_igemm_8x32c4__avx512vnni;
UkernelFunction<Qu8DepthwiseUkernel> qu8_depthwise_16c__avx512vnni;
// AMX-TILE + AMX-INT8 (qu8_avx512amx.cc, also avx512vnni's flags): the avx512amx level adds these
// to the avx512vnni table: 16 x 16 (qu8_igemm) and 16 x 32 (qu8_igemm_x2) on tdpbusd.
UkernelFunction<Qu8IgemmUkernel> qu8_igemm_16x16c4__avx512amx;
UkernelFunction<Qu8IgemmUkernel> qu8_igemm_16x32c4__avx512amx;
#endif

#if defined(__aarch64__)
// AArch64 Advanced SIMD (gemm_neon.cc; vector_kernels_neon.cc: 4-lane vectors).
UkernelFunction<IgemmUkernel> f32_igemm_8x8__neon, f32_f16w_igemm_8x8__neon;
UkernelFunction<ActivationUkernel> f32_activation_4x__neon;
UkernelFunction<DepthwiseUkernel> f32_depthwise_4c__neon;
UkernelFunction<PoolUkernel> f32_maxpool_4c__neon, f32_avgpool_4c__neon;
UkernelFunction<GlobalAvgPoolUkernel> f32_global_avgpool_16c__neon;
UkernelFunction<BinaryUkernel> f32_binary_4x__neon;
UkernelFunction<SoftmaxUkernel> f32_softmax_4x__neon;
UkernelFunction<ClusteredGemvUkernel> f32_clustered_gemv__neon;
UkernelFunction<ClusteredDecodeUkernel> f32_clustered_decode__neon;
UkernelFunction<NnmGatherUkernel> f32_nnm_gather_4c__neon;
UkernelFunction<RowNormUkernel> f32_row_norm__neon;
UkernelFunction<LogSoftmaxUkernel> f32_log_softmax__neon;
UkernelFunction<SoftmaxAxisUkernel> f32_softmax_axis__neon;
UkernelFunction<ReduceUkernel> f32_reduce__neon;
UkernelFunction<ArgReduceUkernel> f32_argreduce__neon;
UkernelFunction<Col2ImUkernel> f32_col2im__neon;
UkernelFunction<ResizeUkernel> f32_resize_nearest__neon, f32_resize_linear__neon;
// Winograd F(4x4, 3x3) transforms (winograd_neon.cc: 4 channels a step).
UkernelFunction<WinogradInputUkernel> f32_winograd43_input_4c__neon;
UkernelFunction<WinogradOutputUkernel> f32_winograd43_output_4c__neon;
UkernelFunction<WinogradWeightsUkernel> f32_winograd43_weights_4x__neon;
// Sparse 1x1 (spmm_neon.cc): 16 pixels (4 vectors) x NB rows, 8 at NB 4.
UkernelFunction<SpmmUkernel> f32_spmm_16x1__neon, f32_spmm_16x2__neon, f32_spmm_8x4__neon;
UkernelFunction<SpmmUkernel> f32_f16w_spmm_16x1__neon, f32_f16w_spmm_16x2__neon, f32_f16w_spmm_8x4__neon;
UkernelFunction<SpmmUkernel> f32_cbw_spmm_16x1__neon, f32_cbw_spmm_16x2__neon, f32_cbw_spmm_8x4__neon;
UkernelFunction<NonfiniteScanUkernel> f32_nonfinite_scan_16x__neon;
// CHW kernels (chw_simd.inl in vector_kernels_neon.cc: 4 outputs a step, 4x4 transpose tiles).
UkernelFunction<DwChwUkernel> f32_dwconv2d_chw_3x3s1__neon, f32_dwconv2d_chw_3x3s2__neon;
UkernelFunction<DwChwUkernel> f32_dwconv2d_chw_5x5s1__neon, f32_dwconv2d_chw_5x5s2__neon;
UkernelFunction<GavgpoolChwUkernel> f32_gavgpool_chw__neon;
UkernelFunction<TransposeUkernel> f32_transpose_4x4__neon;
// qu8 (qu8_neon.cc: ARMv8.0, 16-bit widening multiply-accumulate).
UkernelFunction<Qu8IgemmUkernel> qu8_igemm_4x16__neon;
UkernelFunction<Qu8DepthwiseUkernel> qu8_depthwise_8c__neon;
UkernelFunction<Qu8PoolUkernel> qu8_maxpool_16c__neon, qu8_avgpool_8c__neon;
UkernelFunction<Qu8GlobalAvgPoolUkernel> qu8_global_avgpool_16c__neon;
UkernelFunction<Qu8BinaryUkernel> qu8_add_8x__neon, qu8_mul_8x__neon;
UkernelFunction<Qu8RequantizeUkernel> qu8_requantize_8x__neon;
UkernelFunction<Qu8LutUkernel> qu8_lut_16x__neon;

// ARMv8.2-A FP16 arithmetic (gemm_neonfp16.cc, depthwise_neonfp16.cc, built with
// -march=armv8.2-a+fp16): the neonfp16 level adds these to the neon table.
UkernelFunction<F16IgemmUkernel> f16_f32acc_igemm_4x16__neonfp16;
UkernelFunction<DepthwiseUkernel> f16_f32acc_depthwise_16c__neonfp16;
UkernelFunction<ConvertF32F16Ukernel> f32_f16_vcvt_8x__neonfp16;

// ARMv8.2-A dot product (qu8_neondot.cc, built with -march=armv8.2-a+dotprod): the neondot level
// adds it to the neonfp16 table.
UkernelFunction<Qu8IgemmUkernel> qu8_igemm_4x16c4__neondot;
#endif

}  // namespace edgesdk::kernels
