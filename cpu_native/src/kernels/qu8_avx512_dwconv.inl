// AVX-512 depthwise convolution of the qu8 kernels (multiplier 1), the packing of its weights, and
// the vector helpers they share: included after qu8_avx512.inl, inside the anonymous namespace, by
// qu8_avx512skx.cc (PairTaps: 2 kernel rows per int32 lane as int16, vpmaddwd + vpaddd) and
// qu8_avx512vnni.cc (QuadTaps: 4 kernel rows per lane as bytes, vpdpbusd). Not a standalone header.
//
// The layout and its arithmetic: qu8_ukernels.h ("Packed depthwise weights"). Work splits across
// threads by output rows (the operator's parallel_for), as the fp32 depthwise kernel's does; a row
// goes through the channel blocks one after the other, each with one of two loops:
//   3x3, stride 1 or 2 along the row, dilation 1 along it (MobileNets' windows; rows may be dilated):
//     stream_row. P = Taps::kStreamPixels output pixels at a time; each input column their windows
//     read is loaded (3 rows, padding rows from a zero-point row) and interleaved once, in
//     registers, and feeds the pixels that read it, the block's weights in registers. A 64-wide
//     block runs as two passes of two accumulator vectors (the interleave's halves) so that P * 2
//     accumulators, 6 (or 12) weight vectors and the column fit the 32 registers; the first
//     pass's results wait as int16 for the second's. Groups of pixels whose columns all lie
//     inside the row skip the bounds tests.
//   any other window: block_row. Segments of kSegment pixels: the columns they read are
//     interleaved once into this thread's scratch, then 4, 2 or 1 pixels at a time take, per
//     (row group, kernel column), a weight vector and a column from scratch per accumulator.
// Requantization per accumulator vector in the block's cheapest exact form (RqMode,
// qu8_avx512.inl), its constants loaded once per group of pixels.
//
// Policy (Taps): kRows (rows per lane), kStreamPixels, zp_vector(zp) (a lane of padding),
// interleave(rows[kRows], out[4]) on 128-, 256- or 512-bit rows (vectors v = 0..3 of the layout),
// half<H>(rows, out[2]) (vectors 2H, 2H + 1 of 512-bit rows), weight_lane(w[kRows]), tap(acc, x, w).

namespace dw {

constexpr size_t kSegment = 16;  // output pixels per interleaved segment
constexpr size_t kMaxGroupRows = kQu8DwMaxRows + 4;

static inline __m512i unpacklo8(__m512i a, __m512i b) { return _mm512_unpacklo_epi8(a, b); }
static inline __m512i unpackhi8(__m512i a, __m512i b) { return _mm512_unpackhi_epi8(a, b); }
static inline __m512i unpacklo16(__m512i a, __m512i b) { return _mm512_unpacklo_epi16(a, b); }
static inline __m512i unpackhi16(__m512i a, __m512i b) { return _mm512_unpackhi_epi16(a, b); }
static inline __m256i unpacklo8(__m256i a, __m256i b) { return _mm256_unpacklo_epi8(a, b); }
static inline __m256i unpackhi8(__m256i a, __m256i b) { return _mm256_unpackhi_epi8(a, b); }
static inline __m256i unpacklo16(__m256i a, __m256i b) { return _mm256_unpacklo_epi16(a, b); }
static inline __m256i unpackhi16(__m256i a, __m256i b) { return _mm256_unpackhi_epi16(a, b); }
static inline __m128i unpacklo8(__m128i a, __m128i b) { return _mm_unpacklo_epi8(a, b); }
static inline __m128i unpackhi8(__m128i a, __m128i b) { return _mm_unpackhi_epi8(a, b); }
static inline __m128i unpacklo16(__m128i a, __m128i b) { return _mm_unpacklo_epi16(a, b); }
static inline __m128i unpackhi16(__m128i a, __m128i b) { return _mm_unpackhi_epi16(a, b); }
template <class V> static inline V zero();
template <> inline __m512i zero<__m512i>() { return _mm512_setzero_si512(); }
template <> inline __m256i zero<__m256i>() { return _mm256_setzero_si256(); }
template <> inline __m128i zero<__m128i>() { return _mm_setzero_si128(); }

static inline __m512i cat(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }
static inline __m256i cat(__m128i lo, __m128i hi) { return _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1); }

