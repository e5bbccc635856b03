// DQN learner updates per second: the whole update (sample, forward online and target, double-DQN
// 3-step targets, Huber with IS weights, backward, grad-norm clip, Adam, priority write-back, Polyak)
// as one CUDA graph replay, beside the same update in PyTorch on the same GPU (eager, and captured
// in a CUDA graph), run in the same process through `python3 <script>`.
//
// Learners (issue 5):  standard: obs 64, trunk 256-256 ReLU, dueling, 9 actions, batch 256
//                      large:    obs 64, trunk 1024-1024 ReLU, dueling, 9 actions, batch 4096
//                                in strict fp32, TF32 and bf16 (tensor cores, f32 master weights and
//                                accumulation; QNetworkSpec::math = learner.math)
// Each row's TFLOP/s against the cuBLASLt ceiling of its own arithmetic, measured in the same run on
// the learner's largest GEMM shape (4096 x 1024 x 1024): fp32 and TF32 through gpu/linear, bf16 on
// bf16 operands; TARGET lines: large fp32 >= 85% of its ceiling, TF32 and bf16 >= 60% (issue 19).
// PyTorch runs each precision alike: TF32 via torch.backends.cuda.matmul.allow_tf32, bf16 via
// autocast (bf16 GEMMs, f32 master weights).
// Replay: rl/replay's prioritized buffer, 2^20 transitions (obs 64 f32, 3-step returns, alpha 0.6,
// beta annealed on the device), filled before timing; the graph holds sample -> update -> priority
// update. The PyTorch script samples proportionally with cumsum + searchsorted over the same size.
// Script: $FOXHUNT_BENCH_SCRIPTS/dqn.py, else <exe dir>/../share/foxhunt/bench/dqn.py, else the
// source tree's bench/torch_baselines/dqn.py.
//
// Inventory of one replay, standard learner (dueling, double DQN, Huber, Z = 1, ReLU, not noisy); the
// bench prints the real count (cudaGraphGetNodes on the captured graph). Before -> now:
//   replay sample                                              1 -> 1
//   dqn_begin_update (schedules, counters)                     1 -> 1  (its own branch, beside the forwards)
//   forward target(s'): 2 trunk GEMMs (bias+ReLU+mask epilogue),
//     value GEMM, advantage GEMM, dueling combine              5 -> 3  (fused heads: 1 kernel)
//   forward online(s') and online(s)                          10 -> 3  (ONE 2B-row forward: 2 GEMMs +
//                                                                       fused heads, straight from the
//                                                                       sampled batch's [s; s'] buffer)
//   dqn_targets, td_loss, reduce_sum(loss), taken_q_mean,
//     flag_nonfinite(loss)                                     5 -> 1  (dqn_td_fused, one block)
//   dead-unit count (one per ReLU layer)                       2 -> 1  (all layers, one launch)
//   backward: dueling 1, value head 4 (d_bias partials + finish,
//     dW, dX), advantage head 4, d_h add 1, trunk layer 1: 4,
//     trunk layer 0: 3 (no dX: its input is the observation)  17 -> 6  (fused heads: d_h masked by the
//       ReLU + head grads + trunk layer 1's bias grad: 2 kernels; trunk layer 1: dW, dX GEMMs;
//       trunk layer 0: ReLU/bias-grad (one split up to 1024 rows: no finish) + dW GEMM)
//       Two branches (models::SideLane): the head grads and layer 1's dW GEMM on the side stream,
//       so the critical chain is d_h -> layer 1 dX -> layer 0 ReLU/bias-grad -> layer 0 dW.
//   flag_nonfinite(grads), grad-norm partials + finish,
//     clip_scale                                               4 -> 1  (dqn_grad_guard, last-block finish)
//   Adam, dqn_end_update, target Polyak,
//     flag_nonfinite(params)                                   4 -> 1  (dqn_adam_end_and_target_update)
//   replay priority update (leaves + 2 tree levels at 2^20)    3 -> 1  (one kernel, beside Adam: the
//                                                                       guard makes the priorities final)
//   total                                                     52 -> 19  (the learner's own: 48 -> 17)
// A GEMM counts 1 above. Through cuBLASLt it could cost 2-3 nodes (a split-K reduction, an
// epilogue::globalKernel when the kernel lacks the bias+ReLU+mask epilogue); the standard learner's
// GEMMs (outputs <= 2^18, k <= 1024) now run as one gpu/linear kernel each, epilogue inside. On cuBLASLt GEMMs (the
// large learner) layer 0's ReLU/bias-grad pass (and its bias-finish kernel) folds into layer 1's dX GEMM as the
// DRELU_BGRAD epilogue where cuBLASLt has a kernel with it (gpu::linear_backward_input_drelu); the standard
// learner's small kernel has no such epilogue, so the pass stays there. FLOPs per update (counted below): 3 forwards (target B rows, online 2B rows), the weight gradients of every
// layer and the input gradients of every layer but the first.
#include <cublasLt.h>
#include <cuda.h>
#include <cuda_bf16.h>
#include <cxxabi.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "gpu/buffer.hpp"
#include "gpu/cast.hpp"
#include "gpu/context.hpp"
#include "gpu/launch.cuh"
#include "gpu/linear.hpp"
#include "gpu/philox.cuh"
#include "gpu/rng.hpp"
#include "rl/dqn/learner.hpp"
#include "rl/dqn/replay_hooks.hpp"
#include "rl/replay/replay_buffer.hpp"

