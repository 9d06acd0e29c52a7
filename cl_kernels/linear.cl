// The linear family: Gemm (fully connected) and MatMul, bias and activation in the epilogue.
//   gemm_nt          Gemm with constant weights: Y = ALPHA * X * W^T + BETA * bias (the GEMV path
//                    for batch 1), and MatMul with a constant 2-D B.
//   matmul_tiled     batched MatMul, work-group tiles in local memory (GPUs)
//   matmul_blocked   batched MatMul, register blocks per work-item (devices configuring no
//                    `matmul` work-group size: CPUs)
// Gemm with compressed (clustered, CSR, NNM) weights runs as a 1x1 convolution (conv*.cl).

#ifdef GEMM_NT
// Fully connected: Y (M x NOUT) = ALPHA * X (M x K) * W^T (W is NOUT x K) + BETA * bias.
// Work-item: ROWS outputs x BROWS batch rows, dot products VEC-wide along K. BROWS = 1 is the
// batch-1 GEMV path: every weight is read once, which is all a bandwidth-bound GEMV can do.
// The bias is indexed bias[m * BSM + o * BSO] (strides 0 broadcast it).
#define KV (K / VEC * VEC)
__kernel void gemm_nt(__global const X_T* restrict x, __global const W_T* restrict w,
                      __global const B_T* restrict bias, __global Y_T* restrict y) {
    const int o0 = get_global_id(0) * ROWS;
    const int m0 = get_global_id(1) * BROWS;
    if (o0 >= NOUT || m0 >= M) return;
    int xrow[BROWS], wrow[ROWS];
    floatV acc[BROWS][ROWS];
    #pragma unroll
    for (int b = 0; b < BROWS; ++b) {
        xrow[b] = min(m0 + b, M - 1) * K;
        #pragma unroll
        for (int r = 0; r < ROWS; ++r) acc[b][r] = (floatV)(0.0f);
    }
    #pragma unroll
    for (int r = 0; r < ROWS; ++r) wrow[r] = min(o0 + r, NOUT - 1) * K;
    for (int k = 0; k < KV; k += VEC) {
        floatV wv[ROWS];
        #pragma unroll
        for (int r = 0; r < ROWS; ++r) wv[r] = VLOAD_W(w, wrow[r] + k);
        #pragma unroll
        for (int b = 0; b < BROWS; ++b) {
            const floatV xv = VLOAD_X(x, xrow[b] + k);
            #pragma unroll
            for (int r = 0; r < ROWS; ++r) acc[b][r] += HMULV(xv, wv[r]);
        }
    }
#if K % VEC
    // The last K % VEC columns as one zero-padded vector: the epilogue then only reduces.
    floatV wt[ROWS];
    #pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        float lanes[VEC];
        #pragma unroll
        for (int l = 0; l < VEC; ++l) lanes[l] = l < K - KV ? LOAD_W(w, wrow[r] + KV + l) : 0.0f;
        wt[r] = vloadV(0, lanes);
    }
    #pragma unroll
    for (int b = 0; b < BROWS; ++b) {
        float lanes[VEC];
        #pragma unroll
        for (int l = 0; l < VEC; ++l) lanes[l] = l < K - KV ? LOAD_X(x, xrow[b] + KV + l) : 0.0f;
        const floatV xt = vloadV(0, lanes);
        #pragma unroll
        for (int r = 0; r < ROWS; ++r) acc[b][r] += HMULV(xt, wt[r]);
    }
#endif
    #pragma unroll
    for (int b = 0; b < BROWS; ++b) {
        const int m = m0 + b;
        if (m >= M) continue;  // (not break: an early exit would stop the loop unrolling)
        #pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            const int o = o0 + r;
            if (o >= NOUT) continue;  // (not break: an early exit would stop the loop unrolling)
            const float sum = hsum(acc[b][r]);
#if HAS_BIAS
            float v = ALPHA * sum + BETA * LOAD_B(bias, m * BSM + o * BSO);
#else
            float v = ALPHA * sum;
#endif
            v = ACTIVATE(v);
            STORE_Y(y, m * NOUT + o, v);
        }
    }
}
#endif

