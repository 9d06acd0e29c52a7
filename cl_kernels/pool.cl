// Pooling, NCHW. Window geometry comes from edgesdk.runtime.shapes.pool_sweep on the host.

#ifdef POOL2D
// Max or average pooling, one output element per work-item. Window taps at
// iy = oy*SH - PT + i*DH. Average: the divisor counts the taps inside [CH0, CH1) x [CW0, CW1)
// (the data, plus the explicit pads when count_include_pad), never the ceil_mode overhang.
__kernel void pool2d(__global const X_T* restrict x, __global Y_T* restrict y) {
    const int i = get_global_id(0);
    if (i >= N * C * OH * OW) return;
    const int ox = i % OW;
    const int oy = (i / OW) % OH;
    const int nc = i / (OW * OH);
    const __global X_T* plane = x + nc * H * W;
#if IS_MAX
    float acc = -INFINITY;
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
            if (on_data) acc = MAX_KEEP_NAN(acc, LOAD_X(plane, iy * W + ix));
#else
            if (on_data) acc += LOAD_X(plane, iy * W + ix);
            count += iy >= CH0 && iy < CH1 && ix >= CW0 && ix < CW1;
#endif
        }
    }
#if !IS_MAX
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
    floatV accv = (floatV)(-INFINITY);
    for (int k = 0; k < SV; k += VEC) accv = MAX_KEEP_NAN(accv, VLOAD_X(plane, k));
    float lanes[VEC];
    vstoreV(accv, 0, lanes);
    float acc = -INFINITY;
    for (int l = 0; l < VEC; ++l) acc = MAX_KEEP_NAN(acc, lanes[l]);
    for (int k = SV; k < SPATIAL; ++k) acc = MAX_KEEP_NAN(acc, LOAD_X(plane, k));
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
