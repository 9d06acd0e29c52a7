// NEON (aarch64) instantiation of the generic vector kernels, plus the NEON clustered-weight
// kernels (codebook lookup with tbl on the codebook's bytes) and the NNM gather.
#include <arm_neon.h>

#include "kernels/ukernels.h"

namespace edgesdk::kernels {
namespace {

#include "kernels/vec_f32_neon.inl"

#include "kernels/vector_kernels.inl"
#include "kernels/vector_ops.inl"
#include "kernels/chw_simd.inl"

// ---- clustered ------------------------------------------------------------------------------
// Lane words, L = 4. A field q becomes the byte indices 4q..4q+3 of its fp32 entry
// (q * 0x04040404 + 0x03020100) and tbl reads them from the codebook's raw bytes held in
// registers: 1 register (<= 2 bits), 2 (3 bits), 4 (4 bits), 4+4 with tbx (5 bits),
// 4x4 (6 bits). 7-8 bit tables (512+ bytes) are read lane by lane from L1.
constexpr size_t L = 4;

template <unsigned B>
struct Lookup {
  uint8x16x4_t t0, t1, t2, t3;
  const float* table;
  explicit Lookup(const float* t) : table(t) {
    const uint8_t* bytes = reinterpret_cast<const uint8_t*>(t);
    if (B <= 6) {
      const size_t regs = B <= 2 ? 1 : B == 3 ? 2 : 4;
      for (size_t i = 0; i < 4; ++i) t0.val[i] = i < regs ? vld1q_u8(bytes + 16 * i) : vdupq_n_u8(0);
    }
    if (B >= 5 && B <= 6) t1 = vld1q_u8_x4(bytes + 64);
    if (B == 6) {
      t2 = vld1q_u8_x4(bytes + 128);
      t3 = vld1q_u8_x4(bytes + 192);
    }
  }
  float32x4_t operator()(uint32x4_t s) const {
    const uint32x4_t q = vandq_u32(s, vdupq_n_u32((1u << B) - 1u));
    if (B >= 7) {
      float32x4_t v = vdupq_n_f32(0.0f);
      v = vld1q_lane_f32(table + vgetq_lane_u32(q, 0), v, 0);
      v = vld1q_lane_f32(table + vgetq_lane_u32(q, 1), v, 1);
      v = vld1q_lane_f32(table + vgetq_lane_u32(q, 2), v, 2);
      v = vld1q_lane_f32(table + vgetq_lane_u32(q, 3), v, 3);
      return v;
    }
    const uint8x16_t idx = vreinterpretq_u8_u32(vmlaq_n_u32(vdupq_n_u32(0x03020100u), q, 0x04040404u));
    uint8x16_t r;
    if (B <= 2) {
      r = vqtbl1q_u8(t0.val[0], idx);
    } else if (B == 3) {
      const uint8x16x2_t two = {{t0.val[0], t0.val[1]}};
      r = vqtbl2q_u8(two, idx);
    } else {
      r = vqtbl4q_u8(t0, idx);
      if (B >= 5) r = vqtbx4q_u8(r, t1, vsubq_u8(idx, vdupq_n_u8(64)));
      if (B == 6) {
        r = vqtbx4q_u8(r, t2, vsubq_u8(idx, vdupq_n_u8(128)));
        r = vqtbx4q_u8(r, t3, vsubq_u8(idx, vdupq_n_u8(192)));
      }
    }
    return vreinterpretq_f32_u8(r);
  }
};

template <unsigned B>
void clustered_gemv_bits(const ClusteredGemvArgs* a, size_t row_begin, size_t row_end) {
  constexpr size_t F = 32 / B;
  const size_t blocks = a->words_per_row / L;
  for (size_t r = row_begin; r < row_end; ++r) {
    const uint32_t* w0 = a->words + r * a->words_per_row;
    const Lookup<B> look(a->tables + (a->per_row_table ? r * a->table_size : 0));
    float32x4_t acc0 = vdupq_n_f32(0.0f), acc1 = vdupq_n_f32(0.0f);  // two chains hide FMA latency
    const float* x = a->x;
    for (size_t blk = 0; blk < blocks; ++blk) {
      uint32x4_t s = vld1q_u32(w0 + blk * L);
      size_t f = 0;
      for (; f + 2 <= F; f += 2) {
        acc0 = vfmaq_f32(acc0, look(s), vld1q_f32(x + f * L));
        s = vshrq_n_u32(s, B);
        acc1 = vfmaq_f32(acc1, look(s), vld1q_f32(x + (f + 1) * L));
        s = vshrq_n_u32(s, B);
      }
      if (f < F) acc0 = vfmaq_f32(acc0, look(s), vld1q_f32(x + f * L));
      x += F * L;
    }
    a->y[r] = vaddvq_f32(vaddq_f32(acc0, acc1)) + (a->bias != nullptr ? a->bias[r] : 0.0f);
  }
  activation_impl(a->y + row_begin, row_end - row_begin, &a->act);
}

template <unsigned B>
void clustered_decode_bits(const uint32_t* words, size_t words_per_row, const float* table, float* out) {
  constexpr size_t F = 32 / B;
  const Lookup<B> look(table);
  for (size_t blk = 0; blk < words_per_row / L; ++blk) {
    uint32x4_t s = vld1q_u32(words + blk * L);
    for (size_t f = 0; f < F; ++f) {
      vst1q_f32(out + (blk * F + f) * L, look(s));
      s = vshrq_n_u32(s, B);
    }
  }
}

// ---- NNM gather -----------------------------------------------------------------------------
// Centroid segments of <= 16 values are held as 64 bytes in four registers and read with tbl.
void nnm_gather_impl(const NnmGatherArgs* a, size_t p_begin, size_t p_end) {
  const ExpConsts k;
  const size_t kc = a->kc;
  for (size_t p = p_begin; p < p_end; ++p) {
    const float* row = a->cent + p * a->cent_stride;
    float* out = a->out + p * a->out_stride;
    for (size_t k0 = 0; k0 < a->k; k0 += L) {
      const size_t n = a->k - k0 < L ? a->k - k0 : L;
      float32x4_t acc = a->bias != nullptr ? V::load_tail(a->bias + k0, n, 0.0f) : vdupq_n_f32(0.0f);
      for (size_t g = 0; g < a->groups; ++g) {
        const float* base = row + g * kc;
        int32_t lane_idx[4] = {0, 0, 0, 0};
        for (size_t i = 0; i < n; ++i) lane_idx[i] = a->assign[g * a->k + k0 + i];
        const uint32x4_t q = vreinterpretq_u32_s32(vld1q_s32(lane_idx));
        float32x4_t v;
        if (kc <= 16) {
          float seg[16] = {0};
          for (size_t i = 0; i < kc; ++i) seg[i] = base[i];
          const uint8x16x4_t tab = vld1q_u8_x4(reinterpret_cast<const uint8_t*>(seg));
          const uint8x16_t idx = vreinterpretq_u8_u32(vmlaq_n_u32(vdupq_n_u32(0x03020100u), q, 0x04040404u));
          v = vreinterpretq_f32_u8(vqtbl4q_u8(tab, idx));
        } else {
          v = vdupq_n_f32(0.0f);
          v = vld1q_lane_f32(base + lane_idx[0], v, 0);
          v = vld1q_lane_f32(base + lane_idx[1], v, 1);
          v = vld1q_lane_f32(base + lane_idx[2], v, 2);
          v = vld1q_lane_f32(base + lane_idx[3], v, 3);
        }
        acc = vaddq_f32(acc, v);
      }
      V::store_tail(out + k0, activate(acc, a->act, k), n);
    }
  }
}

}  // namespace

void f32_activation_4x__neon(float* x, size_t n, const Activation* act) { activation_impl(x, n, act); }
void f32_depthwise_4c__neon(const DepthwiseArgs* a, size_t b, size_t e) { depthwise_impl(a, b, e); }
void f32_maxpool_4c__neon(const PoolArgs* a, size_t b, size_t e) { pool_impl(a, b, e, true); }
void f32_avgpool_4c__neon(const PoolArgs* a, size_t b, size_t e) { pool_impl(a, b, e, false); }
void f32_global_avgpool_16c__neon(const float* x, size_t p, size_t c, size_t s, float* y, const Activation* act) {
  global_avgpool_impl(x, p, c, s, y, act);
}
void f32_binary_4x__neon(const BinaryArgs* a, size_t b, size_t e) { binary_impl(a, b, e); }
void f32_softmax_4x__neon(const float* x, float* y, size_t n) { softmax_impl(x, y, n); }
void f32_nnm_gather_4c__neon(const NnmGatherArgs* a, size_t b, size_t e) { nnm_gather_impl(a, b, e); }
void f32_row_norm__neon(const RowNormArgs* a, size_t b, size_t e) { row_norm_impl(a, b, e); }
void f32_log_softmax__neon(const float* x, float* y, size_t n) { log_softmax_impl(x, y, n); }
void f32_softmax_axis__neon(const SoftmaxAxisArgs* a, size_t b, size_t e) { softmax_axis_impl(a, b, e); }
void f32_reduce__neon(const ReduceArgs* a, size_t b, size_t e) { reduce_impl(a, b, e); }
void f32_argreduce__neon(const ArgReduceArgs* a, size_t b, size_t e) { argreduce_impl(a, b, e); }
void f32_col2im__neon(const Col2ImArgs* a, size_t b, size_t e) { col2im_impl(a, b, e); }
void f32_resize_nearest__neon(const ResizeArgs* a, size_t b, size_t e, float* s) { resize_nearest_impl(a, b, e, s); }
void f32_resize_linear__neon(const ResizeArgs* a, size_t b, size_t e, float* s) { resize_linear_impl(a, b, e, s); }

void f32_clustered_gemv__neon(const ClusteredGemvArgs* a, size_t b, size_t e) {
  switch (a->bits) {
    case 1: clustered_gemv_bits<1>(a, b, e); break;
    case 2: clustered_gemv_bits<2>(a, b, e); break;
    case 3: clustered_gemv_bits<3>(a, b, e); break;
    case 4: clustered_gemv_bits<4>(a, b, e); break;
    case 5: clustered_gemv_bits<5>(a, b, e); break;
    case 6: clustered_gemv_bits<6>(a, b, e); break;
    case 7: clustered_gemv_bits<7>(a, b, e); break;
    default: clustered_gemv_bits<8>(a, b, e); break;
  }
}

// (This ISA's table has clustered_nibbles = false, so `nibbles` is never set here.)
void f32_clustered_decode__neon(const uint32_t* w, size_t wpr, const float* t, unsigned bits, bool /*nibbles*/,
                                float* out) {
  switch (bits) {
    case 1: clustered_decode_bits<1>(w, wpr, t, out); break;
    case 2: clustered_decode_bits<2>(w, wpr, t, out); break;
    case 3: clustered_decode_bits<3>(w, wpr, t, out); break;
    case 4: clustered_decode_bits<4>(w, wpr, t, out); break;
    case 5: clustered_decode_bits<5>(w, wpr, t, out); break;
    case 6: clustered_decode_bits<6>(w, wpr, t, out); break;
    case 7: clustered_decode_bits<7>(w, wpr, t, out); break;
    default: clustered_decode_bits<8>(w, wpr, t, out); break;
  }
}


// CHW kernels (chw_simd.inl).
void f32_dwconv2d_chw_3x3s1__neon(const DwChwArgs* a, size_t p, size_t b, size_t e) { dwconv_chw_impl<3, 1>(a, p, b, e); }
void f32_dwconv2d_chw_3x3s2__neon(const DwChwArgs* a, size_t p, size_t b, size_t e) { dwconv_chw_impl<3, 2>(a, p, b, e); }
void f32_dwconv2d_chw_5x5s1__neon(const DwChwArgs* a, size_t p, size_t b, size_t e) { dwconv_chw_impl<5, 1>(a, p, b, e); }
void f32_dwconv2d_chw_5x5s2__neon(const DwChwArgs* a, size_t p, size_t b, size_t e) { dwconv_chw_impl<5, 2>(a, p, b, e); }
void f32_gavgpool_chw__neon(const float* x, size_t planes, size_t hw, float* y, const Activation* act) {
  gavgpool_chw_impl(x, planes, hw, y, act);
}
void f32_transpose_4x4__neon(const void* s, size_t ss, void* d, size_t ds, size_t rows, size_t cols) {
  transpose_f32_impl(s, ss, d, ds, rows, cols);
}

}  // namespace edgesdk::kernels
