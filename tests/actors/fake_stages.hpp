#pragma once
// Fake stages on the FakeDevice: each "kernel" writes or checks generations in a fake device
// memory, so the tests see whether the protocol ever let a resource be rewritten while queued work
// still read it, and whether the replay ratio held. Knobs inject failures.
#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "actors/stages.hpp"
#include "tests/actors/fake_device.hpp"

namespace foxhunt::actors::test {

// Everything the fake kernels touch, plus what the tests check afterwards.
struct FakeMemory {
  explicit FakeMemory(int slots, int batches) : slot(slots), batch(batches), td(batches) {}
  std::vector<std::uint64_t> slot, batch, td;  // generation last written
  std::uint64_t snapshot = 0;                  // version last written
  std::uint64_t policy[2] = {0, 0};            // version in each policy buffer
  std::uint64_t params = 0;                    // updates applied (the learner's "weights")
  std::uint64_t target = 0;                    // version the target network holds
  std::int64_t inserted = 0;                   // transitions inserted
  // Host-side observations at enqueue time (the protocol's timing, not its safety):
  std::atomic<int> inserts_enqueued_before_collect_done{0};  // replay stream queued behind a collect
  std::atomic<int> collects_enqueued_before_insert_done{0};  // slot reused, ordered on the device only

  std::atomic<int> violations{0};
  std::mutex mutex;
  std::vector<std::string> messages;
  void violation(const std::string& what) {
    violations.fetch_add(1);
    std::lock_guard lock(mutex);
    if (messages.size() < 20) messages.push_back(what);
  }
};

struct FakeKnobs {
  int slots = 3;
  std::int64_t steps_per_slot = 4;
  int batches = 2;
  std::int64_t batch_size = 8;
  bool sync_writes_learner = false;
  int throw_on_collect = 0;             // collect() throws on this call (1-based; 0: never)
  int fault_on_update = 0;              // update() marks the device faulted on this call
  bool drop_collect_callbacks = false;  // the collector's completion callbacks never fire: a stall
  int hang_on_update = 0;   // update() hangs the learner's stream on this call (FakeDevice::hang)
  int update_sleep_ms = 0;  // each update's kernel takes this long: a slow learner
  // A resumed run: transitions the replay buffer restored, and the collector's restored acting
  // version (-1: none) with the pending versions it holds (CollectorStage::restored_*).
  std::int64_t stored = 0;
  std::int64_t restored_version = -1;
  std::vector<std::int64_t> restored_pending;
};

class FakeStageBase {
 public:
  FakeStageBase(std::shared_ptr<FakeDevice> dev, std::shared_ptr<FakeMemory> mem)
      : dev_(std::move(dev)), mem_(std::move(mem)), s_(dev_->make_stream()) {}

 protected:
  void wait_impl(std::uint64_t e) { dev_->wait(s_, e); }
  void when_done_impl(std::function<void()> fn) {
    if (!drop_callbacks_) dev_->host_fn(s_, std::move(fn));
  }
  void sync_impl() { dev_->synchronize(s_); }
  std::string health_impl() { return dev_->faulted() ? "fake device fault (sticky)" : ""; }
  std::shared_ptr<FakeDevice> dev_;
  std::shared_ptr<FakeMemory> mem_;
  int s_;
  bool drop_callbacks_ = false;
};

#define FOXHUNT_FAKE_STAGE_PLUMBING                                                    \
  void wait(std::uint64_t e) override { wait_impl(e); }                                \
  void when_done(std::function<void()> fn) override { when_done_impl(std::move(fn)); } \
  void synchronize() override { sync_impl(); }                                         \
  std::string health() override { return health_impl(); }

class FakeCollector : public CollectorStage, FakeStageBase {
 public:
  FakeCollector(std::shared_ptr<FakeDevice> d, std::shared_ptr<FakeMemory> m, FakeKnobs k)
      : FakeStageBase(std::move(d), std::move(m)), k_(k) {
    drop_callbacks_ = k.drop_collect_callbacks;
    if (k.restored_version >= 0) {  // acting with restored weights: no policy buffer read
      restored_active_ = true;
      version_ = static_cast<std::uint64_t>(k.restored_version);
    }
  }
  FOXHUNT_FAKE_STAGE_PLUMBING
  int slots() const override { return k_.slots; }
  std::int64_t steps_per_slot() const override { return k_.steps_per_slot; }
  LocalDeviceHandle collect(int slot, std::uint64_t gen, std::uint64_t reuse_after) override {
    if (k_.throw_on_collect > 0 && ++calls_ == k_.throw_on_collect)
      throw std::runtime_error("fake collector: injected CUDA error");
    if (!dev_->completed(reuse_after)) mem_->collects_enqueued_before_insert_done.fetch_add(1);
    dev_->wait(s_, reuse_after);
    const int buf = active_;
    const std::uint64_t expect = version_;
    const bool own_copy = restored_active_;
    auto mem = mem_;
    dev_->kernel(s_, [mem, slot, gen, buf, expect, own_copy] {
      if (!own_copy && mem->policy[buf] != expect)
        mem->violation("collector read policy buffer " + std::to_string(buf) + " version " +
                       std::to_string(mem->policy[buf]) + ", expected " + std::to_string(expect));
      mem->slot[static_cast<std::size_t>(slot)] = gen;
    });
    LocalDeviceHandle h;
    h.event = dev_->record(s_);
    return h;
  }
  std::uint64_t use_policy(const LocalDeviceHandle& p) override {
    const std::uint64_t released = dev_->record(s_);  // after every queued read of the old buffer
    dev_->wait(s_, p.event);
    active_ = p.slot;
    version_ = p.count;
    restored_active_ = false;
    return released;
  }
  std::int64_t restored_policy_version() const override { return k_.restored_version; }
  std::vector<std::int64_t> restored_pending_policies() const override { return k_.restored_pending; }
  void use_restored_policy(std::int64_t v) override {
    bool held = false;
    for (const std::int64_t p : k_.restored_pending) held = held || p == v;
    if (!held) mem_->violation("use_restored_policy of version " + std::to_string(v) + ", which was not restored");
    version_ = static_cast<std::uint64_t>(v);
    restored_active_ = true;
  }
  bool poll_metrics(Scalars& out) override {
    out = {{"episode_return", 1.0}};
    return true;
  }

