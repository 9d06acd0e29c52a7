// AVX512_VNNI qu8 kernels of the avx512vnni level (the avx512 table plus these three; dispatch.cc):
// the GEMM / indirect-GEMM microkernels 8x16c4 and 8x32c4 (two panels a call), and the depthwise convolution with vpdpbusd (four kernel
// rows of a channel per int32 lane: one multiply-add instruction per 16 channels and 4 taps, where
// avx512 needs vpmaddwd and vpaddd per 2 taps).
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

#include <type_traits>

#include "kernels/qu8_ukernels.h"
#include "kernels/requantization.h"
#include "kernels/ukernels.h"

namespace edgesdk::kernels {
namespace {

#include "kernels/qu8_avx512.inl"
#include "kernels/qu8_avx512_dwconv.inl"

constexpr size_t MR = kAvx512VnniQu8MR;  // 8
static_assert(kAvx512VnniQu8NR == 16, "one zmm of int32 per row");

// acc += vpdpbusd(x, w). Inline asm: GCC 12 copies every accumulator to a fresh register before the
// (destructive) vpdpbusd and back after it, 2 moves per multiply-add, with the intrinsic here.
static inline void dpbusd(__m512i& acc, __m512i x, __m512i w) {
  __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(x), "v"(w));
}

// One vpdpbusd a row and 4 k: 8 rows give 8 independent accumulation chains.
struct DotStep {
  using Weights = __m512i;
  static constexpr size_t kBytes = 64;
  static Weights load(const uint8_t* w) { return _mm512_load_si512(w); }
  void apply(__m512i& acc, int32_t x32, const Weights& w) const { dpbusd(acc, _mm512_set1_epi32(x32), w); }
};

// Two panels (ukernels.h, the qu8_igemm_x2 slot): 16 accumulators, two weight vectors a step, and
// each row's broadcast feeding both (8 rows x 32 columns, 16 of the 32 zmm for accumulators).
template <size_t M>
void igemm_x2(size_t mr, size_t nr, size_t kc, size_t ks, const uint8_t* const* a, const int8_t* w,
              const int32_t* bias, const int32_t* rq, uint8_t* c, size_t ldc, const Qu8Output* out) {
  __m512i acc0[M], acc1[M];
  const __m512i b0 = _mm512_loadu_si512(bias), b1 = _mm512_loadu_si512(bias + 16);
#pragma GCC unroll 8
  for (size_t i = 0; i < M; ++i) {
    acc0[i] = b0;
    acc1[i] = b1;
  }
  const size_t second = ks * ((kc + 3) / 4) * 64;  // bytes from the first panel to the second
  const int8_t* w1 = w + second;
  for (size_t s = 0; s < ks; ++s) {
    const uint8_t* r[M];
#pragma GCC unroll 8
    for (size_t i = 0; i < M; ++i) r[i] = a[s * MR + i];
    for (size_t k = 0; k < kc; k += 4) {
      const __m512i wv0 = _mm512_load_si512(w), wv1 = _mm512_load_si512(w1);
      w += 64;
      w1 += 64;
#pragma GCC unroll 8
      for (size_t i = 0; i < M; ++i) {
        const __m512i x = _mm512_set1_epi32(load_u32(r[i] + k));
        dpbusd(acc0[i], x, wv0);
        dpbusd(acc1[i], x, wv1);
      }
    }
  }
  store_tile<M>(acc0, mr, 16, rq, c, ldc, out);
  store_tile<M>(acc1, mr, nr - 16, rq + kQu8RqRows * 16, c + 16, ldc, out);
}

// The depthwise taps of the avx512vnni level (qu8_avx512_dwconv.inl): four kernel rows per int32
// lane as bytes, the raw activation bytes the unsigned operand of vpdpbusd and the weights the
// signed one (rows past the kernel weigh 0): four exact products summed into the lane, as the GEMM.
struct QuadTaps {
  static constexpr size_t kRows = 4;
  static constexpr size_t kStreamPixels = 8;  // 3x3 streaming: 16 accumulators, 6 weight vectors a pass
  static __m512i zp_vector(uint8_t zp) { return _mm512_set1_epi8(static_cast<char>(zp)); }
  // Rows r[0..3] -> vectors 0..3: bytes of rows 0, 1 and of rows 2, 3 interleaved, then their
  // 16-bit pairs.
  template <class V>
  static void interleave(const V* r, V* out) {
    const V p = dw::unpacklo8(r[0], r[1]), q = dw::unpackhi8(r[0], r[1]);
    const V s = dw::unpacklo8(r[2], r[3]), t = dw::unpackhi8(r[2], r[3]);
    out[0] = dw::unpacklo16(p, s);
    out[1] = dw::unpackhi16(p, s);
    out[2] = dw::unpacklo16(q, t);
    out[3] = dw::unpackhi16(q, t);
  }
  // Vectors 2H, 2H + 1 of the interleave of 64-byte rows.
  template <size_t H>
  static void half(const __m512i* r, __m512i* out) {
    const __m512i p = H == 0 ? dw::unpacklo8(r[0], r[1]) : dw::unpackhi8(r[0], r[1]);
    const __m512i s = H == 0 ? dw::unpacklo8(r[2], r[3]) : dw::unpackhi8(r[2], r[3]);
    out[0] = dw::unpacklo16(p, s);
    out[1] = dw::unpackhi16(p, s);
  }
  static int32_t weight_lane(const int8_t* w) { return qu8_dw_quad_lane(w); }
  static __m512i tap(__m512i acc, __m512i x, __m512i w) {
    dpbusd(acc, x, w);
    return acc;
  }
};

}  // namespace

void qu8_igemm_8x16c4__avx512vnni(size_t mr, size_t nr, size_t kc, size_t ks, const uint8_t* const* a, const void* w,
                                  const int32_t* bias, const int32_t* rq, uint8_t* c, size_t ldc,
                                  const Qu8Output* out) {
#define EDGESDK_CALL(M) igemm_loop<M, MR, DotStep>(mr, nr, kc, ks, a, w, bias, rq, c, ldc, out)
  EDGESDK_QU8_DISPATCH_MR(mr, EDGESDK_CALL)
#undef EDGESDK_CALL
}

void qu8_igemm_8x32c4__avx512vnni(size_t mr, size_t nr, size_t kc, size_t ks, const uint8_t* const* a, const void* w,
                                  const int32_t* bias, const int32_t* rq, uint8_t* c, size_t ldc,
                                  const Qu8Output* out) {
  const int8_t* w8 = static_cast<const int8_t*>(w);
#define EDGESDK_CALL(M) igemm_x2<M>(mr, nr, kc, ks, a, w8, bias, rq, c, ldc, out)
  EDGESDK_QU8_DISPATCH_MR(mr, EDGESDK_CALL)
#undef EDGESDK_CALL
}

// Multiplier 1, weights packed by qu8_dw_pack__avx512vnni (qu8_ukernels.h).
void qu8_depthwise_16c__avx512vnni(const Qu8DepthwiseArgs* a, size_t row_begin, size_t row_end) {
  dw::run<QuadTaps>(a, row_begin, row_end);
}

size_t qu8_dw_bytes__avx512vnni(size_t c, size_t kh, size_t kw) { return dw::packed_bytes<QuadTaps>(c, kh, kw); }

void qu8_dw_pack__avx512vnni(const Qu8DwPackArgs* args, void* out) { dw::pack<QuadTaps>(args, out); }

}  // namespace edgesdk::kernels
