// Convolutions, NCHW, bias + activation fused into the epilogue. No im2col buffer: every kernel
// reads the input tensor in place (implicit GEMM). The conv family's other files: conv_winograd.cl,
// conv_sparse.cl (CSR weights), conv_nnm.cl (NNM's gather), conv_transpose.cl.
//
// Shape constants (-D): N C H W  OC OH OW  KH KW SH SW DH DW PT PL  G CG OCG
// Tiling: ROWS output channels x VEC (x NVEC) output pixels per work-item.
// HAS_BIAS, ALPHA/BETA (Gemm scaling: y = ALPHA * acc + BETA * bias; defaults in common.cl).

#ifndef NVEC
#define NVEC 1
#endif

// Weight access. W_MODE 0: dense (float or half). W_MODE 1: k-means clustered, CB_BITS-bit
// indices packed little-endian (element e at bits [e*b, (e+1)*b)) into a codebook of
// CB_SIZE = 2^CB_BITS entries, one codebook for the layer (CB_ROWS 1) or per output channel; the
// codebook lives in __constant memory when it fits (CB_CONST) and is never expanded.
#ifndef W_MODE
#define W_MODE 0
#endif
#if W_MODE == 0
#define WEIGHT_ARGS __global const W_T* restrict w
#define WEIGHT(r, e) LOAD_W(w, (e))
#else
#if CB_CONST
#define CB_SPACE __constant
#else
#define CB_SPACE __global const
#endif
#define CB_SIZE (1 << CB_BITS)
#define WEIGHT_ARGS __global const uchar* restrict w_idx, CB_SPACE float* restrict codebook
// The host pads the index stream by two bytes, so reading byte + 1 is always in bounds.
inline uint unpack_index(__global const uchar* p, uint e) {
    const uint bit = e * CB_BITS;
    const uint byte = bit >> 3;
#if CB_BITS == 8
    return p[byte];
#else
    const uint word = (uint)p[byte] | ((uint)p[byte + 1] << 8);
    return (word >> (bit & 7u)) & ((1u << CB_BITS) - 1u);
#endif
}
#define WEIGHT(r, e) codebook[cbase[r] + unpack_index(w_idx, (uint)(e))]
#endif

inline float bias_of(__global const B_T* bias, int oc) {
#if HAS_BIAS
    return BETA * LOAD_B(bias, oc);
#else
    return 0.0f;
#endif
}

#ifdef CONV_GEMM
// 1x1 convolution, stride 1, no padding, one group: Y[n] (OC x P) = W (OC x C) * X[n] (C x P).
// Work-item: ROWS output channels x NVEC*VEC consecutive pixels.
#define P (H * W)
__kernel void conv_gemm(__global const X_T* restrict x, __global const W_T* restrict w,
                        __global const B_T* restrict bias, __global Y_T* restrict y) {
    const int p0 = get_global_id(0) * (VEC * NVEC);
    const int oc0 = get_global_id(1) * ROWS;
    const int n = get_global_id(2);
    if (p0 >= P || oc0 >= OC) return;
    const __global X_T* xn = x + n * C * P + p0;
    int wrow[ROWS];
    floatV acc[ROWS][NVEC];
    #pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        wrow[r] = min(oc0 + r, OC - 1) * C;  // rows past OC recompute the last one, never stored
        #pragma unroll
        for (int v = 0; v < NVEC; ++v) acc[r][v] = (floatV)(0.0f);
    }
    if (p0 + VEC * NVEC <= P) {
        for (int c = 0; c < C; ++c) {
            floatV xv[NVEC];
            #pragma unroll
            for (int v = 0; v < NVEC; ++v) xv[v] = VLOAD_X(xn, c * P + v * VEC);
            #pragma unroll
            for (int r = 0; r < ROWS; ++r) {
                const float wv = LOAD_W(w, wrow[r] + c);
                #pragma unroll
                for (int v = 0; v < NVEC; ++v) acc[r][v] += HMULV((floatV)(wv), xv[v]);
            }
        }
    } else {
        for (int c = 0; c < C; ++c) {
            floatV xv[NVEC];
            #pragma unroll
            for (int v = 0; v < NVEC; ++v) {
                float lanes[VEC];
                #pragma unroll
                for (int l = 0; l < VEC; ++l) {
                    const int q = v * VEC + l;
                    lanes[l] = p0 + q < P ? LOAD_X(xn, c * P + q) : 0.0f;
                }
                xv[v] = vloadV(0, lanes);
            }
            #pragma unroll
            for (int r = 0; r < ROWS; ++r) {
                const float wv = LOAD_W(w, wrow[r] + c);
                #pragma unroll
                for (int v = 0; v < NVEC; ++v) acc[r][v] += HMULV((floatV)(wv), xv[v]);
            }
        }
    }
    #pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        const int oc = oc0 + r;
        if (oc >= OC) continue;  // (not break: an early exit would stop the loop unrolling)
        const float b = bias_of(bias, oc);
        #pragma unroll
        for (int v = 0; v < NVEC; ++v) {
            floatV out = acc[r][v] * ALPHA + b;
            out = ACTIVATE(out);
            store_lanes(y, (n * OC + oc) * P + p0 + v * VEC, out, P - (p0 + v * VEC));
        }
    }
}
#endif