 private:
  FakeKnobs k_;
  int calls_ = 0, active_ = 0;
  std::uint64_t version_ = 0;
  bool restored_active_ = false;
};

class FakeReplay : public ReplayStage, FakeStageBase {
 public:
  FakeReplay(std::shared_ptr<FakeDevice> d, std::shared_ptr<FakeMemory> m, FakeKnobs k)
      : FakeStageBase(std::move(d), std::move(m)), k_(k) {
    mem_->inserted = k.stored;
  }
  FOXHUNT_FAKE_STAGE_PLUMBING
  std::int64_t stored() const override { return k_.stored; }
  int batches() const override { return k_.batches; }
  std::int64_t batch_size() const override { return k_.batch_size; }
  std::uint64_t insert(const LocalDeviceHandle& h) override {
    if (!dev_->completed(h.event)) mem_->inserts_enqueued_before_collect_done.fetch_add(1);
    dev_->wait(s_, h.event);
    auto mem = mem_;
    const int slot = h.slot;
    const std::uint64_t gen = h.generation;
    const std::int64_t n = static_cast<std::int64_t>(h.count);
    dev_->kernel(s_, [mem, slot, gen, n] {
      if (mem->slot[static_cast<std::size_t>(slot)] != gen)
        mem->violation("replay read slot " + std::to_string(slot) + " generation " +
                       std::to_string(mem->slot[static_cast<std::size_t>(slot)]) + ", expected " + std::to_string(gen));
      mem->inserted += n;
    });
    return dev_->record(s_);
  }
  LocalDeviceHandle sample(int b, std::uint64_t gen) override {
    auto mem = mem_;
    const std::int64_t need = k_.batch_size;
    dev_->kernel(s_, [mem, b, gen, need] {
      if (mem->inserted < need) mem->violation("sampled before a batch was stored");
      mem->batch[static_cast<std::size_t>(b)] = gen;
    });
    LocalDeviceHandle h;
    h.event = dev_->record(s_);
    return h;
  }
  void update_priorities(int b, const LocalDeviceHandle& td) override {
    dev_->wait(s_, td.event);
    auto mem = mem_;
    const std::uint64_t gen = td.generation;
    dev_->kernel(s_, [mem, b, gen] {
      if (mem->td[static_cast<std::size_t>(b)] != gen)
        mem->violation("priority update read td " + std::to_string(b) + " generation " +
                       std::to_string(mem->td[static_cast<std::size_t>(b)]) + ", expected " + std::to_string(gen));
    });
  }

