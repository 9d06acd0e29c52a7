// 8-bit quantized ops (edgesdk/ops/quantize.py), lowered by lower/quantize.py. Tensors are NCHW
// bytes (uint8 or int8, -DXQ_S / -DYQ_S / -DAQ_S / -DBQ_S = 1 for int8); accumulation is int32 and
// requantization is gemmlowp's integer-only form, bit-exact with edgesdk/quant/fixedpoint.py:
//   requantize(acc, m, shift) = RDBPOT(SRDHM(sat32(acc << max(shift, 0)), m), max(-shift, 0))
// with SRDHM taken in 64-bit arithmetic. The host refuses (NotLowerable) any layer whose int32
// accumulator could overflow, so that no sum here ever wraps and no saturation of the
// reference's int64 sums is skipped.
//
// Weights are stored with their zero point already subtracted (w' = w - w_zp[oc]) as char, or as
// short (-DWQ_SHORT=1) when some w' leaves [-128, 127] (uint8 weights whose zero point is far
// from 128).
// Activation zero points are subtracted in the kernels, so padding (skipped taps) contributes 0,
// exactly as the reference pads (x - x_zp) with zeros.

#define INT32_MIN_ (-2147483647 - 1)
#define convert_intV_ CAT(convert_int, VEC)

#if XQ_S
typedef char XQ_T;
#else
typedef uchar XQ_T;
#endif
#if YQ_S
typedef char YQ_T;
#define YQ_NAME char
#else
typedef uchar YQ_T;
#define YQ_NAME uchar
#endif
#if AQ_S
typedef char AQ_T;
#else
typedef uchar AQ_T;
#endif
#if BQ_S
typedef char BQ_T;
#else
typedef uchar BQ_T;
#endif
#if WQ_SHORT
typedef short WQ_T;
#else
typedef char WQ_T;
#endif
#define WQ_VLOAD(p) convert_intV_(vloadV(0, (p)))

// gemmlowp SaturatingRoundingDoublingHighMul: (a * b + nudge) / 2^31, the division truncating
// toward zero (C's), the one overflowing case (INT32_MIN * INT32_MIN) saturated.
inline int q_srdhm(int a, int b) {
    if (a == INT32_MIN_ && b == INT32_MIN_) return INT_MAX;
    const long ab = (long)a * (long)b;
    const long nudge = ab >= 0 ? (1L << 30) : 1L - (1L << 30);
    return (int)((ab + nudge) / (1L << 31));
}

// gemmlowp RoundingDivideByPOT: x / 2^e rounded to nearest, ties away from zero (e in 0..31).
inline int q_rdbpot(int x, int e) {
    const int mask = (int)((1L << e) - 1L);
    const int remainder = x & mask;
    const int threshold = (mask >> 1) + (x < 0 ? 1 : 0);
    return (x >> e) + (remainder > threshold ? 1 : 0);
}

// TFLite MultiplyByQuantizedMultiplier; the left shift saturates to int32 (fixedpoint.requantize).
inline int q_requantize(long acc, int m, int shift) {
    const int left = max(shift, 0);
    const long shifted = clamp(acc * (1L << left), (long)INT32_MIN_, (long)INT_MAX);
    return q_rdbpot(q_srdhm((int)shifted, m), max(-shift, 0));
}

// fixedpoint.requantize_to: clamp(requantize(acc) + zero_point, lo, hi), in 64 bits (a saturated
// requantized value plus the zero point must not wrap).
inline int q_output(long acc, int m, int shift, int zp, int lo, int hi) {
    return (int)clamp((long)q_requantize(acc, m, shift) + zp, (long)lo, (long)hi);
}

