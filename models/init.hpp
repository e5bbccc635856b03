#pragma once
// Weight initializations beyond each layer's default (set-up only: host RNG, then an upload).
#include <cuda_runtime.h>

#include <cstdint>
#include <random>
#include <vector>

#include "gpu/arena.hpp"
#include "models/dense.hpp"

namespace foxhunt::models {

// A (rows, cols) row-major matrix with orthonormal rows (rows <= cols) or columns (rows > cols),
// times gain: torch.nn.init.orthogonal_'s construction (QR of a standard Gaussian matrix, the
// signs fixed by diag(R) so that the law is uniform over the orthogonal group), in float64.
std::vector<float> orthogonal_matrix(std::int64_t rows, std::int64_t cols, double gain, std::mt19937_64& rng);

// A plain Dense layer's weight = orthogonal_matrix(out, in, gain) and bias = 0 (PPO's init).
void init_orthogonal(const Dense& layer, gpu::ParameterArena& arena, double gain, std::mt19937_64& rng,
                     cudaStream_t stream);

}  // namespace foxhunt::models
