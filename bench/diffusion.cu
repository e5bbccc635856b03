// The diffusion family (models/diffusion, pretrain/diffusion_trainer) at trading sizes:
//   training: one DiffusionTrainer step (OU market windows generated on the device, noising,
//     denoiser forward and backward, clip, AdamW) as its CUDA graph: windows/s = batch / replay time;
//   sampling: DDIM with 20 steps (eta = 0) and ancestral DDPM with 20 steps of 4096 windows, the
//     whole call captured as one CUDA graph: milliseconds per call (issue 18's target: DDIM 20 steps
//     of 4096 windows <= 5 ms).
// Denoiser: hidden 128, 3 residual blocks (expand 2), embedding 64; T = 1000 linear steps; windows of
// 64 returns of 1 asset and of 32 returns of 4 assets (D = 64 and 128). No PyTorch baseline yet.
#include <cuda_runtime.h>

#include <cstdio>
#include <memory>
#include <string>

#include "actors/shipped_configs.hpp"
#include "bench_util.hpp"
#include "gpu/buffer.hpp"
#include "gpu/check.hpp"
#include "gpu/context.hpp"
#include "gpu/graph.hpp"
#include "pretrain/diffusion_trainer.hpp"
#include "pretrain/market_windows.hpp"
#include "rl/envs/market_config.hpp"

using namespace foxhunt;

namespace {

struct Size {
  const char* market;
  std::int64_t window;
};

void run(const Size& size, gpu::DeviceContext& ctx) {
  const cudaStream_t s = ctx.stream();
  const rl::MarketConfig market = rl::load_market_config(actors::shipped_configs_dir() / "markets" / size.market);
  constexpr std::int64_t kSample = 4096;
  for (const std::int64_t batch : {256, 1024}) {
    pretrain::DiffusionTrainerSpec spec;
    spec.denoiser.hidden = 128;
    spec.denoiser.blocks = 3;
    spec.denoiser.expand = 2;
    spec.denoiser.embed = 64;
    spec.schedule.steps = 1000;
    spec.schedule.kind = models::ScheduleKind::linear;
    spec.sampler = models::SamplerSpec{models::SamplerKind::ddim, 20, 0.0};
    spec.optim.steps = 1000000;
    spec.window = size.window;
    spec.batch = batch;
    spec.sample_batch = kSample;
    pretrain::WindowSpec ws;
    ws.window = size.window;
    ws.horizon = 1;
    ws.vol_horizon = 1;
    pretrain::MarketWindows windows(market, ws, std::max(batch, kSample));
    spec.assets = windows.assets();
    pretrain::GenerateFn source = [&windows](const pretrain::WindowBatch& out, std::int64_t b, std::uint64_t seed,
                                             const std::uint64_t* counter, cudaStream_t st) {
      windows.generate(out, b, seed, counter, st);
    };
    pretrain::DiffusionTrainer trainer(spec, source, ctx.blas());
    const double train_ms = bench::median_ms([&](int) { trainer.step(); }, s, 10, 50);
    std::printf("%-24s D %4lld  train batch %5lld  %8.3f ms/step  %10.0f windows/s\n", size.market,
                static_cast<long long>(trainer.dim()), static_cast<long long>(batch), train_ms,
                static_cast<double>(batch) / (train_ms * 1e-3));
    if (batch != 1024) continue;
    gpu::DeviceBuffer<float> out(static_cast<std::size_t>(kSample * trainer.dim()));
    gpu::DeviceBuffer<std::uint64_t> counter(1);
    counter.zero(s);
    for (const auto kind : {models::SamplerKind::ddim, models::SamplerKind::ddpm}) {
      models::DiffusionSampler sampler(trainer.schedule().host(), models::SamplerSpec{kind, 20, 0.0}, kSample,
                                       trainer.dim());
      const models::EpsilonFn eps = trainer.epsilon_fn(nullptr);
      gpu::CudaGraph g;
      g.capture(s, [&](cudaStream_t cs) { sampler.sample(out.data(), eps, kSample, 5, counter.data(), cs); });
      const double ms = bench::median_ms([&](int) { g.replay(s); }, s, 5, 25);
      std::printf("%-24s D %4lld  %s 20 steps x %lld windows  %8.3f ms/call%s\n", size.market,
                  static_cast<long long>(trainer.dim()), kind == models::SamplerKind::ddim ? "DDIM" : "DDPM",
                  static_cast<long long>(kSample), ms,
                  kind == models::SamplerKind::ddim ? (ms <= 5.0 ? "  (target <= 5 ms: met)" : "  (target <= 5 ms: MISSED)")
                                                    : "");
    }
  }
}

}  // namespace

int main() {
  FH_CHECK(cudaSetDevice(0));
  gpu::DeviceContext ctx(0, 1);
  bench::print_rule();
  for (const Size& size : {Size{"ou_mean_reversion.toml", 64}, Size{"ou4_continuous.toml", 32}}) run(size, ctx);
  bench::print_rule();
  return 0;
}
