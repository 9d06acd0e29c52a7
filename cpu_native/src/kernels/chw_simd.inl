// ISA-generic CHW (planar) kernels (ukernels.h, "CHW (planar) kernels"): the depthwise
// convolutions of the MobileNet/EfficientNet windows (3x3 and 5x5, stride 1 and 2), global average
// pooling and the f32 transpose tile. Included by vector_kernels_<isa>.cc after vector_kernels.inl
// (V, T, W, ExpConsts, activate); the few operations V lacks (lane-range loads, even/odd
// deinterleave, the transpose tile) are written per ISA below. Not a standalone header.
//
// Depthwise, vectorised along the output row: W outputs of a row a vector. A block is NV vectors
// of two output rows (2 * NV independent accumulator chains: the FMA latency needs about 8), and
// every input vector is loaded straight from the plane at the tap's offset (stride 1) or as two
// vectors split into even and odd columns (stride 2). The loads, not the FMAs, would bound this
// layout if the weights were reloaded, so the KH*KW weight broadcasts stay in registers.
// Padding is never materialised: an input row above or below the plane reads a shared zero row,
// and a block whose columns cross the plane's left or right edge (Edge) loads with lane masks that
// zero the columns outside [0, W): the tap then adds 0 * w, which leaves the sum as it was. The
// interior blocks load without masks. Each output is one FMA chain from the bias over its taps in
// (ky, kx) order, as the scalar kernel (chw_scalar.cc), so the sums agree bit for bit.

// Vectors per column group (NV <= 4): 8 accumulator chains with the row pair. (AVX2 measured the
// same with 2, where the 16 registers spill some weights either way.)
#define EDGESDK_CHW_BLOCKS 4
#define EDGESDK_UNROLL_CHW _Pragma("GCC unroll 64")

// Lane masks of the loads at a row's edges: lanes l whose column start + l is in [0, w). Computed
// once per column group and kept for all its rows. The address arithmetic is done on integers:
// start may be negative at the left edge (masked lanes are not read, so nothing there is touched).
static inline const float* chw_at(const float* row, ptrdiff_t start) {
  return reinterpret_cast<const float*>(reinterpret_cast<uintptr_t>(row) + start * static_cast<ptrdiff_t>(sizeof(float)));
}
#if defined(__AVX512F__)
using ColMask = __mmask16;
static inline ColMask chw_mask(ptrdiff_t start, ptrdiff_t w) {
  const ptrdiff_t lo = start < 0 ? -start : 0, hi = w - start < 16 ? w - start : 16;
  if (hi <= lo) return 0;
  return static_cast<ColMask>(((1u << hi) - 1u) & ~((1u << lo) - 1u));
}
static inline T chw_load_masked(const float* row, ptrdiff_t start, ColMask m) {
  return _mm512_maskz_loadu_ps(m, chw_at(row, start));
}
#elif defined(__AVX2__)
using ColMask = __m256i;
static inline ColMask chw_mask(ptrdiff_t start, ptrdiff_t w) {
  const ptrdiff_t lo = start < 0 ? -start : 0, hi = w - start < 8 ? w - start : 8;
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_and_si256(_mm256_cmpgt_epi32(idx, _mm256_set1_epi32(static_cast<int>(lo) - 1)),
                          _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(hi < lo ? lo : hi)), idx));
}
static inline T chw_load_masked(const float* row, ptrdiff_t start, ColMask m) {
  return _mm256_maskload_ps(chw_at(row, start), m);
}
#else
struct ColMask {
  ptrdiff_t lo, hi;
};
static inline ColMask chw_mask(ptrdiff_t start, ptrdiff_t w) {
  const ptrdiff_t lo = start < 0 ? -start : 0, hi = w - start < static_cast<ptrdiff_t>(W) ? w - start : W;
  return {lo, hi < lo ? lo : hi};
}
static inline T chw_load_masked(const float* row, ptrdiff_t start, ColMask m) {
  if (m.lo == 0 && m.hi == static_cast<ptrdiff_t>(W)) return V::load(row + start);
  float tmp[W];
  for (size_t l = 0; l < W; ++l) tmp[l] = 0.0f;
  const float* p = chw_at(row, start);
  for (ptrdiff_t l = m.lo; l < m.hi; ++l) tmp[l] = p[l];
  return V::load(tmp);
}
#endif

