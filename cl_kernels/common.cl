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

// Row-major coordinates i0..i5 of element `flat` in a tensor of dims D0..D5 (as -D constants;
// D0 is implied by the element count): declares `rest` (left equal to i0) and i1..i5, for the
// elementwise broadcast, Pad and strided-copy kernels, which all walk their output this way.
#define UNRAVEL6(flat)                          \
    int rest = (flat);                          \
    const int i5 = rest % D5; rest /= D5;       \
    const int i4 = rest % D4; rest /= D4;       \
    const int i3 = rest % D3; rest /= D3;       \
    const int i2 = rest % D2; rest /= D2;       \
    const int i1 = rest % D1; rest /= D1

// One storage role: element type, scalar load/store, and VEC-wide load/store at an element offset
// (vloadn(0, p + off) because vloadn(i, p) addresses p + i * n).
#define LOADF(p, i) ((p)[i])
#define STOREF(p, i, v) ((p)[i] = (v))
#define VLOADF(p, off) vloadV(0, (p) + (off))
#define VSTOREF(p, off, v) vstoreV((v), 0, (p) + (off))
#if HALF_VECTOR_SCALAR
// Some drivers (PoCL 3.1 on x86) compile vload_halfN / vstore_halfN to *aligned* vector moves,
// which fault on the element-aligned addresses the spec allows, and their scalar vload_half /
// vstore_half are slow library calls that take long to compile. With -DHALF_VECTOR_SCALAR=1
// (device config `half_vectors: scalar`) half values move as ushort bits (element-aligned ushort
// vectors are fine) and are converted with integer operations, exactly as the spec's conversions:
// widening is exact (normals, subnormals, inf, nan); narrowing rounds to nearest even.
#define ushortV CAT(ushort, VEC)
#define uintV CAT(uint, VEC)
#define convert_uintV CAT(convert_uint, VEC)
#define convert_ushortV CAT(convert_ushort, VEC)

// Defines half_bits_to_float<S>(U) and float_to_half_bits<S>(T) for a float type T and the
// uint type U of its width (S: a name suffix), so the scalar and VEC-wide versions share a body.
// * Widening: shifting exponent and mantissa into float position and rescaling by 2^112 moves
//   the exponent bias from 15 to 127 (exact for subnormal halves too); inf and nan keep all-ones
//   exponents.
// * Narrowing, round to nearest even, no branches: |v| >= 65520 rounds past the largest half
//   -> inf (nan stays a quiet nan); |v| < 2^-14 (half subnormal or zero): adding 0.5 lines the
//   10 kept bits up at the bottom of the float mantissa, the float adder rounds to nearest even
//   and the integer bits are the half; otherwise rebias the exponent and round on the 13 dropped
//   bits (+0xfff, +1 when the kept part is odd: ties to even).
#define DEFINE_HALF_BITS(T, U, S)                                                              \
inline T CAT(half_bits_to_float, S)(U u) {                                                     \
    const U magnitude = (u & 0x7fffu) << 13;                                                   \
    T f = CAT(as_, T)(magnitude) * 0x1p112f;                                                   \
    f = select(f, CAT(as_, T)(magnitude | 0x7f800000u), magnitude >= (U)(0x7c00u << 13));       \
    return CAT(as_, T)(CAT(as_, U)(f) | ((u & 0x8000u) << 16));                                \
}                                                                                              \
inline U CAT(float_to_half_bits, S)(T v) {                                                     \
    const U bits = CAT(as_, U)(v);                                                             \
    const U abs_bits = bits & 0x7fffffffu;                                                     \
    const U subnormal = CAT(as_, U)(CAT(as_, T)(abs_bits) + 0.5f) - 0x3f000000u;               \
    const U normal = (abs_bits + 0xc8000fffu + ((abs_bits >> 13) & 1u)) >> 13;                 \
    U h = select(normal, subnormal, abs_bits < (U)0x38800000u);                                \
    h = select(h, (U)0x7c00u, abs_bits >= (U)0x477ff000u);                                     \
    h = select(h, (U)0x7e00u, abs_bits > (U)0x7f800000u);                                      \
    return h | ((bits >> 16) & 0x8000u);                                                       \
}
DEFINE_HALF_BITS(float, uint, 1)
DEFINE_HALF_BITS(floatV, uintV, V)

