// The sequence-model families at trading sizes against PyTorch on the same GPU
// (bench/torch_baselines/sequence_models.py, run by this program through $FOXHUNT_PYTHON, else
// python3; bench/bench_util.hpp finds the script):
//   training: batch 256, sequence 64 and 256, width 64 and 256, 4 layers, one input feature;
//     a step = forward over (B, T, 1), backward from a fixed output gradient, Adam over every
//     parameter, captured once as a CUDA graph and replayed: samples/s = B / replay time;
//   per-step inference for 4096 environments (the collector's use): one step() from the
//     recurrent state, as a graph: microseconds per step;
//   the Mamba2 SSD scan alone (forward) in TFLOP/s beside the fp32 and bf16 GEMM ceilings
//     measured here (gpu/linear, 4096^3).
// Models: mamba2 = Mamba2 (4 layers, d_state 16, head_dim 16, expand 2); xlstm = Xlstm with blocks
// "msms" (4 heads); cfc = 4 chained Cfc layers (backbone units = width). The PyTorch script builds
// the same shapes; its best mode (eager, torch.compile, whole-step CUDA graph) is the baseline.
// Arguments: [--quick] (the first training and step size only) [mamba2|xlstm|cfc ...] (default all):
// PyTorch's compile of the xLSTM and CfC time loops takes minutes, so one family per run keeps a
// run inside a device call.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "bench_util.hpp"
#include "gpu/adam.hpp"
#include "gpu/arena.hpp"
#include "gpu/buffer.hpp"
#include "gpu/check.hpp"
#include "gpu/context.hpp"
#include "gpu/graph.hpp"
#include "gpu/linear.hpp"
#include "models/cfc/cfc.hpp"
#include "models/mamba2/mamba2.hpp"
#include "models/mamba2/ssd.hpp"
#include "models/xlstm/xlstm.hpp"

using namespace foxhunt;

namespace {

constexpr std::int64_t kLayers = 4;

// One model as a chain of recurrent modules over (B, T, C) (one module for mamba2 and xlstm, four
// Cfc layers for cfc), with its arena, activations and workspaces.
struct Chain {
  std::vector<std::unique_ptr<models::RecurrentModule>> modules;
  gpu::ParameterArena arena;
  std::vector<gpu::DeviceBuffer<float>> acts, grads;  // acts[i]: input of module i (acts.back(): output)
  std::vector<models::OwnedWorkspace> ws;
  std::vector<gpu::DeviceBuffer<std::byte>> step_ws;
  std::vector<gpu::DeviceBuffer<float>> states, step_out;

  void build(std::int64_t batch, std::int64_t T, std::int64_t step_rows, cudaStream_t s) {
    for (auto& m : modules) m->declare(arena);
    arena.finalize(s);
    std::mt19937_64 rng(7);
    for (auto& m : modules) {
      m->init(arena, rng, s);
      m->bind(arena);
    }
    acts.emplace_back(static_cast<std::size_t>(batch * T * modules.front()->in_features()));
    for (auto& m : modules) {
      acts.emplace_back(static_cast<std::size_t>(batch * T * m->out_features()));
      ws.emplace_back(*m, batch);
      step_ws.emplace_back(m->step_workspace_bytes(step_rows));
      states.emplace_back(static_cast<std::size_t>(step_rows * m->state_features()));
      step_out.emplace_back(static_cast<std::size_t>(step_rows * m->out_features()));
    }
    for (auto& a : acts) grads.emplace_back(a.size());
    std::vector<float> host(acts.front().size());
    std::normal_distribution<float> n01;
    for (auto& v : host) v = n01(rng);
    FH_CHECK(cudaMemcpyAsync(acts.front().data(), host.data(), host.size() * 4, cudaMemcpyHostToDevice, s));
    host.assign(grads.back().size(), 0.f);
    for (auto& v : host) v = 1e-3f * n01(rng);
    FH_CHECK(cudaMemcpyAsync(grads.back().data(), host.data(), host.size() * 4, cudaMemcpyHostToDevice, s));
    for (auto& st : states) FH_CHECK(cudaMemsetAsync(st.data(), 0, st.bytes(), s));
    FH_CHECK(cudaStreamSynchronize(s));
  }

  void train_step(std::int64_t batch, gpu::BlasLane lane, const float* lr, const std::int64_t* step) {
    for (std::size_t i = 0; i < modules.size(); ++i)
      modules[i]->forward(acts[i + 1].data(), acts[i].data(), batch, false, ws[i].view, lane);
    for (std::size_t i = modules.size(); i-- > 0;)
      modules[i]->backward(i == 0 ? nullptr : grads[i].data(), grads[i + 1].data(), acts[i].data(), batch,
                           ws[i].view, lane, nullptr);
    gpu::adam_step_device(arena.params(), arena.adam_m(), arena.adam_v(), arena.grads(), arena.padded_count(),
                          gpu::AdamConfig{}, lr, step, nullptr, nullptr, lane.stream);
  }

