// Operators: weight packing, the blocked and threaded drivers around the microkernels, and the
// per-shape plans (indirection buffers). All activations are fp32 NHWC / row-major (the
// fp16-arithmetic paths convert them to fp16 internally); every operator takes the kernel table
// to use (null = active_kernels()) and a thread count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "kernels/common.h"
#include "kernels/dispatch.h"

namespace edgesdk::kernels {

// ---------------------------------------------------------------------------------------------
// Packed-weight GEMM: C[M][N] = act(A[M][K] * B + bias), B given as N x K (row n = output n:
// ONNX Gemm transB, conv OHWI) or K x N. Packing cuts B into NR-wide panels [K][NR] (NR of the
// table's microkernel; the last panel zero-padded), stored fp32 or fp16.
enum class WeightLayout { NK, KN };
enum class WeightType { F32, F16 };

// The Winograd F(4x4, 3x3) form of a 3x3 convolution's weights (ukernels.h): U = G g G^T of every
// (output, input) channel pair, computed in double and rounded once, packed per transform position
// e as the igemm_f32w panels of a C x K GEMM: [36][panel][C][NR], NR the level's, columns past K zero.
struct WinogradWeights {
  size_t c = 0, k = 0, nr = 0;
  AlignedBuffer<float> u;
  size_t panel_count() const { return div_up(k, nr); }
  const float* panel(size_t e, size_t p) const { return u.data() + (e * panel_count() + p) * c * nr; }
};
// Made once per packed weights by the first plan that needs it (winograd_weights()), then shared.
struct WinogradCache {
  std::once_flag once;
  WinogradWeights weights;
};

struct PackedGemmWeights {
  const KernelTable* table = nullptr;
  size_t n = 0, k = 0, nr = 0;
  WeightType type = WeightType::F32;
  // fp16 panels for the table's fp16-arithmetic microkernel (igemm_f16, NR = f16_gemm_nr): the
  // drivers convert A to fp16 as they pack it or build the indirection. Otherwise fp16 panels meet
  // fp32 activations in fp32 arithmetic (igemm_f16w).
  bool f16_arith = false;
  // fp32 weights of few output channels packed for the table's igemm_f32w_narrow (NR =
  // gemm_narrow_nr, same MR): chosen by pack_gemm_weights where the level has that kernel.
  bool narrow = false;
  AlignedBuffer<uint8_t> panels;
  AlignedBuffer<float> bias;  // round_up(n, nr) entries, zero-padded (zeros without a bias)
  // The Winograd form of 3x3 convolution weights, filled on first use (winograd_weights()): every
  // ConvPlan on these weights (one per arena) shares it.
  std::shared_ptr<WinogradCache> winograd = std::make_shared<WinogradCache>();

