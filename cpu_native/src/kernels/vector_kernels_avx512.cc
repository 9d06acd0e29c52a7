// AVX-512 instantiation of the generic vector kernels, plus the AVX-512 clustered-weight kernels
// (codebook lookup with _mm512_permutexvar_ps / permutex2var_ps) and the NNM gather. Compiled
// with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c; selected at run time only.
// GCC 12 flags its own _mm512_undefined_* helpers as (maybe-)uninitialized when inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include "kernels/ukernels.h"

namespace edgesdk::kernels {
namespace {

#include "kernels/vec_f32_avx512f.inl"

// The shared AVX-512 F operations plus what the generic kernels need (BW/DQ/VL are here).
struct V : V512F {
  static T mul(T a, T b) { return _mm512_mul_ps(a, b); }
  static T div(T a, T b) { return _mm512_div_ps(a, b); }
  static T nan_mask(T a) { return _mm512_castsi512_ps(_mm512_movm_epi32(_mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q))); }
  static T bit_or(T a, T b) { return _mm512_or_ps(a, b); }
  static T abs(T a) { return _mm512_abs_ps(a); }
  static T select_lt(T a, T b, T x, T y) { return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_LT_OQ), y, x); }
  static T round(T a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static T exp2_int(T n) {
    const __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_max_ps(n, _mm512_set1_ps(-127.0f))),
                                       _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
  }
  static float hsum(T v) { return _mm512_reduce_add_ps(v); }
  static float hmax(T v) { return _mm512_reduce_max_ps(v); }
  static T sqrt(T a) { return _mm512_sqrt_ps(a); }
  static T mask_of(__mmask16 m) { return _mm512_castsi512_ps(_mm512_movm_epi32(m)); }
  static T lt(T a, T b) { return mask_of(_mm512_cmp_ps_mask(a, b, _CMP_LT_OQ)); }
  static T le(T a, T b) { return mask_of(_mm512_cmp_ps_mask(a, b, _CMP_LE_OQ)); }
  static T eq(T a, T b) { return mask_of(_mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ)); }
  static T blend(T m, T x, T y) { return _mm512_mask_blend_ps(_mm512_movepi32_mask(_mm512_castps_si512(m)), y, x); }
  static T bit_and(T a, T b) { return _mm512_and_ps(a, b); }
  static T bit_andnot(T a, T b) { return _mm512_andnot_ps(a, b); }
  static bool any_set(T m) { return _mm512_movepi32_mask(_mm512_castps_si512(m)) != 0; }
  static T exponent(T a) { return _mm512_getexp_ps(a); }
  static T mantissa(T a) { return _mm512_getmant_ps(a, _MM_MANT_NORM_1_2, _MM_MANT_SIGN_zero); }
  static T gather(const float* base, const int32_t* idx) {
    return _mm512_i32gather_ps(_mm512_loadu_si512(idx), base, 4);
  }
  static T gather_tail(const float* base, const int32_t* idx, size_t n) {
    const __mmask16 m = first_lanes(n);  // the indices past n are not read either
    return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, _mm512_maskz_loadu_epi32(m, idx), base, 4);
  }
  static void dup2(T v, T* lo, T* hi) {
    *lo = _mm512_permutexvar_ps(_mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0), v);
    *hi = _mm512_permutexvar_ps(_mm512_set_epi32(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8), v);
  }
};

#include "kernels/vector_kernels.inl"
#include "kernels/vector_ops.inl"
#include "kernels/chw_simd.inl"

// ---- clustered ------------------------------------------------------------------------------
// Lane words, L = 16. <= 4 bits: one 16-entry permute (table repeated for narrower codes);
// 5 bits: one two-register 32-entry permute; 6..8 bits: gather from the L1-resident table.
constexpr size_t L = 16;

template <unsigned B>
struct Lookup {
  __m512 lo, hi;
  const float* table;
  explicit Lookup(const float* t) : table(t) {
    lo = _mm512_loadu_ps(t);
    hi = B == 5 ? _mm512_loadu_ps(t + 16) : lo;
  }
  __m512 operator()(__m512i s) const {
    if (B <= 4) return _mm512_permutexvar_ps(s, lo);
    if (B == 5) return _mm512_permutex2var_ps(lo, s, hi);
    return _mm512_i32gather_ps(_mm512_and_si512(s, _mm512_set1_epi32((1 << B) - 1)), table, 4);
  }
};

