#pragma once
// Fake PPO stages on the FakeDevice (tests/actors/fake_device.hpp): the "kernels" write and check
// generations and policy versions in a fake device memory, so a test sees whether the PPO
// protocol (actors/ppo_pipeline.hpp) ever let a rollout slot or a policy buffer be rewritten while
// queued work still read it, and which policy version each rollout acted with.
#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "actors/ppo_pipeline.hpp"
#include "tests/actors/fake_device.hpp"

namespace foxhunt::actors::test {

struct FakePpoMemory {
  explicit FakePpoMemory(int slots) : slot(static_cast<std::size_t>(slots), 0) {}
  std::vector<std::uint64_t> slot;   // generation last written
  std::uint64_t policy[2] = {0, 0};  // version in each policy buffer
  std::int64_t params = 0;           // the learner's weights: updates applied
  std::int64_t acting = 0;           // the collector's acting copy: its version
  std::map<std::int64_t, std::int64_t> acted;  // rollout index -> version it acted with
  std::int64_t updates_applied = 0;

  std::atomic<int> violations{0};
  std::mutex mutex;
  std::vector<std::string> messages;
  void violation(const std::string& what) {
    violations.fetch_add(1);
    std::lock_guard lock(mutex);
    if (messages.size() < 20) messages.push_back(what);
  }
  std::string report() {
    std::lock_guard lock(mutex);
    std::string s;
    for (auto& m : messages) s += m + "\n";
    return s;
  }
};

struct FakePpoKnobs {
  int policy_lag = 0;
  std::int64_t steps_per_rollout = 16;
  int throw_on_collect = 0;     // collect() throws on this call (1-based; 0: never)
  int hang_on_update = 0;       // update() hangs the learner's stream on this call (FakeDevice::hang)
  std::int64_t start_rollouts = 0;   // a resumed run: rollouts collected (and updated) before
  std::int64_t restored_version = -1;  // the collector's restored acting version (-1: none)
};

class FakePpoBase {
 public:
  FakePpoBase(std::shared_ptr<FakeDevice> dev, std::shared_ptr<FakePpoMemory> mem)
      : dev_(std::move(dev)), mem_(std::move(mem)), s_(dev_->make_stream()) {}

 protected:
  std::shared_ptr<FakeDevice> dev_;
  std::shared_ptr<FakePpoMemory> mem_;
  int s_;
};

#define FOXHUNT_FAKE_PPO_PLUMBING                                                                \
  void wait(std::uint64_t e) override { dev_->wait(s_, e); }                                     \
  void when_done(std::function<void()> fn) override { dev_->host_fn(s_, std::move(fn)); }        \
  void synchronize() override { dev_->synchronize(s_); }                                         \
  std::string health() override { return dev_->faulted() ? "fake device fault (sticky)" : ""; }

class FakePpoCollector : public PpoCollectorStage, FakePpoBase {
 public:
  FakePpoCollector(std::shared_ptr<FakeDevice> d, std::shared_ptr<FakePpoMemory> m, FakePpoKnobs k)
      : FakePpoBase(std::move(d), std::move(m)), k_(k), rollout_(k.start_rollouts) {
    mem_->acting = k.restored_version >= 0 ? k.restored_version : k.start_rollouts;
  }
  FOXHUNT_FAKE_PPO_PLUMBING
  int rollout_slots() const override { return k_.policy_lag + 1; }
  std::int64_t steps_per_rollout() const override { return k_.steps_per_rollout; }
  LocalDeviceHandle collect(int slot, std::uint64_t gen, std::uint64_t reuse_after) override {
    if (k_.throw_on_collect > 0 && ++calls_ == k_.throw_on_collect)
      throw std::runtime_error("fake ppo collector: injected CUDA error");
    if (slot != static_cast<int>(rollout_ % rollout_slots()))
      mem_->violation("collect into slot " + std::to_string(slot) + " out of turn");
    dev_->wait(s_, reuse_after);
    auto mem = mem_;
    const std::int64_t i = rollout_++;
    dev_->kernel(s_, [mem, slot, gen, i] {
      mem->slot[static_cast<std::size_t>(slot)] = gen;
      mem->acted[i] = mem->acting;
    });
    LocalDeviceHandle h;
    h.event = dev_->record(s_);
    return h;
  }
  std::uint64_t use_policy(const LocalDeviceHandle& p) override {
    dev_->wait(s_, p.event);
    auto mem = mem_;
    const int b = p.slot;
    const auto v = static_cast<std::int64_t>(p.count);
    dev_->kernel(s_, [mem, b, v] {
      if (static_cast<std::int64_t>(mem->policy[b]) != v)
        mem->violation("collector copied policy buffer " + std::to_string(b) + " holding version " +
                       std::to_string(mem->policy[b]) + ", expected " + std::to_string(v));
      mem->acting = v;
    });
    return dev_->record(s_);
  }
  std::int64_t restored_policy_version() const override { return k_.restored_version; }
  std::function<void(const std::filesystem::path&)> checkpoint_job() override {
    auto mem = mem_;
    return [mem](const std::filesystem::path& dir) { std::ofstream(dir / "collector.txt") << mem->acting << "\n"; };
  }
  bool poll_metrics(Scalars& out) override {
    out = {{"episode/return", 1.0}};
    return true;
  }

