// Reductions along one axis of an (OUTER, AXIS, INNER) view -> (OUTER, INNER): ReduceSum/Mean/
// Max/Min/L1/L2/SumSquare/LogSum/LogSumExp/Prod (several reduced axes: the host merges adjacent
// ones into AXIS, or runs the kernel once per axis), and ArgMax/ArgMin. AXIS >= 1 (an empty
// reduction is the host's to fill with the identity). Arithmetic and accumulation in float.
//
// REDUCE_OP: 0 SUM, 1 MEAN, 2 MAX, 3 MIN, 4 L2, 5 SUM_SQUARE, 6 L1, 7 LOG_SUM, 8 LOG_SUM_EXP, 9 PROD
// NaN and inf: sums and products follow IEEE (a NaN, or +inf meeting -inf, gives NaN). MAX and MIN
// follow numpy (any NaN makes the result NaN), as pool.cl's max pooling does; ONNX Runtime's
// ReduceMax/Min keep or drop a NaN depending on where it sits. LOG_SUM_EXP is max-subtracted and
// returns the max itself when it is +-inf (ONNX Runtime: an all -inf row gives -inf, a +inf gives
// +inf).

#define REDUCE_SUM 0
#define REDUCE_MEAN 1
#define REDUCE_MAX 2
#define REDUCE_MIN 3
#define REDUCE_L2 4
#define REDUCE_SUM_SQUARE 5
#define REDUCE_L1 6
#define REDUCE_LOG_SUM 7
#define REDUCE_LOG_SUM_EXP 8
#define REDUCE_PROD 9

// nan_max / nan_min (NaN wins) and the work-group reductions are common.cl's.

#if defined(REDUCE_AXIS) || defined(REDUCE_AXIS_WG)
// INIT: the accumulator's start; STEP(acc, v): fold one value; COMBINE(a, b): merge two partial
// accumulators (work-group variant); FINISH(acc): the result.
#if REDUCE_OP == REDUCE_MAX
#define INIT (-INFINITY)
#define STEP(acc, v) nan_max((acc), (v))
#define COMBINE(a, b) nan_max((a), (b))
#elif REDUCE_OP == REDUCE_MIN
#define INIT INFINITY
#define STEP(acc, v) nan_min((acc), (v))
#define COMBINE(a, b) nan_min((a), (b))
#elif REDUCE_OP == REDUCE_PROD
#define INIT 1.0f
#define STEP(acc, v) ((acc) * (v))
#define COMBINE(a, b) ((a) * (b))
#else
#define INIT 0.0f
#define COMBINE(a, b) ((a) + (b))
#if REDUCE_OP == REDUCE_L2 || REDUCE_OP == REDUCE_SUM_SQUARE
#define STEP(acc, v) ((acc) + (v) * (v))
#elif REDUCE_OP == REDUCE_L1
#define STEP(acc, v) ((acc) + fabs(v))
#elif REDUCE_OP == REDUCE_LOG_SUM_EXP
#define STEP(acc, v) ((acc) + exp((v) - m))  // m: the max, found in a first pass
#else
#define STEP(acc, v) ((acc) + (v))
#endif
#endif

#if REDUCE_OP == REDUCE_MEAN
#define FINISH(acc) ((acc) / (float)AXIS)
#elif REDUCE_OP == REDUCE_L2
#define FINISH(acc) sqrt(acc)
#elif REDUCE_OP == REDUCE_LOG_SUM
#define FINISH(acc) log(acc)
#elif REDUCE_OP == REDUCE_LOG_SUM_EXP
#define FINISH(acc) (isinf(m) ? m : m + log(acc))
#else
#define FINISH(acc) (acc)
#endif
#endif

#ifdef REDUCE_AXIS
// One work-item per output (outer, inner); it walks the AXIS values at stride INNER.
// -D: REDUCE_AXIS, REDUCE_OP, OUTER, AXIS, INNER, X_HALF, Y_HALF.
// Buffers: x X_T[OUTER*AXIS*INNER], y Y_T[OUTER*INNER].
// NDRange: 1-D, global >= OUTER * INNER (guarded), any local size.
__kernel void reduce_axis(__global const X_T* restrict x, __global Y_T* restrict y) {
    const int i = get_global_id(0);
    if (i >= OUTER * INNER) return;
    const int base = (i / INNER) * (AXIS * INNER) + i % INNER;
#if REDUCE_OP == REDUCE_LOG_SUM_EXP
    float m = -INFINITY;
    for (int k = 0; k < AXIS; ++k) m = nan_max(m, LOAD_X(x, base + k * INNER));
#endif
    float acc = INIT;
    for (int k = 0; k < AXIS; ++k) acc = STEP(acc, LOAD_X(x, base + k * INNER));
    STORE_Y(y, i, FINISH(acc));
}
#endif

