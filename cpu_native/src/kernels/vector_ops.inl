// ISA-generic kernels of the newer operator families (ukernels.h: row normalisation, log-softmax,
// softmax along an axis, reductions, arg-reductions, the transposed-convolution gather, resize),
// written against the vector traits V like vector_kernels.inl, which must be included first (this
// file uses its helpers: ExpConsts, exp_nonpositive, log_vec, activate, kLaneIndex). Included by
// vector_kernels_<isa>.cc inside their anonymous namespace; not a standalone header.

// ---- sums and extremes of one contiguous row ------------------------------------------------------
// Floats summed in vector registers before the block's total is added in double: the rounding
// error of a sum grows with the block (4 accumulators per lane), not with the row.
constexpr size_t kSumBlock = 4096;

template <bool Squares>
static inline T sum_step(T acc, T v, T center) {
  if (!Squares) return V::add(acc, v);
  const T d = V::sub(v, center);
  return V::fma(d, d, acc);
}

// Sum of x, or (Squares) of (x - center)^2, over n values.
template <bool Squares>
static double row_sum(const float* x, size_t n, float center) {
  const T c = V::set1(center), zero = V::set1(0.0f);
  double total = 0.0;
  for (size_t b0 = 0; b0 < n; b0 += kSumBlock) {
    const size_t b1 = n - b0 < kSumBlock ? n : b0 + kSumBlock;
    T acc[4] = {zero, zero, zero, zero};
    size_t i = b0;
    for (; i + 4 * W <= b1; i += 4 * W)
      EDGESDK_UNROLL4 for (size_t u = 0; u < 4; ++u) acc[u] = sum_step<Squares>(acc[u], V::load(x + i + u * W), c);
    for (; i + W <= b1; i += W) acc[0] = sum_step<Squares>(acc[0], V::load(x + i), c);
    // Dead lanes hold the center (squares) or 0 (sums): they add nothing.
    if (i < b1) acc[1] = sum_step<Squares>(acc[1], V::load_tail(x + i, b1 - i, Squares ? center : 0.0f), c);
    total += static_cast<double>(V::hsum(V::add(V::add(acc[0], acc[1]), V::add(acc[2], acc[3]))));
  }
  return total;
}

// max (IsMax) or min of n >= 0 values; NaN if any is NaN (max/min alone would drop it on x86, so
// the NaN lanes are ORed in), -inf / +inf for n = 0.
template <bool IsMax>
static float row_extreme(const float* x, size_t n) {
  const float inf = __builtin_inff();
  T m = V::set1(IsMax ? -inf : inf), nan = V::set1(0.0f);
  size_t i = 0;
  for (; i + W <= n; i += W) {
    const T v = V::load(x + i);
    m = IsMax ? V::max(v, m) : V::min(v, m);
    nan = V::bit_or(nan, V::nan_mask(v));
  }
  if (i < n) {
    const T v = V::load_tail(x + i, n - i, IsMax ? -inf : inf);
    m = IsMax ? V::max(v, m) : V::min(v, m);
    nan = V::bit_or(nan, V::nan_mask(v));
  }
  if (V::any_nan(nan)) return __builtin_nanf("");
  return IsMax ? V::hmax(m) : -V::hmax(V::sub(V::set1(0.0f), m));
}

// sum of e^(x - mx) over a row whose max is mx (finite: the callers handle the others).
static double row_sum_exp(const float* x, size_t n, float mx, const ExpConsts& k) {
  const T mv = V::set1(mx);
  T acc0 = V::set1(0.0f), acc1 = V::set1(0.0f);
  size_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    acc0 = V::add(acc0, exp_nonpositive(V::sub(V::load(x + i), mv), k));
    acc1 = V::add(acc1, exp_nonpositive(V::sub(V::load(x + i + W), mv), k));
  }
  for (; i + W <= n; i += W) acc0 = V::add(acc0, exp_nonpositive(V::sub(V::load(x + i), mv), k));
  if (i < n) acc1 = V::add(acc1, exp_nonpositive(V::sub(V::load_tail(x + i, n - i, -__builtin_inff()), mv), k));
  return static_cast<double>(V::hsum(V::add(acc0, acc1)));
}

