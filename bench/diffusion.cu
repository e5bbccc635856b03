// The diffusion family (models/diffusion, pretrain/diffusion_trainer) at trading sizes against
// PyTorch on the same GPU (bench/torch_baselines/diffusion.py, run by this program through
// $FOXHUNT_PYTHON, else python3; bench/bench_util.hpp finds the script):
//   training: one DiffusionTrainer step (OU market windows generated on the device, noising,
//     denoiser forward and backward, clip, AdamW) as its CUDA graph: windows/s = batch / replay time
//     (the PyTorch step is the same on a fixed batch of windows, with a constant learning rate);
//   sampling: DDIM with 20 steps (eta = 0) and ancestral DDPM with 20 steps of 4096 windows, the
//     whole call captured as one CUDA graph: milliseconds per call.
// Denoiser: hidden 128, 3 residual blocks (expand 2), embedding 64; T = 1000 linear steps; windows of
// 64 returns of 1 asset and of 32 returns of 4 assets (D = 64 and 128); training batches 256, 1024.
// The baseline is PyTorch's best mode (eager, torch.compile, CUDA graph, compiled in a CUDA graph).
// Issue 18's targets: training >= 3x PyTorch; DDIM 20 steps of 4096 windows <= 5 ms (TARGET lines).
// Arguments: [--quick] (D = 64 and training batch 256 only).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

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

constexpr std::int64_t kHidden = 128, kSample = 4096;

// Measures one market's windows into `ours`, keyed as the baseline's RESULT lines: (diffusion,
// train_sps | ddim_ms | ddpm_ms, batch, D, hidden).
void run(const Size& size, const std::vector<std::int64_t>& batches, gpu::DeviceContext& ctx,
         std::map<bench::ResultKey, double>& ours) {
  const cudaStream_t s = ctx.stream();
  const rl::MarketConfig market = rl::load_market_config(actors::shipped_configs_dir() / "markets" / size.market);
  bool sampled = false;
  for (const std::int64_t batch : batches) {
    pretrain::DiffusionTrainerSpec spec;
    spec.denoiser.hidden = kHidden;
    spec.denoiser.blocks = 3;
    spec.denoiser.expand = 2;
    spec.denoiser.embed = 64;
    spec.schedule.steps = 1000;
    spec.schedule.kind = models::ScheduleKind::linear;
    spec.sampler = models::SamplerSpec{models::SamplerKind::ddim, 20, 0.0};
    spec.optim.lr = 1e-3f;
    spec.optim.weight_decay = 0.01f;
    spec.optim.grad_clip = 1.f;
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
    const std::int64_t D = trainer.dim();
    const double train_ms = bench::median_ms([&](int) { trainer.step(); }, s, 10, 50);
    ours[{"diffusion", "train_sps", batch, D, kHidden}] = static_cast<double>(batch) / (train_ms * 1e-3);
    std::printf("%-24s D %4lld  train batch %5lld  %8.3f ms/step  %10.0f windows/s\n", size.market,
                static_cast<long long>(D), static_cast<long long>(batch), train_ms,
                static_cast<double>(batch) / (train_ms * 1e-3));
    if (sampled) continue;
    sampled = true;
    gpu::DeviceBuffer<float> out(static_cast<std::size_t>(kSample * D));
    gpu::DeviceBuffer<std::uint64_t> counter(1);
    counter.zero(s);
    for (const auto kind : {models::SamplerKind::ddim, models::SamplerKind::ddpm}) {
      models::DiffusionSampler sampler(trainer.schedule().host(), models::SamplerSpec{kind, 20, 0.0}, kSample, D);
      const models::EpsilonFn eps = trainer.epsilon_fn(nullptr);
      gpu::CudaGraph g;
      g.capture(s, [&](cudaStream_t cs) { sampler.sample(out.data(), eps, kSample, 5, counter.data(), cs); });
      const double ms = bench::median_ms([&](int) { g.replay(s); }, s, 5, 25);
      const bool ddim = kind == models::SamplerKind::ddim;
      ours[{"diffusion", ddim ? "ddim_ms" : "ddpm_ms", kSample, D, kHidden}] = ms;
      std::printf("%-24s D %4lld  %s 20 steps x %lld windows  %8.3f ms/call, %zu graph nodes\n", size.market,
                  static_cast<long long>(D), ddim ? "DDIM" : "DDPM", static_cast<long long>(kSample), ms,
                  g.node_count());
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  // usage: foxhunt_bench_diffusion [--quick]
  bool quick = false;
  for (int a = 1; a < argc; ++a) {
    const std::string arg = argv[a];
    if (arg != "--quick") {
      std::fprintf(stderr, "%s: unknown argument '%s' (allowed: --quick)\n", argv[0], arg.c_str());
      return 2;
    }
    quick = true;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each row shows as it is measured, also through a pipe
  FH_CHECK(cudaSetDevice(0));
  gpu::DeviceContext ctx(0, 1);
  std::vector<Size> sizes = {Size{"ou_mean_reversion.toml", 64}, Size{"ou4_continuous.toml", 32}};
  std::vector<std::int64_t> batches = {256, 1024};
  if (quick) sizes.resize(1), batches.resize(1);
  std::map<bench::ResultKey, double> ours;
  bench::print_rule();
  for (const Size& size : sizes) run(size, batches, ctx, ours);
  bench::print_rule();

  const auto base = bench::run_baseline_script(bench::baseline_script("diffusion.py"), quick ? "--quick" : "");
  std::printf("\nDiffusion: foxhunt vs the best PyTorch mode on the same GPU (hidden %lld, 3 blocks, T 1000)\n",
              static_cast<long long>(kHidden));
  std::printf("%-10s %6s %5s %14s %14s %-18s %8s %10s\n", "what", "batch", "D", "ours", "torch", "mode", "x torch",
              "target");
  for (const auto& [k, v] : ours) {
    const auto& [family, what, B, D, H] = k;
    const auto it = base.find(k);
    const bool train_row = what == "train_sps";
    const double t = it == base.end() ? 0 : it->second.first;
    const double ratio = t == 0 ? 0 : (train_row ? v / t : t / v);
    std::printf("%-10s %6lld %5lld %14.3f %14.3f %-18s %8.2f %10s\n", what.c_str(), static_cast<long long>(B),
                static_cast<long long>(D), v, t, it == base.end() ? "-" : it->second.second.c_str(), ratio,
                train_row ? ">= 3x" : what == "ddim_ms" ? "<= 5 ms" : "-");
    if (train_row)
      std::printf("TARGET diffusion training batch %lld D %lld: %.2fx torch (target >= 3x): %s\n",
                  static_cast<long long>(B), static_cast<long long>(D), ratio, ratio >= 3 ? "PASS" : "FAIL");
    if (what == "ddim_ms")
      std::printf("TARGET diffusion DDIM 20 steps x %lld windows D %lld: %.3f ms (target <= 5 ms): %s (%.2fx torch)\n",
                  static_cast<long long>(B), static_cast<long long>(D), v, v <= 5.0 ? "PASS" : "FAIL", ratio);
  }
  std::printf("(train_sps: windows/s; ddim_ms, ddpm_ms: milliseconds per call of 4096 windows; x torch: speed-up;"
              " 0: no baseline)\n");
  return 0;
}
