// Portable helpers (built without ISA flags; see the ODR note in common.h).
#include "kernels/common.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace edgesdk::kernels {

Activation act_none() { return {}; }
Activation act_relu() { return {ActKind::Relu, 0.0f, 0.0f}; }
Activation act_clip(float lo, float hi) { return {ActKind::Clip, lo, hi}; }
Activation act_hardswish() { return {ActKind::HardSwish, 1.0f / 6.0f, 0.5f}; }
Activation act_hardsigmoid(float alpha, float beta) { return {ActKind::HardSigmoid, alpha, beta}; }
Activation act_sigmoid() { return {ActKind::Sigmoid, 0.0f, 0.0f}; }
Activation act_tanh() { return {ActKind::Tanh, 0.0f, 0.0f}; }
Activation act_leaky_relu(float alpha) { return {ActKind::LeakyRelu, alpha, 0.0f}; }
Activation act_of(ActKind kind) { return {kind, 0.0f, 0.0f}; }

const char* act_name(ActKind kind) {
  switch (kind) {
    case ActKind::None: return "none";
    case ActKind::Relu: return "relu";
    case ActKind::Clip: return "clip";
    case ActKind::HardSwish: return "hardswish";
    case ActKind::HardSigmoid: return "hardsigmoid";
    case ActKind::Sigmoid: return "sigmoid";
    case ActKind::Tanh: return "tanh";
    case ActKind::LeakyRelu: return "leaky_relu";
    case ActKind::Gelu: return "gelu";
    case ActKind::GeluTanh: return "gelu_tanh";
    case ActKind::Erf: return "erf";
    case ActKind::Exp: return "exp";
    case ActKind::Log: return "log";
    case ActKind::Abs: return "abs";
    case ActKind::Sqrt: return "sqrt";
    case ActKind::Reciprocal: return "reciprocal";
    case ActKind::Neg: return "neg";
    case ActKind::Square: return "square";
    case ActKind::Silu: return "silu";
    case ActKind::Mish: return "mish";
    case ActKind::Softplus: return "softplus";
  }
  return "?";
}

MinMax clamp_part(const Activation& act) {
  const float inf = std::numeric_limits<float>::infinity();
  switch (act.kind) {
    case ActKind::Relu: return {0.0f, inf};
    case ActKind::Clip: return {act.alpha, act.beta};
    default: return {-inf, inf};
  }
}

bool needs_post_pass(const Activation& act) {
  return act.kind != ActKind::None && act.kind != ActKind::Relu && act.kind != ActKind::Clip;
}

// NaN and infinities follow ONNX Runtime (tests/test_nan_inf.py): a NaN input gives NaN for every
// kind (comparisons with NaN are false, so each clamp below lets it through; std::fmin/fmax would
// return the other operand), and +-inf give the limits: Relu(inf) = inf, Sigmoid(-inf) = 0,
// Tanh(-inf) = -1, HardSigmoid(+inf) = 1 and HardSigmoid(-inf) = 0. HardSwish(-inf) is -inf * 0 = NaN, as in ONNX Runtime
// and as the ONNX formula x * HardSigmoid(x) evaluates in IEEE arithmetic.
static float clamp_keep_nan(float x, float lo, float hi) { return x < lo ? lo : x > hi ? hi : x; }

// The math kinds in double (libm), rounded once to float. x * f(x) forms whose f vanishes at -inf
// (Gelu, GeluTanh, Silu, Mish) give -inf * 0 = NaN there, as ONNX Runtime.
static float activate_math_reference(float xf, ActKind kind) {
  const double kSqrtHalf = 0.70710678118654752440, kSqrt2OverPi = 0.79788456080286535588;
  const double x = xf;
  const bool neg_inf = std::isinf(x) && x < 0;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  switch (kind) {
    case ActKind::Gelu: return neg_inf ? nan : static_cast<float>(x * 0.5 * std::erfc(-x * kSqrtHalf));
    case ActKind::GeluTanh: {
      // 0.5 * (1 + tanh(u)) = 1 / (1 + e^(-2u)): no cancellation for negative u.
      const double u = kSqrt2OverPi * (x + 0.044715 * x * x * x);
      return neg_inf ? nan : static_cast<float>(x / (1.0 + std::exp(-2.0 * u)));
    }
    case ActKind::Erf: return static_cast<float>(std::erf(x));
    case ActKind::Exp: return static_cast<float>(std::exp(x));
    case ActKind::Log: return static_cast<float>(std::log(x));
    case ActKind::Abs: return std::fabs(xf);
    case ActKind::Sqrt: return static_cast<float>(std::sqrt(x));
    case ActKind::Reciprocal: return static_cast<float>(1.0 / x);
    case ActKind::Neg: return -xf;
    case ActKind::Square: return static_cast<float>(x * x);
    case ActKind::Silu: return neg_inf ? nan : static_cast<float>(x / (1.0 + std::exp(-x)));
    case ActKind::Mish: return neg_inf ? nan : static_cast<float>(x * std::tanh(std::log1p(std::exp(x))));
    case ActKind::Softplus:  // log(1 + e^x) without overflow: max(x, 0) + log1p(e^-|x|)
      return static_cast<float>(x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)));
    default: return xf;
  }
}

