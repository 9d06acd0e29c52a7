// AVX2+FMA GEMM microkernels, 6x16: 12 ymm accumulators, 2 weight vectors, 1 broadcast (15 of the
// 16 registers). Each k step is 2 weight loads + 6 broadcasts for 12 FMAs. fp16 weights are
// widened with F16C on load. Compiled with -mavx2 -mfma -mf16c; selected at run time only.
#include <immintrin.h>

#include "kernels/ukernels.h"

namespace edgesdk::kernels {
namespace {

constexpr size_t MR = kAvx2MR;  // 6

alignas(32) const int32_t kMaskTable[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
// Lanes [0, n) set, n in 0..8.
static inline __m256i first_lanes(size_t n) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kMaskTable + 8 - n));
}

static inline __m256 load_w8(const float* w) { return _mm256_load_ps(w); }
static inline __m256 load_w8(const uint16_t* w) {
  return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(w)));
}

// ONNX HardSwish, as the activation kernel computes it (gemm_avx512.cc says why this order).
static inline __m256 hardswish(__m256 x) {
  const __m256 gate = _mm256_fmadd_ps(x, _mm256_set1_ps(1.0f / 6.0f), _mm256_set1_ps(0.5f));
  return _mm256_mul_ps(x, _mm256_min_ps(_mm256_set1_ps(1.0f), _mm256_max_ps(_mm256_setzero_ps(), gate)));
}

