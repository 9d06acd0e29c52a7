// Winograd F(2x2, 3x3) convolution (3x3, stride 1, dilation 1, one group, any padding), NCHW.
// Each 2x2 block of outputs ("tile") is computed from a 4x4 input patch d as
//     Y = A^T [ (G g G^T) (.) (B^T d B) ] A
// so a tile costs 16 products per (input, output) channel pair instead of 36: 2.25x fewer.
//   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]   A^T = [1 1 1 0; 0 1 -1 -1]
// The host transforms the weights once (U = G g G^T, edgesdk/backends/opencl/ops_winograd.py)
// and packs them (16, OC blocks, C, OCB), each (element, block) slice contiguous like conv_oc's.
// Three kernels per layer, through one scratch block of the activation arena that holds the
// Winograd-domain tensors V (16 x C x TT) and, from float offset M_OFFSET, M (16 x TT x OCP)
// (TT = N * TY * TX tiles; at most 4 floats per input and per output value, nothing replicated
// per filter tap: this is not an im2col buffer):
//   winograd_input: x -> V, the transformed 4x4 input patches (B^T d B) of every tile;
//   winograd_gemm: the 16 GEMMs M[e] = V[e]^T U[e] with conv_oc's register tile (PIX tiles x NV
//     vectors of output channels) on contiguous weight and tile streams;
//   winograd_output: Y = A^T M A per tile, bias, activation, NCHW stores.
//
// Shape constants (-D): N C H W OC OH OW PT PL; TY TX tiles per image; M_OFFSET; PIX NV tiling.
// V and M are float32 in both precisions (fp16 mode: half storage of x, U and y only); products
// are float products (transformed values are not half-representable, so HALF_PRODUCTS, which
// models products of half-stored values, does not apply).

#define HW (H * W)
#define T (TY * TX)
#define TT (N * T)
#define OCB (NV * VEC)  // output channels per GEMM work-item
#define OBLOCKS ((OC + OCB - 1) / OCB)
#define OCP (OBLOCKS * OCB)  // M's row length: OC padded to whole blocks (zero weights there)

#ifdef WINOGRAD_INPUT
// Work-item: VEC consecutive tiles of one tile row x one input channel.
#define TXV ((TX + VEC - 1) / VEC)
#define SPAN (2 * VEC + 2)  // input columns under VEC tiles
// Lanes 2 l (EVEN) and 2 l + 1 (ODD) of the 2 VEC floats at p (global or private), l < VEC.
#if VEC == 2
#define EVEN(p) (vload4(0, p).even)
#define ODD(p) (vload4(0, p).odd)
#elif VEC == 4
#define EVEN(p) (vload8(0, p).even)
#define ODD(p) (vload8(0, p).odd)
#elif VEC == 8  // two 8-wide loads: float16 is not a native AVX2 type
#define EVEN(p) ((float8)(vload8(0, p).even, vload8(0, (p) + 8).even))
#define ODD(p) ((float8)(vload8(0, p).odd, vload8(0, (p) + 8).odd))
#else
#define EVEN(p) ((float16)(vload16(0, p).even, vload16(0, (p) + 16).even))
#define ODD(p) ((float16)(vload16(0, p).odd, vload16(0, (p) + 16).odd))
#endif

