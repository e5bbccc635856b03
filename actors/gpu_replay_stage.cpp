#include "actors/gpu_replay_stage.hpp"

#include <algorithm>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>

#include "gpu/check.hpp"
#include "gpu/checkpoint_io.hpp"
#include "gpu/safetensors.hpp"

namespace foxhunt::actors {

GpuReplayStage::GpuReplayStage(const rl::ReplayConfig& config, const TransitionSlotLayout& slot_layout, int slots,
                               int batches, int device, bool staged)
    : lane_(device), slot_layout_(slot_layout) {
  FH_EXPECT(slots >= 1, "pipeline.slots must be >= 1, got " + std::to_string(slots));
  FH_EXPECT(batches >= 1, "pipeline.batches must be >= 1, got " + std::to_string(batches));
  FH_EXPECT(slot_layout.layout == config.layout, "the collector's transition layout differs from replay.layout");
  buffer_ = std::make_unique<rl::ReplayBuffer>(config, lane_.stream());
  producer_ = buffer_->add_producer(slot_layout.envs);
  for (int b = 0; b < batches; ++b) batches_.push_back(buffer_->allocate_batch());
  insert_done_.resize(static_cast<std::size_t>(slots));
  batch_ready_.resize(static_cast<std::size_t>(batches));
  pending_.resize(static_cast<std::size_t>(batches));
  td_.assign(static_cast<std::size_t>(batches), nullptr);
  td_generation_ = std::vector<std::atomic<std::uint64_t>>(static_cast<std::size_t>(batches));
  if (staged)
    for (int k = 0; k < slots; ++k) staging_.emplace_back(slot_layout.bytes);
  lane_.synchronize();  // allocation and initialisation done before the first actor call
}

GpuReplayStage::~GpuReplayStage() { (void)cudaSetDevice(lane_.device()); }

std::uint64_t GpuReplayStage::insert(const LocalDeviceHandle& slot) {
  FH_EXPECT(slot.slot >= 0 && slot.slot < static_cast<int>(insert_done_.size()), "transition slot out of range");
  FH_EXPECT(slot.bytes == 0 || slot.bytes >= slot_layout_.bytes, "transition slot smaller than its layout");
  lane_.make_current();
  lane_.wait(slot.event);
  const gpu::Event& done = insert_done_[static_cast<std::size_t>(slot.slot)];
  if (staged()) {
    std::byte* copy = staging_[static_cast<std::size_t>(slot.slot)].data();
    const int token = lane_.begin("slot copy");
    FH_CHECK(cudaMemcpyPeerAsync(copy, lane_.device(), slot.as<const void>(), slot.device, slot_layout_.bytes,
                                 lane_.stream()));
    lane_.end(token);
    done.record(lane_.stream());  // the collector's slot is free again: it may refill it now
    const int insert = lane_.begin("insert");
    buffer_->insert(producer_, slot_layout_.view(copy), lane_.stream());
    lane_.end(insert);
    return event_id(done.get());
  }
  const int token = lane_.begin("insert");
  buffer_->insert(producer_, slot_layout_.view(slot.as<const void>()), lane_.stream());
  lane_.end(token);
  done.record(lane_.stream());
  return event_id(done.get());
}

LocalDeviceHandle GpuReplayStage::sample(int b, std::uint64_t generation) {
  lane_.make_current();
  rl::SampledBatchView v = batches_.at(static_cast<std::size_t>(b)).view();
  const int token = lane_.begin("sample");
  // A resumed run: sample u is preceded by the priority update of sample u - batches (as the
  // deterministic pipeline orders them), and the stopped run's were still pending: the first
  // batches - k samples had none there (k pending: fewer than batches updates were done).
  if (skip_restored_ > 0) {
    --skip_restored_;
  } else if (next_restored_ < restored_.size()) {
    auto& [indices, td] = restored_[next_restored_++];
    buffer_->update_priorities(indices.data(), td.data(), static_cast<std::int64_t>(indices.size()), lane_.stream());
  }
  buffer_->sample(v, lane_.stream());
  pending_[static_cast<std::size_t>(b)] = {++samples_, generation, true};
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
  pending_.at(static_cast<std::size_t>(b)).open = false;
}

void GpuReplayStage::attach_td(int b, const float* td) {
  FH_EXPECT(b >= 0 && b < batches() && td != nullptr, "GpuReplayStage::attach_td: batch buffer out of range or null");
  td_[static_cast<std::size_t>(b)] = td;
}

std::function<void(const std::filesystem::path& dir)> GpuReplayStage::checkpoint_job() {
  return [this](const std::filesystem::path& dir) {
    lane_.make_current();
    buffer_->save(dir / kCheckpointFile, lane_.stream());  // synchronizes the replay stream first

    // Pending priority updates, oldest first: restored ones not applied yet (a resume that did
    // fewer than `batches` updates), then this run's samples whose TD errors the learner wrote
    // for that very sample (a sample the learner never used has none, and is dropped).
    std::vector<std::pair<const std::int32_t*, const float*>> list;
    for (std::size_t r = next_restored_; r < restored_.size(); ++r)
      list.emplace_back(restored_[r].first.data(), restored_[r].second.data());
    std::vector<std::size_t> open;
    for (std::size_t b = 0; b < pending_.size(); ++b)
      if (pending_[b].open && td_[b] && td_generation_[b].load(std::memory_order_acquire) == pending_[b].generation)
        open.push_back(b);
    std::sort(open.begin(), open.end(),
              [this](std::size_t x, std::size_t y) { return pending_[x].ordinal < pending_[y].ordinal; });
    for (const std::size_t b : open) list.emplace_back(batches_[b].view().indices, td_[b]);
    if (list.empty()) return;
    const auto B = static_cast<std::size_t>(batch_size());
    std::vector<std::int32_t> indices(list.size() * B);
    std::vector<float> td(list.size() * B);
    // Checkpoint I/O (small: batches x batch_size): device to host after the streams went idle.
    std::vector<gpu::CheckpointCopy> copies;
    copies.reserve(2 * list.size());
    for (std::size_t k = 0; k < list.size(); ++k) {
      copies.push_back({indices.data() + k * B, list[k].first, B * sizeof(std::int32_t)});
      copies.push_back({td.data() + k * B, list[k].second, B * sizeof(float)});
    }
    gpu::checkpoint_read(copies, lane_.stream());
    const std::vector<std::int64_t> shape = {static_cast<std::int64_t>(list.size()), static_cast<std::int64_t>(B)};
    const std::vector<gpu::SafetensorsTensor> tensors = {
        {"indices", gpu::DType::i32, shape, std::as_bytes(std::span<const std::int32_t>(indices))},
        {"td", gpu::DType::f32, shape, std::as_bytes(std::span<const float>(td))}};
    gpu::write_safetensors_file(dir / kPendingFile, tensors, {{"format", "foxhunt-replay-pending"}, {"version", "1"}});
  };
}

bool GpuReplayStage::restore(const std::filesystem::path& dir) {
  const std::filesystem::path file = dir / kCheckpointFile;
  if (!std::filesystem::exists(file)) return false;
  FH_EXPECT(samples_ == 0 && buffer_->inserted() == 0, "GpuReplayStage::restore: only before the first insert");

  // The pending updates first (all checks before anything changes).
  std::vector<std::int32_t> indices;
  std::vector<float> td;
  std::int64_t k = 0;
  const std::int64_t B = batch_size();
  const std::filesystem::path pending = dir / kPendingFile;
  if (std::filesystem::exists(pending)) {
    const std::vector<std::byte> bytes = gpu::read_file_bytes(pending);
    const gpu::SafetensorsFile f = gpu::parse_safetensors(bytes, pending.string());
    const gpu::SafetensorsEntry* ei = f.find("indices");
    const gpu::SafetensorsEntry* et = f.find("td");
    const auto fmt = f.metadata.find("format");
    if (fmt == f.metadata.end() || fmt->second != "foxhunt-replay-pending" || !ei || !et ||
        ei->dtype != gpu::DType::i32 || et->dtype != gpu::DType::f32 || ei->shape.size() != 2 ||
        ei->shape != et->shape || ei->shape[1] != B || ei->shape[0] > batches())
      throw std::runtime_error("cannot load " + pending.string() +
                               ": expected format foxhunt-replay-pending with "
                               "'indices' I32 and 'td' F32 of shape (k <= pipeline.batches = " +
                               std::to_string(batches()) + ", replay.batch_size = " + std::to_string(B) + ")");
    k = ei->shape[0];
    indices.resize(static_cast<std::size_t>(k * B));
    td.resize(indices.size());
    std::memcpy(indices.data(), f.bytes(*ei).data(), indices.size() * sizeof(std::int32_t));  // data may be unaligned
    std::memcpy(td.data(), f.bytes(*et).data(), td.size() * sizeof(float));
  }
  lane_.make_current();
  buffer_->load(file, lane_.stream());  // validates the whole file; unchanged on any problem
  restored_.clear();
  next_restored_ = 0;
  skip_restored_ = k > 0 ? batches() - k : 0;
  for (std::int64_t j = 0; j < k; ++j) {
    const auto off = static_cast<std::ptrdiff_t>(j * B);
    restored_.emplace_back(gpu::DeviceBuffer<std::int32_t>(static_cast<std::size_t>(B)),
                           gpu::DeviceBuffer<float>(static_cast<std::size_t>(B)));
    restored_.back().first.upload(std::span<const std::int32_t>(indices.data() + off, static_cast<std::size_t>(B)),
                                  lane_.stream());
    restored_.back().second.upload(std::span<const float>(td.data() + off, static_cast<std::size_t>(B)),
                                   lane_.stream());
  }
  lane_.synchronize();  // the host staging vectors die with this function
  return true;
}

}  // namespace foxhunt::actors