// even = (a0, a2, ..., b0, b2, ...), odd = (a1, a3, ..., b1, b3, ...): columns 2l and 2l + 1 of a
// 2W-column segment held as a (first W) and b.
static inline void chw_deinterleave(T a, T b, T* even, T* odd) {
#if defined(__AVX512F__)
  const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  *even = _mm512_permutex2var_ps(a, ie, b);
  *odd = _mm512_permutex2var_ps(a, io, b);
#elif defined(__AVX2__)
  // Within 128-bit lanes first (a0 a2 b0 b2 | a4 a6 b4 b6), then the 64-bit pairs into order.
  const __m256 e = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
  const __m256 o = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
  *even = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), _MM_SHUFFLE(3, 1, 2, 0)));
  *odd = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o), _MM_SHUFFLE(3, 1, 2, 0)));
#else
  *even = vuzp1q_f32(a, b);
  *odd = vuzp2q_f32(a, b);
#endif
}

// Per-thread rows: zeros (input rows outside the plane) and a sink for the second output row of a
// pair past the range's end. Grown on demand, kept between calls.
static inline const float* chw_zero_row(size_t w) {
  thread_local AlignedBuffer<float> zeros;
  if (zeros.size() < w) {
    zeros = AlignedBuffer<float>(w);
    for (size_t i = 0; i < w; ++i) zeros.data()[i] = 0.0f;
  }
  return zeros.data();
}
static inline float* chw_sink_row(size_t ow) {
  thread_local AlignedBuffer<float> sink;
  if (sink.size() < ow + W) sink = AlignedBuffer<float>(ow + W);
  return sink.data();
}

// The loads of one output vector: stride 1 reads K vectors (one a tap), stride 2 reads the pairs
// (even tap, odd tap) at offsets 0, 2, 4, ...: 2 * ceil(K / 2) vectors.
template <size_t K, size_t S>
constexpr size_t chw_loads() { return S == 1 ? K : 2 * ((K + 1) / 2); }
template <size_t K, size_t S>
static inline ptrdiff_t chw_load_start(size_t ox, size_t j, ptrdiff_t pad_left) {
  if (S == 1) return static_cast<ptrdiff_t>(ox + j) - pad_left;
  return static_cast<ptrdiff_t>(2 * ox + (j / 2) * 2 + (j % 2) * W) - pad_left;
}

// Output vectors [ox0, ox0 + NV*W) of two rows (out[0], out[1]); rows[r] is input row
// oy*S - pad_top + r of the pair's first output row oy (the zero row outside the plane).
template <size_t K, size_t S, size_t NV, bool Edge>
static inline void dwchw_block(const float* const* rows, const T* wv, T init, ptrdiff_t pad_left, const ColMask* masks,
                               float* const* out, size_t ox0, size_t ow, const Activation& act, const ExpConsts& k) {
  constexpr size_t kRows = S + K;  // input rows of the two output rows
  constexpr size_t kLoads = chw_loads<K, S>();
  T acc[2][NV];
  EDGESDK_UNROLL_CHW for (size_t i = 0; i < 2; ++i)
    EDGESDK_UNROLL_CHW for (size_t v = 0; v < NV; ++v) acc[i][v] = init;
  EDGESDK_UNROLL_CHW for (size_t r = 0; r < kRows; ++r) {
    const float* row = rows[r];
    EDGESDK_UNROLL_CHW for (size_t v = 0; v < NV; ++v) {
      T in[kLoads];
      EDGESDK_UNROLL_CHW for (size_t j = 0; j < kLoads; ++j) {
        const ptrdiff_t start = chw_load_start<K, S>(ox0 + v * W, j, pad_left);
        in[j] = Edge ? chw_load_masked(row, start, masks[v * kLoads + j]) : V::load(row + start);
      }
      T x[K];
      if (S == 1) {
        EDGESDK_UNROLL_CHW for (size_t kx = 0; kx < K; ++kx) x[kx] = in[kx];
      } else {
        EDGESDK_UNROLL_CHW for (size_t kx = 0; kx < K; kx += 2) {
          T even, odd;
          chw_deinterleave(in[kx], in[kx + 1], &even, &odd);
          x[kx] = even;
          if (kx + 1 < K) x[kx + 1] = odd;
        }
      }
      EDGESDK_UNROLL_CHW for (size_t i = 0; i < 2; ++i) {
        if (r < i * S || r - i * S >= K) continue;
        const size_t ky = r - i * S;
        EDGESDK_UNROLL_CHW for (size_t kx = 0; kx < K; ++kx) acc[i][v] = V::fma(x[kx], wv[ky * K + kx], acc[i][v]);
      }
    }
  }
  EDGESDK_UNROLL_CHW for (size_t i = 0; i < 2; ++i)
    EDGESDK_UNROLL_CHW for (size_t v = 0; v < NV; ++v) {
      const size_t ox = ox0 + v * W;
      const T y = activate(acc[i][v], act, k);
      if (!Edge || ox + W <= ow) V::store(out[i] + ox, y);
      else V::store_tail(out[i] + ox, y, ow - ox);
    }
}

