#include "models/dense.hpp"

#include <cmath>
#include <vector>

#include "gpu/check.hpp"
#include "gpu/linear.hpp"
#include "models/noisy_linear.hpp"

namespace foxhunt::models {

Dense::Dense(DenseSpec spec, std::uint32_t noise_stream_id) : spec_(std::move(spec)), stream_id_(noise_stream_id) {
  FH_EXPECT(!spec_.name.empty(), "Dense: name must not be empty");
  FH_EXPECT(spec_.in >= 1 && spec_.out >= 1, "Dense " + spec_.name + ": in and out must be >= 1, got " +
                                                 std::to_string(spec_.in) + ", " + std::to_string(spec_.out));
  FH_EXPECT(spec_.act == gpu::Activation::identity || spec_.act == gpu::Activation::relu ||
                spec_.act == gpu::Activation::gelu || spec_.act == gpu::Activation::tanh,
            "Dense " + spec_.name + ": act must be identity, relu, gelu or tanh");
  FH_EXPECT(!spec_.noisy || (spec_.sigma0 >= 0.f && std::isfinite(spec_.sigma0)),
            "Dense " + spec_.name + ": sigma0 must be finite and >= 0");
}

std::string Dense::weight_name() const { return spec_.name + (spec_.noisy ? ".weight_mu" : ".weight"); }
std::string Dense::bias_name() const { return spec_.name + (spec_.noisy ? ".bias_mu" : ".bias"); }

void Dense::declare(gpu::ParameterArena& arena) const {
  arena.declare(weight_name(), gpu::Shape{spec_.out, spec_.in});
  if (spec_.noisy) arena.declare(spec_.name + ".weight_sigma", gpu::Shape{spec_.out, spec_.in});
  arena.declare(bias_name(), gpu::Shape{spec_.out});
  if (spec_.noisy) arena.declare(spec_.name + ".bias_sigma", gpu::Shape{spec_.out});
}

void Dense::init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const {
  const float bound = 1.f / std::sqrt(static_cast<float>(spec_.in));
  std::uniform_real_distribution<float> u(-bound, bound);
  std::vector<float> w(static_cast<std::size_t>(spec_.out * spec_.in)), b(static_cast<std::size_t>(spec_.out));
  for (auto& x : w) x = u(rng);
  for (auto& x : b) x = u(rng);
  arena.upload_param(weight_name(), w, stream);
  arena.upload_param(bias_name(), b, stream);
  if (spec_.noisy) {
    std::vector<float> ws(w.size(), spec_.sigma0 / std::sqrt(static_cast<float>(spec_.in)));
    std::vector<float> bs(b.size(), spec_.sigma0 / std::sqrt(static_cast<float>(spec_.out)));
    arena.upload_param(spec_.name + ".weight_sigma", ws, stream);
    arena.upload_param(spec_.name + ".bias_sigma", bs, stream);
  }
}

void Dense::bind(gpu::ParameterArena& arena) {
  FH_EXPECT(arena.finalized(), "Dense " + spec_.name + ": bind needs a finalized arena");
  w_ = arena.param(weight_name()).as<float>();
  b_ = arena.param(bias_name()).as<float>();
  dw_ = arena.grad(weight_name()).as<float>();
  db_ = arena.grad(bias_name()).as<float>();
  if (spec_.noisy) {
    w_sigma_ = arena.param(spec_.name + ".weight_sigma").as<float>();
    b_sigma_ = arena.param(spec_.name + ".bias_sigma").as<float>();
    dw_sigma_ = arena.grad(spec_.name + ".weight_sigma").as<float>();
    db_sigma_ = arena.grad(spec_.name + ".bias_sigma").as<float>();
    if (!bound_) {
      const auto in = static_cast<std::size_t>(spec_.in), out = static_cast<std::size_t>(spec_.out);
      eps_in_ = gpu::DeviceBuffer<float>(in);
      eps_out_ = gpu::DeviceBuffer<float>(out);
      w_eff_ = gpu::DeviceBuffer<float>(in * out);
      b_eff_ = gpu::DeviceBuffer<float>(out);
      dw_eff_ = gpu::DeviceBuffer<float>(in * out);
      db_eff_ = gpu::DeviceBuffer<float>(out);
      // Zero noise until the first resample: a forward before it equals the mean network.
      FH_CHECK(cudaMemset(eps_in_.data(), 0, eps_in_.bytes()));
      FH_CHECK(cudaMemset(eps_out_.data(), 0, eps_out_.bytes()));
      FH_CHECK(cudaStreamSynchronize(nullptr));  // set-up: the memsets (legacy stream) land before any stream uses them
    }
  }
  bound_ = true;
}

void Dense::resample_noise(std::uint64_t seed, const std::uint64_t* counter, cudaStream_t stream) {
  if (!spec_.noisy) return;
  FH_EXPECT(bound_, "Dense " + spec_.name + ": resample_noise before bind");
  noisy_resample(eps_in_.data(), eps_out_.data(), spec_.in, spec_.out, seed, stream_id_, counter, stream);
}

std::size_t Dense::aux_bytes(std::int64_t batch) const { return gpu::linear_aux_bytes(batch, spec_.out, spec_.act); }

std::size_t Dense::workspace_bytes(std::int64_t max_batch, bool) const {
  WorkspaceCarver c;
  c.take<std::byte>(aux_bytes(max_batch));
  c.take<float>(static_cast<std::size_t>(max_batch * spec_.out));
  return c.bytes();
}

void Dense::forward(float* out, const float* in, std::int64_t batch, bool eval, const Workspace& ws,
                    gpu::BlasLane lane) {
  FH_EXPECT(batch >= 1 && batch <= ws.max_batch, "Dense " + spec_.name + ": batch must be in [1, " +
                                                     std::to_string(ws.max_batch) + "], got " + std::to_string(batch));
  WorkspaceCarver c(ws.data);
  forward_aux(out, c.take<std::byte>(aux_bytes(ws.max_batch)), in, batch, eval, lane);
}

void Dense::backward(float* d_in, const float* d_out, const float* in, std::int64_t batch, const Workspace& ws,
                     gpu::BlasLane lane, const SideLane* side) {
  FH_EXPECT(batch >= 1 && batch <= ws.max_batch, "Dense " + spec_.name + ": batch out of range");
  WorkspaceCarver c(ws.data);
  const void* aux = c.take<std::byte>(aux_bytes(ws.max_batch));
  float* d_pre = c.take<float>(static_cast<std::size_t>(ws.max_batch * spec_.out));
  backward_aux(d_in, d_pre, d_out, aux, in, batch, lane);
  if (side != nullptr) {  // Module::backward's contract: the caller's side work is joined too
    FH_CHECK(cudaEventRecord(side->join, side->lane.stream));
    FH_CHECK(cudaStreamWaitEvent(lane.stream, side->join, 0));
  }
}

void Dense::forward_aux(float* out, void* aux, const float* in, std::int64_t batch, bool eval, gpu::BlasLane lane) {
  FH_EXPECT(bound_, "Dense " + spec_.name + ": forward before bind");
  last_eval_ = eval;
  if (!spec_.noisy || eval) {
    gpu::linear_forward(out, aux, in, w_, b_, batch, spec_.in, spec_.out, spec_.act, spec_.math, lane);
    return;
  }
  noisy_compose(w_eff_.data(), b_eff_.data(), w_, w_sigma_, b_, b_sigma_, eps_in_.data(), eps_out_.data(), spec_.in,
                spec_.out, lane.stream);
  gpu::linear_forward(out, aux, in, w_eff_.data(), b_eff_.data(), batch, spec_.in, spec_.out, spec_.act, spec_.math,
                      lane);
}

void Dense::backward_aux(float* d_in, float* d_pre_scratch, const float* d_out, const void* aux, const float* in,
                         std::int64_t batch, gpu::BlasLane lane) {
  FH_EXPECT(bound_, "Dense " + spec_.name + ": backward before bind");
  if (!spec_.noisy || last_eval_) {
    gpu::linear_backward(d_in, dw_, db_, d_pre_scratch, d_out, aux, in, w_, batch, spec_.in, spec_.out, spec_.act,
                         false, spec_.math, lane);
    if (spec_.noisy) {  // evaluation-mode backward: sigma gets no gradient
      FH_CHECK(
          cudaMemsetAsync(dw_sigma_, 0, static_cast<std::size_t>(spec_.in * spec_.out) * sizeof(float), lane.stream));
      FH_CHECK(cudaMemsetAsync(db_sigma_, 0, static_cast<std::size_t>(spec_.out) * sizeof(float), lane.stream));
    }
    return;
  }
  gpu::linear_backward(d_in, dw_eff_.data(), db_eff_.data(), d_pre_scratch, d_out, aux, in, w_eff_.data(), batch,
                       spec_.in, spec_.out, spec_.act, false, spec_.math, lane);
  noisy_param_grads(dw_, dw_sigma_, db_, db_sigma_, dw_eff_.data(), db_eff_.data(), eps_in_.data(), eps_out_.data(),
                    spec_.in, spec_.out, lane.stream);
}

}  // namespace foxhunt::models
