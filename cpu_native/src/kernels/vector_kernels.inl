// ISA-generic vector kernels (activation, depthwise, pooling, binary, softmax), written once
// against a vector-traits struct V and instantiated per ISA by vector_kernels_<isa>.cc, which
// defines V (inside an anonymous namespace, so each ISA's copy stays private to its own
// translation unit) and then includes this file. Not a standalone header.
//
// V provides: T, W (lanes), load/store (unaligned), load_tail(p, n, fill) / store_tail(p, v, n)
// for n < W lanes, set1, add, sub, mul, div, fma(a, b, c) = a*b + c, max, min, abs,
// select_lt(a, b, x, y) = a < b ? x : y, round (to nearest even), exp2_int(n) = 2^n for
// integer-valued n <= 0 (0 below -126), hsum, hmax, nan_mask(a) (all bits set in NaN lanes),
// any_nan(a), bit_or; and for the math activations and vector_ops.inl: sqrt, lt / le / eq (lane
// masks: all bits set where true), blend(mask, x, y) = mask ? x : y, bit_and, bit_andnot(a, b) =
// ~a & b, any_set(mask), exponent(a) = floor(log2 a) and mantissa(a) = a / 2^exponent(a) in [1, 2)
// for positive normal a, gather(base, idx) / gather_tail(base, idx, n) (int32 indices),
// dup2(v, lo, hi) (each lane twice: lo holds lanes 0..W/2-1, hi the rest).
//
// NaN (tests/test_nan_inf.py: every backend propagates NaN as ONNX Runtime does): max(a, b) and
// min(a, b) are only defined for non-NaN a; a NaN b comes out as NaN (x86 maxps/minps return the
// second operand when either is NaN, NEON fmax/fmin return NaN). So a clamp is written
// min(hi, max(lo, v)): constant bounds first, the value that must carry a NaN second. Max pooling
// (window_max) propagates a NaN tap as numpy's max does.

using T = V::T;
#define EDGESDK_UNROLL4 _Pragma("GCC unroll 4")
// Loops over a register block (its accumulators must stay in registers, not on the stack).
#define EDGESDK_UNROLL_BLOCK _Pragma("GCC unroll 16")
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

// ---- the math activations (activate_reference in common.cc is their definition) ---------------
// Accuracy target: 2e-6 relative or 1e-7 absolute against double precision (tests/
// test_native_ops_kernels.py); NaN in gives NaN out, infinities give the IEEE limits.

// e^x over the whole float range. x is clamped to [-104, 89] (a NaN stays NaN) and the result is
// scaled by 2^n in two steps, 2^n1 with n1 = clamp(n, -126, 127) then 2^(n - n1) with n - n1 in
// [-24, 1]: results near the overflow threshold and subnormal ones come out right, e^inf = inf and
// e^-inf = 0.
static inline T exp_vec(T x, const ExpConsts& k) {
  x = clamp_keep_nan(x, V::set1(-104.0f), V::set1(89.0f));
  T n;
  const T m = ext_exp(x, k, &n);
  const T n1 = V::min(V::set1(127.0f), V::max(V::set1(-126.0f), n));
  return V::mul(V::mul(m, V::exp2_int(n1)), V::exp2_int(V::sub(n, n1)));
}

// f^3 p(f) - f^2/2 with log(1 + f) = f + log_tail(f) for f in [sqrt(1/2) - 1, sqrt(2) - 1]: Cephes'
// logf polynomial (relative error ~1e-7). f itself is added last, by the callers, for accuracy.
static inline T log_tail(T f) {
  const T z = V::mul(f, f);
  T p = V::set1(7.0376836292e-2f);
  p = V::fma(p, f, V::set1(-1.1514610310e-1f));
  p = V::fma(p, f, V::set1(1.1676998740e-1f));
  p = V::fma(p, f, V::set1(-1.2420140846e-1f));
  p = V::fma(p, f, V::set1(1.4249322787e-1f));
  p = V::fma(p, f, V::set1(-1.6668057665e-1f));
  p = V::fma(p, f, V::set1(2.0000714765e-1f));
  p = V::fma(p, f, V::set1(-2.4999993993e-1f));
  p = V::fma(p, f, V::set1(3.3333331174e-1f));
  return V::fma(V::mul(p, f), z, V::mul(V::set1(-0.5f), z));
}

