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
#include "kernels/qu8_avx512vnni.inl"

constexpr size_t MR = kAvx512VnniQu8MR;  // 8
static_assert(kAvx512VnniQu8NR == 16, "one zmm of int32 per row");

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
#define EDGESDK_CALL(M) igemm_x2<M, MR>(mr, nr, kc, ks, a, w8, bias, rq, c, ldc, out)
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