 private:
  FakePpoKnobs k_;
  std::int64_t rollout_;
  int calls_ = 0;
};

class FakePpoLearner : public PpoLearnerStage, FakePpoBase {
 public:
  FakePpoLearner(std::shared_ptr<FakeDevice> d, std::shared_ptr<FakePpoMemory> m, FakePpoKnobs k)
      : FakePpoBase(std::move(d), std::move(m)), k_(k) {
    mem_->params = k.start_rollouts;
  }
  FOXHUNT_FAKE_PPO_PLUMBING
  std::uint64_t update(const LocalDeviceHandle& r) override {
    if (++updates_ == k_.hang_on_update) dev_->hang(s_);
    dev_->wait(s_, r.event);
    auto mem = mem_;
    const int slot = r.slot;
    const std::uint64_t gen = r.generation;
    dev_->kernel(s_, [mem, slot, gen] {
      if (mem->slot[static_cast<std::size_t>(slot)] != gen)
        mem->violation("learner read rollout slot " + std::to_string(slot) + " generation " +
                       std::to_string(mem->slot[static_cast<std::size_t>(slot)]) + ", expected " + std::to_string(gen));
      ++mem->params;
      ++mem->updates_applied;
    });
    return dev_->record(s_);
  }
  LocalDeviceHandle publish(int buffer, std::uint64_t version, std::uint64_t reuse_after) override {
    dev_->wait(s_, reuse_after);
    auto mem = mem_;
    const auto v = static_cast<std::int64_t>(version);
    dev_->kernel(s_, [mem, buffer, v] {
      if (mem->params != v)
        mem->violation("published version " + std::to_string(v) + " holds the weights after " +
                       std::to_string(mem->params) + " updates");
      mem->policy[buffer] = static_cast<std::uint64_t>(mem->params);
    });
    LocalDeviceHandle h;
    h.event = dev_->record(s_);
    return h;
  }
  std::function<void(const std::filesystem::path&)> checkpoint_job() override {
    auto mem = mem_;
    return [mem](const std::filesystem::path& dir) { std::ofstream(dir / "learner.txt") << mem->params << "\n"; };
  }

 private:
  FakePpoKnobs k_;
  int updates_ = 0;
};

#undef FOXHUNT_FAKE_PPO_PLUMBING

struct FakePpoAgent {
  std::shared_ptr<FakeDevice> device;
  std::shared_ptr<FakePpoMemory> memory;
  PpoStages stages;
  FakePpoAgent(std::uint64_t seed, FakePpoKnobs k, int max_pause_us = 30)
      : device(std::make_shared<FakeDevice>(seed, max_pause_us)),
        memory(std::make_shared<FakePpoMemory>(k.policy_lag + 1)) {
    stages.collector = std::make_shared<FakePpoCollector>(device, memory, k);
    stages.learner = std::make_shared<FakePpoLearner>(device, memory, k);
  }
};

}  // namespace foxhunt::actors::test