__kernel void winograd_input(__global const X_T* restrict x, __global float* restrict v) {
    const int tx0 = (get_global_id(0) % TXV) * VEC;
    const int row = get_global_id(0) / TXV;  // n * TY + ty
    const int c = get_global_id(1);
    if (row >= N * TY || c >= C) return;
    const int n = row / TY, ty = row % TY;
    const __global X_T* xc = x + (n * C + c) * HW;
    const int iy0 = 2 * ty - PT, ix0 = 2 * tx0 - PL;
    // d[r][k]: lane l holds input (iy0 + r, ix0 + 2 l + k) of tile tx0 + l (0 off the image)
    floatV d[4][4];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        const int iy = iy0 + r;
        if (iy < 0 || iy >= H) {
#pragma unroll
            for (int k = 0; k < 4; ++k) d[r][k] = (floatV)(0.0f);
            continue;
        }
        const __global X_T* xr = xc + iy * W;
#if !X_HALF
        if (ix0 >= 0 && ix0 + SPAN <= W) {  // the row's columns all on the image: vector loads
            d[r][0] = EVEN(xr + ix0);
            d[r][1] = ODD(xr + ix0);
            d[r][2] = EVEN(xr + ix0 + 2);
            d[r][3] = ODD(xr + ix0 + 2);
            continue;
        }
#endif
        float cols[SPAN];  // borders (and half storage): gather, zero off the image
        for (int k = 0; k < SPAN; ++k) {
            const int ix = ix0 + k;
            cols[k] = ix >= 0 && ix < W ? LOAD_X(xr, ix) : 0.0f;
        }
        d[r][0] = EVEN(cols);
        d[r][1] = ODD(cols);
        d[r][2] = EVEN(cols + 2);
        d[r][3] = ODD(cols + 2);
    }
    // d B along rows, then B^T down the columns
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        const floatV d0 = d[r][0], d1 = d[r][1], d2 = d[r][2], d3 = d[r][3];
        d[r][0] = d0 - d2;
        d[r][1] = d1 + d2;
        d[r][2] = d2 - d1;
        d[r][3] = d1 - d3;
    }
    const int valid = TX - tx0;
    __global float* vc = v + c * TT + n * T + ty * TX + tx0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        floatV e[4];
        e[0] = d[0][k] - d[2][k];
        e[1] = d[1][k] + d[2][k];
        e[2] = d[2][k] - d[1][k];
        e[3] = d[1][k] - d[3][k];
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            __global float* dst = vc + (r * 4 + k) * C * TT;
            if (valid >= VEC) {
                vstoreV(e[r], 0, dst);
            } else {
                float lanes[VEC];
                vstoreV(e[r], 0, lanes);
                for (int l = 0; l < valid; ++l) dst[l] = lanes[l];
            }
        }
    }
}
#endif

#ifdef WINOGRAD_GEMM
// Work-item: PIX consecutive tiles x one block of OCB output channels of element e; neighbours
// along dimension 0 share (e, block), so a work-group reuses that weight slice from cache.
__kernel void winograd_gemm(__global float* restrict s, __global const W_T* restrict u) {
    const int t0 = get_global_id(0) * PIX;
    const int ob = get_global_id(1);
    const int e = get_global_id(2);
    if (t0 >= TT || ob >= OBLOCKS) return;
    int tq[PIX];  // tiles past TT re-read the last one, never stored
    floatV acc[PIX][NV];
#pragma unroll
    for (int q = 0; q < PIX; ++q) {
        tq[q] = min(t0 + q, TT - 1) - t0;
#pragma unroll
        for (int b = 0; b < NV; ++b) acc[q][b] = (floatV)(0.0f);
    }
    const __global W_T* uc = u + (e * OBLOCKS + ob) * C * OCB;
    const __global float* vc = s + e * C * TT + t0;
    for (int c = 0; c < C; ++c, uc += OCB, vc += TT) {
        floatV wv[NV];
#pragma unroll
        for (int b = 0; b < NV; ++b) wv[b] = VLOAD_W(uc, b * VEC);
#pragma unroll
        for (int q = 0; q < PIX; ++q) {
            const floatV xs = (floatV)(vc[tq[q]]);
#pragma unroll
            for (int b = 0; b < NV; ++b) acc[q][b] += xs * wv[b];
        }
    }
    __global float* m = s + M_OFFSET + (e * TT + t0) * OCP + ob * OCB;
#pragma unroll
    for (int q = 0; q < PIX; ++q) {
        if (t0 + q >= TT) continue;  // (not break: an early exit would stop the loop unrolling)
#pragma unroll
        for (int b = 0; b < NV; ++b) vstoreV(acc[q][b], 0, m + q * OCP + b * VEC);
    }
}
#endif