// A block width's rows (V), accumulator vectors (NK zmm), and how the four interleaved vectors
// become the accumulators: as they are (64), pairwise halves (32), or one natural-order zmm (16).
template <size_t W> struct Width;
template <> struct Width<64> {
  using V = __m512i;
  static constexpr size_t NK = 4;
  static V load(const uint8_t* p, __mmask64 m) { return _mm512_maskz_loadu_epi8(m, p); }
  static void to_acc(const V* v, __m512i* out) {
    out[0] = v[0]; out[1] = v[1]; out[2] = v[2]; out[3] = v[3];
  }
};
template <> struct Width<32> {
  using V = __m256i;
  static constexpr size_t NK = 2;
  static V load(const uint8_t* p, __mmask64 m) { return _mm256_maskz_loadu_epi8(static_cast<__mmask32>(m), p); }
  static void to_acc(const V* v, __m512i* out) {
    out[0] = cat(v[0], v[1]);
    out[1] = cat(v[2], v[3]);
  }
};
template <> struct Width<16> {
  using V = __m128i;
  static constexpr size_t NK = 1;
  static V load(const uint8_t* p, __mmask64 m) { return _mm_maskz_loadu_epi8(static_cast<__mmask16>(m), p); }
  static void to_acc(const V* v, __m512i* out) { out[0] = cat(cat(v[0], v[1]), cat(v[2], v[3])); }
};

// The channel (relative to the block) of int32 lane i of accumulator k, for a block `width` wide.
static inline size_t block_channel(size_t width, size_t k, size_t i) {
  if (width == 64) return qu8_dw_lane_channel(k, i);
  if (width == 32) return qu8_dw_lane_channel(2 * k + i / 8, i % 8);
  return i;  // 16: vectors 0..3 of 4 lanes side by side
}

template <class Taps>
size_t packed_bytes(size_t c, size_t kh, size_t kw) {
  return div_up(c, 64) * qu8_dw_avx512_lines(64, qu8_dw_groups(kh, Taps::kRows), kw) * 64;
}

// The general constants of one accumulator vector, its first 9 lines (qu8_ukernels.h).
static inline void store_rq(__m512i* p, const RqVec& q) {
  _mm512_store_si512(p + 0, q.mult);
  _mm512_store_si512(p + 1, q.mult_odd);
  _mm512_store_si512(p + 2, q.left);
  _mm512_store_si512(p + 3, q.round_even);
  _mm512_store_si512(p + 4, q.round_odd);
  _mm512_store_si512(p + 5, q.neg_even);
  _mm512_store_si512(p + 6, q.neg_odd);
  _mm512_store_si512(p + 7, q.shift_even);
  _mm512_store_si512(p + 8, q.shift_odd);
}

static inline RqVec load_rq(const __m512i* p, bool any_left, bool any_min, bool odd_high) {
  RqVec q;
  q.mult = _mm512_load_si512(p + 0);
  q.mult_odd = _mm512_load_si512(p + 1);
  q.left = _mm512_load_si512(p + 2);
  q.round_even = _mm512_load_si512(p + 3);
  q.round_odd = _mm512_load_si512(p + 4);
  q.neg_even = _mm512_load_si512(p + 5);
  q.neg_odd = _mm512_load_si512(p + 6);
  q.shift_even = _mm512_load_si512(p + 7);
  q.shift_odd = _mm512_load_si512(p + 8);
  q.any_left = any_left;
  q.any_min = any_min;
  q.odd_high = odd_high;
  return q;
}

// The Int and Fp constants of an accumulator vector in a packed block (qu8_ukernels.h).
static inline IntRq load_int_rq(const __m512i* p) {
  return IntRq{_mm512_load_si512(p + 0), _mm512_load_si512(p + 1), _mm512_load_si512(p + 3),
               _mm512_load_si512(p + 4), _mm512_load_si512(p + 7), _mm512_load_si512(p + 8)};
}

static inline FpRq load_fp_rq(const __m512i* p) {
  return FpRq{_mm512_castsi512_ps(_mm512_load_si512(p + 9)), _mm512_castsi512_ps(_mm512_load_si512(p + 10)),
              _mm512_castsi512_ps(_mm512_load_si512(p + 11))};
}

// The general form out of line (the Fp form's rare retries: kept out of the hot loop's registers).
__attribute__((noinline)) static __m512i requantize_general(__m512i x, const __m512i* rq, bool any_left,
                                                            bool any_min, bool odd_high) {
  return requantize(x, load_rq(rq, any_left, any_min, odd_high));
}

// Requantizes acc[i][v] (i < P) of accumulator vector v with the block's constants at rq.
template <RqMode Mode, size_t P, size_t NV>
static inline void requantize_pixels(__m512i (&acc)[P][NV], size_t v, const __m512i* rq, bool any_left, bool any_min,
                                     bool odd_high) {
  if constexpr (Mode == RqMode::Fp) {
    const FpRq q = load_fp_rq(rq);
#pragma GCC unroll 8
    for (size_t i = 0; i < P; ++i) {
      __mmask16 retry;
      const __m512i r = requantize_fp(acc[i][v], q, &retry);
      acc[i][v] = __builtin_expect(retry != 0, 0) ? requantize_general(acc[i][v], rq, any_left, any_min, odd_high) : r;
    }
  } else if constexpr (Mode == RqMode::Int) {
    const IntRq q = load_int_rq(rq);
#pragma GCC unroll 8
    for (size_t i = 0; i < P; ++i) acc[i][v] = requantize_int(acc[i][v], q);
  } else {
    const RqVec q = load_rq(rq, any_left, any_min, odd_high);
#pragma GCC unroll 8
    for (size_t i = 0; i < P; ++i) acc[i][v] = requantize(acc[i][v], q);
  }
}