  void step(std::int64_t rows, const float* in, gpu::BlasLane lane) {
    const float* x = in;
    for (std::size_t i = 0; i < modules.size(); ++i) {
      models::Workspace w{step_ws[i].data(), rows, false};
      modules[i]->step(step_out[i].data(), states[i].data(), x, nullptr, rows, w, lane);
      x = step_out[i].data();
    }
  }
};

std::unique_ptr<Chain> make_chain(const std::string& family, std::int64_t T, std::int64_t width) {
  auto c = std::make_unique<Chain>();
  if (family == "mamba2") {
    models::Mamba2Spec s;
    s.name = "mamba2";
    s.in = 1, s.d_model = width, s.n_layers = kLayers, s.sequence_length = T;
    c->modules.push_back(std::make_unique<models::Mamba2>(s));
  } else if (family == "xlstm") {
    models::XlstmSpec s;
    s.name = "xlstm";
    s.in = 1, s.d_model = width, s.heads = 4, s.blocks = "msms", s.sequence_length = T;
    c->modules.push_back(std::make_unique<models::Xlstm>(s));
  } else {
    for (std::int64_t l = 0; l < kLayers; ++l) {
      models::CfcSpec s;
      s.name = "cfc." + std::to_string(l);
      s.in = l == 0 ? 1 : width, s.hidden = width, s.backbone_units = width, s.sequence_length = T;
      c->modules.push_back(std::make_unique<models::Cfc>(s));
    }
  }
  return c;
}

using Key = bench::ResultKey;  // family what B T W

// SSD forward FLOPs of the chunked algorithm (multiply-adds x 2): intra-chunk C B^T (L x L x N per
// chunk and head) and its product with X (L x L x P), chunk states (L x N x P), state outputs.
double ssd_flops(const models::SsdShape& s) {
  const double chunks = static_cast<double>((s.T + s.chunk - 1) / s.chunk);
  const double L = static_cast<double>(s.chunk), N = static_cast<double>(s.state), P = static_cast<double>(s.head_dim);
  const double per_head_chunk = L * L * N + L * L * P + L * N * P + L * N * P;
  return 2.0 * per_head_chunk * chunks * static_cast<double>(s.heads * s.batch);
}

double gemm_tflops(gpu::LinearMath math, gpu::BlasLane lane) {
  const std::int64_t n = 4096;
  gpu::DeviceBuffer<float> a(n * n), w(n * n), y(n * n);
  FH_CHECK(cudaMemsetAsync(a.data(), 0, a.bytes(), lane.stream));
  FH_CHECK(cudaMemsetAsync(w.data(), 0, w.bytes(), lane.stream));
  const double ms = bench::median_ms(
      [&](int) { gpu::linear_forward(y.data(), nullptr, a.data(), w.data(), nullptr, n, n, n, gpu::Activation::identity, math, lane); },
      lane.stream, 3, 10);
  return 2.0 * n * n * n / (ms * 1e-3) / 1e12;
}

}  // namespace