// log(x) = e ln2 + log(m), m in [sqrt(1/2), sqrt(2)), with ln2 split in two (Cephes). Subnormal x is
// scaled by 2^23 first; log(0) = -inf, log(x < 0) = NaN, log(inf) = inf, NaN stays NaN.
static inline T log_vec(T x) {
  const T tiny = V::lt(x, V::set1(1.17549435e-38f));
  const T xs = V::blend(tiny, V::mul(x, V::set1(8388608.0f)), x);
  T e = V::sub(V::exponent(xs), V::blend(tiny, V::set1(23.0f), V::set1(0.0f)));
  T m = V::mantissa(xs);
  const T high = V::le(V::set1(1.41421356f), m);
  m = V::blend(high, V::mul(m, V::set1(0.5f)), m);
  e = V::blend(high, V::add(e, V::set1(1.0f)), e);
  const T f = V::sub(m, V::set1(1.0f));  // exact: m is within a factor 2 of 1
  T r = V::fma(e, V::set1(-2.12194440e-4f), log_tail(f));
  r = V::fma(e, V::set1(0.693359375f), V::add(f, r));
  const float inf = __builtin_inff();
  r = V::blend(V::lt(x, V::set1(0.0f)), V::set1(__builtin_nanf("")), r);
  r = V::blend(V::eq(x, V::set1(0.0f)), V::set1(-inf), r);
  r = V::blend(V::eq(x, V::set1(inf)), V::set1(inf), r);
  return V::bit_or(r, V::nan_mask(x));
}

// log(1 + t) for t in [0, 1] without forming 1 + t when t is small: 1 + t below sqrt(2) takes the
// polynomial on t itself, above it log(2) + log(1 + f) with f = (1 + t)/2 - 1.
static inline T log1p_unit(T t) {
  const T high = V::le(V::set1(0.41421356f), t);
  const T f = V::blend(high, V::fma(t, V::set1(0.5f), V::set1(-0.5f)), t);
  return V::add(V::add(f, log_tail(f)), V::blend(high, V::set1(0.693147181f), V::set1(0.0f)));
}

// erfc(z) for z >= 0 given z^2 = z2_hi + z2_lo (exactly, from an fma): t e^(P(t) - z^2) with
// t = 1/(1 + z/2), the Numerical Recipes erfcc form with P refitted (degree 9, |error| < 5e-8 on
// z in [0, 10]), so erfc keeps ~2e-7 relative accuracy far into the tail. P - z^2 is rounded once
// and its rounding error (and z2_lo) applied as the factor 1 + lo.
static inline T erfc_core(T z, T z2_hi, T z2_lo, const ExpConsts& k) {
  const T t = V::div(k.one, V::fma(z, V::set1(0.5f), k.one));
  T p = V::set1(0x1.232f54p-3f);
  p = V::fma(p, t, V::set1(-0x1.54fc5ep-1f));
  p = V::fma(p, t, V::set1(0x1.1f4a3ep+0f));
  p = V::fma(p, t, V::set1(-0x1.4d522ap-1f));
  p = V::fma(p, t, V::set1(-0x1.df263cp-4f));
  p = V::fma(p, t, V::set1(0x1.4c988cp-6f));
  p = V::fma(p, t, V::set1(0x1.d00162p-6f));
  p = V::fma(p, t, V::set1(0x1.8d37acp-2f));
  p = V::fma(p, t, V::set1(0x1.ff3a48p-1f));
  p = V::fma(p, t, V::set1(-0x1.43f3f8p+0f));
  const T neg_z2 = V::sub(V::set1(0.0f), z2_hi);
  const T s = V::add(p, neg_z2);
  const T bb = V::sub(s, p);  // TwoSum: the exact rounding error of p + neg_z2
  const T err = V::add(V::sub(p, V::sub(s, bb)), V::sub(neg_z2, bb));
  const T te = V::mul(t, exp_nonpositive(s, k));
  return V::fma(te, V::sub(err, z2_lo), te);
}

// erf: x Q(x^2) below |x| = 1 (degree-6 fit, 2e-7 relative in float), 1 - erfc(|x|) above, with
// |x| clamped to 4 (erf(4) rounds to 1).
static inline T erf_vec(T x, const ExpConsts& k) {
  const T ax = V::min(V::set1(4.0f), V::abs(x));  // NaN stays NaN
  const T x2 = V::mul(ax, ax);
  T q = V::set1(7.889290282037109e-05f);
  q = V::fma(q, x2, V::set1(-0.0008020889363251626f));
  q = V::fma(q, x2, V::set1(0.005189540330320597f));
  q = V::fma(q, x2, V::set1(-0.026854446157813072f));
  q = V::fma(q, x2, V::set1(0.11283600330352783f));
  q = V::fma(q, x2, V::set1(-0.3761262595653534f));
  q = V::fma(q, x2, V::set1(1.1283791065216064f));
  const T small = V::mul(x, q);
  const T x2_lo = V::fma(ax, ax, V::sub(V::set1(0.0f), x2));
  const T big = V::sub(k.one, erfc_core(ax, x2, x2_lo, k));
  const T big_signed = V::select_lt(x, V::set1(0.0f), V::sub(V::set1(0.0f), big), big);
  return V::blend(V::lt(ax, k.one), small, big_signed);
}