using namespace foxhunt;

namespace {

constexpr std::int64_t kCapacity = std::int64_t{1} << 20;
constexpr std::int64_t kObs = 64;
constexpr std::int64_t kActions = 9;

__global__ void fill_int(std::int32_t* out, std::int64_t n, std::int32_t mod) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = static_cast<std::int32_t>((i * 2654435761ll) % mod);
}
__global__ void fill_flags(std::uint8_t* out, std::int64_t n, std::int64_t every) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = (i * 7919) % every == 0 ? 1 : 0;
}

// A full 2^20 prioritized replay (rl/replay): obs 64 f32, discrete actions, 3-step returns.
std::unique_ptr<rl::ReplayBuffer> make_replay(std::int64_t batch, cudaStream_t s) {
  rl::ReplayConfig rc;
  rc.capacity = kCapacity;
  rc.layout.obs_dim = kObs;
  rc.layout.obs_dtype = gpu::DType::f32;
  rc.mode = rl::SamplingMode::prioritized;
  rc.batch_size = batch;
  rc.n_step = 3;
  rc.gamma = 0.99f;
  rc.alpha = 0.6f;
  rc.beta = 0.4f;
  rc.beta_final = 1.f;
  rc.beta_anneal_steps = 100000;
  rc.seed = 11;
  auto rb = std::make_unique<rl::ReplayBuffer>(rc, s);
  // Fill with (16, 4096) blocks of random transitions until the ring is full.
  constexpr std::int64_t kSteps = 16, kEnvs = 4096, kRows = kSteps * kEnvs;
  gpu::DeviceBuffer<float> obs(kRows * kObs), next(kRows * kObs), rew(kRows);
  gpu::DeviceBuffer<std::int32_t> act(kRows);
  gpu::DeviceBuffer<std::uint8_t> term(kRows), trunc(kRows);
  gpu::fill_uniform(obs.data(), kRows * kObs, -1.f, 1.f, 1, 0, 0, s);
  gpu::fill_uniform(next.data(), kRows * kObs, -1.f, 1.f, 1, 1, 0, s);
  gpu::fill_uniform(rew.data(), kRows, -1.f, 1.f, 1, 2, 0, s);
  fill_int<<<gpu::grid_stride_blocks(kRows), gpu::kBlock, 0, s>>>(act.data(), kRows,
                                                                  static_cast<std::int32_t>(kActions));
  FH_CHECK_LAUNCH();
  fill_flags<<<gpu::grid_stride_blocks(kRows), gpu::kBlock, 0, s>>>(term.data(), kRows, 200);
  FH_CHECK_LAUNCH();
  FH_CHECK(cudaMemsetAsync(trunc.data(), 0, kRows, s));
  const int producer = rb->add_producer(kEnvs);
  rl::TransitionBatch tb;
  tb.layout = rc.layout;
  tb.steps = kSteps;
  tb.envs = kEnvs;
  tb.obs = obs.data();
  tb.next_obs = next.data();
  tb.actions = act.data();
  tb.rewards = rew.data();
  tb.terminated = term.data();
  tb.truncated = trunc.data();
  for (std::int64_t n = 0; n < kCapacity + 2 * kRows; n += kRows) rb->insert(producer, tb, s);
  FH_CHECK(cudaStreamSynchronize(s));
  return rb;
}

struct Result {
  std::string name;
  double ups = 0;
  double tflops = 0;
  std::size_t nodes = 0;
  gpu::LinearMath math = gpu::LinearMath::fp32;
};

