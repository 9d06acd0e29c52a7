// Data movement: Concat (one copy per input into its slice), constant Pad, the strided copy behind
// Transpose, Split, Slice, Expand, Tile, DepthToSpace and SpaceToDepth, and Gather along an axis.
// Reshape, Flatten, Squeeze and Unsqueeze never reach a kernel: they are views of their input.

#ifdef CONCAT_COPY
// x viewed as (OUTER, AX, INNER) goes to y (OUTER, YAX, INNER) at axis offset OFF.
__kernel void concat_copy(__global const X_T* restrict x, __global Y_T* restrict y) {
    const int i = get_global_id(0);
    if (i >= OUTER * AX * INNER) return;
    STORE_Y(y, concat_index(i, AX, INNER, YAX, OFF), LOAD_X(x, i));
}
#endif

#ifdef PAD_CONSTANT
// Constant padding (negative pads crop): output dims D0..D5, input dims E0..E5 with strides
// S0..S5, begin pads P0..P5.
#define INSIDE(k) (i##k - P##k >= 0 && i##k - P##k < E##k)
__kernel void pad_constant(__global const X_T* restrict x, __global Y_T* restrict y) {
    const int i = get_global_id(0);
    if (i >= TOTAL) return;
    UNRAVEL6(i);
    const int i0 = rest;
    float v = VALUE;
    if (INSIDE(0) && INSIDE(1) && INSIDE(2) && INSIDE(3) && INSIDE(4) && INSIDE(5))
        v = LOAD_X(x, (i0 - P0) * S0 + (i1 - P1) * S1 + (i2 - P2) * S2 + (i3 - P3) * S3
                          + (i4 - P4) * S4 + (i5 - P5) * S5);
    STORE_Y(y, i, v);
}
#endif

#ifdef STRIDED_COPY
// Generic rank-6 strided gather into a contiguous output: y[i] = x[BASE + sum_d i_d * S_d], where
// (i_0..i_5) is i's index in the output dims D0..D5 (leading dims padded with 1s). Strides are
// element strides into x and may be negative, 0 (broadcast / Expand) or > 1 (steps). Covers
// Slice (any steps), Split (one launch per output), Expand / Tile-free broadcasts, Transpose, and
// DepthToSpace / SpaceToDepth written as a 6-D transpose of a reshaped view; the host checks that
// every offset stays inside x. Beyond 6 dims (a rank-8 Transpose, a Tile of every axis of a 4-D
// tensor) RANK, DIMS and STRIDES replace D0..D5 and S0..S5.
// -D: STRIDED_COPY, TOTAL (= D0*...*D5), D0..D5, S0..S5, BASE (default 0), X_HALF, Y_HALF;
//     or instead of D0..D5 and S0..S5: RANK, DIMS and STRIDES as brace lists of RANK ints,
//     outermost first (-DDIMS={2,3,4}).
// Buffers: x X_T[...], y Y_T[TOTAL].
// NDRange: 1-D, global >= TOTAL (guarded), any local size.
#ifndef BASE
#define BASE 0
#endif
__kernel void strided_copy(__global const X_T* restrict x, __global Y_T* restrict y) {
    const int i = get_global_id(0);
    if (i >= TOTAL) return;
#ifdef RANK
    const int dims[RANK] = DIMS;
    const int strides[RANK] = STRIDES;
    int rest = i, src = BASE;
    #pragma unroll
    for (int d = RANK - 1; d >= 0; --d) {
        src += (rest % dims[d]) * strides[d];
        rest /= dims[d];
    }
#else
    UNRAVEL6(i);
    const int src = BASE + rest * S0 + i1 * S1 + i2 * S2 + i3 * S3 + i4 * S4 + i5 * S5;
#endif
    STORE_Y(y, i, LOAD_X(x, src));
}
#endif

#ifdef GATHER_AXIS
// Gather along one axis: x (OUTER, AXIS_IN, INNER), indices idx[NIDX] -> y (OUTER, NIDX, INNER),
// y[o, j, k] = x[o, idx[j], k]. The host normalises negative indices (idx + AXIS_IN); an index
// still outside [0, AXIS_IN) (invalid in ONNX) reads nothing and writes 0. Gather with an
// N-D index tensor: flatten it, NIDX = its size (the output shape is the host's reshape).
// -D: GATHER_AXIS, OUTER, AXIS_IN, INNER, NIDX, IDX_LONG (default 0: int32 indices; 1: int64
//     `long` indices as ONNX stores them), X_HALF, Y_HALF.
// Buffers: x X_T[OUTER*AXIS_IN*INNER], idx int[NIDX] (long with IDX_LONG=1), y Y_T[OUTER*NIDX*INNER].
// NDRange: 1-D, global >= OUTER * NIDX * INNER (guarded), any local size.
#ifndef IDX_LONG
#define IDX_LONG 0
#endif
#if IDX_LONG
typedef long GATHER_IDX_T;
#else
typedef int GATHER_IDX_T;
#endif
__kernel void gather_axis(__global const X_T* restrict x, __global const GATHER_IDX_T* restrict idx,
                          __global Y_T* restrict y) {
    const int i = get_global_id(0);
    if (i >= OUTER * NIDX * INNER) return;
    const int k = i % INNER;
    const int j = (i / INNER) % NIDX;
    const int o = i / (INNER * NIDX);
    const GATHER_IDX_T a = idx[j];
    float v = 0.0f;
    if (a >= 0 && a < AXIS_IN) v = LOAD_X(x, (o * AXIS_IN + (int)a) * INNER + k);
    STORE_Y(y, i, v);
}
#endif
