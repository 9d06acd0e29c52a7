// Convolution (and, as a 1x1 convolution, Gemm) straight from Huffman-coded weight blocks
// (seed 004, issue 15; the bit-exact format is edgesdk/compress/huffman.py). The weight matrix
// (rows = output channels, columns = C*KH*KW in OIHW order) is cut into BR x BC blocks, GC per
// block row; each block decodes on its own.
//
// One work-group per (block row, tile of output pixels, image): it walks its block row's GC
// blocks in order; for each, work-item 0 decodes the block into local memory (sequential:
// Huffman), a barrier, then every work-item multiplies that block's entries into its
// accumulators: LR work-items along the rows (rows lr, lr + LR, ... of the block: RPW each) x LP
// along the pixels (VEC pixels each). Column blocks are summed in order in registers: no atomics,
// no second pass, deterministic. A block that does not fit local memory is decoded SR rows at a
// time (SR = BR when it fits; else a multiple of LR, so each work-item's rows stay its own): the
// decoder's bit reader carries on from strip to strip, SE entries at most per strip.
//
// Layout (-D DENSE_LAYOUT=0): per row of the block its entries (gap, value), then end-of-row:
// decoded into lrow (each row's first entry in the strip), lcol (block-local column) and lval.
// DENSE_LAYOUT=1: every weight of the block is an index, rows in order: lval only.
// Values: V_MODE 1 codebook indices (CB_BITS, CB_ROWS codebooks: 1 per layer or per row),
// V_MODE 0 raw values (float or half: W_HALF) in entry order from value_start[b].
//
// Codes: gap_table / index_table are (1 << PEEK) ushort lookups, PEEK = MAX_CODE_BITS (12):
// entry = symbol << 4 | code length, 0 for bits that are no code. Bits are LSB-first; the reader
// keeps a 64-bit buffer refilled a byte at a time (uchar loads: no unaligned wide loads), bytes
// at or past STREAM_BYTES read as 0 (the stream carries 8 zero bytes after its last block, so a
// valid stream never gets there).
//
// Pixels: PW=1 (1x1 / stride 1 / unpadded conv, and Gemm) flattens them: pixel p of image n at
// x[n * XN + c * XC + p * XP], y[n * YN + o * YC + p * YP], P pixels (Gemm: the batch rows).
// PW=0 (any other ungrouped conv): VEC consecutive output columns of one output row per
// work-item, taps outside the input skipped (padding is selected, never multiplied), as conv_csr.
//
// NaN and infinities follow the dense product, as ONNX Runtime and the cpu backend's sparse
// kernels (operators_sparse.h): a pruned weight times inf or NaN is NaN there. The dense layout
// multiplies every weight, so it gets that for free. The sparse layout (NONFINITE=1): before the
// walk, the group counts each of its pixels' non-finite in-bounds taps (the LR work-items of a
// pixel vector split the columns; summed in local memory, no atomics); a work-item whose pixels
// have any (rare) also counts, per row, the non-finite taps its stored entries met, and a row
// that met fewer than all of them had a pruned weight on one: NaN.

#define KK (KH * KW)
#define HW (H * W)
#define PEEK_MASK ((1u << PEEK) - 1u)
#if PW
#define PV ((P + VEC - 1) / VEC)
#else
#define OWT ((OW + VEC - 1) / VEC)
#define PV (OH * OWT)
#endif

typedef struct {
    ulong buf;
    uint nbits;
    uint pos;
} BitReader;

inline void refill(BitReader* br, __global const uchar* restrict stream) {
    while (br->nbits <= 56u) {
        const uint p = br->pos;
        const ulong byte = p < STREAM_BYTES ? (ulong)stream[p] : 0ul;
        br->buf |= byte << br->nbits;
        br->pos = p + 1u;
        br->nbits += 8u;
    }
}