// GEMM FLOPs of one update of an MLP trunk {hidden, hidden} with dueling heads (1 + kActions outputs).
double update_flops(std::int64_t hidden, std::int64_t batch) {
  const double B = static_cast<double>(batch), h = static_cast<double>(hidden);
  const double first = kObs * h, rest = h * h + h * (1 + kActions);  // multiply-adds per row
  const double forward = 2.0 * (first + rest);                       // FLOPs per row
  return 3.0 * B * forward + 2.0 * B * (first + rest) + 2.0 * B * rest;
}

// The cuBLASLt ceilings of the same run, (4096, 1024) x (1024, 1024)^T: fp32 and TF32 as gpu/linear's
// plain GEMM (f32 storage), and bf16 as cuBLASLt on bf16 operands with f32 accumulation and f32
// output (what a bf16 learner's largest GEMM could reach with bf16 copies of its operands).
double linear_tflops(gpu::LinearMath math, gpu::DeviceContext& ctx) {
  constexpr std::int64_t M = 4096, K = 1024, N = 1024;
  const cudaStream_t s = ctx.stream();
  gpu::DeviceBuffer<float> x(M * K), w(N * K), y(M * N);
  gpu::fill_uniform(x.data(), M * K, -1.f, 1.f, 5, 0, 0, s);
  gpu::fill_uniform(w.data(), N * K, -1.f, 1.f, 5, 1, 0, s);
  constexpr int reps = 50;
  const double ms = bench::median_ms(
      [&](int) {
        for (int i = 0; i < reps; ++i)
          gpu::linear_forward(y.data(), nullptr, x.data(), w.data(), nullptr, M, K, N, gpu::Activation::identity, math,
                              ctx.blas());
      },
      s, 2, 7);
  return 2.0 * M * N * K * reps / (ms * 1e-3) / 1e12;
}

void check_lt(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(std::string("bench bf16 ceiling: ") + what + " failed");
}

double bf16_gemm_tflops(gpu::DeviceContext& ctx) {
  constexpr std::int64_t M = 4096, K = 1024, N = 1024;
  const gpu::BlasLane lane = ctx.blas();
  const cudaStream_t s = lane.stream;
  gpu::DeviceBuffer<float> xf(M * K), wf(N * K), y(M * N);
  gpu::DeviceBuffer<__nv_bfloat16> x(M * K), w(N * K);
  gpu::fill_uniform(xf.data(), M * K, -1.f, 1.f, 5, 0, 0, s);
  gpu::fill_uniform(wf.data(), N * K, -1.f, 1.f, 5, 1, 0, s);
  gpu::cast_f32_to_bf16(x.data(), xf.data(), M * K, s);
  gpu::cast_f32_to_bf16(w.data(), wf.data(), N * K, s);
  // Column-major y^T (N, M) = W (N, K) . x^T (K, M): A = w read transposed, B = x.
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  check_lt(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "MatmulDescCreate");
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  check_lt(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "TRANSA");
  check_lt(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "TRANSB");
  check_lt(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, K, N, K), "layout A");
  check_lt(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, K, M, K), "layout B");
  check_lt(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, N, M, N), "layout D");
  check_lt(cublasLtMatmulPreferenceCreate(&pref), "PreferenceCreate");
  const std::uint64_t ws = lane.workspace_bytes;
  check_lt(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
           "workspace preference");
  cublasLtMatmulHeuristicResult_t result{};
  int count = 0;
  check_lt(cublasLtMatmulAlgoGetHeuristic(lane.lt, desc, la, lb, ld, ld, pref, 1, &result, &count), "heuristic");
  if (count < 1) throw std::runtime_error("bench bf16 ceiling: cuBLASLt has no algorithm");
  const float alpha = 1.f, beta = 0.f;
  constexpr int reps = 50;
  const double ms = bench::median_ms(
      [&](int) {
        for (int i = 0; i < reps; ++i)
          check_lt(cublasLtMatmul(lane.lt, desc, &alpha, w.data(), la, x.data(), lb, &beta, y.data(), ld, y.data(), ld,
                                  &result.algo, lane.workspace, lane.workspace_bytes, s),
                   "matmul");
      },
      s, 2, 7);
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatmulDescDestroy(desc);
  return 2.0 * M * N * K * reps / (ms * 1e-3) / 1e12;
}

