// ISA-generic vector kernels (activation, depthwise, pooling, binary, softmax), written once
// against a vector-traits struct V and instantiated per ISA by vector_kernels_<isa>.cc, which
// defines V (inside an anonymous namespace, so each ISA's copy stays private to its own
// translation unit) and then includes this file. Not a standalone header.
//
// V provides: T, W (lanes), load/store (unaligned), load_tail(p, n, fill) / store_tail(p, v, n)
// for n < W lanes, set1, add, sub, mul, div, fma(a, b, c) = a*b + c, max, min, abs,
// select_lt(a, b, x, y) = a < b ? x : y, round (to nearest even), exp2_int(n) = 2^n for
// integer-valued n <= 0 (0 below -126), hsum, hmax, nan_mask(a) (all bits set in NaN lanes),
// any_nan(a), bit_or.
//
// NaN (tests/test_nan_inf.py: every backend propagates NaN as ONNX Runtime does): max(a, b) and
// min(a, b) are only defined for non-NaN a; a NaN b comes out as NaN (x86 maxps/minps return the
// second operand when either is NaN, NEON fmax/fmin return NaN). So a clamp is written
// min(hi, max(lo, v)): constant bounds first, the value that must carry a NaN second. Max pooling
// (window_max) propagates a NaN tap as numpy's max does.

