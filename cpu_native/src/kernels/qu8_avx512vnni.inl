// The AVX512_VNNI (vpdpbusd) GEMM steps of the qu8 kernels: the one-panel Step for qu8_avx512.inl's
// igemm_loop and the two-panel loop. Included inside an anonymous namespace, after qu8_avx512.inl,
// by qu8_avx512vnni.cc (the avx512vnni level's kernels) and qu8_avx512amx.cc (whose AMX kernels run
// these for small K, where a tile's fixed costs outweigh it); not a standalone header.

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
// each row's broadcast feeding both (8 rows x 32 columns, 16 of the 32 zmm for accumulators). Row
// pointers a[s * kMR + i] (kMR: the indirection's rows per kernel position).
template <size_t M, size_t kMR>
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
    for (size_t i = 0; i < M; ++i) r[i] = a[s * kMR + i];
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
