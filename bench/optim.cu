// Optimizer and linear-layer throughput.
//   (a) fused adam_step: bytes = 7 * 4 * n (read p, m, v, g; write p, m, v), against the
//       device-to-device copy bandwidth measured in this run. Target: >= 80% of copy at 1e8.
//   (b) linear_forward / linear_backward (cuBLASLt, f32, no TF32) against plain cublasSgemm
//       (CUBLAS_COMPUTE_32F default math, no TF32) on the same GEMMs in the same run:
//       forward = 1 GEMM (2 B in out flops), backward = 2 GEMMs (d_weight, d_in).
#include <cublas_v2.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "gpu/adam.hpp"
#include "gpu/buffer.hpp"
#include "gpu/context.hpp"
#include "gpu/device.hpp"
#include "gpu/launch.cuh"
#include "gpu/linear.hpp"

using namespace foxhunt;
using namespace foxhunt::gpu;

namespace {

// Non-zero pseudo-random values in [lo, hi) from a hash of the index (no host generation of 1e8).
__global__ void fill_uniform(float* out, std::int64_t n, std::uint32_t seed, float lo, float hi) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    std::uint32_t x = static_cast<std::uint32_t>(i) * 0x9E3779B9u ^ seed ^ static_cast<std::uint32_t>(i >> 32);
    x ^= x >> 16;
    x *= 0x7FEB352Du;
    x ^= x >> 15;
    x *= 0x846CA68Bu;
    x ^= x >> 16;
    const float u = (x >> 8) * (1.f / 16777216.f);
    float v = lo + (hi - lo) * u;
    if (v == 0.f) v = 1e-3f;
    out[i] = v;
  }
}

void fill(DeviceBuffer<float>& buf, std::uint32_t seed, float lo, float hi, cudaStream_t s) {
  const auto n = static_cast<std::int64_t>(buf.size());
  fill_uniform<<<grid_stride_blocks(n), kBlock, 0, s>>>(buf.data(), n, seed, lo, hi);
  FH_CHECK_LAUNCH();
}

void bench_adam(cudaStream_t s, double copy_gbs) {
  std::printf("\n(a) fused adam_step (AdamW, grad_scale and skip_flag in use)\n");
  bench::print_rule();
  std::printf("%-12s %12s %14s %12s %12s %10s\n", "op", "elements", "bytes", "median ms", "GB/s", "% copy");
  bench::print_rule();
  double last_pct = 0;
  for (std::int64_t n : {std::int64_t{10000}, std::int64_t{100000}, std::int64_t{1000000}, std::int64_t{10000000},
                         std::int64_t{100000000}}) {
    DeviceBuffer<float> p(n), m(n), v(n), g(n), scale(1);
    DeviceBuffer<std::uint32_t> skip(1);
    fill(p, 1, -1.f, 1.f, s);
    fill(m, 2, -0.1f, 0.1f, s);
    fill(v, 3, 1e-4f, 1e-2f, s);
    fill(g, 4, -1.f, 1.f, s);
    fill(scale, 5, 0.5f, 0.9f, s);
    skip.zero(s);
    AdamConfig c;
    c.weight_decay = 0.01f;
    std::int64_t step = 1;
    const double ms = bench::median_ms(
        [&](int) { adam_step(p.data(), m.data(), v.data(), g.data(), n, c, step++, scale.data(), skip.data(), s); }, s);
    const double bytes = 7.0 * 4.0 * static_cast<double>(n);
    const double gbs = bytes / (ms * 1e-3) / 1e9;
    last_pct = 100.0 * gbs / copy_gbs;
    std::printf("%-12s %12lld %14.0f %12.4f %12.1f %9.1f%%\n", "adam_step", static_cast<long long>(n), bytes, ms, gbs,
                last_pct);
  }
  bench::print_rule();
  std::printf("TARGET adam_step: %.1f%% of copy (target >= 80%%): %s\n", last_pct, last_pct >= 80.0 ? "PASS" : "FAIL");
}

struct LinearShape {
  std::int64_t batch, in, out;
};

