// AVX-512 GEMM microkernels, 8x32: 16 zmm accumulators (of 32 registers), 2 weight vectors, 1
// broadcast; tails use lane masks. AVX-512 F instructions only (fp16 weights widen with the F form of
// vcvtph2ps), so this file alone is compiled with -mavx512f -mfma -mf16c, not with the BW, VL and DQ
// the avx512 level's vector kernels use: hence __avx512f in their names (ukernels.h). Selected at
// run time only.
// GCC 12 flags its own _mm512_undefined_* helpers as maybe-uninitialized when inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "kernels/ukernels.h"

namespace edgesdk::kernels {
namespace {

constexpr size_t MR = kAvx512MR;  // 8

static inline __mmask16 first_lanes(size_t n) { return static_cast<__mmask16>((1u << n) - 1u); }

// The MR row pointers of one tap, copied into locals so that the K loop reads them from registers
// (through the const float* const* they would be reloaded after every store the compiler cannot
// prove harmless).
static_assert(MR == 8, "RowPointers holds 8 rows");
struct RowPointers {
  const float* r0, *r1, *r2, *r3, *r4, *r5, *r6, *r7;
  explicit RowPointers(const float* const* rows)
      : r0(rows[0]), r1(rows[1]), r2(rows[2]), r3(rows[3]), r4(rows[4]), r5(rows[5]), r6(rows[6]), r7(rows[7]) {}
};

static inline __m512 load_w16(const float* w) { return _mm512_load_ps(w); }
static inline __m512 load_w16(const uint16_t* w) {
  return _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(w)));
}

// ONNX HardSwish, the operations of the activation kernel's (vector_kernels.inl) in its order, so the
// fused and post-pass results are the same bits: x * min(1, max(0, fma(x, 1/6, 1/2))); max/min take
// the bound first, so a NaN stays NaN, and -inf gives -inf * 0 = NaN, as ONNX Runtime.
static inline __m512 hardswish(__m512 x) {
  const __m512 gate = _mm512_fmadd_ps(x, _mm512_set1_ps(1.0f / 6.0f), _mm512_set1_ps(0.5f));
  return _mm512_mul_ps(x, _mm512_min_ps(_mm512_set1_ps(1.0f), _mm512_max_ps(_mm512_setzero_ps(), gate)));
}