// Calls f(std::integral_constant<RqMode, mode>) for the block's mode.
template <class F>
static inline void with_mode(bool fp, bool int_ok, F&& f) {
  if (fp) f(std::integral_constant<RqMode, RqMode::Fp>());
  else if (int_ok) f(std::integral_constant<RqMode, RqMode::Int>());
  else f(std::integral_constant<RqMode, RqMode::General>());
}

template <class Taps>
void pack(const Qu8DwPackArgs* a, void* out) {
  const size_t C = a->c, KH = a->kh, KW = a->kw, R = Taps::kRows, G = qu8_dw_groups(KH, R);
  const size_t lines64 = qu8_dw_avx512_lines(64, G, KW);
  alignas(64) int32_t lanes[16];
  for (size_t c0 = 0; c0 < C; c0 += 64) {
    const size_t width = qu8_dw_avx512_width(C - c0), nk = width / 16;
    __m512i* blk = reinterpret_cast<__m512i*>(static_cast<uint8_t*>(out) + (c0 / 64) * lines64 * 64);
    // ch(k, i): the channel of lane i of accumulator k, or C (none) past the channels.
    auto ch = [&](size_t k, size_t i) {
      const size_t c = c0 + block_channel(width, k, i);
      return c < C ? c : C;
    };
    auto fill = [&](__m512i* line, auto value) {
      for (size_t i = 0; i < 16; ++i) lanes[i] = value(i);
      _mm512_store_si512(line, _mm512_load_si512(lanes));
    };
    for (size_t k = 0; k < nk; ++k)
      fill(blk + k, [&](size_t i) { return ch(k, i) < C ? a->bias_folded[ch(k, i)] : 0; });
    for (size_t g = 0; g < G; ++g)
      for (size_t kx = 0; kx < KW; ++kx)
        for (size_t k = 0; k < nk; ++k)
          fill(blk + nk + (g * KW + kx) * nk + k, [&](size_t i) {
            int8_t w[4] = {0, 0, 0, 0};
            for (size_t t = 0; t < R; ++t) {
              const size_t ky = g * R + t;
              if (ky < KH && ch(k, i) < C) w[t] = a->weights[(ky * KW + kx) * C + ch(k, i)];
            }
            return Taps::weight_lane(w);
          });
    __m512i* rq = blk + nk * (1 + G * KW);
    // Lanes past the channels shift right by 1 (their results are never stored), so they do not
    // keep the block from odd_high. The flags hold for every accumulator vector of the block: any
    // left shift, any INT32_MIN multiplier, and odd_high only if every vector has it (a vector
    // without it is made again with the 31 + e odd shifts).
    const size_t which[3] = {kQu8RqMultiplier, kQu8RqLeft, kQu8RqRight};
    auto make = [&](size_t k) {
      __m512i rows[3];
      for (size_t r = 0; r < 3; ++r) {
        for (size_t i = 0; i < 16; ++i)
          lanes[i] = ch(k, i) < C ? a->rq[which[r] * C + ch(k, i)] : which[r] == kQu8RqRight ? 1 : 0;
        rows[r] = _mm512_load_si512(lanes);
      }
      return rq_make(rows[0], rows[1], rows[2]);
    };
    bool any_left = false, any_min = false, odd_high = true;
    for (size_t k = 0; k < nk; ++k) {
      const RqVec q = make(k);
      any_left = any_left || q.any_left;
      any_min = any_min || q.any_min;
      odd_high = odd_high && q.odd_high;
    }
    for (size_t k = 0; k < nk; ++k) {
      RqVec q = make(k);
      if (q.odd_high && !odd_high) {  // the block's other vectors need the permute: 31 + e here too
        q.shift_odd = _mm512_add_epi64(q.shift_odd, _mm512_set1_epi64(32));
        q.odd_high = false;
      }
      store_rq(rq + kQu8DwAvx512RqLines * k, q);
    }
    // The Fp form (see RqMode) where every channel of the block allows it (the table's
    // kQu8RqFpScale row is 0 where a channel does not); lanes past the channels take the constants
    // of m = 2^30, e = 1.
    bool fp = true;
    for (size_t k = 0; k < nk; ++k)
      for (size_t i = 0; i < 16; ++i)
        if (ch(k, i) < C) fp = fp && qu8_float_of(a->rq[kQu8RqFpScale * C + ch(k, i)]) > 0.0f;
    const Qu8FpRequant pad = qu8_fp_requant(qu8_requant_of(1 << 30, -1));
    const int32_t pad_lane[3] = {qu8_float_bits(pad.scale), qu8_float_bits(pad.offset_pos), qu8_float_bits(pad.offset_neg)};
    for (size_t k = 0; k < nk; ++k)
      for (size_t r = 0; r < 3; ++r) {  // scale (0 when not fp), offset for x >= 0, offset for x < 0
        for (size_t i = 0; i < 16; ++i)
          lanes[i] = ch(k, i) < C ? a->rq[(kQu8RqFpScale + r) * C + ch(k, i)] : pad_lane[r];
        const __m512i row = r == 0 && !fp ? _mm512_setzero_si512() : _mm512_load_si512(lanes);
        _mm512_store_si512(rq + kQu8DwAvx512RqLines * k + 9 + r, row);
      }
    fill(rq + kQu8DwAvx512RqLines * nk, [&](size_t i) {
      return i == 0 ? int32_t{any_left} : i == 1 ? int32_t{any_min} : i == 2 ? int32_t{odd_high} : i == 3 ? int32_t{fp} : 0;
    });
  }
}