#ifdef CONV_DIRECT
// Any convolution (groups, strides, dilations, padding, dense or clustered weights).
// Work-item: ROWS output channels of one group x VEC consecutive output columns of one row.
// Loops run over the filter taps outside and the group's input channels inside, so the bounds
// logic of a tap is decided once and the inner loop is branch-free.
#define OWT ((OW + VEC - 1) / VEC)
#define OCT ((OCG + ROWS - 1) / ROWS)
#define KK (KH * KW)
#define HW (H * W)

#if SW == 1
#define ROW_SPAN VEC
#define LOAD_ROW(p, off) VLOAD_X(p, off)
#elif SW == 2 && VEC == 2
#define ROW_SPAN 4
#define LOAD_ROW(p, off) (VLOADH_OR_F4(p, off)).even
#elif SW == 2 && VEC == 4
#define ROW_SPAN 8
#define LOAD_ROW(p, off) (LOAD_X8(p, off)).even
#elif SW == 2 && VEC == 8
// Two 8-wide loads instead of one 16-wide: float16 is not a native AVX2 register type.
#define ROW_SPAN 16
#define LOAD_ROW(p, off) ((float8)((LOAD_X8(p, off)).even, (LOAD_X8(p, (off) + 8)).even))
#endif
#if X_HALF && HALF_VECTOR_SCALAR
#define VLOADH_OR_F4(p, off) ((float4)(LOADH(p, (off)), LOADH(p, (off) + 1), LOADH(p, (off) + 2), \
                                       LOADH(p, (off) + 3)))
#define LOAD_X8(p, off) ((float8)(VLOADH_OR_F4(p, off), VLOADH_OR_F4(p, (off) + 4)))
#elif X_HALF
#define VLOADH_OR_F4(p, off) vload_half4(0, (p) + (off))
#define LOAD_X8(p, off) vload_half8(0, (p) + (off))
#else
#define VLOADH_OR_F4(p, off) vload4(0, (p) + (off))
#define LOAD_X8(p, off) vload8(0, (p) + (off))
#endif

__kernel void conv_direct(__global const X_T* restrict x, WEIGHT_ARGS,
                          __global const B_T* restrict bias, __global Y_T* restrict y) {
    const int ox0 = (get_global_id(0) % OWT) * VEC;
    const int oy = get_global_id(0) / OWT;
    const int g = get_global_id(1) / OCT;
    const int oc0 = g * OCG + (get_global_id(1) % OCT) * ROWS;
    const int n = get_global_id(2);
    if (oy >= OH || g >= G) return;
    const int oc_end = g * OCG + OCG;
    const __global X_T* xg = x + (n * C + g * CG) * HW;
    int wrow[ROWS];
#if W_MODE != 0
    int cbase[ROWS];
#endif
    floatV acc[ROWS];
    #pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        const int oc = min(oc0 + r, oc_end - 1);
        wrow[r] = oc * (CG * KK);
#if W_MODE != 0
        cbase[r] = CB_ROWS == 1 ? 0 : oc * CB_SIZE;
#endif
        acc[r] = (floatV)(0.0f);
    }
