// The KAN layer's forward (models/kan/kan_layer.cu) raced against its variants: the library's
// two kernels (bases, then the tiled gather), the same tile with double-buffered cp.async staging,
// a row-per-lane layout with one barrier per 8 inputs, the bases computed inside the forward
// kernel, and the whole 2-layer network in one kernel. Built with FOXHUNT_BUILD_DEV=ON as
// foxhunt_dev_kan_forward_variants; run it with no arguments on a GPU host; exit status 1 when any
// check fails. Order 3 only (the bench's); the grid size is a runtime argument of every kernel.
//
// The layer: y[b, o] = sum_i silu(x[b, i]) W[o, i] + sum_q v_q(b, i) c[o, i, f(b, i) + q], with
// f, v_0..v_k the first non-zero B-spline basis of x[b, i] and the k+1 non-zero values
// (models/kan/bspline.cuh). Every variant adds, for each output, the inputs in ascending order,
// each input's term as (s w, then k+1 fmaf over q ascending) added to the accumulator: the
// shipped kernel's order. All of them therefore claim the shipped kernel's bits, and the checks
// hold them to it (the bases are the same bspline_local, with no contractible multiply-adds).
//
// Variants (timed at 4096 rows: the bench's 2-layer network 16 -> 64 -> 64 and 16 -> 256 -> 256):
//   shipped            KanLayer::forward: the bases kernel writes first/values to global memory,
//                      then the forward kernel tiles 16R rows x 64 outputs (R = 4, or 2 when
//                      64-row tiles do not fill the SMs) and walks the inputs 4 at a time with
//                      two barriers and a synchronous coefficient load per step.
//   tile_cpasync       the shipped tile and thread mapping, but the coefficients, base weights
//                      and bases of input group g+1 go to the second shared buffer through
//                      cp.async (x through registers, silu applied on the way in) while group g
//                      computes: one barrier per group, the load latency hidden behind compute.
//   rowlane_*          one lane per row (32R rows per block, R per lane), each warp its own U
//                      outputs (a block covers W U outputs), inputs staged 8 at a time
//                      (cp.async, double-buffered, one barrier per 8 inputs). The coefficients
//                      sit in shared memory as [input][basis][output] with a row stride of
//                      W U + 4 floats: a lane's U outputs of basis f + q are U/4 float4 loads,
//                      lanes of equal f read the same 16 bytes (a broadcast), and the <= 8
//                      distinct f of a grid of 8 fall in distinct bank quads. Per input and
//                      row a lane does 6U FMA-class ops for 1.25U float4 loads (the shipped tile:
//                      one scalar load per FMA, 2-way conflicted between its two rows per warp).
//     _split           the library's bases kernel first (two launches per layer);
//     _fused           the bases and silu computed in the forward kernel from x and the knots (one
//                      launch per layer; the bases of 8 inputs x 32R rows per barrier);
//     _packed          _fused, with the coefficients and base weights read from a copy laid out
//                      once (per parameter change) in the shared-memory layout, so a chunk is one
//                      contiguous block copied by 16-byte cp.async: no index arithmetic or bounds
//                      checks (by instruction count, the 4-byte gather of a chunk costs about a
//                      third of its compute).
//   net2_*             both layers in ONE launch (rows are independent): a block of 32 rows runs
//                      layer 1's output tiles into a shared-memory hidden tile (32 x hidden) and
//                      layer 2 from it: no hidden round trip through global memory, one launch
//                      for the step instead of four. 4096 rows = 128 blocks (one per SM). Bases
//                      fused; _packed as for rowlane.
// The names say the shape: r<R> rows per lane, u<U> outputs per lane, w<W> warps per block, and
// _c16 16 inputs per barrier instead of 8 (half the barriers, twice the shared memory).
//
// Checks (any failure: printed, exit 1): for the networks in -> hidden -> hidden with (in, hidden)
// in {(16, 64), (16, 256), (17, 17)}, grid 8, random non-uniform knots per input, weights and
// coefficients U(-1, 1)/sqrt(in), x U(-3, 6) (inside and on both sides of the grid), at rows
// 4096, 4097, 1 and 37 (widths 64, 256 and 17; partial row, output and input tiles):
//   - the shipped layer 1 against a float64 dense Cox-de Boor layer on x, the shipped layer 2
//     against it on the shipped layer 1's (float) output;
//   - every layer variant on both layers, every network variant on the whole network: the same
//     float64 tolerance, and bit for bit equal to the shipped output;
//   - outputs NaN-poisoned before each run (an unwritten output fails), and 1024 poisoned floats
//     past the end that must stay poisoned (no out-of-bounds writes).
// Tolerance per output: |got - ref| <= rtol S + 1e-6, S = sum of the absolute terms (|silu(x) w|
// and |c B|), rtol = max(1e-5, 2 (in + 32) 2^-24): the worst-case rounding of the in accumulator
// adds, the k+2 roundings of each input's term and the float bases (~20 ulp) and silu is about
// (in + 32) ulp of S; a wrong basis, input or output is off by O(S / (in (k+2))), over 20x that.
// Timings: median of 50 launches (events, 100 us of queued GPU work first so the host's launch
// latency is not timed), per layer and for the 2-layer step (the layer variants' two or four
// launches back to back). FLOP: 2 (k+2) per (row, input, output) (the bases not counted); bytes:
// x, the parameters and y once (the compulsory traffic; the split variants' bases and the layered
// variants' hidden round trip not counted). The last line names the fastest correct variant on
// the width-64 step: "BEST <name>".
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.hpp"
#include "gpu/activation.cuh"
#include "gpu/arena.hpp"
#include "gpu/buffer.hpp"
#include "gpu/check.hpp"
#include "gpu/context.hpp"
#include "gpu/device.hpp"
#include "gpu/launch.cuh"
#include "gpu/stream.hpp"
#include "models/kan/bspline.cuh"
#include "models/kan/kan_layer.hpp"
#include "models/module.hpp"

namespace foxhunt::dev {
namespace {

constexpr int kOrder = 3, kK1 = kOrder + 1;
constexpr int kGrid = 8;

__device__ __forceinline__ float silu(float x) { return gpu::activate<gpu::Activation::silu>(x, 0.f); }

// ---- cp.async (sm_80+): 4-byte copies global -> shared, zero-filled when !ok ------------------
__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool ok) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  const int n = ok ? 4 : 0;  // src-size 0: nothing is read, the 4 bytes are zeros
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(n) : "memory");
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