float activate_reference(float x, const Activation& act) {
  switch (act.kind) {
    case ActKind::None: return x;
    case ActKind::Relu: return x < 0.0f ? 0.0f : x;
    case ActKind::Clip: return clamp_keep_nan(x, act.alpha, act.beta);
    case ActKind::HardSwish: return x * clamp_keep_nan(act.alpha * x + act.beta, 0.0f, 1.0f);
    case ActKind::HardSigmoid: return clamp_keep_nan(act.alpha * x + act.beta, 0.0f, 1.0f);
    case ActKind::Sigmoid: return static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(x))));
    case ActKind::Tanh: return static_cast<float>(std::tanh(static_cast<double>(x)));
    case ActKind::LeakyRelu: return x >= 0.0f ? x : act.alpha * x;
    default: return activate_math_reference(x, act.kind);
  }
  return x;
}

float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);  // inf / nan
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal half: normalise
    exp = 113;
    while ((mant & 0x400u) == 0) { mant <<= 1; --exp; }
    bits = sign | (exp << 23) | ((mant & 0x3FFu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t fp32_to_fp16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t absx = x & 0x7FFFFFFFu;
  if (absx >= 0x7F800000u) return sign | (absx > 0x7F800000u ? 0x7E00u : 0x7C00u);
  if (absx >= 0x477FF000u) return sign | 0x7C00u;  // rounds to >= 65520: overflow to inf
  if (absx < 0x38800000u) {                          // below the smallest normal half: subnormal
    if (absx < 0x33000000u) return sign;              // < 2^-25 rounds to zero
    const uint32_t shift = 126 - (absx >> 23);        // 14..24
    const uint32_t mant = (absx & 0x7FFFFFu) | 0x800000u;
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return sign | static_cast<uint16_t>(half);
  }
  uint32_t half = ((absx >> 13) - (112u << 10));
  const uint32_t rem = absx & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;  // may carry into the exponent: fine
  return sign | static_cast<uint16_t>(half);
}

namespace {

// Buffers from this size on (packed weights, Winograd's transformed weights: 2-10 MB a layer in
// ResNet-18) are advised for transparent huge pages, as numpy advises its arrays from 4 MiB. Where
// THP runs in "madvise" mode (Debian's default) a buffer otherwise takes one page fault per 4 KiB
// on first touch, ~2 us each on a VM: 25 ms for ResNet-18's 44 MB of packed weights, more than
// the packing itself. The advice covers the buffer's whole pages only and failing it changes nothing.
constexpr size_t kHugePageAdviceBytes = size_t{4} << 20;

void advise_huge_pages(void* p, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (bytes < kHugePageAdviceBytes) return;
  const long page_size = sysconf(_SC_PAGESIZE);
  if (page_size <= 0) return;
  const uintptr_t page = static_cast<uintptr_t>(page_size), start = reinterpret_cast<uintptr_t>(p);
  const uintptr_t begin = (start + page - 1) / page * page, end = (start + bytes) / page * page;
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
  (void)p;
  (void)bytes;
#endif
}

}  // namespace

void* aligned_alloc_bytes(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  if (posix_memalign(&p, 64, round_up(bytes, 64)) != 0) throw std::bad_alloc();
  advise_huge_pages(p, bytes);
  return p;
}

void aligned_free_bytes(void* p) { std::free(p); }

}  // namespace edgesdk::kernels
