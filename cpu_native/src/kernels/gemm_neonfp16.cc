// ARMv8.2-A FP16 arithmetic (FEAT_FP16: HWCAP fphp + asimdhp) GEMM / indirect-GEMM microkernel for
// fp16 sessions, and the fp32 -> fp16 conversion its drivers feed it with. This file alone is
// compiled with -march=armv8.2-a+fp16 (CMakeLists.txt); dispatch (neonfp16 level) calls it only on
// CPUs that report the feature, the rest of the library stays plain ARMv8.0.
//
// Numerics: fp16 products, fp32 accumulation, within the reference's fp16 tolerance.
//   FMLA .8h multiplies and adds in half into fp16 accumulators, one rounding per fused
//   multiply-add, and the accumulators are widened (FCVTL/FCVTL2) and added into fp32 accumulators
//   after every kF16KBlock = 16 products (ukernels.h defines the block order), so no fp16 partial sum
//   ever spans more than 16 terms and the long sum (K = 4608 in a 3x3x512 conv) is fp32.
//   Error of 16 x 64 outputs of A x W, A and W rounded to half, against the exact (fp64) result, as
//   a fraction of the outputs' RMS (max / rms); "ref" is what the reference fp16 model's own
//   rounding of its fp32-accumulated output to half costs (max). Simulated block sizes (numpy):
//     K = 4608, post-ReLU N(0,1) activations x He-scaled N(0, 2/K) weights: ref 0.95e-3;
//       block 8: 1.5e-3 / 3.6e-4;  block 16: 1.6e-3 / 4.8e-4;  block 32: 2.2e-3 / 6.6e-4;
//       block 64: 3.2e-3 / 8.8e-4;  one fp16 accumulator over all of K: 5.0e-2 / 6.8e-3
//     K = 4608, uniform [-1, 1] both: ref 1.4e-3;  block 16: 2.0e-3 / 6.2e-4;  all of K: 5.6e-2 / 9.6e-3
//     K = 576, post-ReLU x He: ref 0.93e-3;  block 16: 1.6e-3 / 4.4e-4;  all of K: 1.7e-2 / 2.4e-3
//   This kernel under qemu (kernel_tests' INFO line, first case): 1.49e-3 / 4.55e-4, ref 0.89e-3.
//   So block 16 stays within ~2x the half rounding the reference applies to every output anyway
//   (the cpu backend's fp16 tolerance is 1e-2); pure fp16 accumulation is ~30x worse (max). Block 8
//   would buy little accuracy for twice the flushes; 32 halves them for ~1.4x the error.
// Why not FMLAL (fp16 x fp16 into fp32 lanes, exact products): it needs FEAT_FHM (HWCAP asimdfhm),
// which Cortex-A55/A75/A76/A77/A78 and Neoverse N1, the common fp16-capable edge cores, lack
// (qemu's cortex-a76 model reports fp16 without fhm), and it does 4 multiply-adds per instruction,
// the fp32 FMLA .4s rate, so over f32_f16w_igemm_8x8__neon it would only save bandwidth. FMLA .8h
// does 8; the flush costs 4 instructions per fp16 accumulator per 16 k (8 accumulators: 32 + 8
// zeroings per 128 FMLAs), so per 16 k the tile issues ~200 instructions for 1024 multiply-adds
// against ~330 for the 8x8 fp32 kernel: an estimated 1.5-1.7x on compute-bound layers, plus half the
// activation and weight bytes. (Not measured: no ARM hardware here; correctness is checked under
// qemu, which says nothing about speed.)
//
// Tile 4 x 16: h[4][2] fp16 accumulators (8 registers), acc[4][4] fp32 (16), 4 A registers holding
// 8 k of each row and the W vectors. Multiplies by lane (fmla .8h by element), so A needs no
// broadcasts. GCC 12 keeps h, A and W in registers through the 8-k loop and parks half of the fp32
// accumulators on the stack around it (one store and load per 16 k, off the FMLA chain).
#include <arm_neon.h>

#include "kernels/ukernels.h"

