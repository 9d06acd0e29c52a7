// LQ-Nets binary-coded layers (issue 16, seed 002; the numbers: edgesdk/compress/lq.py).
//
// `table` (float, 3 * L entries, L = 1 << KX) describes one activation quantizer (LQQuantize):
//   [0, L)    the L - 1 ascending thresholds of the nearest-level encoder, then +INFINITY (a pad
//             that no x exceeds, so the binary search below runs over a power of two);
//   [L, 2L)   the levels in ascending order (the value of the l-th interval);
//   [2L, 3L)  the code of the l-th smallest level (as a float: an exact integer < 256).
// The level index of x is the count of thresholds < x (ties take the lower level, -inf the lowest,
// +inf the highest); NaN compares false everywhere and is handled apart.
//
// lq_quantize: LQQuantize on its own (elementwise: the level value, NaN stays NaN).
//
// lq_encode + lq_gemm: one LQ layer (LQQuantize feeding a Conv / Gemm with LQBinary weights),
// the quantizer never materialised. Geometry as conv.cl (NCHW; a Gemm is a 1x1 convolution over
// N = M images of 1x1 pixels). The matrix view of the weights has COLS = C * KH * KW columns in
// (c, kh, kw) order, WORDS = ceil(COLS / 32) uint words per bit-plane, element k at word k >> 5,
// bit k & 31 - the order of LQBinary.planes, so the encoded input lines up with the weights word
// for word (an im2col of bits).
//
// lq_codes (windows of more than one tap only): the code of every input element, once.
// lq_encode, one work-item per output pixel m (= (n * OH + oy) * OW + ox), writes into the
// scratch buffer `xb`:
//   xb[(wd * PLANES + i) * M + m]        word wd of plane i of pixel m (pixel-contiguous: the
//                                        encoder's stores and the GEMM's loads are both unit-stride
//                                        across neighbouring work-items);
//   meta[m * (PLANES + 1) + i]           popcount of plane i over all words (int);
//   meta[m * (PLANES + 1) + PLANES]      1 when any tap the pixel reads is NaN;
// with meta = xb + META_OFF. Planes 0..KX-1 are the activation bits; with MASK, plane KX is the
// mask of the taps inside the image (its coefficient is the offset c: c * sum of the valid taps'
// weights, which the bit-planes of the padding - all zero - leave out). Taps in the padding have
// every bit 0 (padding is applied after quantization: a padded tap adds exactly 0).
//
// lq_gemm, one work-item per TM pixels x TO output channels: for every word, integer popcounts
// P[i][j] += popcount(x-plane i AND w-plane j); then, in float,
//   y = sum_i coef_i * sum_j beta[o, j] * (2 P[i][j] - count_i)  (+ shift[o] = c * Wsum[o])
// coef = the activation basis (+ c for the mask plane), then NaN for a pixel that read a NaN, and
// the shared epilogue y = ACTIVATE(ALPHA * y + BETA * bias).

#define L (1 << KX)

// Count of thresholds < v (v not NaN): a branchless binary search over L entries (the last +inf).
inline int level_index(__global const float* restrict table, float v) {
    int idx = 0;
    for (int step = L >> 1; step > 0; step >>= 1)
        if (table[idx + step - 1] < v) idx += step;
    return idx;
}

#ifdef LQ_QUANTIZE
__kernel void lq_quantize(__global const X_T* restrict x, __global const float* restrict table,
                          __global Y_T* restrict y) {
    const int i = get_global_id(0);
    if (i >= TOTAL) return;
    const float v = LOAD_X(x, i);
    const float q = isnan(v) ? v : table[L + level_index(table, v)];
    STORE_Y(y, i, q);
}
#endif

#ifdef LQ_CODES
// With windows of more than one tap (PRECODED), every input element is coded once here (its
// code, 0xFFFF for NaN, as ushort at xb + CODES_OFF) and lq_encode gathers the codes of its taps.
__kernel void lq_codes(__global const X_T* restrict x, __global const float* restrict table,
                       __global uint* restrict xb) {
    const int i = get_global_id(0);
    if (i >= TOTAL) return;
    const float v = LOAD_X(x, i);
    __global ushort* codes = (__global ushort*)(xb + CODES_OFF);
    codes[i] = isnan(v) ? (ushort)0xFFFFu : (ushort)table[2 * L + level_index(table, v)];
}
#endif