using T = V::T;
#define EDGESDK_UNROLL4 _Pragma("GCC unroll 4")
constexpr size_t W = V::W;
const float kLaneIndex[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

// ---- exp / sigmoid / tanh -------------------------------------------------------------------
// Degree-5 minimax polynomial for e^t on [-ln2/2, ln2/2] with a two-constant Cody-Waite
// reduction (seed 001, Algorithm 4); the constants are the well-known rr2_p5 set.
struct ExpConsts {
  T log2e = V::set1(0x1.715476p+0f);
  T ln2_hi = V::set1(0x1.62E400p-1f);
  T ln2_lo = V::set1(0x1.7F7D1Cp-20f);
  T c1 = V::set1(0x1.FFFFF6p-1f), c2 = V::set1(0x1.FFFDC6p-2f), c3 = V::set1(0x1.555A80p-3f);
  T c4 = V::set1(0x1.573A1Ap-5f), c5 = V::set1(0x1.0F9F9Cp-7f);
  T one = V::set1(1.0f);
};

// ExtExp: e^x = m * 2^n with m in [sqrt(2)/2, sqrt(2)] and n an integer-valued float.
static inline T ext_exp(T x, const ExpConsts& k, T* n_out) {
  const T n = V::round(V::mul(x, k.log2e));
  T t = V::fma(n, V::sub(V::set1(0.0f), k.ln2_hi), x);
  t = V::fma(n, V::sub(V::set1(0.0f), k.ln2_lo), t);
  T p = V::fma(k.c5, t, k.c4);
  p = V::fma(p, t, k.c3);
  p = V::fma(p, t, k.c2);
  p = V::fma(p, t, k.c1);
  *n_out = n;
  return V::fma(p, t, k.one);
}

// e^x for x <= 0: below about -87.7 (2^-126) the result flushes to 0, and -inf gives exactly 0.
// The clamp keeps the range reduction finite (-inf * log2e - -inf would be NaN); a NaN x stays NaN.
static inline T exp_nonpositive(T x, const ExpConsts& k) {
  x = V::max(V::set1(-104.0f), x);
  T n;
  const T m = ext_exp(x, k, &n);
  return V::mul(m, V::exp2_int(n));
}

static inline T sigmoid(T x, const ExpConsts& k) {
  const T e = exp_nonpositive(V::sub(V::set1(0.0f), V::abs(x)), k);  // e^-|x|
  const T r = V::div(k.one, V::add(k.one, e));                         // sigmoid(|x|)
  return V::select_lt(x, V::set1(0.0f), V::mul(e, r), r);             // sigmoid(-|x|) = e * r
}

static inline T tanh_vec(T x, const ExpConsts& k) {
  const T ax = V::abs(x);
  // Small |x|: odd Taylor series (1 - e^-2|x| would cancel); error < 2e-9 relative below 0.3.
  const T x2 = V::mul(x, x);
  T p = V::set1(-1382.0f / 155925.0f);
  p = V::fma(p, x2, V::set1(62.0f / 2835.0f));
  p = V::fma(p, x2, V::set1(-17.0f / 315.0f));
  p = V::fma(p, x2, V::set1(2.0f / 15.0f));
  p = V::fma(p, x2, V::set1(-1.0f / 3.0f));
  const T small = V::fma(V::mul(p, x2), x, x);
  const T e = exp_nonpositive(V::mul(ax, V::set1(-2.0f)), k);
  const T big_abs = V::div(V::sub(k.one, e), V::add(k.one, e));
  const T big = V::select_lt(x, V::set1(0.0f), V::sub(V::set1(0.0f), big_abs), big_abs);
  return V::select_lt(ax, V::set1(0.3f), small, big);
}

// min(hi, max(lo, v)) in this operand order keeps a NaN v (see the header), at no cost.
static inline T clamp_keep_nan(T v, T lo, T hi) { return V::min(hi, V::max(lo, v)); }

// Matches activate_reference (common.cc) on NaN and +-inf too.
static inline T activate(T v, const Activation& act, const ExpConsts& k) {
  switch (act.kind) {
    case ActKind::None: return v;
    case ActKind::Relu: return V::max(V::set1(0.0f), v);
    case ActKind::Clip: return clamp_keep_nan(v, V::set1(act.alpha), V::set1(act.beta));
    case ActKind::HardSwish:  // -inf * 0 = NaN, as in ONNX Runtime
      return V::mul(v, clamp_keep_nan(V::fma(v, V::set1(act.alpha), V::set1(act.beta)), V::set1(0.0f), k.one));
    case ActKind::HardSigmoid:
      return clamp_keep_nan(V::fma(v, V::set1(act.alpha), V::set1(act.beta)), V::set1(0.0f), k.one);
    case ActKind::Sigmoid: return sigmoid(v, k);
    case ActKind::Tanh: return tanh_vec(v, k);
    case ActKind::LeakyRelu: return V::select_lt(v, V::set1(0.0f), V::mul(v, V::set1(act.alpha)), v);
  }
  return v;
}

static void activation_impl(float* x, size_t n, const Activation* act) {
  const ExpConsts k;
  size_t i = 0;
  for (; i + W <= n; i += W) V::store(x + i, activate(V::load(x + i), *act, k));
  if (i < n) V::store_tail(x + i, activate(V::load_tail(x + i, n - i, 0.0f), *act, k), n - i);
}

// ---- depthwise ------------------------------------------------------------------------------
static inline bool tap_inside(size_t o, size_t stride, size_t kk, size_t dil, size_t pad, size_t extent, size_t* in) {
  const ptrdiff_t pos = static_cast<ptrdiff_t>(o * stride + kk * dil) - static_cast<ptrdiff_t>(pad);
  if (pos < 0 || pos >= static_cast<ptrdiff_t>(extent)) return false;
  *in = static_cast<size_t>(pos);
  return true;
}

// Valid taps of one output pixel: input-pixel offsets and weight-tap indices.
constexpr size_t kMaxTaps = 256;
struct Taps {
  size_t count = 0;
  size_t in_offset[kMaxTaps];
  size_t tap[kMaxTaps];
};

static inline void window_taps(size_t b, size_t oy, size_t ox, size_t h, size_t w, size_t kh, size_t kw,
                               size_t stride_h, size_t stride_w, size_t dil_h, size_t dil_w, size_t pad_top,
                               size_t pad_left, size_t in_stride, Taps* taps) {
  taps->count = 0;
  for (size_t ky = 0; ky < kh; ++ky) {
    size_t iy;
    if (!tap_inside(oy, stride_h, ky, dil_h, pad_top, h, &iy)) continue;
    for (size_t kx = 0; kx < kw; ++kx) {
      size_t ix;
      if (!tap_inside(ox, stride_w, kx, dil_w, pad_left, w, &ix)) continue;
      taps->in_offset[taps->count] = ((b * h + iy) * w + ix) * in_stride;
      taps->tap[taps->count] = ky * kw + kx;
      ++taps->count;
    }
  }
}

static void depthwise_impl(const DepthwiseArgs* a, size_t row_begin, size_t row_end) {
  const ExpConsts k;
  const size_t oc_count = a->c * a->multiplier;
  const size_t mult = a->multiplier;
  const T zero = V::set1(0.0f);
  if (a->kh * a->kw > kMaxTaps) {  // windows beyond 16x16 taps: no network has them; stay exact
    f32_depthwise_scalar(a, row_begin, row_end);
    return;
  }
  Taps taps;
  // Pixels whose whole window is inside the input (all but a border ring) share one pattern of
  // tap offsets relative to the window's corner: computed once, not bounds-checked per pixel.
  const size_t ntaps = a->kh * a->kw;
  size_t relative[kMaxTaps];
  for (size_t ky = 0; ky < a->kh; ++ky)
    for (size_t kx = 0; kx < a->kw; ++kx)
      relative[ky * a->kw + kx] = (ky * a->dil_h * a->w + kx * a->dil_w) * a->in_stride;
  const size_t span_h = (a->kh - 1) * a->dil_h, span_w = (a->kw - 1) * a->dil_w;
  for (size_t row = row_begin; row < row_end; ++row) {
    const size_t b = row / a->oh, oy = row % a->oh;
    const ptrdiff_t iy0 = static_cast<ptrdiff_t>(oy * a->stride_h) - static_cast<ptrdiff_t>(a->pad_top);
    const bool row_inside = iy0 >= 0 && static_cast<size_t>(iy0) + span_h < a->h;
    for (size_t ox = 0; ox < a->ow; ++ox) {
      float* out = a->output + ((b * a->oh + oy) * a->ow + ox) * a->out_stride;
      const ptrdiff_t ix0 = static_cast<ptrdiff_t>(ox * a->stride_w) - static_cast<ptrdiff_t>(a->pad_left);
      if (row_inside && ix0 >= 0 && static_cast<size_t>(ix0) + span_w < a->w) {
        const size_t corner = ((b * a->h + static_cast<size_t>(iy0)) * a->w + static_cast<size_t>(ix0)) * a->in_stride;
        for (size_t t = 0; t < ntaps; ++t) {
          taps.in_offset[t] = corner + relative[t];
          taps.tap[t] = t;
        }
        taps.count = ntaps;
      } else {
        window_taps(b, oy, ox, a->h, a->w, a->kh, a->kw, a->stride_h, a->stride_w, a->dil_h, a->dil_w, a->pad_top,
                    a->pad_left, a->in_stride, &taps);
      }
      if (mult == 1) {
        // Channels in vectors; 4 vectors at once keep 4 independent FMA chains in flight.
        size_t c = 0;
        for (; c + 4 * W <= oc_count; c += 4 * W) {
          T acc[4];
          EDGESDK_UNROLL4 for (size_t u = 0; u < 4; ++u) acc[u] = a->bias != nullptr ? V::load(a->bias + c + u * W) : zero;
          for (size_t t = 0; t < taps.count; ++t) {
            const float* x = a->input + taps.in_offset[t] + c;
            const float* wt = a->weights + taps.tap[t] * oc_count + c;
            EDGESDK_UNROLL4 for (size_t u = 0; u < 4; ++u) acc[u] = V::fma(V::load(x + u * W), V::load(wt + u * W), acc[u]);
          }
          EDGESDK_UNROLL4 for (size_t u = 0; u < 4; ++u) V::store(out + c + u * W, activate(acc[u], a->act, k));
        }
        for (; c + W <= oc_count; c += W) {  // whole vectors: no masks
          T acc = a->bias != nullptr ? V::load(a->bias + c) : zero;
          for (size_t t = 0; t < taps.count; ++t)
            acc = V::fma(V::load(a->input + taps.in_offset[t] + c), V::load(a->weights + taps.tap[t] * oc_count + c), acc);
          V::store(out + c, activate(acc, a->act, k));
        }
        for (; c < oc_count; c += W) {
          const size_t n = oc_count - c < W ? oc_count - c : W;
          T acc = a->bias != nullptr ? V::load_tail(a->bias + c, n, 0.0f) : zero;
          for (size_t t = 0; t < taps.count; ++t) {
            const float* x = a->input + taps.in_offset[t] + c;
            const float* wt = a->weights + taps.tap[t] * oc_count + c;
            acc = V::fma(V::load_tail(x, n, 0.0f), V::load_tail(wt, n, 0.0f), acc);
          }
          V::store_tail(out + c, activate(acc, a->act, k), n);
        }
      } else {
        // Channel multiplier: one input value feeds `mult` consecutive output channels.
        for (size_t ic = 0; ic < a->c; ++ic) {
          for (size_t j = 0; j < mult; j += W) {
            const size_t n = mult - j < W ? mult - j : W;
            const size_t oc = ic * mult + j;
            T acc = a->bias != nullptr ? V::load_tail(a->bias + oc, n, 0.0f) : zero;
            for (size_t t = 0; t < taps.count; ++t) {
              const T x = V::set1(a->input[taps.in_offset[t] + ic]);
              acc = V::fma(x, V::load_tail(a->weights + taps.tap[t] * oc_count + oc, n, 0.0f), acc);
            }
            V::store_tail(out + oc, activate(acc, a->act, k), n);
          }
        }
      }
    }
  }
}

// ---- pooling --------------------------------------------------------------------------------
// Calls f(v) with channels [c, c + n) of every tap of output pixel (b, oy, ox) that lies on the input.
template <class F>
static inline void for_each_tap(const PoolArgs* a, size_t b, size_t oy, size_t ox, size_t c, size_t n, F f) {
  for (size_t ky = 0; ky < a->kh; ++ky) {
    size_t iy;
    if (!tap_inside(oy, a->stride_h, ky, a->dil_h, a->pad_top, a->h, &iy)) continue;
    for (size_t kx = 0; kx < a->kw; ++kx) {
      size_t ix;
      if (!tap_inside(ox, a->stride_w, kx, a->dil_w, a->pad_left, a->w, &ix)) continue;
      const float* x = a->input + ((b * a->h + iy) * a->w + ix) * a->in_stride + c;
      f(n == W ? V::load(x) : V::load_tail(x, n, 0.0f));
    }
  }
}

// Max with numpy's rule, a NaN tap makes the result NaN, for one add per tap: max(v, m) skips a
// NaN v, but the taps' sum is NaN when one is (or when +inf meets -inf), and only then is the
// window walked again for its NaN lanes. (A blend per tap, or a NaN mask ORed per tap, cost
// 10-15% on a 3x3 stride-2 pool.)
static inline T window_max(const PoolArgs* a, size_t b, size_t oy, size_t ox, size_t c, size_t n) {
  T m = V::set1(-__builtin_inff()), probe = V::set1(0.0f);
  for_each_tap(a, b, oy, ox, c, n, [&](T v) {
    m = V::max(v, m);
    probe = V::add(probe, v);
  });
  if (!V::any_nan(probe)) return m;
  T nan_seen = V::set1(0.0f);
  for_each_tap(a, b, oy, ox, c, n, [&](T v) { nan_seen = V::bit_or(nan_seen, V::nan_mask(v)); });
  return V::bit_or(m, nan_seen);  // all bits set: a NaN
}

static void pool_impl(const PoolArgs* a, size_t row_begin, size_t row_end, bool is_max) {
  const ExpConsts k;
  for (size_t row = row_begin; row < row_end; ++row) {
    const size_t b = row / a->oh, oy = row % a->oh;
    for (size_t ox = 0; ox < a->ow; ++ox) {
      float* out = a->output + ((b * a->oh + oy) * a->ow + ox) * a->out_stride;
      // Walk the window once per channel block; count taps for the average's divisor.
      size_t inside = 0, padded = 0;
      for (size_t ky = 0; ky < a->kh; ++ky) {
        const ptrdiff_t iy = static_cast<ptrdiff_t>(oy * a->stride_h + ky * a->dil_h) - static_cast<ptrdiff_t>(a->pad_top);
        for (size_t kx = 0; kx < a->kw; ++kx) {
          const ptrdiff_t ix = static_cast<ptrdiff_t>(ox * a->stride_w + kx * a->dil_w) - static_cast<ptrdiff_t>(a->pad_left);
          inside += iy >= 0 && iy < static_cast<ptrdiff_t>(a->h) && ix >= 0 && ix < static_cast<ptrdiff_t>(a->w);
          padded += iy < static_cast<ptrdiff_t>(a->h + a->pad_bottom) && ix < static_cast<ptrdiff_t>(a->w + a->pad_right);
        }
      }
      const size_t count = a->count_include_pad ? padded : inside;
      const T scale = V::set1(count > 0 ? 1.0f / static_cast<float>(count) : 0.0f);
      for (size_t c = 0; c < a->c; c += W) {
        const size_t n = a->c - c < W ? a->c - c : W;
        T acc;
        if (is_max) {
          acc = window_max(a, b, oy, ox, c, n);
        } else {
          T sum = V::set1(0.0f);
          for_each_tap(a, b, oy, ox, c, n, [&](T v) { sum = V::add(sum, v); });
          acc = V::mul(sum, scale);
        }
        acc = activate(acc, a->act, k);
        if (n == W) V::store(out + c, acc); else V::store_tail(out + c, acc, n);
      }
    }
  }
}

static void global_avgpool_impl(const float* x, size_t pixels, size_t c, size_t in_stride, float* y,
                                const Activation* act) {
  const ExpConsts k;
  const T scale = V::set1(1.0f / static_cast<float>(pixels));
  size_t ch = 0;
  for (; ch + 4 * W <= c; ch += 4 * W) {
    T acc[4] = {V::set1(0.0f), V::set1(0.0f), V::set1(0.0f), V::set1(0.0f)};
    for (size_t p = 0; p < pixels; ++p)
      EDGESDK_UNROLL4 for (size_t u = 0; u < 4; ++u) acc[u] = V::add(acc[u], V::load(x + p * in_stride + ch + u * W));
    EDGESDK_UNROLL4 for (size_t u = 0; u < 4; ++u) V::store(y + ch + u * W, activate(V::mul(acc[u], scale), *act, k));
  }
  for (; ch < c; ch += W) {
    const size_t n = c - ch < W ? c - ch : W;
    T acc = V::set1(0.0f);
    for (size_t p = 0; p < pixels; ++p) acc = V::add(acc, V::load_tail(x + p * in_stride + ch, n, 0.0f));
    V::store_tail(y + ch, activate(V::mul(acc, scale), *act, k), n);
  }
}

// ---- binary ---------------------------------------------------------------------------------
static inline T binary_op(BinaryOp op, T lhs, T rhs) {
  switch (op) {
    case BinaryOp::Add: return V::add(lhs, rhs);
    case BinaryOp::Sub: return V::sub(lhs, rhs);
    case BinaryOp::Mul: return V::mul(lhs, rhs);
  }
  return lhs;
}

static void binary_impl(const BinaryArgs* a, size_t row_begin, size_t row_end) {
  const ExpConsts k;
  const T scalar_b = V::set1(a->broadcast == Broadcast::Scalar ? a->b[0] : 0.0f);
  for (size_t r = row_begin; r < row_end; ++r) {
    const float* ar = a->a + r * a->a_stride;
    const float* br = a->broadcast == Broadcast::None ? a->b + r * a->b_stride : a->b;
    float* yr = a->y + r * a->y_stride;
    for (size_t i = 0; i < a->c; i += W) {
      const size_t n = a->c - i < W ? a->c - i : W;
      const T av = n == W ? V::load(ar + i) : V::load_tail(ar + i, n, 0.0f);
      const T bv = a->broadcast == Broadcast::Scalar ? scalar_b
                   : n == W                          ? V::load(br + i)
                                                     : V::load_tail(br + i, n, 0.0f);
      const T v = activate(a->b_first ? binary_op(a->op, bv, av) : binary_op(a->op, av, bv), a->act, k);
      if (n == W) V::store(yr + i, v); else V::store_tail(yr + i, v, n);
    }
  }
}

// ---- softmax: two-pass (seed 001, Algorithm 3) ------------------------------------------------
// Pass 1 accumulates sum e^x as a per-lane (m, n) pair, rescaling to the larger exponent, so
// nothing overflows and no max pass is needed; pass 2 writes m * 2^(n - n_sum) / m_sum.
// The range reduction is accurate while |n| = |round(x log2 e)| <= kSoftmaxVectorRangeN (|x| up to
// about 1e6). Entries far below the row's max weigh 2^(n - n_max) = 0 whatever their m, unless m is
// not finite: so the vector result stands when the row's max is in range and the sum m_sum is
// finite. Otherwise (a NaN, +-inf or -3.4e38 mask entry, or a row of huge values) the scalar
// kernel runs the row, subtracting its max in double: -inf entries give 0, and a +inf, NaN or
// all -inf row gives NaN, as in ONNX Runtime. The test is on the two totals: free per element.
constexpr float kSoftmaxVectorRangeN = 1.5e6f;

static void softmax_impl(const float* x, float* y, size_t n) {
  if (n == 0) return;
  const ExpConsts k;
  T m_sum = V::set1(0.0f), n_sum = V::set1(-__builtin_inff());
  const T zero = V::set1(0.0f);
  size_t i = 0;
  for (; i + W <= n; i += W) {
    T ni;
    const T mi = ext_exp(V::load(x + i), k, &ni);
    const T nmax = V::max(ni, n_sum);
    m_sum = V::fma(mi, V::exp2_int(V::sub(ni, nmax)), V::mul(m_sum, V::exp2_int(V::sub(n_sum, nmax))));
    n_sum = nmax;
  }
  const size_t tail = n - i;
  if (tail > 0) {
    // Dead lanes read x[0] (a real entry, so its magnitude counts anyway) and contribute m = 0.
    T ni;
    T mi = ext_exp(V::load_tail(x + i, tail, x[0]), k, &ni);
    mi = V::select_lt(V::load_tail(kLaneIndex, tail, 1e9f), V::set1(static_cast<float>(tail)), mi, zero);
    const T nmax = V::max(ni, n_sum);
    m_sum = V::fma(mi, V::exp2_int(V::sub(ni, nmax)), V::mul(m_sum, V::exp2_int(V::sub(n_sum, nmax))));
    n_sum = nmax;
  }
  const float n_total = V::hmax(n_sum);
  const float m_total = V::hsum(V::mul(m_sum, V::exp2_int(V::sub(n_sum, V::set1(n_total)))));
  if (!(__builtin_fabsf(n_total) <= kSoftmaxVectorRangeN && __builtin_isfinite(m_total))) {
    f32_softmax_scalar(x, y, n);
    return;
  }
  const T scale = V::set1(1.0f / m_total);
  const T nt = V::set1(n_total);
  for (i = 0; i + W <= n; i += W) {
    T ni;
    const T mi = ext_exp(V::load(x + i), k, &ni);
    V::store(y + i, V::mul(V::mul(mi, scale), V::exp2_int(V::sub(ni, nt))));
  }
  if (tail > 0) {
    T ni;
    const T mi = ext_exp(V::load_tail(x + i, tail, x[0]), k, &ni);
    V::store_tail(y + i, V::mul(V::mul(mi, scale), V::exp2_int(V::sub(ni, nt))), tail);
  }
}