  size_t elem_size() const { return type == WeightType::F16 ? 2 : 4; }
  size_t panel_count() const { return div_up(n, nr); }
  size_t mr() const { return f16_arith ? table->f16_gemm_mr : table->gemm_mr; }
  // The fp32-activation microkernel for these panels (not for f16_arith: that is igemm_f16).
  IgemmUkernel igemm() const {
    return narrow ? table->igemm_f32w_narrow : type == WeightType::F16 ? table->igemm_f16w : table->igemm_f32w;
  }
  const char* igemm_name() const {
    return narrow ? table->names.igemm_f32w_narrow : type == WeightType::F16 ? table->names.igemm_f16w
                                                                               : table->names.igemm_f32w;
  }
  // Panel p from row k0 of K on.
  const void* panel(size_t p, size_t k0 = 0) const {
    return panels.data() + (p * k * nr + k0 * nr) * elem_size();
  }
};

// f16_arith (fp16 sessions): with type F16 on a table that has fp16-arithmetic kernels
// (neonfp16), pack for them; ignored elsewhere, where fp16 panels run in fp32 arithmetic.
// window > 1 (NK only): each row is an OIHW filter, K = C * window columns in (c, kh, kw) order,
// packed in the kernels' (kh, kw, c) order (NHWC windows) without a transposed copy of the layer.
PackedGemmWeights pack_gemm_weights(const float* w, size_t n, size_t k, WeightLayout layout,
                                    const float* bias, WeightType type, const KernelTable* t = nullptr,
                                    bool f16_arith = false, size_t window = 1);
// Same from fp16 bits (IEEE binary16); packs to fp16 unless type is F32.
PackedGemmWeights pack_gemm_weights_f16(const uint16_t* w, size_t n, size_t k, WeightLayout layout,
                                        const float* bias, WeightType type, const KernelTable* t = nullptr,
                                        bool f16_arith = false, size_t window = 1);

void gemm(const float* a, size_t m, size_t lda, const PackedGemmWeights& w, float* c, size_t ldc,
          const Activation& act, size_t threads);

// The Winograd weights of w, packed as the weights of a 3x3 convolution over c = K / 9 input
// channels (fp32 panels only): transformed on the first call (thread-safe), then returned as is.
const WinogradWeights& winograd_weights(const PackedGemmWeights& w);

// ---------------------------------------------------------------------------------------------
// Convolution NHWC (groups = 1) with weights packed as N = out channels, K = KH*KW*C in OHWI
// order. 1x1 stride-1 unpadded convolutions run as one GEMM; 3x3 stride-1 ones as Winograd
// F(4x4, 3x3) where ConvAlgorithm and the rule below pick it (operators_winograd.cc); everything
// else as indirect GEMM over an indirection buffer [pixel tile][kernel position][MR] of input-row
// pointers, with padding pointing at one shared zero vector. The buffer is built on first run and
// rebuilt only when the input pointer or its pixel stride changes (shapes are fixed per plan). With
// fp16-arithmetic weights each run first converts the input into a plan-owned fp16 copy (C per
// pixel), which the indirection buffer, built once, points into.
struct ConvGeometry {
  size_t kh = 1, kw = 1;
  size_t stride_h = 1, stride_w = 1;
  size_t dil_h = 1, dil_w = 1;
  size_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
};

// Output extent; throws std::invalid_argument if the window does not fit.
size_t conv_output_size(size_t in, size_t kernel, size_t stride, size_t dilation, size_t pad0, size_t pad1);

// The window fields the depthwise and pooling argument structs (DepthwiseArgs, DwChwArgs, PoolArgs and
// their qu8 forms) share: kernel, strides, dilations, leading pads and the output extent of an h x w
// input under geometry g.
template <class Args>
void set_window(Args& a, const ConvGeometry& g, size_t h, size_t w) {
  a.kh = g.kh; a.kw = g.kw; a.stride_h = g.stride_h; a.stride_w = g.stride_w;
  a.dil_h = g.dil_h; a.dil_w = g.dil_w; a.pad_top = g.pad_top; a.pad_left = g.pad_left;
  a.oh = conv_output_size(h, g.kh, g.stride_h, g.dil_h, g.pad_top, g.pad_bottom);
  a.ow = conv_output_size(w, g.kw, g.stride_w, g.dil_w, g.pad_left, g.pad_right);
}

// How a ConvPlan computes: Auto picks Winograd F(4x4, 3x3) for the 3x3 stride-1 convolutions it
// wins on (winograd_chosen) and the (indirect) GEMM for the rest; Direct never takes Winograd
// (grouped and NNM convolutions, whose paths stay as they were); Winograd forces it where it
// applies at all (winograd_applies: tests and benchmarks), and throws elsewhere.
enum class ConvAlgorithm : uint8_t { Auto, Direct, Winograd };

// Winograd F(4x4, 3x3) can run the convolution: a 3x3 kernel, stride 1, dilation 1 (any padding)
// over fp32 weights in fp32 arithmetic (fp16 weights and fp16 sessions keep the direct kernels).
bool winograd_applies(const ConvGeometry& g, const PackedGemmWeights& w);
// Its geometry part (3x3, stride 1, dilation 1), which clustered weights share.
bool winograd_geometry(const ConvGeometry& g);
// False when the environment variable EDGESDK_CPU_WINOGRAD is "0" (read at each plan's creation),
// which turns Winograd off for Auto plans: for comparisons with the direct kernels, and as an
// escape hatch should its rounding (5-8x the direct convolution's on ResNet-18's layers, still
// 10x inside the fp32 tolerance of tests/ops) ever matter.
bool winograd_enabled();
// The rule Auto follows for a convolution winograd_applies to (operators_winograd.cc: measured with
// cpu_native/tools/kernel_bench --winograd [--cold] and inside ResNet-18 and SqueezeNet). One rule
// for every level today; t is there for a level that comes to need its own.
bool winograd_chosen(size_t n, size_t oh, size_t ow, size_t c, size_t k, const KernelTable& t);
// Tiles a thread transforms and multiplies at a time, of `tiles` in all (a multiple of the GEMM's MR).
size_t winograd_tile_block(size_t tiles, size_t c, size_t k, size_t mr);

class ConvPlan {
 public:
  ConvPlan(size_t n, size_t h, size_t w, size_t c, const ConvGeometry& g, const PackedGemmWeights& weights,
           ConvAlgorithm algorithm = ConvAlgorithm::Auto);
  size_t out_h() const { return oh_; }
  size_t out_w() const { return ow_; }
  bool is_gemm() const { return direct_gemm_; }
  bool is_winograd() const { return winograd_ != nullptr; }
  // "gemm" (1x1 stride 1, unpadded), "indirect" (indirect GEMM) or "winograd43" (F(4x4, 3x3)).
  const char* algorithm_name() const;
  // in_stride / out_stride: floats between consecutive pixels (0 = C / output channels).
  void run(const float* input, float* output, const Activation& act, size_t threads,
           size_t in_stride = 0, size_t out_stride = 0);
  size_t indirection_size() const { return indirection_.size(); }
  // Winograd plans: the tiles a block takes (winograd_tile_block's choice); set_winograd_block
  // overrides it (rounded up to the GEMM's MR), so that tests reach several blocks on small images.
  size_t winograd_block() const { return tile_block_; }
  void set_winograd_block(size_t tiles);

