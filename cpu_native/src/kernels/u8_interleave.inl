// u8 planes -> pixels (NCHW -> NHWC of one image's bytes), included by each level's qu8 file
// inside namespace edgesdk::kernels, so the compiler vectorizes the fixed-C loops with that
// level's shuffles (GCC turns the C = 3 loop into pshufb/vpermb sequences: 224x224x3 bytes in
// ~7 us with AVX2 against ~24 us with SSE2 and ~40 us for numpy's strided copy). Not a header.
//
// y[p * c + ch] = planes[ch * plane_stride + p] for p < n, ch < c.
namespace {  // internal linkage: each level's copy is compiled with its own flags
namespace u8_interleave_impl {
template <size_t C>
static inline void fixed(const uint8_t* __restrict planes, size_t plane_stride, uint8_t* __restrict y, size_t n) {
  for (size_t p = 0; p < n; ++p)
    for (size_t ch = 0; ch < C; ++ch) y[p * C + ch] = planes[ch * plane_stride + p];
}

static inline void interleave(const uint8_t* planes, size_t plane_stride, size_t c, uint8_t* y, size_t n) {
  switch (c) {
    case 1: for (size_t p = 0; p < n; ++p) y[p] = planes[p]; return;
    case 2: fixed<2>(planes, plane_stride, y, n); return;
    case 3: fixed<3>(planes, plane_stride, y, n); return;
    case 4: fixed<4>(planes, plane_stride, y, n); return;
    default:
      for (size_t ch = 0; ch < c; ++ch)
        for (size_t p = 0; p < n; ++p) y[p * c + ch] = planes[ch * plane_stride + p];
  }
}
}  // namespace u8_interleave_impl
}  // namespace
