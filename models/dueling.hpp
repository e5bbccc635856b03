#pragma once
// Dueling aggregation (Wang et al. 2016), generalised to action branches (BDQ, Tavakoli et al.
// 2018) and to distributional atoms (C51 dueling combines logits atom by atom):
//   out[b, d, a, z] = value[b, z] + adv[b, d, a, z] - mean_a' adv[b, d, a', z]
// value (B, Z) is shared by every branch d < D; adv and out are (B, D, A, Z) row-major.
// Plain dueling is D = 1, Z = 1; BDQ is D branches with Z = 1.
#include <cuda_runtime.h>

#include <cstdint>

namespace foxhunt::models {

void dueling_forward(float* out, const float* value, const float* adv, std::int64_t batch, std::int64_t branches,
                     std::int64_t actions, std::int64_t atoms, cudaStream_t stream);

// d_value (B, Z) = sum_{d, a} d_out[b, d, a, z]
// d_adv (B, D, A, Z) = d_out[b, d, a, z] - mean_a' d_out[b, d, a', z]     (both overwritten)
void dueling_backward(float* d_value, float* d_adv, const float* d_out, std::int64_t batch, std::int64_t branches,
                      std::int64_t actions, std::int64_t atoms, cudaStream_t stream);

}  // namespace foxhunt::models
