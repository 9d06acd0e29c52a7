// Convolution (and, as 1x1 convolution, Gemm) straight from relative-index CSR weights (seed 004):
// the weights of output channel oc are entries row_ptr[oc] .. row_ptr[oc + 1] - 1; entry e stores
// the column step from the previous entry of its row in DELTA_BITS bits (the first one: its
// column), so columns are a running sum; long gaps are bridged by filler entries of value 0.
// Values are raw (V_MODE 0: float/half array) or CB_BITS-bit codebook indices (V_MODE 1).
// Column = (c * KH + i) * KW + j over the group's input channels, as in the dense OIHW layout.
// Work-item: one output channel x VEC consecutive output columns of one row; the work is
// proportional to the stored entries, not to the dense filter size.
//
// NaN and infinities follow the dense product, as ONNX Runtime (a pruned weight times inf or NaN
// is NaN there): nonfinite_taps counts, once per layer, the non-finite in-bounds taps of every
// output pixel of every group (work proportional to one output channel's dense product); where a
// pixel has any (rare), conv_csr counts those its non-zero stored entries met, and a pixel that
// met fewer than all of them had a pruned weight on one: NaN.

#define OWT ((OW + VEC - 1) / VEC)
#define KK (KH * KW)
#define HW (H * W)

inline uint unpack_field(__global const uchar* p, uint e, uint bits) {
    const uint bit = e * bits;
    const uint byte = bit >> 3;
    const uint word = (uint)p[byte] | ((uint)p[byte + 1] << 8) | ((uint)p[byte + 2] << 16);
    return (word >> (bit & 7u)) & ((1u << bits) - 1u);
}

__kernel void nonfinite_taps(__global const X_T* restrict x, __global int* restrict bad) {
    const int p = get_global_id(0);
    const int g = get_global_id(1);
    const int n = get_global_id(2);
    if (p >= OH * OW) return;
    const int oy = p / OW, ox = p % OW;
    const __global X_T* xg = x + (n * C + g * CG) * HW;
    int count = 0;
    for (int c = 0; c < CG; ++c) {
        for (int i = 0; i < KH; ++i) {
            const int iy = oy * SH + i * DH - PT;
            if (iy < 0 || iy >= H) continue;
            const __global X_T* row = xg + c * HW + iy * W;
            for (int j = 0; j < KW; ++j) {
                const int ix = ox * SW + j * DW - PL;
                if (ix >= 0 && ix < W && !isfinite(LOAD_X(row, ix))) ++count;
            }
        }
    }
    bad[(n * G + g) * OH * OW + p] = count;
}

__kernel void conv_csr(__global const X_T* restrict x, __global const int* restrict row_ptr,
                       __global const uchar* restrict deltas, __global const void* restrict values,
                       __global const float* restrict codebook, __global const B_T* restrict bias,
                       __global const int* restrict bad_taps, __global Y_T* restrict y) {
    const int ox0 = (get_global_id(0) % OWT) * VEC;
    const int oy = get_global_id(0) / OWT;
    const int oc = get_global_id(1);
    const int n = get_global_id(2);
    if (oy >= OH || oc >= OC) return;
    const int g = oc / OCG;
    const __global X_T* xg = x + (n * C + g * CG) * HW;
#if V_MODE == 1
    const int cbase = CB_ROWS == 1 ? 0 : oc * (1 << CB_BITS);
#endif
    floatV acc = (floatV)(0.0f);
    int bad[VEC], hits[VEC];
    bool slow = false;
    for (int l = 0; l < VEC; ++l) {
        bad[l] = ox0 + l < OW ? bad_taps[((n * G + g) * OH + oy) * OW + ox0 + l] : 0;
        hits[l] = 0;
        slow |= bad[l] != 0;
    }
    int col = 0;
    for (int e = row_ptr[oc]; e < row_ptr[oc + 1]; ++e) {
        col += (int)unpack_field(deltas, (uint)e, DELTA_BITS);
#if V_MODE == 0
        const float value = LOAD_W((__global const W_T*)values, e);
#else
        const float value = codebook[cbase + unpack_field((__global const uchar*)values, (uint)e, CB_BITS)];
#endif
        if (value == 0.0f) continue;  // a filler entry, or a pruned codebook slot
        const int c = col / KK;
        const int tap = col % KK;
        const int iy = oy * SH + (tap / KW) * DH - PT;
        if (iy < 0 || iy >= H) continue;
        const int ix0 = ox0 * SW + (tap % KW) * DW - PL;
        const __global X_T* row = xg + c * HW + iy * W;
        float lanes[VEC];
        for (int l = 0; l < VEC; ++l) {
            const int ix = ix0 + l * SW;
            lanes[l] = ix >= 0 && ix < W ? LOAD_X(row, ix) : 0.0f;
            if (slow && !isfinite(lanes[l])) ++hits[l];
        }
        acc += HMULV((floatV)(value), vloadV(0, lanes));
    }
    floatV out = acc * ALPHA;
    if (slow) {
        float o[VEC];
        vstoreV(out, 0, o);
        for (int l = 0; l < VEC; ++l) {
            if (hits[l] < bad[l]) o[l] = NAN;
        }
        out = vloadV(0, o);
    }
#if HAS_BIAS
    out += BETA * LOAD_B(bias, oc);
#endif
    out = ACTIVATE(out);
    store_lanes(y, ((n * OC + oc) * OH + oy) * OW + ox0, out, OW - ox0);
}