// The same on VEC lanes of int32 accumulators at once (the convolutions' epilogues): lanes are
// pixels of one channel (m, shift uniform) or channels of one pixel. -DQLEFT=0 when the host
// knows no shift is positive (multipliers below 1: every convolution in practice), which skips
// the saturating left shift. Vector builtins get vector arguments only: Oclgrind reads garbage
// for the scalar of max(int4, int) and clamp(int4, int, int).
#ifndef QLEFT
#define QLEFT 1
#endif
#define longV CAT(long, VEC)
#define convert_longV CAT(convert_long, VEC)
inline intV q_requantizeV(intV acc, intV m, intV shift) {
#if QLEFT
    const longV left = convert_longV(max(shift, (intV)(0)));
    const intV a = convert_intV_(clamp(convert_longV(acc) * ((longV)(1) << left), (longV)(INT32_MIN_),
                                       (longV)(INT_MAX)));
#else
    const intV a = acc;
#endif
    const intV right = max(-shift, (intV)(0));
    const longV ab = convert_longV(a) * convert_longV(m);
    const longV total = ab + select((longV)(1L - (1L << 30)), (longV)(1L << 30), ab >= 0);
    intV x = convert_intV_(total / (1L << 31));
    x = select(x, (intV)(INT_MAX), (a == INT32_MIN_) & (m == INT32_MIN_));
    const intV mask = convert_intV_(((longV)(1) << convert_longV(right)) - 1);
    const intV threshold = (mask >> 1) + select((intV)(0), (intV)(1), x < 0);
    return (x >> right) + select((intV)(0), (intV)(1), (x & mask) > threshold);
}
// clamp(requantize(acc) + zp, lo, hi): the int32 saturating add then the clamp to [lo, hi] (a
// subrange of int32) is the reference's clamp of the exact sum.
inline intV q_outputV(intV acc, intV m, intV shift, int zp, int lo, int hi) {
    return clamp(add_sat(q_requantizeV(acc, m, shift), (intV)(zp)), (intV)(lo), (intV)(hi));
}

#ifdef QREQUANTIZE_CHECK
// Not an op: the fixed-point arithmetic on given values, scalar and vector (tests compare both
// with edgesdk.quant.fixedpoint on edge values). TOTAL is a multiple of VEC.
__kernel void requantize_check(__global const long* restrict acc, __global const int* restrict m,
                               __global const int* restrict shift, __global int* restrict scalar_out,
                               __global int* restrict vector_out) {
    const int i0 = get_global_id(0) * VEC;
    if (i0 >= TOTAL) return;
    for (int i = i0; i < i0 + VEC; ++i) scalar_out[i] = q_requantize(acc[i], m[i], shift[i]);
    vstoreV(q_requantizeV(convert_intV_(CAT(vload, VEC)(0, acc + i0)), vloadV(0, m + i0), vloadV(0, shift + i0)), 0,
            vector_out + i0);
}
#endif

#ifdef QCONV_OC
// Ungrouped convolution (and QGemm / QLinearMatMul as 1x1 convolutions of 1x1 images), vectors
// along output channels (conv.cl's conv_oc): a work-item computes PIX consecutive output pixels x
// OCB = NV * VEC output channels of one block.
//   -DN C H W OC OH OW KH KW SH SW DH DW PT PL   geometry (C: input channels)
//   -DXZP YZP QMIN QMAX   zero points and the output clamp; NBLK = ceil(OC / OCB)
//   -DQDOT=0: int32 path. Weights (NBLK, KH, KW, C, OCB) of WQ_T, OCB-wide vector loads (charN),
//             x loaded per pixel with its zero point subtracted, int32 multiply-accumulate.
//   -DQDOT=1/2/3: 4x8-bit dot products (1 cl_khr_integer_dot_product, 2
//             cl_arm_integer_dot_product_int8, 3 the same arithmetic written out, for tests on
//             devices with neither). Weights (NBLK, KH, KW, C4, OCB, 4) of char, C padded to C4 * 4
//             with zero weights; x as signed char4 of four channels: xs = x - 128 for uint8 (x ^
//             0x80), x for int8, padding taps and channels past C read XPAD (= x_zp in that signed
//             form). So sum (x - x_zp) w' = sum xs w' + XOFF * sum w' over all taps, and the host
//             folds XOFF * sum w' (XOFF = 128 - x_zp for uint8, -x_zp for int8) into the bias.
// The bias buffer (int32, NBLK * OCB, zeros without a bias) and mult / shift (int32 per output
// channel, padded to NBLK * OCB) always come from the host.
#define P (OH * OW)
#define HW (H * W)
#define OCB (NV * VEC)