const char* math_name(gpu::LinearMath m) {
  return m == gpu::LinearMath::tf32 ? "tf32" : m == gpu::LinearMath::bf16 ? "bf16" : "fp32";
}

// FOXHUNT_BENCH_GRAPH=1: one line per node of a learner's update captured as the timed graph is
// (sample, update, priority update; the priority update here follows Adam on the main stream
// instead of beside it), its type and, for a kernel, the demangled name and launch shape: what the
// update runs (cuBLASLt's GEMM kernels and any split-K reduction or separate epilogue pass among
// them). The driver's kernel-node parameters and function names come through the runtime's driver
// entry points (no libcuda link).
template <class F>
F driver_fn(const char* symbol) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion(symbol, &p, 12030, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess)
    return nullptr;
  return reinterpret_cast<F>(p);
}

std::string demangled(const char* name) {
  if (name == nullptr) return "?";
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string out = status == 0 && d != nullptr ? d : name;
  std::free(d);
  if (out.size() > 140) out = out.substr(0, 137) + "...";
  return out;
}

void print_graph_nodes(cudaGraph_t graph) {
  using GetParams = CUresult (*)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS*);
  using FuncName = CUresult (*)(const char**, CUfunction);
  using KernelName = CUresult (*)(const char**, CUkernel);
  const auto get_params = driver_fn<GetParams>("cuGraphKernelNodeGetParams");
  const auto func_name = driver_fn<FuncName>("cuFuncGetName");
  const auto kernel_name = driver_fn<KernelName>("cuKernelGetName");
  std::size_t n = 0;
  FH_CHECK(cudaGraphGetNodes(graph, nullptr, &n));
  std::vector<cudaGraphNode_t> nodes(n);
  FH_CHECK(cudaGraphGetNodes(graph, nodes.data(), &n));
  std::printf("  graph: %zu nodes\n", n);
  for (std::size_t i = 0; i < n; ++i) {
    cudaGraphNodeType type{};
    FH_CHECK(cudaGraphNodeGetType(nodes[i], &type));
    if (type != cudaGraphNodeTypeKernel) {
      std::printf("  %3zu  %s\n", i,
                  type == cudaGraphNodeTypeMemset   ? "memset"
                  : type == cudaGraphNodeTypeMemcpy ? "memcpy"
                  : type == cudaGraphNodeTypeEmpty  ? "empty"
                  : type == cudaGraphNodeTypeHost   ? "host"
                                                    : "other");
      continue;
    }
    CUDA_KERNEL_NODE_PARAMS p{};
    const char* name = nullptr;
    if (get_params != nullptr && get_params(reinterpret_cast<CUgraphNode>(nodes[i]), &p) == CUDA_SUCCESS) {
      if (p.func != nullptr && func_name != nullptr) func_name(&name, p.func);
      if (name == nullptr && p.kern != nullptr && kernel_name != nullptr) kernel_name(&name, p.kern);
    }
    std::printf("  %3zu  kernel grid (%u,%u,%u) block (%u,%u,%u) smem %u  %s\n", i, p.gridDimX, p.gridDimY,
                p.gridDimZ, p.blockDimX, p.blockDimY, p.blockDimZ, p.sharedMemBytes, demangled(name).c_str());
  }
}