// x f(x) forms whose f vanishes at -inf (Gelu, GeluTanh, Silu, Mish) clamp x below, which would
// give the limit -0 at -inf; ONNX Runtime (and the IEEE formula) give -inf * 0 = NaN there.
static inline T nan_at_neg_inf(T x, T r) {
  return V::blend(V::eq(x, V::set1(-__builtin_inff())), V::set1(__builtin_nanf("")), r);
}

// Gelu = x Phi(x), Phi(x) = erfc(-x/sqrt2)/2: erfc of |x|/sqrt2 (x^2/2 exact from an fma), so the
// negative tail keeps its relative accuracy (1 + erf(x) would cancel). |x| is clamped to 14, where
// Phi(-14) underflows to 0: Gelu(-14 and below) = -0, Gelu(-inf) = NaN, Gelu(inf) = inf * 1.
static inline T gelu_vec(T x, const ExpConsts& k) {
  const T half = V::set1(0.5f);
  const T ax = V::min(V::set1(14.0f), V::abs(x));
  const T x2 = V::mul(ax, ax);
  const T x2_lo = V::fma(ax, ax, V::sub(V::set1(0.0f), x2));
  const T e = erfc_core(V::mul(ax, V::set1(0.707106781f)), V::mul(x2, half), V::mul(x2_lo, half), k);
  const T phi = V::select_lt(x, V::set1(0.0f), V::mul(e, half), V::fma(e, V::set1(-0.5f), k.one));
  return nan_at_neg_inf(x, V::mul(V::max(V::set1(-14.0f), x), phi));
}

// GeluTanh = x (1 + tanh(u))/2 = x sigmoid(2u), u = sqrt(2/pi)(x + 0.044715 x^3): no cancellation
// for negative u. x is clamped below at -20, where sigmoid(2u) underflows to 0 (GeluTanh(-inf) = NaN).
static inline T gelu_tanh_vec(T x, const ExpConsts& k) {
  const T xc = V::max(V::set1(-20.0f), x);
  const T two_u = V::mul(xc, V::fma(V::mul(xc, xc), V::set1(2.0f * 0.7978845608f * 0.044715f),
                                    V::set1(2.0f * 0.7978845608f)));
  return nan_at_neg_inf(x, V::mul(xc, sigmoid(two_u, k)));
}

// Silu = x sigmoid(x), x clamped below at -100 where sigmoid underflows to 0 (Silu(-inf) = NaN).
static inline T silu_vec(T x, const ExpConsts& k) {
  const T xc = V::max(V::set1(-100.0f), x);
  return nan_at_neg_inf(x, V::mul(xc, sigmoid(xc, k)));
}

// Mish = x tanh(softplus(x)) with one e = e^-|x| and no cancellation: tanh(log(1 + e^x)) is
// n/(n + 2) with n = e(e + 2) for x <= 0, and (1 + 2e)/(1 + 2e + 2e^2) for x > 0. Clamped at -100
// like Silu (Mish(-inf) = NaN).
static inline T mish_vec(T x, const ExpConsts& k) {
  const T two = V::set1(2.0f);
  const T xc = V::max(V::set1(-100.0f), x);
  const T e = exp_nonpositive(V::sub(V::set1(0.0f), V::abs(xc)), k);
  const T n = V::mul(e, V::add(e, two));
  const T num_pos = V::fma(e, two, k.one);
  const T positive = V::lt(V::set1(0.0f), xc);
  const T num = V::blend(positive, num_pos, n);
  const T den = V::blend(positive, V::fma(V::mul(e, e), two, num_pos), V::add(n, two));
  return nan_at_neg_inf(x, V::mul(xc, V::div(num, den)));
}

// Softplus = max(x, 0) + log(1 + e^-|x|).
static inline T softplus_vec(T x, const ExpConsts& k) {
  return V::add(V::max(V::set1(0.0f), x), log1p_unit(exp_vec(V::sub(V::set1(0.0f), V::abs(x)), k)));
}

static inline T activate_math_inline(T v, ActKind kind, const ExpConsts& k) {
  switch (kind) {
    case ActKind::Gelu: return gelu_vec(v, k);
    case ActKind::GeluTanh: return gelu_tanh_vec(v, k);
    case ActKind::Erf: return erf_vec(v, k);
    case ActKind::Exp: return exp_vec(v, k);
    case ActKind::Log: return log_vec(v);
    case ActKind::Abs: return V::abs(v);
    case ActKind::Sqrt: return V::sqrt(v);
    case ActKind::Reciprocal: return V::div(k.one, v);
    case ActKind::Neg: return V::mul(v, V::set1(-1.0f));  // -0 for 0, as ONNX Neg
    case ActKind::Square: return V::mul(v, v);
    case ActKind::Silu: return silu_vec(v, k);
    case ActKind::Mish: return mish_vec(v, k);
    case ActKind::Softplus: return softplus_vec(v, k);
    default: return v;
  }
}

