// Huffman-coded weight blocks (issue 15, seed 004): the native decoder of the format that
// edgesdk/compress/huffman.py specifies bit for bit (its module docstring), and the streaming
// sparse 1x1 convolution that decodes one block row of weights at a time into a small per-thread
// workspace just before use (never the whole layer).
//
// Decoding: a canonical code is given by its lengths (at most 12 bits); HuffmanTable maps the low
// 12 bits of the LSB-first bit buffer to (symbol, length) in one 4096-entry lookup. The bit buffer
// is refilled with one unaligned 8-byte load per entry (the stream carries 8 zero bytes after the
// last block, so the load stays inside the array); the consumed bit count is checked against the
// block's end after every code. The decoder is also the stream's validator (HuffmanBlocks
// validates every package on load through it): on anything that breaks the format it throws
// std::invalid_argument naming the block and the problem, and it never reads outside the stream
// or writes outside the arrays it was given.
//
// The convolution (HuffmanConv1x1): per block row of the grid (block_rows output channels), every
// column block is decoded into the SpmmBlocks NB = 1 form (first channel, channel deltas, counts,
// values: uint8 codebook indices, fp32 or fp16 bits) and the level's NB = 1 sparse microkernel runs
// over every pixel tile of every image for those rows. Entries whose value is exactly 0.0 are
// dropped as pack_sparse_conv1x1 drops them, so the result is bitwise sparse_conv1x1's with NB = 1
// (same kernel, same tiles, same summation order: bias, then the channels in increasing order).
// NaN and infinities follow the dense product by sparse_conv1x1's dense rule, applied per decoded
// block row.
#pragma once

#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/common.h"
#include "kernels/dispatch.h"

namespace edgesdk::kernels {

constexpr unsigned kHuffmanMaxBits = 12;
constexpr size_t kHuffmanPadding = 8;  // zero bytes after the last block
constexpr size_t kHuffmanWidePadding = 24;  // what the readers' wide refills need

// A canonical code's decoding table: lut[bits & 4095] = symbol | length << 12 for the code whose
// bit-reversed value is the low `length` bits of `bits`, 0 (length 0) where no code matches.
struct HuffmanTable {
  std::vector<uint16_t> lut;
  size_t symbols = 0;  // alphabet size (the lengths given)
  size_t used = 0;     // symbols with a code

  // Throws std::invalid_argument (message starting with `what`) on a length over 12, more than
  // 4096 symbols, or lengths that break Kraft's inequality.
  static HuffmanTable build(const uint8_t* lengths, size_t n, const char* what);
};

// The sparse layout's (gap, index) pairs whose two codes fit in 12 bits together, decoded by one
// lookup: pairs[bits & 4095] = gap | index << 12 | length << 20 | kPair, or length << 20 | kEndOfRow
// for the end-of-row code, 0 where the gap code is none or the two codes need more than 12 bits
// (the decoder then takes them one by one).
struct HuffmanPairTable {
  static constexpr uint32_t kPair = 1u << 31;
  static constexpr uint32_t kEndOfRow = 1u << 30;  // the end-of-row code (length in bits 20+)
  std::vector<uint32_t> lut;
  static HuffmanPairTable build(const HuffmanTable& gaps, const HuffmanTable& index, unsigned end_of_row);
};

// One tensor's coded blocks (views; nothing owned). index == nullptr: raw values (no index code).
struct HuffmanStream {
  size_t rows = 0, cols = 0, block_rows = 0, block_cols = 0;
  bool dense = false;                    // layout "dense": every weight an index code
  const uint8_t* stream = nullptr;
  size_t stream_bytes = 0;
  const uint32_t* offsets = nullptr;     // blocks + 1
  const uint32_t* entries = nullptr;     // blocks
  const HuffmanTable* gaps = nullptr;    // sparse layout: alphabet block_cols + 1
  const HuffmanTable* index = nullptr;   // codebook indices (dense layout: required)
  const HuffmanPairTable* pairs = nullptr;  // optional (sparse layout with an index code): faster

