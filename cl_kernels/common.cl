// Prepended to every kernel file. Everything here is selected by -D constants from the host.
//
// Storage: each tensor role (X input, A/B eltwise operands, Y output, W weights, S scratch) is
// float or half in memory. Half is storage only: values are loaded with vload_half and stored
// with vstore_half (round to nearest even), so it works on every OpenCL 1.2 device; all
// arithmetic and every accumulation happens in float.
//   -DX_HALF=0/1 -DA_HALF -DB_HALF -DY_HALF -DW_HALF -DS_HALF   (default 0)
//   -DVEC=1/2/4/8/16   vector width of the vectorised kernels
//   -DACT=...  -DACT_P0= -DACT_P1=   fused activation (ids below)
//   -DHALF_PRODUCTS=0/1/2   1: products of half inputs computed in native half (cl_khr_fp16),
//                           2: the same rounding emulated in float (for devices without it);
//                           sums stay float either way.

#ifndef VEC
#define VEC 4
#endif
#ifndef HALF_PRODUCTS
#define HALF_PRODUCTS 0
#endif
#ifndef HALF_VECTOR_SCALAR
#define HALF_VECTOR_SCALAR 0
#endif
#if HALF_PRODUCTS == 1
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
#endif

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define floatV CAT(float, VEC)
#define intV CAT(int, VEC)
#define vloadV CAT(vload, VEC)
#define vstoreV CAT(vstore, VEC)
#define vload_halfV CAT(vload_half, VEC)
#define vstore_halfV CAT(vstore_half, VEC)
#define convert_floatV CAT(convert_float, VEC)

// One storage role: element type, scalar load/store, and VEC-wide load/store at an element offset
// (vloadn(0, p + off) because vloadn(i, p) addresses p + i * n).
#define LOADF(p, i) ((p)[i])
#define STOREF(p, i, v) ((p)[i] = (v))
#define VLOADF(p, off) vloadV(0, (p) + (off))
#define VSTOREF(p, off, v) vstoreV((v), 0, (p) + (off))
#define STOREH(p, i, v) vstore_half((v), (i), (p))
#if HALF_VECTOR_SCALAR
// Some drivers (PoCL 3.1 on x86) compile vload_halfN / vstore_halfN to *aligned* vector moves,
// which fault on the element-aligned addresses the spec allows. With -DHALF_VECTOR_SCALAR=1
// (device config `half_vectors: scalar`) loads read the half bits as ushorts (element-aligned
// loads are fine) and widen them with integer operations, exactly (normals, subnormals, inf,
// nan), which is also much faster there than PoCL's scalar vload_half; stores go lane by lane
// through vstore_half.
#define ushortV CAT(ushort, VEC)
#define uintV CAT(uint, VEC)
inline floatV vload_half_lanes(const __global half* p) {
    const uintV u = CAT(convert_uint, VEC)(CAT(vload, VEC)(0, (const __global ushort*)p));
    const uintV magnitude = (u & 0x7fffu) << 13;  // exponent and mantissa in float position
    // Rescaling by 2^112 moves the exponent bias from 15 to 127; for subnormal halves the float
    // is subnormal too and the product is still exact.
    floatV f = CAT(as_float, VEC)(magnitude) * 0x1p112f;
    const intV special = CAT(as_int, VEC)(magnitude >= (0x7c00u << 13));  // inf or nan
    f = select(f, CAT(as_float, VEC)(magnitude | 0x7f800000u), special);
    return CAT(as_float, VEC)(CAT(as_uint, VEC)(f) | ((u & 0x8000u) << 16));
}
inline void vstore_half_lanes(floatV v, __global half* p) {
    float lanes[VEC];
    vstoreV(v, 0, lanes);
#pragma unroll
    for (int l = 0; l < VEC; ++l) vstore_half(lanes[l], l, p);
}
inline float load_half_bits(const __global half* p, int i) {
    const uint u = ((const __global ushort*)p)[i];
    const uint magnitude = (u & 0x7fffu) << 13;
    const float f = magnitude >= (0x7c00u << 13) ? as_float(magnitude | 0x7f800000u)
                                                 : as_float(magnitude) * 0x1p112f;
    return as_float(as_uint(f) | ((u & 0x8000u) << 16));
}
#define LOADH(p, i) load_half_bits((p), (i))
#define VLOADH(p, off) vload_half_lanes((p) + (off))
#define VSTOREH(p, off, v) vstore_half_lanes((v), (p) + (off))
#else
#define LOADH(p, i) vload_half((i), (p))
#define VLOADH(p, off) vload_halfV(0, (p) + (off))
#define VSTOREH(p, off, v) vstore_halfV((v), 0, (p) + (off))
#endif

#if X_HALF
typedef half X_T;
#define LOAD_X LOADH
#define VLOAD_X VLOADH
#else
typedef float X_T;
#define LOAD_X LOADF
#define VLOAD_X VLOADF
#endif

