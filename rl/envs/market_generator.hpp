#pragma once
// MarketGenerator: the returns of a generated market (process.kind = "generated"), sampled on the
// device from a diffusion model (models/diffusion) in chunks ahead of use.
//
// The model generates windows of W normalized returns of every asset (W = its data.window; D = W x
// assets, flattened oldest first, assets interleaved). Each environment i reads one stream of
// returns: step k (k = 0, 1, ... since reset(), the same for every environment) trades return k of
// its stream, chunk m = k / W, stored in half m mod 2 of its pair of chunks
//   returns (N, 2W, assets)   return k of environment i at [(i 2W + k mod 2W) assets + a].
// Refills are staggered so that every step costs the same fixed kernel sequence (no host decision,
// capturable): the environments form W groups of B = ceil(N / W) (group g: i in [gB, gB + B)), and
// before step k the group g = k mod W gets chunk m + 1 = k / W + 1 into the other half, which the
// group starts reading at step (m + 1) W, after the chunk it replaces (m - 1) was read to its end.
// reset() samples the history the observation window shows (the last `market window` returns of
// H = ceil(window / W) windows, one more for a conditioned model, in the ring layout of
// rl/envs/market.hpp) and chunk 0 of every environment; from then on the stream continues across
// episodes (an episode end resets the book, not the returns).
// A conditioned model (context C <= W) samples each window given the C returns before it in the
// stream: chunk m + 1 given the end of chunk m (in the half being read, complete since the step it
// was sampled at); the history's first window given zeros (the returns' mean), which the extra
// history window keeps out of the observation.
//
// Randomness: the sampler's Philox (models/diffusion/sampler.hpp) with the environment's seed, the
// batch row r = i - gB and a device counter: step k's refill uses counter k (kept on the device,
// advanced by advance(): a step graph replays the same kernels), reset()'s sampling calls (window j
// of the history, or chunk 0 as j = H, group g) use 2^35 | (j W + g). So a run is a pure function
// of the seed and resumes bitwise from the state spans (returns, step).
//
// The model (GeneratorModel, rl/envs/market_generator_config.hpp) is loaded at construction
// (model.safetensors into a parameter arena; set-up, synchronizes).
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "gpu/arena.hpp"
#include "gpu/buffer.hpp"
#include "gpu/context.hpp"
#include "models/diffusion/denoiser.hpp"
#include "models/diffusion/sampler.hpp"
#include "models/diffusion/schedule.hpp"
#include "rl/envs/market_generator_config.hpp"

namespace foxhunt::rl {

inline constexpr std::uint64_t kGeneratorResetCounter = std::uint64_t{1} << 35;

class MarketGenerator {
 public:
  MarketGenerator(const GeneratorModel& model, std::int64_t num_envs, int market_window, cudaStream_t stream);
  ~MarketGenerator();
  MarketGenerator(const MarketGenerator&) = delete;
  MarketGenerator& operator=(const MarketGenerator&) = delete;

  std::int64_t window() const noexcept { return window_; }       // W
  std::int64_t assets() const noexcept { return assets_; }
  std::int64_t group_size() const noexcept { return group_; }    // B
  std::int64_t context() const noexcept { return context_; }     // C
  std::int64_t history_windows() const noexcept { return history_; }  // H
  const GeneratorModel& model() const noexcept { return model_; }

  // The state (device): the chunk pairs (N, 2W, assets) and the step counter k (1).
  float* returns() noexcept { return returns_.data(); }
  std::uint64_t* step_counter() noexcept { return step_.data(); }
  std::size_t returns_bytes() const noexcept { return returns_.size() * sizeof(float); }

  // ring (N, market window, assets): the history, oldest first; chunk 0 of every environment; k = 0.
  void reset(float* ring, std::uint64_t seed, cudaStream_t stream);
  // Before step k: group k mod W gets chunk k / W + 1.
  void refill(std::uint64_t seed, cudaStream_t stream);
  // After step k: k += 1.
  void advance(cudaStream_t stream);

  // x (B, D): the model's samples for the counter *counter, rows 0 .. batch-1, given ctx (B, C x
  // assets; ignored when C = 0).
  void sample(float* x, const float* ctx, std::int64_t batch, std::uint64_t seed, const std::uint64_t* counter,
              cudaStream_t stream);

 private:
  GeneratorModel model_;
  std::int64_t n_, window_, assets_, dim_, context_, group_, market_window_, history_;
  cublasLtHandle_t lt_ = nullptr;
  gpu::DeviceBuffer<std::byte> blas_workspace_;
  std::unique_ptr<models::NoiseSchedule> schedule_;
  std::unique_ptr<models::Denoiser> denoiser_;
  std::unique_ptr<models::DiffusionSampler> sampler_;
  gpu::ParameterArena arena_;
  gpu::DeviceBuffer<std::byte> denoiser_ws_;
  gpu::DeviceBuffer<float> x_, ctx_, history_buf_, returns_;
  gpu::DeviceBuffer<std::uint64_t> step_, reset_counters_;
};

}  // namespace foxhunt::rl
