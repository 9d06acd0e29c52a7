// AVX2+FMA instantiation of the generic vector kernels, plus the AVX2 clustered-weight kernels
// (codebook lookup with _mm256_permutevar8x32_ps) and the NNM gather. Compiled with -mavx2 -mfma
// -mf16c; selected at run time only.
#include <immintrin.h>

#include "kernels/ukernels.h"

namespace edgesdk::kernels {
namespace {

#include "kernels/vec_f32_avx2.inl"

#include "kernels/vector_kernels.inl"
#include "kernels/vector_ops.inl"
#include "kernels/chw_simd.inl"

// ---- clustered ------------------------------------------------------------------------------
// Lane words, L = 8: one ymm load = 8 words; field f of every word is shifted down in step.
// Lookup by width: <= 3 bits one permute of an 8-entry table (the table repeats for narrower
// codes, so the neighbouring field's bits above are harmless); 4 bits two permutes and a blend
// on bit 3 (moved to the sign bit); 5..8 bits a gather from the L1-resident table.
constexpr size_t L = 8;

template <unsigned B>
struct Lookup {
  __m256 lo, hi;
  const float* table;
  explicit Lookup(const float* t) : table(t) {
    lo = _mm256_loadu_ps(t);
    hi = B == 4 ? _mm256_loadu_ps(t + 8) : lo;
  }
  __m256 operator()(__m256i s) const {
    if (B <= 3) return _mm256_permutevar8x32_ps(lo, s);
    if (B == 4) {
      const __m256 a = _mm256_permutevar8x32_ps(lo, s), b = _mm256_permutevar8x32_ps(hi, s);
      return _mm256_blendv_ps(a, b, _mm256_castsi256_ps(_mm256_slli_epi32(s, 28)));
    }
    const __m256i idx = _mm256_and_si256(s, _mm256_set1_epi32((1 << B) - 1));
    return _mm256_i32gather_ps(table, idx, 4);
  }
};

template <unsigned B>
void clustered_gemv_bits(const ClusteredGemvArgs* a, size_t row_begin, size_t row_end) {
  constexpr size_t F = 32 / B;
  const size_t blocks = a->words_per_row / L;
  size_t r = row_begin;
  // Two rows per pass: two x-sharing accumulator chains, tables for both rows in registers.
  for (; r + 2 <= row_end; r += 2) {
    const uint32_t* w0 = a->words + r * a->words_per_row;
    const uint32_t* w1 = w0 + a->words_per_row;
    const Lookup<B> look0(a->tables + (a->per_row_table ? r * a->table_size : 0));
    const Lookup<B> look1(a->tables + (a->per_row_table ? (r + 1) * a->table_size : 0));
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    const float* x = a->x;
    for (size_t blk = 0; blk < blocks; ++blk) {
      __m256i s0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w0 + blk * L));
      __m256i s1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w1 + blk * L));
#pragma GCC unroll 32
      for (size_t f = 0; f < F; ++f) {
        const __m256 xv = _mm256_loadu_ps(x + f * L);
        acc0 = _mm256_fmadd_ps(look0(s0), xv, acc0);
        acc1 = _mm256_fmadd_ps(look1(s1), xv, acc1);
        s0 = _mm256_srli_epi32(s0, B);
        s1 = _mm256_srli_epi32(s1, B);
      }
      x += F * L;
    }
    a->y[r] = V::hsum(acc0) + (a->bias != nullptr ? a->bias[r] : 0.0f);
    a->y[r + 1] = V::hsum(acc1) + (a->bias != nullptr ? a->bias[r + 1] : 0.0f);
  }
  for (; r < row_end; ++r) {
    const uint32_t* w0 = a->words + r * a->words_per_row;
    const Lookup<B> look0(a->tables + (a->per_row_table ? r * a->table_size : 0));
    __m256 acc0 = _mm256_setzero_ps();
    const float* x = a->x;
    for (size_t blk = 0; blk < blocks; ++blk) {
      __m256i s0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w0 + blk * L));
#pragma GCC unroll 32
      for (size_t f = 0; f < F; ++f) {
        acc0 = _mm256_fmadd_ps(look0(s0), _mm256_loadu_ps(x + f * L), acc0);
        s0 = _mm256_srli_epi32(s0, B);
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
    __m256i s = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(words + blk * L));
#pragma GCC unroll 32
    for (size_t f = 0; f < F; ++f) {
      _mm256_storeu_ps(out + (blk * F + f) * L, look(s));
      s = _mm256_srli_epi32(s, B);
    }
  }
}

