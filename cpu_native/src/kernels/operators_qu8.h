// qu8 operators (ukernels.h, "Quantized uint8"): weight packing with the input zero point folded
// into the bias, the convolution plan (GEMM or indirect GEMM), Gemm/MatMul with constant weights,
// depthwise convolution, element-wise Add/Mul, pooling and requantization, threaded like their fp32
// counterparts (operators.h). Activations are uint8 NHWC / row-major with per-tensor zero points;
// weights int8, symmetric per output channel; each output channel (or tensor) has a requantization
// multiplier and shift in TFLite's QuantizeMultiplier convention (requantization.h). Arguments are
// checked here (std::invalid_argument), since the callers are the Python bindings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/common.h"
#include "kernels/dispatch.h"
#include "kernels/operators.h"
#include "kernels/qu8_ukernels.h"

namespace edgesdk::kernels {

// Packed GEMM / convolution weights for one level's qu8 GEMM: NR-wide panels, each
// [ks][kcp][NR] in the level's Qu8Layout, kcp = round_up(c, KR) with zero weights past c; the
// bias folded with the input zero point,
//   bias'[o] = bias[o] - x_zp * sum_k w[o][k]   (+ 128 * sum_k w[o][k] on levels with qu8_xor80),
// so padding taps, which read a vector of x_zp bytes, add x_zp * w - x_zp * w = 0; and every
// channel's requantization constants (kQu8RqRows x NR per panel).
struct PackedQu8Weights {
  const KernelTable* table = nullptr;
  size_t n = 0, k = 0;
  size_t kh = 1, kw = 1, c = 0;  // K = kh * kw * c: a kernel position's channels are one row read
  size_t mr = 0, nr = 0, kr = 1, kcp = 0;
  uint8_t input_zero_point = 0;
  Qu8Output out{0, 0, 255};
  AlignedBuffer<uint8_t> panels;
  AlignedBuffer<int32_t> bias;  // round_up(n, nr)
  AlignedBuffer<int32_t> rq;    // panel_count() blocks of kQu8RqRows x nr
  // The GEMM these weights run on: the table's qu8_igemm (and qu8_igemm_x2) in its qu8_layout, or
  // its qu8_igemm_narrow in Qu8Layout::C4 when every weight pair fits it (ukernels.h).
  bool narrow = false;

  size_t ks() const { return kh * kw; }
  size_t panel_count() const { return div_up(n, nr); }
  Qu8Layout layout() const { return narrow ? Qu8Layout::C4 : table->qu8_layout; }
  size_t elem_size() const { return layout() == Qu8Layout::C4Split16 ? 2 : 1; }
  size_t panel_bytes() const { return ks() * kcp * nr * elem_size(); }
  const void* panel(size_t p) const { return panels.data() + p * panel_bytes(); }
  const int32_t* panel_rq(size_t p) const { return rq.data() + p * kQu8RqRows * nr; }
  Qu8IgemmUkernel kernel() const { return narrow ? table->qu8_igemm_narrow : table->qu8_igemm; }
  Qu8IgemmUkernel kernel_x2() const { return narrow ? nullptr : table->qu8_igemm_x2; }
  const char* kernel_name() const { return narrow ? table->names.qu8_igemm_narrow : table->names.qu8_igemm; }
};

// w: N x K int8 (row o = output channel o; a convolution's OHWI weights with K = kh*kw*C), bias
// int32 [N] or null, multiplier and shift [N] per output channel (shift in [-31, 30]). kh, kw: the
// convolution kernel the weights are for (1 x 1 for Gemm/MatMul); K must be a multiple of kh*kw.
PackedQu8Weights pack_qu8_gemm_weights(const int8_t* w, size_t n, size_t k, const int32_t* bias, uint8_t x_zp,
                                       const int32_t* multiplier, const int32_t* shift, uint8_t y_zp, uint8_t qmin,
                                       uint8_t qmax, const KernelTable* t = nullptr, size_t kh = 1, size_t kw = 1);

// c[M][N] = requantized a[M][K] x W (a's zero point and c's are the packed weights'). Row strides
// lda >= K, ldc >= N.
void qu8_gemm(const uint8_t* a, size_t m, size_t lda, const PackedQu8Weights& w, uint8_t* c, size_t ldc,
              size_t threads);

// Convolution NHWC (groups = 1) with weights packed for kernel g.kh x g.kw: 1x1 stride-1 unpadded
// ones run as one GEMM, the others as indirect GEMM over an indirection buffer ([pixel tile]
// [kernel position][MR] input-row pointers, padding pointing at a vector of x_zp bytes) built on
// the first run and rebuilt when the input pointer or pixel stride changes.
// The rows of a buffer (`rows` rows `stride` bytes apart, `width` bytes used in each) whose
// round_up(width, 4)-byte reads by a qu8 GEMM kernel (ukernels.h) would pass the buffer's end: the
// last one to three, when width % 4 != 0 and the stride leaves less than the excess. They are
// read from zero-padded copies, refreshed by fill() before every run.
class Qu8RowGuard {
 public:
  void plan(size_t rows, size_t stride, size_t width);
  void fill(const uint8_t* base);
  const uint8_t* row(const uint8_t* base, size_t i) const {
    return i >= first_ ? copies_.data() + (i - first_) * padded_ : base + i * stride_;
  }
  size_t first() const { return first_; }
  const uint8_t* copy(size_t i) const { return copies_.data() + (i - first_) * padded_; }

