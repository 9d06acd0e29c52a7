// AVX-VNNI qu8 kernels (avxvnni level): the AVX2 GEMM and depthwise convolution of qu8_avx2.inl with
// AVX-VNNI's 256-bit vpdpbusd, for AVX2 CPUs that have it and no AVX-512 (Alder Lake and later
// client cores, the Alder Lake-N / Twin Lake boards such as Intel's N100, Arrow Lake). vpdpbusd
// multiplies 4 uint8 activations by 4 int8 weights and adds the 4 products to an int32 lane, exact
// for any weights, so this level needs neither the widening GEMM nor the narrow-weight one.
// Compiled with -mavx2 -mfma -mf16c -mavxvnni; selected at run time only. Everything else at this
// level runs the avx2 kernels (dispatch.cc).

#include "kernels/qu8_avx2.inl"

namespace edgesdk::kernels {
namespace {

// Packed Qu8Layout::C4 as the narrow GEMM's (two 32-byte weight loads per 4 k: columns 0-7 and
// 8-15); per row the broadcast activation word and one vpdpbusd per weight vector: 3 instructions
// per row and 4 k, where the narrow step takes 7. 6 x 16: 12 accumulators, 2 weight vectors and the
// broadcast, 15 of the 16 ymm registers.
struct VnniStep {
  struct Weights {
    __m256i lo, hi;
  };
  static constexpr size_t kBytes = 64;
  static Weights load(const uint8_t* w) {
    return {_mm256_load_si256(reinterpret_cast<const __m256i*>(w)),
            _mm256_load_si256(reinterpret_cast<const __m256i*>(w + 32))};
  }
  void apply(__m256i* acc, int32_t x32, const Weights& w) const {
    const __m256i x = _mm256_set1_epi32(x32);
    acc[0] = _mm256_dpbusd_avx_epi32(acc[0], x, w.lo);
    acc[1] = _mm256_dpbusd_avx_epi32(acc[1], x, w.hi);
  }
};

// The depthwise convolution's tap on 4 kernel rows a lane (qu8_avx2.inl's QuadTaps).
struct VnniDot {
  static __m256i dot(__m256i acc, __m256i x, __m256i w) { return _mm256_dpbusd_avx_epi32(acc, x, w); }
};
using VnniTaps = dw::QuadTaps<VnniDot>;

}  // namespace

void qu8_igemm_6x16c4__avxvnni(size_t mr, size_t nr, size_t kc, size_t ks, const uint8_t* const* a, const void* w,
                               const int32_t* bias, const int32_t* rq, uint8_t* c, size_t ldc, const Qu8Output* out) {
  constexpr size_t kMR = kAvxVnniQu8MR;
  static_assert(kMR == 6, "the cases below");
  switch (mr) {
    case 1: igemm<kMR, 1, VnniStep>(mr, nr, kc, ks, a, w, bias, rq, c, ldc, out); break;
    case 2: igemm<kMR, 2, VnniStep>(mr, nr, kc, ks, a, w, bias, rq, c, ldc, out); break;
    case 3: igemm<kMR, 3, VnniStep>(mr, nr, kc, ks, a, w, bias, rq, c, ldc, out); break;
    case 4: igemm<kMR, 4, VnniStep>(mr, nr, kc, ks, a, w, bias, rq, c, ldc, out); break;
    case 5: igemm<kMR, 5, VnniStep>(mr, nr, kc, ks, a, w, bias, rq, c, ldc, out); break;
    default: igemm<kMR, 6, VnniStep>(mr, nr, kc, ks, a, w, bias, rq, c, ldc, out); break;
  }
}

// Multiplier 1, weights packed by qu8_dw_pack__avxvnni (qu8_ukernels.h: the AVX2 blocks with 4
// kernel rows a lane as bytes).
void qu8_depthwise_8c__avxvnni(const Qu8DepthwiseArgs* a, size_t row_begin, size_t row_end) {
  dw::run<VnniTaps>(a, row_begin, row_end);
}

size_t qu8_dw_bytes__avxvnni(size_t c, size_t kh, size_t kw) { return dw::packed_bytes<VnniTaps>(c, kh, kw); }

void qu8_dw_pack__avxvnni(const Qu8DwPackArgs* args, void* out) { dw::pack<VnniTaps>(args, out); }

}  // namespace edgesdk::kernels