// Narrows and stores the requantized accumulators of one pixel (n channels of the block).
template <size_t W> struct Store;
template <> struct Store<64> {
  static void run(uint8_t* y, const __m512i* z, const OutVec& o, __mmask64 m) {
    const __m512i p01 = _mm512_adds_epi16(_mm512_packs_epi32(z[0], z[1]), o.zp16x32);
    const __m512i p23 = _mm512_adds_epi16(_mm512_packs_epi32(z[2], z[3]), o.zp16x32);
    const __m512i u = _mm512_min_epu8(_mm512_max_epu8(_mm512_packus_epi16(p01, p23), o.lo8), o.hi8);
    if (m == ~__mmask64{0}) _mm512_storeu_si512(y, u);
    else _mm512_mask_storeu_epi8(y, m, u);
  }
};
template <> struct Store<32> {
  static void run(uint8_t* y, const __m512i* z, const OutVec& o, __mmask64 m) {
    const __m512i p = _mm512_adds_epi16(_mm512_packs_epi32(z[0], z[1]), o.zp16x32);
    // Dword 4l + d of the packed bytes holds channels (see qu8_ukernels.h) 0-3: 0, 4-7: 8, 8-11: 1,
    // 12-15: 9, 16-19: 4, 20-23: 12, 24-27: 5, 28-31: 13.
    const __m512i u = _mm512_permutexvar_epi32(
        _mm512_setr_epi32(0, 8, 1, 9, 4, 12, 5, 13, 0, 0, 0, 0, 0, 0, 0, 0), _mm512_packus_epi16(p, p));
    const __m256i v = _mm256_min_epu8(_mm256_max_epu8(_mm512_castsi512_si256(u), _mm512_castsi512_si256(o.lo8)),
                                      _mm512_castsi512_si256(o.hi8));
    _mm256_mask_storeu_epi8(y, static_cast<__mmask32>(m), v);
  }
};
template <> struct Store<16> {
  static void run(uint8_t* y, const __m512i* z, const OutVec& o, __mmask64 m) {
    store16(y, to_u8(z[0], o), static_cast<__mmask16>(m));
  }
};

// What a block's kernels need.
struct Block {
  const __m512i* bias;
  const __m512i* weights;
  const __m512i* rq;
  bool any_left, any_min, odd_high, fp;
  size_t groups, kw, stride, dil, col_lines;
  bool int_ok() const { return !any_left && !any_min && odd_high; }
};

template <size_t NK>
static inline Block block_of(const __m512i* blk, size_t groups, size_t kw, size_t stride, size_t dil) {
  Block k;
  k.bias = blk;
  k.weights = blk + NK;
  k.rq = blk + NK * (1 + groups * kw);
  const int32_t* flags = reinterpret_cast<const int32_t*>(k.rq + kQu8DwAvx512RqLines * NK);
  k.any_left = flags[0] != 0;
  k.any_min = flags[1] != 0;
  k.odd_high = flags[2] != 0;
  k.fp = flags[3] != 0;
  k.groups = groups;
  k.kw = kw;
  k.stride = stride;
  k.dil = dil;
  k.col_lines = groups * NK;
  return k;
}

// ---- any window: a segment's columns interleaved into scratch -------------------------------------