inline floatV vload_half_lanes(const __global half* p) {
    return half_bits_to_floatV(convert_uintV(CAT(vload, VEC)(0, (const __global ushort*)p)));
}
inline void vstore_half_lanes(floatV v, __global half* p) {
    CAT(vstore, VEC)(convert_ushortV(float_to_half_bitsV(v)), 0, (__global ushort*)p);
}
inline float load_half_bits(const __global half* p, int i) {
    return half_bits_to_float1(((const __global ushort*)p)[i]);
}
inline void store_half_bits(__global half* p, int i, float v) {
    ((__global ushort*)p)[i] = (ushort)float_to_half_bits1(v);
}
#define LOADH(p, i) load_half_bits((p), (i))
#define STOREH(p, i, v) store_half_bits((p), (i), (v))
#define VLOADH(p, off) vload_half_lanes((p) + (off))
#define VSTOREH(p, off, v) vstore_half_lanes((v), (p) + (off))
#else
#define LOADH(p, i) vload_half((i), (p))
#define STOREH(p, i, v) vstore_half((v), (i), (p))
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

// Stores VEC results at y[off + l] for the lanes l < valid (all of them when valid >= VEC).
inline void store_lanes(__global Y_T* y, int off, floatV v, int valid) {
    if (valid >= VEC) {
        VSTORE_Y(y, off, v);
    } else {
        float lanes[VEC];
        vstoreV(v, 0, lanes);
        for (int l = 0; l < valid; ++l) STORE_Y(y, off + l, lanes[l]);
    }
}

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
#define ACT_GELU 8           // 0.5 x (1 + erf(x / sqrt 2))
#define ACT_GELU_TANH 9      // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
#define ACT_ERF 10
#define ACT_EXP 11
#define ACT_LOG 12
#define ACT_ABS 13
#define ACT_SQRT 14
#define ACT_RECIPROCAL 15
#define ACT_NEG 16
#define ACT_SQUARE 17
#define ACT_SILU 18          // x * sigmoid(x)
#define ACT_MISH 19          // x * tanh(softplus(x))
#define ACT_SOFTPLUS 20      // log(1 + e^x)
#ifndef ACT
#define ACT ACT_NONE
#endif
#ifndef ACT_P0
#define ACT_P0 0.0f
#endif
#ifndef ACT_P1
#define ACT_P1 0.0f
#endif
// The epilogue every conv/FC-like kernel shares: y = ACTIVATE(ALPHA * acc + BETA * bias), bias
// read only when HAS_BIAS (ALPHA/BETA are Gemm's scalings; 1 for everything else).
#ifndef ALPHA
#define ALPHA 1.0f
#endif
#ifndef BETA
#define BETA 1.0f
#endif
#ifndef HAS_BIAS
#define HAS_BIAS 0
#endif

// Works on float and floatV alike (every builtin used is overloaded for vectors; ?: selects per
// lane). NaN propagates as in ONNX Runtime (tests/test_nan_inf.py): fmax/fmin return the non-NaN
// operand, so the clamps are comparisons, which are false for NaN and let it through; +-inf give
// the limits (HardSwish(-inf) = -inf * 0 = NaN, as in ONNX Runtime).
#define CLAMP_KEEP_NAN(v, lo, hi) ((v) < (lo) ? (lo) : (v) > (hi) ? (hi) : (v))
// Overflow-free logistic function for SiLU / GELU_TANH: 1/(1+e^-|v|) or e^-|v|/(1+e^-|v|).
#define SIGMOID_OF(v) ((v) >= 0.0f ? 1.0f / (1.0f + exp(-fabs(v))) : exp(-fabs(v)) / (1.0f + exp(-fabs(v))))
#if ACT == ACT_NONE
#define ACTIVATE(v) (v)
#elif ACT == ACT_RELU
#define ACTIVATE(v) ((v) < 0.0f ? 0.0f : (v))
#elif ACT == ACT_CLIP
#define ACTIVATE(v) CLAMP_KEEP_NAN((v), ACT_P0, ACT_P1)
#elif ACT == ACT_LEAKY_RELU
#define ACTIVATE(v) select((v) * ACT_P0, (v), isgreaterequal((v), 0.0f))
#elif ACT == ACT_SIGMOID
// exp of a non-positive argument never overflows: 1/(1+e^-|v|) or e^-|v|/(1+e^-|v|)
#define ACTIVATE(v) select(exp(-fabs(v)) / (1.0f + exp(-fabs(v))), 1.0f / (1.0f + exp(-fabs(v))), isgreaterequal((v), 0.0f))
#elif ACT == ACT_TANH
#define ACTIVATE(v) tanh(v)
#elif ACT == ACT_HARD_SIGMOID
#define ACTIVATE(v) CLAMP_KEEP_NAN((v) * ACT_P0 + ACT_P1, 0.0f, 1.0f)
#elif ACT == ACT_HARD_SWISH
#define ACTIVATE(v) ((v) * CLAMP_KEEP_NAN((v) * (1.0f / 6.0f) + 0.5f, 0.0f, 1.0f))
// Ids 8.. (appended): ternaries instead of select() so that scalar constants mix with vectors
// (a vector condition selects per lane; both operands are evaluated, and an unselected lane's
// inf or NaN is discarded). Every exp below has a non-positive argument, so nothing overflows.
#elif ACT == ACT_GELU
// -inf gives -inf * 0 = NaN, as ONNX Runtime's Gelu.
#define ACTIVATE(v) (0.5f * (v) * (1.0f + erf((v) * M_SQRT1_2_F)))
#elif ACT == ACT_GELU_TANH
// 0.5 (1 + tanh(z)) = sigmoid(2z): no cancellation in 1 + tanh(z) for negative x; x^3 may
// overflow to inf, where the sigmoid is exactly 0 or 1 (-inf: -inf * 0 = NaN, as ONNX Runtime).
#define GELU_TANH_2Z(v) ((v) * (1.5957691216057308f + 0.07135481627260025f * (v) * (v)))
#define ACTIVATE(v) ((v) * SIGMOID_OF(GELU_TANH_2Z(v)))
#elif ACT == ACT_ERF
#define ACTIVATE(v) erf(v)
#elif ACT == ACT_EXP
#define ACTIVATE(v) exp(v)
#elif ACT == ACT_LOG
#define ACTIVATE(v) log(v)
#elif ACT == ACT_ABS
#define ACTIVATE(v) fabs(v)
#elif ACT == ACT_SQRT
#define ACTIVATE(v) sqrt(v)
#elif ACT == ACT_RECIPROCAL
#define ACTIVATE(v) (1.0f / (v))
#elif ACT == ACT_NEG
#define ACTIVATE(v) (-(v))
#elif ACT == ACT_SQUARE
#define ACTIVATE(v) ((v) * (v))
#elif ACT == ACT_SILU
#define ACTIVATE(v) ((v) * SIGMOID_OF(v))
#elif ACT == ACT_MISH
// tanh(log(1 + e^x)) as a rational function of e = e^-|x| (no tanh, no log, no cancellation):
// x >= 0: (1 + 2e) / (1 + 2e + 2e^2);  x < 0: n / (n + 2) with n = e (e + 2).
// +inf gives inf * 1, -inf gives -inf * 0 = NaN (as ONNX Runtime's Mish).
#define MISH_E(v) exp(-fabs(v))
#define MISH_N(v) (MISH_E(v) * (MISH_E(v) + 2.0f))
#define ACTIVATE(v) ((v) * ((v) >= 0.0f ? (1.0f + 2.0f * MISH_E(v)) / (1.0f + 2.0f * MISH_E(v) + 2.0f * MISH_E(v) * MISH_E(v)) \
                                      : MISH_N(v) / (MISH_N(v) + 2.0f)))