// ---- row normalisation --------------------------------------------------------------------------
// y = ((x - mean) * inv) * scale + bias, per column.
static void normalize_columns(const float* x, float* y, size_t n, float mean, float inv, const float* scale,
                              const float* bias) {
  const T mv = V::set1(mean), iv = V::set1(inv), zero = V::set1(0.0f);
  size_t i = 0;
  for (; i + W <= n; i += W) {
    const T b = bias != nullptr ? V::load(bias + i) : zero;
    V::store(y + i, V::fma(V::mul(V::sub(V::load(x + i), mv), iv), V::load(scale + i), b));
  }
  if (i < n) {
    const size_t r = n - i;
    const T b = bias != nullptr ? V::load_tail(bias + i, r, 0.0f) : zero;
    V::store_tail(y + i, V::fma(V::mul(V::sub(V::load_tail(x + i, r, 0.0f), mv), iv), V::load_tail(scale + i, r, 0.0f), b), r);
  }
}

// y = (x - mean) * s + b with one s, b for the row.
static void normalize_row(const float* x, float* y, size_t n, float mean, float s, float b) {
  const T mv = V::set1(mean), sv = V::set1(s), bv = V::set1(b);
  size_t i = 0;
  for (; i + W <= n; i += W) V::store(y + i, V::fma(V::sub(V::load(x + i), mv), sv, bv));
  if (i < n) V::store_tail(y + i, V::fma(V::sub(V::load_tail(x + i, n - i, 0.0f), mv), sv, bv), n - i);
}

static void row_norm_impl(const RowNormArgs* a, size_t row_begin, size_t row_end) {
  const size_t n = a->n;
  for (size_t r = row_begin; r < row_end; ++r) {
    const float* x = a->x + r * n;
    float* y = a->y + r * n;
    const float mean = static_cast<float>(row_sum<false>(x, n, 0.0f) / static_cast<double>(n));
    const double var = row_sum<true>(x, n, mean) / static_cast<double>(n);
    const float inv = static_cast<float>(1.0 / __builtin_sqrt(var + static_cast<double>(a->eps)));
    if (a->per_column) {
      normalize_columns(x, y, n, mean, inv, a->scale, a->bias);
    } else {
      const size_t ch = r % a->channels;
      normalize_row(x, y, n, mean, a->scale[ch] * inv, a->bias != nullptr ? a->bias[ch] : 0.0f);
    }
  }
}

// ---- log-softmax of a row: x - max - log(sum e^(x - max)) -----------------------------------------
static void log_softmax_impl(const float* x, float* y, size_t n) {
  if (n == 0) return;
  const ExpConsts k;
  const float mx = row_extreme<true>(x, n);
  // A NaN or +inf max makes every x - max - log(...) NaN, and an all -inf row too (-inf - -inf):
  // the IEEE result of the formula, as in ONNX Runtime.
  const float lse = __builtin_isfinite(mx) ? static_cast<float>(__builtin_log(row_sum_exp(x, n, mx, k)))
                                            : __builtin_nanf("");
  const T mv = V::set1(mx), lv = V::set1(lse);
  size_t i = 0;
  for (; i + W <= n; i += W) V::store(y + i, V::sub(V::sub(V::load(x + i), mv), lv));
  if (i < n) V::store_tail(y + i, V::sub(V::sub(V::load_tail(x + i, n - i, 0.0f), mv), lv), n - i);
}

// ---- the strided families: `lanes` columns at once, rows `inner` apart -------------------------------
static inline T load_lanes(const float* p, size_t lanes, float fill) {
  return lanes == W ? V::load(p) : V::load_tail(p, lanes, fill);
}
static inline void store_lanes(float* p, T v, size_t lanes) {
  if (lanes == W) V::store(p, v); else V::store_tail(p, v, lanes);
}

// Column max (IsMax) or min along the axis, NaN lanes ORed in.
template <bool IsMax>
static T column_extreme(const float* x, size_t axis, size_t inner, size_t lanes) {
  const float inf = __builtin_inff();
  T m = V::set1(IsMax ? -inf : inf), nan = V::set1(0.0f);
  for (size_t j = 0; j < axis; ++j) {
    const T v = load_lanes(x + j * inner, lanes, 0.0f);
    m = IsMax ? V::max(v, m) : V::min(v, m);
    nan = V::bit_or(nan, V::nan_mask(v));
  }
  return V::bit_or(m, nan);
}

