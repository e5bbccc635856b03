#include "rl/replay/ring.hpp"

namespace foxhunt::rl {

namespace {
constexpr std::size_t align256(std::size_t b) { return (b + 255) / 256 * 256; }
}  // namespace

ReplayRing::ReplayRing(std::int64_t capacity, const TransitionLayout& layout) {
  const std::size_t c = static_cast<std::size_t>(capacity);
  const std::size_t obs_bytes =
      align256(c * static_cast<std::size_t>(layout.obs_dim) * gpu::dtype_size(layout.obs_dtype));
  const std::size_t act_bytes = align256(c * static_cast<std::size_t>(layout.action_dim) * 4);
  const std::size_t f32_bytes = align256(c * 4);
  const std::size_t u8_bytes = align256(c);
  const std::size_t total = 2 * obs_bytes + act_bytes + 4 * f32_bytes + u8_bytes;
  storage_ = gpu::DeviceBuffer<std::byte>(total);

  std::byte* p = storage_.data();
  auto take = [&p](std::size_t b) {
    std::byte* q = p;
    p += b;
    return q;
  };
  view_.obs = take(obs_bytes);
  view_.next_obs = take(obs_bytes);
  view_.actions = reinterpret_cast<std::uint32_t*>(take(act_bytes));
  view_.rewards = reinterpret_cast<float*>(take(f32_bytes));
  view_.returns = reinterpret_cast<float*>(take(f32_bytes));
  view_.discounts = reinterpret_cast<float*>(take(f32_bytes));
  view_.bootstrap = reinterpret_cast<std::int32_t*>(take(f32_bytes));
  view_.flags = reinterpret_cast<std::uint8_t*>(take(u8_bytes));
  view_.capacity = capacity;
  view_.obs_dim = layout.obs_dim;
  view_.action_dim = layout.action_dim;
  view_.obs_bf16 = layout.obs_dtype == gpu::DType::bf16;
}

}  // namespace foxhunt::rl
