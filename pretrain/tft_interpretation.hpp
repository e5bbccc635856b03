#pragma once
// TftInterpretation: what a Temporal Fusion Transformer looks at, averaged over the windows of a
// validation, computed on the device from the weights its forward leaves in the workspace
// (models/tft/tft.hpp) and leaving it once through an exit:
//   attention  (heads, T): how much the window's last position (the forecast's) attends to each of
//              the T steps, per head, mean over the windows;
//   selection  (T, V): the variable selection weights of each step, V = C + K (past inputs, then
//              the known ones), mean over the windows.
// Sums are accumulated in double per batch (accumulate, after each forward) and published
// (publish); wait() reads them on the host and divides by the window count.
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "gpu/buffer.hpp"
#include "gpu/exit.hpp"
#include "models/module.hpp"

namespace foxhunt::models::tft {
class Tft;
}

namespace foxhunt::pretrain {

struct TftWeights {
  std::int64_t heads = 0, steps = 0, variables = 0, windows = 0;
  std::vector<double> attention;  // (heads, steps)
  std::vector<double> selection;  // (steps, variables)
};

class TftInterpretation {
 public:
  explicit TftInterpretation(const models::tft::Tft& tft);

  // Zeroes the sums (before a validation's first batch).
  void reset(cudaStream_t stream);
  // Adds the `batch` windows of the forward that just ran in ws (on `stream`, after it).
  void accumulate(const models::Workspace& ws, std::int64_t batch, cudaStream_t stream);
  // Publishes the sums over the windows accumulated since reset.
  void publish(cudaStream_t stream);
  // Blocks until the published sums are on the host; returns their means.
  TftWeights wait() const;

 private:
  const models::tft::Tft& tft_;
  std::int64_t heads_, steps_, variables_, windows_ = 0;
  gpu::DeviceBuffer<double> sums_;  // attention (heads T), then selection (T V)
  gpu::ExitArray<double> exit_;
};

}  // namespace foxhunt::pretrain