static void softmax_columns(const float* x, float* y, size_t axis, size_t inner, size_t lanes, bool log,
                            const ExpConsts& k) {
  const T m = column_extreme<true>(x, axis, inner, lanes);
  T s = V::set1(0.0f);
  for (size_t j = 0; j < axis; ++j) {  // -inf entries give 0; a NaN or +inf max NaN (see above)
    const T e = exp_nonpositive(V::sub(load_lanes(x + j * inner, lanes, 0.0f), m), k);
    s = V::add(s, e);
    if (!log) store_lanes(y + j * inner, e, lanes);  // x and y may alias: x[j] is read first
  }
  if (log) {
    const T ls = log_vec(s);
    for (size_t j = 0; j < axis; ++j)
      store_lanes(y + j * inner, V::sub(V::sub(load_lanes(x + j * inner, lanes, 0.0f), m), ls), lanes);
  } else {
    const T r = V::div(k.one, s);
    for (size_t j = 0; j < axis; ++j) store_lanes(y + j * inner, V::mul(load_lanes(y + j * inner, lanes, 0.0f), r), lanes);
  }
}

// Calls f(slice offset, first column, column count) for units [unit_begin, unit_end) (ukernels.h).
template <class F>
static inline void for_each_column_block(const AxisShape& s, size_t unit_begin, size_t unit_end, F f) {
  const size_t blocks = axis_blocks(s);
  for (size_t u = unit_begin; u < unit_end; ++u) {
    const size_t o = u / blocks, c0 = (u % blocks) * s.block;
    const size_t c1 = s.inner - c0 < s.block ? s.inner : c0 + s.block;
    f(o * s.axis * s.inner, c0, c1 - c0);
  }
}

static void softmax_axis_impl(const SoftmaxAxisArgs* a, size_t unit_begin, size_t unit_end) {
  const ExpConsts k;
  const AxisShape& s = a->shape;
  for_each_column_block(s, unit_begin, unit_end, [&](size_t base, size_t c0, size_t count) {
    for (size_t c = 0; c < count; c += W)
      softmax_columns(a->x + base + c0 + c, a->y + base + c0 + c, s.axis, s.inner, min_size(W, count - c), a->log, k);
  });
}

// ---- reductions -----------------------------------------------------------------------------------
static float finish_sum(double sum, ReduceOp op, size_t n) {
  if (op == ReduceOp::Mean) return static_cast<float>(sum / static_cast<double>(n));
  if (op == ReduceOp::L2) return static_cast<float>(__builtin_sqrt(sum));
  return static_cast<float>(sum);
}

// log(sum e^x) = max + log(sum e^(x - max)); a NaN, +inf or -inf max is the result itself.
static float row_log_sum_exp(const float* x, size_t n, const ExpConsts& k) {
  const float mx = row_extreme<true>(x, n);
  if (!__builtin_isfinite(mx)) return mx;
  return mx + static_cast<float>(__builtin_log(row_sum_exp(x, n, mx, k)));
}

static float reduce_row(const float* x, size_t n, ReduceOp op, const ExpConsts& k) {
  switch (op) {
    case ReduceOp::Max: return row_extreme<true>(x, n);
    case ReduceOp::Min: return row_extreme<false>(x, n);
    case ReduceOp::LogSumExp: return row_log_sum_exp(x, n, k);
    case ReduceOp::SumSquare:
    case ReduceOp::L2: return finish_sum(row_sum<true>(x, n, 0.0f), op, n);
    default: return finish_sum(row_sum<false>(x, n, 0.0f), op, n);
  }
}

// Column sums along the axis: blocks of kAxisBlock rows summed in one register, then folded into a
// second, so the error grows with the block rather than the axis.
constexpr size_t kAxisBlock = 256;

template <bool Squares>
static T column_sum(const float* x, size_t axis, size_t inner, size_t lanes) {
  const T zero = V::set1(0.0f);
  T total = zero;
  for (size_t j0 = 0; j0 < axis; j0 += kAxisBlock) {
    const size_t j1 = axis - j0 < kAxisBlock ? axis : j0 + kAxisBlock;
    T acc = zero;
    for (size_t j = j0; j < j1; ++j) acc = sum_step<Squares>(acc, load_lanes(x + j * inner, lanes, 0.0f), zero);
    total = V::add(total, acc);
  }
  return total;
}