// P pixels starting at scratch column p * stride, stored from y on (pixel stride ys).
template <class Taps, size_t W, size_t P, RqMode Mode>
static inline void pixels(const Block& k, const __m512i* scratch, size_t p, uint8_t* y, size_t ys, const OutVec& o,
                          __mmask64 m) {
  constexpr size_t NK = Width<W>::NK;
  __m512i acc[P][NK];
#pragma GCC unroll 4
  for (size_t v = 0; v < NK; ++v) {
    const __m512i b = _mm512_load_si512(k.bias + v);
#pragma GCC unroll 4
    for (size_t i = 0; i < P; ++i) acc[i][v] = b;
  }
  const size_t pixel_step = k.stride * k.col_lines;
  for (size_t g = 0; g < k.groups; ++g) {
    for (size_t kx = 0; kx < k.kw; ++kx) {
      const __m512i* w = k.weights + (g * k.kw + kx) * NK;
      const __m512i* x = scratch + (p * k.stride + kx * k.dil) * k.col_lines + g * NK;
#pragma GCC unroll 4
      for (size_t v = 0; v < NK; ++v) {
        const __m512i wv = _mm512_load_si512(w + v);
#pragma GCC unroll 4
        for (size_t i = 0; i < P; ++i) acc[i][v] = Taps::tap(acc[i][v], _mm512_load_si512(x + i * pixel_step + v), wv);
      }
    }
  }
#pragma GCC unroll 4
  for (size_t v = 0; v < NK; ++v)
    requantize_pixels<Mode, P, NK>(acc, v, k.rq + kQu8DwAvx512RqLines * v, k.any_left, k.any_min, k.odd_high);
#pragma GCC unroll 4
  for (size_t i = 0; i < P; ++i) Store<W>::run(y + i * ys, acc[i], o, m);
}

// One output row's channel block [c0, c0 + n), any window: base[t] / step[t] (kernel row t of the
// groups) address the block's channels of the input row, or the zero-point row with step 0.
template <class Taps, size_t W>
void block_row(const Qu8DepthwiseArgs* a, const uint8_t* const* base, const size_t* step, size_t c0, size_t n,
               const __m512i* blk, uint8_t* y, __m512i zpv, const OutVec& o, __m512i* scratch) {
  using WT = Width<W>;
  using V = typename WT::V;
  constexpr size_t NK = WT::NK, R = Taps::kRows;
  const __mmask64 m = n >= 64 ? ~__mmask64{0} : (__mmask64{1} << n) - 1;
  const size_t G = qu8_dw_groups(a->kh, R), KW = a->kw, S = a->stride_w, D = a->dil_w;
  const Block k = block_of<NK>(blk, G, KW, S, D);
  const ptrdiff_t width = static_cast<ptrdiff_t>(a->w);
  for (size_t seg = 0; seg < a->ow; seg += kSegment) {
    const size_t count = min_size(kSegment, a->ow - seg);
    const size_t cols = (count - 1) * S + (KW - 1) * D + 1;
    const ptrdiff_t ix0 = static_cast<ptrdiff_t>(seg * S) - static_cast<ptrdiff_t>(a->pad_left);
    for (size_t j = 0; j < cols; ++j) {
      const ptrdiff_t ix = ix0 + static_cast<ptrdiff_t>(j);
      __m512i* col = scratch + j * k.col_lines;
      if (ix < 0 || ix >= width) {
        for (size_t l = 0; l < k.col_lines; ++l) col[l] = zpv;
        continue;
      }
      for (size_t g = 0; g < G; ++g) {
        V r[R], v[4];
#pragma GCC unroll 4
        for (size_t t = 0; t < R; ++t) r[t] = WT::load(base[g * R + t] + static_cast<size_t>(ix) * step[g * R + t], m);
        Taps::interleave(r, v);
        WT::to_acc(v, col + g * NK);
      }
    }
    uint8_t* yseg = y + seg * a->out_stride + c0;
    const size_t ys = a->out_stride;
    with_mode(k.fp, k.int_ok(), [&](auto mode) {
      constexpr RqMode F = decltype(mode)::value;
      size_t p = 0;
      for (; p + 4 <= count; p += 4) pixels<Taps, W, 4, F>(k, scratch, p, yseg + p * ys, ys, o, m);
      if (p + 2 <= count) {
        pixels<Taps, W, 2, F>(k, scratch, p, yseg + p * ys, ys, o, m);
        p += 2;
      }
      if (p < count) pixels<Taps, W, 1, F>(k, scratch, p, yseg + p * ys, ys, o, m);
    });
  }
}

// ---- 3x3, stride 1 or 2, dilation 1 along the row: columns streamed through registers --------------
// Each input column the P pixels' windows read is loaded and interleaved once, in registers, and
// goes straight to the pixels it feeds; the KW columns' weights of the pass stay in registers. A
// 64-channel block runs in two passes (vectors 0, 1 then 2, 3: the interleave's first and second
// halves), keeping the first pass's results as int16 until the second packs them with its own.