template <class W>
void igemm_8x32(size_t mr, size_t nr, size_t kc, size_t ks, const float* const* a, const void* w_raw,
                const float* bias, float* c, size_t ldc, uint32_t flags, const MinMax* clamp) {
  const W* w = static_cast<const W*>(w_raw);
  const __mmask16 m0 = first_lanes(nr < 16 ? nr : 16), m1 = first_lanes(nr > 16 ? nr - 16 : 0);
  __m512 acc[MR][2];
  if (flags & kGemmAccumulate) {
#pragma GCC unroll 8
    for (size_t i = 0; i < MR; ++i) {
      const bool live = i < mr;
      acc[i][0] = live ? _mm512_maskz_loadu_ps(m0, c + i * ldc) : _mm512_setzero_ps();
      acc[i][1] = live ? _mm512_maskz_loadu_ps(m1, c + i * ldc + 16) : _mm512_setzero_ps();
    }
  } else {
    const __m512 b0 = bias != nullptr ? _mm512_loadu_ps(bias) : _mm512_setzero_ps();
    const __m512 b1 = bias != nullptr ? _mm512_loadu_ps(bias + 16) : _mm512_setzero_ps();
#pragma GCC unroll 8
    for (size_t i = 0; i < MR; ++i) { acc[i][0] = b0; acc[i][1] = b1; }
  }
  if (mr == 1) {
    // GEMV (batch 1): one row, memory-bound on the weights; two k per step for two FMA chains.
    __m512 e0 = _mm512_setzero_ps(), e1 = _mm512_setzero_ps();
    for (size_t s = 0; s < ks; ++s) {
      const float* a0 = a[s * MR];
      size_t k = 0;
      for (; k + 2 <= kc; k += 2) {
        const __m512 x0 = _mm512_set1_ps(a0[k]), x1 = _mm512_set1_ps(a0[k + 1]);
        acc[0][0] = _mm512_fmadd_ps(x0, load_w16(w), acc[0][0]);
        acc[0][1] = _mm512_fmadd_ps(x0, load_w16(w + 16), acc[0][1]);
        e0 = _mm512_fmadd_ps(x1, load_w16(w + 32), e0);
        e1 = _mm512_fmadd_ps(x1, load_w16(w + 48), e1);
        w += 64;
      }
      if (k < kc) {
        const __m512 x0 = _mm512_set1_ps(a0[k]);
        acc[0][0] = _mm512_fmadd_ps(x0, load_w16(w), acc[0][0]);
        acc[0][1] = _mm512_fmadd_ps(x0, load_w16(w + 16), acc[0][1]);
        w += 32;
      }
    }
    acc[0][0] = _mm512_add_ps(acc[0][0], e0);
    acc[0][1] = _mm512_add_ps(acc[0][1], e1);
  } else {
    for (size_t s = 0; s < ks; ++s) {
      const RowPointers r(a + s * MR);
      for (size_t k = 0; k < kc; ++k) {
        const __m512 w0 = load_w16(w);
        const __m512 w1 = load_w16(w + 16);
        w += 32;
        __m512 av;
#define EDGESDK_ROW(i, r)                                   \
    av = _mm512_set1_ps(r[k]);                                \
    acc[i][0] = _mm512_fmadd_ps(av, w0, acc[i][0]);           \
    acc[i][1] = _mm512_fmadd_ps(av, w1, acc[i][1]);
        EDGESDK_ROW(0, r.r0) EDGESDK_ROW(1, r.r1) EDGESDK_ROW(2, r.r2) EDGESDK_ROW(3, r.r3)
        EDGESDK_ROW(4, r.r4) EDGESDK_ROW(5, r.r5) EDGESDK_ROW(6, r.r6) EDGESDK_ROW(7, r.r7)
#undef EDGESDK_ROW
      }
  }
  }
  if (flags & kGemmFinal) {
    // Bounds first: maxps/minps return the second operand when either is NaN, so a NaN
    // accumulator stays NaN (the other order turned it into the lower bound, -inf unclamped).
    const __m512 lo = _mm512_set1_ps(clamp->min), hi = _mm512_set1_ps(clamp->max);
    if (flags & kGemmHardSwish) {
#pragma GCC unroll 8
      for (size_t i = 0; i < MR; ++i) {
        acc[i][0] = hardswish(acc[i][0]);
        acc[i][1] = hardswish(acc[i][1]);
      }
    }
#pragma GCC unroll 8
    for (size_t i = 0; i < MR; ++i) {
      acc[i][0] = _mm512_min_ps(hi, _mm512_max_ps(lo, acc[i][0]));
      acc[i][1] = _mm512_min_ps(hi, _mm512_max_ps(lo, acc[i][1]));
    }
  }
#pragma GCC unroll 8
  for (size_t i = 0; i < MR; ++i) {
    if (i < mr) {
      _mm512_mask_storeu_ps(c + i * ldc, m0, acc[i][0]);
      _mm512_mask_storeu_ps(c + i * ldc + 16, m1, acc[i][1]);
    }
  }
}

