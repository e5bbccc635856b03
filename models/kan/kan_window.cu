#include "models/kan/kan_window.hpp"

#include <stdexcept>
#include <string>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"

namespace foxhunt::models {
namespace {

constexpr int kThreads = 256;

// win[(b T + t), l C + c] = x[b, t - lags + 1 + l, c], 0 before the sequence start.
__global__ void gather_windows_kernel(float* __restrict__ win, const float* __restrict__ x, std::int64_t B, int T,
                                      int C, int lags) {
  const std::int64_t width = static_cast<std::int64_t>(lags) * C;
  const std::int64_t n = B * T * width;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t row = e / width;
    const int k = static_cast<int>(e % width), l = k / C, c = k % C;
    const int t = static_cast<int>(row % T), src = t - lags + 1 + l;
    win[e] = src >= 0 ? x[(row - t + src) * C + c] : 0.f;
  }
}

// d_x[b, t, c] = sum over the windows that read step t (rows t' = t + lags - 1 - l < T), l ascending.
__global__ void scatter_windows_kernel(float* __restrict__ dx, const float* __restrict__ dwin, std::int64_t B, int T,
                                       int C, int lags) {
  const std::int64_t width = static_cast<std::int64_t>(lags) * C;
  const std::int64_t n = B * T * C;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const int c = static_cast<int>(e % C);
    const std::int64_t row = e / C;  // b T + t
    const int t = static_cast<int>(row % T);
    float s = 0.f;
    for (int l = 0; l < lags; ++l) {
      const int tt = t + lags - 1 - l;
      if (tt < T) s += dwin[(row - t + tt) * width + static_cast<std::int64_t>(l) * C + c];
    }
    dx[e] = s;
  }
}

// One step's windows: win[b] = [state[b] (zeros when reset[b]), in[b]].
__global__ void step_window_kernel(float* __restrict__ win, const float* __restrict__ state,
                                   const float* __restrict__ in, const std::uint8_t* __restrict__ reset,
                                   std::int64_t B, int C, int lags) {
  const std::int64_t width = static_cast<std::int64_t>(lags) * C, s_width = width - C;
  const std::int64_t n = B * width;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t b = e / width, k = e % width;
    float v;
    if (k >= s_width)
      v = in[b * C + (k - s_width)];
    else
      v = (reset != nullptr && reset[b] != 0) ? 0.f : state[b * s_width + k];
    win[e] = v;
  }
}

// state[b] = win[b, C:] (the last lags - 1 inputs).
__global__ void step_state_kernel(float* __restrict__ state, const float* __restrict__ win, std::int64_t B, int C,
                                  int lags) {
  const std::int64_t width = static_cast<std::int64_t>(lags) * C, s_width = width - C;
  const std::int64_t n = B * s_width;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t b = e / s_width, k = e % s_width;
    state[e] = win[b * width + C + k];
  }
}

}  // namespace

KanWindow::KanWindow(KanWindowSpec spec) : spec_(std::move(spec)), net_(spec_.network) {
  if (spec_.in < 1 || spec_.lags < 1 || spec_.sequence_length < 1)
    throw std::invalid_argument("KanWindow: in, lags and sequence_length must be >= 1");
  if (spec_.network.widths.front() != window_width())
    throw std::invalid_argument("KanWindow: the network's input width " + std::to_string(spec_.network.widths.front()) +
                                " must be lags x in = " + std::to_string(window_width()));
}

std::size_t KanWindow::workspace_bytes(std::int64_t max_batch, bool) const {
  const std::int64_t rows = max_batch * spec_.sequence_length;
  WorkspaceCarver c;
  c.take<float>(static_cast<std::size_t>(rows * window_width()));  // windows
  c.take<float>(static_cast<std::size_t>(rows * window_width()));  // their gradients
  c.take_workspace(net_.workspace_bytes(rows, false), rows, false);
  return c.bytes();
}

void KanWindow::forward(float* out, const float* in, std::int64_t batch, bool eval, const Workspace& ws,
                        gpu::BlasLane lane) {
  FH_EXPECT(batch >= 1 && batch <= ws.max_batch, "KanWindow: batch " + std::to_string(batch) + " outside [1, " +
                                                     std::to_string(ws.max_batch) + "]");
  const std::int64_t T = spec_.sequence_length, rows = ws.max_batch * T;
  WorkspaceCarver c(ws.data);
  float* win = c.take<float>(static_cast<std::size_t>(rows * window_width()));
  c.take<float>(static_cast<std::size_t>(rows * window_width()));
  const Workspace net_ws = c.take_workspace(net_.workspace_bytes(rows, false), rows, false);
  gather_windows_kernel<<<gpu::grid_stride_blocks(batch * T * window_width()), kThreads, 0, lane.stream>>>(
      win, in, batch, static_cast<int>(T), static_cast<int>(spec_.in), static_cast<int>(spec_.lags));
  FH_CHECK(cudaGetLastError());
  net_.forward(out, win, batch * T, eval, net_ws, lane);
}