// Pass h of a block `W` wide: the accumulator vectors it computes (first, count) and how it
// interleaves one column's rows (of the width's vector type) into them.
template <class Taps, size_t W, size_t H> struct Pass;
template <class Taps, size_t H> struct Pass<Taps, 64, H> {
  using V = __m512i;
  static constexpr size_t kFirst = 2 * H, kCount = 2;
  static void build(const V* r, __m512i* out) { Taps::template half<H>(r, out); }
};
template <class Taps> struct Pass<Taps, 32, 0> {
  using V = __m256i;
  static constexpr size_t kFirst = 0, kCount = 2;
  static void build(const V* r, __m512i* out) {
    V v[4];
    Taps::interleave(r, v);
    Width<32>::to_acc(v, out);
  }
};
template <class Taps> struct Pass<Taps, 16, 0> {
  using V = __m128i;
  static constexpr size_t kFirst = 0, kCount = 1;
  static void build(const V* r, __m512i* out) {
    V v[4];
    Taps::interleave(r, v);
    Width<16>::to_acc(v, out);
  }
};

template <size_t W> struct Load;
template <> struct Load<64> { static __m512i run(const uint8_t* p, __mmask64 m) { return _mm512_maskz_loadu_epi8(m, p); } };
template <> struct Load<32> {
  static __m256i run(const uint8_t* p, __mmask64 m) { return _mm256_maskz_loadu_epi8(static_cast<__mmask32>(m), p); }
};
template <> struct Load<16> {
  static __m128i run(const uint8_t* p, __mmask64 m) { return _mm_maskz_loadu_epi8(static_cast<__mmask16>(m), p); }
};

// Pass H of P pixels (KH = KW = 3, stride S): the columns from ix0 on (input column of pixel 0's
// first tap) with base / step per kernel row; half (64 wide, pass 0) receives the int16 results,
// or the pixels are stored (pass 1, or a narrower block). Checked: some column may lie outside
// [0, width) (it reads the zero point then); else every column is inside and no test runs.
template <class Taps, size_t W, size_t H, size_t S, size_t P, bool Checked, RqMode Mode>
static inline void stream_pass(const Block& k, const uint8_t* const* base, const size_t* step, ptrdiff_t ix0,
                               ptrdiff_t width, __mmask64 m, __m512i zpv, uint8_t* y, size_t ys, const OutVec& o,
                               __m512i* half) {
  using PS = Pass<Taps, W, H>;
  using V = typename PS::V;
  constexpr size_t KW = 3, R = Taps::kRows, G = (3 + R - 1) / R, NV = PS::kCount, F = PS::kFirst;
  constexpr size_t NK = W / 16, COLS = (P - 1) * S + KW;
  __m512i w[G][KW][NV];
#pragma GCC unroll 8
  for (size_t g = 0; g < G; ++g)
#pragma GCC unroll 8
    for (size_t kx = 0; kx < KW; ++kx)
#pragma GCC unroll 8
      for (size_t v = 0; v < NV; ++v) w[g][kx][v] = _mm512_load_si512(k.weights + (g * KW + kx) * NK + F + v);
  __m512i acc[P][NV];
#pragma GCC unroll 8
  for (size_t v = 0; v < NV; ++v) {
    const __m512i b = _mm512_load_si512(k.bias + F + v);
#pragma GCC unroll 8
    for (size_t i = 0; i < P; ++i) acc[i][v] = b;
  }
  // The kernel rows' addresses at column ix0 (intptr_t: ix0 may lie before the row), stepped per column.
  intptr_t at[3];
#pragma GCC unroll 3
  for (size_t ky = 0; ky < 3; ++ky)
    at[ky] = reinterpret_cast<intptr_t>(base[ky]) + ix0 * static_cast<intptr_t>(step[ky]);
#pragma GCC unroll 32
  for (size_t j = 0; j < COLS; ++j) {
    __m512i x[G][NV];
    const ptrdiff_t ix = ix0 + static_cast<ptrdiff_t>(j);
    if (!Checked || (ix >= 0 && ix < width)) {
#pragma GCC unroll 8
      for (size_t g = 0; g < G; ++g) {
        V r[R];
#pragma GCC unroll 8
        for (size_t t = 0; t < R; ++t) {
          const size_t ky = g * R + t;
          r[t] = ky < 3 ? Load<W>::run(reinterpret_cast<const uint8_t*>(at[ky < 3 ? ky : 0]), m) : zero<V>();
        }
        PS::build(r, x[g]);
      }
    } else {
#pragma GCC unroll 8
      for (size_t g = 0; g < G; ++g)
#pragma GCC unroll 8
        for (size_t v = 0; v < NV; ++v) x[g][v] = zpv;
    }
#pragma GCC unroll 3
    for (size_t ky = 0; ky < 3; ++ky) at[ky] += static_cast<intptr_t>(step[ky]);
#pragma GCC unroll 8
    for (size_t kx = 0; kx < KW; ++kx) {
      if (j < kx || (j - kx) % S != 0 || (j - kx) / S >= P) continue;
      const size_t i = (j - kx) / S;
#pragma GCC unroll 8
      for (size_t g = 0; g < G; ++g)
#pragma GCC unroll 8
        for (size_t v = 0; v < NV; ++v) acc[i][v] = Taps::tap(acc[i][v], x[g][v], w[g][kx][v]);
    }
  }
#pragma GCC unroll 8
  for (size_t v = 0; v < NV; ++v)
    requantize_pixels<Mode, P, NV>(acc, v, k.rq + kQu8DwAvx512RqLines * (F + v), k.any_left, k.any_min, k.odd_high);
  if constexpr (W == 64) {
#pragma GCC unroll 8
    for (size_t i = 0; i < P; ++i) {
      const __m512i p = _mm512_adds_epi16(_mm512_packs_epi32(acc[i][0], acc[i][1]), o.zp16x32);
      if constexpr (H == 0) {
        half[i] = p;
      } else {
        const __m512i u = _mm512_min_epu8(_mm512_max_epu8(_mm512_packus_epi16(half[i], p), o.lo8), o.hi8);
        if (m == ~__mmask64{0}) _mm512_storeu_si512(y + i * ys, u);
        else _mm512_mask_storeu_epi8(y + i * ys, m, u);
      }
    }
  } else {
#pragma GCC unroll 8
    for (size_t i = 0; i < P; ++i) Store<W>::run(y + i * ys, acc[i], o, m);
  }
}

