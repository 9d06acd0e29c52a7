// AVX512_VNNI qu8 kernels of the avx512vnni level (the avx512 table plus these two; dispatch.cc): the
// GEMM / indirect-GEMM microkernel 8x16c4, and the depthwise convolution with vpdpwssd (one fused
// int16-pair multiply-add per tap and 16 channels, where avx512 needs vpmaddwd and vpaddd).
//
// GEMM: vpdpbusd multiplies 4 unsigned activation bytes by 4 signed weight bytes per 32-bit lane and
// adds the 4 products into the lane: exact (|sum| <= 4 * 255 * 128), no saturation (the "s" form, vpdpbusds, would saturate; this one wraps like every other variant).
// Per 4 k: one 64-byte weight load (16 columns x 4 k, packed Qu8Layout::C4) and, per row, one
// broadcast of the row's 4 activation bytes (a load, no shuffle) feeding one vpdpbusd: 8 rows give
// 8 independent accumulation chains, enough to cover vpdpbusd's latency at one per cycle. Weights
// are the signed operand, activations the unsigned one, so the broadcast cannot be an embedded
// {1to16} memory operand (only the signed source may be one). Requantization and the narrowing to
// uint8 are fused (qu8_avx512.inl). Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq
// -mavx512vnni; selected at run time only.
//
// GCC 12 flags its own _mm512_undefined_* helpers as (maybe-)uninitialized when inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include "kernels/ukernels.h"

namespace edgesdk::kernels {
namespace {

#include "kernels/qu8_avx512.inl"

constexpr size_t MR = kAvx512VnniQu8MR;  // 8
static_assert(kAvx512VnniQu8NR == 16, "one zmm of int32 per row");

// acc += vpdpbusd(x, w). Inline asm: GCC 12 copies every accumulator to a fresh register before the
// (destructive) vpdpbusd and back after it, 2 moves per multiply-add, with the intrinsic here.
static inline void dpbusd(__m512i& acc, __m512i x, __m512i w) {
  __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(x), "v"(w));
}

template <size_t M>
void igemm(size_t mr, size_t nr, size_t kc, size_t ks, const uint8_t* const* a, const int8_t* w, const int32_t* bias,
           const int32_t* rq, uint8_t* c, size_t ldc, const Qu8Output* out) {
  __m512i acc[M];
  const __m512i b = _mm512_loadu_si512(bias);
#pragma GCC unroll 8
  for (size_t i = 0; i < M; ++i) acc[i] = b;
  const size_t kb = kc & ~size_t{3}, tail = kc & 3;
  for (size_t s = 0; s < ks; ++s) {
    const uint8_t* r[M];
#pragma GCC unroll 8
    for (size_t i = 0; i < M; ++i) r[i] = a[s * MR + i];
    for (size_t k = 0; k < kb; k += 4) {
      const __m512i wv = _mm512_load_si512(w);
      w += 64;
#pragma GCC unroll 8
      for (size_t i = 0; i < M; ++i) dpbusd(acc[i], _mm512_set1_epi32(load_u32(r[i] + k)), wv);
    }
    if (tail != 0) {
      const __m512i wv = _mm512_load_si512(w);
      w += 64;
#pragma GCC unroll 8
      for (size_t i = 0; i < M; ++i)
        dpbusd(acc[i], _mm512_set1_epi32(load_u32_tail(r[i] + kb, tail)), wv);
    }
  }
  store_tile<M>(acc, mr, nr, rq, c, ldc, out);
}

// acc += vpdpwssd(x, w): the fused int16-pair multiply-add of a depthwise tap (vpmaddwd + vpaddd in
// one instruction), through qu8_avx512.inl's depthwise template.
struct DotAdd {
  static __m512i tap(__m512i acc, __m512i x, __m512i w) {
    __asm__("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(x), "v"(w));
    return acc;
  }
};

}  // namespace

void qu8_igemm_8x16c4__avx512vnni(size_t mr, size_t nr, size_t kc, size_t ks, const uint8_t* const* a, const void* w,
                                  const int32_t* bias, const int32_t* rq, uint8_t* c, size_t ldc,
                                  const Qu8Output* out) {
  const int8_t* w8 = static_cast<const int8_t*>(w);
#define EDGESDK_CALL(M) igemm<M>(mr, nr, kc, ks, a, w8, bias, rq, c, ldc, out)
  EDGESDK_QU8_DISPATCH_MR(mr, EDGESDK_CALL)
#undef EDGESDK_CALL
}

void qu8_depthwise_16c__avx512vnni(const Qu8DepthwiseArgs* a, size_t row_begin, size_t row_end) {
  if (a->kw == 3) depthwise_16c<3, DotAdd>(a, row_begin, row_end);
  else depthwise_16c<0, DotAdd>(a, row_begin, row_end);
}

}  // namespace edgesdk::kernels