struct ChwPlane {
  const float* x;    // input plane
  float* y;          // output plane
  const float* zero;  // zero row (input rows outside the plane)
  float* sink;        // the second output row of a pair past the range's end
  ptrdiff_t h, w, pad_top, pad_left;
  size_t ow;
};

// One column group (NV vectors from ox0) down the rows [row_begin, row_end), in pairs: the edge
// masks depend on the columns only, so they are made once here.
template <size_t K, size_t S, size_t NV, bool Edge>
static void dwchw_columns(const ChwPlane& p, const T* wv, T init, size_t ox0, size_t row_begin, size_t row_end,
                          const Activation& act, const ExpConsts& k) {
  constexpr size_t kLoads = chw_loads<K, S>();
  ColMask masks[NV * kLoads];
  if (Edge)
    for (size_t v = 0; v < NV; ++v)
      for (size_t j = 0; j < kLoads; ++j) masks[v * kLoads + j] = chw_mask(chw_load_start<K, S>(ox0 + v * W, j, p.pad_left), p.w);
  for (size_t oy = row_begin; oy < row_end; oy += 2) {
    const float* rows[S + K];
    for (size_t r = 0; r < S + K; ++r) {
      const ptrdiff_t iy = static_cast<ptrdiff_t>(oy * S + r) - p.pad_top;
      rows[r] = iy >= 0 && iy < p.h ? p.x + iy * p.w : p.zero;
    }
    float* out[2] = {p.y + oy * p.ow, oy + 1 < row_end ? p.y + (oy + 1) * p.ow : p.sink};
    dwchw_block<K, S, NV, Edge>(rows, wv, init, p.pad_left, masks, out, ox0, p.ow, act, k);
  }
}

template <size_t K, size_t S, size_t NV>
static void dwchw_group(bool edge, const ChwPlane& p, const T* wv, T init, size_t ox0, size_t row_begin,
                        size_t row_end, const Activation& act, const ExpConsts& k) {
  if (edge) dwchw_columns<K, S, NV, true>(p, wv, init, ox0, row_begin, row_end, act, k);
  else dwchw_columns<K, S, NV, false>(p, wv, init, ox0, row_begin, row_end, act, k);
}

