#pragma once
// While a StreamPriorityScope is alive, every gpu::Stream its thread creates gets `priority`
// (CUDA's convention: lower numbers are higher priorities, 0 the default; CUDA clamps to
// cudaDeviceGetStreamPriorityRange, -5..0 on an H100). Several agents in one run build their
// stages inside their own scope, so every stream of an agent (its stages' lanes and any stream the
// rl/ classes create for it) shares the agent's priority without each constructor taking one.
// Scopes nest.
namespace foxhunt::gpu {

class StreamPriorityScope {
 public:
  explicit StreamPriorityScope(int priority);
  ~StreamPriorityScope();
  StreamPriorityScope(const StreamPriorityScope&) = delete;
  StreamPriorityScope& operator=(const StreamPriorityScope&) = delete;
  static int current() noexcept;  // the priority new streams of this thread get (0 outside any scope)

 private:
  int previous_;
};

}  // namespace foxhunt::gpu
