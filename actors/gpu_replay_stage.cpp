#include "actors/gpu_replay_stage.hpp"

#include <string>

#include "gpu/check.hpp"

namespace foxhunt::actors {

GpuReplayStage::GpuReplayStage(const rl::ReplayConfig& config, const TransitionSlotLayout& slot_layout, int slots,
                               int batches, int device)
    : lane_(device), slot_layout_(slot_layout) {
  FH_EXPECT(slots >= 1, "pipeline.slots must be >= 1, got " + std::to_string(slots));
  FH_EXPECT(batches >= 1, "pipeline.batches must be >= 1, got " + std::to_string(batches));
  FH_EXPECT(slot_layout.layout == config.layout, "the collector's transition layout differs from replay.layout");
  buffer_ = std::make_unique<rl::ReplayBuffer>(config, lane_.stream());
  producer_ = buffer_->add_producer(slot_layout.envs);
  for (int b = 0; b < batches; ++b) batches_.push_back(buffer_->allocate_batch());
  insert_done_.resize(static_cast<std::size_t>(slots));
  batch_ready_.resize(static_cast<std::size_t>(batches));
  lane_.synchronize();  // allocation and initialisation done before the first actor call
}

std::uint64_t GpuReplayStage::insert(const LocalDeviceHandle& slot) {
  FH_EXPECT(slot.slot >= 0 && slot.slot < static_cast<int>(insert_done_.size()), "transition slot out of range");
  FH_EXPECT(slot.bytes == 0 || slot.bytes >= slot_layout_.bytes, "transition slot smaller than its layout");
  lane_.make_current();
  lane_.wait(slot.event);
  const int token = lane_.begin("insert");
  buffer_->insert(producer_, slot_layout_.view(slot.as<const void>()), lane_.stream());
  lane_.end(token);
  const gpu::Event& done = insert_done_[static_cast<std::size_t>(slot.slot)];
  done.record(lane_.stream());
  return event_id(done.get());
}

LocalDeviceHandle GpuReplayStage::sample(int b, std::uint64_t generation) {
  lane_.make_current();
  rl::SampledBatchView v = batches_.at(static_cast<std::size_t>(b)).view();
  const int token = lane_.begin("sample");
  buffer_->sample(v, lane_.stream());
  lane_.end(token);
  const gpu::Event& ready = batch_ready_[static_cast<std::size_t>(b)];
  ready.record(lane_.stream());
  LocalDeviceHandle h;
  h.device = lane_.device();
  h.ptr = LocalDeviceHandle::address(v.indices);
  h.bytes = static_cast<std::uint64_t>(v.batch) * sizeof(std::int32_t);
  h.dtype = static_cast<std::uint8_t>(gpu::DType::i32);
  h.rank = 1;
  h.dims = {v.batch, 0, 0, 0};
  h.slot = b;
  h.generation = generation;
  h.event = event_id(ready.get());
  return h;
}

void GpuReplayStage::update_priorities(int b, const LocalDeviceHandle& td) {
  lane_.make_current();
  lane_.wait(td.event);
  rl::SampledBatchView v = batches_.at(static_cast<std::size_t>(b)).view();
  buffer_->update_priorities(v.indices, td.as<const float>(), v.batch, lane_.stream());
}

std::function<void(const std::filesystem::path& dir)> GpuReplayStage::checkpoint_job() {
  return [this](const std::filesystem::path& dir) {
    lane_.make_current();
    buffer_->save(dir / kCheckpointFile, lane_.stream());  // synchronizes the replay stream first
  };
}

bool GpuReplayStage::restore(const std::filesystem::path& dir) {
  const std::filesystem::path file = dir / kCheckpointFile;
  if (!std::filesystem::exists(file)) return false;
  lane_.make_current();
  buffer_->load(file, lane_.stream());
  return true;
}

}  // namespace foxhunt::actors