template <unsigned B>
void clustered_gemv_bits(const ClusteredGemvArgs* a, size_t row_begin, size_t row_end) {
  constexpr size_t F = 32 / B;
  const size_t blocks = a->words_per_row / L;
  size_t r = row_begin;
  for (; r + 2 <= row_end; r += 2) {
    const uint32_t* w0 = a->words + r * a->words_per_row;
    const uint32_t* w1 = w0 + a->words_per_row;
    const Lookup<B> look0(a->tables + (a->per_row_table ? r * a->table_size : 0));
    const Lookup<B> look1(a->tables + (a->per_row_table ? (r + 1) * a->table_size : 0));
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    const float* x = a->x;
    for (size_t blk = 0; blk < blocks; ++blk) {
      __m512i s0 = _mm512_loadu_si512(w0 + blk * L);
      __m512i s1 = _mm512_loadu_si512(w1 + blk * L);
#pragma GCC unroll 32
      for (size_t f = 0; f < F; ++f) {
        const __m512 xv = _mm512_loadu_ps(x + f * L);
        acc0 = _mm512_fmadd_ps(look0(s0), xv, acc0);
        acc1 = _mm512_fmadd_ps(look1(s1), xv, acc1);
        s0 = _mm512_srli_epi32(s0, B);
        s1 = _mm512_srli_epi32(s1, B);
      }
      x += F * L;
    }
    a->y[r] = V::hsum(acc0) + (a->bias != nullptr ? a->bias[r] : 0.0f);
    a->y[r + 1] = V::hsum(acc1) + (a->bias != nullptr ? a->bias[r + 1] : 0.0f);
  }
  for (; r < row_end; ++r) {
    const uint32_t* w0 = a->words + r * a->words_per_row;
    const Lookup<B> look0(a->tables + (a->per_row_table ? r * a->table_size : 0));
    __m512 acc0 = _mm512_setzero_ps();
    const float* x = a->x;
    for (size_t blk = 0; blk < blocks; ++blk) {
      __m512i s0 = _mm512_loadu_si512(w0 + blk * L);
#pragma GCC unroll 32
      for (size_t f = 0; f < F; ++f) {
        acc0 = _mm512_fmadd_ps(look0(s0), _mm512_loadu_ps(x + f * L), acc0);
        s0 = _mm512_srli_epi32(s0, B);
      }
      x += F * L;
    }
    a->y[r] = V::hsum(acc0) + (a->bias != nullptr ? a->bias[r] : 0.0f);
  }
  activation_impl(a->y + row_begin, row_end - row_begin, &a->act);
}

template <unsigned B>
void clustered_decode_bits(const uint32_t* words, size_t words_per_row, const float* table, float* out) {
  constexpr size_t F = 32 / B;
  const Lookup<B> look(table);
  for (size_t blk = 0; blk < words_per_row / L; ++blk) {
    __m512i s = _mm512_loadu_si512(words + blk * L);
#pragma GCC unroll 32
    for (size_t f = 0; f < F; ++f) {
      _mm512_storeu_ps(out + (blk * F + f) * L, look(s));
      s = _mm512_srli_epi32(s, B);
    }
  }
}

void nnm_gather_impl(const NnmGatherArgs* a, size_t p_begin, size_t p_end) {
  const ExpConsts k;
  const size_t kc = a->kc;
  for (size_t p = p_begin; p < p_end; ++p) {
    const float* row = a->cent + p * a->cent_stride;
    float* out = a->out + p * a->out_stride;
    for (size_t k0 = 0; k0 < a->k; k0 += L) {
      const size_t n = a->k - k0 < L ? a->k - k0 : L;
      const __mmask16 live = first_lanes(n);
      __m512 acc = a->bias != nullptr ? _mm512_maskz_loadu_ps(live, a->bias + k0) : _mm512_setzero_ps();
      for (size_t g = 0; g < a->groups; ++g) {
        const float* base = row + g * kc;
        const __m512i idx = _mm512_maskz_loadu_epi32(live, a->assign + g * a->k + k0);
        __m512 v;
        if (kc <= 16) {
          v = _mm512_permutexvar_ps(idx, _mm512_maskz_loadu_ps(first_lanes(kc), base));
        } else if (kc <= 32) {
          v = _mm512_permutex2var_ps(_mm512_loadu_ps(base), idx, _mm512_maskz_loadu_ps(first_lanes(kc - 16), base + 16));
        } else {
          v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), live, idx, base, 4);
        }
        acc = _mm512_add_ps(acc, v);
      }
      _mm512_mask_storeu_ps(out + k0, live, activate(acc, a->act, k));
    }
  }
}

}  // namespace