// ---- 4-bit codes: vpshufb on byte planes (nibble layout, ukernels.h) ---------------------------
struct NibbleTables {
  __m256i plane[4];
  explicit NibbleTables(const float* table) {
    const __m128i* bytes = reinterpret_cast<const __m128i*>(table);
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) plane[j] = _mm256_broadcastsi128_si256(_mm_loadu_si128(bytes + j));
  }
  // 32 codes (one per byte of q) -> 32 floats: f[j] holds the columns 8j .. 8j+7 of the group.
  void lookup(__m256i q, __m256 f[4]) const {
    const __m256i b0 = _mm256_shuffle_epi8(plane[0], q), b1 = _mm256_shuffle_epi8(plane[1], q);
    const __m256i b2 = _mm256_shuffle_epi8(plane[2], q), b3 = _mm256_shuffle_epi8(plane[3], q);
    const __m256i lo01 = _mm256_unpacklo_epi8(b0, b1), hi01 = _mm256_unpackhi_epi8(b0, b1);
    const __m256i lo23 = _mm256_unpacklo_epi8(b2, b3), hi23 = _mm256_unpackhi_epi8(b2, b3);
    f[0] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(lo01, lo23));
    f[1] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(lo01, lo23));
    f[2] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(hi01, hi23));
    f[3] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(hi01, hi23));
  }
};

static inline void split_nibbles(const uint32_t* words, __m256i* lo, __m256i* hi) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(words));
  const __m256i mask = _mm256_set1_epi8(0x0F);
  *lo = _mm256_and_si256(v, mask);
  *hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
}

void clustered_gemv_nibbles(const ClusteredGemvArgs* a, size_t row_begin, size_t row_end) {
  const size_t blocks = a->words_per_row / 8;
  for (size_t r = row_begin; r < row_end; ++r) {
    const uint32_t* words = a->words + r * a->words_per_row;
    const NibbleTables tables(a->tables + (a->per_row_table ? r * a->table_size : 0));
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    const float* x = a->x;
    for (size_t blk = 0; blk < blocks; ++blk, x += 64) {
      __m256i q[2];
      split_nibbles(words + blk * 8, &q[0], &q[1]);
#pragma GCC unroll 2
      for (int g = 0; g < 2; ++g) {
        __m256 f[4];
        tables.lookup(q[g], f);
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) acc[j] = _mm256_fmadd_ps(f[j], _mm256_loadu_ps(x + 32 * g + 8 * j), acc[j]);
      }
    }
    const __m256 sum = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    a->y[r] = V::hsum(sum) + (a->bias != nullptr ? a->bias[r] : 0.0f);
  }
  activation_impl(a->y + row_begin, row_end - row_begin, &a->act);
}

void clustered_decode_nibbles(const uint32_t* words, size_t words_per_row, const float* table, float* out) {
  const NibbleTables tables(table);
  for (size_t blk = 0; blk < words_per_row / 8; ++blk, out += 64) {
    __m256i q[2];
    split_nibbles(words + blk * 8, &q[0], &q[1]);
#pragma GCC unroll 2
    for (int g = 0; g < 2; ++g) {
      __m256 f[4];
      tables.lookup(q[g], f);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) _mm256_storeu_ps(out + 32 * g + 8 * j, f[j]);
    }
  }
}

// ---- NNM gather -----------------------------------------------------------------------------
// A centroid row segment of <= 16 values sits in two registers and is permuted by the
// assignment; longer ones are gathered.
void nnm_gather_impl(const NnmGatherArgs* a, size_t p_begin, size_t p_end) {
  const ExpConsts k;
  const size_t kc = a->kc;
  for (size_t p = p_begin; p < p_end; ++p) {
    const float* row = a->cent + p * a->cent_stride;
    float* out = a->out + p * a->out_stride;
    for (size_t k0 = 0; k0 < a->k; k0 += L) {
      const size_t n = a->k - k0 < L ? a->k - k0 : L;
      const __m256i live = first_lanes(n);
      __m256 acc = a->bias != nullptr ? V::load_tail(a->bias + k0, n, 0.0f) : _mm256_setzero_ps();
      for (size_t g = 0; g < a->groups; ++g) {
        const float* base = row + g * kc;
        const __m256i idx = _mm256_maskload_epi32(reinterpret_cast<const int*>(a->assign + g * a->k + k0), live);
        __m256 v;
        if (kc <= 8) {
          v = _mm256_permutevar8x32_ps(_mm256_maskload_ps(base, first_lanes(kc)), idx);
        } else if (kc <= 16) {
          const __m256 lo = _mm256_loadu_ps(base);
          const __m256 hi = _mm256_maskload_ps(base + 8, first_lanes(kc - 8));
          v = _mm256_blendv_ps(_mm256_permutevar8x32_ps(lo, idx), _mm256_permutevar8x32_ps(hi, idx),
                               _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
        } else {
          v = _mm256_mask_i32gather_ps(_mm256_setzero_ps(), base, idx, _mm256_castsi256_ps(live), 4);
        }
        acc = _mm256_add_ps(acc, v);
      }
      V::store_tail(out + k0, activate(acc, a->act, k), n);
    }
  }
}

}  // namespace

