#pragma once
// GpuReplayStage: the replay role on the device, around rl::ReplayBuffer, on its own stream.
// insert() reads a collector slot (TransitionSlotLayout at handle.ptr) after waiting its event;
// sample() fills one of `batches` SampledBatch buffers with the graph-safe sampler (beta from the
// device's sample count: no host value involved); update_priorities() reads the learner's TD
// errors (handle.ptr, batch_size floats) after waiting their event.
//
// The learner's update graph bakes pointers, so it is captured once per batch buffer: it gets
// the buffers' views from batch_view(b) at construction, and a batch handle names the buffer by
// its slot (handle.ptr = the indices array, as a check).
//
// Placement "split" (staged): the collector's slots live on another device (or, tested, the
// same one through the same path). insert() then copies the slot (TransitionSlotLayout bytes)
// with cudaMemcpyPeerAsync into a staging slot of this device, on this stream after the slot's
// event, and inserts from the copy; the returned event marks the end of the copy, so the
// collector rewrites its slot while replay still inserts. A staging slot is rewritten by the next
// insert of the same slot index, which this stream orders after the previous insert's read.
//
// Resume: a final checkpoint holds the buffer (kCheckpointFile) and the priority updates whose TD
// errors the learner had written but replay had not applied yet (kPendingFile: deterministic
// mode applies update u right before sample u + batches, so the last `batches` of them are still
// pending at the stop). After restore() they are applied in their order, one right before each
// of the first samples, exactly where the uninterrupted run applies them (this assumes the
// deterministic pipeline's order: sample u is preceded by the update of sample u - batches).
#include <atomic>
#include <filesystem>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "actors/cuda_lane.hpp"
#include "actors/stages.hpp"
#include "actors/transition_slot.hpp"
#include "gpu/buffer.hpp"
#include "gpu/stream.hpp"
#include "rl/replay/replay_buffer.hpp"

namespace foxhunt::actors {

class GpuReplayStage final : public ReplayStage {
 public:
  // `slots`: the collector's transition slots (one insert event each). `staged`: copy each slot
  // to a staging slot on this device before inserting (placement "split", see above).
  GpuReplayStage(const rl::ReplayConfig& config, const TransitionSlotLayout& slot_layout, int slots, int batches,
                 int device = 0, bool staged = false);
  ~GpuReplayStage() override;  // frees on its own device (actors/dqn_stages.cpp says why)

  void wait(std::uint64_t event) override { lane_.wait(event); }
  void when_done(std::function<void()> fn) override { lane_.when_done(std::move(fn)); }
  void synchronize() override { lane_.synchronize(); }
  std::string health() override { return lane_.health(); }

  int batches() const override { return static_cast<int>(batches_.size()); }
  std::int64_t batch_size() const override { return buffer_->config().batch_size; }
  std::int64_t stored() const override { return buffer_->size(); }
  std::uint64_t insert(const LocalDeviceHandle& slot) override;
  LocalDeviceHandle sample(int batch, std::uint64_t generation) override;
  void update_priorities(int batch, const LocalDeviceHandle& td) override;

  // The replay part of a FINAL checkpoint (pipeline quiesced): a job writing kCheckpointFile
  // (rl::ReplayBuffer::save: ring, priority tree, device state, host slot counts) into a
  // directory. The DQN collector runs it with its own checkpoint job (DqnCollectorStage::
  // attach_replay). The learner's periodic checkpoints do not carry it (taken while inserts run);
  // with checkpoint.replay = "always" periodic checkpoints are segment ends that do (train_run).
  std::function<void(const std::filesystem::path& dir)> checkpoint_job();
  // Setup only, before the first insert (synchronizes): loads dir/kCheckpointFile. False (nothing
  // changed) when the file is absent; std::runtime_error (buffer unchanged) when it does not fit.
  bool restore(const std::filesystem::path& dir);
  static constexpr const char* kCheckpointFile = "replay.safetensors";
  static constexpr const char* kPendingFile = "replay.pending.safetensors";

  // The learner's TD-error buffer of batch buffer b (batch_size floats on the device), read by a
  // final checkpoint for the pending priority updates. Setup only.
  void attach_td(int b, const float* td);
  // The learner has enqueued the update of batch buffer b's sample `generation`, which writes the
  // attached TD buffer (called from the learner's thread; the checkpoint, taken with every actor
  // idle, only counts a pending update whose TD errors belong to its sample).
  void td_written(int b, std::uint64_t generation) {
    td_generation_.at(static_cast<std::size_t>(b)).store(generation, std::memory_order_release);
  }

  rl::SampledBatchView batch_view(int b) { return batches_.at(static_cast<std::size_t>(b)).view(); }
  cudaStream_t stream() const noexcept { return lane_.stream(); }
  rl::ReplayBuffer& buffer() noexcept { return *buffer_; }
  bool record_timeline(StreamTimeline* t) override {
    lane_.set_timeline(t, "replay");
    return true;
  }
  bool staged() const noexcept { return !staging_.empty(); }

 private:
  CudaLane lane_;
  TransitionSlotLayout slot_layout_;
  std::unique_ptr<rl::ReplayBuffer> buffer_;
  int producer_ = 0;
  std::vector<rl::SampledBatch> batches_;
  std::vector<gpu::Event> insert_done_, batch_ready_;
  std::vector<gpu::DeviceBuffer<std::byte>> staging_;  // staged: one per collector slot

  // Pending priority updates (replay's thread): per batch buffer, its latest sample's ordinal and
  // generation, and whether its priorities were applied since.
  struct Pending {
    std::uint64_t ordinal = 0, generation = 0;
    bool open = false;
  };
  std::vector<Pending> pending_;
  std::uint64_t samples_ = 0;
  std::vector<const float*> td_;
  std::vector<std::atomic<std::uint64_t>> td_generation_;  // per batch buffer, from td_written()
  // Restored pending updates (indices, TD errors), applied one per sample from next_restored_.
  std::vector<std::pair<gpu::DeviceBuffer<std::int32_t>, gpu::DeviceBuffer<float>>> restored_;
  std::size_t next_restored_ = 0;
  std::int64_t skip_restored_ = 0;  // samples before the first restored update (see sample())
};

}  // namespace foxhunt::actors