template <class Kernel>
void allow_smem(Kernel kernel, std::size_t bytes) {
  if (bytes > 48 * 1024)
    FH_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

// Issues the cp.async of c[o0 + oo, i0 + ii, j] (oo < n_out, ii < n_in) to dst[(ii nb + j) ld + oo],
// zeros past in and out. For one output the n_in nb floats are contiguous in c, and (ii nb + j) is
// their offset t: consecutive threads copy consecutive floats, and (oo, t) advance by kT without a
// division by the runtime nb per element.
template <int kT>
__device__ __forceinline__ void stage_coefficients(float* dst, int ld, const float* c, int o0, int n_out, int i0,
                                                   int n_in, int in, int out, int nb) {
  const int L = n_in * nb, valid = min(n_in, in - i0) * nb;
  const int step_o = kT / L, step_t = kT % L;
  int oo = static_cast<int>(threadIdx.x) / L, t = static_cast<int>(threadIdx.x) % L;
  while (oo < n_out) {
    const int o = o0 + oo;
    const bool ok = o < out && t < valid;
    cp_async4(dst + t * ld + oo, ok ? c + (static_cast<std::int64_t>(o) * in + i0) * nb + t : c, ok);
    oo += step_o;
    t += step_t;
    if (t >= L) t -= L, ++oo;
  }
}

// ---- tile_cpasync: the shipped tile, double-buffered ---------------------------------------------
constexpr int kTcOuts = 64, kTcIns = 4, kTcOs = kTcOuts + 1;

template <int K1, int R>
struct TileCp {
  static constexpr int kRows = 16 * R;
  static int buffer_floats(int nb) { return kTcIns * nb * kTcOs + kTcIns * kTcOuts + kTcIns * (K1 + 2) * kRows; }
};

template <int K1, int R>
__global__ void __launch_bounds__(256) tile_cpasync_kernel(float* __restrict__ y, const float* __restrict__ x,
                                                           const std::int32_t* __restrict__ first,
                                                           const float* __restrict__ values,
                                                           const float* __restrict__ w, const float* __restrict__ c,
                                                           int rows, int in, int out, int nb) {
  constexpr int kRows = TileCp<K1, R>::kRows;
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  const int buf_floats = kTcIns * nb * kTcOs + kTcIns * kTcOuts + kTcIns * (K1 + 2) * kRows;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int b0 = blockIdx.x * kRows, o0 = blockIdx.y * kTcOuts;
  struct Buf {
    float *cs, *ws, *ss, *vs;
    std::int32_t* fs;
  };
  auto buf = [&](int which) {
    Buf b;
    b.cs = smem + which * buf_floats;
    b.ws = b.cs + kTcIns * nb * kTcOs;
    b.ss = b.ws + kTcIns * kTcOuts;
    b.vs = b.ss + kTcIns * kRows;
    b.fs = reinterpret_cast<std::int32_t*>(b.vs + kTcIns * K1 * kRows);
    return b;
  };
  auto stage_async = [&](const Buf& b, int i0) {
    stage_coefficients<256>(b.cs, kTcOs, c, o0, kTcOuts, i0, kTcIns, in, out, nb);
    for (int e = threadIdx.x; e < kTcIns * kTcOuts; e += 256) {
      const int ii = e % kTcIns, oo = e / kTcIns;
      const int o = o0 + oo, i = i0 + ii;
      const bool ok = o < out && i < in;
      cp_async4(b.ws + ii * kTcOuts + oo, ok ? w + static_cast<std::int64_t>(o) * in + i : w, ok);
    }
    for (int e = threadIdx.x; e < kTcIns * kRows; e += 256) {
      const int ii = e % kTcIns, rr = e / kTcIns;
      const int b_ = b0 + rr, i = i0 + ii;
      const bool ok = b_ < rows && i < in;
      const std::int64_t at = static_cast<std::int64_t>(b_) * in + i;
      cp_async4(b.fs + ii * kRows + rr, ok ? first + at : first, ok);
#pragma unroll
      for (int q = 0; q < K1; ++q) cp_async4(b.vs + (ii * K1 + q) * kRows + rr, ok ? values + at * K1 + q : values, ok);
    }
  };
  // x of the group's (row, input) pairs: kTcIns * kRows <= 256, one per thread at most.
  const int xe = threadIdx.x;
  const int x_ii = xe % kTcIns, x_rr = xe / kTcIns;
  auto load_x = [&](int i0) {
    const int b_ = b0 + x_rr, i = i0 + x_ii;
    return (xe < kTcIns * kRows && b_ < rows && i < in) ? x[static_cast<std::int64_t>(b_) * in + i] : 0.f;
  };
  auto store_s = [&](const Buf& b, int i0, float xv) {
    if (xe >= kTcIns * kRows) return;
    const bool ok = b0 + x_rr < rows && i0 + x_ii < in;
    b.ss[x_ii * kRows + x_rr] = ok ? silu(xv) : 0.f;
  };
  float acc[R][4] = {};
  const int groups = (in + kTcIns - 1) / kTcIns;
  {
    const Buf b = buf(0);
    stage_async(b, 0);
    cp_async_commit();
    store_s(b, 0, load_x(0));
  }
  for (int g = 0; g < groups; ++g) {
    cp_async_wait_all();
    __syncthreads();  // group g is in buffer g % 2; every read of the other buffer (group g - 1) is done
    const Buf cur = buf(g & 1), nxt = buf((g + 1) & 1);
    const bool more = g + 1 < groups;
    float xn = 0.f;
    if (more) {
      stage_async(nxt, (g + 1) * kTcIns);
      cp_async_commit();
      xn = load_x((g + 1) * kTcIns);
    }
#pragma unroll
    for (int ii = 0; ii < kTcIns; ++ii) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int rr = ty + 16 * r;
        const float s = cur.ss[ii * kRows + rr];
        const float* crow = cur.cs + (ii * nb + cur.fs[ii * kRows + rr]) * kTcOs;
        float v[K1];
#pragma unroll
        for (int q = 0; q < K1; ++q) v[q] = cur.vs[(ii * K1 + q) * kRows + rr];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const int oo = tx + 16 * u;
          float a = s * cur.ws[ii * kTcOuts + oo];
#pragma unroll
          for (int q = 0; q < K1; ++q) a = fmaf(v[q], crow[q * kTcOs + oo], a);
          acc[r][u] += a;
        }
      }
    }
    if (more) store_s(nxt, (g + 1) * kTcIns, xn);
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int b_ = b0 + ty + 16 * r;
    if (b_ >= rows) continue;
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int o = o0 + tx + 16 * u;
      if (o < out) y[static_cast<std::int64_t>(b_) * out + o] = acc[r][u];
    }
  }
}

template <int R>
void launch_tile_cpasync(float* y, const float* x, const std::int32_t* first, const float* values, const float* w,
                         const float* c, int rows, int in, int out, int nb, cudaStream_t s) {
  const std::size_t bytes = sizeof(float) * 2 * static_cast<std::size_t>(TileCp<kK1, R>::buffer_floats(nb));
  static std::size_t allowed = 0;  // the kernel's dynamic shared-memory limit set so far
  if (bytes > allowed) allow_smem(tile_cpasync_kernel<kK1, R>, bytes), allowed = bytes;
  const dim3 grid(gpu::ceil_div(rows, TileCp<kK1, R>::kRows), gpu::ceil_div(out, kTcOuts));
  tile_cpasync_kernel<kK1, R><<<grid, 256, bytes, s>>>(y, x, first, values, w, c, rows, in, out, nb);
  FH_CHECK_LAUNCH();
}