static T column_log_sum_exp(const float* x, size_t axis, size_t inner, size_t lanes, const ExpConsts& k) {
  const T m = column_extreme<true>(x, axis, inner, lanes);
  T s = V::set1(0.0f);
  for (size_t j = 0; j < axis; ++j) s = V::add(s, exp_nonpositive(V::sub(load_lanes(x + j * inner, lanes, 0.0f), m), k));
  const T infinite = V::eq(V::abs(m), V::set1(__builtin_inff()));  // +-inf max: the result (see above)
  return V::blend(infinite, m, V::add(m, log_vec(s)));
}

static T reduce_columns(const float* x, size_t axis, size_t inner, size_t lanes, ReduceOp op, const ExpConsts& k) {
  switch (op) {
    case ReduceOp::Max: return column_extreme<true>(x, axis, inner, lanes);
    case ReduceOp::Min: return column_extreme<false>(x, axis, inner, lanes);
    case ReduceOp::LogSumExp: return column_log_sum_exp(x, axis, inner, lanes, k);
    case ReduceOp::SumSquare: return column_sum<true>(x, axis, inner, lanes);
    case ReduceOp::L2: return V::sqrt(column_sum<true>(x, axis, inner, lanes));
    case ReduceOp::Mean: return V::div(column_sum<false>(x, axis, inner, lanes), V::set1(static_cast<float>(axis)));
    default: return column_sum<false>(x, axis, inner, lanes);
  }
}

static void reduce_impl(const ReduceArgs* a, size_t unit_begin, size_t unit_end) {
  const ExpConsts k;
  const AxisShape& s = a->shape;
  if (s.inner == 1) {
    for (size_t r = unit_begin; r < unit_end; ++r) a->y[r] = reduce_row(a->x + r * s.axis, s.axis, a->op, k);
    return;
  }
  for_each_column_block(s, unit_begin, unit_end, [&](size_t base, size_t c0, size_t count) {
    float* y = a->y + base / s.axis + c0;  // base = o * axis * inner: the output slice is o * inner
    for (size_t c = 0; c < count; c += W) {
      const size_t lanes = min_size(W, count - c);
      store_lanes(y + c, reduce_columns(a->x + base + c0 + c, s.axis, s.inner, lanes, a->op, k), lanes);
    }
  });
}

// ---- arg-reductions ------------------------------------------------------------------------------
// Index of the first (or last) element of a row equal to `target`, or NaN when target is NaN.
static size_t find_in_row(const float* x, size_t n, float target, bool last) {
  const bool nan = target != target;
  const T tv = V::set1(target);
  auto hit = [&](float v) { return nan ? v != v : v == target; };
  auto lanes_hit = [&](T v) { return V::any_set(nan ? V::nan_mask(v) : V::eq(v, tv)); };
  if (!last) {
    size_t i = 0;
    for (; i + W <= n && !lanes_hit(V::load(x + i)); i += W) {}
    for (; i < n; ++i)
      if (hit(x[i])) return i;
  } else {
    size_t i = n;
    for (; i >= W && !lanes_hit(V::load(x + i - W)); i -= W) {}
    while (i-- > 0)
      if (hit(x[i])) return i;
  }
  return 0;  // not reached: target is one of the values
}

// Which lanes take v over the current best (ArgReduceArgs: NaN is the extreme; ties by first/last).
static inline T arg_takes(T v, T best, bool is_max, bool last) {
  const T nv = V::nan_mask(v);
  if (last) return V::bit_or(is_max ? V::le(best, v) : V::le(v, best), nv);
  return V::bit_or(is_max ? V::lt(best, v) : V::lt(v, best), V::bit_andnot(V::nan_mask(best), nv));
}