// The next symbol of `table`; a code that is no code reads as symbol 0 of length 0 (never in a
// valid stream: the host validated it; the callers' loops are bounded either way).
inline uint next_symbol(BitReader* br, __global const uchar* restrict stream, __global const ushort* restrict table) {
    refill(br, stream);
    const uint e = table[(uint)br->buf & PEEK_MASK];
    const uint len = e & 15u;
    br->buf >>= len;
    br->nbits -= len;
    return e >> 4;
}

// The VEC input values column `col` (c * KK + tap) multiplies for this work-item's pixels (0 for
// taps in the padding and lanes past the end).
#if PW
#define P0_OR_OY p0
#define OX0 0
inline floatV x_taps(const __global X_T* xn, int col, int p0, int unused) {
    const __global X_T* row = xn + col * XC;
    if (XP == 1 && p0 + VEC <= P) return VLOAD_X(row, p0);
    float lanes[VEC];
    for (int l = 0; l < VEC; ++l) lanes[l] = p0 + l < P ? LOAD_X(row, (p0 + l) * XP) : 0.0f;
    return vloadV(0, lanes);
}
#else
#define P0_OR_OY oy
#define OX0 ox0
inline bool tap_rows_in(int col, int oy) {
    const int iy = oy * SH + ((col % KK) / KW) * DH - PT;
    return iy >= 0 && iy < H;
}
inline floatV x_taps(const __global X_T* xn, int col, int oy, int ox0) {
    const int c = col / KK;
    const int tap = col % KK;
    const int iy = oy * SH + (tap / KW) * DH - PT;
    float lanes[VEC];
    if (iy < 0 || iy >= H) return (floatV)(0.0f);
    const int ix0 = ox0 * SW + (tap % KW) * DW - PL;
    const __global X_T* row = xn + c * HW + iy * W;
    if (SW == 1 && ix0 >= 0 && ix0 + VEC <= W) return VLOAD_X(row, ix0);  // an interior run
    for (int l = 0; l < VEC; ++l) {
        const int ix = ix0 + l * SW;
        lanes[l] = ix >= 0 && ix < W ? LOAD_X(row, ix) : 0.0f;
    }
    return vloadV(0, lanes);
}
#endif