template <size_t K, size_t S>
static void dwconv_chw_impl(const DwChwArgs* a, size_t plane, size_t row_begin, size_t row_end) {
  constexpr size_t B = EDGESDK_CHW_BLOCKS;
  const ExpConsts k;
  const size_t oc_count = a->c * a->multiplier;
  const size_t b = plane / oc_count, oc = plane % oc_count, ic = oc / a->multiplier;
  const float* wk = a->weights + oc * K * K;
  T wv[K * K];
  for (size_t t = 0; t < K * K; ++t) wv[t] = V::set1(wk[t]);
  const T init = V::set1(a->bias != nullptr ? a->bias[oc] : 0.0f);
  ChwPlane p;
  p.x = a->input + (b * a->c + ic) * a->h * a->w;
  p.y = a->output + plane * a->oh * a->ow;
  p.zero = chw_zero_row(a->w);
  p.sink = chw_sink_row(a->ow);
  p.h = static_cast<ptrdiff_t>(a->h);
  p.w = static_cast<ptrdiff_t>(a->w);
  p.pad_top = static_cast<ptrdiff_t>(a->pad_top);
  p.pad_left = static_cast<ptrdiff_t>(a->pad_left);
  p.ow = a->ow;
  const size_t ow = a->ow;
  for (size_t ox0 = 0; ox0 < ow;) {
    const size_t nv = min_size(B, div_up(ow - ox0, W));
    // Interior: every column the group reads is inside the row, and every vector it stores whole.
    const ptrdiff_t first = static_cast<ptrdiff_t>(ox0 * S) - p.pad_left;
    const ptrdiff_t last = first + static_cast<ptrdiff_t>(nv * W * S) + static_cast<ptrdiff_t>(K - 1) - 1;
    const bool edge = first < 0 || last >= p.w || ox0 + nv * W > ow;
    switch (nv) {
      case 1: dwchw_group<K, S, 1>(edge, p, wv, init, ox0, row_begin, row_end, a->act, k); break;
      case 2: dwchw_group<K, S, 2>(edge, p, wv, init, ox0, row_begin, row_end, a->act, k); break;
      case 3: dwchw_group<K, S, 3>(edge, p, wv, init, ox0, row_begin, row_end, a->act, k); break;
      default: dwchw_group<K, S, B>(edge, p, wv, init, ox0, row_begin, row_end, a->act, k); break;
    }
    ox0 += nv * W;
  }
}

// ---- CHW global average pooling: each plane summed in 4 vector accumulators ---------------------
static void gavgpool_chw_impl(const float* x, size_t planes, size_t hw, float* y, const Activation* act) {
  const ExpConsts k;
  for (size_t p = 0; p < planes; ++p) {
    const float* xp = x + p * hw;
    T acc[4] = {V::set1(0.0f), V::set1(0.0f), V::set1(0.0f), V::set1(0.0f)};
    size_t i = 0;
    for (; i + 4 * W <= hw; i += 4 * W)
      EDGESDK_UNROLL4 for (size_t u = 0; u < 4; ++u) acc[u] = V::add(acc[u], V::load(xp + i + u * W));
    for (; i + W <= hw; i += W) acc[0] = V::add(acc[0], V::load(xp + i));
    if (i < hw) acc[1] = V::add(acc[1], V::load_tail(xp + i, hw - i, 0.0f));
    y[p] = V::hsum(V::add(V::add(acc[0], acc[1]), V::add(acc[2], acc[3]))) / static_cast<float>(hw);
  }
  if (act->kind == ActKind::None) return;
  size_t i = 0;
  for (; i + W <= planes; i += W) V::store(y + i, activate(V::load(y + i), *act, k));
  if (i < planes) V::store_tail(y + i, activate(V::load_tail(y + i, planes - i, 0.0f), *act, k), planes - i);
}

// ---- f32 transpose: W x W register tiles ---------------------------------------------------------
static inline void transpose_tile(T* r) {
#if defined(__AVX512F__)
  T t[16], u[16];
  for (size_t i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  // u[4i + j], 128-bit lane L: rows 4i..4i+3 of column 4L + j.
  for (size_t i = 0; i < 4; ++i) {
    u[4 * i + 0] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  for (size_t j = 0; j < 4; ++j) {
    const T v0 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x88), v1 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xDD);
    const T w0 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x88), w1 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xDD);
    r[j] = _mm512_shuffle_f32x4(v0, w0, 0x88);
    r[8 + j] = _mm512_shuffle_f32x4(v0, w0, 0xDD);
    r[4 + j] = _mm512_shuffle_f32x4(v1, w1, 0x88);
    r[12 + j] = _mm512_shuffle_f32x4(v1, w1, 0xDD);
  }