static void arg_columns(const float* x, int64_t* y, size_t axis, size_t inner, size_t lanes, bool is_max, bool last) {
  T best = load_lanes(x, lanes, 0.0f), idx = V::set1(0.0f);
  for (size_t j = 1; j < axis; ++j) {
    const T v = load_lanes(x + j * inner, lanes, 0.0f);
    const T take = arg_takes(v, best, is_max, last);
    best = V::blend(take, v, best);
    idx = V::blend(take, V::set1(static_cast<float>(j)), idx);
  }
  float tmp[W];
  V::store(tmp, idx);
  for (size_t l = 0; l < lanes; ++l) y[l] = static_cast<int64_t>(tmp[l]);
}

static void argreduce_impl(const ArgReduceArgs* a, size_t unit_begin, size_t unit_end) {
  const AxisShape& s = a->shape;
  if (s.axis > (size_t{1} << 24)) {  // indices are carried as floats, exact up to 2^24
    f32_argreduce__scalar(a, unit_begin, unit_end);
    return;
  }
  if (s.inner == 1) {
    for (size_t r = unit_begin; r < unit_end; ++r) {
      const float* x = a->x + r * s.axis;
      const float ext = a->is_max ? row_extreme<true>(x, s.axis) : row_extreme<false>(x, s.axis);
      a->y[r] = static_cast<int64_t>(find_in_row(x, s.axis, ext, a->select_last));
    }
    return;
  }
  for_each_column_block(s, unit_begin, unit_end, [&](size_t base, size_t c0, size_t count) {
    int64_t* y = a->y + base / s.axis + c0;
    for (size_t c = 0; c < count; c += W)
      arg_columns(a->x + base + c0 + c, y + c, s.axis, s.inner, min_size(W, count - c), a->is_max, a->select_last);
  });
}

// ---- transposed convolution: the gather after the GEMM -----------------------------------------------
// Taps (k, input position) that reach output position o along one axis: o = i*stride - pad + k*dil.
static size_t reaching_taps(size_t o, size_t pad, size_t stride, size_t dil, size_t kernel, size_t extent,
                            size_t* taps, size_t* inputs) {
  size_t count = 0;
  for (size_t kk = 0; kk < kernel; ++kk) {
    const ptrdiff_t t = static_cast<ptrdiff_t>(o + pad) - static_cast<ptrdiff_t>(kk * dil);
    if (t < 0 || t % static_cast<ptrdiff_t>(stride) != 0) continue;
    const size_t i = static_cast<size_t>(t) / stride;
    if (i >= extent) continue;
    taps[count] = kk;
    inputs[count] = i;
    ++count;
  }
  return count;
}

// out[0, len) = act(bias + sum_t src[t][0, len) (* wts[t][0, len) when wts is given)).
static void gather_channels(const float* const* src, const float* const* wts, size_t ntaps, const float* bias,
                            float* out, size_t len, const Activation& act, const ExpConsts& k) {
  const T zero = V::set1(0.0f);
  for (size_t c = 0; c < len; c += W) {
    const size_t lanes = min_size(W, len - c);
    T acc = bias != nullptr ? load_lanes(bias + c, lanes, 0.0f) : zero;
    if (wts != nullptr) {
      for (size_t t = 0; t < ntaps; ++t) acc = V::fma(load_lanes(src[t] + c, lanes, 0.0f), load_lanes(wts[t] + c, lanes, 0.0f), acc);
    } else {
      for (size_t t = 0; t < ntaps; ++t) acc = V::add(acc, load_lanes(src[t] + c, lanes, 0.0f));
    }
    store_lanes(out + c, activate(acc, act, k), lanes);
  }
}

// One output pixel: per group, the col segments of its reaching taps (or, depthwise, the input pixels
// and the per-channel tap weights).
static void col2im_pixel(const Col2ImArgs* a, size_t b, const size_t* ky, const size_t* iy, size_t ny,
                         const size_t* kx, const size_t* ix, size_t nx, float* out, const ExpConsts& k) {
  const float* src[kMaxCol2ImTaps];
  const float* wts[kMaxCol2ImTaps];
  const size_t taps = a->kh * a->kw;
  size_t n = 0;
  for (size_t i = 0; i < ny; ++i)
    for (size_t j = 0; j < nx; ++j, ++n) {
      const size_t pixel = (b * a->h + iy[i]) * a->w + ix[j], tap = ky[i] * a->kw + kx[j];
      if (a->col == nullptr) {
        src[n] = a->x + pixel * a->c_out;
        wts[n] = a->dw_weights + tap * a->c_out;
      } else {
        src[n] = a->col + pixel * a->col_stride + tap * a->cout_g;
      }
    }
  if (a->col == nullptr) {
    gather_channels(src, wts, n, a->bias, out, a->c_out, a->act, k);
    return;
  }
  for (size_t g = 0; g < a->groups; ++g) {
    const float* bias = a->bias != nullptr ? a->bias + g * a->cout_g : nullptr;
    gather_channels(src, nullptr, n, bias, out + g * a->cout_g, a->cout_g, a->act, k);
    for (size_t t = 0; t < n; ++t) src[t] += taps * a->cout_g;  // the next group's segment
  }
}