int main(int argc, char** argv) {
  // usage: foxhunt_bench_sequence_models [--quick] [mamba2|xlstm|cfc ...] (default: all three)
  bool quick = false;
  std::vector<std::string> families;
  for (int a = 1; a < argc; ++a) {
    const std::string arg = argv[a];
    if (arg == "--quick") {
      quick = true;
    } else if (arg == "mamba2" || arg == "xlstm" || arg == "cfc") {
      families.push_back(arg);
    } else {
      std::fprintf(stderr, "%s: unknown argument '%s' (allowed: --quick, mamba2, xlstm, cfc)\n", argv[0], arg.c_str());
      return 2;
    }
  }
  if (families.empty()) families = {"mamba2", "xlstm", "cfc"};
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each row shows as it is measured, also through a pipe
  gpu::DeviceContext ctx(0, 1);
  const gpu::BlasLane lane = ctx.blas(0);
  const cudaStream_t s = lane.stream;
  std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t>> train = {{256, 64, 64}, {256, 256, 64},
                                                                              {256, 64, 256}, {256, 256, 256}};
  std::vector<std::pair<std::int64_t, std::int64_t>> steps = {{4096, 64}, {4096, 256}};
  if (quick) train.resize(1), steps.resize(1);

  gpu::DeviceBuffer<float> lr(1);
  gpu::DeviceBuffer<std::int64_t> counter(1);
  const float lr_host = 1e-4f;
  FH_CHECK(cudaMemcpyAsync(lr.data(), &lr_host, 4, cudaMemcpyHostToDevice, s));
  FH_CHECK(cudaMemsetAsync(counter.data(), 0, 8, s));

  std::map<Key, double> ours;
  for (const auto& family : families) {
    for (const auto& [B, T, W] : train) {
      auto chain = make_chain(family, T, W);
      chain->build(B, T, 1, s);
      gpu::CudaGraph g;
      g.capture(s, [&](cudaStream_t) { chain->train_step(B, lane, lr.data(), counter.data()); });
      const double ms = bench::median_ms([&](int) { g.replay(s); }, s, 3, 15);
      ours[{family, "train_sps", B, T, W}] = static_cast<double>(B) / (ms * 1e-3);
      std::printf("  ours %-7s train %lldx%lldx%lld: %.3f ms per step, %zu graph nodes\n", family.c_str(),
                  static_cast<long long>(B), static_cast<long long>(T), static_cast<long long>(W), ms, g.node_count());
    }
    for (const auto& [rows, W] : steps) {
      auto chain = make_chain(family, 64, W);
      chain->build(rows, 64, rows, s);
      gpu::CudaGraph g;
      g.capture(s, [&](cudaStream_t) { chain->step(rows, chain->acts.front().data(), lane); });
      const double ms = bench::median_ms([&](int) { g.replay(s); }, s, 5, 50);
      ours[{family, "step_us", rows, 1, W}] = ms * 1e3;
      std::printf("  ours %-7s step %lld rows x width %lld: %.1f us per step, %zu graph nodes\n", family.c_str(),
                  static_cast<long long>(rows), static_cast<long long>(W), ms * 1e3, g.node_count());
    }
  }

  // The SSD scan alone against the GEMM ceilings.
  models::SsdShape sh;
  sh.batch = 256, sh.T = 256, sh.heads = 16, sh.head_dim = 16, sh.groups = 1, sh.state = 16, sh.chunk = 64;
  const std::size_t xs = sh.batch * sh.T * sh.heads * sh.head_dim, bs = sh.batch * sh.T * sh.groups * sh.state;
  gpu::DeviceBuffer<float> x(xs), y(xs), dt(sh.batch * sh.T * sh.heads), A(sh.heads), Bm(bs), Cm(bs);
  gpu::DeviceBuffer<std::byte> ssd_ws(models::ssd_workspace_bytes(sh));
  for (auto* b : {&x, &dt, &Bm, &Cm, &A}) FH_CHECK(cudaMemsetAsync(b->data(), 0, b->bytes(), s));
  const double ssd_ms = bench::median_ms(
      [&](int) {
        models::ssd_forward(y.data(), nullptr, x.data(), dt.data(), A.data(), Bm.data(), Cm.data(), sh, ssd_ws.data(), s);
      },
      s, 3, 15);
  const double ssd_tf = ssd_flops(sh) / (ssd_ms * 1e-3) / 1e12;
  const double fp32_tf = gemm_tflops(gpu::LinearMath::fp32, lane), bf16_tf = gemm_tflops(gpu::LinearMath::bf16, lane);

  std::string script_args = quick ? "--quick" : "";
  for (const auto& f : families) script_args += " " + f;
  const auto base = bench::run_baseline_script(bench::baseline_script("sequence_models.py"), script_args);
  std::printf("\nSequence models: foxhunt vs the best PyTorch mode on the same GPU (4 layers, 1 input feature)\n");
  std::printf("%-8s %-10s %6s %5s %6s %14s %14s %-10s %8s %8s\n", "family", "what", "batch", "T", "width", "ours",
              "torch", "mode", "x torch", "target");
  for (const auto& [k, v] : ours) {
    const auto& [family, what, B, T, W] = k;
    const auto it = base.find(k);
    const bool train_row = what == "train_sps";
    const double t = it == base.end() ? 0 : it->second.first;
    const double ratio = t == 0 ? 0 : (train_row ? v / t : t / v);
    std::printf("%-8s %-10s %6lld %5lld %6lld %14.1f %14.1f %-10s %8.2f %8s\n", family.c_str(), what.c_str(),
                static_cast<long long>(B), static_cast<long long>(T), static_cast<long long>(W), v, t,
                it == base.end() ? "-" : it->second.second.c_str(), ratio, train_row ? ">= 3" : ">= 10");
  }
  std::printf("(train: samples/s; step: microseconds per step of 4096 rows; x torch: speed-up)\n");
  std::printf("SSD forward (B %lld, T %lld, %lld heads x %lld, state %lld, chunk %lld): %.3f ms, %.2f TFLOP/s; GEMM "
              "ceilings here: fp32 %.1f, bf16 %.1f TFLOP/s\n",
              static_cast<long long>(sh.batch), static_cast<long long>(sh.T), static_cast<long long>(sh.heads),
              static_cast<long long>(sh.head_dim), static_cast<long long>(sh.state), static_cast<long long>(sh.chunk),
              ssd_ms, ssd_tf, fp32_tf, bf16_tf);
  for (const auto& family : families) {
    const auto it = ours.find({family, "step_us", 4096, 1, 64});
    if (it != ours.end())
      std::printf("TARGET %s per-step 4096 x width 64: %.1f us (target <= 20 us): %s\n", family.c_str(), it->second,
                  it->second <= 20 ? "PASS" : "FAIL");
  }
  return 0;
}