__kernel void conv_huffman(__global const X_T* restrict x, __global const uchar* restrict stream,
                           __global const uint* restrict offsets, __global const ushort* restrict gap_table,
                           __global const ushort* restrict index_table, __global const void* restrict values,
                           __global const uint* restrict value_start, __global const float* restrict codebook,
                           __global const B_T* restrict bias, __global Y_T* restrict y) {
    __local float lval[SE];
#if !DENSE_LAYOUT
    __local ushort lcol[SE];
    __local int lrow[SR + 1];
#endif
    const int lp = get_local_id(0);
    const int lr = get_local_id(1);
    const int q = get_group_id(0) * LP + lp;  // this work-item's pixel vector
    const int bi = get_group_id(1);
    const int n = get_global_id(2);
    const int r0 = bi * BR;
    const int rows_here = min(BR, OC - r0);
    const bool active = q < PV;
#if PW
    const int p0 = q * VEC;
    const __global X_T* xn = x + n * XN;
#else
    const int oy = q / OWT;
    const int ox0 = (q % OWT) * VEC;
    const __global X_T* xn = x + n * C * HW;
#endif
    floatV acc[RPW];
    for (int k = 0; k < RPW; ++k) acc[k] = (floatV)(0.0f);
#if NONFINITE
    // Non-finite in-bounds taps of this work-item's VEC pixels, over all COLS columns.
    __local intV lbad[LR * LP];
    intV bad = (intV)(0);
    if (active) {
        for (int col = lr; col < COLS; col += LR) bad += (intV)(1) + isfinite(x_taps(xn, col, P0_OR_OY, OX0));
    }
    lbad[lr * LP + lp] = bad;
    barrier(CLK_LOCAL_MEM_FENCE);
    bad = (intV)(0);
    for (int i = 0; i < LR; ++i) bad += lbad[i * LP + lp];
    const bool slow = any(bad != (intV)(0));
    intV hits[RPW];
    for (int k = 0; k < RPW; ++k) hits[k] = (intV)(0);
#endif

    for (int bj = 0; bj < GC; ++bj) {
        const int c0 = bj * BC;
        const int width = min(BC, COLS - c0);
        const int b = bi * GC + bj;
        BitReader br = {0ul, 0u, offsets[b]};  // work-item 0's decoder, across the block's strips
#if !DENSE_LAYOUT && V_MODE == 0
        uint ev = value_start[b];  // the next raw value of the block
#endif
        for (int s0 = 0; s0 < rows_here; s0 += SR) {
            const int srows = min(SR, rows_here - s0);
            if (lp == 0 && lr == 0) {
#if DENSE_LAYOUT
                for (int r = 0; r < srows; ++r) {
                    const int cbase = CB_ROWS == 1 ? 0 : (r0 + s0 + r) << CB_BITS;
                    for (int c = 0; c < width; ++c)
                        lval[r * width + c] = codebook[cbase + next_symbol(&br, stream, index_table)];
                }
#else
                int e = 0;
                for (int r = 0; r < srows; ++r) {
                    lrow[r] = e;
#if V_MODE == 1
                    const int cbase = CB_ROWS == 1 ? 0 : (r0 + s0 + r) << CB_BITS;
#endif
                    int col = -1;
                    for (;;) {  // (col grows every turn: at most `width` turns)
                        const uint g = next_symbol(&br, stream, gap_table);
                        if (g >= (uint)BC) break;  // end of row: read even when the strip is full
                        col += 1 + (int)g;
                        if (col >= width || e >= SE) break;  // (a corrupt stream: the host validated it)
#if V_MODE == 1
                        const float v = codebook[cbase + next_symbol(&br, stream, index_table)];
#else
                        const float v = LOAD_W((__global const W_T*)values, ev++);
#endif
                        lcol[e] = (ushort)col;
                        lval[e] = v;
                        ++e;
                    }
                }
                lrow[srows] = e;
#endif
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            if (active) {
                for (int k = 0; k < RPW; ++k) {  // (a constant range: acc stays in registers)
                    const int r = lr + k * LR;  // the block row; s0 + row of the strip
                    if (r < s0 || r >= s0 + srows) continue;
#if DENSE_LAYOUT
                    const int begin = (r - s0) * width, end = begin + width;
#else
                    const int begin = lrow[r - s0], end = lrow[r - s0 + 1];
#endif
                    floatV a = acc[k];
                    for (int e = begin; e < end; ++e) {
#if DENSE_LAYOUT
                        const int col = c0 + (e - begin);
#else
                        const int col = c0 + (int)lcol[e];
#endif
                        const float v = lval[e];
#if !PW
                        if (!tap_rows_in(col, oy)) continue;  // a tap row in the padding: nothing to add
#endif
                        const floatV xv = x_taps(xn, col, P0_OR_OY, OX0);
#if NONFINITE
                        if (slow) hits[k] += (intV)(1) + isfinite(xv);
#endif
                        a += HMULV((floatV)(v), xv);
                    }
                    acc[k] = a;
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
    }

    if (!active) return;
    for (int k = 0; k < RPW; ++k) {
        const int r = lr + k * LR;
        if (r >= rows_here) break;
        const int o = r0 + r;
        floatV out = acc[k] * ALPHA;
#if NONFINITE
        if (slow) out = select(out, (floatV)(NAN), hits[k] < bad);
#endif
#if HAS_BIAS
        out += BETA * LOAD_B(bias, o);
#endif
        out = ACTIVATE(out);
#if PW
        const int off = n * YN + o * YC;
        if (YP == 1 && p0 + VEC <= P) {
            VSTORE_Y(y, off + p0, out);
        } else {
            float lanes[VEC];
            vstoreV(out, 0, lanes);
            for (int l = 0; l < VEC && p0 + l < P; ++l) STORE_Y(y, off + (p0 + l) * YP, lanes[l]);
        }
#else
        if (oy >= OH) continue;
        store_lanes(y, ((n * OC + o) * OH + oy) * OW + ox0, out, OW - ox0);
#endif
    }
}