// Out of line for the fused uses (depthwise, pooling, binary...): their inner loops stay small.
[[gnu::noinline]] static T activate_math(T v, ActKind kind, const ExpConsts& k) {
  return activate_math_inline(v, kind, k);
}

static inline bool is_math_kind(ActKind kind) { return kind >= ActKind::Gelu; }

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
    default: return activate_math(v, act.kind, k);
  }
  return v;
}

// A math kind over a whole array: the kind is switched on once, not per vector.
template <ActKind K>
static void math_activation_loop(float* x, size_t n, const ExpConsts& k) {
  size_t i = 0;
  for (; i + W <= n; i += W) V::store(x + i, activate_math_inline(V::load(x + i), K, k));
  if (i < n) V::store_tail(x + i, activate_math_inline(V::load_tail(x + i, n - i, 0.0f), K, k), n - i);
}

static bool math_activation(float* x, size_t n, ActKind kind, const ExpConsts& k) {
  switch (kind) {
    case ActKind::Gelu: math_activation_loop<ActKind::Gelu>(x, n, k); return true;
    case ActKind::GeluTanh: math_activation_loop<ActKind::GeluTanh>(x, n, k); return true;
    case ActKind::Erf: math_activation_loop<ActKind::Erf>(x, n, k); return true;
    case ActKind::Exp: math_activation_loop<ActKind::Exp>(x, n, k); return true;
    case ActKind::Log: math_activation_loop<ActKind::Log>(x, n, k); return true;
    case ActKind::Abs: math_activation_loop<ActKind::Abs>(x, n, k); return true;
    case ActKind::Sqrt: math_activation_loop<ActKind::Sqrt>(x, n, k); return true;
    case ActKind::Reciprocal: math_activation_loop<ActKind::Reciprocal>(x, n, k); return true;
    case ActKind::Neg: math_activation_loop<ActKind::Neg>(x, n, k); return true;
    case ActKind::Square: math_activation_loop<ActKind::Square>(x, n, k); return true;
    case ActKind::Silu: math_activation_loop<ActKind::Silu>(x, n, k); return true;
    case ActKind::Mish: math_activation_loop<ActKind::Mish>(x, n, k); return true;
    case ActKind::Softplus: math_activation_loop<ActKind::Softplus>(x, n, k); return true;
    default: return false;
  }
}