// One 16-wide column of outputs (layers of at most 16 output channels: LeNet's 6 and 16,
// MobileNetV2's 32 -> 16 projection, MobileNetV3's 16-channel layers). The 8x32 tile spends half or
// more of its multiply-adds on zero columns there; this one loads one weight vector per K step and
// keeps the 8 rows' FMA chains (8 in flight: FMA latency x throughput).
void igemm_8x16(size_t mr, size_t nr, size_t kc, size_t ks, const float* const* a, const float* w,
                const float* bias, float* c, size_t ldc, uint32_t flags, const MinMax* clamp) {
  const __mmask16 m0 = first_lanes(nr);
  __m512 acc[MR];
  if (flags & kGemmAccumulate) {
#pragma GCC unroll 8
    for (size_t i = 0; i < MR; ++i) acc[i] = i < mr ? _mm512_maskz_loadu_ps(m0, c + i * ldc) : _mm512_setzero_ps();
  } else {
    const __m512 b0 = bias != nullptr ? _mm512_loadu_ps(bias) : _mm512_setzero_ps();
#pragma GCC unroll 8
    for (size_t i = 0; i < MR; ++i) acc[i] = b0;
  }
  if (mr == 1) {
    // GEMV: two K steps at a time for two FMA chains.
    __m512 e0 = _mm512_setzero_ps();
    for (size_t s = 0; s < ks; ++s) {
      const float* a0 = a[s * MR];
      size_t k = 0;
      for (; k + 2 <= kc; k += 2) {
        acc[0] = _mm512_fmadd_ps(_mm512_set1_ps(a0[k]), _mm512_load_ps(w), acc[0]);
        e0 = _mm512_fmadd_ps(_mm512_set1_ps(a0[k + 1]), _mm512_load_ps(w + 16), e0);
        w += 32;
      }
      if (k < kc) {
        acc[0] = _mm512_fmadd_ps(_mm512_set1_ps(a0[k]), _mm512_load_ps(w), acc[0]);
        w += 16;
      }
    }
    acc[0] = _mm512_add_ps(acc[0], e0);
  } else {
    for (size_t s = 0; s < ks; ++s) {
      const RowPointers r(a + s * MR);
      for (size_t k = 0; k < kc; ++k) {
        const __m512 w0 = _mm512_load_ps(w);
        w += 16;
        acc[0] = _mm512_fmadd_ps(_mm512_set1_ps(r.r0[k]), w0, acc[0]);
        acc[1] = _mm512_fmadd_ps(_mm512_set1_ps(r.r1[k]), w0, acc[1]);
        acc[2] = _mm512_fmadd_ps(_mm512_set1_ps(r.r2[k]), w0, acc[2]);
        acc[3] = _mm512_fmadd_ps(_mm512_set1_ps(r.r3[k]), w0, acc[3]);
        acc[4] = _mm512_fmadd_ps(_mm512_set1_ps(r.r4[k]), w0, acc[4]);
        acc[5] = _mm512_fmadd_ps(_mm512_set1_ps(r.r5[k]), w0, acc[5]);
        acc[6] = _mm512_fmadd_ps(_mm512_set1_ps(r.r6[k]), w0, acc[6]);
        acc[7] = _mm512_fmadd_ps(_mm512_set1_ps(r.r7[k]), w0, acc[7]);
      }
    }
  }
  if (flags & kGemmFinal) {
    // Bounds first, as igemm_8x32: a NaN accumulator stays NaN.
    const __m512 lo = _mm512_set1_ps(clamp->min), hi = _mm512_set1_ps(clamp->max);
    if (flags & kGemmHardSwish) {
#pragma GCC unroll 8
      for (size_t i = 0; i < MR; ++i) acc[i] = hardswish(acc[i]);
    }
#pragma GCC unroll 8
    for (size_t i = 0; i < MR; ++i) acc[i] = _mm512_min_ps(hi, _mm512_max_ps(lo, acc[i]));
  }
#pragma GCC unroll 8
  for (size_t i = 0; i < MR; ++i)
    if (i < mr) _mm512_mask_storeu_ps(c + i * ldc, m0, acc[i]);
}

}  // namespace

void f32_igemm_8x16__avx512f(size_t mr, size_t nr, size_t kc, size_t ks, const float* const* a, const void* w,
                             const float* bias, float* c, size_t ldc, uint32_t flags, const MinMax* clamp) {
  igemm_8x16(mr, nr, kc, ks, a, static_cast<const float*>(w), bias, c, ldc, flags, clamp);
}

void f32_igemm_8x32__avx512f(size_t mr, size_t nr, size_t kc, size_t ks, const float* const* a, const void* w,
                             const float* bias, float* c, size_t ldc, uint32_t flags, const MinMax* clamp) {
  igemm_8x32<float>(mr, nr, kc, ks, a, w, bias, c, ldc, flags, clamp);
}

void f32_f16w_igemm_8x32__avx512f(size_t mr, size_t nr, size_t kc, size_t ks, const float* const* a,
                                  const void* w, const float* bias, float* c, size_t ldc, uint32_t flags,
                                  const MinMax* clamp) {
  igemm_8x32<uint16_t>(mr, nr, kc, ks, a, w, bias, c, ldc, flags, clamp);
}

}  // namespace edgesdk::kernels