#if QDOT == 1
#pragma OPENCL EXTENSION cl_khr_integer_dot_product : enable
#if defined(__opencl_c_integer_dot_product_input_4x8bit)
#define DOT4(a, b) dot((a), (b))
#else
#define DOT4(a, b) dot_4x8packed_ss_int(as_uint(a), as_uint(b))
#endif
#elif QDOT == 2
#pragma OPENCL EXTENSION cl_arm_integer_dot_product_int8 : enable
#define DOT4(a, b) arm_dot((a), (b))
#elif QDOT == 3
#define DOT4(a, b) ((int)(a).x * (int)(b).x + (int)(a).y * (int)(b).y + (int)(a).z * (int)(b).z + \
                    (int)(a).w * (int)(b).w)
#endif

#if QDOT
#define C4 ((C + 3) / 4)
#if XQ_S
#define XSIGNED(v) ((char)(v))
#else
#define XSIGNED(v) as_char((uchar)((v) ^ 0x80))
#endif
// The four channels c..c+3 at one input position (xp: channel 0 there) as signed chars, XPAD
// past C.
inline char4 load_x4(const __global XQ_T* xp, int c) {
    return (char4)(XSIGNED(xp[c * HW]),
                   c + 1 < C ? XSIGNED(xp[(c + 1) * HW]) : (char)(XPAD),
                   c + 2 < C ? XSIGNED(xp[(c + 2) * HW]) : (char)(XPAD),
                   c + 3 < C ? XSIGNED(xp[(c + 3) * HW]) : (char)(XPAD));
}
#endif

__kernel void qconv_oc(__global const XQ_T* restrict x, __global const WQ_T* restrict w,
                       __global const int* restrict bias, __global const int* restrict mult,
                       __global const int* restrict shift, __global YQ_T* restrict y) {
    const int p0 = get_global_id(0) * PIX;
    const int blk = get_global_id(1);
    const int n = get_global_id(2);
    if (p0 >= P || blk >= NBLK) return;
    const __global XQ_T* xn = x + n * C * HW;
    int iy0[PIX], ix0[PIX];
    #pragma unroll
    for (int p = 0; p < PIX; ++p) {
        const int q = min(p0 + p, P - 1);  // pixels past P recompute the last one, never stored
        iy0[p] = (q / OW) * SH - PT;
        ix0[p] = (q % OW) * SW - PL;
    }
#if QDOT
    int acc[PIX][OCB];
    #pragma unroll
    for (int p = 0; p < PIX; ++p)
        #pragma unroll
        for (int o = 0; o < OCB; ++o) acc[p][o] = 0;
    const __global char* wb = w + blk * (KH * KW * C4 * OCB * 4);
#else
    intV acc[PIX][NV];
    #pragma unroll
    for (int p = 0; p < PIX; ++p)
        #pragma unroll
        for (int v = 0; v < NV; ++v) acc[p][v] = (intV)(0);
    const __global WQ_T* wb = w + blk * (KH * KW * C * OCB);
#endif
    for (int i = 0; i < KH; ++i) {
        for (int j = 0; j < KW; ++j) {
            const int tap = i * KW + j;
            // As conv_oc: one pointer per pixel, at the image origin off the data (keep[p] 0),
            // and a hot loop without masking when every pixel of the tap is on the data.
            const __global XQ_T* xq[PIX];
            int keep[PIX];
            int interior = 1;
            #pragma unroll
            for (int p = 0; p < PIX; ++p) {
                const int iy = iy0[p] + i * DH, ix = ix0[p] + j * DW;
                keep[p] = iy >= 0 && iy < H && ix >= 0 && ix < W;
                xq[p] = xn + (keep[p] ? iy * W + ix : 0);
                interior = interior && keep[p];
            }
#if QDOT
            const __global char* wc = wb + tap * (C4 * OCB * 4);
            for (int c = 0; c < C4 * 4; c += 4, wc += OCB * 4) {
                char4 xs[PIX];
                #pragma unroll
                for (int p = 0; p < PIX; ++p) xs[p] = keep[p] ? load_x4(xq[p], c) : (char4)((char)(XPAD));
                #pragma unroll
                for (int o = 0; o < OCB; ++o) {
                    const char4 wv = vload4(o, wc);
                    #pragma unroll
                    for (int p = 0; p < PIX; ++p) acc[p][o] += DOT4(xs[p], wv);
                }
            }
#else
            const __global WQ_T* wc = wb + tap * (C * OCB);
#define QCONV_OC_STEP(X_OF_P)                                            \
            for (int c = 0; c < C; ++c, wc += OCB) {                     \
                intV wv[NV];                                             \
                _Pragma("unroll")                                        \
                for (int v = 0; v < NV; ++v) wv[v] = WQ_VLOAD(wc + v * VEC); \
                _Pragma("unroll")                                        \
                for (int p = 0; p < PIX; ++p) {                          \
                    const int xv = (X_OF_P);                             \
                    xq[p] += HW;                                         \
                    _Pragma("unroll")                                    \
                    for (int v = 0; v < NV; ++v) acc[p][v] += xv * wv[v]; \
                }                                                        \
            }
            if (interior) {
                QCONV_OC_STEP((int)xq[p][0] - XZP)
            } else {
                QCONV_OC_STEP(keep[p] ? (int)xq[p][0] - XZP : 0)
            }
#endif
        }
    }
    const int oc0 = blk * OCB;
    #pragma unroll
    for (int p = 0; p < PIX; ++p) {
        const int q = p0 + p;
        if (q >= P) continue;
        #pragma unroll
        for (int v = 0; v < NV; ++v) {
            const int c0 = oc0 + v * VEC;
#if QDOT
            const intV sums = vloadV(0, acc[p] + v * VEC);
#else
            const intV sums = acc[p][v];
#endif
            const intV out = q_outputV(sums + vloadV(0, bias + c0), vloadV(0, mult + c0), vloadV(0, shift + c0), YZP,
                                       QMIN, QMAX);
            int lanes[VEC];
            vstoreV(out, 0, lanes);
            #pragma unroll
            for (int l = 0; l < VEC; ++l)
                if (c0 + l < OC) y[(n * OC + c0 + l) * P + q] = (YQ_T)lanes[l];
        }
    }
}
#endif

