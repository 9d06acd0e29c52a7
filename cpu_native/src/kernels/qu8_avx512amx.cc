// AMX qu8 GEMM / indirect-GEMM microkernels of the avx512amx level (the avx512vnni table plus these
// two; dispatch.cc): 16x16c4 (qu8_igemm) and 16x32c4 (qu8_igemm_x2, two panels a call) on tdpbusd,
// which multiplies a 16 x 64 tile of unsigned bytes (activations) by a 16 x 64 tile of signed bytes
// (weights: 16 groups of 4 k x 16 columns) into a 16 x 16 tile of int32 accumulators: 16384
// multiply-adds an instruction, 16 times vpdpbusd's on a zmm. Products and sums are exact and wrap
// modulo 2^32 like every other variant (ukernels.h).
//
// The kernel positions are one long reduction: K' = ks * round_up(kc, 4). Row m of the A operand is
// the concatenation over s of a[s * 16 + m][0, round_up(kc, 4)); the panel's Qu8Layout::C4 lines
// (64 bytes: 16 columns x 4 k) are then the B operand of K' row for row, one tile every 16 lines,
// read straight from the packed weights (stride 64). A is gathered into a thread-local buffer (row
// stride round_up(K', 64), plus 64 where that is a multiple of 128 so the 16 rows of a tile load do
// not share L1 sets) with byte-masked loads: nothing past round_up(kc, 4) of a row is read, and only
// rows < mr. The last K' % 64 bytes run through tail tiles configured that wide (A: K' % 64 bytes a
// row, B: K' % 64 / 4 lines), so nothing past the panel is read either and no copy is made. After
// the K loop the accumulator tiles go to memory, get the bias and the fused requantization of the
// AVX-512 kernels (qu8_avx512.inl, store_tile: bit for bit the scalar formulas).
//
// Tile configuration: ldtilecfg costs ~120-170 TSC cycles (~50-65 ns on this Sapphire Rapids) and
// tilerelease ~10; sttilecfg ~12. Every call reads the current configuration (sttilecfg) and loads
// its own only when it differs (first call, after another AMX user on the thread, e.g. oneDNN, or
// a call of another mr or K' % 64), and releases the tiles at the end only when kReleaseTiles is set
// (see there for the measured cost of both ways).
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

constexpr size_t MR = kAvx512AmxQu8MR;  // 16: a tile's rows
static_assert(MR == 16 && kAvx512AmxQu8NR == 16, "one tile of 16 x 16 int32 per panel");

#ifndef EDGESDK_AMX_RELEASE_TILES
#define EDGESDK_AMX_RELEASE_TILES 1
#endif
// Whether a call ends with tilerelease (tiles back in their init state) or leaves them configured
// for the next call, which then skips ldtilecfg when sttilecfg shows its own configuration.
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
#define EDGESDK_TILE_A 2       // activations: mr rows x 64 bytes of K'
#define EDGESDK_TILE_B0 3      // weights: 16 C4 lines of the first panel
#define EDGESDK_TILE_B1 4      // of the second
#define EDGESDK_TILE_ATAIL 5   // the last K' % 64 bytes of the rows
#define EDGESDK_TILE_B0TAIL 6  // the last K' % 64 / 4 lines of the first panel
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

// The configuration of a call: mr rows of A and C, and tail tiles K' % 64 bytes wide (unused, all
// zero, when K' is a multiple of 64). The one-panel kernel configures the second panel's tiles too,
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

// Row stride of the gathered A: K' rounded up to 64, odd in 64-byte lines (a multiple of 128 would
// put the 16 rows of a tile load into a few L1 sets; at 4 KB, one).
static inline size_t a_stride(size_t kp) {
  const size_t s = round_up(kp, 64);
  return (s / 64) % 2 == 0 ? s + 64 : s;
}

