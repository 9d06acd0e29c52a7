// LQ-Nets binary-coded quantization: bitwise (AND + popcount) GEMM and convolution.
//
// Weights: per output channel o, Kw bits (1..8) and a basis beta[o][0..Kw-1]; a weight of code u is
// sum_j beta[o][j] * (2*bit_j(u) - 1). Activations: Kx bits (1..8), a basis alpha[0..Kx-1] and an
// offset c; the level of code v is c + sum_i alpha_i * bit_i(v). Encoding x: level index l = number
// of thresholds t < x (strictly), code = codes[l]; NaN flags the row (pixel).
//
// With x bit-planes V_i and weight bit-planes U_j (bit 1 = +1):
//   y[m,o] = c*Wsum[o] + bias[o] + sum_j sum_i alpha_i*beta[o][j] * (2*popcount(V_i & U_j) - popcount(V_i))
// (= sum_k Q(x[m,k]) * w[o,k] + bias[o] exactly in real arithmetic). The popcounts are exact
// integers; the combination is fp32 with fused multiply-adds in a fixed order (j outer, i inner),
// identical on every ISA and for every thread count.
//
// Layout (one for every ISA): the reduction is cut into 64-bit words; weights are packed in panels
// of kLqNr = 8 output channels, one panel per (channel block, plane j), word-major:
// panel[word][lane]. A microkernel ANDs one x word (broadcast) with a panel's 8 lanes and keeps
// per-lane popcount sums, for mr x-rows (an x-row = one plane of one input row / output pixel) and
// the kw panels of a block, and writes integer counts; a combine kernel turns a pixel's counts into
// the fp32 sum, in an order that does not depend on the tiling.
// The convolution encodes each input pixel once per call (kx planes of ceil(C/64) words, into a
// zero-padded grid), repacks the weights at construction in (kh, kw, channel word) order so that a
// tap is whole words, and reads an output pixel's taps as its window corner plus a fixed word
// offset per tap (no float im2col, no per-pixel pointer table); padded taps read zero planes and
// count nothing, and border pixels use the valid taps' weight sums for c * sum(w). The GEMM is the
// one-tap case.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/common.h"
#include "kernels/dispatch.h"