// ---- batched MatMul ----------------------------------------------------------------------------
// Y[b] (M x NN) = ACTIVATE(ALPHA * A[b] (M x K) * B[b] (K x NN) (+ bias[n])), or with TRANSPOSE_B=1
// B[b] stored as (NN x K) (attention's Q K^T without a Transpose kernel); numpy broadcasting over
// up to three batch dims. ALPHA fuses attention's 1/sqrt(d) scaling, the optional bias a following
// Add of a row vector (Linear layers).
//
// Shared -D constants:
//   M, K, NN                 the product's sizes
//   OB0 OB1 OB2              output batch dims (product = batch count; 1s where unused)
//   SA0..SA2, SB0..SB2       per-operand element strides of those batch dims (0 = broadcast)
//   TRANSPOSE_B              0: B[b] is K x NN (row-major); 1: B[b] is NN x K
//   HAS_BIAS                 1: add bias[n], a row vector of NN values (W role: float or half)
//   ALPHA (default 1), ACT/ACT_P0/ACT_P1, A_HALF, B_HALF, W_HALF (bias), Y_HALF, HALF_PRODUCTS
// Buffers (both kernels): a A_T[...], b B_T[...], bias W_T[NN] (bind any buffer when
//   HAS_BIAS is 0), y Y_T[batches * M * NN].

#if defined(MATMUL_TILED) || defined(MATMUL_BLOCKED)
#ifndef TRANSPOSE_B
#define TRANSPOSE_B 0
#endif
#define BATCHES (OB0 * OB1 * OB2)

inline int a_base(int batch) {
    const int b2 = batch % OB2, b1 = (batch / OB2) % OB1, b0 = batch / (OB2 * OB1);
    return b0 * SA0 + b1 * SA1 + b2 * SA2;
}
inline int b_base(int batch) {
    const int b2 = batch % OB2, b1 = (batch / OB2) % OB1, b0 = batch / (OB2 * OB1);
    return b0 * SB0 + b1 * SB1 + b2 * SB2;
}
inline float epilogue(float acc, __global const W_T* bias, int n) {
    float v = ALPHA * acc;
#if HAS_BIAS
    v += LOAD_W(bias, n);
#endif
    return ACTIVATE(v);
}
#endif