static void col2im_impl(const Col2ImArgs* a, size_t row_begin, size_t row_end) {
  const ExpConsts k;
  size_t ky[kMaxCol2ImTaps], iy[kMaxCol2ImTaps], kx[kMaxCol2ImTaps], ix[kMaxCol2ImTaps];
  for (size_t row = row_begin; row < row_end; ++row) {
    const size_t b = row / a->oh, oy = row % a->oh;
    const size_t ny = reaching_taps(oy, a->pad_top, a->stride_h, a->dil_h, a->kh, a->h, ky, iy);
    for (size_t ox = 0; ox < a->ow; ++ox) {
      const size_t nx = reaching_taps(ox, a->pad_left, a->stride_w, a->dil_w, a->kw, a->w, kx, ix);
      col2im_pixel(a, b, ky, iy, ny, kx, ix, nx, a->y + (row * a->ow + ox) * a->c_out, k);
    }
  }
}

// ---- resize -----------------------------------------------------------------------------------------
static void copy_floats(float* dst, const float* src, size_t n) {
  size_t i = 0;
  for (; i + W <= n; i += W) V::store(dst + i, V::load(src + i));
  if (i < n) V::store_tail(dst + i, V::load_tail(src + i, n - i, 0.0f), n - i);
}

// dst[o] = src[idx[o]] for o < n.
static void gather_row(const float* src, const int32_t* idx, float* dst, size_t n) {
  size_t o = 0;
  for (; o + W <= n; o += W) V::store(dst + o, V::gather(src, idx + o));
  if (o < n) V::store_tail(dst + o, V::gather_tail(src, idx + o, n - o), n - o);
}

// dst[o] = src[o / 2]: each value written twice.
static void duplicate_row(const float* src, float* dst, size_t n) {
  size_t o = 0;
  for (; o + 2 * W <= n; o += 2 * W) {
    T lo, hi;
    V::dup2(V::load(src + o / 2), &lo, &hi);
    V::store(dst + o, lo);
    V::store(dst + o + W, hi);
  }
  for (; o < n; ++o) dst[o] = src[o / 2];
}

static void resize_nearest_impl(const ResizeArgs* a, size_t row_begin, size_t row_end, float* /*scratch*/) {
  for (size_t row = row_begin; row < row_end; ++row) {
    const size_t plane = row / a->oh, oy = row % a->oh;
    if (a->nhwc) {  // plane = image; whole pixels of C channels
      const float* src = a->x + (plane * a->h + static_cast<size_t>(a->iy0[oy])) * a->w * a->c;
      float* dst = a->y + row * a->ow * a->c;
      for (size_t ox = 0; ox < a->ow; ++ox) copy_floats(dst + ox * a->c, src + static_cast<size_t>(a->ix0[ox]) * a->c, a->c);
      continue;
    }
    float* dst = a->y + row * a->ow;
    if (row > row_begin && oy > 0 && a->iy0[oy] == a->iy0[oy - 1]) {  // the row just written again
      copy_floats(dst, dst - a->ow, a->ow);
      continue;
    }
    const float* src = a->x + (plane * a->h + static_cast<size_t>(a->iy0[oy])) * a->w;
    if (a->x2_nearest) duplicate_row(src, dst, a->ow); else gather_row(src, a->ix0, dst, a->ow);
  }
}

static inline T lerp(T v0, T v1, T w, const ExpConsts& k) { return V::fma(w, v1, V::mul(V::sub(k.one, w), v0)); }