namespace edgesdk::kernels {

constexpr size_t kLqNr = 8;  // output channels per weight panel (the microkernels' lanes)

// Which popcount microkernel family runs.
enum class LqVariant { Scalar, Avx2, Avx512Bw, Avx512Vpopcnt, Neon };

// The bitwise microkernel: for x-rows r < mr, panels j < np (panel j at w + j*panel_stride) and
// lanes l < 8:
//   c[(r*np + j)*8 + l] = sum over taps t, words k < kc of popcount(a[r][tap_off[t] + k] & panel_j[(t*kc + k)*8 + l])
// mr <= the variant's mr_max. An x-row is a base pointer plus a word offset per tap: the GEMM has one
// tap at offset 0; the convolution reads a zero-padded encoded input, so every tap of every output
// pixel is the pixel's window corner plus the tap's fixed offset (no per-pixel pointer table).
using LqUkernel = void (*)(size_t mr, size_t kc, size_t taps, const uint64_t* const* a, const ptrdiff_t* tap_off,
                           const uint64_t* w, size_t np, size_t panel_stride, int32_t* c);

// The combination, per pixel p < pixels (its kx x-rows p*kx + i, counts from the microkernel with
// np = kw), in this order on every variant (fused multiply-adds, so every variant gives the same bits):
//   acc[l] = base[p*base_stride + l]
//   for j < kw: for i < kx: acc[l] = fma(coef[(j*kx + i)*8 + l], float(2*c[((p*kx + i)*kw + j)*8 + l] - cnt[p*kx + i]), acc[l])
//   y[p*y_stride + l] = min(max(acc[l], lo), hi)
using LqCombineUkernel = void (*)(size_t pixels, size_t kx, size_t kw, const int32_t* c, const int32_t* cnt,
                                  const float* coef, const float* base, size_t base_stride, float* y, size_t y_stride,
                                  float lo, float hi);

// The encoder, `rows` rows of n contiguous values: row r -> kx planes of `words` uint64 (bits past n
// zero) at planes + r*kx*words, their popcounts at cnt + r*kx, nan[r] = 1 if the row has a NaN.
struct LqActQuant {
  size_t kx = 1;
  float offset = 0.0f;
  std::vector<float> alpha;       // kx
  std::vector<float> thresholds;  // 2^kx - 1, ascending
  std::vector<uint8_t> codes;     // 2^kx
};
using LqEncodeUkernel = void (*)(const float* x, size_t rows, size_t n, const LqActQuant& q, size_t words,
                                 uint64_t* planes, int32_t* cnt, uint8_t* nan);

struct LqKernels {
  LqVariant variant;
  size_t mr_max;
  LqUkernel gemm;
  LqCombineUkernel combine;
  LqEncodeUkernel encode;
  const char* gemm_name;
  const char* encode_name;
};

// The kernels of a variant (throws std::runtime_error if this binary / CPU cannot run it).
const LqKernels& lq_kernels(LqVariant v);
// Variants this binary and CPU run, lowest first (scalar always).
std::vector<LqVariant> lq_supported_variants();
const char* lq_variant_name(LqVariant v);
// The variant for an ISA level: scalar -> Scalar, avx2/avxvnni -> Avx2, avx512* -> Avx512Vpopcnt where
// the CPU has AVX512_VPOPCNTDQ and popcnt is "auto" or "vpopcnt" (else Avx512Bw), neon* -> Neon.
// popcnt: "auto" (the environment variable EDGESDK_LQ_POPCNT=auto|shuffle|vpopcnt where set, which
// only steers the avx512 levels; else VPOPCNTDQ where the CPU has it), "shuffle" (never VPOPCNTDQ:
// the vpshufb kernel, what Skylake-X runs), "vpopcnt" (throws std::invalid_argument where the level
// or CPU lacks it).
LqVariant lq_variant_for(Isa isa, const std::string& popcnt);

// Weights and activation quantizer shared by the GEMM and the convolution.
struct LqLayer {
  size_t o = 0, kw = 0, n = 0;  // output channels, weight bits, reduction length
  size_t taps = 1, kc = 0;      // conv: KH*KW taps of kc words (ceil(C/64)); gemm: 1 tap of ceil(n/64)
  size_t blocks = 0;            // ceil(o / 8)
  AlignedBuffer<uint64_t> panels;  // [block][j][taps*kc][8]
  std::vector<float> coef;         // [block][j][i][8]: alpha_i * beta[o][j]
  std::vector<float> base;         // [blocks*8]: c*Wsum[o] + bias[o] (0 past o)
  std::vector<float> bias;         // [o] (zeros without)
  std::vector<double> wtap;        // conv: [o][t] per-tap weight sums (border pixels)
  LqActQuant q;
  const LqKernels* k = nullptr;
};

// planes: uint32 (O, Kw, ceil(N/32)) as the format; basis (O, Kw); bias may be null.
// Throws std::invalid_argument on a bad quantizer (sizes, unordered or NaN thresholds, codes >= 2^kx).
LqLayer lq_prepare_gemm(const uint32_t* planes, const float* basis, size_t o, size_t kw, size_t n,
                        const LqActQuant& q, const float* bias, const LqKernels& k);
// Conv: N = C*KH*KW in ONNX order (c, kh, kw).
LqLayer lq_prepare_conv(const uint32_t* planes, const float* basis, size_t o, size_t kw, size_t c, size_t kh,
                        size_t kwid, const LqActQuant& q, const float* bias, const LqKernels& k);

// x (m, n) -> y (m, o), act fused; NaN rows are NaN.
void lq_gemm(const LqLayer& l, const float* x, size_t m, float* y, const Activation& act, size_t threads);

struct LqConvGeometry {
  size_t kh = 1, kw = 1, stride_h = 1, stride_w = 1, dil_h = 1, dil_w = 1;
  size_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
};
// Output size of one spatial dimension, 0 where the window does not fit.
size_t lq_conv_out(size_t in, size_t k, size_t stride, size_t dil, size_t pad0, size_t pad1);
// x NHWC (b, h, w, c) -> y NHWC (b, oh, ow, o).
void lq_conv(const LqLayer& l, const float* x, size_t b, size_t h, size_t w, const LqConvGeometry& g, float* y,
             const Activation& act, size_t threads);

// The scalar encoder for any kx (reference).
void lq_encode__scalar(const float* x, size_t rows, size_t n, const LqActQuant& q, size_t words, uint64_t* planes,
                       int32_t* cnt, uint8_t* nan);

}  // namespace edgesdk::kernels
