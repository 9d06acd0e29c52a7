// Element-wise ops: binary arithmetic with numpy broadcasting, stand-alone activations and the
// per-channel affine transform of an unfused BatchNormalization. Activation fused (-DACT).

#define OP_ADD 0
#define OP_SUB 1
#define OP_MUL 2
#define OP_DIV 3
// Appended codes. POW: ONNX Pow on floats, OpenCL's pow (C99 special values, as std::pow and
// numpy: pow(x, 0) = 1 and pow(1, y) = 1 even for NaN, a negative base with a non-integer
// exponent is NaN, with an odd integer one negative). PRELU: a is x, b the slope, broadcast by
// the strides (y = x >= 0 ? x : x * slope; a NaN x stays NaN).
#define OP_POW 4
#define OP_PRELU 5
#if OP == OP_ADD
#define APPLY(a, b) ((a) + (b))
#elif OP == OP_SUB
#define APPLY(a, b) ((a) - (b))
#elif OP == OP_MUL
#define APPLY(a, b) ((a) * (b))
#elif OP == OP_DIV
#define APPLY(a, b) ((a) / (b))
#elif OP == OP_POW
#define APPLY(a, b) pow((a), (b))
#elif OP == OP_PRELU
#define APPLY(a, b) ((a) >= 0.0f ? (a) : (a) * (b))
#endif

#ifdef BINARY_SAME
// Both operands have the output's shape: flat, VEC elements per work-item. TOTAL elements.
__kernel void binary_same(__global const A_T* restrict a, __global const B_T* restrict b,
                          __global Y_T* restrict y) {
    const int i0 = get_global_id(0) * VEC;
    if (i0 >= TOTAL) return;
    if (i0 + VEC <= TOTAL) {
        floatV v = APPLY(VLOAD_A(a, i0), VLOAD_B(b, i0));
        v = ACTIVATE(v);
        VSTORE_Y(y, i0, v);
    } else {
        for (int i = i0; i < TOTAL; ++i) {
            float v = APPLY(LOAD_A(a, i), LOAD_B(b, i));
            v = ACTIVATE(v);
            STORE_Y(y, i, v);
        }
    }
}
#endif

#ifdef BINARY_BROADCAST
// General broadcasting over the output shape D0..D5 (leading dims padded with 1); SAk/SBk are
// each operand's element strides, 0 along broadcast dims. One element per work-item.
__kernel void binary_broadcast(__global const A_T* restrict a, __global const B_T* restrict b,
                               __global Y_T* restrict y) {
    const int i = get_global_id(0);
    if (i >= TOTAL) return;
    UNRAVEL6(i);
    const int i0 = rest;
    const int ia = i0 * SA0 + i1 * SA1 + i2 * SA2 + i3 * SA3 + i4 * SA4 + i5 * SA5;
    const int ib = i0 * SB0 + i1 * SB1 + i2 * SB2 + i3 * SB3 + i4 * SB4 + i5 * SB5;
    float v = APPLY(LOAD_A(a, ia), LOAD_B(b, ib));
    v = ACTIVATE(v);
    STORE_Y(y, i, v);
}
#endif

#ifdef UNARY
// y = ACTIVATE(x), VEC elements per work-item.
__kernel void unary(__global const X_T* restrict x, __global Y_T* restrict y) {
    const int i0 = get_global_id(0) * VEC;
    if (i0 >= TOTAL) return;
    if (i0 + VEC <= TOTAL) {
        floatV v = VLOAD_X(x, i0);
        v = ACTIVATE(v);
        VSTORE_Y(y, i0, v);
    } else {
        for (int i = i0; i < TOTAL; ++i) {
            float v = LOAD_X(x, i);
            v = ACTIVATE(v);
            STORE_Y(y, i, v);
        }
    }
}
#endif

#ifdef CHANNEL_AFFINE
// y = x * scale[c] + shift[c] over (OUTER, CH, INNER): an inference BatchNormalization with its
// scale 1/sqrt(var + eps) * gamma and shift beta - mean * scale folded on the host in float32.
__kernel void channel_affine(__global const X_T* restrict x, __global const float* restrict scale,
                             __global const float* restrict shift, __global Y_T* restrict y) {
    const int i = get_global_id(0);
    if (i >= TOTAL) return;
    const int c = (i / INNER) % CH;
    float v = LOAD_X(x, i) * scale[c] + shift[c];
    v = ACTIVATE(v);
    STORE_Y(y, i, v);
}
#endif