// The shipped rule: 64-row tiles when they give at least one block per SM, else 32-row tiles.
void tile_cpasync(float* y, const float* x, const std::int32_t* first, const float* values, const float* w,
                  const float* c, int rows, int in, int out, int nb, cudaStream_t s) {
  if (static_cast<std::int64_t>(gpu::ceil_div(rows, 64)) * gpu::ceil_div(out, kTcOuts) >= gpu::sm_count())
    launch_tile_cpasync<4>(y, x, first, values, w, c, rows, in, out, nb, s);
  else
    launch_tile_cpasync<2>(y, x, first, values, w, c, rows, in, out, nb, s);
}

// ---- packed parameters: the rowlane shared-memory layout, laid out once in global memory ---------
// pc[((t in_pad + i) nb + j) kPackOS + oo] = c[t kPackOB + oo, i, j] and
// pw[(t in_pad + i) kPackOS + oo] = W[t kPackOB + oo, i] for output tile t, zeros past in and out
// and in the 4 padding columns; in_pad = in rounded up to kPackIn. A chunk of inputs of one output
// tile is then one contiguous block that 16-byte cp.async copies verbatim (no index arithmetic,
// no bounds checks, 4x fewer copies). The packing runs once per parameter change (an optimizer
// step, or a policy update for acting), not per forward; it is timed on its own.
constexpr int kPackOB = 64, kPackOS = kPackOB + 4, kPackIn = 16;
__host__ __device__ inline int pad_in(int in) { return (in + kPackIn - 1) / kPackIn * kPackIn; }
__host__ __device__ inline int out_tiles(int out) { return (out + kPackOB - 1) / kPackOB; }

__global__ void pack_kernel(float* __restrict__ pc, float* __restrict__ pw, const float* __restrict__ w,
                            const float* __restrict__ c, int in, int out, int nb) {
  const int in_pad = pad_in(in);
  const std::int64_t nc = static_cast<std::int64_t>(out_tiles(out)) * in_pad * nb * kPackOS;
  const std::int64_t nw = static_cast<std::int64_t>(out_tiles(out)) * in_pad * kPackOS;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < nc + nw;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const bool is_c = e < nc;
    const std::int64_t f = is_c ? e : e - nc;
    const int oo = static_cast<int>(f % kPackOS);
    std::int64_t rest = f / kPackOS;
    int j = 0;
    if (is_c) j = static_cast<int>(rest % nb), rest /= nb;
    const int i = static_cast<int>(rest % in_pad), t = static_cast<int>(rest / in_pad);
    const int o = t * kPackOB + oo;
    const bool ok = oo < kPackOB && o < out && i < in;
    if (is_c)
      pc[f] = ok ? c[(static_cast<std::int64_t>(o) * in + i) * nb + j] : 0.f;
    else
      pw[f] = ok ? w[static_cast<std::int64_t>(o) * in + i] : 0.f;
  }
}

// ---- rowlane: one lane per row, warp-private outputs, 8 inputs per barrier -----------------------
// A block: W warps over the same 32R rows (row lane + 32 r of its tile, r < R); warp wp owns the
// outputs ob + wp U .. + U of the tile. Inputs in chunks of kIc, double-buffered in shared memory:
//   cs [kIc][nb][kOS]  coefficients, kOS = W U + 4 (distinct bases in distinct bank quads)
//   ws [kIc][kOS]      base weights
//   ss [kIc][32R]      silu(x)
//   vs [kIc][K1][32R]  basis values
//   fs [kIc][32R]      first basis
// Coefficients, base weights (and, split, the library's bases) arrive by cp.async issued one chunk
// ahead; x goes through registers and is turned into silu (and, fused, the bases) after the
// current chunk's compute, into the other buffer.
template <int K1, int R, int U, int W, int kIc, bool kFused, bool kPacked = false>
struct RowLane {
  static constexpr int kRows = 32 * R, kOB = W * U, kOS = kOB + 4, kT = 32 * W;
  static constexpr int kStage = kIc * kRows;  // (row, input) pairs per chunk
  static constexpr int kXPer = (kStage + kT - 1) / kT;
  static_assert(U % 4 == 0, "U: float4 groups of outputs");
  static_assert(!kPacked || (kOB == kPackOB && kPackIn % kIc == 0), "kPacked: the packed tile and input padding");
  __host__ __device__ static int buffer_floats(int nb) { return kIc * (nb + 1) * kOS + kIc * (K1 + 2) * kRows; }
  static std::size_t smem_bytes(int nb) { return 2 * sizeof(float) * static_cast<std::size_t>(buffer_floats(nb)); }

  struct Buf {
    float *cs, *ws, *ss, *vs;
    std::int32_t* fs;
  };
  __device__ static Buf buf(float* smem, int nb, int which) {
    Buf b;
    b.cs = smem + which * buffer_floats(nb);
    b.ws = b.cs + kIc * nb * kOS;
    b.ss = b.ws + kIc * kOS;
    b.vs = b.ss + kIc * kRows;
    b.fs = reinterpret_cast<std::int32_t*>(b.vs + kIc * K1 * kRows);
    return b;
  }

  __device__ static void stage_async(const Buf& b, int i0, int ob, int rb, int rows_valid, const std::int32_t* first,
                                     const float* values, const float* w, const float* c, int in, int out, int nb) {
    if constexpr (kPacked) {  // c and w are pc and pw: the chunk is contiguous, in the buffers' layout
      const std::int64_t row0 = static_cast<std::int64_t>(ob / kOB) * pad_in(in) + i0;
      const float* cs = c + row0 * nb * kOS;
      for (int e = threadIdx.x; e < kIc * nb * kOS / 4; e += kT) cp_async16(b.cs + 4 * e, cs + 4 * e);
      const float* ws = w + row0 * kOS;
      for (int e = threadIdx.x; e < kIc * kOS / 4; e += kT) cp_async16(b.ws + 4 * e, ws + 4 * e);
    } else {
      stage_coefficients<kT>(b.cs, kOS, c, ob, kOB, i0, kIc, in, out, nb);
      for (int e = threadIdx.x; e < kIc * kOB; e += kT) {
        const int ii = e % kIc, oo = e / kIc;
        const int o = ob + oo, i = i0 + ii;
        const bool ok = o < out && i < in;
        cp_async4(b.ws + ii * kOS + oo, ok ? w + static_cast<std::int64_t>(o) * in + i : w, ok);
      }
    }
    if constexpr (!kFused) {
      for (int e = threadIdx.x; e < kStage; e += kT) {
        const int rr = e % kRows, ii = e / kRows, i = i0 + ii;
        const bool ok = rr < rows_valid && i < in;
        const std::int64_t at = static_cast<std::int64_t>(rb + rr) * in + i;
        cp_async4(b.fs + ii * kRows + rr, ok ? first + at : first, ok);
#pragma unroll
        for (int q = 0; q < K1; ++q) cp_async4(b.vs + (ii * K1 + q) * kRows + rr, ok ? values + at * K1 + q : values, ok);
      }
    }
  }

