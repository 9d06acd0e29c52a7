// ISA-generic Winograd F(4x4, 3x3) transforms (ukernels.h), written once against a vector-traits
// struct V and instantiated by winograd_<isa>.cc, which defines V inside its anonymous namespace
// and includes this file there (each ISA's copy stays private to its translation unit). Not a
// standalone header.
//
// V provides (the ISA's vec_f32_<isa>.inl, or winograd_avx512.cc's own: that file is compiled for
// AVX-512 F alone, as the GEMM it feeds): T, W (lanes), load / store (unaligned), load_tail(p, n,
// fill) (lanes >= n fill, nothing read past p + n) / store_tail(p, v, n) for n < W, set1, add, sub, fma(a, b, c) = a*b + c, max,
// min (x86 semantics are enough: min(hi, max(lo, v)) keeps a NaN v), any_nan.
//
// Every channel is independent, so the kernels take W channels a step through the 2-D transforms,
// each done as the 1-D one on the 6 columns and then on the rows, in the factored forms below
// (the scalar reference applies B^T and A^T as written):
//   B^T d: t0 = 4 d0 - 5 d2 + d4            A^T m: y0 = m0 + (m1 + m2) + (m3 + m4)
//          t1 = (d3 + d4) - 4 (d1 + d2)            y1 = (m1 - m2) + 2 (m3 - m4)
//          t2 = (d4 - d3) + 4 (d1 - d2)            y2 = (m1 + m2) + 4 (m3 + m4)
//          t3 = (d4 - d2) + 2 (d3 - d1)            y3 = (m1 - m2) + 8 (m3 - m4) + m5
//          t4 = (d4 - d2) - 2 (d3 - d1)
//          t5 = 4 d1 - 5 d3 + d5

using T = V::T;
constexpr size_t W = V::W;
constexpr size_t kP = kWinogradPatch, kR = kWinogradTile;

static inline void input_1d(const T* d, T* t) {
  const T four = V::set1(4.0f), neg_four = V::set1(-4.0f), neg_five = V::set1(-5.0f);
  const T two = V::set1(2.0f), neg_two = V::set1(-2.0f);
  t[0] = V::fma(four, d[0], V::fma(neg_five, d[2], d[4]));
  t[1] = V::fma(neg_four, V::add(d[1], d[2]), V::add(d[3], d[4]));
  t[2] = V::fma(four, V::sub(d[1], d[2]), V::sub(d[4], d[3]));
  const T d42 = V::sub(d[4], d[2]), d31 = V::sub(d[3], d[1]);
  t[3] = V::fma(two, d31, d42);
  t[4] = V::fma(neg_two, d31, d42);
  t[5] = V::fma(four, d[1], V::fma(neg_five, d[3], d[5]));
}

static inline void output_1d(const T* m, T* y) {
  const T s12 = V::add(m[1], m[2]), d12 = V::sub(m[1], m[2]);
  const T s34 = V::add(m[3], m[4]), d34 = V::sub(m[3], m[4]);
  y[0] = V::add(V::add(m[0], s12), s34);
  y[1] = V::fma(V::set1(2.0f), d34, d12);
  y[2] = V::fma(V::set1(4.0f), s34, s12);
  y[3] = V::add(V::fma(V::set1(8.0f), d34, d12), m[5]);
}

// W channels [ch, ch + n) of one tile (n < W: the tail).
template <bool Tail>
static inline void input_step(const float* const* pixels, size_t ch, size_t n, float* v, size_t v_stride) {
  T bd[kP][kP];  // B^T d, by column
#pragma GCC unroll 6
  for (size_t j = 0; j < kP; ++j) {
    T d[kP], t[kP];
#pragma GCC unroll 6
    for (size_t i = 0; i < kP; ++i) d[i] = Tail ? V::load_tail(pixels[i * kP + j] + ch, n, 0.0f) : V::load(pixels[i * kP + j] + ch);
    input_1d(d, t);
#pragma GCC unroll 6
    for (size_t i = 0; i < kP; ++i) bd[i][j] = t[i];
  }
#pragma GCC unroll 6
  for (size_t i = 0; i < kP; ++i) {
    T t[kP];
    input_1d(bd[i], t);
    float* row = v + i * kP * v_stride + ch;
#pragma GCC unroll 6
    for (size_t j = 0; j < kP; ++j) {
      if (Tail) V::store_tail(row + j * v_stride, t[j], n);
      else V::store(row + j * v_stride, t[j]);
    }
  }
}

static void winograd43_input(const float* const* pixels, size_t channels, float* v, size_t v_stride) {
  size_t ch = 0;
  for (; ch + W <= channels; ch += W) input_step<false>(pixels, ch, W, v, v_stride);
  if (ch < channels) input_step<true>(pixels, ch, channels - ch, v, v_stride);
}

