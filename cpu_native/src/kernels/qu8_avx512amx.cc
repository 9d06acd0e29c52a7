// AMX qu8 GEMM / indirect-GEMM microkernels of the avx512amx level (the avx512vnni table plus these
// two; dispatch.cc): 16x16c4 (qu8_igemm) and 16x32c4 (qu8_igemm_x2, two panels a call) on tdpbusd,
// which multiplies a 16 x 64 tile of unsigned bytes (activations) by a 16 x 64 tile of signed bytes
// (weights: 16 groups of 4 k x 16 columns) into a 16 x 16 tile of int32 accumulators: 16384
// multiply-adds an instruction, 16 times vpdpbusd's on a zmm. Products and sums are exact and wrap
// modulo 2^32 like every other variant (ukernels.h).
//
// Per kernel position s, the A operand's rows are a[s * 16 + m][0, round_up(kc, 4)) for m < mr and
// the B operand is the panel's Qu8Layout::C4 lines of that position (64 bytes: 16 columns x 4 k),
// one tile every 16 lines, read straight from the packed weights (stride 64). Where a position's
// rows are evenly spaced in memory (GEMMs, 1x1 convolutions, stride-1 ones away from the image's
// edges and row ends, positions wholly in the padding: one pointer), tileloadd reads them in place
// with that stride; otherwise they are gathered into a thread-local buffer with byte-masked loads.
// Either way nothing past round_up(kc, 4) bytes of a row is read, and only rows < mr: the last
// round_up(kc, 4) % 64 bytes of a position run through tail tiles configured that wide (A: that
// many bytes a row, B: a quarter as many lines), so nothing past the panel is read either. (One
// long K' = ks * round_up(kc, 4), all positions gathered end to end, fills the tiles better for
// small C, but gathering and then reading 16 x K' bytes cost more than the tiles save: ResNet-18's
// 3x3 x 128 convolution took 1.09 us per 16 x 32 outputs that way, 0.50 us read in place.) After
// the K loop the accumulator tiles go to memory, get the bias and the fused requantization of the
// AVX-512 kernels (qu8_avx512.inl, store_tile: bit for bit the scalar formulas).
//
// Short K runs on avx512vnni's vpdpbusd loops instead (runs_vnni: one position of fewer than 48
// bytes, or positions of at most 8), where the tile's fixed costs outweigh it.
//
// Tile configuration: measured on this Sapphire Rapids (KVM guest, TSC 2.6 GHz), ldtilecfg costs
// ~115-180 TSC cycles (45-70 ns) a call, tilerelease ~10, sttilecfg ~12. Loading the configuration
// at the start of every call and releasing the tiles at its end cost 40-90 ns a call of 16 x 32
// outputs (1x1, K = 64: 191-197 ns against 129-130; 3x3 x 64: 341-345 against 290-299; 3x3 x 512:
// 1972-1990 against 1900-1952); over kernel_bench's shapes, ResNet-18's 3x3 convolutions 0.479 ms
// against 0.421, MobileNetV2's 1x1 ones 0.594 against 0.547 (14x14 64->384: 0.81x avx512vnni's
// speed that way, 1.10x without). So a call reads the current configuration (sttilecfg) and runs
// ldtilecfg only when it differs (the thread's first call; after another AMX user on the thread,
// such as oneDNN, reconfigured or released the tiles; a call with another mr or tail width), and
// leaves the tiles configured (kReleaseTiles; -DEDGESDK_AMX_RELEASE_TILES=1 for a tilerelease
// after every call). Tiles left in use cost the thread 8 KB more state to save on a context
// switch; Linux (5.19 and later) releases them itself before the deep idle states that
// need it (fpu_idle_fpregs).
//
// Compiled with the avx512vnni flags plus -mamx-tile -mamx-int8; selected at run time only, on CPUs
// and kernels that enable AMX for the process (dispatch.cc, amx_permitted).
//
// GCC 12 flags its own _mm512_undefined_* helpers as (maybe-)uninitialized when inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <initializer_list>
#include <type_traits>

#include "kernels/common.h"
#include "kernels/qu8_ukernels.h"
#include "kernels/requantization.h"
#include "kernels/ukernels.h"