 private:
  size_t rows_ = 0, first_ = 0, stride_ = 0, width_ = 0, padded_ = 0;
  AlignedBuffer<uint8_t> copies_;
};

class Qu8ConvPlan {
 public:
  Qu8ConvPlan(size_t n, size_t h, size_t w, size_t c, const ConvGeometry& g, const PackedQu8Weights& weights);
  size_t out_h() const { return oh_; }
  size_t out_w() const { return ow_; }
  bool is_gemm() const { return direct_gemm_; }
  // in_stride / out_stride: bytes between consecutive pixels (0 = C / output channels).
  void run(const uint8_t* input, uint8_t* output, size_t threads, size_t in_stride = 0, size_t out_stride = 0);

 private:
  size_t n_, h_, w_, c_, oh_, ow_;
  ConvGeometry g_;
  const PackedQu8Weights* weights_;
  bool direct_gemm_;
  std::vector<const uint8_t*> indirection_;
  AlignedBuffer<uint8_t> padding_;  // C bytes of x_zp
  Qu8RowGuard guard_;               // the input's last pixels, when C % 4 != 0
  const uint8_t* built_input_ = nullptr;
  size_t built_stride_ = 0;
};

// Depthwise convolution NHWC: weights int8 [KH][KW][C*multiplier], bias int32 [C*multiplier] or
// null, multiplier / shift per output channel. The plan folds the input zero point into the bias,
// builds the requantization table and, on levels whose kernel takes packed weights (x86,
// qu8_ukernels.h), packs them: once, so a run only reads. Kernels with a channel multiplier other
// than 1, or windows beyond kQu8DwMaxRows rows / kQu8DwMaxTaps taps on the packed levels, run the
// scalar kernel. run() keeps no state: concurrent runs of one plan are safe.
class Qu8DepthwisePlan {
 public:
  Qu8DepthwisePlan(size_t n, size_t h, size_t w, size_t c, size_t multiplier, const ConvGeometry& g,
                   const int8_t* weights, const int32_t* bias, uint8_t x_zp, const int32_t* out_multiplier,
                   const int32_t* out_shift, uint8_t y_zp, uint8_t qmin, uint8_t qmax, const KernelTable* t = nullptr);
  size_t batch() const { return args_.n; }
  size_t in_h() const { return args_.h; }
  size_t in_w() const { return args_.w; }
  size_t in_channels() const { return args_.c; }
  size_t out_h() const { return args_.oh; }
  size_t out_w() const { return args_.ow; }
  size_t out_channels() const { return args_.c * args_.multiplier; }
  const char* kernel_name() const { return name_; }
  // NHWC input [N][H][W][C] -> output [N][OH][OW][C*multiplier], both contiguous.
  void run(const uint8_t* input, uint8_t* output, size_t threads) const;