// W channels [ch, ch + n) of one tile; returns `check` plus 0 * every stored value (NaN once one
// is NaN or infinite: one fused multiply-add a vector).
template <bool Tail>
static inline T output_step(const float* m, size_t m_stride, size_t ch, size_t n, const float* bias, float* y,
                            size_t y_row_stride, size_t y_pixel_stride, size_t rows, size_t cols, T lo, T hi,
                            T check) {
  const T zero = V::set1(0.0f);
  T am[kR][kP];  // A^T m, by column
#pragma GCC unroll 6
  for (size_t j = 0; j < kP; ++j) {
    T mm[kP], t[kR];
#pragma GCC unroll 6
    for (size_t i = 0; i < kP; ++i) {
      const float* p = m + (i * kP + j) * m_stride + ch;
      mm[i] = Tail ? V::load_tail(p, n, 0.0f) : V::load(p);
    }
    output_1d(mm, t);
#pragma GCC unroll 4
    for (size_t i = 0; i < kR; ++i) am[i][j] = t[i];
  }
  const T b = bias == nullptr ? zero : Tail ? V::load_tail(bias + ch, n, 0.0f) : V::load(bias + ch);
  for (size_t i = 0; i < rows; ++i) {
    T t[kR];
    output_1d(am[i], t);
    float* row = y + i * y_row_stride + ch;
    for (size_t j = 0; j < cols; ++j) {
      const T o = V::min(hi, V::max(lo, V::add(t[j], b)));
      check = V::fma(o, zero, check);
      if (Tail) V::store_tail(row + j * y_pixel_stride, o, n);
      else V::store(row + j * y_pixel_stride, o);
    }
  }
  return check;
}

static bool winograd43_output(const float* m, size_t m_stride, size_t channels, const float* bias, float* y,
                              size_t y_row_stride, size_t y_pixel_stride, size_t rows, size_t cols,
                              const MinMax* clamp) {
  const T lo = V::set1(clamp->min), hi = V::set1(clamp->max);
  T check = V::set1(0.0f);
  size_t ch = 0;
  for (; ch + W <= channels; ch += W)
    check = output_step<false>(m, m_stride, ch, W, bias, y, y_row_stride, y_pixel_stride, rows, cols, lo, hi, check);
  if (ch < channels)
    check = output_step<true>(m, m_stride, ch, channels - ch, bias, y, y_row_stride, y_pixel_stride, rows, cols, lo,
                              hi, check);
  return V::any_nan(check);
}

// G of F(4x4, 3x3) on one column (a, b, d) of 3x3 filters, factored:
//   G g: u0 = a / 4, u1 = -((a + d) + b) / 6, u2 = -((a + d) - b) / 6,
//        u3 = (a / 24 + d / 6) + b / 12, u4 = (a / 24 + d / 6) - b / 12, u5 = d
static inline void weights_1d(T a, T b, T d, T* u) {
  const T ad = V::add(a, d), neg_sixth = V::set1(-1.0f / 6);
  const T e = V::fma(V::set1(1.0f / 24), a, V::mul(V::set1(1.0f / 6), d)), f = V::mul(V::set1(1.0f / 12), b);
  u[0] = V::mul(V::set1(0.25f), a);
  u[1] = V::mul(neg_sixth, V::add(ad, b));
  u[2] = V::mul(neg_sixth, V::sub(ad, b));
  u[3] = V::add(e, f);
  u[4] = V::sub(e, f);
  u[5] = d;
}

// Filters [i, i + n) (n < W: the tail) of winograd43_weights.
template <bool Tail>
static inline void weights_step(const float* g, size_t g_stride, size_t n, float* u, size_t u_stride) {
  T gg[kP][3];  // G g, by column
#pragma GCC unroll 3
  for (size_t x = 0; x < 3; ++x) {
    T col[3], t[kP];
#pragma GCC unroll 3
    for (size_t y = 0; y < 3; ++y) {
      const float* p = g + (3 * y + x) * g_stride;
      col[y] = Tail ? V::load_tail(p, n, 0.0f) : V::load(p);
    }
    weights_1d(col[0], col[1], col[2], t);
#pragma GCC unroll 6
    for (size_t i = 0; i < kP; ++i) gg[i][x] = t[i];
  }
#pragma GCC unroll 6
  for (size_t i = 0; i < kP; ++i) {
    T row[kP];
    weights_1d(gg[i][0], gg[i][1], gg[i][2], row);
#pragma GCC unroll 6
    for (size_t x = 0; x < kP; ++x) {
      float* p = u + (i * kP + x) * u_stride;
      if (Tail)
        V::store_tail(p, row[x], n);
      else
        V::store(p, row[x]);
    }
  }
}

static inline void winograd43_weights(const float* g, size_t g_stride, size_t n, float* u, size_t u_stride) {
  size_t i = 0;
  for (; i + W <= n; i += W) weights_step<false>(g + i, g_stride, W, u + i, u_stride);
  if (i < n) weights_step<true>(g + i, g_stride, n - i, u + i, u_stride);
}