static void activation_impl(float* x, size_t n, const Activation* act) {
  const ExpConsts k;
  if (math_activation(x, n, act->kind, k)) return;
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

// Multiplier 1 (every depthwise layer of MobileNets and their kin): kDwPixels output pixels of a
// row at a time, so that each weight vector, loaded once per tap, feeds that many accumulators.
// One pixel at a time took a weight load and an input load per FMA and was bound by loads (about
// half of ONNX Runtime's NCHWc speed on MobileNetV3's layers); now it is 9 loads per 8 FMAs.
constexpr size_t kDwPixels = 8;

// Taps of one output row whose input row is inside the image: the weight index, the input offset
// (floats) from the pixel at the window's left edge (column ix0) on the image's first row, and the
// column step kx * dil_w that decides, per pixel, whether the tap's column is inside.
struct RowTaps {
  size_t count = 0;
  size_t weight[kMaxTaps];
  ptrdiff_t offset[kMaxTaps];
  ptrdiff_t dx[kMaxTaps];
};

// All channels of P output pixels; src(t, p) is pixel p's input (channel 0) for row tap t.
template <size_t P, class Src>
static inline void depthwise_pixels(const DepthwiseArgs* a, const RowTaps& taps, Src src, float* out,
                                    const ExpConsts& k) {
  const size_t channels = a->c;
  const T zero = V::set1(0.0f);
  size_t c = 0;
  for (; c + W <= channels; c += W) {
    const T init = a->bias != nullptr ? V::load(a->bias + c) : zero;
    T acc[P];
    EDGESDK_UNROLL_BLOCK for (size_t p = 0; p < P; ++p) acc[p] = init;
    for (size_t t = 0; t < taps.count; ++t) {
      const T w = V::load(a->weights + taps.weight[t] * channels + c);
      EDGESDK_UNROLL_BLOCK for (size_t p = 0; p < P; ++p) acc[p] = V::fma(V::load(src(t, p) + c), w, acc[p]);
    }
    EDGESDK_UNROLL_BLOCK for (size_t p = 0; p < P; ++p) V::store(out + p * a->out_stride + c, activate(acc[p], a->act, k));
  }
  if (c < channels) {
    const size_t n = channels - c;
    const T init = a->bias != nullptr ? V::load_tail(a->bias + c, n, 0.0f) : zero;
    T acc[P];
    EDGESDK_UNROLL_BLOCK for (size_t p = 0; p < P; ++p) acc[p] = init;
    for (size_t t = 0; t < taps.count; ++t) {
      const T w = V::load_tail(a->weights + taps.weight[t] * channels + c, n, 0.0f);
      EDGESDK_UNROLL_BLOCK for (size_t p = 0; p < P; ++p) acc[p] = V::fma(V::load_tail(src(t, p) + c, n, 0.0f), w, acc[p]);
    }
    EDGESDK_UNROLL_BLOCK for (size_t p = 0; p < P; ++p) V::store_tail(out + p * a->out_stride + c, activate(acc[p], a->act, k), n);
  }
}

// Interior blocks of the common windows (3x3 and 5x5, stride 1 or 2, dilation 1 or 2) with all
// of that known at compile time: along a kernel row, input column j feeds every (pixel p, tap kx)
// with p * S + kx * D == j, so each column is loaded once and the kernel row's KW weight vectors
// stay in registers. For 3x3 stride 1 that is 13 loads per 24 FMAs, where depthwise_pixels
// needs 27 (the loads, not the FMAs, bound a depthwise layer).
#define EDGESDK_UNROLL_COLUMNS _Pragma("GCC unroll 32")
// Keeps a loaded vector in a register: without it GCC folds the load into each FMA that uses the
// vector (a memory operand per FMA), which is the load count this kernel exists to avoid.
#if defined(__x86_64__)
#define EDGESDK_IN_REGISTER(x) asm("" : "+v"(x))
#elif defined(__aarch64__)
#define EDGESDK_IN_REGISTER(x) asm("" : "+w"(x))
#else
#define EDGESDK_IN_REGISTER(x) (void)0
#endif
template <size_t P, size_t KW, size_t S, size_t D, bool Tail>
static inline void depthwise_columns_vector(const DepthwiseArgs* a, const RowTaps& taps, const float* base, float* out,
                                           size_t c, size_t n, const ExpConsts& k) {
  constexpr size_t columns = (P - 1) * S + (KW - 1) * D + 1;
  const size_t channels = a->c, rows = taps.count / KW;
  const size_t in_stride = a->in_stride;
  auto load = [n](const float* p) { return Tail ? V::load_tail(p, n, 0.0f) : V::load(p); };
  const T init = a->bias != nullptr ? load(a->bias + c) : V::set1(0.0f);
  T acc[P];
  EDGESDK_UNROLL_BLOCK for (size_t p = 0; p < P; ++p) acc[p] = init;
  for (size_t r = 0; r < rows; ++r) {
    const float* row = base + taps.offset[r * KW] + c;
    const float* weights = a->weights + taps.weight[r * KW] * channels + c;
    T w[KW];
    EDGESDK_UNROLL_BLOCK for (size_t kx = 0; kx < KW; ++kx) w[kx] = load(weights + kx * channels);
    EDGESDK_UNROLL_COLUMNS for (size_t j = 0; j < columns; ++j) {
      T x = load(row + j * in_stride);
      EDGESDK_IN_REGISTER(x);
      EDGESDK_UNROLL_BLOCK for (size_t kx = 0; kx < KW; ++kx) {
        if (j >= kx * D && (j - kx * D) % S == 0 && (j - kx * D) / S < P) {
          const size_t p = (j - kx * D) / S;
          acc[p] = V::fma(x, w[kx], acc[p]);
        }
      }
    }
  }
  EDGESDK_UNROLL_BLOCK for (size_t p = 0; p < P; ++p) {
    const T y = activate(acc[p], a->act, k);
    if (Tail) V::store_tail(out + p * a->out_stride + c, y, n); else V::store(out + p * a->out_stride + c, y);
  }
}

template <size_t P, size_t KW, size_t S, size_t D>
static void depthwise_columns(const DepthwiseArgs* a, const RowTaps& taps, const float* base, float* out,
                              const ExpConsts& k) {
  size_t c = 0;
  for (; c + W <= a->c; c += W) depthwise_columns_vector<P, KW, S, D, false>(a, taps, base, out, c, W, k);
  if (c < a->c) depthwise_columns_vector<P, KW, S, D, true>(a, taps, base, out, c, a->c - c, k);
}

using ColumnsKernel = void (*)(const DepthwiseArgs*, const RowTaps&, const float*, float*, const ExpConsts&);

// The compile-time variant for this window, P pixels, or null (then depthwise_pixels runs).
template <size_t P>
static ColumnsKernel columns_kernel(const DepthwiseArgs* a) {
  const size_t kw = a->kw, s = a->stride_w, d = a->dil_w;
  if (kw == 3 && s == 1 && d == 1) return depthwise_columns<P, 3, 1, 1>;
  if (kw == 3 && s == 2 && d == 1) return depthwise_columns<P, 3, 2, 1>;
  if (kw == 3 && s == 1 && d == 2) return depthwise_columns<P, 3, 1, 2>;
  if (kw == 5 && s == 1 && d == 1) return depthwise_columns<P, 5, 1, 1>;
  if (kw == 5 && s == 2 && d == 1) return depthwise_columns<P, 5, 2, 1>;
  if (kw == 5 && s == 1 && d == 2) return depthwise_columns<P, 5, 1, 2>;
  return nullptr;
}

static void depthwise_m1_rows(const DepthwiseArgs* a, size_t row_begin, size_t row_end, const ExpConsts& k) {
  const ptrdiff_t h = static_cast<ptrdiff_t>(a->h), w = static_cast<ptrdiff_t>(a->w);
  const ptrdiff_t in_stride = static_cast<ptrdiff_t>(a->in_stride);
  const ptrdiff_t stride_w = static_cast<ptrdiff_t>(a->stride_w), pad_left = static_cast<ptrdiff_t>(a->pad_left);
  const ptrdiff_t span_w = static_cast<ptrdiff_t>((a->kw - 1) * a->dil_w);
  // Columns whose whole window is inside the image: ox in [ox_lo, ox_hi).
  const ptrdiff_t ow = static_cast<ptrdiff_t>(a->ow);
  ptrdiff_t ox_lo = (pad_left + stride_w - 1) / stride_w;
  ptrdiff_t ox_hi = w - 1 - span_w + pad_left < 0 ? 0 : (w - 1 - span_w + pad_left) / stride_w + 1;
  ox_hi = ox_hi > ow ? ow : ox_hi;
  if (ox_lo > ox_hi) ox_lo = ox_hi;
  // Taps outside the image read this instead (zeros: they add nothing, as padding does).
  thread_local AlignedBuffer<float> zeros;
  if (zeros.size() < a->in_stride) {
    zeros = AlignedBuffer<float>(a->in_stride);
    for (size_t i = 0; i < a->in_stride; ++i) zeros.data()[i] = 0.0f;
  }
  const float* zero_row = zeros.data();
  // A short border block's pixels, packed (out_stride C), before the real ones are copied out.
  thread_local AlignedBuffer<float> spare;
  if (spare.size() < kDwPixels * a->c) spare = AlignedBuffer<float>(kDwPixels * a->c);
  DepthwiseArgs spare_args = *a;
  spare_args.out_stride = a->c;
  RowTaps taps;
  const float* pointers[kMaxTaps * kDwPixels];
  const ColumnsKernel columns8 = columns_kernel<8>(a), columns4 = columns_kernel<4>(a);
  for (size_t row = row_begin; row < row_end; ++row) {
    const size_t b = row / a->oh, oy = row % a->oh;
    const float* image = a->input + b * a->h * a->w * a->in_stride;
    const ptrdiff_t iy0 = static_cast<ptrdiff_t>(oy * a->stride_h) - static_cast<ptrdiff_t>(a->pad_top);
    taps.count = 0;
    for (size_t ky = 0; ky < a->kh; ++ky) {
      const ptrdiff_t iy = iy0 + static_cast<ptrdiff_t>(ky * a->dil_h);
      if (iy < 0 || iy >= h) continue;
      for (size_t kx = 0; kx < a->kw; ++kx) {
        const ptrdiff_t dx = static_cast<ptrdiff_t>(kx * a->dil_w);
        taps.weight[taps.count] = ky * a->kw + kx;
        taps.offset[taps.count] = (iy * w + dx) * in_stride;
        taps.dx[taps.count] = dx;
        ++taps.count;
      }
    }
    float* out_row = a->output + (b * a->oh + oy) * a->ow * a->out_stride;
    const ptrdiff_t step = stride_w * in_stride;
    // Border pixels (some tap column outside the image) go through a table of input pointers, the
    // zero row standing in for the outside; blocks of 8, 4 or 1 pixels. With 5x5 (and wider)
    // windows, 2-3 pixels left over, and whole rows of at most 8 pixels, go as one block of 4 or 8
    // filled up with pixels that read the zero row and write to `spare`, the real ones copied out:
    // there a pixel at a time (25 taps, 3 loads per FMA) took as long as the rest of the row, and
    // MobileNetV3's 5x5 layers at 7x7 ran at 60% of OpenVINO's speed (22.8 -> 17.9 us at 576
    // channels). With 3x3 windows single pixels stay cheaper than a part-empty block.
    auto border = [&](ptrdiff_t from, ptrdiff_t to) {
      for (ptrdiff_t ox = from; ox < to;) {
        const size_t left_over = static_cast<size_t>(to - ox);
        const size_t block = left_over >= 8 ? 8 : left_over >= 4 ? 4 : left_over > 1 && a->kw >= 5 ? 4 : 1;
        const size_t real = left_over < block ? left_over : block;
        const ptrdiff_t ix0 = ox * stride_w - pad_left;
        for (size_t t = 0; t < taps.count; ++t)
          for (size_t p = 0; p < block; ++p) {
            const ptrdiff_t left = ix0 + static_cast<ptrdiff_t>(p) * stride_w, ix = left + taps.dx[t];
            pointers[t * block + p] = p < real && ix >= 0 && ix < w ? image + left * in_stride + taps.offset[t] : zero_row;
          }
        float* out = out_row + ox * static_cast<ptrdiff_t>(a->out_stride);
        const DepthwiseArgs* args = real == block ? a : &spare_args;
        float* target = real == block ? out : spare.data();
        if (block == 8)
          depthwise_pixels<8>(args, taps, [&](size_t t, size_t p) { return pointers[t * 8 + p]; }, target, k);
        else if (block == 4)
          depthwise_pixels<4>(args, taps, [&](size_t t, size_t p) { return pointers[t * 4 + p]; }, target, k);
        else
          depthwise_pixels<1>(a, taps, [&](size_t t, size_t) { return pointers[t]; }, out, k);
        if (real < block)
          for (size_t p = 0; p < real; ++p)
            for (size_t c = 0; c < a->c; ++c) out[p * a->out_stride + c] = spare.data()[p * a->c + c];
        ox += static_cast<ptrdiff_t>(real);
      }
    };
    // Interior pixels: every tap inside, offsets from the window's left edge, no table.
    auto interior = [&](ptrdiff_t ox, auto pixels) {
      constexpr size_t Q = decltype(pixels)::value;
      const float* base = image + (ox * stride_w - pad_left) * in_stride;
      float* out = out_row + ox * static_cast<ptrdiff_t>(a->out_stride);
      const ColumnsKernel columns = Q == 8 ? columns8 : columns4;
      if (columns != nullptr) {
        columns(a, taps, base, out, k);
        return;
      }
      depthwise_pixels<Q>(a, taps, [&](size_t t, size_t p) { return base + taps.offset[t] + static_cast<ptrdiff_t>(p) * step; },
                          out, k);
    };
    if (ow <= static_cast<ptrdiff_t>(kDwPixels) && a->kw >= 5) {  // a narrow row: one block does it all
      border(0, ow);
      continue;
    }
    border(0, ox_lo);
    ptrdiff_t ox = ox_lo;
    for (; ox + 8 <= ox_hi; ox += 8) interior(ox, std::integral_constant<size_t, 8>());
    for (; ox + 4 <= ox_hi; ox += 4) interior(ox, std::integral_constant<size_t, 4>());
    border(ox, ow);
  }
}

static void depthwise_impl(const DepthwiseArgs* a, size_t row_begin, size_t row_end) {
  const ExpConsts k;
  const size_t oc_count = a->c * a->multiplier;
  const size_t mult = a->multiplier;
  const T zero = V::set1(0.0f);
  if (a->kh * a->kw > kMaxTaps) {  // windows beyond 16x16 taps: no network has them; stay exact
    f32_depthwise__scalar(a, row_begin, row_end);
    return;
  }
  if (mult == 1) {
    depthwise_m1_rows(a, row_begin, row_end, k);
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

// Taps the average divides by when count_include_pad: those inside the padded image.
static inline size_t padded_taps(const PoolArgs* a, size_t oy, size_t ox) {
  size_t rows = 0, cols = 0;
  for (size_t ky = 0; ky < a->kh; ++ky)
    rows += oy * a->stride_h + ky * a->dil_h < a->h + a->pad_top + a->pad_bottom;
  for (size_t kx = 0; kx < a->kw; ++kx)
    cols += ox * a->stride_w + kx * a->dil_w < a->w + a->pad_left + a->pad_right;
  return rows * cols;
}

// Max or sum of W-channel vectors over a pixel's valid taps, U channel blocks at a time (U
// independent chains hide the max/add latency: one chain of 9 taps was latency-bound). Max keeps
// numpy's NaN rule as window_max does (a sum per tap probes for NaN).
template <size_t U>
static inline void pool_blocks(const Taps& taps, const float* input, size_t c, size_t n, bool is_max, T* acc) {
  T probe[U];
  EDGESDK_UNROLL4 for (size_t u = 0; u < U; ++u) {
    acc[u] = V::set1(is_max ? -__builtin_inff() : 0.0f);
    probe[u] = V::set1(0.0f);
  }
  for (size_t t = 0; t < taps.count; ++t) {
    const float* x = input + taps.in_offset[t] + c;
    EDGESDK_UNROLL4 for (size_t u = 0; u < U; ++u) {
      const T v = n == U * W ? V::load(x + u * W) : V::load_tail(x + u * W, n > u * W ? n - u * W : 0, 0.0f);
      if (is_max) {
        acc[u] = V::max(v, acc[u]);
        probe[u] = V::add(probe[u], v);
      } else {
        acc[u] = V::add(acc[u], v);
      }
    }
  }
  if (!is_max) return;
  EDGESDK_UNROLL4 for (size_t u = 0; u < U; ++u) {
    if (!V::any_nan(probe[u])) continue;
    T nan_seen = V::set1(0.0f);
    for (size_t t = 0; t < taps.count; ++t) {
      const float* x = input + taps.in_offset[t] + c + u * W;
      const T v = n == U * W ? V::load(x) : V::load_tail(x, n > u * W ? n - u * W : 0, 0.0f);
      nan_seen = V::bit_or(nan_seen, V::nan_mask(v));
    }
    acc[u] = V::bit_or(acc[u], nan_seen);  // all bits set: a NaN
  }
}

// Windows of more taps than Taps holds (a large AveragePool): every tap checked per channel block.
static void pool_wide_window(const PoolArgs* a, size_t row_begin, size_t row_end, bool is_max) {
  const ExpConsts k;
  for (size_t row = row_begin; row < row_end; ++row) {
    const size_t b = row / a->oh, oy = row % a->oh;
    for (size_t ox = 0; ox < a->ow; ++ox) {
      float* out = a->output + ((b * a->oh + oy) * a->ow + ox) * a->out_stride;
      size_t inside = 0;
      for (size_t ky = 0; ky < a->kh; ++ky) {
        size_t iy;
        if (!tap_inside(oy, a->stride_h, ky, a->dil_h, a->pad_top, a->h, &iy)) continue;
        for (size_t kx = 0; kx < a->kw; ++kx) {
          size_t ix;
          inside += tap_inside(ox, a->stride_w, kx, a->dil_w, a->pad_left, a->w, &ix);
        }
      }
      const size_t count = a->count_include_pad ? padded_taps(a, oy, ox) : inside;
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

// The valid taps of each output pixel are found once (not once per channel block), then the
// channels run 4, 2 or 1 vectors at a time.
static void pool_impl(const PoolArgs* a, size_t row_begin, size_t row_end, bool is_max) {
  if (a->kh * a->kw > kMaxTaps) return pool_wide_window(a, row_begin, row_end, is_max);
  const ExpConsts k;
  Taps taps;
  for (size_t row = row_begin; row < row_end; ++row) {
    const size_t b = row / a->oh, oy = row % a->oh;
    for (size_t ox = 0; ox < a->ow; ++ox) {
      float* out = a->output + ((b * a->oh + oy) * a->ow + ox) * a->out_stride;
      window_taps(b, oy, ox, a->h, a->w, a->kh, a->kw, a->stride_h, a->stride_w, a->dil_h, a->dil_w, a->pad_top,
                  a->pad_left, a->in_stride, &taps);
      const size_t count = is_max ? 1 : a->count_include_pad ? padded_taps(a, oy, ox) : taps.count;
      const T scale = V::set1(count > 0 ? 1.0f / static_cast<float>(count) : 0.0f);
      auto finish = [&](T acc, float* y, size_t n) {
        if (!is_max) acc = V::mul(acc, scale);
        acc = activate(acc, a->act, k);
        if (n == W) V::store(y, acc); else V::store_tail(y, acc, n);
      };
      size_t c = 0;
      T acc[4];
      for (; c + 4 * W <= a->c; c += 4 * W) {
        pool_blocks<4>(taps, a->input, c, 4 * W, is_max, acc);
        EDGESDK_UNROLL4 for (size_t u = 0; u < 4; ++u) finish(acc[u], out + c + u * W, W);
      }
      for (; c + 2 * W <= a->c; c += 2 * W) {
        pool_blocks<2>(taps, a->input, c, 2 * W, is_max, acc);
        finish(acc[0], out + c, W);
        finish(acc[1], out + c + W, W);
      }
      for (; c < a->c; c += W) {
        const size_t n = a->c - c < W ? a->c - c : W;
        pool_blocks<1>(taps, a->input, c, n, is_max, acc);
        finish(acc[0], out + c, n);
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
    f32_softmax__scalar(x, y, n);
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