  // x (the tile's first row, row stride ldx; global or shared) of chunk i0 into registers.
  __device__ static void load_x(float (&xr)[kXPer], int i0, const float* x, int ldx, int in, int rows_valid) {
#pragma unroll
    for (int k = 0; k < kXPer; ++k) {
      const int e = threadIdx.x + k * kT;
      const int rr = e % kRows, i = i0 + e / kRows;
      xr[k] = (e < kStage && rr < rows_valid && i < in) ? x[static_cast<std::int64_t>(rr) * ldx + i] : 0.f;
    }
  }

  // silu(x) and (fused) the bases of chunk i0 into buffer b; zeros for rows and inputs past the end.
  __device__ static void store_x(const Buf& b, const float (&xr)[kXPer], int i0, const float* grid, int in, int nk,
                                 int rows_valid) {
#pragma unroll
    for (int k = 0; k < kXPer; ++k) {
      const int e = threadIdx.x + k * kT;
      if (e >= kStage) continue;
      const int rr = e % kRows, ii = e / kRows, i = i0 + ii;
      const bool ok = rr < rows_valid && i < in;
      b.ss[ii * kRows + rr] = ok ? silu(xr[k]) : 0.f;
      if constexpr (kFused) {
        float v[K1], dv[K1];
        std::int32_t f = 0;
        if (ok) {
          models::kan::bspline_local<K1 - 1, float>(xr[k], grid + static_cast<std::int64_t>(i) * nk, nk, &f, v, dv);
        } else {
#pragma unroll
          for (int q = 0; q < K1; ++q) v[q] = 0.f;
        }
        b.fs[ii * kRows + rr] = f;
#pragma unroll
        for (int q = 0; q < K1; ++q) b.vs[(ii * K1 + q) * kRows + rr] = v[q];
      }
    }
  }

  __device__ static void compute(const Buf& b, int nb, float (&acc)[R][U]) {
    const int lane = threadIdx.x % 32, wp = threadIdx.x / 32;
#pragma unroll 2
    for (int ii = 0; ii < kIc; ++ii) {
      float4 wv[U / 4];
#pragma unroll
      for (int u4 = 0; u4 < U / 4; ++u4) wv[u4] = *reinterpret_cast<const float4*>(b.ws + ii * kOS + wp * U + 4 * u4);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int rr = lane + 32 * r;
        const float s = b.ss[ii * kRows + rr];
        const float* crow = b.cs + (ii * nb + b.fs[ii * kRows + rr]) * kOS + wp * U;
        float v[K1];
#pragma unroll
        for (int q = 0; q < K1; ++q) v[q] = b.vs[(ii * K1 + q) * kRows + rr];
#pragma unroll
        for (int u4 = 0; u4 < U / 4; ++u4) {
          float a0 = s * wv[u4].x, a1 = s * wv[u4].y, a2 = s * wv[u4].z, a3 = s * wv[u4].w;
#pragma unroll
          for (int q = 0; q < K1; ++q) {
            const float4 cv = *reinterpret_cast<const float4*>(crow + q * kOS + 4 * u4);
            a0 = fmaf(v[q], cv.x, a0);
            a1 = fmaf(v[q], cv.y, a1);
            a2 = fmaf(v[q], cv.z, a2);
            a3 = fmaf(v[q], cv.w, a3);
          }
          acc[r][4 * u4 + 0] += a0;
          acc[r][4 * u4 + 1] += a1;
          acc[r][4 * u4 + 2] += a2;
          acc[r][4 * u4 + 3] += a3;
        }
      }
    }
  }

  // Outputs [ob, ob + kOB) of the block's rows [rb, rb + rows_valid): y and x point at the tile's
  // first row (strides ldy, ldx; global or shared memory); first/values (split) are indexed by
  // the global row rb + rr. Starts with a barrier: the block may have used the buffers, or
  // written x, just before.
  __device__ static void tile(float* y, int ldy, const float* x, int ldx, const std::int32_t* first,
                              const float* values, const float* grid, const float* w, const float* c, int rb,
                              int rows_valid, int in, int out, int nb, int nk, int ob, float* smem) {
    __syncthreads();
    const int chunks = (in + kIc - 1) / kIc;
    float acc[R][U] = {};
    float xr[kXPer];
    {
      const Buf b = buf(smem, nb, 0);
      stage_async(b, 0, ob, rb, rows_valid, first, values, w, c, in, out, nb);
      cp_async_commit();
      load_x(xr, 0, x, ldx, in, rows_valid);
      store_x(b, xr, 0, grid, in, nk, rows_valid);
    }
    for (int n = 0; n < chunks; ++n) {
      cp_async_wait_all();
      __syncthreads();  // chunk n is in buffer n % 2; every read of the other buffer (chunk n - 1) is done
      const Buf cur = buf(smem, nb, n & 1), nxt = buf(smem, nb, (n + 1) & 1);
      const bool more = n + 1 < chunks;
      if (more) {
        stage_async(nxt, (n + 1) * kIc, ob, rb, rows_valid, first, values, w, c, in, out, nb);
        cp_async_commit();
        load_x(xr, (n + 1) * kIc, x, ldx, in, rows_valid);
      }
      compute(cur, nb, acc);
      if (more) store_x(nxt, xr, (n + 1) * kIc, grid, in, nk, rows_valid);
    }
    const int lane = threadIdx.x % 32, wp = threadIdx.x / 32;
    const bool vec = ldy % 4 == 0 && (reinterpret_cast<std::uintptr_t>(y) & 15) == 0;  // float4 stores
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int rr = lane + 32 * r;
      if (rr >= rows_valid) continue;
      float* yr = y + static_cast<std::int64_t>(rr) * ldy;
#pragma unroll
      for (int u4 = 0; u4 < U / 4; ++u4) {
        const int o = ob + wp * U + 4 * u4;  // a multiple of 4
        if (vec && o + 3 < out) {
          *reinterpret_cast<float4*>(yr + o) = make_float4(acc[r][4 * u4], acc[r][4 * u4 + 1], acc[r][4 * u4 + 2],
                                                           acc[r][4 * u4 + 3]);
        } else {
#pragma unroll
          for (int t = 0; t < 4; ++t)
            if (o + t < out) yr[o + t] = acc[r][4 * u4 + t];
        }
      }
    }
  }
};