void f32_activation_8x__avx2(float* x, size_t n, const Activation* act) { activation_impl(x, n, act); }
void f32_depthwise_8c__avx2(const DepthwiseArgs* a, size_t b, size_t e) { depthwise_impl(a, b, e); }
void f32_maxpool_8c__avx2(const PoolArgs* a, size_t b, size_t e) { pool_impl(a, b, e, true); }
void f32_avgpool_8c__avx2(const PoolArgs* a, size_t b, size_t e) { pool_impl(a, b, e, false); }
void f32_global_avgpool_32c__avx2(const float* x, size_t p, size_t c, size_t s, float* y, const Activation* act) {
  global_avgpool_impl(x, p, c, s, y, act);
}
void f32_binary_8x__avx2(const BinaryArgs* a, size_t b, size_t e) { binary_impl(a, b, e); }
void f32_softmax_8x__avx2(const float* x, float* y, size_t n) { softmax_impl(x, y, n); }
void f32_nnm_gather_8c__avx2(const NnmGatherArgs* a, size_t b, size_t e) { nnm_gather_impl(a, b, e); }
void f32_row_norm__avx2(const RowNormArgs* a, size_t b, size_t e) { row_norm_impl(a, b, e); }
void f32_log_softmax__avx2(const float* x, float* y, size_t n) { log_softmax_impl(x, y, n); }
void f32_softmax_axis__avx2(const SoftmaxAxisArgs* a, size_t b, size_t e) { softmax_axis_impl(a, b, e); }
void f32_reduce__avx2(const ReduceArgs* a, size_t b, size_t e) { reduce_impl(a, b, e); }
void f32_argreduce__avx2(const ArgReduceArgs* a, size_t b, size_t e) { argreduce_impl(a, b, e); }
void f32_col2im__avx2(const Col2ImArgs* a, size_t b, size_t e) { col2im_impl(a, b, e); }
void f32_resize_nearest__avx2(const ResizeArgs* a, size_t b, size_t e, float* s) { resize_nearest_impl(a, b, e, s); }
void f32_resize_linear__avx2(const ResizeArgs* a, size_t b, size_t e, float* s) { resize_linear_impl(a, b, e, s); }

void f32_clustered_gemv__avx2(const ClusteredGemvArgs* a, size_t b, size_t e) {
  if (a->nibbles) {
    clustered_gemv_nibbles(a, b, e);
    return;
  }
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

void f32_clustered_decode__avx2(const uint32_t* w, size_t wpr, const float* t, unsigned bits, bool nibbles,
                                float* out) {
  if (nibbles) {
    clustered_decode_nibbles(w, wpr, t, out);
    return;
  }
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


// CHW kernels (chw_simd.inl).
void f32_dwconv2d_chw_3x3s1__avx2(const DwChwArgs* a, size_t p, size_t b, size_t e) { dwconv_chw_impl<3, 1>(a, p, b, e); }
void f32_dwconv2d_chw_3x3s2__avx2(const DwChwArgs* a, size_t p, size_t b, size_t e) { dwconv_chw_impl<3, 2>(a, p, b, e); }
void f32_dwconv2d_chw_5x5s1__avx2(const DwChwArgs* a, size_t p, size_t b, size_t e) { dwconv_chw_impl<5, 1>(a, p, b, e); }
void f32_dwconv2d_chw_5x5s2__avx2(const DwChwArgs* a, size_t p, size_t b, size_t e) { dwconv_chw_impl<5, 2>(a, p, b, e); }
void f32_gavgpool_chw__avx2(const float* x, size_t planes, size_t hw, float* y, const Activation* act) {
  gavgpool_chw_impl(x, planes, hw, y, act);
}
void f32_transpose_8x8__avx2(const void* s, size_t ss, void* d, size_t ds, size_t rows, size_t cols) {
  transpose_f32_impl(s, ss, d, ds, rows, cols);
}

}  // namespace edgesdk::kernels