 private:
  void build_indirection(const float* input, size_t in_stride);
  void convert_input_f16(const float* input, size_t in_stride, size_t threads);
  void run_winograd(const float* input, float* output, const Activation& act, size_t threads, size_t in_stride,
                    size_t out_stride) const;

  size_t n_, h_, w_, c_, oh_, ow_;
  ConvGeometry g_;
  const PackedGemmWeights* weights_;
  bool direct_gemm_;
  // Winograd (operators_winograd.cc): the transformed weights, the tile grid and the tiles a
  // thread transforms and multiplies at a time (sized for its scratch to stay in L2).
  const WinogradWeights* winograd_ = nullptr;
  size_t tiles_h_ = 0, tiles_w_ = 0, tile_block_ = 0;
  std::vector<const float*> indirection_;
  AlignedBuffer<float> zero_;
  std::vector<const uint16_t*> indirection_f16_;  // fp16-arithmetic weights: into input_f16_
  AlignedBuffer<uint16_t> input_f16_, zero_f16_;
  const float* built_input_ = nullptr;
  size_t built_stride_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Depthwise convolution NHWC: weights [KH][KW][C*multiplier], output channel c*mult + j.
// f16_arith (fp16 sessions): on a table with an fp16-arithmetic depthwise kernel, input and
// weights are converted to fp16 (per call, into per-thread scratch) and run through it.
void depthwise_conv(const float* input, size_t n, size_t h, size_t w, size_t c, size_t multiplier,
                    const ConvGeometry& g, const float* weights, const float* bias, float* output,
                    const Activation& act, size_t threads, const KernelTable* t = nullptr,
                    bool f16_arith = false);

// ---------------------------------------------------------------------------------------------
// CHW (planar) operators (operators_chw.cc; ukernels.h, "CHW (planar) kernels").
// Depthwise convolution CHW: input [N][C][H][W], weights [C*m][KH][KW], bias [C*m] or null, output
// [N][C*m][OH][OW]. Threads split the output planes, and the rows of each plane when there are too
// few planes for the threads. Returns the name of the kernel that ran.
const char* depthwise_conv_chw(const float* input, size_t n, size_t c, size_t h, size_t w, size_t multiplier,
                               const ConvGeometry& g, const float* weights, const float* bias, float* output,
                               const Activation& act, size_t threads, const KernelTable* t = nullptr);
// The kernel (and its name) depthwise_conv_chw runs for a geometry: the table's specialised one for
// 3x3 / 5x5 windows, stride 1 or 2 in both directions, dilation 1 and every pad at most K - 1
// (padding is masked, so asymmetric pads are fine); the generic one otherwise.
DwChwUkernel depthwise_chw_kernel(const ConvGeometry& g, const KernelTable& t, const char** name);
// Mean over each of the N*C planes of hw values: input [N][C][hw], output [N][C].
void global_avgpool_chw(const float* input, size_t n, size_t c, size_t hw, float* output, const Activation& act,
                        size_t threads, const KernelTable* t = nullptr);
// dst[b] = src[b]^T for b < n: src [n][rows][cols], dst [n][cols][rows], elements of elem_size
// bytes (1, 4 or 8): NCHW <-> NHWC is rows = C, cols = H*W or back. Cache-blocked; threads split
// the blocks. A 1-row or 1-column image is a plain copy.
void transpose_2d(const void* src, void* dst, size_t n, size_t rows, size_t cols, size_t elem_size, size_t threads,
                  const KernelTable* t = nullptr);

// Pooling NHWC (dilation in g is honoured; padding never wins a max).
enum class PoolKind { Max, Average };
void pool2d(PoolKind kind, const float* input, size_t n, size_t h, size_t w, size_t c, const ConvGeometry& g,
            bool count_include_pad, float* output, const Activation& act, size_t threads,
            const KernelTable* t = nullptr);
// Mean over H*W per image and channel: output [N][C].
void global_avgpool(const float* input, size_t n, size_t hw, size_t c, float* output, const Activation& act,
                    size_t threads, const KernelTable* t = nullptr);

// y[r][:] = act(a[r][:] op b), b as [rows][C], [C] or a scalar (b_first: b op a).
void binary(BinaryOp op, Broadcast broadcast, const float* a, const float* b, float* y, size_t rows, size_t c,
            const Activation& act, size_t threads, bool b_first = false, const KernelTable* t = nullptr);
// In-place activation of n floats.
void activation(float* x, size_t n, const Activation& act, size_t threads, const KernelTable* t = nullptr);
// Softmax of each of `rows` rows of n floats (x and y may alias).
void softmax(const float* x, float* y, size_t rows, size_t n, size_t threads, const KernelTable* t = nullptr);

// ---------------------------------------------------------------------------------------------
// Clustered-weight GEMV/GEMM: y[M][N] = act(x[M][K] * W^T + bias) with W[n][k] =
// codebook[idx(n, k)], idx bit-packed at `bits` (1..8) per entry over the row-major N x K
// matrix, LSB first within little-endian bytes (entry i at bits [i*b, (i+1)*b) of the stream).
// Packing moves the indices into the kernel's lane-word layout (ukernels.h) at the same width
// (F = floor(32/b) per word) and expands codebooks into lookup tables; the kernels look entries
// up in registers and never expand the matrix (M > 1 decodes one NR-row panel at a time).
struct ClusteredWeights {
  const KernelTable* table = nullptr;
  size_t n = 0, k = 0;
  unsigned bits = 0;
  bool per_row = false;
  bool nibbles = false;  // the nibble layout (ukernels.h) instead of lane words
  size_t lanes = 0, fields = 0, words_per_row = 0, table_size = 0, padded_k = 0;
  AlignedBuffer<uint32_t> words;
  AlignedBuffer<float> tables;
  AlignedBuffer<float> bias;  // round_up(n, 64) entries, zero-padded
};

ClusteredWeights pack_clustered(const uint8_t* indices, unsigned bits, size_t n, size_t k,
                                const float* codebook, bool per_row, const float* bias,
                                const KernelTable* t = nullptr);
ClusteredWeights pack_clustered_f16(const uint8_t* indices, unsigned bits, size_t n, size_t k,
                                    const uint16_t* codebook, bool per_row, const float* bias,
                                    const KernelTable* t = nullptr);
void clustered_gemm(const float* x, size_t m, size_t ldx, const ClusteredWeights& w, float* y, size_t ldy,
                    const Activation& act, size_t threads);

// Clustered KxK convolution, NHWC, fed from an indirection buffer as ConvPlan's indirect GEMM is:
// no padded copy of the input and no im2col (KH*KW times the input). Weights are clustered with
// K = KH*KW*C columns in (kh, kw, c) order. A unit of work decodes one NR-row panel into the
// igemm layout [KH*KW][C][NR] (per thread, in L2) and multiplies it against its pixel tiles, so
// the only per-call memory beyond the output is that panel and the indirection buffer (made
// once per plan and input address; one plan per arena, as ConvPlan).
// 3x3 stride-1 layers with enough 4x4 tiles (clustered_winograd_chosen; EDGESDK_CPU_WINOGRAD=0
// turns it off) run Winograd F(4x4, 3x3) instead (operators_winograd.cc): each decoded panel is
// transformed on the call (36 x C x NR floats per thread) and multiplied against the tiles'
// transformed input, which the threads share.
class ClusteredConvPlan {
 public:
  ClusteredConvPlan(size_t n, size_t h, size_t w, size_t c, const ConvGeometry& g, const ClusteredWeights& weights);
  size_t out_h() const { return oh_; }
  size_t out_w() const { return ow_; }
  bool is_winograd() const { return winograd_; }
  size_t indirection_bytes() const { return indirection_.size() * sizeof(float*) + zero_.size() * sizeof(float); }
  // What one running thread holds while it works: the decoded panel (KH*KW*C*NR floats) and its
  // decode chunk, plus, for Winograd, the panel's transformed weights and products.
  size_t panel_bytes() const;
  void run(const float* input, float* output, const Activation& act, size_t threads);