constexpr int kChunk = 8;  // inputs per barrier in the rowlane kernels

template <int K1, int R, int U, int W, int kIc, bool kFused, bool kPacked>
__global__ void __launch_bounds__(W * 32, 1) rowlane_kernel(float* __restrict__ y, const float* __restrict__ x,
                                                         const std::int32_t* __restrict__ first,
                                                         const float* __restrict__ values,
                                                         const float* __restrict__ grid, const float* __restrict__ w,
                                                         const float* __restrict__ c, int rows, int in, int out,
                                                         int nb, int nk) {
  using T = RowLane<K1, R, U, W, kIc, kFused, kPacked>;
  extern __shared__ float4 smem4[];
  const int rb = blockIdx.x * T::kRows, ob = blockIdx.y * T::kOB;
  T::tile(y + static_cast<std::int64_t>(rb) * out, out, x + static_cast<std::int64_t>(rb) * in, in, first, values, grid,
          w, c, rb, min(T::kRows, rows - rb), in, out, nb, nk, ob, reinterpret_cast<float*>(smem4));
}

// w and c: the layer's, or (kPacked) pw and pc.
template <int R, int U, int W, bool kFused, int kIc = kChunk, bool kPacked = false>
void rowlane(float* y, const float* x, const std::int32_t* first, const float* values, const float* grid,
             const float* w, const float* c, int rows, int in, int out, int nb, int nk, cudaStream_t s) {
  using T = RowLane<kK1, R, U, W, kIc, kFused, kPacked>;
  const std::size_t bytes = T::smem_bytes(nb);
  static std::size_t allowed = 0;
  if (bytes > allowed) allow_smem(rowlane_kernel<kK1, R, U, W, kIc, kFused, kPacked>, bytes), allowed = bytes;
  const dim3 grid_dim(gpu::ceil_div(rows, T::kRows), gpu::ceil_div(out, T::kOB));
  rowlane_kernel<kK1, R, U, W, kIc, kFused, kPacked>
      <<<grid_dim, W * 32, bytes, s>>>(y, x, first, values, grid, w, c, rows, in, out, nb, nk);
  FH_CHECK_LAUNCH();
}

// ---- net2: both layers in one launch ------------------------------------------------------------
template <int K1, int U, int W, bool kPacked>
__global__ void __launch_bounds__(W * 32, 1) net2_kernel(float* __restrict__ y, const float* __restrict__ x,
                                                      const float* __restrict__ g1, const float* __restrict__ w1,
                                                      const float* __restrict__ c1, const float* __restrict__ g2,
                                                      const float* __restrict__ w2, const float* __restrict__ c2,
                                                      int rows, int in, int hidden, int out, int nb, int nk) {
  using T = RowLane<K1, 1, U, W, kChunk, true, kPacked>;
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  float* h = smem + 2 * T::buffer_floats(nb);  // (32, hidden): the tile's hidden activations
  const int rb = blockIdx.x * T::kRows, rv = min(T::kRows, rows - rb);
  for (int ob = 0; ob < hidden; ob += T::kOB)
    T::tile(h, hidden, x + static_cast<std::int64_t>(rb) * in, in, nullptr, nullptr, g1, w1, c1, rb, rv, in, hidden,
            nb, nk, ob, smem);
  for (int ob = 0; ob < out; ob += T::kOB)  // each tile's first barrier orders the h writes before its reads
    T::tile(y + static_cast<std::int64_t>(rb) * out, out, h, hidden, nullptr, nullptr, g2, w2, c2, rb, rv, hidden,
            out, nb, nk, ob, smem);
}

// w1, c1, w2, c2: the layers', or (kPacked) their pw and pc.
template <int U, int W, bool kPacked = false>
void net2(float* y, const float* x, const float* g1, const float* w1, const float* c1, const float* g2,
          const float* w2, const float* c2, int rows, int in, int hidden, int out, int nb, int nk, cudaStream_t s) {
  using T = RowLane<kK1, 1, U, W, kChunk, true, kPacked>;
  const std::size_t bytes = T::smem_bytes(nb) + sizeof(float) * static_cast<std::size_t>(T::kRows) * hidden;
  FH_EXPECT(bytes <= 227 * 1024, "net2: hidden " + std::to_string(hidden) + " too wide for shared memory");
  static std::size_t allowed = 0;
  if (bytes > allowed) allow_smem(net2_kernel<kK1, U, W, kPacked>, bytes), allowed = bytes;
  net2_kernel<kK1, U, W, kPacked><<<gpu::ceil_div(rows, T::kRows), W * 32, bytes, s>>>(y, x, g1, w1, c1, g2, w2, c2,
                                                                                       rows, in, hidden, out, nb, nk);
  FH_CHECK_LAUNCH();
}

// ---- the host side: layers, variants, the float64 reference -------------------------------------
struct Layer {
  Layer(int in, int out, float grid_min, float grid_max) {
    models::KanLayerSpec s;
    s.name = "kan";
    s.in = in;
    s.out = out;
    s.grid = kGrid;
    s.order = kOrder;
    s.grid_min = grid_min;
    s.grid_max = grid_max;
    layer = std::make_unique<models::KanLayer>(s);
  }
  std::unique_ptr<models::KanLayer> layer;
  gpu::ParameterArena arena;
  std::unique_ptr<models::OwnedWorkspace> ws;
  gpu::DeviceBuffer<std::int32_t> first;  // the split variants' bases
  gpu::DeviceBuffer<float> values;
  gpu::DeviceBuffer<float> pc, pw;  // the packed parameters (pack_kernel)
  int in = 0, out = 0, nb = 0, nk = 0;
  const float *w = nullptr, *c = nullptr, *grid = nullptr;
  std::vector<double> hw, hc, hgrid;  // host copies for the reference

