// The fp32 vector type V of the AVX2 + FMA kernels (8 lanes): the operations the generic kernels
// (vector_kernels.inl, winograd_simd.inl) are written in, and the lane-mask table its tails use.
// Included inside an anonymous namespace by vector_kernels_avx2.cc and winograd_avx2.cc, both
// compiled with -mavx2 -mfma -mf16c. Not a standalone header.
alignas(32) const int32_t kMaskTable[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
static inline __m256i first_lanes(size_t n) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kMaskTable + 8 - n));
}

struct V {
  using T = __m256;
  static constexpr size_t W = 8;
  static T load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, T v) { _mm256_storeu_ps(p, v); }
  static T load_tail(const float* p, size_t n, float fill) {
    const __m256i m = first_lanes(n);
    return _mm256_blendv_ps(_mm256_set1_ps(fill), _mm256_maskload_ps(p, m), _mm256_castsi256_ps(m));
  }
  static void store_tail(float* p, T v, size_t n) { _mm256_maskstore_ps(p, first_lanes(n), v); }
  static T set1(float v) { return _mm256_set1_ps(v); }
  static T add(T a, T b) { return _mm256_add_ps(a, b); }
  static T sub(T a, T b) { return _mm256_sub_ps(a, b); }
  static T mul(T a, T b) { return _mm256_mul_ps(a, b); }
  static T div(T a, T b) { return _mm256_div_ps(a, b); }
  static T fma(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  static T max(T a, T b) { return _mm256_max_ps(a, b); }
  static T min(T a, T b) { return _mm256_min_ps(a, b); }
  static T nan_mask(T a) { return _mm256_cmp_ps(a, a, _CMP_UNORD_Q); }
  static T bit_or(T a, T b) { return _mm256_or_ps(a, b); }
  static bool any_nan(T a) { return _mm256_movemask_ps(nan_mask(a)) != 0; }
  static T abs(T a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
  static T select_lt(T a, T b, T x, T y) { return _mm256_blendv_ps(y, x, _mm256_cmp_ps(a, b, _CMP_LT_OQ)); }
  static T round(T a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static T exp2_int(T n) {
    const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(_mm256_max_ps(n, _mm256_set1_ps(-127.0f))),
                                       _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
  }
  static float hsum(T v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
  }
  static float hmax(T v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
  }
  static T sqrt(T a) { return _mm256_sqrt_ps(a); }
  static T lt(T a, T b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
  static T le(T a, T b) { return _mm256_cmp_ps(a, b, _CMP_LE_OQ); }
  static T eq(T a, T b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
  static T blend(T m, T x, T y) { return _mm256_blendv_ps(y, x, m); }
  static T bit_and(T a, T b) { return _mm256_and_ps(a, b); }
  static T bit_andnot(T a, T b) { return _mm256_andnot_ps(a, b); }
  static bool any_set(T m) { return _mm256_movemask_ps(m) != 0; }
  static T exponent(T a) {
    const __m256i e = _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(a), 23), _mm256_set1_epi32(0xff));
    return _mm256_cvtepi32_ps(_mm256_sub_epi32(e, _mm256_set1_epi32(127)));
  }
  static T mantissa(T a) {
    const __m256i m = _mm256_and_si256(_mm256_castps_si256(a), _mm256_set1_epi32(0x007fffff));
    return _mm256_castsi256_ps(_mm256_or_si256(m, _mm256_set1_epi32(0x3f800000)));
  }
  static T gather(const float* base, const int32_t* idx) {
    return _mm256_i32gather_ps(base, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(idx)), 4);
  }
  static T gather_tail(const float* base, const int32_t* idx, size_t n) {
    const __m256i m = first_lanes(n);  // the indices past n are not read either
    const __m256i i = _mm256_maskload_epi32(reinterpret_cast<const int*>(idx), m);
    return _mm256_mask_i32gather_ps(_mm256_setzero_ps(), base, i, _mm256_castsi256_ps(m), 4);
  }
  static void dup2(T v, T* lo, T* hi) {
    *lo = _mm256_permutevar8x32_ps(v, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3));
    *hi = _mm256_permutevar8x32_ps(v, _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7));
  }
};