#elif defined(__AVX2__)
  T t[8], s[8];
  for (size_t i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (size_t i = 0; i < 2; ++i) {
    s[4 * i + 0] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    s[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    s[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    s[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  for (size_t j = 0; j < 4; ++j) {
    r[j] = _mm256_permute2f128_ps(s[j], s[4 + j], 0x20);
    r[4 + j] = _mm256_permute2f128_ps(s[j], s[4 + j], 0x31);
  }
#else
  const float32x4x2_t p01 = vtrnq_f32(r[0], r[1]), p23 = vtrnq_f32(r[2], r[3]);
  r[0] = vcombine_f32(vget_low_f32(p01.val[0]), vget_low_f32(p23.val[0]));
  r[1] = vcombine_f32(vget_low_f32(p01.val[1]), vget_low_f32(p23.val[1]));
  r[2] = vcombine_f32(vget_high_f32(p01.val[0]), vget_high_f32(p23.val[0]));
  r[3] = vcombine_f32(vget_high_f32(p01.val[1]), vget_high_f32(p23.val[1]));
#endif
}

// 2-4 planes into pixels (a 3-channel image NCHW -> NHWC: dst rows of R contiguous), or back: plain
// loops of a compile-time R, which GCC vectorises with this file's ISA (permutes, or NEON's
// st3/ld3); the W x W tiles below are mostly empty there (11 us against numpy's 39 for 3 x 224 x 224).
template <size_t R>
static void interleave_rows(const float* __restrict src, size_t ss, float* __restrict dst, size_t cols) {
  for (size_t j = 0; j < cols; ++j)
    for (size_t r = 0; r < R; ++r) dst[j * R + r] = src[r * ss + j];
}
template <size_t C>
static void deinterleave_rows(const float* __restrict src, float* __restrict dst, size_t ds, size_t rows) {
  for (size_t i = 0; i < rows; ++i)
    for (size_t c = 0; c < C; ++c) dst[c * ds + i] = src[i * C + c];
}

static bool transpose_short_side(const float* src, size_t ss, float* dst, size_t ds, size_t rows, size_t cols) {
  if (ds == rows && rows >= 2 && rows <= 4) {
    if (rows == 2) interleave_rows<2>(src, ss, dst, cols);
    if (rows == 3) interleave_rows<3>(src, ss, dst, cols);
    if (rows == 4) interleave_rows<4>(src, ss, dst, cols);
    return true;
  }
  if (ss == cols && cols >= 2 && cols <= 4) {
    if (cols == 2) deinterleave_rows<2>(src, dst, ds, rows);
    if (cols == 3) deinterleave_rows<3>(src, dst, ds, rows);
    if (cols == 4) deinterleave_rows<4>(src, dst, ds, rows);
    return true;
  }
  return false;
}

// Whole tiles in registers; partial ones (rows or columns short of W) with lane-masked loads and
// stores (x86), or element by element (NEON, whose partial loads go through memory anyway).
// Moves bits: the loads and stores do no arithmetic, so NaN payloads survive.
static void transpose_f32_impl(const void* src_v, size_t ss, void* dst_v, size_t ds, size_t rows, size_t cols) {
  const float* src = static_cast<const float*>(src_v);
  float* dst = static_cast<float*>(dst_v);
  if (transpose_short_side(src, ss, dst, ds, rows, cols)) return;
  for (size_t i0 = 0; i0 < rows; i0 += W) {
    const size_t tr = min_size(W, rows - i0);
    for (size_t j0 = 0; j0 < cols; j0 += W) {
      const size_t tc = min_size(W, cols - j0);
      T r[W];
      if (tr == W && tc == W) {
        for (size_t i = 0; i < W; ++i) r[i] = V::load(src + (i0 + i) * ss + j0);
        transpose_tile(r);
        for (size_t j = 0; j < W; ++j) V::store(dst + (j0 + j) * ds + i0, r[j]);
        continue;
      }
#if defined(__AVX2__) || defined(__AVX512F__)
      for (size_t i = 0; i < W; ++i)
        r[i] = i >= tr ? V::set1(0.0f) : tc == W ? V::load(src + (i0 + i) * ss + j0)
                                                  : V::load_tail(src + (i0 + i) * ss + j0, tc, 0.0f);
      transpose_tile(r);
      for (size_t j = 0; j < tc; ++j) {
        if (tr == W) V::store(dst + (j0 + j) * ds + i0, r[j]);
        else V::store_tail(dst + (j0 + j) * ds + i0, r[j], tr);
      }
#else
      const uint32_t* s32 = reinterpret_cast<const uint32_t*>(src);
      uint32_t* d32 = reinterpret_cast<uint32_t*>(dst);
      for (size_t j = 0; j < tc; ++j)
        for (size_t i = 0; i < tr; ++i) d32[(j0 + j) * ds + i0 + i] = s32[(i0 + i) * ss + j0 + j];
#endif
    }
  }
}