  void setup(int max_rows, std::mt19937_64& rng, bool random, cudaStream_t s) {
    layer->declare(arena);
    arena.finalize(s);
    layer->init(arena, rng, s);
    layer->bind(arena);
    in = static_cast<int>(layer->spec().in);
    out = static_cast<int>(layer->spec().out);
    nb = static_cast<int>(layer->bases());
    nk = static_cast<int>(layer->knots());
    if (random) {  // weights and coefficients U(-1, 1)/sqrt(in), knots with gaps U(0.1, 0.6) from -1.5
      const float sc = 1.f / std::sqrt(static_cast<float>(in));
      std::uniform_real_distribution<float> u(-sc, sc), gap(0.1f, 0.6f);
      std::vector<float> wv(static_cast<std::size_t>(out) * in), cv(static_cast<std::size_t>(out) * in * nb),
          gv(static_cast<std::size_t>(in) * nk);
      for (auto& v : wv) v = u(rng);
      for (auto& v : cv) v = u(rng);
      for (int i = 0; i < in; ++i) {
        float t = -1.5f;
        for (int m = 0; m < nk; ++m) gv[static_cast<std::size_t>(i) * nk + m] = t += gap(rng);
      }
      arena.upload_param("kan.base_weight", wv, s);
      arena.upload_param("kan.spline_weight", cv, s);
      arena.upload_state("kan.grid", gv, s);
    }
    w = arena.param("kan.base_weight").as<float>();
    c = arena.param("kan.spline_weight").as<float>();
    grid = layer->grid();
    ws = std::make_unique<models::OwnedWorkspace>(*layer, max_rows);
    pc = gpu::DeviceBuffer<float>(static_cast<std::size_t>(out_tiles(out)) * pad_in(in) * nb * kPackOS);
    pw = gpu::DeviceBuffer<float>(static_cast<std::size_t>(out_tiles(out)) * pad_in(in) * kPackOS);
    pack(s);
    first = gpu::DeviceBuffer<std::int32_t>(static_cast<std::size_t>(max_rows) * in);
    values = gpu::DeviceBuffer<float>(static_cast<std::size_t>(max_rows) * in * kK1);
    FH_CHECK(cudaStreamSynchronize(s));
    auto down = [&](const float* p, std::size_t n) {
      std::vector<float> v(n);
      FH_CHECK(cudaMemcpy(v.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost));
      return std::vector<double>(v.begin(), v.end());
    };
    hw = down(w, static_cast<std::size_t>(out) * in);
    hc = down(c, static_cast<std::size_t>(out) * in * nb);
    hgrid = down(grid, static_cast<std::size_t>(in) * nk);
  }
  void pack(cudaStream_t s) {
    pack_kernel<<<gpu::grid_stride_blocks(static_cast<std::int64_t>(pc.size() + pw.size())), 256, 0, s>>>(
        pc.data(), pw.data(), w, c, in, out, nb);
    FH_CHECK_LAUNCH();
  }
  void shipped(float* y, const float* x, int rows, cudaStream_t s) {
    gpu::BlasLane lane;
    lane.stream = s;
    layer->forward(y, x, rows, true, ws->view, lane);
  }
  void bases(const float* x, int rows, cudaStream_t s) {
    layer->compute_bases(first.data(), values.data(), nullptr, x, rows, s);
  }
};

// All bases of order k over knots t at x (0 outside [t_0, t_last)), the dense recursion.
void dense_bases(double x, const double* t, int n_knots, int k, std::vector<double>& out) {
  std::vector<double> cur(static_cast<std::size_t>(n_knots - 1)), prev;
  for (int j = 0; j < n_knots - 1; ++j) cur[j] = (x >= t[j] && x < t[j + 1]) ? 1.0 : 0.0;
  for (int p = 1; p <= k; ++p) {
    prev = cur;
    cur.assign(static_cast<std::size_t>(n_knots - 1 - p), 0.0);
    for (int j = 0; j < n_knots - 1 - p; ++j)
      cur[j] = (x - t[j]) / (t[j + p] - t[j]) * prev[j] + (t[j + p + 1] - x) / (t[j + p + 1] - t[j + 1]) * prev[j + 1];
  }
  out = cur;
}

double silu_d(double x) { return x / (1.0 + std::exp(-x)); }

// The float64 layer on x (rows, in): y and S (the sum of the absolute terms) per output.
void reference(const Layer& l, const std::vector<float>& x, int rows, std::vector<double>& y, std::vector<double>& S) {
  y.assign(static_cast<std::size_t>(rows) * l.out, 0.0);
  S.assign(y.size(), 0.0);
  std::vector<double> B(static_cast<std::size_t>(l.in) * l.nb), b, sv(static_cast<std::size_t>(l.in));
  for (int r = 0; r < rows; ++r) {
    for (int i = 0; i < l.in; ++i) {
      const double xi = x[static_cast<std::size_t>(r) * l.in + i];
      sv[i] = std::isnan(xi) ? xi : silu_d(xi);
      dense_bases(xi, l.hgrid.data() + static_cast<std::size_t>(i) * l.nk, l.nk, kOrder, b);
      std::copy(b.begin(), b.end(), B.begin() + static_cast<std::ptrdiff_t>(i) * l.nb);
    }
    for (int o = 0; o < l.out; ++o) {
      double acc = 0.0, abs = 0.0;
      for (int i = 0; i < l.in; ++i) {
        const std::size_t oi = static_cast<std::size_t>(o) * l.in + i;
        const double t = sv[i] * l.hw[oi];
        acc += t;
        abs += std::abs(t);
        const double* cc = l.hc.data() + oi * l.nb;
        const double* bb = B.data() + static_cast<std::size_t>(i) * l.nb;
        for (int j = 0; j < l.nb; ++j) {
          acc += cc[j] * bb[j];
          abs += std::abs(cc[j] * bb[j]);
        }
      }
      y[static_cast<std::size_t>(r) * l.out + o] = acc;
      S[static_cast<std::size_t>(r) * l.out + o] = abs;
    }
  }
}

constexpr std::size_t kGuard = 1024;  // poisoned floats past every output

// y (rows * out + kGuard floats on the device) against the reference and, when `bits` is given,
// bit for bit against it. Prints the first problem; returns whether all is well.
bool verify(const std::string& what, const float* y_dev, std::size_t n, const std::vector<double>& ref,
            const std::vector<double>& S, int in, const std::vector<float>* bits) {
  const double rtol = std::max(1e-5, 2.0 * (in + 32) * std::ldexp(1.0, -24));
  std::vector<float> y(n + kGuard);
  FH_CHECK(cudaDeviceSynchronize());
  FH_CHECK(cudaMemcpy(y.data(), y_dev, y.size() * sizeof(float), cudaMemcpyDeviceToHost));
  for (std::size_t e = 0; e < n; ++e) {
    const double err = std::abs(static_cast<double>(y[e]) - ref[e]);
    if (!(err <= rtol * S[e] + 1e-6)) {
      std::printf("FAIL %s: element %zu got %.9g want %.9g (|err| %.3g, S %.3g)\n", what.c_str(), e, y[e], ref[e], err,
                  S[e]);
      return false;
    }
  }
  for (std::size_t e = n; e < y.size(); ++e) {
    std::uint32_t u;
    std::memcpy(&u, &y[e], 4);
    if (u != 0xFFFFFFFFu) {
      std::printf("FAIL %s: wrote past the end (float %zu after the output)\n", what.c_str(), e - n);
      return false;
    }
  }
  if (bits != nullptr && std::memcmp(y.data(), bits->data(), n * sizeof(float)) != 0) {
    std::size_t e = 0;
    while (std::memcmp(&y[e], &(*bits)[e], 4) == 0) ++e;
    std::printf("FAIL %s: not bitwise equal to shipped (element %zu: %.9g vs %.9g)\n", what.c_str(), e, y[e],
                (*bits)[e]);
    return false;
  }
  return true;
}