namespace edgesdk::kernels {
namespace {

#include "kernels/qu8_avx512.inl"
#include "kernels/qu8_avx512vnni.inl"

constexpr size_t MR = kAvx512AmxQu8MR;  // 16: a tile's rows
static_assert(MR == 16 && kAvx512AmxQu8NR == 16, "one tile of 16 x 16 int32 per panel");

#ifndef EDGESDK_AMX_RELEASE_TILES
#define EDGESDK_AMX_RELEASE_TILES 0
#endif
// Whether a call ends with tilerelease (tiles back in their init state), and then loads its
// configuration on every call, or leaves them configured for the next call, which skips ldtilecfg
// when sttilecfg shows its own configuration (see the top of the file).
constexpr bool kReleaseTiles = EDGESDK_AMX_RELEASE_TILES;

// ldtilecfg's 64-byte operand, palette 1: bytes per row and rows of tiles 0..7 (others zero).
struct alignas(64) TileConfig {
  uint8_t palette, start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};
static_assert(sizeof(TileConfig) == 64, "ldtilecfg reads 64 bytes");

// Tiles (macros: the instructions name them in the mnemonic's text).
#define EDGESDK_TILE_C0 0      // accumulators of the first panel: mr rows x 16 int32
#define EDGESDK_TILE_C1 1      // of the second (x2)
#define EDGESDK_TILE_A 2       // activations: mr rows x 64 bytes of a kernel position
#define EDGESDK_TILE_B0 3      // weights: 16 C4 lines of the first panel
#define EDGESDK_TILE_B1 4      // of the second
#define EDGESDK_TILE_ATAIL 5   // the last round_up(kc, 4) % 64 bytes of a position's rows
#define EDGESDK_TILE_B0TAIL 6  // the matching last lines (a quarter as many) of the first panel
#define EDGESDK_TILE_B1TAIL 7  // of the second

// Inline asm rather than GCC 12's intrinsics, whose ldtilecfg tells the compiler it reads 8 bytes
// (the other 56 of a configuration just written could still be in flight) and whose tileloadd
// reads no memory at all as far as the compiler knows (the gathered rows could be stored after it).
static inline void tile_loadconfig(const TileConfig* cfg) {
  __asm__ volatile("ldtilecfg %0" ::"m"(*cfg));
}
static inline void tile_storeconfig(TileConfig* cfg) { __asm__ volatile("sttilecfg %0" : "=m"(*cfg)); }
#define EDGESDK_TILE_LOAD(t, base, stride) \
  __asm__ volatile("tileloadd (%0,%1,1), %%tmm" EDGESDK_STR(t)::"r"(base), "r"(static_cast<long>(stride)) : "memory")
#define EDGESDK_TILE_STORE(t, base, stride) \
  __asm__ volatile("tilestored %%tmm" EDGESDK_STR(t) ", (%0,%1,1)" ::"r"(base), "r"(static_cast<long>(stride)) : "memory")
// c += a (unsigned bytes) x b (signed bytes); AT&T order: b, a, c.
#define EDGESDK_TILE_DPBUSD(c, a, b) \
  __asm__ volatile("tdpbusd %%tmm" EDGESDK_STR(b) ", %%tmm" EDGESDK_STR(a) ", %%tmm" EDGESDK_STR(c) ::)
#define EDGESDK_TILE_ZERO(t) __asm__ volatile("tilezero %%tmm" EDGESDK_STR(t) ::)
#define EDGESDK_STR(x) EDGESDK_STR2(x)
#define EDGESDK_STR2(x) #x

// The configuration of a call: mr rows of A and C, and tail tiles `tail` = round_up(kc, 4) % 64 bytes
// wide (unused, all zero, when that is 0). The one-panel kernel configures the second panel's tiles too,
// so that the two kernels, alternating on a layer with an odd number of panels, share it.
static inline void make_config(TileConfig* cfg, size_t mr, size_t tail) {
  _mm512_store_si512(cfg, _mm512_setzero_si512());
  cfg->palette = 1;
  const uint8_t rows = static_cast<uint8_t>(mr);
  for (int t : {EDGESDK_TILE_C0, EDGESDK_TILE_C1, EDGESDK_TILE_A}) {
    cfg->rows[t] = rows;
    cfg->colsb[t] = 64;
  }
  for (int t : {EDGESDK_TILE_B0, EDGESDK_TILE_B1}) {
    cfg->rows[t] = 16;
    cfg->colsb[t] = 64;
  }
  if (tail != 0) {
    cfg->rows[EDGESDK_TILE_ATAIL] = rows;
    cfg->colsb[EDGESDK_TILE_ATAIL] = static_cast<uint16_t>(tail);
    for (int t : {EDGESDK_TILE_B0TAIL, EDGESDK_TILE_B1TAIL}) {
      cfg->rows[t] = static_cast<uint8_t>(tail / 4);
      cfg->colsb[t] = 64;
    }
  }
}

// Makes `cfg` the tile configuration: ldtilecfg unless sttilecfg shows it already is.
static inline void configure(const TileConfig* cfg) {
  if (!kReleaseTiles) {
    TileConfig cur;
    tile_storeconfig(&cur);
    const __mmask16 diff = _mm512_cmpneq_epi32_mask(_mm512_load_si512(&cur), _mm512_load_si512(cfg));
    if (diff == 0) return;
  }
  tile_loadconfig(cfg);
}

// Row stride of a gathered A: n bytes rounded up to 64, odd in 64-byte lines (a multiple of 128 would
// put the 16 rows of a tile load into a few L1 sets; at 4 KB, one).
static inline size_t a_stride(size_t n) {
  const size_t s = round_up(n, 64);
  return (s / 64) % 2 == 0 ? s + 64 : s;
}

// Rows [0, mr) of one position's A: row m = rows[m][0, kcp), at buf + m * stride.
static void gather(size_t mr, size_t kcp, const uint8_t* const* rows, uint8_t* buf, size_t stride) {
  const size_t full = kcp / 64, rem = kcp % 64;
  const __mmask64 tail = rem != 0 ? ~uint64_t{0} >> (64 - rem) : 0;
  for (size_t m = 0; m < mr; ++m) {
    const uint8_t* src = rows[m];
    uint8_t* dst = buf + m * stride;
    for (size_t j = 0; j < full; ++j) _mm512_storeu_si512(dst + 64 * j, _mm512_loadu_si512(src + 64 * j));
    if (rem != 0) _mm512_mask_storeu_epi8(dst + 64 * full, tail, _mm512_maskz_loadu_epi8(tail, src + 64 * full));
  }
}

// The scratch rows of A (per thread, grown on demand, 64-byte aligned).
static uint8_t* a_buffer(size_t bytes) {
  thread_local AlignedBuffer<uint8_t> buf;
  if (buf.size() < bytes) buf = AlignedBuffer<uint8_t>(bytes);
  return buf.data();
}

// Bias plus the M rows of an accumulator tile stored at `tile` (16 int32 a row), requantized and
// stored (rows < mr, columns < nr). Rows >= mr repeat row mr - 1 (never stored).
template <size_t M>
__attribute__((always_inline)) static inline void finish(const int32_t* tile, size_t mr, size_t nr, const int32_t* bias,
                                                         const int32_t* rq, uint8_t* c, size_t ldc, const Qu8Output* out) {
  __m512i acc[M];
  const __m512i b = _mm512_loadu_si512(bias);
#pragma GCC unroll 16
  for (size_t i = 0; i < M; ++i) acc[i] = _mm512_add_epi32(_mm512_load_si512(tile + 16 * (i < mr ? i : mr - 1)), b);
  store_tile<M>(acc, mr, nr, rq, c, ldc, out);
}

static inline void finish_rows(const int32_t* tile, size_t mr, size_t nr, const int32_t* bias, const int32_t* rq,
                               uint8_t* c, size_t ldc, const Qu8Output* out) {
  if (mr <= 4) finish<4>(tile, mr, nr, bias, rq, c, ldc, out);
  else if (mr <= 8) finish<8>(tile, mr, nr, bias, rq, c, ldc, out);
  else finish<16>(tile, mr, nr, bias, rq, c, ldc, out);
}

// Rows [0, mr) of A as one tile source: true with *base = rows[0] and *stride = rows[1] - rows[0]
// when every row i is rows[0] + i * stride (any stride, 0 and negative included: all-padding rows
// share one pointer), so tileloadd reads them in place.
static inline bool evenly_spaced(const uint8_t* const* rows, size_t mr, const uint8_t** base, long* stride) {
  const uint64_t b = reinterpret_cast<uint64_t>(rows[0]);
  const uint64_t d = mr > 1 ? reinterpret_cast<uint64_t>(rows[1]) - b : 0;
  if (mr == MR) {
    const __m512i idx = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i want0 = _mm512_add_epi64(_mm512_set1_epi64(static_cast<long long>(b)),
                                           _mm512_mullo_epi64(idx, _mm512_set1_epi64(static_cast<long long>(d))));
    const __m512i want1 = _mm512_add_epi64(want0, _mm512_set1_epi64(static_cast<long long>(8 * d)));
    const __mmask8 ne = _mm512_cmpneq_epi64_mask(_mm512_loadu_si512(rows), want0) |
                        _mm512_cmpneq_epi64_mask(_mm512_loadu_si512(rows + 8), want1);
    if (ne != 0) return false;
  } else {
    for (size_t i = 2; i < mr; ++i)
      if (reinterpret_cast<uint64_t>(rows[i]) != b + i * d) return false;
  }
  *base = rows[0];
  *stride = static_cast<long>(d);
  return true;
}

// One step of K: tile `a` (rows `stride` apart from x) times tile `b0` (16-column lines 64 bytes apart
// from w0) into C0, and with two panels `b1` (from w1) into C1. The tile numbers are the instructions'
// text, so this is a macro: the full tiles and the tail tiles run the same step.
#define EDGESDK_AMX_STEP(a, b0, b1, x, w0, w1)                     \
  do {                                                             \
    EDGESDK_TILE_LOAD(a, x, stride);                               \
    EDGESDK_TILE_LOAD(b0, w0, 64);                                 \
    EDGESDK_TILE_DPBUSD(EDGESDK_TILE_C0, a, b0);                   \
    if (kPanels == 2) {                                            \
      EDGESDK_TILE_LOAD(b1, w1, 64);                               \
      EDGESDK_TILE_DPBUSD(EDGESDK_TILE_C1, a, b1);                 \
    }                                                              \
  } while (0)

// C0 (and C1) += rows [0, mr) of A (n bytes of K' from `x`, rows `stride` apart) times the matching
// n / 4 lines of the panels at w0 (and w1): n / 64 full tiles, then the tail tiles (n % 64 must be
// the configured tail, or 0).
template <size_t kPanels>
__attribute__((always_inline)) static inline void dot(const uint8_t* x, long stride, size_t n, const uint8_t* w0,
                                                      const uint8_t* w1) {
  const size_t blocks = n / 64;
  for (size_t kb = 0; kb < blocks; ++kb)
    EDGESDK_AMX_STEP(EDGESDK_TILE_A, EDGESDK_TILE_B0, EDGESDK_TILE_B1, x + 64 * kb, w0 + 1024 * kb, w1 + 1024 * kb);
  if (n % 64 != 0)
    EDGESDK_AMX_STEP(EDGESDK_TILE_ATAIL, EDGESDK_TILE_B0TAIL, EDGESDK_TILE_B1TAIL, x + 64 * blocks, w0 + 1024 * blocks,
                     w1 + 1024 * blocks);
}

// One call: kPanels (1 or 2) panels of 16 columns against rows [0, mr) of the indirection, kernel
// position after kernel position: each from its rows in place where they are evenly spaced
// (evenly_spaced: GEMMs, 1x1 convolutions, stride-1 ones away from the image's edges and row ends,
// positions wholly in the padding), else from a gathered copy; full tiles of 64 bytes, then the
// position's tail of round_up(kc, 4) % 64 bytes.
template <size_t kPanels>
void igemm_amx(size_t mr, size_t nr, size_t kc, size_t ks, const uint8_t* const* a, const void* w, const int32_t* bias,
               const int32_t* rq, uint8_t* c, size_t ldc, const Qu8Output* out) {
  const size_t kcp = round_up(kc, 4);
  const uint8_t* w0 = static_cast<const uint8_t*>(w);
  const uint8_t* w1 = w0 + ks * kcp * 16;  // the second panel: ks * kcp / 4 lines of 64 bytes on

  TileConfig cfg;
  make_config(&cfg, mr, kcp % 64);
  configure(&cfg);
  EDGESDK_TILE_ZERO(EDGESDK_TILE_C0);
  if (kPanels == 2) EDGESDK_TILE_ZERO(EDGESDK_TILE_C1);
  const size_t stride = a_stride(kcp);
  uint8_t* abuf = nullptr;
  for (size_t s = 0; s < ks; ++s) {
    const uint8_t* x;
    long x_stride;
    if (!evenly_spaced(a + s * MR, mr, &x, &x_stride)) {
      if (abuf == nullptr) abuf = a_buffer(MR * stride);
      gather(mr, kcp, a + s * MR, abuf, stride);
      x = abuf;
      x_stride = static_cast<long>(stride);
    }
    dot<kPanels>(x, x_stride, kcp, w0 + s * kcp * 16, w1 + s * kcp * 16);
  }
  alignas(64) int32_t acc[kPanels][16 * 16];
  EDGESDK_TILE_STORE(EDGESDK_TILE_C0, acc[0], 64);
  if (kPanels == 2) EDGESDK_TILE_STORE(EDGESDK_TILE_C1, acc[kPanels - 1], 64);
  if (kReleaseTiles) __asm__ volatile("tilerelease" ::);

  finish_rows(acc[0], mr, nr < 16 ? nr : 16, bias, rq, c, ldc, out);
  if (kPanels == 2) finish_rows(acc[kPanels - 1], mr, nr - 16, bias + 16, rq + kQu8RqRows * 16, c + 16, ldc, out);
}

// The same call on vpdpbusd (qu8_avx512vnni.inl, avx512vnni's 8-row loops; the packed panels are
// the same Qu8Layout::C4 16-column ones): rows [0, 8), then [8, mr).
template <size_t kPanels>
void igemm_vnni(size_t mr, size_t nr, size_t kc, size_t ks, const uint8_t* const* a, const void* w, const int32_t* bias,
                const int32_t* rq, uint8_t* c, size_t ldc, const Qu8Output* out) {
  for (size_t i0 = 0; i0 < mr; i0 += 8) {
    const size_t m = mr - i0 < 8 ? mr - i0 : 8;
    if (kPanels == 1) {
#define EDGESDK_CALL(M) igemm_loop<M, MR, DotStep>(m, nr, kc, ks, a + i0, w, bias, rq, c + i0 * ldc, ldc, out)
      EDGESDK_QU8_DISPATCH_MR(m, EDGESDK_CALL)
#undef EDGESDK_CALL
    } else {
      const int8_t* w8 = static_cast<const int8_t*>(w);
#define EDGESDK_CALL(M) igemm_x2<M, MR>(m, nr, kc, ks, a + i0, w8, bias, rq, c + i0 * ldc, ldc, out)
      EDGESDK_QU8_DISPATCH_MR(m, EDGESDK_CALL)
#undef EDGESDK_CALL
    }
  }
}

// Whether a call runs on vpdpbusd: where a tile's fixed costs (configuration check, zeroing, the
// accumulators' trip through memory) and tdpbusd's on short K outweigh 16 vpdpbusd per 4 k. Measured
// on Sapphire Rapids, 16 x 32 outputs a call: one position of fewer than 48 bytes (MobileNets' 1x1
// expansions, K = 16..32: AMX 110 ns, vpdpbusd 80 at K = 16; even at 48, AMX ahead from 64), or
// several positions of at most 8 bytes each (RGB stems: 7x7x3 AMX 525 ns, vpdpbusd 348).
static inline bool runs_vnni(size_t kcp, size_t ks) { return ks == 1 ? kcp < 48 : kcp <= 8; }

template <size_t kPanels>
void igemm(size_t mr, size_t nr, size_t kc, size_t ks, const uint8_t* const* a, const void* w, const int32_t* bias,
           const int32_t* rq, uint8_t* c, size_t ldc, const Qu8Output* out) {
  if (runs_vnni(round_up(kc, 4), ks)) igemm_vnni<kPanels>(mr, nr, kc, ks, a, w, bias, rq, c, ldc, out);
  else igemm_amx<kPanels>(mr, nr, kc, ks, a, w, bias, rq, c, ldc, out);
}

}  // namespace

void qu8_igemm_16x16c4__avx512amx(size_t mr, size_t nr, size_t kc, size_t ks, const uint8_t* const* a, const void* w,
                                  const int32_t* bias, const int32_t* rq, uint8_t* c, size_t ldc,
                                  const Qu8Output* out) {
  igemm<1>(mr, nr, kc, ks, a, w, bias, rq, c, ldc, out);
}

void qu8_igemm_16x32c4__avx512amx(size_t mr, size_t nr, size_t kc, size_t ks, const uint8_t* const* a, const void* w,
                                  const int32_t* bias, const int32_t* rq, uint8_t* c, size_t ldc,
                                  const Qu8Output* out) {
  igemm<2>(mr, nr, kc, ks, a, w, bias, rq, c, ldc, out);
}

}  // namespace edgesdk::kernels