void f32_activation_16x__avx512skx(float* x, size_t n, const Activation* act) { activation_impl(x, n, act); }
void f32_depthwise_16c__avx512skx(const DepthwiseArgs* a, size_t b, size_t e) { depthwise_impl(a, b, e); }
void f32_maxpool_16c__avx512skx(const PoolArgs* a, size_t b, size_t e) { pool_impl(a, b, e, true); }
void f32_avgpool_16c__avx512skx(const PoolArgs* a, size_t b, size_t e) { pool_impl(a, b, e, false); }
void f32_global_avgpool_64c__avx512skx(const float* x, size_t p, size_t c, size_t s, float* y, const Activation* act) {
  global_avgpool_impl(x, p, c, s, y, act);
}
void f32_binary_16x__avx512skx(const BinaryArgs* a, size_t b, size_t e) { binary_impl(a, b, e); }
void f32_softmax_16x__avx512skx(const float* x, float* y, size_t n) { softmax_impl(x, y, n); }
void f32_nnm_gather_16c__avx512skx(const NnmGatherArgs* a, size_t b, size_t e) { nnm_gather_impl(a, b, e); }
void f32_row_norm__avx512skx(const RowNormArgs* a, size_t b, size_t e) { row_norm_impl(a, b, e); }
void f32_log_softmax__avx512skx(const float* x, float* y, size_t n) { log_softmax_impl(x, y, n); }
void f32_softmax_axis__avx512skx(const SoftmaxAxisArgs* a, size_t b, size_t e) { softmax_axis_impl(a, b, e); }
void f32_reduce__avx512skx(const ReduceArgs* a, size_t b, size_t e) { reduce_impl(a, b, e); }
void f32_argreduce__avx512skx(const ArgReduceArgs* a, size_t b, size_t e) { argreduce_impl(a, b, e); }
void f32_col2im__avx512skx(const Col2ImArgs* a, size_t b, size_t e) { col2im_impl(a, b, e); }
void f32_resize_nearest__avx512skx(const ResizeArgs* a, size_t b, size_t e, float* s) {
  resize_nearest_impl(a, b, e, s);
}
void f32_resize_linear__avx512skx(const ResizeArgs* a, size_t b, size_t e, float* s) {
  resize_linear_impl(a, b, e, s);
}

void f32_clustered_gemv__avx512skx(const ClusteredGemvArgs* a, size_t b, size_t e) {
  switch (a->bits) {
    case 1: clustered_gemv_bits<1>(a, b, e); break;
    case 2: clustered_gemv_bits<2>(a, b, e); break;
    case 3: clustered_gemv_bits<3>(a, b, e); break;
    case 4: clustered_gemv_bits<4>(a, b, e); break;
    case 5: clustered_gemv_bits<5>(a, b, e); break;
    case 6: clustered_gemv_bits<6>(a, b, e); break;
    case 7: clustered_gemv_bits<7>(a, b, e); break;
    default: clustered_gemv_bits<8>(a, b, e); break;
  }
}

// (This ISA's table has clustered_nibbles = false, so `nibbles` is never set here.)
void f32_clustered_decode__avx512skx(const uint32_t* w, size_t wpr, const float* t, unsigned bits, bool /*nibbles*/,
                                     float* out) {
  switch (bits) {
    case 1: clustered_decode_bits<1>(w, wpr, t, out); break;
    case 2: clustered_decode_bits<2>(w, wpr, t, out); break;
    case 3: clustered_decode_bits<3>(w, wpr, t, out); break;
    case 4: clustered_decode_bits<4>(w, wpr, t, out); break;
    case 5: clustered_decode_bits<5>(w, wpr, t, out); break;
    case 6: clustered_decode_bits<6>(w, wpr, t, out); break;
    case 7: clustered_decode_bits<7>(w, wpr, t, out); break;
    default: clustered_decode_bits<8>(w, wpr, t, out); break;
  }
}


// CHW kernels (chw_simd.inl). Rows of at most 8 outputs (the 7x7 planes of a network's last stage)
// would fill under half of a 16-lane vector: the 8-lane AVX2 kernel wastes less there (960 planes
// of 7x7, 3x3 s1: 46 us against 60 us; every AVX-512 CPU has AVX2), and its sums are the same bits.
void f32_dwconv2d_chw_3x3s1__avx512skx(const DwChwArgs* a, size_t p, size_t b, size_t e) {
  if (a->ow <= 8) return f32_dwconv2d_chw_3x3s1__avx2(a, p, b, e);  // see above
  dwconv_chw_impl<3, 1>(a, p, b, e);
}
void f32_dwconv2d_chw_3x3s2__avx512skx(const DwChwArgs* a, size_t p, size_t b, size_t e) {
  if (a->ow <= 8) return f32_dwconv2d_chw_3x3s2__avx2(a, p, b, e);  // see above
  dwconv_chw_impl<3, 2>(a, p, b, e);
}
void f32_dwconv2d_chw_5x5s1__avx512skx(const DwChwArgs* a, size_t p, size_t b, size_t e) {
  if (a->ow <= 8) return f32_dwconv2d_chw_5x5s1__avx2(a, p, b, e);  // see above
  dwconv_chw_impl<5, 1>(a, p, b, e);
}
void f32_dwconv2d_chw_5x5s2__avx512skx(const DwChwArgs* a, size_t p, size_t b, size_t e) {
  if (a->ow <= 8) return f32_dwconv2d_chw_5x5s2__avx2(a, p, b, e);  // see above
  dwconv_chw_impl<5, 2>(a, p, b, e);
}
void f32_gavgpool_chw__avx512skx(const float* x, size_t planes, size_t hw, float* y, const Activation* act) {
  gavgpool_chw_impl(x, planes, hw, y, act);
}
void f32_transpose_16x16__avx512skx(const void* s, size_t ss, void* d, size_t ds, size_t rows, size_t cols) {
  transpose_f32_impl(s, ss, d, ds, rows, cols);
}

}  // namespace edgesdk::kernels
