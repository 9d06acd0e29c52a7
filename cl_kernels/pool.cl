// Pooling, NCHW. Window geometry comes from edgesdk.runtime.shapes.pool_sweep on the host.

#ifdef POOL2D
// Max or average pooling, one output element per work-item. Window taps at
// iy = oy*SH - PT + i*DH. Average: the divisor counts the taps inside [CH0, CH1) x [CW0, CW1)
// (the data, plus the explicit pads when count_include_pad), never the ceil_mode overhang.
// Max follows numpy's NaN rule (a NaN tap makes the result NaN; tests/test_nan_inf.py) for one
// add per tap: MAX_STEP skips a NaN tap, but the taps' sum is NaN when one is (or when +inf meets
// -inf), and only then is the window walked again for a NaN. (fmax, the NaN-skipping IEEE maxNum,
// costs more than MAX_STEP's compare-and-select.)
#define MAX_STEP(acc, v) ((v) > (acc) ? (v) : (acc))
__kernel void pool2d(__global const X_T* restrict x, __global Y_T* restrict y) {
    const int i = get_global_id(0);
    if (i >= N * C * OH * OW) return;
    const int ox = i % OW;
    const int oy = (i / OW) % OH;
    const int nc = i / (OW * OH);
    const __global X_T* plane = x + nc * H * W;
#if IS_MAX
    float acc = -INFINITY, probe = 0.0f;
#else
    float acc = 0.0f;
    int count = 0;
#endif
    for (int ki = 0; ki < KH; ++ki) {
        const int iy = oy * SH - PT + ki * DH;
        for (int kj = 0; kj < KW; ++kj) {
            const int ix = ox * SW - PL + kj * DW;
            const bool on_data = iy >= 0 && iy < H && ix >= 0 && ix < W;
#if IS_MAX
            if (on_data) {
                const float v = LOAD_X(plane, iy * W + ix);
                acc = MAX_STEP(acc, v);
                probe += v;
            }
#else
            if (on_data) acc += LOAD_X(plane, iy * W + ix);
            count += iy >= CH0 && iy < CH1 && ix >= CW0 && ix < CW1;
#endif
        }
    }
#if IS_MAX
    if (isnan(probe)) {
        for (int ki = 0; ki < KH; ++ki) {
            const int iy = oy * SH - PT + ki * DH;
            for (int kj = 0; kj < KW; ++kj) {
                const int ix = ox * SW - PL + kj * DW;
                if (iy >= 0 && iy < H && ix >= 0 && ix < W && isnan(LOAD_X(plane, iy * W + ix))) acc = NAN;
            }
        }
    }
#else
    acc = acc / (float)max(count, 1);
#endif
    STORE_Y(y, i, acc);
}
#endif

#ifdef GLOBAL_POOL
// Global max / average over the SPATIAL elements of each (n, c) plane, one plane per work-item,
// VEC-wide partial results combined at the end.
#define SV (SPATIAL / VEC * VEC)
__kernel void global_pool(__global const X_T* restrict x, __global Y_T* restrict y) {
    const int nc = get_global_id(0);
    if (nc >= PLANES) return;
    const __global X_T* plane = x + nc * SPATIAL;
#if IS_MAX
    // NaN rule as pool2d's: a NaN-skipping max, a sum that is NaN when a value is, a rare rescan.
    floatV accv = (floatV)(-INFINITY), probev = (floatV)(0.0f);
    for (int k = 0; k < SV; k += VEC) {
        const floatV v = VLOAD_X(plane, k);
        accv = v > accv ? v : accv;
        probev += v;
    }
    float lanes[VEC];
    vstoreV(accv, 0, lanes);
    float acc = -INFINITY, probe = hsum(probev);
    for (int l = 0; l < VEC; ++l) acc = fmax(acc, lanes[l]);
    for (int k = SV; k < SPATIAL; ++k) {
        const float v = LOAD_X(plane, k);
        acc = v > acc ? v : acc;
        probe += v;
    }
    if (isnan(probe))
        for (int k = 0; k < SPATIAL; ++k)
            if (isnan(LOAD_X(plane, k))) acc = NAN;
#else
    floatV accv = (floatV)(0.0f);
    for (int k = 0; k < SV; k += VEC) accv += VLOAD_X(plane, k);
    float acc = hsum(accv);
    for (int k = SV; k < SPATIAL; ++k) acc += LOAD_X(plane, k);
    acc = acc / (float)SPATIAL;
#endif
    STORE_Y(y, nc, acc);
}
#endif
