// Huffman-coded weight blocks: tables, the checked block decoder's drivers and the streaming sparse
// 1x1 convolution (huffman.h).
#include "kernels/huffman.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>

#include "kernels/thread_pool.h"

namespace edgesdk::kernels {
namespace {

[[noreturn]] void fail(const std::string& what) { throw std::invalid_argument(what); }

}  // namespace

void huffman_fail(size_t block, const std::string& what) {
  throw std::invalid_argument("block " + std::to_string(block) + ": " + what);
}

HuffmanTable HuffmanTable::build(const uint8_t* lengths, size_t n, const char* what) {
  constexpr unsigned kMax = kHuffmanMaxBits;
  if (n > (size_t{1} << kMax))
    fail(std::string(what) + ": " + std::to_string(n) + " symbols, at most " + std::to_string(1 << kMax));
  HuffmanTable t;
  t.symbols = n;
  t.lut.assign(size_t{1} << kMax, 0);
  size_t count[kMax + 1] = {};
  uint64_t kraft = 0;
  for (size_t s = 0; s < n; ++s) {
    const unsigned len = lengths[s];
    if (len > kMax)
      fail(std::string(what) + ": symbol " + std::to_string(s) + " has a code of " + std::to_string(len) +
           " bits, at most " + std::to_string(kMax));
    if (len == 0) continue;
    ++count[len];
    kraft += uint64_t{1} << (kMax - len);
    ++t.used;
  }
  if (kraft > (uint64_t{1} << kMax)) fail(std::string(what) + ": the code lengths break Kraft's inequality");
  // Canonical codes (deflate's rule, as huffman.canonical_codes): in order of (length, symbol).
  uint32_t next[kMax + 2] = {};
  uint32_t code = 0;
  for (unsigned len = 1; len <= kMax; ++len) {
    code = (code + static_cast<uint32_t>(count[len - 1])) << 1;
    next[len] = code;
  }
  for (size_t s = 0; s < n; ++s) {
    const unsigned len = lengths[s];
    if (len == 0) continue;
    const uint32_t c = next[len]++;
    uint32_t rev = 0;  // bit-reversed within len: the LSB-first stream's bits
    for (unsigned i = 0; i < len; ++i) rev |= ((c >> i) & 1u) << (len - 1 - i);
    const uint16_t entry = static_cast<uint16_t>(s | (len << 12));
    for (uint32_t i = rev; i < (1u << kMax); i += 1u << len) t.lut[i] = entry;
  }
  return t;
}

HuffmanPairTable HuffmanPairTable::build(const HuffmanTable& gaps, const HuffmanTable& index, unsigned end_of_row) {
  HuffmanPairTable t;
  t.lut.assign(size_t{1} << kHuffmanMaxBits, 0);
  if (index.symbols > 256) return t;  // indices are bytes here (8 bits); none are paired
  for (uint32_t i = 0; i < (1u << kHuffmanMaxBits); ++i) {
    const uint16_t g = gaps.lut[i];
    const unsigned lg = g >> 12;
    if (lg == 0) continue;
    if ((g & 4095u) == end_of_row) {
      t.lut[i] = uint32_t{lg} << 20 | kEndOfRow;
      continue;
    }
    const uint16_t x = index.lut[i >> lg];  // the bits past the 12 known ones are 0 here...
    const unsigned lx = x >> 12;
    if (lx == 0 || lg + lx > kHuffmanMaxBits) continue;  // ...so the index code must fit in the known ones
    t.lut[i] = (g & 4095u) | uint32_t{x & 255u} << 12 | uint32_t{lg + lx} << 20 | kPair;
  }
  return t;
}

void HuffmanStream::check() const {
  if (rows == 0 || cols == 0) fail("huffman: empty weight matrix");
  if (block_rows == 0 || block_rows > (size_t{1} << 16)) fail("huffman: block_rows must be 1..65536");
  if (block_cols == 0 || block_cols > 4095) fail("huffman: block_cols must be 1..4095");
  if (stream == nullptr || offsets == nullptr || entries == nullptr) fail("huffman: missing arrays");
  if (dense) {
    if (index == nullptr) fail("huffman: a dense layout needs an index code");
    if (gaps != nullptr) fail("huffman: a dense layout has no gap code");
  } else {
    if (gaps == nullptr) fail("huffman: a sparse layout needs a gap code");
    if (gaps->symbols != block_cols + 1)
      fail("huffman: the gap code has " + std::to_string(gaps->symbols) + " symbols, expected block_cols + 1 = " +
           std::to_string(block_cols + 1));
  }
  const size_t nb = blocks();
  if (offsets[0] != 0) fail("huffman: block_offsets[0] is not 0");
  for (size_t b = 0; b < nb; ++b) {
    if (offsets[b + 1] < offsets[b]) huffman_fail(b, "its end offset lies before its start");
    const size_t bi = b / grid_cols(), bj = b % grid_cols();
    const size_t h = std::min(block_rows, rows - bi * block_rows), w = std::min(block_cols, cols - bj * block_cols);
    if (entries[b] > h * w)
      huffman_fail(b, "claims " + std::to_string(entries[b]) + " entries, it has " + std::to_string(h * w) +
                          " weights");
    // every entry takes a code of at least one bit: this bounds what a decoder allocates by the stream
    if (entries[b] > uint64_t{offsets[b + 1] - offsets[b]} * 8)
      huffman_fail(b, "claims " + std::to_string(entries[b]) + " entries in " +
                          std::to_string(offsets[b + 1] - offsets[b]) + " bytes");
  }
  if (uint64_t{offsets[nb]} + kHuffmanPadding > stream_bytes)
    fail("huffman: the stream has " + std::to_string(stream_bytes) + " bytes, the blocks need " +
         std::to_string(offsets[nb]) + " and " + std::to_string(kHuffmanPadding) + " of padding");
}

void huffman_decode_all(const HuffmanStream& s, int64_t* rows, int64_t* cols, int64_t* idx) {
  s.check();
  const size_t gc = s.grid_cols();
  size_t at = 0;
  for (size_t b = 0; b < s.blocks(); ++b) {
    const int64_t r0 = static_cast<int64_t>(b / gc * s.block_rows), c0 = static_cast<int64_t>(b % gc * s.block_cols);
    int64_t* rp = rows + at;
    int64_t* cp = cols + at;
    int64_t* ip = idx + at;
    const size_t got = huffman_decode_block(s, b, [&](size_t r, size_t c, int i) {
      *rp++ = r0 + static_cast<int64_t>(r);
      *cp++ = c0 + static_cast<int64_t>(c);
      *ip++ = i;
    });
    at += got;
  }
}

// ---------------------------------------------------------------------------------------------
// The convolution.

HuffmanStream HuffmanConv1x1::view() const {
  HuffmanStream s;
  s.rows = k;
  s.cols = c;
  s.block_rows = block_rows;
  s.block_cols = block_cols;
  s.dense = dense;
  s.stream = stream.data();
  s.stream_bytes = stream.size();
  s.offsets = offsets.data();
  s.entries = entries.data();
  s.gaps = dense ? nullptr : &gaps;
  s.index = has_index ? &index : nullptr;
  s.pairs = !dense && has_index ? &pairs : nullptr;
  return s;
}

size_t HuffmanConv1x1::nbytes() const {
  return stream.size() + (offsets.size() + entries.size()) * 4 + (gaps.lut.size() + index.lut.size()) * 2 +
         pairs.lut.size() * 4 + value_begin.size() * 8 + values.size() + tables.size() * 4 + bias.size() * 4;
}

namespace {

bool f16_zero(uint16_t h) { return (h & 0x7fffu) == 0; }

}  // namespace

HuffmanConv1x1 prepare_huffman_conv1x1(size_t rows, size_t cols, size_t block_rows, size_t block_cols, bool dense,
                                      const uint8_t* stream, size_t stream_bytes, const uint32_t* offsets,
                                      const uint32_t* entries, const uint8_t* gap_lengths, size_t gap_count,
                                      const uint8_t* index_lengths, size_t index_count, SpmmValues kind,
                                      const void* raw_values, const float* codebook, size_t codebook_groups,
                                      const float* bias, const KernelTable* t) {
  if (t == nullptr) t = &active_kernels();
  HuffmanConv1x1 w;
  w.table = t;
  w.k = rows;
  w.c = cols;
  w.block_rows = block_rows;
  w.block_cols = block_cols;
  w.dense = dense;
  w.kind = kind;
  if (rows == 0 || cols == 0) fail("huffman_conv1x1: K and C must be positive");
  if (cols > static_cast<size_t>(std::numeric_limits<int32_t>::max()) || rows > (size_t{1} << 31))
    fail("huffman_conv1x1: K or C too large");
  if (block_rows == 0 || block_rows > (size_t{1} << 16) || block_cols == 0 || block_cols > 4095)
    fail("huffman_conv1x1: blocks of 1..65536 rows and 1..4095 columns");
  const size_t nb = div_up(rows, block_rows) * div_up(cols, block_cols);
  if (stream == nullptr || offsets == nullptr || entries == nullptr) fail("huffman_conv1x1: missing arrays");
  if (uint64_t{offsets[nb]} + kHuffmanPadding > stream_bytes)
    fail("huffman_conv1x1: the stream has " + std::to_string(stream_bytes) + " bytes, the blocks need " +
         std::to_string(offsets[nb]) + " and " + std::to_string(kHuffmanPadding) + " of padding");
  w.stream.assign(stream, stream + stream_bytes);
  w.stream.resize(stream_bytes + (kHuffmanWidePadding - kHuffmanPadding), 0);  // the wide refills' room
  w.offsets.assign(offsets, offsets + nb + 1);
  w.entries.assign(entries, entries + nb);
  if (!dense) w.gaps = HuffmanTable::build(gap_lengths, gap_count, "gap_lengths");
  if (kind == SpmmValues::Codebook) {
    if (index_lengths == nullptr) fail("huffman_conv1x1: codebook values need index_lengths");
    if (codebook == nullptr) fail("huffman_conv1x1: indices need a codebook");
    if (index_count == 0 || index_count > 256) fail("huffman_conv1x1: the codebook must have 1 to 256 entries");
    if (codebook_groups != 1 && codebook_groups != rows)
      fail("huffman_conv1x1: codebook must have 1 or K (" + std::to_string(rows) + ") rows, got " +
           std::to_string(codebook_groups));
    w.index = HuffmanTable::build(index_lengths, index_count, "index_lengths");
    w.has_index = true;
    w.table_size = index_count;
    w.table_stride = codebook_groups == 1 ? 0 : index_count;
    w.tables = AlignedBuffer<float>(codebook_groups * index_count);
    std::memcpy(w.tables.data(), codebook, codebook_groups * index_count * 4);
  } else {
    if (dense) fail("huffman_conv1x1: a dense layout needs a codebook");
    if (index_lengths != nullptr) fail("huffman_conv1x1: raw values with an index code");
    if (raw_values == nullptr) fail("huffman_conv1x1: raw values missing");
  }
  if (!dense && w.has_index) {
    if (gap_count != block_cols + 1) fail("huffman_conv1x1: gap_lengths must have block_cols + 1 entries");
    w.pairs = HuffmanPairTable::build(w.gaps, w.index, static_cast<unsigned>(block_cols));
  }
  const HuffmanStream s = w.view();
  s.check();
  size_t total = 0;
  w.value_begin.resize(nb);
  for (size_t b = 0; b < nb; ++b) {
    w.value_begin[b] = total;
    total += entries[b];
  }
  if (kind != SpmmValues::Codebook) {
    const size_t es = w.elem_size();
    w.values = AlignedBuffer<uint8_t>(std::max<size_t>(total * es, 1));
    if (total != 0) std::memcpy(w.values.data(), raw_values, total * es);
  }
  w.bias = AlignedBuffer<float>(rows);
  for (size_t r = 0; r < rows; ++r) w.bias[r] = bias != nullptr ? bias[r] : 0.0f;
  // Decode every block once: validation, and each block row's kept entries (the workspace size).
  const size_t gc = s.grid_cols();
  std::vector<size_t> kept(div_up(rows, block_rows), 0);
  for (size_t b = 0; b < nb; ++b) {
    const size_t br = b / gc, r0 = br * block_rows;
    size_t vi = w.value_begin[b], n = 0;
    huffman_decode_block(s, b, [&](size_t r, size_t, int i) {
      bool keep = true;
      switch (kind) {
        case SpmmValues::Codebook: keep = w.tables[(r0 + r) * w.table_stride + static_cast<size_t>(i)] != 0.0f; break;
        case SpmmValues::F32: keep = reinterpret_cast<const float*>(w.values.data())[vi++] != 0.0f; break;
        case SpmmValues::F16: keep = !f16_zero(reinterpret_cast<const uint16_t*>(w.values.data())[vi++]); break;
      }
      n += keep;
    });
    kept[br] += n;
  }
  for (size_t n : kept) {
    w.nnz += n;
    w.max_block_row_entries = std::max(w.max_block_row_entries, n);
  }
  // Whether a decoded entry can be 0.0 (dropped, as pack_sparse_conv1x1 drops it): a coded index
  // whose value is 0.0 in some table, or a raw value that is 0.0.
  if (kind == SpmmValues::Codebook) {
    for (size_t g = 0; g < codebook_groups; ++g)
      for (size_t i = 0; i < index_count; ++i) w.zero_values |= index_lengths[i] != 0 && codebook[g * index_count + i] == 0.0f;
  } else {
    w.zero_values = true;
  }
  switch (kind) {
    case SpmmValues::F32: w.kernel = t->spmm_f32_nb1, w.kernel_name = t->names.spmm_f32_nb1; break;
    case SpmmValues::F16: w.kernel = t->spmm_f16w_nb1, w.kernel_name = t->names.spmm_f16w_nb1; break;
    case SpmmValues::Codebook: w.kernel = t->spmm_cbw_nb1, w.kernel_name = t->names.spmm_cbw_nb1; break;
  }
  if (w.kernel == nullptr) fail("huffman_conv1x1: no NB = 1 sparse kernel at the " + std::string(t->name) + " level");
  return w;
}

namespace {

// One thread's decoded block row in the SpmmBlocks NB = 1 form, kept between the units of a run.
struct Workspace {
  std::vector<int32_t> deltas;  // channels first, turned into deltas row by row
  std::vector<float> f32;
  std::vector<uint16_t> f16;
  std::vector<uint8_t> u8;
  std::vector<uint32_t> first, counts, row_begin;
  std::vector<HuffmanBlockReader> readers;  // one per column block
  std::vector<size_t> value_at;             // raw values: each column block's next value
  std::vector<uint32_t> stamp, bad;  // the dense rule's marks
  uint32_t epoch = 0;
  const HuffmanConv1x1* owner = nullptr;
  uint64_t generation = 0;
  size_t block_row = 0;
};

Workspace& thread_workspace() {
  static thread_local Workspace ws;
  return ws;
}

std::atomic<uint64_t> g_generation{0};

template <class T>
void grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

// Decodes block row br into the workspace: one reader per column block, opened together, so that
// each output row's entries come out in column order (row r of block 0, then of block 1, ...);
// deltas are written as the entries come. value(r, bj, index, v) sets the entry's value and says
// whether it is kept (not 0.0).
template <class Out, class Value>
void decode_rows(const HuffmanConv1x1& w, const HuffmanStream& s, size_t br, Workspace& ws, Out* out,
                 Value&& value) {
  const size_t r0 = br * w.block_rows, h = std::min(w.block_rows, w.k - r0);
  const size_t gc = s.grid_cols();
  HuffmanBlockReader* readers = ws.readers.data();
  for (size_t bj = 0; bj < gc; ++bj) readers[bj].open(s, br * gc + bj);
  int32_t* d = ws.deltas.data();
  const uint32_t cap = static_cast<uint32_t>(ws.deltas.size());
  uint32_t p = 0;
  for (size_t r = 0; r < h; ++r) {
    const uint32_t begin = p;
    int32_t prev = 0;
    for (size_t bj = 0; bj < gc; ++bj) {
      const int32_t c0 = static_cast<int32_t>(bj * w.block_cols);
      auto emit = [&](size_t col, int i) {
        Out v;
        if (!value(r, bj, i, v) || p == cap) return;  // (cap: prepare counted the same entries)
        const int32_t c = c0 + static_cast<int32_t>(col);
        if (p != begin) d[p - 1] = c - prev;
        prev = c;
        out[p++] = v;
      };
      if (w.dense) readers[bj].dense_row<true>(r, emit);
      else readers[bj].sparse_row<true>(r, emit);
    }
    ws.row_begin[r] = begin;
    ws.counts[r] = p - begin;
    if (p != begin) {
      d[p - 1] = 0;
      // the first channel: the last one minus the deltas of the row
      int32_t c = prev;
      for (uint32_t j = begin; j + 1 < p; ++j) c -= d[j];
      ws.first[r] = static_cast<uint32_t>(c);
    } else {
      ws.first[r] = 0;
    }
  }
  for (size_t bj = 0; bj < gc; ++bj) readers[bj].finish();
}

void decode_block_row(const HuffmanConv1x1& w, const HuffmanStream& s, size_t br, Workspace& ws) {
  const size_t need = std::max<size_t>(w.max_block_row_entries, 1);
  grow(ws.deltas, need);
  grow(ws.first, w.block_rows);
  grow(ws.counts, w.block_rows);
  grow(ws.row_begin, w.block_rows);
  grow(ws.readers, s.grid_cols());
  const size_t r0 = br * w.block_rows;
  switch (w.kind) {
    case SpmmValues::Codebook: {
      grow(ws.u8, need);
      const float* tables = w.tables.data() + r0 * w.table_stride;
      const size_t stride = w.table_stride;
      if (w.zero_values)
        decode_rows(w, s, br, ws, ws.u8.data(), [&](size_t r, size_t, int i, uint8_t& v) {
          v = static_cast<uint8_t>(i);
          return tables[r * stride + static_cast<size_t>(i)] != 0.0f;
        });
      else
        decode_rows(w, s, br, ws, ws.u8.data(), [](size_t, size_t, int i, uint8_t& v) {
          v = static_cast<uint8_t>(i);
          return true;
        });
      break;
    }
    case SpmmValues::F32: {
      grow(ws.f32, need);
      // raw values: each block's next value (entries of a block are in row order)
      grow(ws.value_at, s.grid_cols());
      for (size_t bj = 0; bj < s.grid_cols(); ++bj) ws.value_at[bj] = w.value_begin[br * s.grid_cols() + bj];
      const float* src = reinterpret_cast<const float*>(w.values.data());
      size_t* at = ws.value_at.data();
      decode_rows(w, s, br, ws, ws.f32.data(), [&](size_t, size_t j, int, float& v) {
        v = src[at[j]++];
        return v != 0.0f;
      });
      break;
    }
    case SpmmValues::F16: {
      grow(ws.f16, need);
      grow(ws.value_at, s.grid_cols());
      for (size_t bj = 0; bj < s.grid_cols(); ++bj) ws.value_at[bj] = w.value_begin[br * s.grid_cols() + bj];
      const uint16_t* src = reinterpret_cast<const uint16_t*>(w.values.data());
      size_t* at = ws.value_at.data();
      decode_rows(w, s, br, ws, ws.f16.data(), [&](size_t, size_t j, int, uint16_t& v) {
        v = src[at[j]++];
        return !f16_zero(v);
      });
      break;
    }
  }
}

// The dense rule (operators_sparse.h) for pixels [p0, p0 + len) of one image and the h rows of the
// decoded block row: output (row, p) becomes NaN where an input channel non-finite at p has no
// stored (non-zero) weight in the row. x: the image; y: the block row's first output row.
void dense_rule(const HuffmanConv1x1& w, size_t h, Workspace& ws, const float* x, size_t hw, size_t p0,
                size_t len, float* y) {
  grow(ws.stamp, w.c);
  for (size_t p = p0; p < p0 + len; ++p) {
    if (++ws.epoch == 0) {  // wrapped: clear the old marks
      std::fill(ws.stamp.begin(), ws.stamp.end(), 0u);
      ws.epoch = 1;
    }
    ws.bad.clear();
    for (size_t ch = 0; ch < w.c; ++ch)
      if (!std::isfinite(x[ch * hw + p])) {
        ws.stamp[ch] = ws.epoch;
        ws.bad.push_back(static_cast<uint32_t>(ch));
      }
    if (ws.bad.empty()) continue;
    for (size_t r = 0; r < h; ++r) {
      const int32_t* d = ws.deltas.data() + ws.row_begin[r];
      size_t col = ws.first[r], hits = 0;
      for (uint32_t j = 0; j < ws.counts[r]; ++j) {
        hits += ws.stamp[col] == ws.epoch;
        col += static_cast<size_t>(static_cast<ptrdiff_t>(d[j]));
      }
      if (hits < ws.bad.size()) y[r * hw + p] = std::numeric_limits<float>::quiet_NaN();
    }
  }
}

const void* workspace_values(const HuffmanConv1x1& w, const Workspace& ws) {
  switch (w.kind) {
    case SpmmValues::F32: return ws.f32.data();
    case SpmmValues::F16: return ws.f16.data();
    default: return ws.u8.data();
  }
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

HuffmanRunStats huffman_conv1x1(const float* x, size_t n, size_t hw, const HuffmanConv1x1& w, float* y,
                                const Activation& act, size_t threads) {
  HuffmanRunStats stats;
  if (n == 0 || hw == 0) return stats;
  const KernelTable& t = *w.table;
  const MinMax clamp = clamp_part(act);
  const bool post = needs_post_pass(act);
  const size_t tile = t.spmm_tile;
  const size_t ptiles = div_up(hw, tile);
  const size_t items = n * ptiles;  // (image, pixel tile)
  const HuffmanStream s = w.view();
  // Which tiles hold a NaN or an infinity: scanned once up front (every block row reads every tile).
  std::vector<uint8_t> flags(items);
  parallel_for(items, threads, [&](size_t begin, size_t end) {
    for (size_t u = begin; u < end; ++u) {
      const size_t img = u / ptiles, p0 = u % ptiles * tile;
      flags[u] = t.nonfinite_scan(x + img * w.c * hw + p0, w.c, hw, std::min(tile, hw - p0));
    }
  });
  const size_t gr = w.grid_rows();
  // Fewer block rows than threads: each block row's tiles split in parts (each part's thread
  // decodes the block row itself; consecutive parts on one thread decode it once).
  size_t psplit = 1;
  if (threads > 1 && gr < 2 * threads) psplit = std::max<size_t>(1, std::min(items, div_up(4 * threads, gr)));
  const uint64_t generation = ++g_generation;
  std::atomic<int64_t> decode_ns{0};
  std::atomic<size_t> decodes{0};
  parallel_for(gr * psplit, threads, [&](size_t begin, size_t end) {
    Workspace& ws = thread_workspace();
    for (size_t u = begin; u < end; ++u) {
      const size_t br = u / psplit, part = u % psplit;
      if (ws.owner != &w || ws.generation != generation || ws.block_row != br) {
        const auto t0 = std::chrono::steady_clock::now();
        decode_block_row(w, s, br, ws);
        ws.owner = &w;
        ws.generation = generation;
        ws.block_row = br;
        decode_ns += static_cast<int64_t>(seconds_since(t0) * 1e9);
        ++decodes;
      }
      const size_t r0 = br * w.block_rows, h = std::min(w.block_rows, w.k - r0);
      SpmmBlocks blocks;
      blocks.values = workspace_values(w, ws);
      blocks.deltas = ws.deltas.data();
      blocks.counts = ws.counts.data();
      blocks.first = ws.first.data();
      blocks.bias = w.bias.data() + r0;
      blocks.tables = w.tables.data() + r0 * w.table_stride;
      blocks.table_stride = w.table_stride;
      for (size_t item = items * part / psplit; item < items * (part + 1) / psplit; ++item) {
        const size_t img = item / ptiles, p0 = item % ptiles * tile, len = std::min(tile, hw - p0);
        const float* xi = x + img * w.c * hw;
        float* yr = y + img * w.k * hw + r0 * hw;
        w.kernel(len, h, xi + p0, hw, &blocks, yr + p0, hw, &clamp);
        if (flags[item]) dense_rule(w, h, ws, xi, hw, p0, len, yr);
        if (post)
          for (size_t r = 0; r < h; ++r) t.activation(yr + r * hw + p0, len, &act);
      }
    }
  }, Partition::Dynamic, 1);
  stats.decode_seconds = static_cast<double>(decode_ns.load()) * 1e-9;
  stats.decodes = decodes.load();
  return stats;
}

void huffman_conv1x1_decode_only(const HuffmanConv1x1& w, size_t threads) {
  const HuffmanStream s = w.view();
  parallel_for(w.grid_rows(), threads, [&](size_t begin, size_t end) {
    Workspace& ws = thread_workspace();
    for (size_t br = begin; br < end; ++br) {
      decode_block_row(w, s, br, ws);
      ws.owner = nullptr;  // not a run's: no run takes it
    }
  }, Partition::Dynamic, 1);
}

}  // namespace edgesdk::kernels