#ifdef QCONV_DIRECT
// Grouped and depthwise convolution, int32 path: a work-item computes VEC consecutive output
// columns of one row of one output channel. Weights (OC, CG, KH, KW) of WQ_T (zero point
// subtracted). A tap whose VEC inputs all lie inside the row is one vector load (uchar8 for
// VEC 8; every other element of a 2 * VEC load for stride 2), otherwise lanes load one by one.
//   -DN C H W OC OH OW KH KW SH SW DH DW PT PL CG OCG XZP YZP QMIN QMAX
#define HW (H * W)
#define OWT ((OW + VEC - 1) / VEC)
#if SW == 1
#define ROW_SPAN VEC
#define LOAD_ROW(p) convert_intV_(vloadV(0, (p)))
#elif SW == 2 && VEC == 2
#define ROW_SPAN 4
#define LOAD_ROW(p) convert_intV_((vload4(0, (p))).even)
#elif SW == 2 && VEC == 4
#define ROW_SPAN 8
#define LOAD_ROW(p) convert_intV_((vload8(0, (p))).even)
#elif SW == 2 && VEC == 8
#define ROW_SPAN 16
#define LOAD_ROW(p) convert_intV_((vload16(0, (p))).even)
#endif

__kernel void qconv_direct(__global const XQ_T* restrict x, __global const WQ_T* restrict w,
                           __global const int* restrict bias, __global const int* restrict mult,
                           __global const int* restrict shift, __global YQ_T* restrict y) {
    const int ox0 = (get_global_id(0) % OWT) * VEC;
    const int oy = get_global_id(0) / OWT;
    const int oc = get_global_id(1);
    const int n = get_global_id(2);
    if (oy >= OH || oc >= OC) return;
    const int g = oc / OCG;
    const __global XQ_T* xg = x + (n * C + g * CG) * HW;
    const __global WQ_T* wo = w + oc * (CG * KH * KW);
    intV acc = (intV)(0);
#if CG == 1
    #pragma unroll
#endif
    for (int i = 0; i < KH; ++i) {
        const int iy = oy * SH + i * DH - PT;
        if (iy < 0 || iy >= H) continue;
        for (int c = 0; c < CG; ++c) {
            const __global XQ_T* row = xg + c * HW + iy * W;
#if CG == 1
            #pragma unroll
#endif
            for (int j = 0; j < KW; ++j) {
                const int wv = (int)wo[(c * KH + i) * KW + j];
                const int ix0 = ox0 * SW + j * DW - PL;
                intV xv;
#ifdef ROW_SPAN
                if (ix0 >= 0 && ix0 + ROW_SPAN <= W) {
                    xv = LOAD_ROW(row + ix0) - XZP;
                } else
#endif
                {
                    int lanes[VEC];
                    #pragma unroll
                    for (int l = 0; l < VEC; ++l) {
                        const int ix = ix0 + l * SW;
                        lanes[l] = ix >= 0 && ix < W ? (int)row[ix] - XZP : 0;
                    }
                    xv = vloadV(0, lanes);
                }
                acc += xv * wv;
            }
        }
    }
    const intV out = q_outputV(acc + bias[oc], (intV)(mult[oc]), (intV)(shift[oc]), YZP, QMIN, QMAX);
    __global YQ_T* yrow = y + ((n * OC + oc) * OH + oy) * OW + ox0;
    if (ox0 + VEC <= OW) {
        vstoreV(CAT(convert_, CAT(YQ_NAME, VEC))(out), 0, yrow);
    } else {
        int lanes[VEC];
        vstoreV(out, 0, lanes);
        for (int l = 0; l < OW - ox0; ++l) yrow[l] = (YQ_T)lanes[l];
    }
}
#endif