  size_t grid_rows() const { return div_up(rows, block_rows); }
  size_t grid_cols() const { return div_up(cols, block_cols); }
  size_t blocks() const { return grid_rows() * grid_cols(); }
  // Throws unless the shape, offsets (from 0, rising, inside the stream with its padding), entry
  // counts and tables fit together.
  void check() const;
};

[[noreturn]] void huffman_fail(size_t block, const std::string& what);

namespace huffman_detail {
inline uint64_t load_bits(const uint8_t* p, uint64_t bit) {
  uint64_t v;
  std::memcpy(&v, p + (bit >> 3), 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap64(v);
#endif
  return v >> (bit & 7);
}
}  // namespace huffman_detail

// Reads one block a row at a time (the convolution keeps one reader per column block of a block
// row open, so that each output row's entries come out in column order across the blocks). Every
// method throws std::invalid_argument (huffman_fail) on a code that is none, a code running past
// the block's end, a column outside the block, or more entries than s.entries[b]; finish() on fewer.
//
// The bit buffer holds at least 24 bits (a gap and an index code) at each entry: it is refilled
// (one unaligned 8-byte load at the consumed bit's byte, >= 56 bits) when it holds fewer. The load
// starts at or before the block's end byte, so it stays inside the stream and its padding.
struct HuffmanBlockReader {
  const uint8_t* base = nullptr;
  const uint8_t* next = nullptr;  // Wide refills: the next byte to load
  uint64_t pos = 0, end = 0;  // bits consumed (from the stream's start); the block's end
  uint64_t buf = 0;
  unsigned avail = 0;
  size_t block = 0, width = 0, count = 0, expected = 0;
  const uint16_t* glut = nullptr;
  const uint16_t* ilut = nullptr;
  const uint32_t* plut = nullptr;
  unsigned eor = 0;

  void open(const HuffmanStream& s, size_t b) {
    const size_t gc = s.grid_cols();
    const size_t bi = b / gc, bj = b % gc;
    width = std::min(s.block_cols, s.cols - bj * s.block_cols);
    base = s.stream;
    pos = uint64_t{s.offsets[b]} * 8;
    end = uint64_t{s.offsets[b + 1]} * 8;
    next = base + s.offsets[b];
    buf = 0;
    avail = 0;
    block = b;
    count = 0;
    expected = s.entries[b];
    glut = s.gaps != nullptr ? s.gaps->lut.data() : nullptr;
    ilut = s.index != nullptr ? s.index->lut.data() : nullptr;
    plut = ilut != nullptr && s.pairs != nullptr ? s.pairs->lut.data() : nullptr;
    eor = static_cast<unsigned>(s.block_cols);
    if (s.dense) {
      const size_t h = std::min(s.block_rows, s.rows - bi * s.block_rows);
      if (expected != h * width)
        huffman_fail(b, "claims " + std::to_string(expected) + " entries, its weights are " + std::to_string(h * width));
    }
  }