using LayerFn = std::function<void(Layer&, float* y, const float* x, int rows, cudaStream_t)>;
using NetFn = std::function<void(Layer&, Layer&, float* y, const float* x, int rows, cudaStream_t)>;

struct LayerVariant {
  std::string name;
  LayerFn run;
};
struct NetVariant {
  std::string name;
  NetFn run;
};

std::vector<LayerVariant> layer_variants() {
  std::vector<LayerVariant> v;
  v.push_back({"shipped", [](Layer& l, float* y, const float* x, int rows, cudaStream_t s) { l.shipped(y, x, rows, s); }});
  v.push_back({"tile_cpasync", [](Layer& l, float* y, const float* x, int rows, cudaStream_t s) {
                 l.bases(x, rows, s);
                 tile_cpasync(y, x, l.first.data(), l.values.data(), l.w, l.c, rows, l.in, l.out, l.nb, s);
               }});
  auto split = [](auto fn) {
    return [fn](Layer& l, float* y, const float* x, int rows, cudaStream_t s) {
      l.bases(x, rows, s);
      fn(y, x, l.first.data(), l.values.data(), l.grid, l.w, l.c, rows, l.in, l.out, l.nb, l.nk, s);
    };
  };
  auto fused = [](auto fn) {
    return [fn](Layer& l, float* y, const float* x, int rows, cudaStream_t s) {
      fn(y, x, nullptr, nullptr, l.grid, l.w, l.c, rows, l.in, l.out, l.nb, l.nk, s);
    };
  };
  v.push_back({"rowlane_split_r1_u8_w8", split(rowlane<1, 8, 8, false>)});
  v.push_back({"rowlane_split_r2_u4_w4", split(rowlane<2, 4, 4, false>)});
  v.push_back({"rowlane_fused_r1_u8_w8", fused(rowlane<1, 8, 8, true>)});
  v.push_back({"rowlane_fused_r1_u4_w4", fused(rowlane<1, 4, 4, true>)});
  v.push_back({"rowlane_fused_r2_u4_w4", fused(rowlane<2, 4, 4, true>)});
  v.push_back({"rowlane_fused_r2_u8_w8", fused(rowlane<2, 8, 8, true>)});
  v.push_back({"rowlane_fused_r1_u8_w8_c16", fused(rowlane<1, 8, 8, true, 16>)});
  v.push_back({"rowlane_packed_r1_u8_w8", [](Layer& l, float* y, const float* x, int rows, cudaStream_t s) {
                 rowlane<1, 8, 8, true, kChunk, true>(y, x, nullptr, nullptr, l.grid, l.pw.data(), l.pc.data(), rows,
                                                      l.in, l.out, l.nb, l.nk, s);
               }});
  return v;
}

std::vector<NetVariant> net_variants() {
  std::vector<NetVariant> v;
  auto net = [](auto fn) {
    return [fn](Layer& a, Layer& b, float* y, const float* x, int rows, cudaStream_t s) {
      fn(y, x, a.grid, a.w, a.c, b.grid, b.w, b.c, rows, a.in, a.out, b.out, a.nb, a.nk, s);
    };
  };
  v.push_back({"net2_fused_u8_w8", net(net2<8, 8>)});
  v.push_back({"net2_fused_u4_w16", net(net2<4, 16>)});
  auto packed = [](auto fn) {
    return [fn](Layer& a, Layer& b, float* y, const float* x, int rows, cudaStream_t s) {
      fn(y, x, a.grid, a.pw.data(), a.pc.data(), b.grid, b.pw.data(), b.pc.data(), rows, a.in, a.out, b.out, a.nb,
         a.nk, s);
    };
  };
  v.push_back({"net2_packed_u8_w8", packed(net2<8, 8, true>)});
  v.push_back({"net2_packed_u4_w16", packed(net2<4, 16, true>)});
  return v;
}

void poison(float* p, std::size_t n, cudaStream_t s) { FH_CHECK(cudaMemsetAsync(p, 0xFF, n * sizeof(float), s)); }

std::vector<float> download(const float* p, std::size_t n) {
  std::vector<float> v(n);
  FH_CHECK(cudaDeviceSynchronize());
  FH_CHECK(cudaMemcpy(v.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost));
  return v;
}

// Every check at one network shape and row count; returns the number of failing variants.
int check(int in, int hidden, int rows, std::mt19937_64& rng, cudaStream_t s, std::vector<int>& failed_layer,
          std::vector<int>& failed_net) {
  const auto lv = layer_variants();
  const auto nv = net_variants();
  Layer l1(in, hidden, -1.f, 1.f), l2(hidden, hidden, -1.f, 1.f);
  l1.setup(rows, rng, true, s);
  l2.setup(rows, rng, true, s);
  std::uniform_real_distribution<float> ux(-3.f, 6.f);
  std::vector<float> xh(static_cast<std::size_t>(rows) * in);
  for (auto& v : xh) v = ux(rng);
  gpu::DeviceBuffer<float> x(xh.size());
  FH_CHECK(cudaMemcpy(x.data(), xh.data(), xh.size() * sizeof(float), cudaMemcpyHostToDevice));
  const std::size_t nh = static_cast<std::size_t>(rows) * hidden;
  gpu::DeviceBuffer<float> h(nh + kGuard), y(nh + kGuard), out(nh + kGuard);
  const std::string shape =
      "in " + std::to_string(in) + " hidden " + std::to_string(hidden) + " rows " + std::to_string(rows);
  int failures = 0;
  // The shipped network: h = layer 1 (x), y = layer 2 (h), each against float64.
  poison(h.data(), h.size(), s);
  poison(y.data(), y.size(), s);
  lv[0].run(l1, h.data(), x.data(), rows, s);
  lv[0].run(l2, y.data(), h.data(), rows, s);
  const std::vector<float> h_bits = download(h.data(), nh), y_bits = download(y.data(), nh);
  std::vector<double> r1, s1, r2, s2;
  reference(l1, xh, rows, r1, s1);
  reference(l2, h_bits, rows, r2, s2);
  for (std::size_t v = 0; v < lv.size(); ++v) {
    const bool bitwise = v > 0;
    bool ok = true;
    poison(out.data(), out.size(), s);
    lv[v].run(l1, out.data(), x.data(), rows, s);
    ok &= verify(lv[v].name + " layer 1, " + shape, out.data(), nh, r1, s1, in, bitwise ? &h_bits : nullptr);
    poison(out.data(), out.size(), s);
    lv[v].run(l2, out.data(), h.data(), rows, s);
    ok &= verify(lv[v].name + " layer 2, " + shape, out.data(), nh, r2, s2, hidden, bitwise ? &y_bits : nullptr);
    if (!ok) ++failures, ++failed_layer[v];
  }
  for (std::size_t v = 0; v < nv.size(); ++v) {
    poison(out.data(), out.size(), s);
    nv[v].run(l1, l2, out.data(), x.data(), rows, s);
    if (!verify(nv[v].name + ", " + shape, out.data(), nh, r2, s2, hidden, &y_bits)) ++failures, ++failed_net[v];
  }
  return failures;
}