Result bench_foxhunt(const char* name, const char* what, std::int64_t hidden, std::int64_t batch,
                     gpu::LinearMath math, gpu::DeviceContext& ctx) {
  const cudaStream_t s = ctx.stream();
  auto rb = make_replay(batch, s);
  rl::SampledBatch out = rb->allocate_batch(batch);
  rl::DqnLearnerConfig c;
  c.net.obs_dim = kObs;
  c.net.hidden = {hidden, hidden};
  c.net.actions = kActions;
  c.net.dueling = true;
  c.net.math = math;
  c.batch = batch;
  c.double_q = true;
  c.loss = rl::TdLoss::huber;
  c.adam.eps = 1.5e-4f;
  c.schedule.lr_start = c.schedule.lr_end = 1e-4f;
  c.max_grad_norm = 10.f;
  c.tau = 0.005f;
  c.priority_eps = 0.f;  // the replay adds its own eps
  c.seed = 3;
  rl::DqnLearner learner(c, ctx.blas());
  learner.capture(
      rl::dqn_batch_view(out), [&](cudaStream_t cs) { rb->sample(out.view(), cs); },
      [&](cudaStream_t cs) { rb->update_priorities(out.view().indices, learner.priorities(), batch, cs); });
  if (const char* g = std::getenv("FOXHUNT_BENCH_GRAPH"); g != nullptr && std::string(g) == "1") {
    cudaGraph_t listed = nullptr;
    FH_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    rb->sample(out.view(), s);
    learner.update(rl::dqn_batch_view(out));  // records on the learner's stream, s
    rb->update_priorities(out.view().indices, learner.priorities(), batch, s);
    FH_CHECK(cudaStreamEndCapture(s, &listed));
    std::printf("  %s:\n", what);
    print_graph_nodes(listed);
    FH_CHECK(cudaGraphDestroy(listed));
  }
  const int reps = batch >= 4096 ? 200 : 2000;
  const double ms = bench::median_ms(
      [&](int) {
        for (int i = 0; i < reps; ++i) learner.replay();
      },
      s, 2, 7);
  learner.publish_metrics();
  const rl::DqnState m = learner.metrics().wait();
  Result r;
  r.name = name;
  r.math = math;
  r.ups = reps / (ms * 1e-3);
  r.tflops = update_flops(hidden, batch) * r.ups / 1e12;
  r.nodes = learner.graph_nodes();
  std::printf("  %-28s loss %.4g  skips %u  grad_norm %.3g  graph nodes %zu  %.1f TFLOP/s\n", what,
              static_cast<double>(m.loss), m.skips_total, static_cast<double>(m.grad_norm), r.nodes, r.tflops);
  return r;
}

std::filesystem::path find_script() {
  if (const char* env = std::getenv("FOXHUNT_BENCH_SCRIPTS")) return std::filesystem::path(env) / "dqn.py";
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto p = exe.parent_path() / ".." / "share" / "foxhunt" / "bench" / "dqn.py";
    if (std::filesystem::exists(p)) return p;
  }
  return std::filesystem::path(__FILE__).parent_path() / "torch_baselines" / "dqn.py";
}

// Runs the PyTorch baseline; returns "RESULT <name> <updates/s>" lines parsed (empty on failure).
std::vector<Result> run_torch(const std::filesystem::path& script) {
  std::vector<Result> out;
  const std::string cmd = "python3 '" + script.string() + "' 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char line[1024];
  while (std::fgets(line, sizeof line, p)) {
    char name[256];
    double v = 0;
    if (std::sscanf(line, "RESULT %255s %lf", name, &v) == 2)
      out.push_back({name, v});
    else
      std::printf("  [torch] %s", line);
  }
  const int rc = pclose(p);
  if (rc != 0) std::printf("  [torch] exited with status %d\n", rc);
  return out;
}

double find(const std::vector<Result>& r, const std::string& name) {
  for (const auto& x : r)
    if (x.name == name) return x.ups;
  return 0;
}

}  // namespace

