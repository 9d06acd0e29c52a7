// Softmax, LRN and ReduceMean. These stay float32 in fp16 mode (FP32_ONLY_OPS): their outputs
// are float even when their input is half.

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

#ifdef REDUCE_MEAN
// Mean over the reduced axes. The input is viewed as (kept dims K0..K3, reduced dims R0..R3)
// with input strides KS0..KS3 / RS0..RS3; one output element per work-item.
__kernel void reduce_mean(__global const X_T* restrict x, __global Y_T* restrict y) {
    const int i = get_global_id(0);
    if (i >= OUT_TOTAL) return;
    int rest = i;
    const int k3 = rest % K3; rest /= K3;
    const int k2 = rest % K2; rest /= K2;
    const int k1 = rest % K1; rest /= K1;
    const int base = rest * KS0 + k1 * KS1 + k2 * KS2 + k3 * KS3;
    float sum = 0.0f;
    for (int r0 = 0; r0 < R0; ++r0)
        for (int r1 = 0; r1 < R1; ++r1)
            for (int r2 = 0; r2 < R2; ++r2)
                for (int r3 = 0; r3 < R3; ++r3)
                    sum += LOAD_X(x, base + r0 * RS0 + r1 * RS1 + r2 * RS2 + r3 * RS3);
    STORE_Y(y, i, sum / (float)(R0 * R1 * R2 * R3));
}
#endif
