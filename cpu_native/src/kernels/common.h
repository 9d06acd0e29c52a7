// Types shared by every kernel family: activations, fp16 conversion, aligned buffers.
//
// ODR rule for this library: SIMD translation units are compiled with ISA flags (-mavx2, ...), so
// any inline function or template they share with portable code could be emitted with those
// instructions and picked by the linker for the portable caller. Helpers here are therefore either
// out of line (defined in common.cc, built without ISA flags) or `static inline` (one private copy
// per translation unit). SIMD files include no standard-library templates.
#pragma once

#include <cstddef>
#include <cstdint>

namespace edgesdk::kernels {

// Fused output activation. alpha/beta meaning per kind:
//   Clip: [alpha, beta] bounds (ReLU6 = Clip 0, 6)
//   HardSigmoid: max(0, min(1, alpha*x + beta))       (ONNX defaults 0.2, 0.5)
//   HardSwish: x * max(0, min(1, alpha*x + beta))     (ONNX: alpha 1/6, beta 0.5)
//   LeakyRelu: x >= 0 ? x : alpha*x
// The element-wise math kinds (ONNX Gelu, Erf, Exp, Log, ... used alone or fused after a Conv or
// Gemm; alpha and beta unused):
//   Gelu: 0.5*x*(1 + erf(x/sqrt2))    GeluTanh: 0.5*x*(1 + tanh(sqrt(2/pi)*(x + 0.044715x^3)))
//   Silu: x*sigmoid(x)    Mish: x*tanh(softplus(x))    Softplus: log(1 + e^x)
//   Erf, Exp, Log, Abs, Sqrt, Reciprocal (1/x), Neg (-x), Square (x*x)
// At -inf, Gelu, GeluTanh, Silu and Mish give -inf * 0 = NaN, as ONNX Runtime (and the IEEE formula).
enum class ActKind : uint8_t {
  None, Relu, Clip, HardSwish, HardSigmoid, Sigmoid, Tanh, LeakyRelu,
  Gelu, GeluTanh, Erf, Exp, Log, Abs, Sqrt, Reciprocal, Neg, Square, Silu, Mish, Softplus
};

struct Activation {
  ActKind kind = ActKind::None;
  float alpha = 0.0f;
  float beta = 0.0f;
};

Activation act_none();
Activation act_relu();
Activation act_clip(float lo, float hi);
Activation act_hardswish();
Activation act_hardsigmoid(float alpha = 0.2f, float beta = 0.5f);
Activation act_sigmoid();
Activation act_tanh();
Activation act_leaky_relu(float alpha);
Activation act_of(ActKind kind);  // a kind without parameters (the math kinds)
const char* act_name(ActKind kind);

// The part of an activation a microkernel applies in registers: a clamp. Kinds that are not a
// clamp get (-inf, +inf) here and are applied by a vector post-pass on the tile while it is in L1.
struct MinMax {
  float min;
  float max;
};
MinMax clamp_part(const Activation& act);
bool needs_post_pass(const Activation& act);

// The reference definition of every activation (scalar, libm).
float activate_reference(float x, const Activation& act);

// IEEE binary16 <-> binary32, round to nearest even; portable (no F16C/NEON needed).
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);

static inline size_t div_up(size_t a, size_t b) { return (a + b - 1) / b; }
static inline size_t round_up(size_t a, size_t b) { return div_up(a, b) * b; }
static inline size_t min_size(size_t a, size_t b) { return a < b ? a : b; }
static inline size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

// 64-byte aligned, non-copyable, movable heap buffer (kernels use aligned loads of panels).
void* aligned_alloc_bytes(size_t bytes);
void aligned_free_bytes(void* p);

template <class T>
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t count) : size_(count) {
    data_ = static_cast<T*>(aligned_alloc_bytes(count * sizeof(T)));
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  AlignedBuffer(AlignedBuffer&& o) noexcept : data_(o.data_), size_(o.size_) { o.data_ = nullptr; o.size_ = 0; }
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    if (this != &o) {
      aligned_free_bytes(data_);
      data_ = o.data_; size_ = o.size_;
      o.data_ = nullptr; o.size_ = 0;
    }
    return *this;
  }
  ~AlignedBuffer() { aligned_free_bytes(data_); }
  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace edgesdk::kernels
