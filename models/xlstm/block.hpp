#pragma once
// XlstmBlock: what the Xlstm stack needs of one residual block (the mLSTM block and the sLSTM
// block), over batch-major sequences x, y (B, T, C) with T given per call, and a per-step form
// whose state is a column range of the stack's (B, S) state (rows state_stride floats apart).
//   y = x + block(x)  (the residual is inside; y must not alias x)
// Workspace: forward and backward of one (B, T) share workspace_bytes(max_batch, T) bytes; a
// backward follows the forward of the same batch with the same workspace and overwrites every
// parameter gradient of the block in its arena.
#include <cstddef>
#include <cstdint>
#include <random>

#include "gpu/arena.hpp"
#include "gpu/context.hpp"

namespace foxhunt::models {

class XlstmBlock {
 public:
  virtual ~XlstmBlock() = default;
  virtual void declare(gpu::ParameterArena& arena) const = 0;
  virtual void init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const = 0;
  virtual void bind(gpu::ParameterArena& arena) = 0;

  virtual std::int64_t state_features() const = 0;  // per batch row
  virtual std::size_t workspace_bytes(std::int64_t max_batch, std::int64_t T) const = 0;
  virtual std::size_t step_workspace_bytes(std::int64_t max_batch) const = 0;

  // y (B, T, C) = x + block(x), each sequence from the zero state. ws: workspace_bytes(B', T), B' >= B.
  virtual void forward(float* y, const float* x, std::int64_t B, std::int64_t T, std::byte* ws,
                       gpu::BlasLane lane) = 0;
  // dx (B, T, C) from dy; dx must not alias dy or x.
  virtual void backward(float* dx, const float* dy, const float* x, std::int64_t B, std::int64_t T, std::byte* ws,
                        gpu::BlasLane lane) = 0;
  // One step: rows with reset[b] != 0 (nullable) start from the zero state; state (B, state_features())
  // with rows state_stride floats apart, updated in place; y (B, C) from x (B, C).
  virtual void step(float* y, float* state, std::int64_t state_stride, const float* x, const std::uint8_t* reset,
                    std::int64_t B, std::byte* ws, gpu::BlasLane lane) = 0;
};

}  // namespace foxhunt::models
