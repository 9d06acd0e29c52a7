// Sparse 1x1 convolution: packing (CSR -> blocks of NB rows) and the threaded driver with the dense
// rule for non-finite inputs (operators_sparse.h).
#include "kernels/operators_sparse.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <cstring>
#include <string>

#include "kernels/thread_pool.h"

namespace edgesdk::kernels {
namespace {

[[noreturn]] void fail(const std::string& what) { throw std::invalid_argument(what); }

struct Slot {
  SpmmUkernel fn;
  const char* name;
};

Slot spmm_slot(const KernelTable& t, SpmmValues kind, size_t nb) {
  switch (kind) {
    case SpmmValues::F32:
      switch (nb) {
        case 1: return {t.spmm_f32_nb1, t.names.spmm_f32_nb1};
        case 2: return {t.spmm_f32_nb2, t.names.spmm_f32_nb2};
        case 4: return {t.spmm_f32_nb4, t.names.spmm_f32_nb4};
        case 8: return {t.spmm_f32_nb8, t.names.spmm_f32_nb8};
      }
      break;
    case SpmmValues::F16:
      switch (nb) {
        case 1: return {t.spmm_f16w_nb1, t.names.spmm_f16w_nb1};
        case 2: return {t.spmm_f16w_nb2, t.names.spmm_f16w_nb2};
        case 4: return {t.spmm_f16w_nb4, t.names.spmm_f16w_nb4};
        case 8: return {t.spmm_f16w_nb8, t.names.spmm_f16w_nb8};
      }
      break;
    case SpmmValues::Codebook:
      switch (nb) {
        case 1: return {t.spmm_cbw_nb1, t.names.spmm_cbw_nb1};
        case 2: return {t.spmm_cbw_nb2, t.names.spmm_cbw_nb2};
        case 4: return {t.spmm_cbw_nb4, t.names.spmm_cbw_nb4};
        case 8: return {t.spmm_cbw_nb8, t.names.spmm_cbw_nb8};
      }
      break;
  }
  return {nullptr, nullptr};
}

// Stored entries of rows [r0, r0 + nb): the size of the union of their column sets.
size_t union_size(const std::vector<std::vector<uint32_t>>& row_cols, size_t r0, size_t nb) {
  if (nb == 1) return row_cols[r0].size();
  std::vector<uint32_t> all;
  for (size_t r = r0; r < r0 + nb; ++r) all.insert(all.end(), row_cols[r].begin(), row_cols[r].end());
  std::sort(all.begin(), all.end());
  return static_cast<size_t>(std::unique(all.begin(), all.end()) - all.begin());
}

}  // namespace

std::vector<size_t> sparse_blocks(const KernelTable& t) {
  std::vector<size_t> out;
  for (size_t nb : {1, 2, 4, 8})
    if (spmm_slot(t, SpmmValues::F32, nb).fn != nullptr) out.push_back(nb);
  return out;
}

// Time per stored entry of an NB-row block over the time per entry of a 1-row block, at one
// thread (kernel_bench --sparse prints the measured figures: "block cost"). A block of NB rows
// loads the input vectors once for NB rows, so its entry costs less than NB single-row entries;
// the explicit zeros it stores where a row has no weight cost as much as real ones.
double sparse_block_cost(const KernelTable& t, size_t nb) {
  // Measured (kernel_bench --sparse, "block cost": 96 x 96 at 28 x 28, every row on the same 25% of
  // the columns, 1 thread, Sapphire Rapids): avx512 1.84 / 2.14 / 4.09 for NB 2 / 4 / 8, avx2 1.73 /
  // 3.10 for NB 2 / 4 (the avx512 NB 4 kernel keeps MR 64, whose 16 accumulators use the wide
  // registers best). NEON and scalar: not measured here, the avx2 figures rounded up (a block of NB
  // rows wins only when its rows share most of their columns).
  const bool wide = t.isa == Isa::Avx512 || t.isa == Isa::Avx512Vnni || t.isa == Isa::Avx512Amx;
  const bool avx2 = t.isa == Isa::Avx2 || t.isa == Isa::AvxVnni;
  switch (nb) {
    case 1: return 1.0;
    case 2: return wide ? 1.84 : avx2 ? 1.73 : 1.8;
    case 4: return wide ? 2.14 : avx2 ? 3.10 : 3.2;
    default: return 4.09;  // avx512 levels only
  }
}

size_t SparseConv1x1Weights::nbytes() const {
  size_t b = bias.size() * 4 + tables.size() * 4 + (col_ptr.size() + col_rows.size()) * 4;
  for (const Group& g : groups)
    b += g.values.size() + g.deltas.size() * 4 + (g.counts.size() + g.first.size()) * 4 + g.entry_begin.size() * 8;
  return b;
}

SparseConv1x1Weights pack_sparse_conv1x1(const int64_t* row_ptr, const int32_t* cols, size_t k, size_t c,
                                         SpmmValues kind, const float* values_f32, const uint16_t* values_f16,
                                         const uint8_t* indices, const float* codebook, size_t codebook_groups,
                                         size_t codebook_size, const float* bias, size_t block,
                                         const KernelTable* t) {
  if (t == nullptr) t = &active_kernels();
  SparseConv1x1Weights w;
  w.table = t;
  w.k = k;
  w.c = c;
  if (k == 0 || c == 0) fail("pack_sparse_conv1x1: K and C must be positive");
  if (c > static_cast<size_t>(std::numeric_limits<int32_t>::max()) || k > (size_t{1} << 31))
    fail("pack_sparse_conv1x1: K or C too large");
  w.kind = kind;
  if (row_ptr[0] != 0) fail("pack_sparse_conv1x1: row_ptr[0] must be 0");
  for (size_t r = 0; r < k; ++r)
    if (row_ptr[r + 1] < row_ptr[r]) fail("pack_sparse_conv1x1: row_ptr must be non-decreasing");
  const size_t total = static_cast<size_t>(row_ptr[k]);
  // Codebook: G tables of T entries; padded entries of a block need an index whose value is 0,
  // the table's own or one appended at T (T < 256).
  std::vector<int> zero_index;
  if (w.kind == SpmmValues::Codebook) {
    if (codebook == nullptr) fail("pack_sparse_conv1x1: indices need a codebook");
    if (codebook_groups != 1 && codebook_groups != k)
      fail("pack_sparse_conv1x1: codebook must have 1 or K (" + std::to_string(k) + ") rows, got " +
           std::to_string(codebook_groups));
    if (codebook_size == 0 || codebook_size > 256) fail("pack_sparse_conv1x1: codebook must have 1 to 256 columns");
    const size_t padded = codebook_size < 256 ? codebook_size + 1 : codebook_size;
    w.table_size = codebook_size;
    w.table_stride = codebook_groups == 1 ? 0 : padded;
    w.tables = AlignedBuffer<float>(codebook_groups * padded);
    for (size_t g = 0; g < codebook_groups; ++g) {
      int zi = -1;
      for (size_t i = 0; i < codebook_size; ++i) {
        const float v = codebook[g * codebook_size + i];
        w.tables[g * padded + i] = v;
        if (zi < 0 && v == 0.0f) zi = static_cast<int>(i);
      }
      if (padded > codebook_size) {
        w.tables[g * padded + codebook_size] = 0.0f;
        if (zi < 0) zi = static_cast<int>(codebook_size);
      }
      zero_index.push_back(zi);
    }
  }
  auto value_of = [&](size_t i, size_t row) -> float {
    switch (w.kind) {
      case SpmmValues::F32: return values_f32[i];
      case SpmmValues::F16: return fp16_to_fp32(values_f16[i]);
      default: return codebook[(codebook_groups == 1 ? 0 : row) * codebook_size + indices[i]];
    }
  };
  // Validate, drop the zeros, keep each row's (column, CSR entry).
  std::vector<std::vector<uint32_t>> row_cols(k), row_entries(k);
  for (size_t r = 0; r < k; ++r) {
    int64_t prev = -1;
    for (size_t i = static_cast<size_t>(row_ptr[r]); i < static_cast<size_t>(row_ptr[r + 1]); ++i) {
      const int64_t col = cols[i];
      if (col < 0 || static_cast<size_t>(col) >= c)
        fail("pack_sparse_conv1x1: column " + std::to_string(col) + " of row " + std::to_string(r) +
             " outside [0, " + std::to_string(c) + ")");
      if (col <= prev) fail("pack_sparse_conv1x1: columns of row " + std::to_string(r) + " not strictly increasing");
      prev = col;
      if (w.kind == SpmmValues::Codebook && indices[i] >= codebook_size)
        fail("pack_sparse_conv1x1: index " + std::to_string(indices[i]) + " outside the codebook's " +
             std::to_string(codebook_size) + " entries");
      if (value_of(i, r) == 0.0f) continue;
      row_cols[r].push_back(static_cast<uint32_t>(col));
      row_entries[r].push_back(static_cast<uint32_t>(i));
    }
  }
  (void)total;
  for (const auto& rc : row_cols) w.nnz += rc.size();
  w.bias = AlignedBuffer<float>(k);
  for (size_t r = 0; r < k; ++r) w.bias[r] = bias != nullptr ? bias[r] : 0.0f;

  // NB: forced, or the cheapest by the cost estimate.
  const std::vector<size_t> offered = sparse_blocks(*t);
  bool blocks_ok = true;  // a codebook of 256 entries without a 0.0 leaves no index for padding
  for (int zi : zero_index) blocks_ok &= zi >= 0;
  auto stored_with = [&](size_t nb) {
    size_t s = 0, r = 0;
    for (; r + nb <= k; r += nb) s += union_size(row_cols, r, nb) * nb;
    for (; r < k; ++r) s += row_cols[r].size();
    return s;
  };
  size_t nb = 1;
  if (block != 0) {
    if (std::find(offered.begin(), offered.end(), block) == offered.end())
      fail("pack_sparse_conv1x1: block " + std::to_string(block) + " not available at the " + t->name +
           " level (1, 2, 4" + (offered.back() == 8 ? ", 8)" : ")"));
    if (block > 1 && !blocks_ok)
      fail("pack_sparse_conv1x1: a 256-entry codebook without 0.0 allows block 1 only");
    nb = block;
  } else if (blocks_ok) {
    double best = 0;
    for (size_t cand : offered) {
      if (cand > k) break;
      const size_t main_rows = k / cand * cand;
      double cost = 0;
      for (size_t r = 0; r < main_rows; r += cand)
        cost += static_cast<double>(union_size(row_cols, r, cand)) * sparse_block_cost(*t, cand);
      for (size_t r = main_rows; r < k; ++r) cost += static_cast<double>(row_cols[r].size());
      if (cand == 1 || cost < best * 0.98) {  // a bigger block only for a clear win
        best = cost;
        nb = cand;
      }
    }
  }
  w.block = nb;
  w.stored = stored_with(nb);

  auto build = [&](size_t row0, size_t gnb, size_t nblocks) {
    SparseConv1x1Weights::Group g;
    g.row0 = row0;
    g.nb = gnb;
    g.nblocks = nblocks;
    const Slot slot = spmm_slot(*t, w.kind, gnb);
    g.kernel = slot.fn;
    g.kernel_name = slot.name;
    size_t entries = 0;
    std::vector<std::vector<uint32_t>> block_cols(nblocks);
    for (size_t b = 0; b < nblocks; ++b) {
      std::vector<uint32_t>& u = block_cols[b];
      for (size_t r = row0 + b * gnb; r < row0 + (b + 1) * gnb; ++r) u.insert(u.end(), row_cols[r].begin(), row_cols[r].end());
      std::sort(u.begin(), u.end());
      u.erase(std::unique(u.begin(), u.end()), u.end());
      entries += u.size();
    }
    const size_t es = w.elem_size();
    g.values = AlignedBuffer<uint8_t>(std::max<size_t>(entries * gnb * es, 1));
    g.deltas.reserve(entries);
    for (size_t b = 0; b < nblocks; ++b) {
      const std::vector<uint32_t>& u = block_cols[b];
      g.entry_begin.push_back(g.deltas.size());
      g.counts.push_back(static_cast<uint32_t>(u.size()));
      g.first.push_back(u.empty() ? 0 : u.front());
      for (size_t j = 0; j < u.size(); ++j)
        g.deltas.push_back(j + 1 < u.size() ? static_cast<int32_t>(u[j + 1] - u[j]) : 0);
      for (size_t r = 0; r < gnb; ++r) {
        const size_t row = row0 + b * gnb + r;
        const std::vector<uint32_t>& rc = row_cols[row];
        size_t pos = 0;  // walks the row's columns along the union
        for (size_t j = 0; j < u.size(); ++j) {
          const bool has = pos < rc.size() && rc[pos] == u[j];
          const size_t i = has ? row_entries[row][pos] : 0;
          pos += has;
          uint8_t* dst = g.values.data() + ((g.entry_begin[b] + j) * gnb + r) * es;
          switch (w.kind) {
            case SpmmValues::F32: {
              const float v = has ? values_f32[i] : 0.0f;
              std::memcpy(dst, &v, 4);
              break;
            }
            case SpmmValues::F16: {
              const uint16_t v = has ? values_f16[i] : uint16_t{0};
              std::memcpy(dst, &v, 2);
              break;
            }
            case SpmmValues::Codebook:
              *dst = has ? indices[i] : static_cast<uint8_t>(zero_index[codebook_groups == 1 ? 0 : row]);
              break;
          }
        }
      }
    }
    w.groups.push_back(std::move(g));
  };
  const size_t main_blocks = k / nb;
  if (main_blocks > 0) build(0, nb, main_blocks);
  if (k % nb != 0) build(main_blocks * nb, 1, k % nb);

  // The column pattern for the dense rule.
  w.col_ptr.assign(c + 1, 0);
  for (size_t r = 0; r < k; ++r)
    for (uint32_t col : row_cols[r]) ++w.col_ptr[col + 1];
  for (size_t i = 0; i < c; ++i) w.col_ptr[i + 1] += w.col_ptr[i];
  w.col_rows.resize(w.nnz);
  std::vector<uint32_t> fill(w.col_ptr.begin(), w.col_ptr.end() - 1);
  for (size_t r = 0; r < k; ++r)
    for (uint32_t col : row_cols[r]) w.col_rows[fill[col]++] = static_cast<uint32_t>(r);
  return w;
}

namespace {

// The dense rule for pixels [p0, p0 + len) of one image, rows [r0, r1): output (k, p) becomes NaN
// where an input channel non-finite at p has a zero weight in row k (operators_sparse.h).
void dense_rule(const SparseConv1x1Weights& w, const float* x, size_t hw, size_t p0, size_t len, size_t r0, size_t r1,
                float* y) {
  std::vector<uint32_t> bad, hits(r1 - r0);
  for (size_t p = p0; p < p0 + len; ++p) {
    bad.clear();
    for (size_t ch = 0; ch < w.c; ++ch)
      if (!std::isfinite(x[ch * hw + p])) bad.push_back(static_cast<uint32_t>(ch));
    if (bad.empty()) continue;
    std::fill(hits.begin(), hits.end(), 0u);
    for (uint32_t ch : bad)
      for (uint32_t i = w.col_ptr[ch]; i < w.col_ptr[ch + 1]; ++i) {
        const uint32_t row = w.col_rows[i];
        if (row >= r0 && row < r1) ++hits[row - r0];
      }
    for (size_t row = r0; row < r1; ++row)
      if (hits[row - r0] < bad.size()) y[row * hw + p] = std::numeric_limits<float>::quiet_NaN();
  }
}

}  // namespace

void sparse_conv1x1(const float* x, size_t n, size_t hw, const SparseConv1x1Weights& w, float* y,
                    const Activation& act, size_t threads) {
  if (n == 0 || hw == 0) return;
  const KernelTable& t = *w.table;
  const MinMax clamp = clamp_part(act);
  const bool post = needs_post_pass(act);
  const size_t tile = t.spmm_tile;
  const size_t ptiles = div_up(hw, tile);
  size_t nblocks = 0;
  for (const auto& g : w.groups) nblocks += g.nblocks;
  // Few pixel tiles (7 x 7 = 49 pixels is one tile): threads also split the output blocks.
  size_t bsplit = 1;
  if (threads > 1 && n * ptiles < 4 * threads) bsplit = std::min(nblocks, div_up(4 * threads, n * ptiles));
  bsplit = std::max<size_t>(bsplit, 1);
  // With the blocks split, each tile is scanned once up front rather than by every part.
  std::vector<uint8_t> flags;
  if (bsplit > 1) {
    flags.resize(n * ptiles);
    parallel_for(n * ptiles, threads, [&](size_t begin, size_t end) {
      for (size_t u = begin; u < end; ++u) {
        const size_t img = u / ptiles, p0 = u % ptiles * tile;
        flags[u] = t.nonfinite_scan(x + img * w.c * hw + p0, w.c, hw, std::min(tile, hw - p0));
      }
    });
  }
  const size_t units = n * ptiles * bsplit;
  parallel_for(units, threads, [&](size_t begin, size_t end) {
    for (size_t u = begin; u < end; ++u) {
      const size_t bs = u % bsplit, pt = u / bsplit % ptiles, img = u / bsplit / ptiles;
      const size_t p0 = pt * tile, len = std::min(tile, hw - p0);
      const float* xi = x + img * w.c * hw;
      float* yi = y + img * w.k * hw;
      const size_t b0 = nblocks * bs / bsplit, b1 = nblocks * (bs + 1) / bsplit;
      // Scanned first: the scan also brings the tile into cache for the kernels.
      const bool nonfinite = bsplit > 1 ? flags[img * ptiles + pt] != 0 : t.nonfinite_scan(xi + p0, w.c, hw, len);
      size_t gb = 0, r0 = w.k, r1 = 0;  // gb: the group's first block in the global numbering
      for (const auto& g : w.groups) {
        const size_t g_begin = gb, g_end = gb + g.nblocks;
        gb = g_end;
        const size_t lo = std::max(b0, g_begin), hi = std::min(b1, g_end);
        if (hi <= lo) continue;
        const size_t lb0 = lo - g_begin, cnt = hi - lo, row = g.row0 + lb0 * g.nb;
        SpmmBlocks blocks;
        blocks.values = g.values.data() + g.entry_begin[lb0] * g.nb * w.elem_size();
        blocks.deltas = g.deltas.data() + g.entry_begin[lb0];
        blocks.counts = g.counts.data() + lb0;
        blocks.first = g.first.data() + lb0;
        blocks.bias = w.bias.data() + row;
        blocks.tables = w.tables.data() + row * w.table_stride;
        blocks.table_stride = w.table_stride;
        g.kernel(len, cnt, xi + p0, hw, &blocks, yi + row * hw + p0, hw, &clamp);
        r0 = std::min(r0, row);
        r1 = std::max(r1, row + cnt * g.nb);
      }
      if (r1 <= r0) continue;
      if (nonfinite) dense_rule(w, xi, hw, p0, len, r0, r1, yi);
      if (post)
        for (size_t row = r0; row < r1; ++row) t.activation(yi + row * hw + p0, len, &act);
    }
  }, Partition::Dynamic, 1);
}

}  // namespace edgesdk::kernels