#ifdef REDUCE_AXIS_WG
// One work-group of LOCAL work-items per output (outer, inner): for INNER == 1 and a long AXIS
// (ReduceMean over the hidden size, global pooling of a long row), correct for any INNER.
// -D: REDUCE_AXIS_WG, REDUCE_OP, OUTER, AXIS, INNER, LOCAL (power of two), X_HALF, Y_HALF.
// Buffers: x X_T[OUTER*AXIS*INNER], y Y_T[OUTER*INNER].
// NDRange: global (OUTER * INNER * LOCAL), local (LOCAL).
WG_REDUCE(wg_combine, COMBINE)  // (wg_max: common.cl)
__kernel __attribute__((reqd_work_group_size(LOCAL, 1, 1)))
void reduce_axis_wg(__global const X_T* restrict x, __global Y_T* restrict y) {
    __local float scratch[LOCAL];
    // No early return in a kernel with barriers, not even a uniform one (PoCL 3.1 then corrupts
    // its heap): work-groups past the last row recompute it and store nothing.
    const bool live = get_group_id(0) < OUTER * INNER;
    const int row = min((int)get_group_id(0), OUTER * INNER - 1);
    const int lid = get_local_id(0);
    const int base = (row / INNER) * (AXIS * INNER) + row % INNER;
#if REDUCE_OP == REDUCE_LOG_SUM_EXP
    float m = -INFINITY;
    for (int k = lid; k < AXIS; k += LOCAL) m = nan_max(m, LOAD_X(x, base + k * INNER));
    m = wg_max(scratch, m);
#endif
    float acc = INIT;
    for (int k = lid; k < AXIS; k += LOCAL) acc = STEP(acc, LOAD_X(x, base + k * INNER));
    acc = wg_combine(scratch, acc);
    if (lid == 0 && live) STORE_Y(y, row, FINISH(acc));
}
#endif

#ifdef ARGREDUCE_AXIS
// ArgMax (-DARG_MAX=1) / ArgMin (-DARG_MIN=1) along AXIS; -DSELECT_LAST=1 returns the last index
// of the extreme value instead of the first. The scan is ONNX Runtime's: start at the first value
// and move on a strictly greater (smaller) value, or on greater-or-equal (smaller-or-equal) with
// SELECT_LAST. So a NaN only wins as the first value (every comparison with it is false).
// -D: ARGREDUCE_AXIS, ARG_MAX or ARG_MIN, SELECT_LAST (default 0), OUTER, AXIS, INNER, X_HALF,
//     ARG_LONG (default 0: int32 indices, which the host widens to int64; 1: writes int64 `long`
//     directly, which every full-profile OpenCL device has).
// Buffers: x X_T[OUTER*AXIS*INNER], y int[OUTER*INNER] (long with ARG_LONG=1).
// NDRange: 1-D, global >= OUTER * INNER (guarded), any local size.
#ifndef SELECT_LAST
#define SELECT_LAST 0
#endif
#ifndef ARG_LONG
#define ARG_LONG 0
#endif
#if ARG_LONG
typedef long ARG_T;
#else
typedef int ARG_T;
#endif
#if defined(ARG_MAX) && ARG_MAX
#define BETTER(v, best) (SELECT_LAST ? (v) >= (best) : (v) > (best))
#else
#define BETTER(v, best) (SELECT_LAST ? (v) <= (best) : (v) < (best))
#endif
__kernel void argreduce_axis(__global const X_T* restrict x, __global ARG_T* restrict y) {
    const int i = get_global_id(0);
    if (i >= OUTER * INNER) return;
    const int base = (i / INNER) * (AXIS * INNER) + i % INNER;
    float best = LOAD_X(x, base);
    int arg = 0;
    for (int k = 1; k < AXIS; ++k) {
        const float v = LOAD_X(x, base + k * INNER);
        if (BETTER(v, best)) {
            best = v;
            arg = k;
        }
    }
    y[i] = (ARG_T)arg;
}
#endif