#ifdef MATMUL_TILED
// Local-memory tiling for GPUs. A work-group computes a TM x TN tile of Y with
// (TN / RN) x (TM / RM) work-items, each RM x RN outputs (register blocking) at rows
// ly + i * (TM / RM) and columns lx + j * (TN / RN) of the tile (strided, so neighbouring
// work-items read neighbouring local-memory words). K advances TK at a time: the work-group
// stages a TM x TK slice of A and a TK x TN slice of B in local memory (coalesced global reads in
// both layouts of B), zero-filled past M, NN and K (only 0 * 0 products reach a stored output,
// so a NaN in A or B reaches exactly the outputs it belongs to).
// -D: MATMUL_TILED, the shared constants, TM, TN, TK, RM, RN (TM % RM == TN % RN == 0).
// NDRange: global (ceil(NN / TN) * (TN / RN), ceil(M / TM) * (TM / RM), BATCHES),
//          local (TN / RN, TM / RM, 1) (required).
#define LX (TN / RN)
#define LY (TM / RM)
#define LSIZE (LX * LY)
__kernel __attribute__((reqd_work_group_size(LX, LY, 1)))
void matmul_tiled(__global const A_T* restrict a, __global const B_T* restrict bm,
                  __global const W_T* restrict bias, __global Y_T* restrict y) {
    __local float as[TM][TK + 1];
    __local float bs[TK][TN + 1];
    const int lx = get_local_id(0), ly = get_local_id(1);
    const int lid = ly * LX + lx;
    const int n0 = get_group_id(0) * TN, m0 = get_group_id(1) * TM;
    // No early return in a kernel with barriers, not even a uniform one: PoCL 3.1 then corrupts
    // its heap. Work-groups past the last batch recompute it and store nothing.
    const bool live = get_global_id(2) < BATCHES;
    const int batch = min((int)get_global_id(2), BATCHES - 1);
    const int abase = a_base(batch), bbase = b_base(batch);
    float acc[RM][RN];
#pragma unroll
    for (int i = 0; i < RM; ++i)
#pragma unroll
        for (int j = 0; j < RN; ++j) acc[i][j] = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TK) {
        for (int e = lid; e < TM * TK; e += LSIZE) {
            const int r = e / TK, c = e % TK;
            const int m = m0 + r, k = k0 + c;
            as[r][c] = (m < M && k < K) ? LOAD_A(a, abase + m * K + k) : 0.0f;
        }
        for (int e = lid; e < TK * TN; e += LSIZE) {
#if TRANSPOSE_B
            const int c = e / TK, r = e % TK;  // consecutive work-items read along K
            const int n = n0 + c, k = k0 + r;
            bs[r][c] = (n < NN && k < K) ? LOAD_B(bm, bbase + n * K + k) : 0.0f;
#else
            const int r = e / TN, c = e % TN;  // consecutive work-items read along NN
            const int n = n0 + c, k = k0 + r;
            bs[r][c] = (n < NN && k < K) ? LOAD_B(bm, bbase + k * NN + n) : 0.0f;
#endif
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int k = 0; k < TK; ++k) {
            float av[RM], bv[RN];
#pragma unroll
            for (int i = 0; i < RM; ++i) av[i] = as[ly + i * LY][k];
#pragma unroll
            for (int j = 0; j < RN; ++j) bv[j] = bs[k][lx + j * LX];
#pragma unroll
            for (int i = 0; i < RM; ++i)
#pragma unroll
                for (int j = 0; j < RN; ++j) acc[i][j] += HMUL(av[i], bv[j]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
#pragma unroll
    for (int i = 0; i < RM; ++i) {
        const int m = m0 + ly + i * LY;
        if (m >= M || !live) continue;
#pragma unroll
        for (int j = 0; j < RN; ++j) {
            const int n = n0 + lx + j * LX;
            if (n >= NN) continue;
            STORE_Y(y, (batch * M + m) * NN + n, epilogue(acc[i][j], bias, n));
        }
    }
}
#endif

#ifdef MATMUL_BLOCKED
// Register blocking without local memory, for CPU devices (PoCL runs a work-item as a loop; local
// memory and barriers buy nothing there). TRANSPOSE_B=0: a work-item computes RM rows x NV
// vectors of VEC columns, loading NV vectors of a B row and broadcasting RM scalars of A per k
// (conv_oc's 6x16 AVX2 tile with RM 6, NV 2, VEC 8). TRANSPOSE_B=1: RM rows x RN columns as
// dot products vectorised along K (B rows and A rows both contiguous), reduced once at the end.
// Rows past M / columns past NN recompute the last valid one and are not stored.
// -D: MATMUL_BLOCKED, the shared constants, VEC, RM, NV (TRANSPOSE_B=0) or RN (TRANSPOSE_B=1).
// NDRange: TRANSPOSE_B=0: global (ceil(NN / (NV*VEC)), ceil(M / RM), BATCHES);
//          TRANSPOSE_B=1: global (ceil(NN / RN), ceil(M / RM), BATCHES); any local size (all
//          dimensions may be rounded up: guarded). Neighbours along dimension 0 share A rows.
__kernel void matmul_blocked(__global const A_T* restrict a, __global const B_T* restrict bm,
                             __global const W_T* restrict bias, __global Y_T* restrict y) {
    const int m0 = get_global_id(1) * RM;
    const int batch = get_global_id(2);
#if !TRANSPOSE_B
#define NB (NV * VEC)
    const int n0 = get_global_id(0) * NB;
    if (n0 >= NN || m0 >= M || batch >= BATCHES) return;
    const int abase = a_base(batch), bbase = b_base(batch);
    int arow[RM];
    floatV acc[RM][NV];
#pragma unroll
    for (int i = 0; i < RM; ++i) {
        arow[i] = abase + min(m0 + i, M - 1) * K;
#pragma unroll
        for (int v = 0; v < NV; ++v) acc[i][v] = (floatV)(0.0f);
    }
    if (n0 + NB <= NN) {
        for (int k = 0; k < K; ++k) {
            floatV bv[NV];
#pragma unroll
            for (int v = 0; v < NV; ++v) bv[v] = VLOAD_B(bm, bbase + k * NN + n0 + v * VEC);
#pragma unroll
            for (int i = 0; i < RM; ++i) {
                const floatV av = (floatV)(LOAD_A(a, arow[i] + k));
#pragma unroll
                for (int v = 0; v < NV; ++v) acc[i][v] += HMULV(av, bv[v]);
            }
        }
    } else {  // the last, partial column block: lanes past NN load column NN - 1
        for (int k = 0; k < K; ++k) {
            floatV bv[NV];
#pragma unroll
            for (int v = 0; v < NV; ++v) {
                float lanes[VEC];
#pragma unroll
                for (int l = 0; l < VEC; ++l)
                    lanes[l] = LOAD_B(bm, bbase + k * NN + min(n0 + v * VEC + l, NN - 1));
                bv[v] = vloadV(0, lanes);
            }
#pragma unroll
            for (int i = 0; i < RM; ++i) {
                const floatV av = (floatV)(LOAD_A(a, arow[i] + k));
#pragma unroll
                for (int v = 0; v < NV; ++v) acc[i][v] += HMULV(av, bv[v]);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < RM; ++i) {
        const int m = m0 + i;
        if (m >= M) continue;  // (not break: an early exit would stop the loop unrolling)
#pragma unroll
        for (int v = 0; v < NV; ++v) {
            float lanes[VEC];
            vstoreV(acc[i][v], 0, lanes);
#pragma unroll
            for (int l = 0; l < VEC; ++l) {
                const int n = n0 + v * VEC + l;
                if (n < NN) STORE_Y(y, (batch * M + m) * NN + n, epilogue(lanes[l], bias, n));
            }
        }
    }
#else
    const int n0 = get_global_id(0) * RN;
    if (n0 >= NN || m0 >= M || batch >= BATCHES) return;
    const int abase = a_base(batch), bbase = b_base(batch);
    int arow[RM], brow[RN];
    floatV acc[RM][RN];
#pragma unroll
    for (int i = 0; i < RM; ++i) arow[i] = abase + min(m0 + i, M - 1) * K;
#pragma unroll
    for (int j = 0; j < RN; ++j) brow[j] = bbase + min(n0 + j, NN - 1) * K;
#pragma unroll
    for (int i = 0; i < RM; ++i)
#pragma unroll
        for (int j = 0; j < RN; ++j) acc[i][j] = (floatV)(0.0f);
#define KV (K / VEC * VEC)
    for (int k = 0; k < KV; k += VEC) {
        floatV bv[RN];
#pragma unroll
        for (int j = 0; j < RN; ++j) bv[j] = VLOAD_B(bm, brow[j] + k);
#pragma unroll
        for (int i = 0; i < RM; ++i) {
            const floatV av = VLOAD_A(a, arow[i] + k);
#pragma unroll
            for (int j = 0; j < RN; ++j) acc[i][j] += HMULV(av, bv[j]);
        }
    }
#if K % VEC
    {   // the last K % VEC columns as one zero-padded vector (0 * 0 past K)
        floatV bv[RN];
#pragma unroll
        for (int j = 0; j < RN; ++j) {
            float lanes[VEC];
#pragma unroll
            for (int l = 0; l < VEC; ++l) lanes[l] = l < K - KV ? LOAD_B(bm, brow[j] + KV + l) : 0.0f;
            bv[j] = vloadV(0, lanes);
        }
#pragma unroll
        for (int i = 0; i < RM; ++i) {
            float lanes[VEC];
#pragma unroll
            for (int l = 0; l < VEC; ++l) lanes[l] = l < K - KV ? LOAD_A(a, arow[i] + KV + l) : 0.0f;
            const floatV av = vloadV(0, lanes);
#pragma unroll
            for (int j = 0; j < RN; ++j) acc[i][j] += HMULV(av, bv[j]);
        }
    }
#endif
#pragma unroll
    for (int i = 0; i < RM; ++i) {
        const int m = m0 + i;
        if (m >= M) continue;
#pragma unroll
        for (int j = 0; j < RN; ++j) {
            const int n = n0 + j;
            if (n >= NN) continue;
            STORE_Y(y, (batch * M + m) * NN + n, epilogue(hsum(acc[i][j]), bias, n));
        }
    }
#endif
}
#endif