#if A_HALF
typedef half A_T;
#define LOAD_A LOADH
#define VLOAD_A VLOADH
#else
typedef float A_T;
#define LOAD_A LOADF
#define VLOAD_A VLOADF
#endif

#if B_HALF
typedef half B_T;
#define LOAD_B LOADH
#define VLOAD_B VLOADH
#else
typedef float B_T;
#define LOAD_B LOADF
#define VLOAD_B VLOADF
#endif

#if W_HALF
typedef half W_T;
#define LOAD_W LOADH
#define VLOAD_W VLOADH
#else
typedef float W_T;
#define LOAD_W LOADF
#define VLOAD_W VLOADF
#endif

#if S_HALF
typedef half S_T;
#define LOAD_S LOADH
#define STORE_S STOREH
#else
typedef float S_T;
#define LOAD_S LOADF
#define STORE_S STOREF
#endif

#if Y_HALF
typedef half Y_T;
#define LOAD_Y LOADH
#define STORE_Y STOREH
#define VSTORE_Y VSTOREH
#else
typedef float Y_T;
#define LOAD_Y LOADF
#define STORE_Y STOREF
#define VSTORE_Y VSTOREF
#endif

// Products of two values that came from half storage. Both factors are exactly representable in
// half, so their float product is exact and rounding it once to half gives the correctly rounded
// half product: the emulation (2), which rounds both factors and the product, is bit-identical
// to native half multiplication (1).
#if HALF_PRODUCTS == 1
#define HMUL(a, b) convert_float(convert_half(a) * convert_half(b))
#define HMULV(a, b) convert_floatV(CAT(convert_half, VEC)(a) * CAT(convert_half, VEC)(b))
#elif HALF_PRODUCTS == 2
// Without cl_khr_fp16 no variable may have type half, but a pointer to half may point at ushorts.
inline float round_to_half(float v) {
    ushort bits[1];
    vstore_half(v, 0, (__private half*)bits);
    return vload_half(0, (__private const half*)bits);
}
inline floatV round_to_halfV(floatV v) {
    ushort bits[VEC];
    vstore_halfV(v, 0, (__private half*)bits);
    return vload_halfV(0, (__private const half*)bits);
}
#define HMUL(a, b) round_to_half(round_to_half(a) * round_to_half(b))
#define HMULV(a, b) round_to_halfV(round_to_halfV(a) * round_to_halfV(b))
#else
#define HMUL(a, b) ((a) * (b))
#define HMULV(a, b) ((a) * (b))
#endif

// Fused activations (edgesdk.runtime.activations); ACT_P0/ACT_P1 are its parameters.
#define ACT_NONE 0
#define ACT_RELU 1
#define ACT_CLIP 2
#define ACT_LEAKY_RELU 3
#define ACT_SIGMOID 4
#define ACT_TANH 5
#define ACT_HARD_SIGMOID 6
#define ACT_HARD_SWISH 7
#ifndef ACT
#define ACT ACT_NONE
#endif
#ifndef ACT_P0
#define ACT_P0 0.0f
#endif
#ifndef ACT_P1
#define ACT_P1 0.0f
#endif

// Works on float and floatV alike (every builtin used is overloaded for vectors).
#if ACT == ACT_NONE
#define ACTIVATE(v) (v)
#elif ACT == ACT_RELU
#define ACTIVATE(v) fmax((v), 0.0f)
#elif ACT == ACT_CLIP
#define ACTIVATE(v) fmin(fmax((v), ACT_P0), ACT_P1)
#elif ACT == ACT_LEAKY_RELU
#define ACTIVATE(v) select((v) * ACT_P0, (v), isgreaterequal((v), 0.0f))
#elif ACT == ACT_SIGMOID
// exp of a non-positive argument never overflows: 1/(1+e^-|v|) or e^-|v|/(1+e^-|v|)
#define ACTIVATE(v) select(exp(-fabs(v)) / (1.0f + exp(-fabs(v))), 1.0f / (1.0f + exp(-fabs(v))), isgreaterequal((v), 0.0f))
#elif ACT == ACT_TANH
#define ACTIVATE(v) tanh(v)
#elif ACT == ACT_HARD_SIGMOID
#define ACTIVATE(v) fmin(fmax((v) * ACT_P0 + ACT_P1, 0.0f), 1.0f)
#elif ACT == ACT_HARD_SWISH
#define ACTIVATE(v) ((v) * fmin(fmax((v) * (1.0f / 6.0f) + 0.5f, 0.0f), 1.0f))
#endif

// Horizontal sum of a floatV (pairwise, so the rounding does not depend on the lane order).
inline float hsum(floatV v) {
#if VEC == 16
    float8 a = v.lo + v.hi;
    float4 b = a.lo + a.hi;
#elif VEC == 8
    float4 b = v.lo + v.hi;
#elif VEC == 4
    float4 b = v;
#endif
#if VEC == 2
    return v.x + v.y;
#else
    float2 c = b.lo + b.hi;
    return c.x + c.y;
#endif
}