#ifdef WINOGRAD_OUTPUT
// NaN and infinities (tests/test_nan_inf.py): an output's Winograd sums involve exactly the inputs
// of its 3x3 window, so a finite window gives a finite result and a NaN input gives NaN where the
// direct convolution does; but the transforms subtract an infinite input from itself (inf - inf)
// and turn the +-inf a direct convolution gives into NaN. So a NaN result (rare: only a window
// with a NaN or inf input has one) is recomputed directly from x and the weights, recovered from
// U = G g G^T: rows 0 and 3 of G g are g's rows 0 and 2, row 1 is (g0 + g1 + g2) / 2; the same
// along columns.
inline float u_at(__global const W_T* restrict u, int e, int c, int oc) {
    return LOAD_W(u, ((e * OBLOCKS + oc / OCB) * C + c) * OCB + oc % OCB);
}
inline float u_row_col(__global const W_T* restrict u, int a, int kx, int c, int oc) {  // (G g)[a] column kx of g
    const float c0 = u_at(u, a * 4, c, oc), c2 = u_at(u, a * 4 + 3, c, oc);
    return kx == 0 ? c0 : kx == 2 ? c2 : 2.0f * u_at(u, a * 4 + 1, c, oc) - c0 - c2;
}
inline float weight_from_u(__global const W_T* restrict u, int ky, int kx, int c, int oc) {
    const float r0 = u_row_col(u, 0, kx, c, oc), r2 = u_row_col(u, 3, kx, c, oc);
    return ky == 0 ? r0 : ky == 2 ? r2 : 2.0f * u_row_col(u, 1, kx, c, oc) - r0 - r2;
}
inline float direct_output(__global const X_T* restrict x, __global const W_T* restrict u, int n, int oc, int oy,
                           int ox) {
    float acc = 0.0f;
    for (int c = 0; c < C; ++c)
        for (int ky = 0; ky < 3; ++ky) {
            const int iy = oy + ky - PT;
            if (iy < 0 || iy >= H) continue;
            for (int kx = 0; kx < 3; ++kx) {
                const int ix = ox + kx - PL;
                if (ix >= 0 && ix < W) acc += LOAD_X(x, (n * C + c) * HW + iy * W + ix) * weight_from_u(u, ky, kx, c, oc);
            }
        }
    return acc;
}

// Work-item: one tile x VEC output channels.
__kernel void winograd_output(__global const float* restrict s, __global const B_T* restrict bias,
                              __global const X_T* restrict x, __global const W_T* restrict u,
                              __global Y_T* restrict y) {
    const int tt = get_global_id(0);
    const int oc = get_global_id(1) * VEC;
    if (tt >= TT || oc >= OC) return;
    floatV m[4][4];
    const __global float* mt = s + M_OFFSET + tt * OCP + oc;
#pragma unroll
    for (int e = 0; e < 16; ++e) m[e / 4][e % 4] = vloadV(0, mt + e * TT * OCP);
    floatV r[2][4];  // A^T M
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        r[0][k] = m[0][k] + m[1][k] + m[2][k];
        r[1][k] = m[1][k] - m[2][k] - m[3][k];
    }
    float bl[VEC];
#pragma unroll
    for (int l = 0; l < VEC; ++l) {
#if HAS_BIAS
        bl[l] = oc + l < OC ? BETA * LOAD_B(bias, oc + l) : 0.0f;
#else
        bl[l] = 0.0f;
#endif
    }
    const floatV bv = vloadV(0, bl);
    const int n = tt / T, t = tt % T;
    const int oy = 2 * (t / TX), ox = 2 * (t % TX);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        floatV o[2];  // (A^T M) A
        o[0] = r[i][0] + r[i][1] + r[i][2];
        o[1] = r[i][1] - r[i][2] - r[i][3];
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            if (oy + i >= OH || ox + j >= OW) continue;
            floatV pre = o[j] * ALPHA + bv;
            if (any(isnan(pre))) {  // see direct_output
                float pl[VEC];
                vstoreV(pre, 0, pl);
                for (int l = 0; l < VEC; ++l)
                    if (isnan(pl[l]) && oc + l < OC)
                        pl[l] = direct_output(x, u, n, oc + l, oy + i, ox + j) * ALPHA + bl[l];
                pre = vloadV(0, pl);
            }
            const floatV res = ACTIVATE(pre);
            float lanes[VEC];
            vstoreV(res, 0, lanes);
#pragma unroll
            for (int l = 0; l < VEC; ++l) {
#if OC % VEC
                if (oc + l >= OC) continue;
#endif
                STORE_Y(y, ((n * OC + oc + l) * OH + oy + i) * OW + ox + j, lanes[l]);
            }
        }
    }
}
#endif