template <class Taps, size_t W, size_t S, size_t P, bool Checked, RqMode Mode>
static inline void stream_group(const Block& k, const uint8_t* const* base, const size_t* step, ptrdiff_t ix0,
                                ptrdiff_t width, __mmask64 m, __m512i zpv, uint8_t* y, size_t ys, const OutVec& o) {
  if constexpr (W == 64) {
    __m512i half[P];
    stream_pass<Taps, W, 0, S, P, Checked, Mode>(k, base, step, ix0, width, m, zpv, y, ys, o, half);
    stream_pass<Taps, W, 1, S, P, Checked, Mode>(k, base, step, ix0, width, m, zpv, y, ys, o, half);
  } else {
    stream_pass<Taps, W, 0, S, P, Checked, Mode>(k, base, step, ix0, width, m, zpv, y, ys, o, nullptr);
  }
}

// P pixels from column ix0 on: the unchecked kernel when all their columns lie inside the row.
template <class Taps, size_t W, size_t S, size_t P, RqMode Mode>
static inline void stream_pixels(const Block& k, const uint8_t* const* base, const size_t* step, ptrdiff_t ix0,
                                 ptrdiff_t width, __mmask64 m, __m512i zpv, uint8_t* y, size_t ys, const OutVec& o) {
  constexpr ptrdiff_t cols = static_cast<ptrdiff_t>((P - 1) * S + 3);
  if (ix0 >= 0 && ix0 + cols <= width) stream_group<Taps, W, S, P, false, Mode>(k, base, step, ix0, width, m, zpv, y, ys, o);
  else stream_group<Taps, W, S, P, true, Mode>(k, base, step, ix0, width, m, zpv, y, ys, o);
}

template <class Taps, size_t W, size_t S, RqMode Mode>
void stream_row(const Qu8DepthwiseArgs* a, const uint8_t* const* base, const size_t* step, const Block& k, size_t c0,
                size_t n, uint8_t* y, __m512i zpv, const OutVec& o) {
  constexpr size_t PMAX = Taps::kStreamPixels;
  const __mmask64 m = n >= 64 ? ~__mmask64{0} : (__mmask64{1} << n) - 1;
  const ptrdiff_t width = static_cast<ptrdiff_t>(a->w), pad = static_cast<ptrdiff_t>(a->pad_left);
  const size_t ys = a->out_stride;
  y += c0;
  size_t p = 0;
  auto at = [&](size_t q) { return static_cast<ptrdiff_t>(q * S) - pad; };
  for (; p + PMAX <= a->ow; p += PMAX)
    stream_pixels<Taps, W, S, PMAX, Mode>(k, base, step, at(p), width, m, zpv, y + p * ys, ys, o);
  if constexpr (PMAX > 4) {
    if (p + 4 <= a->ow) {
      stream_pixels<Taps, W, S, 4, Mode>(k, base, step, at(p), width, m, zpv, y + p * ys, ys, o);
      p += 4;
    }
  }
  if (p + 2 <= a->ow) {
    stream_pixels<Taps, W, S, 2, Mode>(k, base, step, at(p), width, m, zpv, y + p * ys, ys, o);
    p += 2;
  }
  if (p < a->ow) stream_pixels<Taps, W, S, 1, Mode>(k, base, step, at(p), width, m, zpv, y + p * ys, ys, o);
}

