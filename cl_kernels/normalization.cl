// The normalization family: Softmax and LogSoftmax, LRN, LayerNormalization and
// Instance/GroupNormalization. softmax and lrn stay float32 in fp16 mode (FP32_ONLY_OPS): their
// outputs are float even when their input is half.

#ifdef SOFTMAX
// Two-pass softmax (Dukhan & Ablavatski; seed 001, Algorithm 3) over rows of D elements spaced
// INNER apart; one work-group of LOCAL work-items per row (ROWS = outer * INNER rows).
// Pass 1 reads x once and accumulates exp(x) as a (mantissa, exponent) pair: e^x = m * 2^n with
// n = rint(x * log2 e) kept as a float, so no sum ever overflows and no max pass is needed; the
// pairs combine associatively, (ma, na) + (mb, nb) = (ma 2^(na-n) + mb 2^(nb-n), n = max(na, nb)),
// which makes the work-group tree reduction exact in structure. Pass 2 reads x again and writes
// y = m * 2^(n - n_sum) / m_sum.
// NaN and infinities as in ONNX Runtime: a -inf entry (or a -3.4e38 mask) gives 0, a row with a
// NaN or +inf gives NaN, an all -inf row NaN. Beyond |v| = 2^22 the reduction is meaningless
// (v - n ln2 of two huge or infinite values): t = 0 there, so e^v is taken as 2^n, exact enough
// since such an entry only counts against others of the same magnitude, and for v = -inf the
// pair (1, -inf) weighs 0 in every sum.
inline float2 ext_exp(float v) {
    const float n = rint(v * M_LOG2E_F);
    // Cody-Waite reduction: t = v - n ln2 with ln2 split in a high part exact in float and a low part.
    const float t = fma(n, -0x1.7F7D1Cp-20f, fma(n, -0x1.62E400p-1f, v));
    return (float2)(exp(fabs(v) > 0x1p22f ? 0.0f : t), n);
}

inline float2 ext_add(float2 a, float2 b) {
    const float n = fmax(a.y, b.y);  // skips a NaN exponent: the NaN mantissa carries it
    if (n == -INFINITY) return (float2)(a.x + b.x, -INFINITY);  // weighs 0; keeps a NaN
    return (float2)(a.x * exp2(a.y - n) + b.x * exp2(b.y - n), n);
}