void bench_linear(const DeviceContext& ctx) {
  const BlasLane lane = ctx.blas(0);
  const cudaStream_t s = lane.stream;
  cublasHandle_t handle = nullptr;
  FH_CHECK(cublasCreate(&handle));
  FH_CHECK(cublasSetStream(handle, s));
  FH_CHECK(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));  // f32 stays f32: no TF32

  std::printf("\n(b) linear layer (cuBLASLt, epilogue: bias + act) vs cublasSgemm on the same GEMMs\n");
  bench::print_rule(128);
  std::printf("%-22s %-8s | %9s %9s %9s %6s | %9s %9s %9s %6s\n", "B x in x out", "act", "fwd ms", "fwd TF/s",
              "sgemm TF/s", "ratio", "bwd ms", "bwd TF/s", "sgemm TF/s", "ratio");
  bench::print_rule(128);
  const float one = 1.f, zero = 0.f;
  for (LinearShape sh : {LinearShape{4096, 256, 256}, LinearShape{4096, 1024, 1024}, LinearShape{8192, 4096, 4096},
                         LinearShape{256, 64, 64}}) {
    const std::int64_t B = sh.batch, in = sh.in, out = sh.out;
    DeviceBuffer<float> x(B * in), w(out * in), b(out), y(B * out), d_out(B * out), d_in(B * in), d_w(out * in),
        d_b(out), scratch(B * out);
    fill(x, 11, -1.f, 1.f, s);
    fill(w, 12, -0.05f, 0.05f, s);
    fill(b, 13, -0.05f, 0.05f, s);
    fill(d_out, 14, -1.f, 1.f, s);
    const double fwd_flops = 2.0 * static_cast<double>(B) * in * out;
    const double bwd_flops = 2.0 * fwd_flops;

    const double sgemm_fwd = bench::median_ms(
        [&](int) {
          FH_CHECK(cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(out), static_cast<int>(B),
                               static_cast<int>(in), &one, w.data(), static_cast<int>(in), x.data(),
                               static_cast<int>(in), &zero, y.data(), static_cast<int>(out)));
        },
        s);
    const double sgemm_bwd = bench::median_ms(
        [&](int) {
          FH_CHECK(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_T, static_cast<int>(in), static_cast<int>(out),
                               static_cast<int>(B), &one, x.data(), static_cast<int>(in), d_out.data(),
                               static_cast<int>(out), &zero, d_w.data(), static_cast<int>(in)));
          FH_CHECK(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(in), static_cast<int>(B),
                               static_cast<int>(out), &one, w.data(), static_cast<int>(in), d_out.data(),
                               static_cast<int>(out), &zero, d_in.data(), static_cast<int>(in)));
        },
        s);
    for (Activation act : {Activation::identity, Activation::relu}) {
      DeviceBuffer<std::byte> aux(linear_aux_bytes(B, out, act));
      const double fwd = bench::median_ms(
          [&](int) { linear_forward(y.data(), aux.data(), x.data(), w.data(), b.data(), B, in, out, act, lane); }, s);
      const double bwd = bench::median_ms(
          [&](int) {
            linear_backward(d_in.data(), d_w.data(), d_b.data(), scratch.data(), d_out.data(), aux.data(), x.data(),
                            w.data(), B, in, out, act, false, lane);
          },
          s);
      const std::string name = std::to_string(B) + " x " + std::to_string(in) + " x " + std::to_string(out);
      const double f_tf = fwd_flops / (fwd * 1e-3) / 1e12, fs_tf = fwd_flops / (sgemm_fwd * 1e-3) / 1e12;
      const double b_tf = bwd_flops / (bwd * 1e-3) / 1e12, bs_tf = bwd_flops / (sgemm_bwd * 1e-3) / 1e12;
      std::printf("%-22s %-8s | %9.4f %9.2f %9.2f %6.2f | %9.4f %9.2f %9.2f %6.2f\n", name.c_str(),
                  std::string(activation_name(act)).c_str(), fwd, f_tf, fs_tf, f_tf / fs_tf, bwd, b_tf, bs_tf,
                  b_tf / bs_tf);
    }
  }
  bench::print_rule(128);
  std::printf(
      "ratio = ours / cublasSgemm TFLOP/s. Ours includes the fused bias (+ act) in the forward and the\n"
      "d_bias reduction (+ act') in the backward; sgemm does the bare GEMMs.\n");
  cublasDestroy(handle);
}

}  // namespace

int main() {
  std::string why;
  if (device_count(&why) == 0) {
    std::printf("foxhunt_bench_optim: no CUDA device (%s)\n", why.c_str());
    return 1;
  }
  DeviceContext ctx(0, 1);
  const auto info = list_devices().at(0);
  std::printf("device: %s, %d SMs\n", info.name.c_str(), info.sm_count);
  const double copy_gbs = bench::copy_bandwidth_gbs(std::size_t{1} << 30, ctx.stream(0));
  std::printf("device-to-device copy (1 GiB): %.1f GB/s (read + write)\n", copy_gbs);
  bench_adam(ctx.stream(0), copy_gbs);
  bench_linear(ctx);
  return 0;
}
