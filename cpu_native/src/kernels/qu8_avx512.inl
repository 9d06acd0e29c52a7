// AVX-512 (F + BW + VL) helpers of the qu8 kernels: gemmlowp requantization of 16 int32 lanes, bit
// for bit requantization.h's, and the narrowing to uint8 (the depthwise convolution that builds on
// them: qu8_avx512_dwconv.inl). Included inside an anonymous namespace by qu8_avx512skx.cc and
// qu8_avx512vnni.cc (each gets its own copy, compiled with its own flags); not a standalone header.

// A channel block's constants (ukernels.h, Qu8Requant), one lane per channel, in the form the
// fused requantization below uses: srdhm and rdbpot become one rounding shift of the 64-bit product,
//   rdbpot(srdhm(x, m), e) = floor((x*m + 2^30 + c * 2^31) / 2^(31 + e)),
//   c = 0 for e = 0, else 2^(e-1), minus 1 when srdhm's result is negative (x*m < -2^30):
// floor((floor(a / 2^31) + c) / 2^e) = floor((a + c * 2^31) / 2^(31+e)) for integer c, and rdbpot(y, e)
// = floor((y + 2^(e-1) - [y < 0]) / 2^e) (halves away from zero) for e >= 1. The sum stays below 2^63.
// The only product srdhm saturates, INT32_MIN * INT32_MIN, comes out right for e >= 1 (2^(31-e),
// what INT32_MAX gives) and as INT32_MIN for e = 0 (see requantize). Even lanes use the low halves of
// the 64-bit constants' lanes (vpmuldq reads the low 32 bits of each 64-bit lane), odd lanes the
// *_odd ones after the value is shifted down by 32. When every lane shifts right (e >= 1, the usual
// case: scales below 1/2), the odd lanes shift by e - 1 instead of 31 + e, which leaves their result
// in the high half of the 64-bit lane (floor(floor(v / 2^(e-1)) / 2^32) = floor(v / 2^(31+e))), and
// a blend replaces the cross-lane permute.
struct RqVec {
  __m512i mult, mult_odd;           // multipliers, even / odd channels in the low halves of 64-bit lanes
  __m512i left;                     // left shifts (32-bit lanes)
  __m512i round_even, round_odd;    // 2^30 + (e > 0 ? 2^(30+e) : 0)
  __m512i neg_even, neg_odd;        // e > 0 ? 2^31 : 0, taken off when x*m < -2^30
  __m512i shift_even, shift_odd;    // 31 + e (odd lanes with odd_high: e - 1)
  bool any_left;  // some lane shifts left: only then the saturating left shift runs
  bool any_min;   // some multiplier is INT32_MIN: only then the saturation fix-up runs
  bool odd_high;  // every lane has e >= 1: the odd results land in the high halves
};

static inline RqVec rq_make(__m512i mult, __m512i left, __m512i right) {
  RqVec q;
  q.mult = mult;
  q.mult_odd = _mm512_srli_epi64(mult, 32);
  q.left = left;
  const __m512i e[2] = {_mm512_and_si512(right, _mm512_set1_epi64(0xFFFFFFFF)), _mm512_srli_epi64(right, 32)};
  __m512i round[2], neg[2], shift[2];
  const __m512i two30 = _mm512_set1_epi64(int64_t{1} << 30);
  for (int h = 0; h < 2; ++h) {
    const __mmask8 rounds = _mm512_test_epi64_mask(e[h], e[h]);
    const __m512i half = _mm512_sllv_epi64(_mm512_set1_epi64(1), _mm512_add_epi64(e[h], _mm512_set1_epi64(30)));
    round[h] = _mm512_mask_add_epi64(two30, rounds, two30, half);
    neg[h] = _mm512_maskz_mov_epi64(rounds, _mm512_set1_epi64(int64_t{1} << 31));
    shift[h] = _mm512_add_epi64(e[h], _mm512_set1_epi64(31));
  }
  q.round_even = round[0];
  q.round_odd = round[1];
  q.neg_even = neg[0];
  q.neg_odd = neg[1];
  q.odd_high = _mm512_test_epi32_mask(right, right) == 0xFFFF;
  q.shift_even = shift[0];
  q.shift_odd = q.odd_high ? _mm512_sub_epi64(e[1], _mm512_set1_epi64(1)) : shift[1];
  q.any_left = _mm512_test_epi32_mask(left, left) != 0;
  q.any_min = _mm512_cmpeq_epi32_mask(mult, _mm512_set1_epi32(INT32_MIN)) != 0;
  return q;
}