  // Sparse layout: row r's entries up to its end-of-row code, emit(col, index) each (block-local
  // column; index -1 without an index code). The state lives in locals while the row lasts (the
  // emitted stores may alias anything, which would send it through memory at every code).
  //
  // Wide: refills OR 8 new bytes above the bits held (Giesen's branchless refill: the load's
  // address does not wait for the codes being decoded), reading up to 16 bytes past the consumed
  // bit: only for a stream with at least kHuffmanWidePadding bytes after its last block (the
  // convolution's own copy).
  template <bool Wide = false, class Emit>
  void sparse_row(size_t r, Emit&& emit) {
    uint64_t b_ = buf, p_ = pos;
    const uint8_t* q_ = next;
    unsigned a_ = avail;
    size_t n_ = count;
    const uint64_t end_ = end;
    const size_t w_ = width, expected_ = expected;
    const uint8_t* base_ = base;
    const uint16_t* g_ = glut;
    const uint16_t* i_ = ilut;
    const uint32_t* pl_ = plut;
    const unsigned eor_ = eor;
    auto fail_at = [&](const std::string& what) { huffman_fail(block, "row " + std::to_string(r) + ": " + what); };
    auto consume = [&](unsigned len, const char* what) {
      b_ >>= len;
      a_ -= len;
      p_ += len;
      if (p_ > end_) fail_at(std::string(what) + " runs past the block's end");
    };
    auto entry = [&](size_t col) {
      if (col >= w_)
        huffman_fail(block, "row " + std::to_string(r) + " steps to column " + std::to_string(col) + " of " +
                                std::to_string(w_));
      if (n_ == expected_)
        huffman_fail(block, "decodes to more than the " + std::to_string(expected_) + " entries it claims");
      ++n_;
    };
    size_t col = ~size_t{0};  // -1: the next column is previous + 1 + gap
    for (;;) {
      if (a_ < 2 * kHuffmanMaxBits) {
        if constexpr (Wide) {
          b_ |= huffman_detail::load_bits(q_, 0) << a_;
          q_ += (63 - a_) >> 3;
          a_ |= 56;
        } else {
          b_ = huffman_detail::load_bits(base_, p_);
          a_ = 56;
        }
      }
      if (pl_ != nullptr) {
        const uint32_t pe = pl_[b_ & 4095];
        if (pe & HuffmanPairTable::kPair) {
          consume((pe >> 20) & 31, "a code");
          col += 1 + (pe & 4095);
          entry(col);
          emit(col, static_cast<int>((pe >> 12) & 255));
          continue;
        }
        if (pe & HuffmanPairTable::kEndOfRow) {
          consume((pe >> 20) & 31, "a gap code");
          break;
        }
      }
      const uint16_t e = g_[b_ & 4095];
      const unsigned len = e >> 12;
      if (len == 0) fail_at("bits that are no gap code");
      consume(len, "a gap code");
      const unsigned g = e & 4095;
      if (g == eor_) break;
      col += 1 + g;
      int idx = -1;
      if (i_ != nullptr) {
        const uint16_t ei = i_[b_ & 4095];
        const unsigned li = ei >> 12;
        if (li == 0) fail_at("bits that are no index code");
        consume(li, "an index code");
        idx = static_cast<int>(ei & 4095);
      }
      entry(col);
      emit(col, idx);
    }
    buf = b_;
    pos = p_;
    next = q_;
    avail = a_;
    count = n_;
  }

  // Dense layout: row r's `width` index codes (Wide: as sparse_row).
  template <bool Wide = false, class Emit>
  void dense_row(size_t r, Emit&& emit) {
    uint64_t b_ = buf, p_ = pos;
    const uint8_t* q_ = next;
    unsigned a_ = avail;
    const uint64_t end_ = end;
    const uint8_t* base_ = base;
    const uint16_t* i_ = ilut;
    const size_t w_ = width;
    for (size_t col = 0; col < w_; ++col) {
      if (a_ < kHuffmanMaxBits) {
        if constexpr (Wide) {
          b_ |= huffman_detail::load_bits(q_, 0) << a_;
          q_ += (63 - a_) >> 3;
          a_ |= 56;
        } else {
          b_ = huffman_detail::load_bits(base_, p_);
          a_ = 56;
        }
      }
      const uint16_t e = i_[b_ & 4095];
      const unsigned len = e >> 12;
      if (len == 0) huffman_fail(block, "row " + std::to_string(r) + ": bits that are no index code");
      b_ >>= len;
      a_ -= len;
      p_ += len;
      if (p_ > end_) huffman_fail(block, "row " + std::to_string(r) + ": an index code runs past the block's end");
      emit(col, static_cast<int>(e & 4095));
    }
    buf = b_;
    pos = p_;
    next = q_;
    avail = a_;
    count += w_;
  }

