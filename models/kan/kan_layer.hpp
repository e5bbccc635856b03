#pragma once
// KanLayer: one Kolmogorov-Arnold layer (Liu et al. 2024) in efficient-kan's form, a row-wise
// Module (B, in) -> (B, out):
//   y[b, o] = sum_i silu(x[b, i]) W_base[o, i] + sum_i sum_j c[o, i, j] B_j(x[b, i])
// B_j: the B-spline bases of order k over input i's knots t_0 < ... < t_{G+2k} (G intervals over
// the grid range, extended by k knots each side), j = 0 .. G+k-1, by Cox-de Boor; all are 0 outside
// [t_0, t_{G+2k}) (the base branch carries such inputs).
// Parameters ("<name>." + ...): base_weight (out, in), spline_weight (out, in, G+k).
// State (arena state tensor, never trained): grid (in, G+2k+1), the knots of each input; uniform
// over [grid_min, grid_max] at init, refit from data by update_grid. Declared with
// ParameterArena::declare_state, so checkpoints keep it and Adam never touches it.
//
// Only k+1 bases are non-zero per input, so the forward stores per (b, i) the first active basis
// index and the k+1 values and slopes (no dense (B, in (G+k)) basis tensor); the two branches are
// one tiled kernel that gathers the coefficients of the active bases from shared memory ("a GEMM
// over the sparse bases"). The backward: d_x by a second tiled kernel (the same gather, reduced over
// outputs), the parameter gradients by a tiled kernel over row splits whose partial sums a second
// pass adds in a fixed order (deterministic, no atomics).
// update_grid refits each input's knots to the quantiles of a batch (mixed with the uniform knots
// by grid_eps) and re-solves the coefficients by least squares on that batch so that every spline
// keeps its values there (float64 normal equations and a Cholesky per input, on the device).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>

#include "gpu/arena.hpp"
#include "gpu/context.hpp"
#include "models/module.hpp"

namespace foxhunt::models {

inline constexpr std::int64_t kKanMaxOrder = 5;   // k in [1, 5]
inline constexpr std::int64_t kKanMaxBases = 32;  // G + k <= 32 (the kernels' shared-memory tiles)

struct KanLayerSpec {
  std::string name;
  std::int64_t in = 0, out = 0;
  std::int64_t grid = 5;   // G: intervals over [grid_min, grid_max]
  std::int64_t order = 3;  // k: the spline order (3: cubic)
  float grid_min = -1.f, grid_max = 1.f;
  float grid_eps = 0.02f;     // update_grid: the uniform grid's weight in (0, 1] (1: uniform only)
  float grid_margin = 0.01f;  // update_grid: the uniform grid spans [min - margin, max + margin]
  float spline_init = 0.1f;   // init: c ~ U(-spline_init, spline_init) / sqrt(in)
};

// Why a spec is not valid (empty when it is).
std::string kan_spec_problem(const KanLayerSpec& s);

class KanLayer final : public Module {
 public:
  explicit KanLayer(KanLayerSpec spec);

  void declare(gpu::ParameterArena& arena) const override;
  // base_weight ~ U(-1/sqrt(in), 1/sqrt(in)) (PyTorch's Linear), spline_weight as spline_init says,
  // the uniform grid. Set-up only (host RNG, uploads).
  void init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const override;
  void bind(gpu::ParameterArena& arena) override;

  std::int64_t in_features() const override { return spec_.in; }
  std::int64_t out_features() const override { return spec_.out; }
  std::int64_t bases() const noexcept { return spec_.grid + spec_.order; }          // G + k
  std::int64_t knots() const noexcept { return spec_.grid + 2 * spec_.order + 1; }  // G + 2k + 1

  // The bases per (b, i) and the parameter-gradient partial sums.
  std::size_t workspace_bytes(std::int64_t max_batch, bool side_lane) const override;
  // eval: no effect.
  void forward(float* out, const float* in, std::int64_t batch, bool eval, const Workspace& ws,
               gpu::BlasLane lane) override;
  // Overwrites base_weight's and spline_weight's gradients, and d_in when not null. All on lane;
  // side is only joined.
  void backward(float* d_in, const float* d_out, const float* in, std::int64_t batch, const Workspace& ws,
                gpu::BlasLane lane, const SideLane* side) override;

  // Grid update from the batch in (B, in), 1 <= B <= max_batch, in the workspace of
  // grid_update_workspace_bytes(max_batch) bytes: knots from the batch's quantiles, coefficients
  // re-solved so the spline branch keeps its values on the batch (in the least-squares sense).
  // Deterministic, on the device, no host synchronization (set-up work: it queries cub's sizes).
  std::size_t grid_update_workspace_bytes(std::int64_t max_batch) const;
  void update_grid(const float* in, std::int64_t batch, const Workspace& ws, cudaStream_t stream);

  // The bases of in (B, in) with the current grid: first (B, in) and values (B, in, k+1), slopes
  // (B, in, k+1) (nullable): basis first[b, i] + t has value values[(b in + i)(k+1) + t]. Indices
  // are clamped to [0, G-1]: entries of bases that do not exist there are 0.
  void compute_bases(std::int32_t* first, float* values, float* slopes, const float* in, std::int64_t batch,
                     cudaStream_t stream) const;

  const KanLayerSpec& spec() const noexcept { return spec_; }
  std::string param_name(std::string_view suffix) const { return spec_.name + "." + std::string(suffix); }
  const float* grid() const noexcept { return grid_; }

 private:
  struct Buffers {
    std::int32_t* first = nullptr;  // (max_batch, in)
    float* values = nullptr;        // (max_batch, in, k+1)
    float* slopes = nullptr;        // (max_batch, in, k+1)
    float* partial = nullptr;       // (splits, out, in, G+k+1)
  };
  Buffers carve(WorkspaceCarver& c, std::int64_t max_batch) const;
  struct UpdateBuffers {
    float *xt = nullptr, *sorted = nullptr;  // (in, max_batch)
    std::int32_t* offsets = nullptr;         // (in + 1)
    std::int32_t *first_old = nullptr, *first_new = nullptr;
    float *values_old = nullptr, *values_new = nullptr;
    double* rhs = nullptr;  // (in, out, G+k)
    void* sort_temp = nullptr;
    std::size_t sort_temp_bytes = 0;
  };
  UpdateBuffers carve_update(WorkspaceCarver& c, std::int64_t max_batch) const;
  std::size_t sort_temp_bytes(std::int64_t batch) const;

  KanLayerSpec spec_;
  bool bound_ = false;
  float *w_ = nullptr, *c_ = nullptr, *dw_ = nullptr, *dc_ = nullptr, *grid_ = nullptr;
};

}  // namespace foxhunt::models
