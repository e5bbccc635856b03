// Times one PretrainTrainer step (data, forward, loss, backward, AdamW: the replayed graph) of each
// family at the sizes of the learning tests (tests/pretrain/trainer_learning_test.cu), so the cost
// of a learning run can be read before it is launched. Under Nsight Compute, one step per family is
// bracketed by cudaProfilerStart/Stop:
//   ncu --clock-control none --profile-from-start off --metrics gpu__time_duration.sum
//     foxhunt_dev_pretrain_step_profile <ou market toml> [batch] [width] [families...]
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gpu/check.hpp"
#include "gpu/context.hpp"
#include "pretrain/trainer.hpp"
#include "rl/envs/market_config.hpp"

using namespace foxhunt;
using namespace foxhunt::pretrain;

namespace {

ModelSpec family(const std::string& kind, std::int64_t hidden) {  // as the learning test builds them
  ModelSpec m;
  m.kind = kind;
  m.hidden = hidden;
  m.layers = 1;
  auto& i = m.family.integers;
  if (kind == "mamba2") {
    i = {{"d_state", 16}, {"head_dim", hidden / 4}, {"expand", 2}, {"conv_kernel", 4}, {"chunk", 64}};
  } else if (kind == "xlstm") {
    m.layers = 2;
    i = {{"heads", 2}, {"chunk", 64}, {"proj_factor", 2}, {"conv_kernel", 4}};
    m.family.choices["blocks"] = "ms";
  } else if (kind == "cfc") {
    i = {{"backbone_units", 2 * hidden}, {"backbone_layers", 1}};
    m.family.choices = {{"activation", "lecun_tanh"}, {"mode", "default"}};
  }
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <configs/markets/ou_mean_reversion.toml> [batch] [width] [families...]\n", argv[0]);
    return 2;
  }
  const std::int64_t batch = argc > 2 ? std::atoll(argv[2]) : 8192;
  const std::int64_t width = argc > 3 ? std::atoll(argv[3]) : 16;
  std::vector<std::string> kinds;
  for (int a = 4; a < argc; ++a) kinds.emplace_back(argv[a]);
  if (kinds.empty()) kinds = {"lstm", "mamba2", "xlstm", "cfc"};
  const rl::MarketConfig market = rl::load_market_config(argv[1]);
  gpu::DeviceContext ctx(0, 1);
  const cudaStream_t s = ctx.blas().stream;
  for (const auto& kind : kinds) {
    TrainerSpec spec;
    spec.model = family(kind, width);
    spec.task.kind = TaskKind::returns;
    spec.task.loss = LossKind::mse;
    spec.task.targets = 1;
    spec.optim.steps = 1000;
    spec.window.window = 64;
    spec.window.horizon = 1;
    spec.batch = batch;
    MarketWindows windows(market, spec.window, spec.batch);
    const GenerateFn data = [&windows](const WindowBatch& out, std::int64_t b, std::uint64_t sd,
                                       const std::uint64_t* counter, cudaStream_t st) {
      windows.generate(out, b, sd, counter, st);
    };
    PretrainTrainer trainer(spec, data, ctx.blas());
    for (int i = 0; i < 3; ++i) trainer.step();  // capture and warm up
    FH_CHECK(cudaStreamSynchronize(s));
    FH_CHECK(cudaProfilerStart());
    trainer.step();
    FH_CHECK(cudaStreamSynchronize(s));
    FH_CHECK(cudaProfilerStop());
    cudaEvent_t a, b;
    FH_CHECK(cudaEventCreate(&a));
    FH_CHECK(cudaEventCreate(&b));
    const int reps = 20;
    FH_CHECK(cudaEventRecord(a, s));
    for (int i = 0; i < reps; ++i) trainer.step();
    FH_CHECK(cudaEventRecord(b, s));
    FH_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    FH_CHECK(cudaEventElapsedTime(&ms, a, b));
    std::printf("%-7s batch %lld width %lld: %.3f ms per step (4000 steps: %.0f s)\n", kind.c_str(),
                static_cast<long long>(batch), static_cast<long long>(width), ms / reps, 4.0 * ms / reps);
    std::fflush(stdout);
    FH_CHECK(cudaEventDestroy(a));
    FH_CHECK(cudaEventDestroy(b));
  }
  return 0;
}