struct Timing {
  double l1_us = 0, l2_us = 0, net_us = 0;
};
struct PackTiming {
  double l1_us = 0, l2_us = 0;
};

// Medians of 50 launches at the bench's sizes (uniform knots on [-4, 4], the library's init,
// x ~ N(0, 1)).
void time_all(int hidden, int rows, std::mt19937_64& rng, cudaStream_t s, std::vector<Timing>& lt,
              std::vector<Timing>& nt, PackTiming& pt) {
  const int in = 16;
  const auto lv = layer_variants();
  const auto nv = net_variants();
  Layer l1(in, hidden, -4.f, 4.f), l2(hidden, hidden, -4.f, 4.f);
  l1.setup(rows, rng, false, s);
  l2.setup(rows, rng, false, s);
  std::normal_distribution<float> n01;
  std::vector<float> xh(static_cast<std::size_t>(rows) * in);
  for (auto& v : xh) v = n01(rng);
  gpu::DeviceBuffer<float> x(xh.size()), h(static_cast<std::size_t>(rows) * hidden),
      y(static_cast<std::size_t>(rows) * hidden);
  FH_CHECK(cudaMemcpy(x.data(), xh.data(), xh.size() * sizeof(float), cudaMemcpyHostToDevice));
  lv[0].run(l1, h.data(), x.data(), rows, s);  // a realistic hidden input for layer 2's timing
  constexpr int kWarm = 5, kReps = 50;
  pt.l1_us = 1e3 * bench::median_stream_ms([&](int) { l1.pack(s); }, s, kWarm, kReps);
  pt.l2_us = 1e3 * bench::median_stream_ms([&](int) { l2.pack(s); }, s, kWarm, kReps);
  lt.assign(lv.size(), Timing{});
  nt.assign(nv.size(), Timing{});
  for (std::size_t v = 0; v < lv.size(); ++v) {
    auto& f = lv[v].run;
    lt[v].l1_us = 1e3 * bench::median_stream_ms([&](int) { f(l1, y.data(), x.data(), rows, s); }, s, kWarm, kReps);
    lt[v].l2_us = 1e3 * bench::median_stream_ms([&](int) { f(l2, y.data(), h.data(), rows, s); }, s, kWarm, kReps);
    lt[v].net_us = 1e3 * bench::median_stream_ms(
                             [&](int) {
                               f(l1, h.data(), x.data(), rows, s);
                               f(l2, y.data(), h.data(), rows, s);
                             },
                             s, kWarm, kReps);
  }
  for (std::size_t v = 0; v < nv.size(); ++v) {
    auto& f = nv[v].run;
    nt[v].net_us =
        1e3 * bench::median_stream_ms([&](int) { f(l1, l2, y.data(), x.data(), rows, s); }, s, kWarm, kReps);
  }
}

}  // namespace
}  // namespace foxhunt::dev

int main() {
  using namespace foxhunt;
  using namespace foxhunt::dev;
  std::string why;
  if (gpu::device_count(&why) == 0) {
    std::printf("no CUDA device: %s\n", why.c_str());
    return 1;
  }
  FH_CHECK(cudaSetDevice(0));
  gpu::Stream stream;
  const cudaStream_t s = stream.get();
  std::random_device rd;
  const std::uint64_t seed = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  std::mt19937_64 rng(seed);
  std::printf("KAN layer forward variants, order %d, grid %d; seed %llu; %d SMs\n", kOrder, kGrid,
              static_cast<unsigned long long>(seed), gpu::sm_count());

  const auto lv = layer_variants();
  const auto nv = net_variants();
  std::vector<int> failed_layer(lv.size(), 0), failed_net(nv.size(), 0);
  int failures = 0;
  struct Shape {
    int in, hidden;
  };
  for (const Shape sh : {Shape{16, 64}, Shape{16, 256}, Shape{17, 17}})
    for (const int rows : {4096, 4097, 1, 37}) failures += check(sh.in, sh.hidden, rows, rng, s, failed_layer, failed_net);
  std::printf("checks: %s (%d failing variant x shape pairs)\n", failures == 0 ? "all passed" : "FAILURES", failures);

  const int rows = 4096;
  const std::string best_name = [&] {
    std::string best;
    double best_us = 1e30;
    for (const int hidden : {64, 256}) {
      std::vector<Timing> lt, nt;
      PackTiming pt;
      time_all(hidden, rows, rng, s, lt, nt, pt);
      const int nb = kGrid + kOrder;
      const double flop = 2.0 * (kK1 + 1) * rows * (16.0 * hidden + static_cast<double>(hidden) * hidden);
      const double bytes =
          4.0 * (rows * 16.0 + (16.0 * hidden + static_cast<double>(hidden) * hidden) * (nb + 1) + rows * hidden);
      std::printf("\n%d rows, 16 -> %d -> %d (step: %.1f MFLOP, %.2f MB compulsory)\n", rows, hidden, hidden,
                  flop * 1e-6, bytes * 1e-6);
      std::printf("%-26s %10s %10s %10s %10s %10s %s\n", "variant", "layer1 us", "layer2 us", "step us", "TFLOP/s",
                  "GB/s", "checks");
      auto row = [&](const std::string& name, const Timing& t, bool ok, bool layered) {
        char l1[16] = "-", l2[16] = "-";
        if (layered) std::snprintf(l1, sizeof l1, "%.2f", t.l1_us), std::snprintf(l2, sizeof l2, "%.2f", t.l2_us);
        std::printf("%-26s %10s %10s %10.2f %10.2f %10.1f %s\n", name.c_str(), l1, l2, t.net_us,
                    flop / (t.net_us * 1e-6) * 1e-12, bytes / (t.net_us * 1e-6) * 1e-9, ok ? "ok" : "FAILED");
        if (ok && hidden == 64 && t.net_us < best_us) best_us = t.net_us, best = name;
      };
      for (std::size_t v = 0; v < lv.size(); ++v) row(lv[v].name, lt[v], failed_layer[v] == 0, true);
      for (std::size_t v = 0; v < nv.size(); ++v) row(nv[v].name, nt[v], failed_net[v] == 0, false);
      std::printf("packing the parameters (the _packed variants; once per parameter change, not per step): "
                  "layer 1 %.2f us, layer 2 %.2f us\n",
                  pt.l1_us, pt.l2_us);
    }
    return best;
  }();
  std::printf("BEST %s\n", best_name.empty() ? "none (no variant passed)" : best_name.c_str());
  return failures == 0 ? 0 : 1;
}