void KanWindow::backward(float* d_in, const float* d_out, const float*, std::int64_t batch, const Workspace& ws,
                         gpu::BlasLane lane, const SideLane* side) {
  const std::int64_t T = spec_.sequence_length, rows = ws.max_batch * T;
  WorkspaceCarver c(ws.data);
  const float* win = c.take<float>(static_cast<std::size_t>(rows * window_width()));
  float* d_win = c.take<float>(static_cast<std::size_t>(rows * window_width()));
  const Workspace net_ws = c.take_workspace(net_.workspace_bytes(rows, false), rows, false);
  net_.backward(d_in != nullptr ? d_win : nullptr, d_out, win, batch * T, net_ws, lane, side);
  if (d_in != nullptr) {
    scatter_windows_kernel<<<gpu::grid_stride_blocks(batch * T * spec_.in), kThreads, 0, lane.stream>>>(
        d_in, d_win, batch, static_cast<int>(T), static_cast<int>(spec_.in), static_cast<int>(spec_.lags));
    FH_CHECK(cudaGetLastError());
  }
}

std::size_t KanWindow::step_workspace_bytes(std::int64_t max_batch) const {
  WorkspaceCarver c;
  c.take<float>(static_cast<std::size_t>(max_batch * window_width()));
  c.take_workspace(net_.workspace_bytes(max_batch, false), max_batch, false);
  return c.bytes();
}

void KanWindow::step(float* out, float* state, const float* in, const std::uint8_t* reset, std::int64_t batch,
                     const Workspace& ws, gpu::BlasLane lane) {
  FH_EXPECT(batch >= 1 && batch <= ws.max_batch, "KanWindow: step batch " + std::to_string(batch) + " outside [1, " +
                                                     std::to_string(ws.max_batch) + "]");
  WorkspaceCarver c(ws.data);
  float* win = c.take<float>(static_cast<std::size_t>(ws.max_batch * window_width()));
  const Workspace net_ws = c.take_workspace(net_.workspace_bytes(ws.max_batch, false), ws.max_batch, false);
  const int C = static_cast<int>(spec_.in), lags = static_cast<int>(spec_.lags);
  step_window_kernel<<<gpu::grid_stride_blocks(batch * window_width()), kThreads, 0, lane.stream>>>(
      win, state, in, reset, batch, C, lags);
  FH_CHECK(cudaGetLastError());
  if (spec_.lags > 1) {
    step_state_kernel<<<gpu::grid_stride_blocks(batch * state_features()), kThreads, 0, lane.stream>>>(state, win, batch,
                                                                                                      C, lags);
    FH_CHECK(cudaGetLastError());
  }
  net_.forward(out, win, batch, true, net_ws, lane);
}

std::size_t KanWindow::grid_update_workspace_bytes(std::int64_t max_batch) const {
  const std::int64_t rows = max_batch * spec_.sequence_length;
  WorkspaceCarver c;
  c.take<float>(static_cast<std::size_t>(rows * window_width()));
  c.take_workspace(net_.grid_update_workspace_bytes(rows), rows, false);
  return c.bytes();
}

void KanWindow::update_grid(const float* in, std::int64_t batch, const Workspace& ws, gpu::BlasLane lane) {
  FH_EXPECT(batch >= 1 && batch <= ws.max_batch, "KanWindow: update_grid batch " + std::to_string(batch) +
                                                     " outside [1, " + std::to_string(ws.max_batch) + "]");
  const std::int64_t T = spec_.sequence_length, rows = ws.max_batch * T;
  WorkspaceCarver c(ws.data);
  float* win = c.take<float>(static_cast<std::size_t>(rows * window_width()));
  const Workspace net_ws = c.take_workspace(net_.grid_update_workspace_bytes(rows), rows, false);
  gather_windows_kernel<<<gpu::grid_stride_blocks(batch * T * window_width()), kThreads, 0, lane.stream>>>(
      win, in, batch, static_cast<int>(T), static_cast<int>(spec_.in), static_cast<int>(spec_.lags));
  FH_CHECK(cudaGetLastError());
  net_.update_grid(win, batch * T, net_ws, lane);
}

}  // namespace foxhunt::models