// Rows [0, mr) of A: row m = a[s * MR + m][0, kcp) for s = 0..ks-1, at buf + m * stride.
static void gather(size_t mr, size_t kcp, size_t ks, const uint8_t* const* a, uint8_t* buf, size_t stride) {
  const size_t full = kcp / 64, rem = kcp % 64;
  const __mmask64 tail = rem != 0 ? ~uint64_t{0} >> (64 - rem) : 0;
  for (size_t s = 0; s < ks; ++s) {
    for (size_t m = 0; m < mr; ++m) {
      const uint8_t* src = a[s * MR + m];
      uint8_t* dst = buf + m * stride + s * kcp;
      for (size_t j = 0; j < full; ++j)
        _mm512_storeu_si512(dst + 64 * j, _mm512_loadu_si512(src + 64 * j));
      if (rem != 0) _mm512_mask_storeu_epi8(dst + 64 * full, tail, _mm512_maskz_loadu_epi8(tail, src + 64 * full));
    }
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

// One call: kPanels (1 or 2) panels of 16 columns against rows [0, mr) of the indirection.
template <size_t kPanels>
void igemm(size_t mr, size_t nr, size_t kc, size_t ks, const uint8_t* const* a, const void* w, const int32_t* bias,
           const int32_t* rq, uint8_t* c, size_t ldc, const Qu8Output* out) {
  const size_t kcp = round_up(kc, 4), kp = ks * kcp;  // K'
  const size_t blocks = kp / 64, tail = kp % 64;
  const size_t stride = a_stride(kp);
  uint8_t* abuf = a_buffer(MR * stride);
  gather(mr, kcp, ks, a, abuf, stride);
  const uint8_t* w0 = static_cast<const uint8_t*>(w);
  const uint8_t* w1 = w0 + kp * 16;  // the second panel: ks * kcp / 4 lines of 64 bytes on

  TileConfig cfg;
  make_config(&cfg, mr, tail);
  configure(&cfg);
  EDGESDK_TILE_ZERO(EDGESDK_TILE_C0);
  if (kPanels == 2) EDGESDK_TILE_ZERO(EDGESDK_TILE_C1);
  for (size_t kb = 0; kb < blocks; ++kb) {
    EDGESDK_TILE_LOAD(EDGESDK_TILE_A, abuf + 64 * kb, stride);
    EDGESDK_TILE_LOAD(EDGESDK_TILE_B0, w0 + 1024 * kb, 64);
    EDGESDK_TILE_DPBUSD(EDGESDK_TILE_C0, EDGESDK_TILE_A, EDGESDK_TILE_B0);
    if (kPanels == 2) {
      EDGESDK_TILE_LOAD(EDGESDK_TILE_B1, w1 + 1024 * kb, 64);
      EDGESDK_TILE_DPBUSD(EDGESDK_TILE_C1, EDGESDK_TILE_A, EDGESDK_TILE_B1);
    }
  }
  if (tail != 0) {
    EDGESDK_TILE_LOAD(EDGESDK_TILE_ATAIL, abuf + 64 * blocks, stride);
    EDGESDK_TILE_LOAD(EDGESDK_TILE_B0TAIL, w0 + 1024 * blocks, 64);
    EDGESDK_TILE_DPBUSD(EDGESDK_TILE_C0, EDGESDK_TILE_ATAIL, EDGESDK_TILE_B0TAIL);
    if (kPanels == 2) {
      EDGESDK_TILE_LOAD(EDGESDK_TILE_B1TAIL, w1 + 1024 * blocks, 64);
      EDGESDK_TILE_DPBUSD(EDGESDK_TILE_C1, EDGESDK_TILE_ATAIL, EDGESDK_TILE_B1TAIL);
    }
  }
  alignas(64) int32_t acc[kPanels][16 * 16];
  EDGESDK_TILE_STORE(EDGESDK_TILE_C0, acc[0], 64);
  if (kPanels == 2) EDGESDK_TILE_STORE(EDGESDK_TILE_C1, acc[kPanels - 1], 64);
  if (kReleaseTiles) __asm__ volatile("tilerelease" ::);

  finish_rows(acc[0], mr, nr < 16 ? nr : 16, bias, rq, c, ldc, out);
  if (kPanels == 2) finish_rows(acc[kPanels - 1], mr, nr - 16, bias + 16, rq + kQu8RqRows * 16, c + 16, ldc, out);
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
