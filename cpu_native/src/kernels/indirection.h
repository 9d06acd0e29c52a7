// The indirection buffer of the indirect-GEMM convolutions (ConvPlan, Qu8ConvPlan). A template in
// a header: include it from portable translation units only (common.h's ODR rule).
#pragma once

#include <cstddef>
#include <vector>

#include "kernels/operators.h"
#include "kernels/thread_pool.h"

namespace edgesdk::kernels {

// [pixel tile][kernel position][mr] pointers to input pixels (pixel stride in_stride) or `zero`.
template <class T>
void fill_indirection(std::vector<const T*>& ind, const T* input, size_t in_stride, const T* zero, size_t mr,
                      size_t n, size_t h, size_t w, size_t oh, size_t ow, const ConvGeometry& g) {
  const size_t ks = g.kh * g.kw;
  const size_t pixels = n * oh * ow;
  const size_t tiles = div_up(pixels, mr);
  ind.assign(tiles * ks * mr, nullptr);
  for (size_t tile = 0; tile < tiles; ++tile) {
    for (size_t i = 0; i < mr; ++i) {
      const size_t p = min_size(tile * mr + i, pixels - 1);  // the tail repeats the last pixel
      const size_t b = p / (oh * ow), oy = p / ow % oh, ox = p % ow;
      for (size_t ky = 0; ky < g.kh; ++ky) {
        for (size_t kx = 0; kx < g.kw; ++kx) {
          // Signed arithmetic: padding makes the top-left window start before the input.
          const ptrdiff_t iy = static_cast<ptrdiff_t>(oy * g.stride_h + ky * g.dil_h) - static_cast<ptrdiff_t>(g.pad_top);
          const ptrdiff_t ix = static_cast<ptrdiff_t>(ox * g.stride_w + kx * g.dil_w) - static_cast<ptrdiff_t>(g.pad_left);
          const bool inside = iy >= 0 && ix >= 0 && iy < static_cast<ptrdiff_t>(h) && ix < static_cast<ptrdiff_t>(w);
          const T* row = inside ? input + ((b * h + static_cast<size_t>(iy)) * w + static_cast<size_t>(ix)) * in_stride
                                : zero;
          ind[(tile * ks + ky * g.kw + kx) * mr + i] = row;
        }
      }
    }
  }
}

// The work split of an indirect GEMM (ConvPlan, Qu8ConvPlan): units of 8 pixel tiles x a group of
// weight panels, panels split only as far as it takes to feed the threads. for_each_block runs
// body(tile_begin, tile_end, panel_begin, panel_end) for every unit, on `threads` threads.
struct TileGrid {
  static constexpr size_t kTilesPerUnit = 8;
  size_t tiles, panels, pixel_units, panels_per_unit, panel_units;

  TileGrid(size_t tiles_, size_t panels_, size_t threads)
      : tiles(tiles_), panels(panels_), pixel_units(div_up(tiles_, kTilesPerUnit)) {
    size_t groups = 1;
    if (threads > 1 && pixel_units < 8 * threads) groups = min_size(panels, div_up(8 * threads, pixel_units));
    panels_per_unit = div_up(panels, groups);
    panel_units = div_up(panels, panels_per_unit);
  }

  template <class Body>
  void for_each_block(size_t threads, const Body& body) const {
    parallel_for(pixel_units * panel_units, threads, [&](size_t begin, size_t end) {
      for (size_t unit = begin; unit < end; ++unit) {
        const size_t t0 = unit / panel_units * kTilesPerUnit, p0 = unit % panel_units * panels_per_unit;
        body(t0, min_size(tiles, t0 + kTilesPerUnit), p0, min_size(panels, p0 + panels_per_unit));
      }
    });
  }
};

}  // namespace edgesdk::kernels