 private:
  FakeKnobs k_;
};

class FakeLearner : public LearnerStage, FakeStageBase {
 public:
  FakeLearner(std::shared_ptr<FakeDevice> d, std::shared_ptr<FakeMemory> m, FakeKnobs k)
      : FakeStageBase(std::move(d), std::move(m)), k_(k) {}
  FOXHUNT_FAKE_STAGE_PLUMBING
  LocalDeviceHandle update(const LocalDeviceHandle& batch) override {
    if (k_.fault_on_update > 0 && ++calls_ == k_.fault_on_update) dev_->fault();
    if (++updates_ == k_.hang_on_update) dev_->hang(s_);
    dev_->wait(s_, batch.event);
    auto mem = mem_;
    const int b = batch.slot;
    const std::uint64_t gen = batch.generation;
    const std::uint64_t target_expect = target_version_;
    const bool check_target = k_.sync_writes_learner;
    const int sleep_ms = k_.update_sleep_ms;
    dev_->kernel(s_, [mem, b, gen, target_expect, check_target, sleep_ms] {
      if (sleep_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
      if (mem->batch[static_cast<std::size_t>(b)] != gen)
        mem->violation("learner read batch " + std::to_string(b) + " generation " +
                       std::to_string(mem->batch[static_cast<std::size_t>(b)]) + ", expected " + std::to_string(gen));
      if (check_target && mem->target != target_expect)
        mem->violation("learner read target version " + std::to_string(mem->target) + ", expected " +
                       std::to_string(target_expect));
      mem->td[static_cast<std::size_t>(b)] = gen;
      ++mem->params;
    });
    LocalDeviceHandle td;
    td.event = dev_->record(s_);
    return td;
  }
  LocalDeviceHandle snapshot(std::uint64_t version, std::uint64_t reuse_after) override {
    dev_->wait(s_, reuse_after);
    auto mem = mem_;
    dev_->kernel(s_, [mem, version] { mem->snapshot = version; });
    if (k_.sync_writes_learner) target_version_ = version;  // the next update sees this sync's target
    LocalDeviceHandle h;
    h.event = dev_->record(s_);
    return h;
  }
  std::function<void(const std::filesystem::path&)> checkpoint_job() override {
    auto mem = mem_;
    auto copy = std::make_shared<std::uint64_t>(0);
    dev_->kernel(s_, [mem, copy] { *copy = mem->params; });
    auto dev = dev_;
    const int s = s_;
    return [dev, s, copy](const std::filesystem::path& dir) {
      dev->synchronize(s);
      std::ofstream(dir / "learner.txt") << *copy << "\n";
    };
  }
  bool poll_metrics(Scalars& out) override {
    out = {{"loss", 0.5}};
    return true;
  }

 private:
  FakeKnobs k_;
  int calls_ = 0, updates_ = 0;
  std::uint64_t target_version_ = 0;
};

class FakeTargetSync : public TargetSyncStage, FakeStageBase {
 public:
  FakeTargetSync(std::shared_ptr<FakeDevice> d, std::shared_ptr<FakeMemory> m, FakeKnobs k)
      : FakeStageBase(std::move(d), std::move(m)), k_(k) {}
  FOXHUNT_FAKE_STAGE_PLUMBING
  LocalDeviceHandle sync(const LocalDeviceHandle& snap, int buffer, std::uint64_t reuse_after) override {
    dev_->wait(s_, snap.event);
    dev_->wait(s_, reuse_after);
    auto mem = mem_;
    const std::uint64_t version = snap.count;
    const bool target = k_.sync_writes_learner;
    dev_->kernel(s_, [mem, version, buffer, target] {
      if (mem->snapshot != version)
        mem->violation("target-sync read snapshot version " + std::to_string(mem->snapshot) + ", expected " +
                       std::to_string(version));
      mem->policy[buffer] = version;
      if (target) mem->target = version;
    });
    LocalDeviceHandle h;
    h.event = dev_->record(s_);
    return h;
  }
  bool writes_learner_state() const override { return k_.sync_writes_learner; }

 private:
  FakeKnobs k_;
};

#undef FOXHUNT_FAKE_STAGE_PLUMBING

struct FakePipeline {
  std::shared_ptr<FakeDevice> device;
  std::shared_ptr<FakeMemory> memory;
  PipelineStages stages;
  FakePipeline(std::uint64_t seed, FakeKnobs k, int max_pause_us = 30)
      : device(std::make_shared<FakeDevice>(seed, max_pause_us)),
        memory(std::make_shared<FakeMemory>(k.slots, k.batches)) {
    stages.collector = std::make_shared<FakeCollector>(device, memory, k);
    stages.replay = std::make_shared<FakeReplay>(device, memory, k);
    stages.learner = std::make_shared<FakeLearner>(device, memory, k);
    stages.target_sync = std::make_shared<FakeTargetSync>(device, memory, k);
  }
};

}  // namespace foxhunt::actors::test