#if CG == 1
#pragma unroll
#endif
    for (int i = 0; i < KH; ++i) {
        const int iy = oy * SH + i * DH - PT;
        if (iy < 0 || iy >= H) continue;
#if CG == 1
#pragma unroll
#endif
        for (int j = 0; j < KW; ++j) {
            const int ix0 = ox0 * SW + j * DW - PL;
            const int off = iy * W + ix0;
            const int tap = i * KW + j;
#ifdef ROW_SPAN
            if (ix0 >= 0 && ix0 + ROW_SPAN <= W) {
                for (int c = 0; c < CG; ++c) {
                    const floatV xv = LOAD_ROW(xg, c * HW + off);
                    #pragma unroll
                    for (int r = 0; r < ROWS; ++r)
                        acc[r] += HMULV((floatV)(WEIGHT(r, wrow[r] + c * KK + tap)), xv);
                }
                continue;
            }
#endif
            // Border (or a stride without a vector path): gather the lanes that lie on data.
            int valid[VEC];
            #pragma unroll
            for (int l = 0; l < VEC; ++l) {
                const int ix = ix0 + l * SW;
                valid[l] = ix >= 0 && ix < W;
            }
            for (int c = 0; c < CG; ++c) {
                float lanes[VEC];
                #pragma unroll
                for (int l = 0; l < VEC; ++l)
                    lanes[l] = valid[l] ? LOAD_X(xg, c * HW + off + l * SW) : 0.0f;
                const floatV xv = vloadV(0, lanes);
                #pragma unroll
                for (int r = 0; r < ROWS; ++r)
                    acc[r] += HMULV((floatV)(WEIGHT(r, wrow[r] + c * KK + tap)), xv);
            }
        }
    }
    #pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        const int oc = oc0 + r;
        if (oc >= oc_end) continue;  // (not break: an early exit would stop the loop unrolling)
        floatV out = acc[r] * ALPHA + bias_of(bias, oc);
        out = ACTIVATE(out);
        store_lanes(y, ((n * OC + oc) * OH + oy) * OW + ox0, out, OW - ox0);
    }
}
#endif

