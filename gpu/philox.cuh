#pragma once
// Philox4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy as 1, 2, 3", SC'11),
// the counter-based generator of Random123 and cuRAND. Every function here is __host__
// __device__, so host tests and CPU-side code reproduce a kernel's random numbers exactly.
//
// Addressing: one draw of 128 random bits is named by (seed, stream_id, counter):
//   key     = {seed_lo, seed_hi}                         (64-bit seed)
//   counter = {counter_lo, counter_hi, stream_id, 0}     (64-bit position within a stream)
// Distinct (stream_id, counter) pairs under one seed never share a Philox block.
//
// Floating point: uniforms are exact (integer * 2^-24). Box-Muller normals use log/sin/cos
// written here from +, -, *, / and sqrt only, each explicitly rounded on the device
// (__fmul_rn & co. are never contracted into FMAs) and plain IEEE float operations on the host,
// so host and device give bit-identical normals. This assumes the host compiler does not
// contract a*b+c into an FMA: true for x86-64 builds without -mfma/-march=haswell (the default);
// a host build with FMA enabled would differ from the device in the last bit of some normals.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

namespace foxhunt::gpu {

namespace philox_detail {

inline constexpr std::uint32_t kM0 = 0xD2511F53u;  // round multipliers
inline constexpr std::uint32_t kM1 = 0xCD9E8D57u;
inline constexpr std::uint32_t kW0 = 0x9E3779B9u;  // Weyl key increments (golden ratio, sqrt(3)-1)
inline constexpr std::uint32_t kW1 = 0xBB67AE85u;

__host__ __device__ __forceinline__ std::uint32_t mulhilo(std::uint32_t a, std::uint32_t b, std::uint32_t* hi) {
#ifdef __CUDA_ARCH__
  *hi = __umulhi(a, b);
  return a * b;
#else
  const std::uint64_t p = static_cast<std::uint64_t>(a) * b;
  *hi = static_cast<std::uint32_t>(p >> 32);
  return static_cast<std::uint32_t>(p);
#endif
}

__host__ __device__ __forceinline__ uint4 philox_round(uint4 c, uint2 k) {
  std::uint32_t hi0, hi1;
  const std::uint32_t lo0 = mulhilo(kM0, c.x, &hi0);
  const std::uint32_t lo1 = mulhilo(kM1, c.z, &hi1);
  return make_uint4(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
}

// Correctly rounded single operations that the device compiler may not fuse.
__host__ __device__ __forceinline__ float rn_add(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
__host__ __device__ __forceinline__ float rn_sub(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
__host__ __device__ __forceinline__ float rn_mul(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
__host__ __device__ __forceinline__ float rn_div(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
__host__ __device__ __forceinline__ float rn_sqrt(float a) {
#ifdef __CUDA_ARCH__
  return __fsqrt_rn(a);
#else
  return __builtin_sqrtf(a);  // IEEE sqrt (sqrtss); a >= 0 here, so no errno path
#endif
}
__host__ __device__ __forceinline__ std::uint32_t float_bits(float x) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(x);
#else
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}
__host__ __device__ __forceinline__ float bits_float(std::uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

// Natural log for normal positive x (FreeBSD/musl logf's reduction and polynomial, < 1 ulp).
// Reduce x = m * 2^k with m in [sqrt(1/2), sqrt(2)), f = m - 1 (exact), then
// log(1+f) = f - f^2/2 + s*(f^2/2 + R(s^2)), s = f/(2+f).
__host__ __device__ __forceinline__ float log_positive(float x) {
  constexpr float kLn2Hi = 6.9313812256e-01f;  // 0x3f317180: k*kLn2Hi is exact for |k| < 2^8
  constexpr float kLn2Lo = 9.0580006145e-06f;  // 0x3717f7d1
  constexpr float kLg1 = 0.66666662693f, kLg2 = 0.40000972152f, kLg3 = 0.28498786688f, kLg4 = 0.24279078841f;
  const std::uint32_t ix = float_bits(x) - 0x3f3504f3u;  // bits relative to sqrt(1/2)
  const int k = static_cast<int>(ix) >> 23;              // arithmetic shift: floor
  const float m = bits_float(float_bits(x) - (static_cast<std::uint32_t>(k) << 23));
  const float f = rn_sub(m, 1.0f);
  const float s = rn_div(f, rn_add(2.0f, f));
  const float z = rn_mul(s, s);
  const float w = rn_mul(z, z);
  const float t1 = rn_mul(w, rn_add(kLg2, rn_mul(w, kLg4)));
  const float t2 = rn_mul(z, rn_add(kLg1, rn_mul(w, kLg3)));
  const float r = rn_add(t2, t1);
  const float hfsq = rn_mul(rn_mul(0.5f, f), f);
  const float dk = static_cast<float>(k);
  return rn_add(rn_add(rn_sub(rn_add(rn_mul(s, rn_add(hfsq, r)), rn_mul(dk, kLn2Lo)), hfsq), f), rn_mul(dk, kLn2Hi));
}

// sin(2*pi*u) and cos(2*pi*u) for u in [0, 1] given as a multiple of 2^-24 (so 4u and its
// rounding are exact). Quadrant q = rint(4u), t = 4u - q in [-1/2, 1/2], angle = (pi/2)(q + t);
// Taylor polynomials of sin(pi t/2) (to t^9) and cos(pi t/2) (to t^10) are accurate to < 1 ulp.
__host__ __device__ __forceinline__ void sincos_2pi(float u, float* s_out, float* c_out) {
  const float u4 = rn_mul(u, 4.0f);
  const float qf = static_cast<float>(static_cast<int>(rn_add(u4, 0.5f)));  // u4 >= 0: floor(u4 + 1/2)
  const int q = static_cast<int>(qf);
  const float t = rn_sub(u4, qf);
  const float z = rn_mul(t, t);
  float sp = 1.6044118092395365e-04f;                   // (pi/2)^9 / 9!
  sp = rn_add(-4.681753925979137e-03f, rn_mul(z, sp));  // -(pi/2)^7 / 7!
  sp = rn_add(7.969262450933456e-02f, rn_mul(z, sp));   // (pi/2)^5 / 5!
  sp = rn_add(-6.459640860557556e-01f, rn_mul(z, sp));  // -(pi/2)^3 / 3!
  sp = rn_add(1.5707963705062866f, rn_mul(z, sp));      // pi/2
  const float sn = rn_mul(t, sp);
  float cp = -2.520204179745633e-05f;                    // -(pi/2)^10 / 10!
  cp = rn_add(9.192602592520416e-04f, rn_mul(z, cp));    // (pi/2)^8 / 8!
  cp = rn_add(-2.0863480865955353e-02f, rn_mul(z, cp));  // -(pi/2)^6 / 6!
  cp = rn_add(2.5366950035095215e-01f, rn_mul(z, cp));   // (pi/2)^4 / 4!
  cp = rn_add(-1.2337005138397217f, rn_mul(z, cp));      // -(pi/2)^2 / 2!
  const float cs = rn_add(1.0f, rn_mul(z, cp));
  switch (q & 3) {
    case 0:
      *s_out = sn;
      *c_out = cs;
      break;
    case 1:
      *s_out = cs;
      *c_out = -sn;
      break;
    case 2:
      *s_out = -sn;
      *c_out = -cs;
      break;
    default:
      *s_out = -cs;
      *c_out = sn;
      break;
  }
}

}  // namespace philox_detail

// The Philox4x32 block function, 10 rounds (key bumped between rounds, as in Random123).
__host__ __device__ __forceinline__ uint4 philox4x32_10(uint4 counter, uint2 key) {
  using namespace philox_detail;
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
  for (int r = 0; r < 9; ++r) {
    counter = philox_round(counter, key);
    key.x += kW0;
    key.y += kW1;
  }
  return philox_round(counter, key);
}

__host__ __device__ __forceinline__ uint2 philox_key(std::uint64_t seed) {
  return make_uint2(static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
}
__host__ __device__ __forceinline__ uint4 philox_counter(std::uint32_t stream_id, std::uint64_t counter) {
  return make_uint4(static_cast<std::uint32_t>(counter), static_cast<std::uint32_t>(counter >> 32), stream_id, 0u);
}

// 128 random bits for (seed, stream_id, counter).
__host__ __device__ __forceinline__ uint4 random_bits4(std::uint64_t seed, std::uint32_t stream_id,
                                                       std::uint64_t counter) {
  return philox4x32_10(philox_counter(stream_id, counter), philox_key(seed));
}

// u32 -> float in (0, 1]: ((x >> 8) + 1) * 2^-24. The 2^24 values are equally likely and exact;
// never 0, so log(u) is always finite. Mean 1/2 + 2^-25.
__host__ __device__ __forceinline__ float u32_to_uniform_open0(std::uint32_t x) {
  return static_cast<float>((x >> 8) + 1u) * 5.9604644775390625e-08f;  // 2^-24
}
// u32 -> float in [0, 1): (x >> 8) * 2^-24. Can be 0: never feed it to a log.
__host__ __device__ __forceinline__ float u32_to_uniform_closed0(std::uint32_t x) {
  return static_cast<float>(x >> 8) * 5.9604644775390625e-08f;
}

// Four uniforms in (0, 1] (never exactly 0; exactly 1 with probability 2^-24).
__host__ __device__ __forceinline__ float4 uniform4(std::uint64_t seed, std::uint32_t stream_id,
                                                    std::uint64_t counter) {
  const uint4 b = random_bits4(seed, stream_id, counter);
  return make_float4(u32_to_uniform_open0(b.x), u32_to_uniform_open0(b.y), u32_to_uniform_open0(b.z),
                     u32_to_uniform_open0(b.w));
}

// lo + (hi - lo) * u for u from uniform4: in [lo, hi] (rounding can reach either end).
__host__ __device__ __forceinline__ float uniform_in(float u, float lo, float hi) {
  using namespace philox_detail;
  return rn_add(lo, rn_mul(rn_sub(hi, lo), u));
}

// Box-Muller: two independent standard normals from two random words. The radius uses
// u1 in (0, 1] (log finite, radius <= sqrt(2 * 24 ln 2) ~ 5.77), the angle u2 in [0, 1).
__host__ __device__ __forceinline__ float2 normal2(std::uint32_t bits1, std::uint32_t bits2) {
  using namespace philox_detail;
  const float u1 = u32_to_uniform_open0(bits1);
  const float u2 = u32_to_uniform_closed0(bits2);
  const float r = rn_sqrt(rn_mul(-2.0f, log_positive(u1)));
  float s, c;
  sincos_2pi(u2, &s, &c);
  return make_float2(rn_mul(r, c), rn_mul(r, s));
}

// Two standard normals for (seed, stream_id, counter): lanes x, y of normal4 (words z, w unused).
__host__ __device__ __forceinline__ float2 normal2(std::uint64_t seed, std::uint32_t stream_id, std::uint64_t counter) {
  const uint4 b = random_bits4(seed, stream_id, counter);
  return normal2(b.x, b.y);
}

// Four standard normals from one Philox block: lanes (x, y) from words (x, y), (z, w) from (z, w).
__host__ __device__ __forceinline__ float4 normal4(std::uint64_t seed, std::uint32_t stream_id, std::uint64_t counter) {
  const uint4 b = random_bits4(seed, stream_id, counter);
  const float2 a = normal2(b.x, b.y);
  const float2 c = normal2(b.z, b.w);
  return make_float4(a.x, a.y, c.x, c.y);
}

// mean + stddev * z, rounded the same way on host and device.
__host__ __device__ __forceinline__ float normal_scaled(float z, float mean, float stddev) {
  using namespace philox_detail;
  return rn_add(mean, rn_mul(stddev, z));
}

}  // namespace foxhunt::gpu