// Lanes [0, 16) of a kQu8RqRows x count table from channel j, lanes outside `m` zero.
static inline RqVec rq_load(const int32_t* rq, size_t count, size_t j, __mmask16 m = 0xFFFF) {
  return rq_make(_mm512_maskz_loadu_epi32(m, rq + kQu8RqMultiplier * count + j),
                 _mm512_maskz_loadu_epi32(m, rq + kQu8RqLeft * count + j),
                 _mm512_maskz_loadu_epi32(m, rq + kQu8RqRight * count + j));
}

static inline RqVec rq_broadcast(const Qu8Requant& r) {
  return rq_make(_mm512_set1_epi32(r.multiplier), _mm512_set1_epi32(r.left_shift), _mm512_set1_epi32(r.right_shift));
}

// One half (even or odd lanes, as the low 32 bits of 64-bit lanes) of the fused rounding shift.
static inline __m512i rounding_shift(__m512i product, __m512i round, __m512i neg, __m512i shift) {
  const __mmask8 negative = _mm512_cmplt_epi64_mask(product, _mm512_set1_epi64(-(int64_t{1} << 30)));
  __m512i v = _mm512_add_epi64(product, round);
  v = _mm512_mask_sub_epi64(v, negative, v, neg);
  return _mm512_srav_epi64(v, shift);
}

// requantize(x) of requantization.h, lane by lane: the saturating left shift (a lane that loses bits
// when shifted back saturates towards its sign), then srdhm and rdbpot fused (RqVec). For e = 0 the
// fused form yields INT32_MIN for INT32_MIN * INT32_MIN, never a correct result there, and -1 turns
// it into srdhm's INT32_MAX.
static inline __m512i requantize(__m512i x, const RqVec& q) {
  if (q.any_left) {
    const __m512i shifted = _mm512_sllv_epi32(x, q.left);
    const __mmask16 lost = _mm512_cmpneq_epi32_mask(_mm512_srav_epi32(shifted, q.left), x);
    const __m512i saturated = _mm512_xor_si512(_mm512_srai_epi32(x, 31), _mm512_set1_epi32(0x7FFFFFFF));
    x = _mm512_mask_blend_epi32(lost, shifted, saturated);
  }
  const __m512i even = rounding_shift(_mm512_mul_epi32(x, q.mult), q.round_even, q.neg_even, q.shift_even);
  const __m512i odd =
      rounding_shift(_mm512_mul_epi32(_mm512_srli_epi64(x, 32), q.mult_odd), q.round_odd, q.neg_odd, q.shift_odd);
  // Low halves of the even results' lanes into the even lanes; the odd results' high halves
  // (odd_high) or low halves into the odd lanes.
  __m512i r = q.odd_high ? _mm512_mask_blend_epi32(0xAAAA, even, odd)
                         : _mm512_permutex2var_epi32(
                               even, _mm512_set_epi32(30, 14, 28, 12, 26, 10, 24, 8, 22, 6, 20, 4, 18, 2, 16, 0), odd);
  if (q.any_min) {
    const __mmask16 wrapped = _mm512_cmpeq_epi32_mask(r, _mm512_set1_epi32(INT32_MIN));
    r = _mm512_mask_sub_epi32(r, wrapped, r, _mm512_set1_epi32(1));
  }
  return r;
}

// Two cheaper forms of requantize() with the same results bit for bit, for blocks of channels whose
// constants allow them:
//   Int: no left shift, no INT32_MIN multiplier, every lane shifting right (odd_high): requantize
//        without its tests, constants in registers.
//   Fp:  no left shift, multipliers > 0, right shifts e <= 20 (what calibrated networks have).
//        The fused form's result is r = floor(u + d) with u = x * m / 2^(31+e) (exact real) and
//        d = 1/2 + 2^(-1-e) - c * 2^(-e) (e >= 1; 1/2 for e = 0), c = [x * m < -2^30]. With m > 0,
//        c' = [x < 0] differs from c only where -2^30 <= x * m < 0, where both give 0 (u lies in
//        [-2^(-1-e), 0): u + d is in [1/2 - 2^(-e), 1/2 + 2^(-1-e)) either way), so d follows the
//        sign of x. In units of 2^-11: V = 2048 (u + d) = x * s + D, s = m * 2^(-20-e) (fp32,
//        rounded to nearest: relative error <= 2^-24), D exact in fp32; one FMA with x as fp32
//        (relative error <= 2^-24), all rounded to nearest whatever MXCSR says, gives V' with
//        |V' - V| <= |x s| 2^-23 + |V'| 2^-24 < 0.375 while |u| <= 2^10. Then w = round(V'):
//        if w mod 2048 != 0, V' lies in (2048 k + 0.5, 2048 k + 2047.5), so V lies strictly inside
//        (2048 k, 2048 (k + 1)) and r = k = w >> 11. Lanes with w mod 2048 = 0 (near a step of
//        the floor, about one in 2048, or w out of int32 range) take the general form. While
//        |u| > 2^10, |r| >= 1023 and the error (at most one step) does not change the output
//        clamp(r + zp) for any zero point in [0, 255]. 7 vector operations where Int needs 12.
enum class RqMode { General, Int, Fp };

