// Sparse 1x1 convolution in CHW layout (issue 15; XNNPACK's f32-spmm design): per image
// Y[k][p] = act(bias[k] + sum_c W[k][c] X[c][p]), X [C][HW], Y [K][HW], W pruned (unstructured
// magnitude pruning leaves 50-95% zeros). The weights are packed once from CSR into blocks of NB
// output rows (ukernels.h, SpmmBlocks), the kernels multiply only the stored entries.
//
// NaN and infinities follow the dense product (ONNX Runtime runs the dense matrix): a pruned weight
// times inf or NaN is NaN there, and skipping the zeros would give a finite value. The driver scans
// each pixel tile of the input for non-finite values (the level's nonfinite_scan: one fused
// multiply-add per vector) and, in a tile that has some, recomputes the affected outputs by the
// dense rule: output (k, p) is NaN when some input channel c non-finite at p has W[k][c] == 0; every
// other output already equals the dense sum (the stored entries hold every non-zero term).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/common.h"
#include "kernels/dispatch.h"

namespace edgesdk::kernels {

struct SparseConv1x1Weights {
  // Output rows [row0, row0 + nb * nblocks) in blocks of nb rows, run by one kernel.
  struct Group {
    size_t row0 = 0, nb = 0, nblocks = 0;
    SpmmUkernel kernel = nullptr;
    const char* kernel_name = nullptr;
    std::vector<uint32_t> counts, first;
    std::vector<size_t> entry_begin;  // per block: its first stored entry (entries of nb values)
    std::vector<int32_t> deltas;
    AlignedBuffer<uint8_t> values;    // entry-major, nb values an entry, elem_size bytes each
  };
  const KernelTable* table = nullptr;
  size_t k = 0, c = 0;
  size_t nnz = 0;      // non-zero weights (CSR entries whose value is 0 dropped)
  size_t stored = 0;   // weights the kernels multiply: nnz plus the explicit zeros of blocks
  size_t block = 0;    // NB of the main group (K % NB rows go in a group of NB = 1)
  SpmmValues kind = SpmmValues::F32;
  size_t table_size = 0;      // codebook: T
  size_t table_stride = 0;    // codebook: floats between two rows' tables (0: one table)
  std::vector<Group> groups;  // the main group, then the remainder rows (when any)
  AlignedBuffer<float> bias;    // K (zeros without a bias)
  AlignedBuffer<float> tables;  // codebook: G tables of table_stride (or T) floats, 0.0 appended when T < 256
  // The non-zero pattern by column (CSC): rows of column c are col_rows[col_ptr[c] .. col_ptr[c + 1]).
  std::vector<uint32_t> col_ptr, col_rows;

  size_t elem_size() const { return kind == SpmmValues::F32 ? 4 : kind == SpmmValues::F16 ? 2 : 1; }
  size_t nbytes() const;
  const char* kernel_name() const { return groups.empty() ? "" : groups.front().kernel_name; }
};

// The NB values a level offers (1, 2, 4; and 8 on the avx512 levels).
std::vector<size_t> sparse_blocks(const KernelTable& t);

// Packs CSR weights (K rows, C columns): row_ptr (K + 1 entries, from 0 to nnz), cols (strictly
// increasing in each row), and the values as `kind` says: fp32 (values_f32), fp16 bits (values_f16), or
// uint8 indices into codebook (G x T floats, G == 1 or G == K: a table per output channel). Entries
// whose value is exactly 0 are dropped. bias: K floats or null. block 0 lets the packer pick NB by
// its cost estimate (sparse_block_cost), else 1, 2, 4 or 8 where the level has it. Throws
// std::invalid_argument on bad arguments.
SparseConv1x1Weights pack_sparse_conv1x1(const int64_t* row_ptr, const int32_t* cols, size_t k, size_t c,
                                         SpmmValues kind, const float* values_f32, const uint16_t* values_f16,
                                         const uint8_t* indices, const float* codebook, size_t codebook_groups,
                                         size_t codebook_size, const float* bias, size_t block,
                                         const KernelTable* t = nullptr);

// The packer's estimate of one stored entry's time in a block of nb rows, relative to a block of 1
// (per level; measured with kernel_bench --sparse).
double sparse_block_cost(const KernelTable& t, size_t nb);

// x: N images of [C][hw] floats; y: N images of [K][hw]. act: clamp kinds fused in the kernels,
// others by the activation kernel on each output tile. w is only read (safe from several threads).
void sparse_conv1x1(const float* x, size_t n, size_t hw, const SparseConv1x1Weights& w, float* y,
                    const Activation& act, size_t threads);

}  // namespace edgesdk::kernels