#ifdef CONV_OC
// Any ungrouped convolution, vectorised along output channels. The host packs the weights as
// (OC blocks, KH, KW, C, OCB) with OCB = NV * VEC output channels per block (zero past OC), so a
// work-item streams its block's weights contiguously (hardware prefetch) and every input value is
// loaded once and broadcast against NV vectors of channels: the 6x16 register tile of AVX2 SGEMM
// kernels with PIX = 6, NV = 2, VEC = 8 (12 accumulators). Work-item: PIX consecutive output
// pixels (flattened, rows may wrap) x one channel block; work-items next to each other along
// dimension 0 share the block, so a work-group (run in order on one core by CPU drivers) reuses
// its weights from cache. Unlike the pixel-vectorised kernels no lane is wasted on narrow rows
// (7x7, 14x14 maps), and the border test is one scalar select per pixel and tap.
#define P (OH * OW)
#define HW (H * W)
#define OCB (NV * VEC)
__kernel void conv_oc(__global const X_T* restrict x, __global const W_T* restrict w,
                      __global const B_T* restrict bias, __global Y_T* restrict y) {
    const int p0 = get_global_id(0) * PIX;
    const int ob = get_global_id(1);
    const int n = get_global_id(2);
    if (p0 >= P || ob * OCB >= OC) return;
    const __global X_T* xn = x + n * C * HW;
    int iy0[PIX], ix0[PIX];
    floatV acc[PIX][NV];
#pragma unroll
    for (int q = 0; q < PIX; ++q) {
        const int p = min(p0 + q, P - 1);  // pixels past P recompute the last one, never stored
        iy0[q] = (p / OW) * SH - PT;
        ix0[q] = (p % OW) * SW - PL;
#pragma unroll
        for (int v = 0; v < NV; ++v) acc[q][v] = (floatV)(0.0f);
    }
    const __global W_T* wt = w + ob * (KH * KW * C * OCB);
    for (int i = 0; i < KH; ++i) {
        for (int j = 0; j < KW; ++j, wt += C * OCB) {
            // One pointer per pixel, walked by HW per channel: plain base + index addressing
            // (an index array c * HW + off[q] gets turned into vector arithmetic by the
            // compiler). Off the data a pointer sits at the image origin and keep[q] selects 0 instead
            // (a select, not a multiply: 0 * a NaN or inf at the origin would be NaN).
            const __global X_T* xq[PIX];
            bool keep[PIX];
            bool interior = true;
#pragma unroll
            for (int q = 0; q < PIX; ++q) {
                const int iy = iy0[q] + i * DH, ix = ix0[q] + j * DW;
#if ALL_INTERIOR  // (the host's promise: no tap of any pixel reaches the padding)
                xq[q] = xn + iy * W + ix;
#else
                const bool on_data = iy >= 0 && iy < H && ix >= 0 && ix < W;
                xq[q] = xn + (on_data ? iy * W + ix : 0);
                keep[q] = on_data;
                interior = interior && on_data;
#endif
            }
            const __global W_T* wc = wt;
#if !ALL_INTERIOR
            if (interior)
#endif
            {  // the common case: no masking in the hot loop
#if C <= 4
#pragma unroll
#endif
                for (int c = 0; c < C; ++c, wc += OCB) {
                    floatV wv[NV];
#pragma unroll
                    for (int v = 0; v < NV; ++v) wv[v] = VLOAD_W(wc, v * VEC);
#pragma unroll
                    for (int q = 0; q < PIX; ++q) {
                        const floatV xs = (floatV)(LOAD_X(xq[q], 0));
                        xq[q] += HW;
#pragma unroll
                        for (int v = 0; v < NV; ++v) acc[q][v] += HMULV(xs, wv[v]);
                    }
                }
                continue;
            }
#if !ALL_INTERIOR
#if C <= 4
#pragma unroll
#endif
            for (int c = 0; c < C; ++c, wc += OCB) {
                floatV wv[NV];
#pragma unroll
                for (int v = 0; v < NV; ++v) wv[v] = VLOAD_W(wc, v * VEC);
#pragma unroll
                for (int q = 0; q < PIX; ++q) {
                    const floatV xs = (floatV)(keep[q] ? LOAD_X(xq[q], 0) : 0.0f);
                    xq[q] += HW;
#pragma unroll
                    for (int v = 0; v < NV; ++v) acc[q][v] += HMULV(xs, wv[v]);
                }
            }
#endif
        }
    }
#pragma unroll
    for (int v = 0; v < NV; ++v) {
        const int oc = ob * OCB + v * VEC;
        if (oc >= OC) continue;  // (not break: an early exit would stop the loop unrolling)
#if HAS_BIAS && OC % VEC == 0
        const floatV bv = VLOAD_B(bias, oc) * BETA;
#else
        float b[VEC];
#pragma unroll
        for (int l = 0; l < VEC; ++l) b[l] = oc + l < OC ? bias_of(bias, oc + l) : 0.0f;
        const floatV bv = vloadV(0, b);
#endif
#pragma unroll
        for (int q = 0; q < PIX; ++q) {
            if (p0 + q >= P) continue;  // (not break: an early exit would stop the loop unrolling)
            floatV out = acc[q][v] * ALPHA + bv;
            out = ACTIVATE(out);
            float lanes[VEC];
            vstoreV(out, 0, lanes);
#pragma unroll
            for (int l = 0; l < VEC; ++l) {
#if OC % VEC
                if (oc + l >= OC) continue;  // a partial last vector
#endif
                STORE_Y(y, (n * OC + oc + l) * P + p0 + q, lanes[l]);
            }
        }
    }
}
#endif