__kernel __attribute__((reqd_work_group_size(LOCAL, 1, 1)))
void softmax(__global const X_T* restrict x, __global float* restrict y) {
    __local float2 partial[LOCAL];
    const int row = get_group_id(0);
    const int lid = get_local_id(0);
    const int base = (row / INNER) * D * INNER + row % INNER;
    float2 acc = (float2)(0.0f, -INFINITY);
    for (int k = lid; k < D; k += LOCAL) acc = ext_add(acc, ext_exp(LOAD_X(x, base + k * INNER)));
    partial[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int stride = LOCAL / 2; stride > 0; stride >>= 1) {
        if (lid < stride) partial[lid] = ext_add(partial[lid], partial[lid + stride]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float2 total = partial[0];
    const float inv = 1.0f / total.x;
    for (int k = lid; k < D; k += LOCAL) {
        const float2 e = ext_exp(LOAD_X(x, base + k * INNER));
        y[base + k * INNER] = e.x * inv * exp2(e.y - total.y);
    }
}
#endif

#ifdef LRN
// Across-channel local response normalisation, one element per work-item:
// y = x / (BIAS + ALPHA_N * sum of x^2 over channels [c - BEFORE, c + AFTER]) ^ BETA_P,
// ALPHA_N = alpha / size.
__kernel void lrn(__global const X_T* restrict x, __global float* restrict y) {
    const int i = get_global_id(0);
    if (i >= TOTAL) return;
    const int inner = i % INNER;
    const int c = (i / INNER) % CH;
    const int outer = i / (INNER * CH);
    const __global X_T* column = x + outer * CH * INNER + inner;
    float sum = 0.0f;
    for (int k = max(c - BEFORE, 0); k <= min(c + AFTER, CH - 1); ++k) {
        const float v = LOAD_X(column, k * INNER);
        sum += v * v;
    }
    y[i] = LOAD_X(x, i) / pow(BIAS + ALPHA_N * sum, BETA_P);
}
#endif

// ---------------------------------------------------------------------------------------------
// LayerNormalization, Instance/GroupNormalization and Softmax/LogSoftmax along any axis. Unlike
// the kernels above these store y through the Y role (float or half, -DY_HALF=1); x is the X
// role, scales the W role and biases the B role (float or half each). Arithmetic in float; the
// work-group kernels reduce with common.cl's wg_sum / wg_max.

#if defined(LAYER_NORM) || defined(INSTANCE_NORM)
// Mean and 1 / sqrt(population variance + EPS) of the COLS values x[base + k], two passes over
// the row (the second sums squared deviations: no cancellation). A NaN or inf in the row makes
// both NaN (inf - inf), as in ONNX Runtime.
inline float2 row_stats(__global const X_T* x, int base, __local float* scratch) {
    const int lid = get_local_id(0);
    float s = 0.0f;
    for (int k = lid; k < COLS; k += LOCAL) s += LOAD_X(x, base + k);
    const float mean = wg_sum(scratch, s) / (float)COLS;
    float q = 0.0f;
    for (int k = lid; k < COLS; k += LOCAL) {
        const float d = LOAD_X(x, base + k) - mean;
        q += d * d;
    }
    const float var = wg_sum(scratch, q) / (float)COLS;
    return (float2)(mean, 1.0f / sqrt(var + EPS));
}
#endif

#ifdef LAYER_NORM
// LayerNormalization over the trailing axes, flattened by the host to ROWS x COLS (row-major):
// y[r, k] = ACTIVATE((x[r, k] - mean_r) * inv_std_r * scale[k] (+ bias[k])).
// -D: LAYER_NORM, ROWS, COLS, LOCAL (work-group size, a power of two, e.g. 64..256; may exceed
//     COLS), EPS (float), HAS_BIAS (0: the bias argument is not read; bind any buffer),
//     ACT/ACT_P0/ACT_P1 (optional), X_HALF, W_HALF (scale), B_HALF (bias), Y_HALF.
// Buffers: x X_T[ROWS*COLS], scale W_T[COLS], bias B_T[COLS] (or a dummy), y Y_T[ROWS*COLS].
// NDRange: global (ROWS * LOCAL), local (LOCAL): one work-group per row.
// (ONNX's optional Mean / InvStdDev outputs are not produced.)
__kernel __attribute__((reqd_work_group_size(LOCAL, 1, 1)))
void layer_norm(__global const X_T* restrict x, __global const W_T* restrict scale,
                __global const B_T* restrict bias, __global Y_T* restrict y) {
    __local float scratch[LOCAL];
    // No early return in a kernel with barriers, not even a uniform one (PoCL 3.1 then corrupts
    // its heap): work-groups past the last row recompute it and store nothing.
    const bool live = get_group_id(0) < ROWS;
    const int row = min((int)get_group_id(0), ROWS - 1);
    const int base = row * COLS;
    const float2 st = row_stats(x, base, scratch);
    for (int k = get_local_id(0); k < COLS; k += LOCAL) {
        float v = (LOAD_X(x, base + k) - st.x) * st.y * LOAD_W(scale, k);
#if HAS_BIAS
        v += LOAD_B(bias, k);
#endif
        v = ACTIVATE(v);
        if (live) STORE_Y(y, base + k, v);
    }
}
#endif

#ifdef INSTANCE_NORM
// InstanceNormalization (CPG 1) and GroupNormalization (CPG = channels per group) on (N, CH,
// SPATIAL...): row r = (n, group) covers COLS = CPG * SPATIAL contiguous values; column k is
// channel c = (r % (CH / CPG)) * CPG + k / SPATIAL, y = ACTIVATE((x - mean_r) * inv_std_r *
// scale[c] (+ bias[c])). (GroupNormalization-18's per-group scale: the host repeats it per channel.)
// -D: INSTANCE_NORM, ROWS (N * CH / CPG), COLS (CPG * SPATIAL), SPATIAL, CH, CPG (default 1),
//     LOCAL (power of two), EPS, HAS_BIAS, ACT..., X_HALF, W_HALF, B_HALF, Y_HALF.
// Buffers: x X_T[ROWS*COLS], scale W_T[CH], bias B_T[CH] (or a dummy), y Y_T[ROWS*COLS].
// NDRange: global (ROWS * LOCAL), local (LOCAL): one work-group per row.
#ifndef CPG
#define CPG 1
#endif
__kernel __attribute__((reqd_work_group_size(LOCAL, 1, 1)))
void instance_norm(__global const X_T* restrict x, __global const W_T* restrict scale,
                   __global const B_T* restrict bias, __global Y_T* restrict y) {
    __local float scratch[LOCAL];
    // No early return in a kernel with barriers, not even a uniform one (PoCL 3.1 then corrupts
    // its heap): work-groups past the last row recompute it and store nothing.
    const bool live = get_group_id(0) < ROWS;
    const int row = min((int)get_group_id(0), ROWS - 1);
    const int base = row * COLS;
    const int c0 = (row % (CH / CPG)) * CPG;
    const float2 st = row_stats(x, base, scratch);
    for (int k = get_local_id(0); k < COLS; k += LOCAL) {
        const int c = c0 + k / SPATIAL;
        float v = (LOAD_X(x, base + k) - st.x) * st.y * LOAD_W(scale, c);
#if HAS_BIAS
        v += LOAD_B(bias, c);
#endif
        v = ACTIVATE(v);
        if (live) STORE_Y(y, base + k, v);
    }
}
#endif

// Softmax / LogSoftmax (-DLOG_SOFTMAX=1) along the middle axis of an (OUTER, AXIS, INNER) view,
// max-subtracted: y = e^(x - m) / sum e^(x - m), or (x - m) - log(sum e^(x - m)). NaN and inf as
// in ONNX Runtime: a -inf entry gives exactly 0 (-inf for LogSoftmax), a row holding a NaN or
// +inf, or only -inf, is NaN throughout (x - m = inf - inf or NaN).
#if defined(SOFTMAX_AXIS) || defined(SOFTMAX_AXIS_WG)
#ifndef LOG_SOFTMAX
#define LOG_SOFTMAX 0
#endif
#if LOG_SOFTMAX
#define SOFTMAX_OUT(v, m, s) (((v) - (m)) - log(s))
#else
#define SOFTMAX_OUT(v, m, s) (exp((v) - (m)) / (s))
#endif
#endif

#ifdef SOFTMAX_AXIS
// One work-item per (outer, inner) column, three passes over its AXIS values (stride INNER, so
// neighbouring work-items read neighbouring addresses). Best when INNER is large.
// -D: SOFTMAX_AXIS, OUTER, AXIS, INNER, LOG_SOFTMAX (0/1), X_HALF, Y_HALF.
// Buffers: x X_T[OUTER*AXIS*INNER], y Y_T[OUTER*AXIS*INNER].
// NDRange: 1-D, global >= OUTER * INNER (guarded), any local size.
__kernel void softmax_axis(__global const X_T* restrict x, __global Y_T* restrict y) {
    const int i = get_global_id(0);
    if (i >= OUTER * INNER) return;
    const int base = (i / INNER) * (AXIS * INNER) + i % INNER;
    float m = -INFINITY;
    for (int k = 0; k < AXIS; ++k) m = nan_max(m, LOAD_X(x, base + k * INNER));
    float s = 0.0f;
    for (int k = 0; k < AXIS; ++k) s += exp(LOAD_X(x, base + k * INNER) - m);
    for (int k = 0; k < AXIS; ++k) STORE_Y(y, base + k * INNER, SOFTMAX_OUT(LOAD_X(x, base + k * INNER), m, s));
}
#endif

#ifdef SOFTMAX_AXIS_WG
// One work-group of LOCAL work-items per (outer, inner) row (ROWS = OUTER * INNER rows); meant
// for INNER == 1 and a long AXIS (attention scores, classifier logits), correct for any INNER.
// -D: SOFTMAX_AXIS_WG, OUTER, AXIS, INNER, LOCAL (power of two), LOG_SOFTMAX, X_HALF, Y_HALF.
// Buffers: x X_T[OUTER*AXIS*INNER], y Y_T[OUTER*AXIS*INNER].
// NDRange: global (OUTER * INNER * LOCAL), local (LOCAL).
__kernel __attribute__((reqd_work_group_size(LOCAL, 1, 1)))
void softmax_axis_wg(__global const X_T* restrict x, __global Y_T* restrict y) {
    __local float scratch[LOCAL];
    const bool live = get_group_id(0) < OUTER * INNER;  // (no early return: see layer_norm)
    const int row = min((int)get_group_id(0), OUTER * INNER - 1);
    const int lid = get_local_id(0);
    const int base = (row / INNER) * (AXIS * INNER) + row % INNER;
    float m = -INFINITY;
    for (int k = lid; k < AXIS; k += LOCAL) m = nan_max(m, LOAD_X(x, base + k * INNER));
    m = wg_max(scratch, m);
    float s = 0.0f;
    for (int k = lid; k < AXIS; k += LOCAL) s += exp(LOAD_X(x, base + k * INNER) - m);
    s = wg_sum(scratch, s);
    for (int k = lid; k < AXIS && live; k += LOCAL)
        STORE_Y(y, base + k * INNER, SOFTMAX_OUT(LOAD_X(x, base + k * INNER), m, s));
}
#endif