static void resize_linear_nhwc_row(const ResizeArgs* a, size_t row, const ExpConsts& k) {
  const size_t b = row / a->oh, oy = row % a->oh, c = a->c;
  const float* r0 = a->x + (b * a->h + static_cast<size_t>(a->iy0[oy])) * a->w * c;
  const float* r1 = a->x + (b * a->h + static_cast<size_t>(a->iy1[oy])) * a->w * c;
  const T wy = V::set1(a->wy[oy]);
  float* dst = a->y + row * a->ow * c;
  for (size_t ox = 0; ox < a->ow; ++ox, dst += c) {
    const size_t x0 = static_cast<size_t>(a->ix0[ox]) * c, x1 = static_cast<size_t>(a->ix1[ox]) * c;
    const T wx = V::set1(a->wx[ox]);
    for (size_t ch = 0; ch < c; ch += W) {
      const size_t lanes = min_size(W, c - ch);
      const T top = lerp(load_lanes(r0 + x0 + ch, lanes, 0.0f), load_lanes(r0 + x1 + ch, lanes, 0.0f), wx, k);
      const T bottom = lerp(load_lanes(r1 + x0 + ch, lanes, 0.0f), load_lanes(r1 + x1 + ch, lanes, 0.0f), wx, k);
      store_lanes(dst + ch, lerp(top, bottom, wy, k), lanes);
    }
  }
}

// One source row interpolated along x into dst (OW values).
static void lerp_row_x(const ResizeArgs* a, const float* src, float* dst, const ExpConsts& k) {
  size_t o = 0;
  for (; o + W <= a->ow; o += W)
    V::store(dst + o, lerp(V::gather(src, a->ix0 + o), V::gather(src, a->ix1 + o), V::load(a->wx + o), k));
  if (o < a->ow) {
    const size_t n = a->ow - o;
    V::store_tail(dst + o, lerp(V::gather_tail(src, a->ix0 + o, n), V::gather_tail(src, a->ix1 + o, n),
                                V::load_tail(a->wx + o, n, 0.0f), k), n);
  }
}

// nchw: the two x-interpolated source rows an output row needs, from a two-row cache in scratch
// (consecutive output rows mostly share source rows).
struct RowCache {
  float* buf[2];
  size_t key[2] = {~size_t{0}, ~size_t{0}};
  // The cached row for source row `src_row` (global index plane*H + y), filling a slot other than `keep`.
  const float* get(const ResizeArgs* a, size_t src_row, int keep, int* slot, const ExpConsts& k) {
    for (int s = 0; s < 2; ++s)
      if (key[s] == src_row) { *slot = s; return buf[s]; }
    const int s = keep == 0 ? 1 : 0;
    lerp_row_x(a, a->x + src_row * a->w, buf[s], k);
    key[s] = src_row;
    *slot = s;
    return buf[s];
  }
};

static void resize_linear_impl(const ResizeArgs* a, size_t row_begin, size_t row_end, float* scratch) {
  const ExpConsts k;
  if (a->nhwc) {
    for (size_t row = row_begin; row < row_end; ++row) resize_linear_nhwc_row(a, row, k);
    return;
  }
  RowCache cache;
  cache.buf[0] = scratch;
  cache.buf[1] = scratch + a->ow;
  for (size_t row = row_begin; row < row_end; ++row) {
    const size_t plane = row / a->oh, oy = row % a->oh;
    int s0 = -1, s1 = -1;
    const float* h0 = cache.get(a, plane * a->h + static_cast<size_t>(a->iy0[oy]), -1, &s0, k);
    const float* h1 = cache.get(a, plane * a->h + static_cast<size_t>(a->iy1[oy]), s0, &s1, k);
    const T wy = V::set1(a->wy[oy]);
    float* dst = a->y + row * a->ow;
    size_t o = 0;
    for (; o + W <= a->ow; o += W) V::store(dst + o, lerp(V::load(h0 + o), V::load(h1 + o), wy, k));
    if (o < a->ow) {
      const size_t n = a->ow - o;
      V::store_tail(dst + o, lerp(V::load_tail(h0 + o, n, 0.0f), V::load_tail(h1 + o, n, 0.0f), wy, k), n);
    }
  }
}