#if defined(QBINARY_SAME) || defined(QBINARY_BROADCAST)
// QLinearAdd (TFLite's quantized Add: both inputs shifted left by 20 and rescaled to twice the
// larger input scale, summed, rescaled to the output) and QLinearMul (one multiplier for
// a_scale * b_scale / y_scale).
//   -DQOP=0 add: AM AS BM BS OM OS;  QOP=1 mul: OM OS.  -DAZP BZP YZP QMIN QMAX TOTAL
inline YQ_T q_binary(int a, int b) {
#if QOP == 0
    const long sa = q_requantize((long)(a - AZP) * (1L << 20), AM, AS);
    const long sb = q_requantize((long)(b - BZP) * (1L << 20), BM, BS);
    const long sum = clamp(sa + sb, (long)INT32_MIN_, (long)INT_MAX);
    return (YQ_T)q_output(sum, OM, OS, YZP, QMIN, QMAX);
#else
    return (YQ_T)q_output((long)(a - AZP) * (long)(b - BZP), OM, OS, YZP, QMIN, QMAX);
#endif
}
#endif

#ifdef QBINARY_SAME
// Both operands of the output's shape: VEC elements per work-item.
__kernel void qbinary_same(__global const AQ_T* restrict a, __global const BQ_T* restrict b,
                           __global YQ_T* restrict y) {
    const int i0 = get_global_id(0) * VEC;
    if (i0 >= TOTAL) return;
    if (i0 + VEC <= TOTAL) {
        int av[VEC], bv[VEC];
        vstoreV(convert_intV_(vloadV(0, a + i0)), 0, av);
        vstoreV(convert_intV_(vloadV(0, b + i0)), 0, bv);
        YQ_T out[VEC];
        #pragma unroll
        for (int l = 0; l < VEC; ++l) out[l] = q_binary(av[l], bv[l]);
        vstoreV(vloadV(0, out), 0, y + i0);
    } else {
        for (int i = i0; i < TOTAL; ++i) y[i] = q_binary(a[i], b[i]);
    }
}
#endif