 private:
  void run_winograd(const float* input, float* output, const Activation& act, size_t threads) const;

  size_t n_, h_, w_, c_, oh_, ow_;
  ConvGeometry g_;
  const ClusteredWeights* weights_;
  bool winograd_ = false;
  size_t tiles_h_ = 0, tiles_w_ = 0, tile_block_ = 0;
  std::vector<const float*> indirection_;
  AlignedBuffer<float> zero_;
  const float* built_input_ = nullptr;
};

// Shared by the clustered drivers (operators.cc, operators_winograd.cc): the columns of one decode
// chunk, and panel p of w decoded into the igemm layout [K][nr] (rows past n as zeros; `rows`
// holds nr x clustered_chunk_columns(w) floats).
size_t clustered_chunk_columns(const ClusteredWeights& w);
void decode_clustered_panel(const ClusteredWeights& w, size_t p, size_t nr, float* rows, float* panel);
// The Winograd rule and tile block of ClusteredConvPlan, and its per-thread scratch (floats).
bool clustered_winograd_chosen(size_t n, size_t oh, size_t ow, size_t c, size_t k);
size_t clustered_winograd_tile_block(size_t tiles, size_t c, size_t mr);
size_t clustered_winograd_scratch_floats(size_t c, size_t nr, size_t tile_block);

// NNM gather-accumulate (seed 003): out[p][k] = act(bias[k] + sum_g cent[p][g*kc + assign[g][k]]).
// groups = 1 is the shared reading (one assignment map); groups > 1 the per-input-channel one.
void nnm_gather(const float* cent, size_t pixels, size_t cent_stride, size_t groups, size_t kc,
                const int32_t* assign, size_t k, const float* bias, float* out, size_t out_stride,
                const Activation& act, size_t threads, const KernelTable* t = nullptr);

}  // namespace edgesdk::kernels