#if !defined(__ARM_FEATURE_FP16_VECTOR_ARITHMETIC)
#error "gemm_neonfp16.cc must be compiled with -march=armv8.2-a+fp16 (see CMakeLists.txt)"
#endif

namespace edgesdk::kernels {
namespace {

constexpr size_t MR = kNeonFp16MR, NR = kNeonFp16NR, KB = kF16KBlock;  // 4, 16, 16
// Loops over rows / vectors of the tile are unrolled fully so the accumulators live in registers
// (GCC at -O2 otherwise keeps the arrays on the stack).
#define EDGESDK_UNROLL _Pragma("GCC unroll 16")
static_assert(NR == 16, "two .8h vectors per row");

// acc += w * a[lane] (FMLA .8h by element). Inline asm because GCC 12 turns vfmaq_laneq_f16 whose
// lane value feeds two FMLAs (w0 and w1 here) into a DUP plus two vector FMLAs, 7 extra DUPs per
// 16 FMLAs; "x" keeps `a` in v0-v15, the only registers a half-precision element operand can name.
#define EDGESDK_FMLA_LANE(acc, w, a, lane) \
  __asm__("fmla %0.8h, %1.8h, %2.h[" #lane "]" : "+w"(acc) : "w"(w), "x"(a))

static inline float16x8_t load8(const uint16_t* p) { return vreinterpretq_f16_u16(vld1q_u16(p)); }
static inline float16x8_t dup8(const uint16_t* p) { return vreinterpretq_f16_u16(vld1q_dup_u16(p)); }

// M = rows computed (1 for GEMV, MR otherwise; rows >= mr are computed from the repeated last row
// and not stored).
template <size_t M>
void igemm_body(size_t mr, size_t nr, size_t kc, size_t ks, const uint16_t* const* a, const uint16_t* w,
                const float* bias, float* c, size_t ldc, uint32_t flags, const MinMax* clamp) {
  float32x4_t acc[M][4];
  if (flags & kGemmAccumulate) {
    EDGESDK_UNROLL for (size_t i = 0; i < M; ++i) {
      float row[NR];
      EDGESDK_UNROLL for (size_t j = 0; j < NR; ++j) row[j] = i < mr && j < nr ? c[i * ldc + j] : 0.0f;
      EDGESDK_UNROLL for (size_t q = 0; q < 4; ++q) acc[i][q] = vld1q_f32(row + 4 * q);
    }
  } else {
    EDGESDK_UNROLL for (size_t q = 0; q < 4; ++q) {
      const float32x4_t b = bias != nullptr ? vld1q_f32(bias + 4 * q) : vdupq_n_f32(0.0f);
      EDGESDK_UNROLL for (size_t i = 0; i < M; ++i) acc[i][q] = b;
    }
  }
  const float16x8_t zero = vdupq_n_f16(0);
  float16x8_t h[M][2];
  EDGESDK_UNROLL for (size_t i = 0; i < M; ++i) h[i][0] = h[i][1] = zero;
  size_t pending = 0;  // products in h since the last flush
#define EDGESDK_FLUSH                                                        \
  EDGESDK_UNROLL for (size_t i = 0; i < M; ++i) {                                           \
    EDGESDK_UNROLL for (size_t u = 0; u < 2; ++u) {                                         \
      acc[i][2 * u] = vaddq_f32(acc[i][2 * u], vcvt_f32_f16(vget_low_f16(h[i][u]))); \
      acc[i][2 * u + 1] = vaddq_f32(acc[i][2 * u + 1], vcvt_high_f32_f16(h[i][u])); \
      h[i][u] = zero;                                                        \
    }                                                                        \
  }
  for (size_t s = 0; s < ks; ++s) {
    const uint16_t* r[M];
    EDGESDK_UNROLL for (size_t i = 0; i < M; ++i) r[i] = a[s * MR + i];
    size_t k = 0;
    while (k < kc) {
      // Up to the end of the current 16-product block (it may have started in an earlier kernel
      // position when kc is small) or of this position's channels.
      const size_t k_end = kc - k < KB - pending ? kc : k + (KB - pending);
      pending += k_end - k;
      for (; k + 8 <= k_end; k += 8) {
        float16x8_t av[M];
        EDGESDK_UNROLL for (size_t i = 0; i < M; ++i) av[i] = load8(r[i] + k);
#define EDGESDK_STEP(lane)                                              \
  {                                                                     \
    const float16x8_t w0 = load8(w), w1 = load8(w + 8);                 \
    w += NR;                                                            \
    EDGESDK_UNROLL for (size_t i = 0; i < M; ++i) {                     \
      EDGESDK_FMLA_LANE(h[i][0], w0, av[i], lane);                      \
      EDGESDK_FMLA_LANE(h[i][1], w1, av[i], lane);                      \
    }                                                                   \
  }
        EDGESDK_STEP(0) EDGESDK_STEP(1) EDGESDK_STEP(2) EDGESDK_STEP(3)
        EDGESDK_STEP(4) EDGESDK_STEP(5) EDGESDK_STEP(6) EDGESDK_STEP(7)
#undef EDGESDK_STEP
      }
      for (; k < k_end; ++k) {
        const float16x8_t w0 = load8(w), w1 = load8(w + 8);
        w += NR;
        EDGESDK_UNROLL for (size_t i = 0; i < M; ++i) {
          const float16x8_t av = dup8(r[i] + k);
          h[i][0] = vfmaq_f16(h[i][0], w0, av);
          h[i][1] = vfmaq_f16(h[i][1], w1, av);
        }
      }
      if (pending == KB) {
        EDGESDK_FLUSH
        pending = 0;
      }
    }
  }
  if (pending != 0) {
    EDGESDK_FLUSH
  }
#undef EDGESDK_FLUSH
  if (flags & kGemmFinal) {
    const float32x4_t lo = vdupq_n_f32(clamp->min), hi = vdupq_n_f32(clamp->max);
    EDGESDK_UNROLL for (size_t i = 0; i < M; ++i)
      EDGESDK_UNROLL for (size_t q = 0; q < 4; ++q) acc[i][q] = vminq_f32(vmaxq_f32(acc[i][q], lo), hi);
  }
  EDGESDK_UNROLL for (size_t i = 0; i < M; ++i) {
    if (i >= mr) break;
    float* ci = c + i * ldc;
    if (nr == NR) {
      EDGESDK_UNROLL for (size_t q = 0; q < 4; ++q) vst1q_f32(ci + 4 * q, acc[i][q]);
    } else {
      float row[NR];
      EDGESDK_UNROLL for (size_t q = 0; q < 4; ++q) vst1q_f32(row + 4 * q, acc[i][q]);
      for (size_t j = 0; j < nr; ++j) ci[j] = row[j];
    }
  }
}

}  // namespace

void f16_f32acc_igemm_4x16__neonfp16(size_t mr, size_t nr, size_t kc, size_t ks, const uint16_t* const* a,
                                     const void* w, const float* bias, float* c, size_t ldc, uint32_t flags,
                                     const MinMax* clamp) {
  const uint16_t* wh = static_cast<const uint16_t*>(w);
  if (mr == 1) igemm_body<1>(mr, nr, kc, ks, a, wh, bias, c, ldc, flags, clamp);
  else igemm_body<MR>(mr, nr, kc, ks, a, wh, bias, c, ldc, flags, clamp);
}

void f32_f16_vcvt_8x__neonfp16(const float* x, uint16_t* y, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const float16x8_t h = vcvt_high_f16_f32(vcvt_f16_f32(vld1q_f32(x + i)), vld1q_f32(x + i + 4));
    vst1q_u16(y + i, vreinterpretq_u16_f16(h));
  }
  for (; i < n; ++i) {
    const float16_t h = static_cast<float16_t>(x[i]);  // fcvt h, s: round to nearest even
    uint16_t bits;
    __builtin_memcpy(&bits, &h, sizeof bits);
    y[i] = bits;
  }
}

}  // namespace edgesdk::kernels
