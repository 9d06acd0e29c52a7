// NEON helpers of the qu8 kernels: gemmlowp requantization of 4 int32 lanes, bit for bit
// requantization.h's, and the narrowing to uint8. Included inside an anonymous namespace by
// qu8_neon.cc and qu8_neondot.cc (each gets its own copy, compiled with its own flags); not a
// standalone header. ARMv8.0 instructions only.

struct RqVec {
  int32x4_t mult, left, neg_right;  // neg_right = -e: vrshlq's right shift
};

static inline RqVec rq_load(const int32_t* rq, size_t count, size_t j) {
  return RqVec{vld1q_s32(rq + kQu8RqMultiplier * count + j), vld1q_s32(rq + kQu8RqLeft * count + j),
               vnegq_s32(vld1q_s32(rq + kQu8RqRight * count + j))};
}

static inline RqVec rq_broadcast(const Qu8Requant& r) {
  return RqVec{vdupq_n_s32(r.multiplier), vdupq_n_s32(r.left_shift), vdupq_n_s32(-r.right_shift)};
}

// requantize(x) of requantization.h:
//   SQSHL by the (non-negative) left shift saturates exactly as the clamp of acc << left;
//   SQRDMULH is srdhm itself: sat((2ab + 2^31) >> 32) = floor((ab + 2^30) / 2^31), saturating only
//     INT32_MIN * INT32_MIN;
//   rdbpot: SRSHL by -e rounds halves up, (y + 2^(e-1)) >> e, without overflow; gemmlowp's fix-up
//     first takes 1 off negative y (when e > 0: the and with -e keeps y's sign bit only then, and a
//     saturating add leaves INT32_MIN, which divides exactly anyway), so halves go away from zero.
static inline int32x4_t requantize(int32x4_t x, const RqVec& q) {
  const int32x4_t y = vqrdmulhq_s32(vqshlq_s32(x, q.left), q.mult);
  const int32x4_t fixup = vshrq_n_s32(vandq_s32(y, q.neg_right), 31);
  return vrshlq_s32(vqaddq_s32(y, fixup), q.neg_right);
}

struct OutVec {
  int16x8_t zp;
  uint8x16_t lo, hi;
};

static inline OutVec out_vec(const Qu8Output& o) {
  return OutVec{vdupq_n_s16(static_cast<int16_t>(o.zero_point)), vdupq_n_u8(o.qmin), vdupq_n_u8(o.qmax)};
}

// 8 requantized lanes -> int16 with saturation, + zero point with saturation: exact for every lane
// that can land in [0, 255] (one that saturated is out of it by far).
static inline int16x8_t narrow16(int32x4_t z0, int32x4_t z1, const OutVec& o) {
  return vqaddq_s16(vqmovn_high_s32(vqmovn_s32(z0), z1), o.zp);
}

static inline uint8x16_t to_u8x16(int32x4_t z0, int32x4_t z1, int32x4_t z2, int32x4_t z3, const OutVec& o) {
  const uint8x16_t u = vqmovun_high_s16(vqmovun_s16(narrow16(z0, z1, o)), narrow16(z2, z3, o));
  return vminq_u8(vmaxq_u8(u, o.lo), o.hi);
}

static inline uint8x8_t to_u8x8(int32x4_t z0, int32x4_t z1, const OutVec& o) {
  const uint8x8_t u = vqmovun_s16(narrow16(z0, z1, o));
  return vmin_u8(vmax_u8(u, vget_low_u8(o.lo)), vget_low_u8(o.hi));
}

// The first n (< 16) bytes of v to c.
static inline void store_partial(uint8_t* c, uint8x16_t v, size_t n) {
  uint8_t bytes[16];
  vst1q_u8(bytes, v);
  for (size_t j = 0; j < n; ++j) c[j] = bytes[j];
}

static inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}

// The last 1-3 bytes of a row in the low bytes, upper bytes zero; nothing past the row is read.
static inline uint32_t load_u32_tail(const uint8_t* p, size_t n) {
  uint32_t v = p[0];
  if (n > 1) v |= static_cast<uint32_t>(p[1]) << 8;
  if (n > 2) v |= static_cast<uint32_t>(p[2]) << 16;
  return v;
}

// Requantizes and stores an M x 16 GEMM tile held as acc[M][4] (rows < mr, columns < nr).
template <size_t M>
static inline void store_tile(int32x4_t (*acc)[4], size_t mr, size_t nr, const int32_t* rq, uint8_t* c, size_t ldc,
                              const Qu8Output* out) {
  RqVec q[4];
  for (size_t v = 0; v < 4; ++v) q[v] = rq_load(rq, 16, 4 * v);
  const OutVec o = out_vec(*out);
  for (size_t i = 0; i < M; ++i) {
    if (i >= mr) break;
    const uint8x16_t u = to_u8x16(requantize(acc[i][0], q[0]), requantize(acc[i][1], q[1]),
                                  requantize(acc[i][2], q[2]), requantize(acc[i][3], q[3]), o);
    if (nr >= 16) vst1q_u8(c + i * ldc, u);
    else store_partial(c + i * ldc, u, nr);
  }
}
