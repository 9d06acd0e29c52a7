// ConvTranspose (2-D, NCHW), gather formulation: every output element sums the input values
// that scatter onto it, so there are no atomics and no scratch. With the ONNX definition
//   oy = iy * SH - PT + ky * DH    (ox likewise)
// an output row oy takes input row iy = (oy + PT - ky * DH) / SH for every tap ky where that
// division is exact and 0 <= iy < H. The host derives PT / PL and OH / OW from pads,
// output_padding, output_shape and auto_pad (output_padding only makes OH / OW larger; the extra
// rows simply find fewer taps), so the kernel never needs PB / PR.
//
// -D constants: N C H W (input), OC OH OW (output), KH KW, SH SW (strides), DH DW (dilations),
//   PT PL (top / left pads), G (groups), CG = C / G, OCG = OC / G, ROWS (output channels of one
//   group per work-item, default 4; rows past the group's end recompute its last channel and are
//   not stored), HAS_BIAS, ALPHA (default 1), ACT/ACT_P0/ACT_P1, HALF_PRODUCTS,
//   X_HALF W_HALF B_HALF Y_HALF.
// Buffers: x X_T[N*C*H*W]; w W_T[C * OCG * KH * KW] in ONNX layout (C_in, C_out / G, KH, KW);
//   bias B_T[OC] (bind any buffer when HAS_BIAS is 0); y Y_T[N*OC*OH*OW].
// NDRange: 3-D global (OW, OH, N * G * ceil(OCG / ROWS)), every dimension may be rounded up
//   (guarded), any local size (e.g. (16, 4, 1) or null).

#ifndef ROWS
#define ROWS 4
#endif
#define OCT ((OCG + ROWS - 1) / ROWS)
#define KK (KH * KW)

__kernel void conv_transpose2d(__global const X_T* restrict x, __global const W_T* restrict w,
                               __global const B_T* restrict bias, __global Y_T* restrict y) {
    const int ox = get_global_id(0);
    const int oy = get_global_id(1);
    const int z = get_global_id(2);
    if (ox >= OW || oy >= OH || z >= N * G * OCT) return;
    const int n = z / (G * OCT);
    const int g = (z / OCT) % G;
    const int ocg0 = (z % OCT) * ROWS;  // first output channel within the group
    const __global X_T* xg = x + (n * C + g * CG) * (H * W);
    // w[(ic, ocg, ky, kx)] = w[((g * CG + c) * OCG + ocg) * KK + ky * KW + kx]
    const __global W_T* wg = w + g * CG * OCG * KK;
    int wrow[ROWS];
    float acc[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        wrow[r] = min(ocg0 + r, OCG - 1) * KK;
        acc[r] = 0.0f;
    }
    for (int ky = 0; ky < KH; ++ky) {
        const int ty = oy + PT - ky * DH;
        if (ty < 0 || ty % SH != 0) continue;
        const int iy = ty / SH;
        if (iy >= H) continue;
        for (int kx = 0; kx < KW; ++kx) {
            const int tx = ox + PL - kx * DW;
            if (tx < 0 || tx % SW != 0) continue;
            const int ix = tx / SW;
            if (ix >= W) continue;
            const int tap = ky * KW + kx;
            for (int c = 0; c < CG; ++c) {
                const float xv = LOAD_X(xg, c * (H * W) + iy * W + ix);
                const int wc = c * OCG * KK + tap;
#pragma unroll
                for (int r = 0; r < ROWS; ++r) acc[r] += HMUL(xv, LOAD_W(wg, wc + wrow[r]));
            }
        }
    }
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        const int ocg = ocg0 + r;
        if (ocg >= OCG) continue;  // (not break: an early exit would stop the loop unrolling)
        const int oc = g * OCG + ocg;
        float v = ALPHA * acc[r];
#if HAS_BIAS
        v += LOAD_B(bias, oc);
#endif
        v = ACTIVATE(v);
        STORE_Y(y, ((n * OC + oc) * OH + oy) * OW + ox, v);
    }
}
