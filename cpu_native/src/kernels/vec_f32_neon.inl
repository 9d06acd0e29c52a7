// The fp32 vector type V of the NEON (aarch64) kernels (4 lanes): the operations the generic
// kernels (vector_kernels.inl, winograd_simd.inl) are written in. Included inside an anonymous
// namespace by vector_kernels_neon.cc and winograd_neon.cc. Not a standalone header.
struct V {
  using T = float32x4_t;
  static constexpr size_t W = 4;
  static T load(const float* p) { return vld1q_f32(p); }
  static void store(float* p, T v) { vst1q_f32(p, v); }
  static T load_tail(const float* p, size_t n, float fill) {
    float tmp[4] = {fill, fill, fill, fill};
    for (size_t i = 0; i < n; ++i) tmp[i] = p[i];
    return vld1q_f32(tmp);
  }
  static void store_tail(float* p, T v, size_t n) {
    float tmp[4];
    vst1q_f32(tmp, v);
    for (size_t i = 0; i < n; ++i) p[i] = tmp[i];
  }
  static T set1(float v) { return vdupq_n_f32(v); }
  static T add(T a, T b) { return vaddq_f32(a, b); }
  static T sub(T a, T b) { return vsubq_f32(a, b); }
  static T mul(T a, T b) { return vmulq_f32(a, b); }
  static T div(T a, T b) { return vdivq_f32(a, b); }
  static T fma(T a, T b, T c) { return vfmaq_f32(c, a, b); }
  static T max(T a, T b) { return vmaxq_f32(a, b); }
  static T min(T a, T b) { return vminq_f32(a, b); }
  static T nan_mask(T a) { return vreinterpretq_f32_u32(vmvnq_u32(vceqq_f32(a, a))); }
  static bool any_nan(T a) { return vmaxvq_u32(vmvnq_u32(vceqq_f32(a, a))) != 0; }
  static T bit_or(T a, T b) {
    return vreinterpretq_f32_u32(vorrq_u32(vreinterpretq_u32_f32(a), vreinterpretq_u32_f32(b)));
  }
  static T abs(T a) { return vabsq_f32(a); }
  static T select_lt(T a, T b, T x, T y) { return vbslq_f32(vcltq_f32(a, b), x, y); }
  static T round(T a) { return vrndnq_f32(a); }
  static T exp2_int(T n) {
    const int32x4_t e = vaddq_s32(vcvtq_s32_f32(vmaxq_f32(n, vdupq_n_f32(-127.0f))), vdupq_n_s32(127));
    return vreinterpretq_f32_s32(vshlq_n_s32(e, 23));
  }
  static float hsum(T v) { return vaddvq_f32(v); }
  static float hmax(T v) { return vmaxvq_f32(v); }
  static T sqrt(T a) { return vsqrtq_f32(a); }
  static T lt(T a, T b) { return vreinterpretq_f32_u32(vcltq_f32(a, b)); }
  static T le(T a, T b) { return vreinterpretq_f32_u32(vcleq_f32(a, b)); }
  static T eq(T a, T b) { return vreinterpretq_f32_u32(vceqq_f32(a, b)); }
  static T blend(T m, T x, T y) { return vbslq_f32(vreinterpretq_u32_f32(m), x, y); }
  static T bit_and(T a, T b) {
    return vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(a), vreinterpretq_u32_f32(b)));
  }
  static T bit_andnot(T a, T b) {  // ~a & b
    return vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(b), vreinterpretq_u32_f32(a)));
  }
  static bool any_set(T m) { return vmaxvq_u32(vreinterpretq_u32_f32(m)) != 0; }
  static T exponent(T a) {
    const uint32x4_t e = vandq_u32(vshrq_n_u32(vreinterpretq_u32_f32(a), 23), vdupq_n_u32(0xff));
    return vcvtq_f32_s32(vsubq_s32(vreinterpretq_s32_u32(e), vdupq_n_s32(127)));
  }
  static T mantissa(T a) {
    const uint32x4_t m = vandq_u32(vreinterpretq_u32_f32(a), vdupq_n_u32(0x007fffff));
    return vreinterpretq_f32_u32(vorrq_u32(m, vdupq_n_u32(0x3f800000)));
  }
  static T gather(const float* base, const int32_t* idx) {
    float32x4_t v = vdupq_n_f32(0.0f);
    v = vld1q_lane_f32(base + idx[0], v, 0);
    v = vld1q_lane_f32(base + idx[1], v, 1);
    v = vld1q_lane_f32(base + idx[2], v, 2);
    v = vld1q_lane_f32(base + idx[3], v, 3);
    return v;
  }
  static T gather_tail(const float* base, const int32_t* idx, size_t n) {
    float tmp[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (size_t i = 0; i < n; ++i) tmp[i] = base[idx[i]];
    return vld1q_f32(tmp);
  }
  static void dup2(T v, T* lo, T* hi) {
    *lo = vzip1q_f32(v, v);
    *hi = vzip2q_f32(v, v);
  }
};
