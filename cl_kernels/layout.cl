// Data movement: Concat (one copy per input into its slice), Transpose and constant Pad.
// Reshape, Flatten, Squeeze and Unsqueeze never reach a kernel: they are views of their input.

#ifdef CONCAT_COPY
// x viewed as (OUTER, AX, INNER) goes to y (OUTER, YAX, INNER) at axis offset OFF.
__kernel void concat_copy(__global const X_T* restrict x, __global Y_T* restrict y) {
    const int i = get_global_id(0);
    if (i >= OUTER * AX * INNER) return;
    const int inner = i % INNER;
    const int a = (i / INNER) % AX;
    const int outer = i / (INNER * AX);
    STORE_Y(y, (outer * YAX + OFF + a) * INNER + inner, LOAD_X(x, i));
}
#endif

#ifdef TRANSPOSE
// y[i] = x[sum_k idx_k * S_k]: output dims D0..D5 (padded with leading 1s) and, per output dim,
// the stride of the input dim it comes from.
__kernel void transpose(__global const X_T* restrict x, __global Y_T* restrict y) {
    const int i = get_global_id(0);
    if (i >= TOTAL) return;
    int rest = i;
    const int i5 = rest % D5; rest /= D5;
    const int i4 = rest % D4; rest /= D4;
    const int i3 = rest % D3; rest /= D3;
    const int i2 = rest % D2; rest /= D2;
    const int i1 = rest % D1; rest /= D1;
    const int src = rest * S0 + i1 * S1 + i2 * S2 + i3 * S3 + i4 * S4 + i5 * S5;
    STORE_Y(y, i, LOAD_X(x, src));
}
#endif

#ifdef PAD_CONSTANT
// Constant padding (negative pads crop): output dims D0..D5, input dims E0..E5 with strides
// S0..S5, begin pads P0..P5.
#define INSIDE(k) (i##k - P##k >= 0 && i##k - P##k < E##k)
__kernel void pad_constant(__global const X_T* restrict x, __global Y_T* restrict y) {
    const int i = get_global_id(0);
    if (i >= TOTAL) return;
    int rest = i;
    const int i5 = rest % D5; rest /= D5;
    const int i4 = rest % D4; rest /= D4;
    const int i3 = rest % D3; rest /= D3;
    const int i2 = rest % D2; rest /= D2;
    const int i1 = rest % D1; rest /= D1;
    const int i0 = rest;
    float v = VALUE;
    if (INSIDE(0) && INSIDE(1) && INSIDE(2) && INSIDE(3) && INSIDE(4) && INSIDE(5))
        v = LOAD_X(x, (i0 - P0) * S0 + (i1 - P1) * S1 + (i2 - P2) * S2 + (i3 - P3) * S3
                          + (i4 - P4) * S4 + (i5 - P5) * S5);
    STORE_Y(y, i, v);
}
#endif