#ifdef QBINARY_BROADCAST
// numpy broadcasting over the output dims D0..D5 (SAk / SBk: element strides, 0 where broadcast).
__kernel void qbinary_broadcast(__global const AQ_T* restrict a, __global const BQ_T* restrict b,
                                __global YQ_T* restrict y) {
    const int i = get_global_id(0);
    if (i >= TOTAL) return;
    UNRAVEL6(i);
    const int i0 = rest;
    const int ia = i0 * SA0 + i1 * SA1 + i2 * SA2 + i3 * SA3 + i4 * SA4 + i5 * SA5;
    const int ib = i0 * SB0 + i1 * SB1 + i2 * SB2 + i3 * SB3 + i4 * SB4 + i5 * SB5;
    y[i] = q_binary(a[ia], b[ib]);
}
#endif

#ifdef QGLOBAL_AVG
// QLinearGlobalAveragePool: one (n, c) plane of SPATIAL elements per work-item; the sum of
// (x - XZP) requantized by M / S (x_scale / (y_scale * SPATIAL)), clamped to the output type.
#define SV (SPATIAL / VEC * VEC)
__kernel void qglobal_avg(__global const XQ_T* restrict x, __global YQ_T* restrict y) {
    const int nc = get_global_id(0);
    if (nc >= PLANES) return;
    const __global XQ_T* plane = x + nc * SPATIAL;
    intV accv = (intV)(0);
    for (int k = 0; k < SV; k += VEC) accv += convert_intV_(vloadV(0, plane + k));
    int lanes[VEC];
    vstoreV(accv, 0, lanes);
    int acc = 0;
    for (int l = 0; l < VEC; ++l) acc += lanes[l];
    for (int k = SV; k < SPATIAL; ++k) acc += plane[k];
    y[nc] = (YQ_T)q_output((long)acc - (long)SPATIAL * XZP, M, S, YZP, QMIN, QMAX);
}
#endif

#ifdef QAVG_POOL
// QLinearAveragePool: one output element per work-item; taps outside the input (explicit pads
// and the ceil_mode overhang) add 0; the divisor of each output position is in its (mult,
// shift) pair (OH * OW of them, from the host's window counts).
//   -DN C H W OH OW KH KW SH SW DH DW PT PL XZP YZP QMIN QMAX
__kernel void qavg_pool(__global const XQ_T* restrict x, __global const int* restrict mult,
                        __global const int* restrict shift, __global YQ_T* restrict y) {
    const int i = get_global_id(0);
    if (i >= N * C * OH * OW) return;
    const int ox = i % OW, oy = (i / OW) % OH, nc = i / (OW * OH);
    const __global XQ_T* plane = x + nc * (H * W);
    int acc = 0;
    for (int ki = 0; ki < KH; ++ki) {
        const int iy = oy * SH + ki * DH - PT;
        if (iy < 0 || iy >= H) continue;
        for (int kj = 0; kj < KW; ++kj) {
            const int ix = ox * SW + kj * DW - PL;
            if (ix >= 0 && ix < W) acc += (int)plane[iy * W + ix] - XZP;
        }
    }
    const int pos = oy * OW + ox;
    y[i] = (YQ_T)q_output(acc, mult[pos], shift[pos], YZP, QMIN, QMAX);
}
#endif

#ifdef QMAX_POOL
// MaxPool on an 8-bit tensor (the max of the codes is the code of the max: scales are positive),
// one output per work-item. Taps off the data are skipped; a window without any gives QMIN, the
// type's lowest code, which is what the reference pads with.
//   -DN C H W OH OW KH KW SH SW DH DW PT PL QMIN
__kernel void qmax_pool(__global const XQ_T* restrict x, __global XQ_T* restrict y) {
    const int i = get_global_id(0);
    if (i >= N * C * OH * OW) return;
    const int ox = i % OW, oy = (i / OW) % OH, nc = i / (OW * OH);
    const __global XQ_T* plane = x + nc * (H * W);
    int acc = QMIN;
    for (int ki = 0; ki < KH; ++ki) {
        const int iy = oy * SH + ki * DH - PT;
        if (iy < 0 || iy >= H) continue;
        for (int kj = 0; kj < KW; ++kj) {
            const int ix = ox * SW + kj * DW - PL;
            if (ix >= 0 && ix < W) acc = max(acc, (int)plane[iy * W + ix]);
        }
    }
    y[i] = (XQ_T)acc;
}
#endif