#elif ACT == ACT_SOFTPLUS
// max(x, 0) + log1p(e^-|x|): +inf -> inf, -inf -> 0, NaN -> NaN (the comparison drops it, log1p keeps it).
#define ACTIVATE(v) (((v) > 0.0f ? (v) : 0.0f) + log1p(exp(-fabs(v))))
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

// max / min where a NaN operand wins (numpy's max and min; fmax / fmin would drop the NaN).
// Concat: element i of a part viewed as (outer, ax, INNER) -> its index in the output (outer,
// yax, INNER) at axis offset off (tensor.cl's concat_copy, quantize.cl's qconcat).
inline int concat_index(int i, int ax, int inner, int yax, int off) {
    const int outer = i / (inner * ax);
    return (outer * yax + off + (i / inner) % ax) * inner + i % inner;
}

inline float nan_max(float a, float b) { return (a > b || isnan(a)) ? a : b; }
inline float nan_min(float a, float b) { return (a < b || isnan(a)) ? a : b; }

// Work-group reductions (normalization.cl, reduce.cl). WG_REDUCE(name, combine) defines
//   float name(__local float* scratch, float v)
// which folds v over the LOCAL work-items of the work-group (LOCAL: -D, a power of two) with
// combine(a, b), a tree in scratch (LOCAL floats), and hands every work-item the result. Every
// work-item must call it (barriers inside); the trailing barrier lets the caller reuse the scratch
// right away. wg_sum and wg_max (NaN wins) exist wherever LOCAL is defined.
#define WG_REDUCE(name, combine)                                                \
    inline float name(__local float* scratch, float v) {                        \
        const int lid = get_local_id(0);                                        \
        scratch[lid] = v;                                                       \
        barrier(CLK_LOCAL_MEM_FENCE);                                           \
        for (int s = LOCAL / 2; s > 0; s >>= 1) {                               \
            if (lid < s) scratch[lid] = combine(scratch[lid], scratch[lid + s]); \
            barrier(CLK_LOCAL_MEM_FENCE);                                       \
        }                                                                       \
        const float r = scratch[0];                                             \
        barrier(CLK_LOCAL_MEM_FENCE);                                           \
        return r;                                                               \
    }
#define WG_ADD(a, b) ((a) + (b))
#ifdef LOCAL
WG_REDUCE(wg_sum, WG_ADD)
WG_REDUCE(wg_max, nan_max)
#endif
