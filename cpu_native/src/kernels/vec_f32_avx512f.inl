// The fp32 vector type of the kernels compiled for AVX-512 F alone (-mavx512f -mfma -mf16c: the
// GEMM's flags, so they also run where only F is there): 16 lanes, tails through lane masks.
// winograd_avx512.cc and spmm_avx512.cc use it as their V; vector_kernels_avx512.cc (built with
// BW/DQ/VL too) extends it with the operations the generic kernels need. Included inside an
// anonymous namespace; not a standalone header.
static inline __mmask16 first_lanes(size_t n) { return static_cast<__mmask16>((1u << n) - 1u); }

struct V512F {
  using T = __m512;
  static constexpr size_t W = 16;
  static T load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, T v) { _mm512_storeu_ps(p, v); }
  static T load_tail(const float* p, size_t n, float fill) {
    return _mm512_mask_loadu_ps(_mm512_set1_ps(fill), first_lanes(n), p);
  }
  static void store_tail(float* p, T v, size_t n) { _mm512_mask_storeu_ps(p, first_lanes(n), v); }
  static T set1(float v) { return _mm512_set1_ps(v); }
  static T add(T a, T b) { return _mm512_add_ps(a, b); }
  static T sub(T a, T b) { return _mm512_sub_ps(a, b); }
  static T mul(T a, T b) { return _mm512_mul_ps(a, b); }
  static T fma(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  static T max(T a, T b) { return _mm512_max_ps(a, b); }
  static T min(T a, T b) { return _mm512_min_ps(a, b); }
  static bool any_nan(T a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q) != 0; }
};