#if defined(QUANTIZE_LINEAR) || defined(DEQUANTIZE_LINEAR)
// Per-tensor (AXD 1) or per-axis: element i uses parameter (i / INNER) % AXD. VEC elements per
// work-item. -DTOTAL INNER AXD
#define PARAM_OF(i) (AXD == 1 ? 0 : ((i) / INNER) % AXD)
#endif

#ifdef QUANTIZE_LINEAR
// saturate(rint(x / scale) + zero_point), NaN -> QMIN, as the reference (numpy float32 division,
// round half to even). The division must be correctly rounded: -DQ_FP64=1 divides in double
// (exact for float operands, then rounded once), else float division (correctly rounded on CPUs;
// OpenCL lets GPUs be 2.5 ulp off without -cl-fp32-correctly-rounded-divide-sqrt).
#if Q_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#define QDIV(a, b) ((float)((double)(a) / (double)(b)))
#else
#define QDIV(a, b) ((a) / (b))
#endif
__kernel void quantize_linear(__global const X_T* restrict x, __global const float* restrict scale,
                              __global const int* restrict zero_point, __global YQ_T* restrict y) {
    const int i0 = get_global_id(0) * VEC;
    if (i0 >= TOTAL) return;
    const int end = min(i0 + VEC, TOTAL);
    for (int i = i0; i < end; ++i) {
        const int k = PARAM_OF(i);
        const float v = rint(QDIV(LOAD_X(x, i), scale[k])) + (float)zero_point[k];
        y[i] = (YQ_T)(isnan(v) ? QMIN : (int)clamp(v, (float)QMIN, (float)QMAX));
    }
}
#endif

#ifdef DEQUANTIZE_LINEAR
// (x - zero_point) * scale in float32 (the reference's arithmetic: exact int, one rounding).
__kernel void dequantize_linear(__global const XQ_T* restrict x, __global const float* restrict scale,
                                __global const int* restrict zero_point, __global Y_T* restrict y) {
    const int i0 = get_global_id(0) * VEC;
    if (i0 >= TOTAL) return;
    const int end = min(i0 + VEC, TOTAL);
    for (int i = i0; i < end; ++i) {
        const int k = PARAM_OF(i);
        STORE_Y(y, i, (float)((int)x[i] - zero_point[k]) * scale[k]);
    }
}
#endif

#ifdef QCONCAT
// One part of QLinearConcat: x viewed as (OUTER, AX, INNER) goes to y (OUTER, YAX, INNER) at axis
// offset OFF, rescaled to the output's scale and zero point (ops.quantize.rescale_params: M, S,
// rounded once), or copied (-DQCOPY=1) where the part's parameters and type are the output's.
__kernel void qconcat(__global const XQ_T* restrict x, __global YQ_T* restrict y) {
    const int i = get_global_id(0);
    if (i >= OUTER * AX * INNER) return;
#if QCOPY
    const YQ_T v = (YQ_T)x[i];
#else
    const YQ_T v = (YQ_T)q_output((long)x[i] - XZP, M, S, YZP, QMIN, QMAX);
#endif
    y[concat_index(i, AX, INNER, YAX, OFF)] = v;
}
#endif

#ifdef QLOOKUP
// QLinearLookup: y = table[x] (index x for uint8, x + 128 for int8), VEC elements per work-item.
__kernel void qlookup(__global const XQ_T* restrict x, __global const YQ_T* restrict table,
                      __global YQ_T* restrict y) {
    const int i0 = get_global_id(0) * VEC;
    if (i0 >= TOTAL) return;
    const int end = min(i0 + VEC, TOTAL);
    for (int i = i0; i < end; ++i) y[i] = table[(uchar)x[i] ^ (XQ_S ? 0x80 : 0)];
}
#endif
