// The sparse 1x1 microkernels (ukernels.h, SpmmUkernel) and the non-finite scan, written once over
// the vector type V of the including file (spmm_scalar.cc: 1 lane; spmm_avx2.cc: 8; spmm_avx512.cc:
// 16; spmm_neon.cc: 4) and a weight-fetch policy (fp32, fp16 bits widened here, uint8 codebook
// indices looked up here), so the three value kinds share one kernel body per ISA. The including
// file defines V (T, W, load, store, load_tail, store_tail, set1, fma, max, min, add, any_nan) and
// half_to_float(), inside an anonymous namespace. Not a standalone header.
//
// Per pixel tile (NV vectors of W pixels) and block of NB output rows: NB x NV accumulators start
// at the bias, every stored entry loads NV vectors of its input channel and multiply-adds them with
// its NB weights (broadcast), the input pointer then moves by the entry's channel delta. The same
// pixel tile of the input serves every block in turn, so it stays in L1/L2 while the weights
// stream. The pixels past the last whole tile take one more pass of as many vectors as they need, the
// last one with lane masks (V::load_tail / store_tail): every pass streams all of the weights, so a
// 7 x 7 image (49 pixels) is one pass, not one per power of two.

struct FetchF32 {
  using E = float;
  static float get(const E* e, size_t r, const float* const*) { return e[r]; }
};
struct FetchF16 {
  using E = uint16_t;
  static float get(const E* e, size_t r, const float* const*) { return half_to_float(e[r]); }
};
struct FetchCodebook {
  using E = uint8_t;
  static float get(const E* e, size_t r, const float* const* tables) { return tables[r][e[r]]; }
};

template <size_t NB, size_t NV, class F, bool Tail>
static inline void spmm_tile(size_t nblocks, const float* x, size_t xs, const SpmmBlocks& w, float* y, size_t ys,
                             typename V::T lo, typename V::T hi, size_t tail) {
  using T = typename V::T;
  const typename F::E* e = static_cast<const typename F::E*>(w.values);
  const int32_t* d = w.deltas;
  const ptrdiff_t step = static_cast<ptrdiff_t>(xs);
  for (size_t b = 0; b < nblocks; ++b) {
    T acc[NB][NV];
    const float* tables[NB];
#pragma GCC unroll 8
    for (size_t r = 0; r < NB; ++r) {
      tables[r] = w.tables + (b * NB + r) * w.table_stride;
      const T bv = V::set1(w.bias[b * NB + r]);
#pragma GCC unroll 8
      for (size_t v = 0; v < NV; ++v) acc[r][v] = bv;
    }
    const float* xp = x + static_cast<size_t>(w.first[b]) * xs;
    for (uint32_t j = w.counts[b]; j != 0; --j) {
      T xv[NV];
#pragma GCC unroll 8
      for (size_t v = 0; v < NV; ++v)
        xv[v] = Tail && v == NV - 1 ? V::load_tail(xp + v * V::W, tail, 0.0f) : V::load(xp + v * V::W);
#pragma GCC unroll 8
      for (size_t r = 0; r < NB; ++r) {
        const T wv = V::set1(F::get(e, r, tables));
#pragma GCC unroll 8
        for (size_t v = 0; v < NV; ++v) acc[r][v] = V::fma(xv[v], wv, acc[r][v]);
      }
      e += NB;
      xp += static_cast<ptrdiff_t>(*d++) * step;
    }
#pragma GCC unroll 8
    for (size_t r = 0; r < NB; ++r) {
      float* yr = y + (b * NB + r) * ys;
#pragma GCC unroll 8
      for (size_t v = 0; v < NV; ++v) {
        // Bounds first: max/min return their second operand when either is NaN, so NaN stays NaN.
        const T out = V::min(hi, V::max(lo, acc[r][v]));
        if (Tail && v == NV - 1) V::store_tail(yr + v * V::W, out, tail);
        else V::store(yr + v * V::W, out);
      }
    }
  }
}

// 0 < mc <= NV * W pixels left: one pass of div_up(mc, W) vectors, the last one masked if partial.
template <size_t NB, size_t NV, class F>
static inline void spmm_rest(size_t mc, size_t nblocks, const float* x, size_t xs, const SpmmBlocks& w, float* y,
                             size_t ys, typename V::T lo, typename V::T hi) {
  if constexpr (NV > 1) {
    if (mc <= (NV - 1) * V::W) {
      spmm_rest<NB, NV - 1, F>(mc, nblocks, x, xs, w, y, ys, lo, hi);
      return;
    }
  }
  if (mc == NV * V::W) spmm_tile<NB, NV, F, false>(nblocks, x, xs, w, y, ys, lo, hi, 0);
  else spmm_tile<NB, NV, F, true>(nblocks, x, xs, w, y, ys, lo, hi, mc - (NV - 1) * V::W);
}

template <size_t NB, size_t NV, class F>
static void spmm(size_t mc, size_t nblocks, const float* x, size_t xs, const SpmmBlocks* w, float* y, size_t ys,
                 const MinMax* clamp) {
  const typename V::T lo = V::set1(clamp->min), hi = V::set1(clamp->max);
  constexpr size_t kTile = NV * V::W;
  for (; mc >= kTile; mc -= kTile, x += kTile, y += kTile)
    spmm_tile<NB, NV, F, false>(nblocks, x, xs, *w, y, ys, lo, hi, 0);
  if (mc != 0) spmm_rest<NB, NV, F>(mc, nblocks, x, xs, *w, y, ys, lo, hi);
}

// x * 0 is 0 for finite x and NaN for NaN and +-inf: four independent sums of those (one fused
// multiply-add per vector, no branch) are NaN at the end exactly when the rows hold a non-finite value.
static bool nonfinite_scan(const float* x, size_t rows, size_t xs, size_t n) {
  using T = typename V::T;
  const T zero = V::set1(0.0f);
  T a0 = zero, a1 = zero, a2 = zero, a3 = zero;
  for (size_t r = 0; r < rows; ++r, x += xs) {
    size_t i = 0;
    for (; i + 4 * V::W <= n; i += 4 * V::W) {
      a0 = V::fma(V::load(x + i), zero, a0);
      a1 = V::fma(V::load(x + i + V::W), zero, a1);
      a2 = V::fma(V::load(x + i + 2 * V::W), zero, a2);
      a3 = V::fma(V::load(x + i + 3 * V::W), zero, a3);
    }
    for (; i + V::W <= n; i += V::W) a0 = V::fma(V::load(x + i), zero, a0);
    if (i < n) a1 = V::fma(V::load_tail(x + i, n - i, 0.0f), zero, a1);
  }
  return V::any_nan(V::add(V::add(a0, a1), V::add(a2, a3)));
}