template <class W>
void igemm_6x16(size_t mr, size_t nr, size_t kc, size_t ks, const float* const* a, const void* w_raw,
                const float* bias, float* c, size_t ldc, uint32_t flags, const MinMax* clamp) {
  const W* w = static_cast<const W*>(w_raw);
  const size_t n0 = nr < 8 ? nr : 8, n1 = nr > 8 ? nr - 8 : 0;
  const __m256i mask0 = first_lanes(n0), mask1 = first_lanes(n1);
  __m256 acc[MR][2];
  if (flags & kGemmAccumulate) {
#pragma GCC unroll 6
    for (size_t i = 0; i < MR; ++i) {
      const bool live = i < mr;
      acc[i][0] = live ? _mm256_maskload_ps(c + i * ldc, mask0) : _mm256_setzero_ps();
      acc[i][1] = live ? _mm256_maskload_ps(c + i * ldc + 8, mask1) : _mm256_setzero_ps();
    }
  } else {
    const __m256 b0 = bias != nullptr ? _mm256_loadu_ps(bias) : _mm256_setzero_ps();
    const __m256 b1 = bias != nullptr ? _mm256_loadu_ps(bias + 8) : _mm256_setzero_ps();
#pragma GCC unroll 6
    for (size_t i = 0; i < MR; ++i) { acc[i][0] = b0; acc[i][1] = b1; }
  }
  if (mr == 1) {
    // GEMV (batch 1): one row, memory-bound on the weights; two k per step for two FMA chains.
    __m256 e0 = _mm256_setzero_ps(), e1 = _mm256_setzero_ps();
    for (size_t s = 0; s < ks; ++s) {
      const float* a0 = a[s * MR];
      size_t k = 0;
      for (; k + 2 <= kc; k += 2) {
        const __m256 x0 = _mm256_broadcast_ss(a0 + k), x1 = _mm256_broadcast_ss(a0 + k + 1);
        acc[0][0] = _mm256_fmadd_ps(x0, load_w8(w), acc[0][0]);
        acc[0][1] = _mm256_fmadd_ps(x0, load_w8(w + 8), acc[0][1]);
        e0 = _mm256_fmadd_ps(x1, load_w8(w + 16), e0);
        e1 = _mm256_fmadd_ps(x1, load_w8(w + 24), e1);
        w += 32;
      }
      if (k < kc) {
        const __m256 x0 = _mm256_broadcast_ss(a0 + k);
        acc[0][0] = _mm256_fmadd_ps(x0, load_w8(w), acc[0][0]);
        acc[0][1] = _mm256_fmadd_ps(x0, load_w8(w + 8), acc[0][1]);
        w += 16;
      }
    }
    acc[0][0] = _mm256_add_ps(acc[0][0], e0);
    acc[0][1] = _mm256_add_ps(acc[0][1], e1);
  } else {
    for (size_t s = 0; s < ks; ++s) {
      const float* a0 = a[s * MR + 0];
      const float* a1 = a[s * MR + 1];
      const float* a2 = a[s * MR + 2];
      const float* a3 = a[s * MR + 3];
      const float* a4 = a[s * MR + 4];
      const float* a5 = a[s * MR + 5];
      for (size_t k = 0; k < kc; ++k) {
        const __m256 w0 = load_w8(w);
        const __m256 w1 = load_w8(w + 8);
        w += 16;
        __m256 av = _mm256_broadcast_ss(a0 + k);
        acc[0][0] = _mm256_fmadd_ps(av, w0, acc[0][0]);
        acc[0][1] = _mm256_fmadd_ps(av, w1, acc[0][1]);
        av = _mm256_broadcast_ss(a1 + k);
        acc[1][0] = _mm256_fmadd_ps(av, w0, acc[1][0]);
        acc[1][1] = _mm256_fmadd_ps(av, w1, acc[1][1]);
        av = _mm256_broadcast_ss(a2 + k);
        acc[2][0] = _mm256_fmadd_ps(av, w0, acc[2][0]);
        acc[2][1] = _mm256_fmadd_ps(av, w1, acc[2][1]);
        av = _mm256_broadcast_ss(a3 + k);
        acc[3][0] = _mm256_fmadd_ps(av, w0, acc[3][0]);
        acc[3][1] = _mm256_fmadd_ps(av, w1, acc[3][1]);
        av = _mm256_broadcast_ss(a4 + k);
        acc[4][0] = _mm256_fmadd_ps(av, w0, acc[4][0]);
        acc[4][1] = _mm256_fmadd_ps(av, w1, acc[4][1]);
        av = _mm256_broadcast_ss(a5 + k);
        acc[5][0] = _mm256_fmadd_ps(av, w0, acc[5][0]);
        acc[5][1] = _mm256_fmadd_ps(av, w1, acc[5][1]);
      }
  }
  }
  if (flags & kGemmFinal) {
    // Bounds first: maxps/minps return the second operand when either is NaN, so a NaN
    // accumulator stays NaN (the other order turned it into the lower bound, -inf unclamped).
    const __m256 lo = _mm256_set1_ps(clamp->min), hi = _mm256_set1_ps(clamp->max);
    if (flags & kGemmHardSwish) {
#pragma GCC unroll 6
      for (size_t i = 0; i < MR; ++i) {
        acc[i][0] = hardswish(acc[i][0]);
        acc[i][1] = hardswish(acc[i][1]);
      }
    }
#pragma GCC unroll 6
    for (size_t i = 0; i < MR; ++i) {
      acc[i][0] = _mm256_min_ps(hi, _mm256_max_ps(lo, acc[i][0]));
      acc[i][1] = _mm256_min_ps(hi, _mm256_max_ps(lo, acc[i][1]));
    }
  }
  if (nr == 16) {
#pragma GCC unroll 6
    for (size_t i = 0; i < MR; ++i) {
      if (i < mr) {
        _mm256_storeu_ps(c + i * ldc, acc[i][0]);
        _mm256_storeu_ps(c + i * ldc + 8, acc[i][1]);
      }
    }
  } else {
#pragma GCC unroll 6
    for (size_t i = 0; i < MR; ++i) {
      if (i < mr) {
        _mm256_maskstore_ps(c + i * ldc, mask0, acc[i][0]);
        _mm256_maskstore_ps(c + i * ldc + 8, mask1, acc[i][1]);
      }
    }
  }
}

}  // namespace

void f32_igemm_6x16__avx2(size_t mr, size_t nr, size_t kc, size_t ks, const float* const* a, const void* w,
                          const float* bias, float* c, size_t ldc, uint32_t flags, const MinMax* clamp) {
  igemm_6x16<float>(mr, nr, kc, ks, a, w, bias, c, ldc, flags, clamp);
}

void f32_f16w_igemm_6x16__avx2(size_t mr, size_t nr, size_t kc, size_t ks, const float* const* a, const void* w,
                               const float* bias, float* c, size_t ldc, uint32_t flags, const MinMax* clamp) {
  igemm_6x16<uint16_t>(mr, nr, kc, ks, a, w, bias, c, ldc, flags, clamp);
}

}  // namespace edgesdk::kernels