struct IntRq {
  __m512i mult, mult_odd, round_even, round_odd, shift_even, shift_odd;
};
// The Fp form's constants, one lane per channel: loaded from the rq table's kQu8RqFpScale rows,
// which qu8_fp_requant (requantization.h) computes once when the table is written.
struct FpRq {
  __m512 scale, offset_pos, offset_neg;
};

static inline __m512i requantize_int(__m512i x, const IntRq& q) {
  const __m512i limit = _mm512_set1_epi64(-(int64_t{1} << 30)), neg = _mm512_set1_epi64(int64_t{1} << 31);
  __m512i even = _mm512_mul_epi32(x, q.mult);
  __m512i odd = _mm512_mul_epi32(_mm512_srli_epi64(x, 32), q.mult_odd);
  const __mmask8 even_neg = _mm512_cmplt_epi64_mask(even, limit), odd_neg = _mm512_cmplt_epi64_mask(odd, limit);
  even = _mm512_add_epi64(even, q.round_even);
  odd = _mm512_add_epi64(odd, q.round_odd);
  even = _mm512_mask_sub_epi64(even, even_neg, even, neg);
  odd = _mm512_mask_sub_epi64(odd, odd_neg, odd, neg);
  return _mm512_mask_blend_epi32(0xAAAA, _mm512_srav_epi64(even, q.shift_even), _mm512_srav_epi64(odd, q.shift_odd));
}

// The Fp form; *retry: lanes it cannot vouch for. kAnySign = false gives every lane the
// non-negative offset: right for x >= 0, and for x < 0 (e >= 1) it computes floor(u + d_pos) with
// u < 0 and d_pos = 1/2 + 2^(-1-e) < 1, so a result <= 0, as the exact one is: when the output
// clamps at or above its zero point (fused Relu / Relu6), both become qmin.
template <bool kAnySign = true>
static inline __m512i requantize_fp(__m512i x, const FpRq& q, __mmask16* retry) {
  constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const __m512 offset = kAnySign ? _mm512_mask_blend_ps(_mm512_movepi32_mask(x), q.offset_pos, q.offset_neg)
                                 : q.offset_pos;
  const __m512 v = _mm512_fmadd_round_ps(_mm512_cvt_roundepi32_ps(x, kNearest), q.scale, offset, kNearest);
  const __m512i w = _mm512_cvt_roundps_epi32(v, kNearest);
  *retry = _mm512_testn_epi32_mask(w, _mm512_set1_epi32(2047));
  return _mm512_srai_epi32(w, 11);
}

// The output stage's constants: int16 zero point and clamp bounds (16-lane path), bytes (GEMM path).
struct OutVec {
  __m256i zp16, lo16, hi16;
  __m512i zp16x32, lo8, hi8;
};

static inline OutVec out_vec(const Qu8Output& o) {
  return OutVec{_mm256_set1_epi16(static_cast<int16_t>(o.zero_point)), _mm256_set1_epi16(o.qmin),
                _mm256_set1_epi16(o.qmax), _mm512_set1_epi16(static_cast<int16_t>(o.zero_point)),
                _mm512_set1_epi8(static_cast<char>(o.qmin)), _mm512_set1_epi8(static_cast<char>(o.qmax))};
}

// 16 requantized lanes -> 16 bytes: int16 with saturation, + zero point with saturation, uint8 with
// saturation, clamped. Exact: a lane that saturated is out of [0, 255] by far, the same as clamp(z +
// zp) says. In-lane packs and one dword permute rather than vpmovsdw / vpmovwb (two uops each, and
// slow as a masked store on Zen 4).
static inline __m128i to_u8(__m512i z, const OutVec& o) {
  const __m512i p = _mm512_adds_epi16(_mm512_packs_epi32(z, z), o.zp16x32);
  __m512i u = _mm512_packus_epi16(p, p);  // 128-bit lane L: channels 4L..4L+3 in its first dword
  u = _mm512_permutexvar_epi32(_mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0), u);
  const __m128i v = _mm512_castsi512_si128(u);
  return _mm_min_epu8(_mm_max_epu8(v, _mm512_castsi512_si128(o.lo8)), _mm512_castsi512_si128(o.hi8));
}