 private:
  Qu8DepthwiseArgs args_{};  // all but input / output
  Qu8DepthwiseUkernel kernel_ = nullptr;
  const char* name_ = nullptr;
  AlignedBuffer<int8_t> weights_;
  AlignedBuffer<int32_t> bias_, folded_, rq_;
  AlignedBuffer<uint8_t> packed_;
  size_t slice_ = 0;  // channels per packed block (0: the kernel takes no channel slices)
  size_t (*packed_bytes_)(size_t c, size_t kh, size_t kw) = nullptr;
};

// A plan for one call, run.
void qu8_depthwise_conv(const uint8_t* input, size_t n, size_t h, size_t w, size_t c, size_t multiplier,
                        const ConvGeometry& g, const int8_t* weights, const int32_t* bias, uint8_t x_zp,
                        const int32_t* out_multiplier, const int32_t* out_shift, uint8_t y_zp, uint8_t qmin,
                        uint8_t qmax, uint8_t* output, size_t threads, const KernelTable* t = nullptr);

// QuantizeLinear per tensor (qu8_ukernels.h, Qu8QuantizeParams): y = the low byte of
// clamp(rint(x / scale) + zero_point, qmin, qmax), NaN -> qmin; -128 <= qmin <= qmax <= 255.
void qu8_quantize_linear(const float* x, size_t count, float scale, float zero_point, int32_t qmin, int32_t qmax,
                         uint8_t* y, size_t threads, const KernelTable* t = nullptr);
// qu8_quantize_linear from NCHW x [n][c][hw] into NHWC y [n][hw][c] (a graph's float input read
// by NHWC int8 kernels): the same codes, without a separate layout pass over the bytes.
void qu8_quantize_linear_to_nhwc(const float* x, size_t n, size_t c, size_t hw, float scale, float zero_point,
                                 int32_t qmin, int32_t qmax, uint8_t* y, size_t threads,
                                 const KernelTable* t = nullptr);

// DequantizeLinear per tensor: y = float(x - zero_point) * scale over count uint8 (or, is_signed,
// int8) codes.
void qu8_dequantize_linear(const uint8_t* x, bool is_signed, size_t count, float scale, int32_t zero_point, float* y,
                           size_t threads, const KernelTable* t = nullptr);
// The kernel qu8_dequantize_linear runs at a level.
const char* qu8_dequantize_kernel_name(const KernelTable* t = nullptr);

// The kernel qu8_quantize_linear runs at a level.
const char* qu8_quantize_kernel_name(const KernelTable* t = nullptr);

// Whether the SIMD qu8_add kernels run these constants in their fp32 form (requantization.h,
// qu8_add_fp): tests use it to know both forms are exercised.
bool qu8_add_takes_fp32(int32_t a_mult, int32_t a_shift, int32_t b_mult, int32_t b_shift, int32_t out_mult,
                        int32_t out_shift);

// Add / Mul of rows x C values (ukernels.h, Qu8BinaryArgs), b as [rows][C], [C] or [1].
void qu8_add(const uint8_t* a, uint8_t a_zp, const uint8_t* b, uint8_t b_zp, uint8_t* y, uint8_t y_zp, size_t rows,
             size_t c, Broadcast broadcast, int32_t a_mult, int32_t a_shift, int32_t b_mult, int32_t b_shift,
             int32_t out_mult, int32_t out_shift, uint8_t qmin, uint8_t qmax, size_t threads,
             const KernelTable* t = nullptr);
void qu8_mul(const uint8_t* a, uint8_t a_zp, const uint8_t* b, uint8_t b_zp, uint8_t* y, uint8_t y_zp, size_t rows,
             size_t c, Broadcast broadcast, int32_t mult, int32_t shift, uint8_t qmin, uint8_t qmax, size_t threads,
             const KernelTable* t = nullptr);

// Global average pooling: x [N][HW][C] -> y [N][C], acc = sum over HW of (x - x_zp) (the caller
// folds 1/HW into the multiplier).
void qu8_global_avgpool(const uint8_t* x, size_t n, size_t hw, size_t c, uint8_t x_zp, uint8_t* y, uint8_t y_zp,
                        int32_t mult, int32_t shift, uint8_t qmin, uint8_t qmax, size_t threads,
                        const KernelTable* t = nullptr);
// Average pooling NHWC: mult / shift tables of KH*KW + 1 entries, entry `count` for a window of
// count taps (ukernels.h, Qu8PoolArgs).
void qu8_avgpool(const uint8_t* x, size_t n, size_t h, size_t w, size_t c, uint8_t x_zp, const ConvGeometry& g,
                 bool count_include_pad, const int32_t* mult, const int32_t* shift, uint8_t y_zp, uint8_t qmin,
                 uint8_t qmax, uint8_t* y, size_t threads, const KernelTable* t = nullptr);
// Max pooling NHWC (padding never wins).
void qu8_maxpool(const uint8_t* x, size_t n, size_t h, size_t w, size_t c, const ConvGeometry& g, uint8_t* y,
                 size_t threads, const KernelTable* t = nullptr);
// y = clamp(requantize(x - x_zp, mult, shift) + y_zp, qmin, qmax) over `count` values.
void qu8_requantize(const uint8_t* x, size_t count, uint8_t x_zp, uint8_t* y, uint8_t y_zp, int32_t mult,
                    int32_t shift, uint8_t qmin, uint8_t qmax, size_t threads, const KernelTable* t = nullptr);

// One input of qu8_concat: rows of `width` bytes at x (row stride `width`), copied where `copy`
// (its scale and zero point are the output's), else rescaled as qu8_requantize with (mult, shift).
struct Qu8ConcatPart {
  const uint8_t* x;
  size_t width;
  uint8_t x_zp;
  int32_t mult, shift;
  bool copy;
};
// y [rows][sum of widths] = the parts side by side, each rescaled to y's zero point (clamp 0-255):
// QLinearConcat along the stored layout's axis, whose outer extent is `rows`.
void qu8_concat(const Qu8ConcatPart* parts, size_t count, size_t rows, uint8_t* y, uint8_t y_zp, size_t threads,
                const KernelTable* t = nullptr);

// y[i] = table[x[i]] over `count` bytes (256-entry table: QLinearLookup).
void qu8_lut(const uint8_t* x, size_t count, const uint8_t* table, uint8_t* y, size_t threads,
            const KernelTable* t = nullptr);

}  // namespace edgesdk::kernels