#ifdef LQ_ENCODE
#define KK (KH * KW)
__kernel void lq_encode(__global const X_T* restrict x, __global const float* restrict table,
                        __global uint* restrict xb) {
#if PRECODED
    const __global ushort* xc = (const __global ushort*)(xb + CODES_OFF) + (get_global_id(0) / (OH * OW)) * C * H * W;
#endif
    const int m = get_global_id(0);
    if (m >= M) return;
    const int n = m / (OH * OW);
    const int p = m % (OH * OW);
    const int oy = p / OW;
    const int ox = p % OW;
    const __global X_T* xn = x + n * C * H * W;
    uint bits[PLANES];
    int count[PLANES];
    for (int i = 0; i < PLANES; ++i) {
        bits[i] = 0u;
        count[i] = 0;
    }
    int nan_seen = 0;
    int k = 0;
    for (int c = 0; c < C; ++c) {
        for (int ky = 0; ky < KH; ++ky) {
            const int iy = oy * SH + ky * DH - PT;
            const bool row_in = iy >= 0 && iy < H;
            for (int kx = 0; kx < KW; ++kx, ++k) {
                const int ix = ox * SW + kx * DW - PL;
                const uint b = (uint)k & 31u;
                if (row_in && ix >= 0 && ix < W) {
#if PRECODED
                    const uint code = xc[(c * H + iy) * W + ix];
                    if (code == 0xFFFFu) {
                        nan_seen = 1;
                    } else {
                        for (int i = 0; i < KX; ++i) bits[i] |= ((code >> i) & 1u) << b;
                    }
#else
                    const float v = LOAD_X(xn, (c * H + iy) * W + ix);
                    if (isnan(v)) {
                        nan_seen = 1;
                    } else {
                        const uint code = (uint)table[2 * L + level_index(table, v)];
                        for (int i = 0; i < KX; ++i) bits[i] |= ((code >> i) & 1u) << b;
                    }
#endif
#if MASK
                    bits[KX] |= 1u << b;
#endif
                }
                if (b == 31u || k == COLS - 1) {  // a full word (or the last one): store it
                    const int wd = k >> 5;
                    for (int i = 0; i < PLANES; ++i) {
                        xb[(wd * PLANES + i) * M + m] = bits[i];
                        count[i] += (int)popcount(bits[i]);
                        bits[i] = 0u;
                    }
                }
            }
        }
    }
    __global int* meta = (__global int*)(xb + META_OFF) + m * (PLANES + 1);
    for (int i = 0; i < PLANES; ++i) meta[i] = count[i];
    meta[PLANES] = nan_seen;
}
#endif

#ifdef LQ_GEMM
__kernel void lq_gemm(__global const uint* restrict xb, __global const uint* restrict wp,
                      __global const float* restrict basis, __global const float* restrict coef,
                      __global const float* restrict shift, __global const B_T* restrict bias,
                      __global Y_T* restrict y) {
    const int m0 = get_global_id(0) * TM;
    const int o0 = get_global_id(1) * TO;
    if (m0 >= M || o0 >= OC) return;
    int acc[TM][TO][PLANES][KWB];
    for (int a = 0; a < TM; ++a)
        for (int b = 0; b < TO; ++b)
            for (int i = 0; i < PLANES; ++i)
                for (int j = 0; j < KWB; ++j) acc[a][b][i][j] = 0;
    // Tiles past the end read the last pixel / channel again (clamped) and store nothing.
    int mi[TM], oi[TO];
    for (int a = 0; a < TM; ++a) mi[a] = min(m0 + a, M - 1);
    for (int b = 0; b < TO; ++b) oi[b] = min(o0 + b, OC - 1);
    for (int wd = 0; wd < WORDS; ++wd) {
        uint xw[TM][PLANES];
        for (int i = 0; i < PLANES; ++i)
            for (int a = 0; a < TM; ++a) xw[a][i] = xb[(wd * PLANES + i) * M + mi[a]];
        for (int b = 0; b < TO; ++b) {
            uint ww[KWB];
            for (int j = 0; j < KWB; ++j) ww[j] = wp[(oi[b] * KWB + j) * WORDS + wd];
            for (int a = 0; a < TM; ++a)
                for (int i = 0; i < PLANES; ++i)
                    for (int j = 0; j < KWB; ++j) acc[a][b][i][j] += (int)popcount(xw[a][i] & ww[j]);
        }
    }
    const __global int* meta = (const __global int*)(xb + META_OFF);
    for (int a = 0; a < TM; ++a) {
        const int m = m0 + a;
        if (m >= M) break;
        const __global int* mm = meta + m * (PLANES + 1);
        const bool nan_seen = mm[PLANES] != 0;
        const int n = m / (OH * OW);
        const int p = m % (OH * OW);
        for (int b = 0; b < TO; ++b) {
            const int o = o0 + b;
            if (o >= OC) break;
            float out = 0.0f;
            for (int i = 0; i < PLANES; ++i) {
                const int cnt = mm[i];
                float inner = 0.0f;
                for (int j = 0; j < KWB; ++j) inner += basis[o * KWB + j] * (float)(2 * acc[a][b][i][j] - cnt);
                out += coef[i] * inner;
            }
#if HAS_SHIFT
            out += shift[o];
#endif
            if (nan_seen) out = NAN;
            out = ALPHA * out;
#if HAS_BIAS
            out += BETA * LOAD_B(bias, o);
#endif
            STORE_Y(y, (n * OC + o) * (OH * OW) + p, ACTIVATE(out));
        }
    }
}
#endif
