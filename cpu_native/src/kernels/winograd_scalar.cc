// Scalar Winograd F(4x4, 3x3) transforms (ukernels.h): the portable path and the reference the
// SIMD ones (winograd_simd.inl) are tested against. Written for clarity: the matrices B^T and A^T
// of ukernels.h applied as written, one channel at a time, where the SIMD kernels use the
// factored forms (fewer operations, another rounding order).
#include <cmath>

#include "kernels/ukernels.h"

namespace edgesdk::kernels {
namespace {

constexpr size_t P = kWinogradPatch, R = kWinogradTile;

const float kBt[P][P] = {
    {4, 0, -5, 0, 1, 0}, {0, -4, -4, 1, 1, 0}, {0, 4, -4, -1, 1, 0},
    {0, -2, -1, 2, 1, 0}, {0, 2, -1, -2, 1, 0}, {0, 4, 0, -5, 0, 1},
};
const float kG[P][3] = {
    {1.0f / 4, 0, 0}, {-1.0f / 6, -1.0f / 6, -1.0f / 6}, {-1.0f / 6, 1.0f / 6, -1.0f / 6},
    {1.0f / 24, 1.0f / 12, 1.0f / 6}, {1.0f / 24, -1.0f / 12, 1.0f / 6}, {0, 0, 1},
};
const float kAt[R][P] = {
    {1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 0}, {0, 1, 1, 4, 4, 0}, {0, 1, -1, 8, -8, 1},
};

}  // namespace

void f32_winograd43_input__scalar(const float* const* pixels, size_t channels, float* v, size_t v_stride) {
  for (size_t ch = 0; ch < channels; ++ch) {
    float bd[P][P];  // B^T d
    for (size_t i = 0; i < P; ++i)
      for (size_t j = 0; j < P; ++j) {
        float s = 0.0f;
        for (size_t k = 0; k < P; ++k)
          if (kBt[i][k] != 0.0f) s += kBt[i][k] * pixels[k * P + j][ch];
        bd[i][j] = s;
      }
    for (size_t i = 0; i < P; ++i)  // (B^T d) B
      for (size_t j = 0; j < P; ++j) {
        float s = 0.0f;
        for (size_t k = 0; k < P; ++k)
          if (kBt[j][k] != 0.0f) s += bd[i][k] * kBt[j][k];
        v[(i * P + j) * v_stride + ch] = s;
      }
  }
}

bool f32_winograd43_output__scalar(const float* m, size_t m_stride, size_t channels, const float* bias, float* y,
                                   size_t y_row_stride, size_t y_pixel_stride, size_t rows, size_t cols,
                                   const MinMax* clamp) {
  bool nonfinite = false;
  for (size_t ch = 0; ch < channels; ++ch) {
    float am[R][P];  // A^T m
    for (size_t i = 0; i < R; ++i)
      for (size_t j = 0; j < P; ++j) {
        float s = 0.0f;
        for (size_t k = 0; k < P; ++k)
          if (kAt[i][k] != 0.0f) s += kAt[i][k] * m[(k * P + j) * m_stride + ch];
        am[i][j] = s;
      }
    const float b = bias != nullptr ? bias[ch] : 0.0f;
    for (size_t i = 0; i < rows; ++i)  // (A^T m) A
      for (size_t j = 0; j < cols; ++j) {
        float s = 0.0f;
        for (size_t k = 0; k < P; ++k)
          if (kAt[j][k] != 0.0f) s += am[i][k] * kAt[j][k];
        s += b;
        // Bounds first, so a NaN stays NaN (as the GEMM kernels' clamp).
        s = s < clamp->min ? clamp->min : s;
        s = s > clamp->max ? clamp->max : s;
        nonfinite |= !std::isfinite(s);
        y[i * y_row_stride + j * y_pixel_stride + ch] = s;
      }
  }
  return nonfinite;
}

void f32_winograd43_weights__scalar(const float* g, size_t g_stride, size_t n, float* u, size_t u_stride) {
  for (size_t i = 0; i < n; ++i) {
    float gg[P][3];  // G g
    for (size_t r = 0; r < P; ++r)
      for (size_t x = 0; x < 3; ++x) {
        float s = 0.0f;
        for (size_t y = 0; y < 3; ++y)
          if (kG[r][y] != 0.0f) s += kG[r][y] * g[(3 * y + x) * g_stride + i];
        gg[r][x] = s;
      }
    for (size_t r = 0; r < P; ++r)  // (G g) G^T
      for (size_t x = 0; x < P; ++x) {
        float s = 0.0f;
        for (size_t y = 0; y < 3; ++y)
          if (kG[x][y] != 0.0f) s += gg[r][y] * kG[x][y];
        u[(r * P + x) * u_stride + i] = s;
      }
  }
}

}  // namespace edgesdk::kernels