// Stores the first n (<= 16) bytes of v: a plain store for whole blocks.
static inline void store16(uint8_t* p, __m128i v, __mmask16 m) {
  if (m == 0xFFFF) _mm_storeu_si128(reinterpret_cast<__m128i*>(p), v);
  else _mm_mask_storeu_epi8(p, m, v);
}

// Four rows of 16 requantized lanes -> the 16 bytes of each row in 128-bit lane r: the
// in-lane packs leave channels 4L..4L+3 of rows 0..3 in lane L, one permute transposes them.
static inline __m512i pack4_u8(__m512i z0, __m512i z1, __m512i z2, __m512i z3, const OutVec& o) {
  const __m512i p01 = _mm512_adds_epi16(_mm512_packs_epi32(z0, z1), o.zp16x32);
  const __m512i p23 = _mm512_adds_epi16(_mm512_packs_epi32(z2, z3), o.zp16x32);
  __m512i u = _mm512_packus_epi16(p01, p23);
  u = _mm512_permutexvar_epi32(_mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0), u);
  return _mm512_min_epu8(_mm512_max_epu8(u, o.lo8), o.hi8);
}

static inline void store_row16(uint8_t* c, __m128i v, size_t nr) {
  if (nr >= 16) _mm_storeu_si128(reinterpret_cast<__m128i*>(c), v);
  else _mm_mask_storeu_epi8(c, static_cast<__mmask16>((1u << nr) - 1u), v);
}

// requantize() of x with a tile's constants (the Fp form's rare retries: out of the hot loop).
__attribute__((noinline)) static __m512i requantize_table(__m512i x, const int32_t* rq) {
  return requantize(x, rq_load(rq, 16, 0));
}

// The Fp form over a tile's rows, the lanes it cannot vouch for (rare) redone in integers.
template <size_t M, bool kAnySign>
__attribute__((always_inline)) static inline void requantize_rows_fp(__m512i* acc, const FpRq& q, __mmask16 cols, const int32_t* rq) {
  __m512i r[M];
  __mmask16 retry[M], any = 0;
#pragma GCC unroll 8
  for (size_t i = 0; i < M; ++i) {
    r[i] = requantize_fp<kAnySign>(acc[i], q, &retry[i]);
    any |= retry[i];
  }
  if (__builtin_expect((any & cols) != 0, 0)) {
    // Unrolled like every loop over the rows: one indexed by a run-time i would make GCC keep
    // the accumulators in memory through the whole K loop (2x slower GEMMs).
#pragma GCC unroll 8
    for (size_t i = 0; i < M; ++i)
      if ((retry[i] & cols) != 0) r[i] = requantize_table(acc[i], rq);
  }
#pragma GCC unroll 8
  for (size_t i = 0; i < M; ++i) acc[i] = r[i];
}

// Requantizes and stores an M x 16 GEMM tile (rows < mr, columns < nr); rq: kQu8RqRows x 16. Tiles
// whose columns allow it take the Fp form with the constants packed beside the integer ones
// (kQu8RqFpScale..: 5 operations a row with a fused Relu, 7 without, where requantize needs 12-14;
// small-K GEMMs, as MobileNets' 1x1 expansions, spend most of their time here).
template <size_t M>
__attribute__((always_inline)) static inline void store_tile(__m512i* acc, size_t mr, size_t nr, const int32_t* rq, uint8_t* c, size_t ldc,
                              const Qu8Output* out) {
  const __mmask16 cols = nr >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << nr) - 1u);
  const __m512 scale = _mm512_castsi512_ps(_mm512_loadu_si512(rq + kQu8RqFpScale * 16));
  if (_mm512_mask_cmp_ps_mask(cols, scale, _mm512_setzero_ps(), _CMP_GT_OQ) == cols) {
    const FpRq q{scale, _mm512_castsi512_ps(_mm512_loadu_si512(rq + kQu8RqFpOffsetPos * 16)),
                 _mm512_castsi512_ps(_mm512_loadu_si512(rq + kQu8RqFpOffsetNeg * 16))};
    if (out->qmin >= out->zero_point) requantize_rows_fp<M, false>(acc, q, cols, rq);
    else requantize_rows_fp<M, true>(acc, q, cols, rq);
  } else {
    const RqVec q = rq_load(rq, 16, 0);
#pragma GCC unroll 8
    for (size_t i = 0; i < M; ++i) acc[i] = requantize(acc[i], q);
  }
  const OutVec o = out_vec(*out);
