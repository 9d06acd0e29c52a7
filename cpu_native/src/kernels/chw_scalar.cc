// Portable CHW kernels (ukernels.h, "CHW (planar) kernels"): the generic depthwise convolution,
// which covers every geometry on every level and is the reference of the specialised SIMD kernels,
// global average pooling, and cache-blocked transposes of 1-, 4- and 8-byte elements.
#include <cmath>
#include <cstring>

#include "kernels/ukernels.h"

namespace edgesdk::kernels {

// Taps out of the image are skipped (the SIMD kernels add 0 * w there, which changes nothing for
// a finite w). std::fma, not x * w + acc: one rounding per tap, as the SIMD kernels' FMA, so the
// sums agree bit for bit (glibc's fma uses the FMA instruction where the CPU has one; aarch64
// inlines fmadd).
void f32_dwconv2d_chw__scalar(const DwChwArgs* a, size_t plane, size_t row_begin, size_t row_end) {
  const size_t oc_count = a->c * a->multiplier;
  const size_t b = plane / oc_count, oc = plane % oc_count, ic = oc / a->multiplier;
  const float* x = a->input + (b * a->c + ic) * a->h * a->w;
  const float* wk = a->weights + oc * a->kh * a->kw;
  float* y = a->output + plane * a->oh * a->ow;
  const float bias = a->bias != nullptr ? a->bias[oc] : 0.0f;
  const ptrdiff_t h = static_cast<ptrdiff_t>(a->h), w = static_cast<ptrdiff_t>(a->w);
  for (size_t oy = row_begin; oy < row_end; ++oy) {
    for (size_t ox = 0; ox < a->ow; ++ox) {
      float acc = bias;
      for (size_t ky = 0; ky < a->kh; ++ky) {
        const ptrdiff_t iy = static_cast<ptrdiff_t>(oy * a->stride_h + ky * a->dil_h) - static_cast<ptrdiff_t>(a->pad_top);
        if (iy < 0 || iy >= h) continue;
        for (size_t kx = 0; kx < a->kw; ++kx) {
          const ptrdiff_t ix =
              static_cast<ptrdiff_t>(ox * a->stride_w + kx * a->dil_w) - static_cast<ptrdiff_t>(a->pad_left);
          if (ix < 0 || ix >= w) continue;
          acc = std::fma(x[iy * w + ix], wk[ky * a->kw + kx], acc);
        }
      }
      y[oy * a->ow + ox] = activate_reference(acc, a->act);
    }
  }
}

void f32_gavgpool_chw__scalar(const float* x, size_t planes, size_t hw, float* y, const Activation* act) {
  for (size_t p = 0; p < planes; ++p) {
    float sum = 0.0f;
    for (size_t i = 0; i < hw; ++i) sum += x[p * hw + i];
    y[p] = activate_reference(sum / static_cast<float>(hw), *act);
  }
}

namespace {

// 8 x 8 sub-tiles: the reads of a tile's rows and the writes of its columns each stay within a
// few cache lines (the drivers' blocks keep the whole block in L1).
template <class E>
void transpose_blocked(const void* src_v, size_t src_stride, void* dst_v, size_t dst_stride, size_t rows,
                       size_t cols) {
  const E* src = static_cast<const E*>(src_v);
  E* dst = static_cast<E*>(dst_v);
  constexpr size_t kTile = 8;
  for (size_t i0 = 0; i0 < rows; i0 += kTile) {
    const size_t i1 = i0 + kTile < rows ? i0 + kTile : rows;
    for (size_t j0 = 0; j0 < cols; j0 += kTile) {
      const size_t j1 = j0 + kTile < cols ? j0 + kTile : cols;
      for (size_t j = j0; j < j1; ++j)
        for (size_t i = i0; i < i1; ++i) dst[j * dst_stride + i] = src[i * src_stride + j];
    }
  }
}

}  // namespace

void x8_transpose__scalar(const void* src, size_t ss, void* dst, size_t ds, size_t rows, size_t cols) {
  transpose_blocked<uint8_t>(src, ss, dst, ds, rows, cols);
}
void f32_transpose__scalar(const void* src, size_t ss, void* dst, size_t ds, size_t rows, size_t cols) {
  transpose_blocked<uint32_t>(src, ss, dst, ds, rows, cols);  // bits moved, not values: NaN payloads kept
}
void x64_transpose__scalar(const void* src, size_t ss, void* dst, size_t ds, size_t rows, size_t cols) {
  transpose_blocked<uint64_t>(src, ss, dst, ds, rows, cols);
}

}  // namespace edgesdk::kernels
