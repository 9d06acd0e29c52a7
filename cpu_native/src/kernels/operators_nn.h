// Operators of the newer ONNX families, on top of the microkernels of ukernels.h: normalisation,
// softmax along any axis, reductions, batched MatMul with a run-time B, transposed convolution and
// resize. Like operators.h: fp32, caller-owned outputs, the kernel table to use (null = the
// active one) and a thread count; shapes are checked here too (std::invalid_argument), since the
// callers are the Python bindings running user models.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/operators.h"

namespace edgesdk::kernels {

// LayerNormalization of `rows` rows of `cols` values: scale, bias [cols] (bias may be null).
void layer_norm(const float* x, float* y, size_t rows, size_t cols, const float* scale, const float* bias, float eps,
                size_t threads, const KernelTable* t = nullptr);
// InstanceNormalization of x (N, C, S): each (n, c) row over S, then * scale[c] + bias[c].
void instance_norm(const float* x, float* y, size_t n, size_t c, size_t s, const float* scale, const float* bias,
                   float eps, size_t threads, const KernelTable* t = nullptr);

// Softmax (or log-softmax) along the middle axis of the (outer, axis, inner) view; x and y may alias.
void softmax_axis(const float* x, float* y, size_t outer, size_t axis, size_t inner, bool log, size_t threads,
                  const KernelTable* t = nullptr);
// y[outer][inner] = op over the axis (ukernels.h, ReduceOp).
void reduce(const float* x, float* y, size_t outer, size_t axis, size_t inner, ReduceOp op, size_t threads,
            const KernelTable* t = nullptr);
// y[outer][inner] = index of the max / min along the axis (ukernels.h, ArgReduceArgs); axis >= 1.
void argreduce(const float* x, int64_t* y, size_t outer, size_t axis, size_t inner, bool is_max, bool select_last,
               size_t threads, const KernelTable* t = nullptr);

// ---------------------------------------------------------------------------------------------
// y[i] = act(A[a_index[i]] @ B[b_index[i]]) for i < batch: A is (a_batches, M, K), B is
// (b_batches, K, N), or (b_batches, N, K) used transposed; y is (batch, M, N). B is packed per call,
// a K block of a few panels at a time right before the microkernel uses it (so it stays in cache).
struct BatchedMatmulShape {
  size_t batch = 0, m = 0, k = 0, n = 0;
  size_t a_batches = 0, b_batches = 0;
  bool transpose_b = false;
};
void batched_matmul(const float* a, const float* b, float* y, const BatchedMatmulShape& s, const int64_t* a_index,
                    const int64_t* b_index, const Activation& act, size_t threads, const KernelTable* t = nullptr);

// ---------------------------------------------------------------------------------------------
// ConvTranspose 2-D. Weights in ONNX layout (C_in, C_out/groups, KH, KW). Per group, the input
// (pixels x C_in/groups) times the weights (C_in/groups x KH*KW*C_out/groups) gives every pixel's
// contributions to its output window; the col2im gather then sums them per output pixel, adds the
// bias and applies the activation. Depthwise (one input and one output channel per group) skips
// the GEMM: the gather multiplies the input by per-channel tap weights directly.
struct ConvTransposeWeights {
  const KernelTable* table = nullptr;
  size_t c_in = 0, c_out = 0, groups = 1, kh = 0, kw = 0;
  bool depthwise = false;
  std::vector<PackedGemmWeights> packed;  // per group: N = KH*KW*cout_g (tap-major), K = cin_g
  AlignedBuffer<float> dw_weights;        // depthwise: [KH*KW][C]
};
ConvTransposeWeights pack_conv_transpose(const float* w, size_t c_in, size_t cout_g, size_t kh, size_t kw,
                                         size_t groups, const KernelTable* t = nullptr);

struct ConvTransposeGeometry {
  size_t stride_h = 1, stride_w = 1, dil_h = 1, dil_w = 1;
  size_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  size_t out_pad_h = 0, out_pad_w = 0;
};
// (in - 1)*stride - pad0 - pad1 + dilation*(kernel - 1) + out_pad + 1 (ONNX); throws when < 1.
size_t conv_transpose_output_size(size_t in, size_t kernel, size_t stride, size_t dilation, size_t pad0, size_t pad1,
                                  size_t out_pad);
// x (N, H, W, C_in) -> y (N, OH, OW, C_out).
void conv_transpose_nhwc(const float* x, size_t n, size_t h, size_t w, const ConvTransposeWeights& wts,
                         const ConvTransposeGeometry& g, const float* bias, float* y, const Activation& act,
                         size_t threads);
// x (N, C_in, H, W) -> y (N, C_out, OH, OW): transposed to NHWC and back around the NHWC operator.
void conv_transpose_nchw(const float* x, size_t n, size_t h, size_t w, const ConvTransposeWeights& wts,
                         const ConvTransposeGeometry& g, const float* bias, float* y, const Activation& act,
                         size_t threads);

// ---------------------------------------------------------------------------------------------
// Resize of the two spatial axes with caller-computed tables (ukernels.h, ResizeArgs): iy0/iy1/wy
// have OH entries, ix0/ix1/wx OW; nearest uses iy0 and ix0 only. Indices are checked in range.
struct ResizeTables {
  const int32_t* iy0 = nullptr;
  const int32_t* iy1 = nullptr;
  const float* wy = nullptr;
  const int32_t* ix0 = nullptr;
  const int32_t* ix1 = nullptr;
  const float* wx = nullptr;
};
void resize(bool linear, const float* x, float* y, size_t n, size_t c, size_t h, size_t w, size_t oh, size_t ow,
            bool nhwc, const ResizeTables& tables, size_t threads, const KernelTable* t = nullptr);

}  // namespace edgesdk::kernels