#pragma GCC unroll 2
  for (size_t i0 = 0; i0 < M; i0 += 4) {
    const size_t last = M - 1;
    const __m512i u = pack4_u8(acc[i0], acc[i0 + 1 < M ? i0 + 1 : last], acc[i0 + 2 < M ? i0 + 2 : last],
                               acc[i0 + 3 < M ? i0 + 3 : last], o);
    if (i0 < mr) store_row16(c + i0 * ldc, _mm512_castsi512_si128(u), nr);
    if (i0 + 1 < mr) store_row16(c + (i0 + 1) * ldc, _mm512_extracti32x4_epi32(u, 1), nr);
    if (i0 + 2 < mr) store_row16(c + (i0 + 2) * ldc, _mm512_extracti32x4_epi32(u, 2), nr);
    if (i0 + 3 < mr) store_row16(c + (i0 + 3) * ldc, _mm512_extracti32x4_epi32(u, 3), nr);
  }
}

static inline int32_t load_u32(const uint8_t* p) {
  int32_t v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}

// The loop every one-panel AVX-512 qu8 GEMM runs (ukernels.h, Qu8IgemmUkernel; the levels' kernels
// differ only in their Step): M accumulators from the bias; per kernel position s (row pointers
// a[s * kMR + i]) and 4 k, one packed step of Step::kBytes weight bytes (Step::load), applied to
// each row's 4-byte activation word (step.apply(acc, x32, weights)); then the fused requantization.
// A tail of kc % 4 bytes reads the whole word (ukernels.h: rows are readable that far).
template <size_t M, size_t kMR, class Step>
__attribute__((always_inline)) static inline void igemm_loop(size_t mr, size_t nr, size_t kc, size_t ks,
                                                             const uint8_t* const* a, const void* w, const int32_t* bias,
                                                             const int32_t* rq, uint8_t* c, size_t ldc,
                                                             const Qu8Output* out) {
  __m512i acc[M];
  const __m512i b = _mm512_loadu_si512(bias);
#pragma GCC unroll 8
  for (size_t i = 0; i < M; ++i) acc[i] = b;
  const Step step;
  const uint8_t* wp = static_cast<const uint8_t*>(w);
  for (size_t s = 0; s < ks; ++s) {
    const uint8_t* r[M];
#pragma GCC unroll 8
    for (size_t i = 0; i < M; ++i) r[i] = a[s * kMR + i];
    for (size_t k = 0; k < kc; k += 4) {
      const typename Step::Weights wv = Step::load(wp);
      wp += Step::kBytes;
#pragma GCC unroll 8
      for (size_t i = 0; i < M; ++i) step.apply(acc[i], load_u32(r[i] + k), wv);
    }
  }
  store_tile<M>(acc, mr, nr, rq, c, ldc, out);
}

static inline __mmask16 first16(size_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1u);
}

// The contiguous range [begin, end) of kernel taps whose input position lies in [0, extent).
static inline void tap_range(size_t o, size_t stride, size_t kernel, size_t dil, size_t pad, size_t extent,
                             size_t* begin, size_t* end) {
  size_t k = 0;
  const ptrdiff_t base = static_cast<ptrdiff_t>(o * stride) - static_cast<ptrdiff_t>(pad);
  while (k < kernel && base + static_cast<ptrdiff_t>(k * dil) < 0) ++k;
  *begin = k;
  while (k < kernel && base + static_cast<ptrdiff_t>(k * dil) < static_cast<ptrdiff_t>(extent)) ++k;
  *end = k;
}

// 16 bytes (those in m) widened to int32 lanes.
static inline __m512i load16_u8(const uint8_t* p, __mmask16 m) { return _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, p)); }

// Calls body.template operator()<M>() with M = mr (1..8): each row count gets a kernel that
// computes only its rows (GEMV, and the last tile of a pixel range).
#define EDGESDK_QU8_DISPATCH_MR(mr, CALL) \
  switch (mr) {                           \
    case 1: CALL(1); break;               \
    case 2: CALL(2); break;               \
    case 3: CALL(3); break;               \
    case 4: CALL(4); break;               \
    case 5: CALL(5); break;               \
    case 6: CALL(6); break;               \
    case 7: CALL(7); break;               \
    default: CALL(8); break;              \
  }
