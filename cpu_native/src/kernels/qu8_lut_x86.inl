// The x86 table lookups' rows (qu8_lut_32x__avx2, qu8_lut_64x__avx512skx), included by each level's
// qu8 file inside namespace edgesdk::kernels. Not a header.
//
// vpshufb reads 16-byte rows and gives 0 for an index whose bit 7 is set. The table is 16 rows
// T_0..T_15. First pass, x < 128: v_k = x - 16k by signed saturating subtraction stays >= 0
// exactly while k <= x >> 4, so XOR-ing vpshufb of the difference rows D_0 = T_0,
// D_k = T_k ^ T_(k-1) over k = 0..7 telescopes to T_(x >> 4); a lane with x >= 128 is negative
// from the start and stays so (saturation), adding nothing. Second pass, the same on x ^ 0x80 with
// rows T_8..T_15 (D_8 = T_8) for x >= 128. 16 shuffles per vector, no gather.
namespace {  // internal linkage: each level's copy is compiled with its own flags
static inline __m128i lut_difference_row(const uint8_t* table, size_t k) {
  const __m128i row = _mm_loadu_si128(reinterpret_cast<const __m128i*>(table + 16 * k));
  if (k % 8 == 0) return row;
  return _mm_xor_si128(row, _mm_loadu_si128(reinterpret_cast<const __m128i*>(table + 16 * (k - 1))));
}
}  // namespace