  void finish() const {
    if (count != expected)
      huffman_fail(block, "decodes to " + std::to_string(count) + " entries, it claims " + std::to_string(expected));
    // Its code ends in its last byte (the encoder pads a block to a byte, no more): otherwise
    // zero bytes after a truncated code could decode as codes of a missing end of row or index.
    if ((pos + 7) / 8 != end / 8)
      huffman_fail(block, "its code ends before its last byte");
  }
};

// Decodes block b of s (s.check() passed), calling emit(local_row, local_col, index) for every
// entry in stored order (index -1 without an index code). Throws as HuffmanBlockReader. Returns the
// entry count.
template <class Emit>
size_t huffman_decode_block(const HuffmanStream& s, size_t b, Emit&& emit) {
  HuffmanBlockReader reader;
  reader.open(s, b);
  const size_t h = std::min(s.block_rows, s.rows - b / s.grid_cols() * s.block_rows);
  for (size_t r = 0; r < h; ++r) {
    if (s.dense) reader.dense_row(r, [&](size_t col, int i) { emit(r, col, i); });
    else reader.sparse_row(r, [&](size_t col, int i) { emit(r, col, i); });
  }
  reader.finish();
  return reader.count;
}

// Every entry of every block in stored order: rows, cols (tensor coordinates) and the codebook
// index (-1 without an index code). The arrays hold sum(entries) values. Throws as above.
void huffman_decode_all(const HuffmanStream& s, int64_t* rows, int64_t* cols, int64_t* idx);

// ---------------------------------------------------------------------------------------------
// Streaming sparse 1x1 convolution from Huffman blocks.

struct HuffmanConv1x1 {
  const KernelTable* table = nullptr;
  size_t k = 0, c = 0;
  size_t block_rows = 0, block_cols = 0;
  bool dense = false;
  SpmmValues kind = SpmmValues::F32;
  SpmmUkernel kernel = nullptr;
  const char* kernel_name = nullptr;
  // The coded weights (copies: the object owns what it decodes).
  std::vector<uint8_t> stream;
  std::vector<uint32_t> offsets, entries;
  HuffmanTable gaps, index;
  HuffmanPairTable pairs;  // sparse layout with an index code
  bool has_index = false;
  std::vector<size_t> value_begin;  // raw values: per block, its first value
  AlignedBuffer<uint8_t> values;    // raw values (fp32 or fp16 bits), entry order
  AlignedBuffer<float> tables;      // codebook: G x T floats
  size_t table_size = 0, table_stride = 0;  // T; floats between two rows' tables (0: one table)
  AlignedBuffer<float> bias;        // K
  size_t max_block_row_entries = 0;  // the workspace size
  size_t nnz = 0;                    // kept entries (value != 0.0)
  bool zero_values = false;          // a decoded entry may be 0.0 (checked and dropped while decoding)

  HuffmanStream view() const;
  size_t grid_rows() const { return div_up(k, block_rows); }
  size_t elem_size() const { return kind == SpmmValues::F32 ? 4 : kind == SpmmValues::F16 ? 2 : 1; }
  size_t nbytes() const;  // what the object holds (the coded weights, tables, bias)
};

// Prepares the convolution of K = rows output channels, C = cols input channels: the stream (as
// HuffmanStream, layout and tables from lengths), the values as `kind` says (F32 / F16: raw values,
// sum(entries) of them; Codebook: G x T fp32 tables, G == 1 or K, T == the index alphabet),
// bias (K floats or null). Decodes every block once (validation, and each row's entry count).
// Throws std::invalid_argument on bad arguments or a bad stream.
HuffmanConv1x1 prepare_huffman_conv1x1(size_t rows, size_t cols, size_t block_rows, size_t block_cols, bool dense,
                                      const uint8_t* stream, size_t stream_bytes, const uint32_t* offsets,
                                      const uint32_t* entries, const uint8_t* gap_lengths, size_t gap_count,
                                      const uint8_t* index_lengths, size_t index_count, SpmmValues kind,
                                      const void* raw_values, const float* codebook, size_t codebook_groups,
                                      const float* bias, const KernelTable* t = nullptr);

struct HuffmanRunStats {
  double decode_seconds = 0;  // summed over the threads
  size_t decodes = 0;         // block rows decoded (a block row split among threads: once by each)
};

// x: N images of [C][hw] floats; y: N images of [K][hw]. act as sparse_conv1x1 takes it. w is only
// read (safe from several threads).
HuffmanRunStats huffman_conv1x1(const float* x, size_t n, size_t hw, const HuffmanConv1x1& w, float* y,
                                const Activation& act, size_t threads);

// Decodes every block row into the workspaces as huffman_conv1x1 does, multiplying nothing (block
// rows split among the threads): the decode's share of a layer, for benchmarks.
void huffman_conv1x1_decode_only(const HuffmanConv1x1& w, size_t threads);

}  // namespace edgesdk::kernels