template <class Taps, size_t W>
void stream_block(const Qu8DepthwiseArgs* a, const uint8_t* const* base, const size_t* step, size_t c0, size_t n,
                  const __m512i* blk, uint8_t* y, __m512i zpv, const OutVec& o) {
  const Block k = block_of<W / 16>(blk, qu8_dw_groups(3, Taps::kRows), 3, a->stride_w, 1);
  with_mode(k.fp, k.int_ok(), [&](auto mode) {
    constexpr RqMode M = decltype(mode)::value;
    if (a->stride_w == 1) stream_row<Taps, W, 1, M>(a, base, step, k, c0, n, y, zpv, o);
    else stream_row<Taps, W, 2, M>(a, base, step, k, c0, n, y, zpv, o);
  });
}

// Output rows [row_begin, row_end): Qu8DepthwiseArgs with weights_lo16 = the packed blocks.
template <class Taps>
void run(const Qu8DepthwiseArgs* a, size_t row_begin, size_t row_end) {
  constexpr size_t R = Taps::kRows;
  const size_t C = a->c, G = qu8_dw_groups(a->kh, R);
  const size_t lines64 = qu8_dw_avx512_lines(64, G, a->kw);
  const uint8_t* packed = reinterpret_cast<const uint8_t*>(a->weights_lo16);
  alignas(64) uint8_t zp_row[64];
  for (uint8_t& b : zp_row) b = static_cast<uint8_t>(a->input_zero_point);
  const __m512i zpv = Taps::zp_vector(static_cast<uint8_t>(a->input_zero_point));
  const OutVec o = out_vec(a->out);
  const bool stream = a->kh == 3 && a->kw == 3 && a->dil_w == 1 && (a->stride_w == 1 || a->stride_w == 2);
  // This thread's scratch (kept between calls): a segment's interleaved columns.
  thread_local AlignedBuffer<uint8_t> scratch_bytes;
  if (!stream) {
    const size_t lines = ((kSegment - 1) * a->stride_w + (a->kw - 1) * a->dil_w + 1) * G * 4;
    if (scratch_bytes.size() < lines * 64) scratch_bytes = AlignedBuffer<uint8_t>(lines * 64);
  }
  __m512i* scratch = reinterpret_cast<__m512i*>(scratch_bytes.data());
  const uint8_t* rows[kMaxGroupRows];
  const uint8_t* base[kMaxGroupRows];
  size_t steps[kMaxGroupRows];
  const size_t pixel_row = a->w * a->in_stride;
  for (size_t row = row_begin; row < row_end; ++row) {
    const size_t b = row / a->oh, oy = row % a->oh;
    const uint8_t* image = a->input + b * a->h * pixel_row;
    for (size_t t = 0; t < G * R; ++t) {
      const ptrdiff_t iy = static_cast<ptrdiff_t>(oy * a->stride_h + t * a->dil_h) - static_cast<ptrdiff_t>(a->pad_top);
      const bool inside = t < a->kh && iy >= 0 && iy < static_cast<ptrdiff_t>(a->h);
      rows[t] = inside ? image + static_cast<size_t>(iy) * pixel_row : nullptr;
      steps[t] = inside ? a->in_stride : 0;
    }
    uint8_t* y = a->output + (b * a->oh + oy) * a->ow * a->out_stride;
    for (size_t c0 = 0; c0 < C; c0 += 64) {
      const size_t n = min_size(64, C - c0);
      for (size_t t = 0; t < G * R; ++t) base[t] = rows[t] != nullptr ? rows[t] + c0 : zp_row;
      const __m512i* blk = reinterpret_cast<const __m512i*>(packed + (c0 / 64) * lines64 * 64);
      const size_t width = qu8_dw_avx512_width(n);
      if (stream) {
        if (width == 64) stream_block<Taps, 64>(a, base, steps, c0, n, blk, y, zpv, o);
        else if (width == 32) stream_block<Taps, 32>(a, base, steps, c0, n, blk, y, zpv, o);
        else stream_block<Taps, 16>(a, base, steps, c0, n, blk, y, zpv, o);
        continue;
      }
      if (width == 64) block_row<Taps, 64>(a, base, steps, c0, n, blk, y, zpv, o, scratch);
      else if (width == 32) block_row<Taps, 32>(a, base, steps, c0, n, blk, y, zpv, o, scratch);
      else block_row<Taps, 16>(a, base, steps, c0, n, blk, y, zpv, o, scratch);
    }
  }
}

}  // namespace dw
