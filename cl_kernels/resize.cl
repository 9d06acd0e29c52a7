// Resize (ONNX Resize / Upsample, nearest and (bi)linear) over the last two axes of an N-C-H-W
// tensor. Every coordinate_transformation_mode, nearest_mode, exclude_outside-free variant and
// the clamping at the borders is the host's job: it uploads per-output-row and per-output-column
// tables of source indices and weights, computed once (in float64, rounded to float32), and the
// kernels only gather. Axes the host does not resize get identity tables (i, i, 0).
//
// -D constants: NC (N * C, or any product of the leading axes), H, W (input plane), OH, OW
//               (output plane); X_HALF / Y_HALF (common.cl) for half storage of x / y.
// Buffers:
//   x    X_T[NC * H * W]
//   iy0  int[OH]    first (nearest: the) source row of each output row, 0 <= iy0 < H
//   iy1  int[OH]    second source row (linear only), 0 <= iy1 < H
//   wy   float[OH]  weight of iy1 (linear only): row value = r(iy0) * (1 - wy) + r(iy1) * wy
//   ix0  int[OW], ix1 int[OW], wx float[OW]: the same along the columns
//   y    Y_T[NC * OH * OW]
// NDRange: 1-D, one work-item per output element, global >= NC * OH * OW (guarded), any local
// size. A weight of 0 still multiplies its tap, so a NaN or inf at a neighbour with weight 0
// gives NaN, as in ONNX Runtime's bilinear kernel (which also multiplies all four taps).

#ifdef RESIZE_NEAREST
// Buffers: x, iy0, ix0, y.
__kernel void resize_nearest(__global const X_T* restrict x, __global const int* restrict iy0,
                             __global const int* restrict ix0, __global Y_T* restrict y) {
    const int i = get_global_id(0);
    if (i >= NC * OH * OW) return;
    const int ox = i % OW;
    const int oy = (i / OW) % OH;
    const int plane = i / (OW * OH);
    STORE_Y(y, i, LOAD_X(x, (plane * H + iy0[oy]) * W + ix0[ox]));
}
#endif

#ifdef RESIZE_LINEAR
// Buffers: x, iy0, iy1, wy, ix0, ix1, wx, y. Lerp along x first, then along y.
__kernel void resize_linear(__global const X_T* restrict x, __global const int* restrict iy0,
                            __global const int* restrict iy1, __global const float* restrict wy,
                            __global const int* restrict ix0, __global const int* restrict ix1,
                            __global const float* restrict wx, __global Y_T* restrict y) {
    const int i = get_global_id(0);
    if (i >= NC * OH * OW) return;
    const int ox = i % OW;
    const int oy = (i / OW) % OH;
    const int plane = i / (OW * OH);
    const int r0 = (plane * H + iy0[oy]) * W, r1 = (plane * H + iy1[oy]) * W;
    const int c0 = ix0[ox], c1 = ix1[ox];
    const float fx = wx[ox], fy = wy[oy];
    const float top = LOAD_X(x, r0 + c0) * (1.0f - fx) + LOAD_X(x, r0 + c1) * fx;
    const float bottom = LOAD_X(x, r1 + c0) * (1.0f - fx) + LOAD_X(x, r1 + c1) * fx;
    STORE_Y(y, i, top * (1.0f - fy) + bottom * fy);
}
#endif
