// Defines one level's sparse 1x1 kernels from spmm_simd.inl: EDGESDK_SPMM_DEFINE(MR, NB, NV, isa)
// gives f32_spmm_<MR>x<NB>__<isa> and its fp16 (f32_f16w_) and codebook (f32_cbw_) siblings.
// Included by the spmm_<isa>.cc files after spmm_simd.inl, outside the anonymous namespace.
#define EDGESDK_SPMM_DEFINE(MR, NB, NV, isa)                                                                   \
  static_assert(MR == NV * V::W, "the name's MR is NV vectors");                                              \
  void f32_spmm_##MR##x##NB##__##isa(size_t mc, size_t nb, const float* x, size_t xs, const SpmmBlocks* w,   \
                                     float* y, size_t ys, const MinMax* clamp) {                              \
    spmm<NB, NV, FetchF32>(mc, nb, x, xs, w, y, ys, clamp);                                                   \
  }                                                                                                           \
  void f32_f16w_spmm_##MR##x##NB##__##isa(size_t mc, size_t nb, const float* x, size_t xs, const SpmmBlocks* w, \
                                          float* y, size_t ys, const MinMax* clamp) {                         \
    spmm<NB, NV, FetchF16>(mc, nb, x, xs, w, y, ys, clamp);                                                   \
  }                                                                                                           \
  void f32_cbw_spmm_##MR##x##NB##__##isa(size_t mc, size_t nb, const float* x, size_t xs, const SpmmBlocks* w, \
                                         float* y, size_t ys, const MinMax* clamp) {                          \
    spmm<NB, NV, FetchCodebook>(mc, nb, x, xs, w, y, ys, clamp);                                              \
  }