int main() {
  // FOXHUNT_BENCH_OURS_ONLY=1 (or =large_fp32, =large_tf32, =large_bf16): that learner alone (a
  // profiler run), no baselines and no table; 1 is the standard learner. FOXHUNT_BENCH_GRAPH=1: also
  // list each timed learner's graph nodes (print_graph_nodes).
  const char* only_env = std::getenv("FOXHUNT_BENCH_OURS_ONLY");
  const std::string only = only_env ? only_env : "";
  if (!only.empty() && only != "1" && only != "large_fp32" && only != "large_tf32" && only != "large_bf16") {
    std::fprintf(stderr,
                 "foxhunt_bench_dqn: FOXHUNT_BENCH_OURS_ONLY='%s': allowed values are 1, large_fp32, large_tf32, "
                 "large_bf16\n",
                 only.c_str());
    return 2;
  }
  gpu::DeviceContext ctx(0, 1);
  const char* large_what[] = {"large (1024-1024, B 4096)", "large TF32", "large bf16"};
  const gpu::LinearMath large_math[] = {gpu::LinearMath::fp32, gpu::LinearMath::tf32, gpu::LinearMath::bf16};
  if (!only.empty()) {  // before the ceilings: a profiler's first kernels are the learner's
    if (only == "1") {
      bench_foxhunt("standard_fp32", "standard (256-256, B 256)", 256, 256, gpu::LinearMath::fp32, ctx);
      return 0;
    }
    for (int i = 0; i < 3; ++i)
      if (only == std::string("large_") + math_name(large_math[i]))
        bench_foxhunt(only.c_str(), large_what[i], 1024, 4096, large_math[i], ctx);
    return 0;
  }
  std::printf("DQN learner updates/s (one CUDA graph per update) vs PyTorch on the same GPU\n");
  std::vector<Result> fox;
  const double ceil_fp32 = linear_tflops(gpu::LinearMath::fp32, ctx);
  const double ceil_tf32 = linear_tflops(gpu::LinearMath::tf32, ctx);
  const double ceil_bf16 = bf16_gemm_tflops(ctx);
  const double linear_bf16 = linear_tflops(gpu::LinearMath::bf16, ctx);
  std::printf("  cuBLASLt ceiling (4096x1024x1024, f32 accumulate): fp32 %.1f TFLOP/s, TF32 %.1f TFLOP/s, "
              "bf16 operands %.1f TFLOP/s\n",
              ceil_fp32, ceil_tf32, ceil_bf16);
  std::printf("  gpu/linear bf16 (f32 operands rounded to bf16 copies, conversion included; the learner's GEMMs): "
              "%.1f TFLOP/s\n",
              linear_bf16);
  const auto ceiling_of = [&](gpu::LinearMath m) {
    return m == gpu::LinearMath::tf32 ? ceil_tf32 : m == gpu::LinearMath::bf16 ? ceil_bf16 : ceil_fp32;
  };
  fox.push_back(bench_foxhunt("standard_fp32", "standard (256-256, B 256)", 256, 256, gpu::LinearMath::fp32, ctx));
  for (int i = 0; i < 3; ++i) {
    const std::string name = std::string("large_") + math_name(large_math[i]);
    fox.push_back(bench_foxhunt(name.c_str(), large_what[i], 1024, 4096, large_math[i], ctx));
  }

  const auto script = find_script();
  std::printf("PyTorch baseline: %s\n", script.string().c_str());
  const auto torch = run_torch(script);

  bench::print_rule(118);
  std::printf("%-14s %14s %7s %9s %8s %8s %13s %13s %9s %9s\n", "learner", "foxhunt upd/s", "nodes", "TFLOP/s",
              "ceiling", "% ceil", "torch eager", "torch graph", "x eager", "x graph");
  bench::print_rule(118);
  for (const auto& f : fox) {
    const double e = find(torch, f.name + "_eager"), g = find(torch, f.name + "_graph");
    const double ceiling = ceiling_of(f.math);
    std::printf("%-14s %14.0f %7zu %9.1f %8.1f %8.1f %13.0f %13.0f %9.2f %9.2f\n", f.name.c_str(), f.ups, f.nodes,
                f.tflops, ceiling, ceiling > 0 ? 100.0 * f.tflops / ceiling : 0.0, e, g, e > 0 ? f.ups / e : 0.0,
                g > 0 ? f.ups / g : 0.0);
  }
  bench::print_rule(118);
  const double std_ups = fox[0].ups, std_graph = find(torch, "standard_fp32_graph");
  std::printf("TARGET standard updates/s: %.0f (target >= 20000): %s\n", std_ups, std_ups >= 20000 ? "PASS" : "FAIL");
  std::printf("TARGET standard vs PyTorch CUDA graph: %.2fx (target >= 5x): %s\n",
              std_graph > 0 ? std_ups / std_graph : 0.0,
              std_graph > 0 && std_ups >= 5 * std_graph ? "PASS" : (std_graph > 0 ? "FAIL" : "FAIL (no baseline)"));
  std::printf("TARGET large fp32 updates/s: %.0f (target >= 1200): %s\n", fox[1].ups,
              fox[1].ups >= 1200 ? "PASS" : "FAIL");
  std::printf("TARGET large tf32 updates/s: %.0f (target >= 5000): %s\n", fox[2].ups,
              fox[2].ups >= 5000 ? "PASS" : "FAIL");
  // Issue 19: each large learner's GEMM throughput against the ceiling of its own arithmetic.
  const double share[] = {0.85, 0.60, 0.60};
  for (int i = 0; i < 3; ++i) {
    const Result& f = fox[1 + static_cast<std::size_t>(i)];
    const double ceiling = ceiling_of(f.math), pct = ceiling > 0 ? 100.0 * f.tflops / ceiling : 0.0;
    std::printf("TARGET large %s vs the %s GEMM ceiling: %.1f%% (target >= %.0f%%): %s\n", math_name(f.math),
                math_name(f.math), pct, 100.0 * share[i], pct >= 100.0 * share[i] ? "PASS" : "FAIL");
  }
  return 0;
}
