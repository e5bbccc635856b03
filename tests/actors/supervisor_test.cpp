// The supervisor's restart policy on plain test actors (CPU only).
#include <gtest/gtest.h>

#include <atomic>

#include "actors/pipeline.hpp"
#include "actors/supervisor.hpp"

using namespace foxhunt::actors;

namespace {
caf::behavior fragile(caf::event_based_actor* self) {
  report_exceptions_as(self, "fragile");
  return {[](fault_atom, const std::string& what) -> caf::result<void> { throw std::runtime_error(what); }};
}
caf::behavior steady(caf::event_based_actor*) {
  return {[](fault_atom, const std::string&) {}};
}

struct Harness {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::shared_ptr<OutcomeLatch> latch = std::make_shared<OutcomeLatch>();
  std::mutex m;
  std::map<std::string, caf::actor> children;
  std::atomic<int> wirings{0};
  SupervisorActor sup;

  Harness(bool restart, SupervisorPolicy policy) {
    configure_actor_system(cfg, 2);
    sys = std::make_unique<caf::actor_system>(cfg);
    std::vector<ChildSpec> specs{{"fragile", [](caf::local_actor* s) { return s->spawn(fragile); }, restart},
                                 {"steady", [](caf::local_actor* s) { return s->spawn(steady); }, false}};
    WireFn wire = [this](caf::local_actor*, const std::map<std::string, caf::actor>& ch) {
      std::lock_guard lock(m);
      children = ch;
      ++wirings;
    };
    sup = sys->spawn(supervisor_actor, std::move(specs), policy, wire, latch, AgentFinishedFn{});
    // the supervisor spawns and wires its children when it first runs, asynchronously
    for (int i = 0; i < 1000 && wirings.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  caf::actor child(const std::string& name) {
    std::lock_guard lock(m);
    return children.at(name);
  }
  // Faults the fragile child and waits until the supervisor reacted (rewired or finished).
  void fault_and_wait(int expect_wirings) {
    caf::anon_send(child("fragile"), fault_atom_v, std::string("boom"));
    for (int i = 0; i < 500 && wirings.load() < expect_wirings && !latch->get(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
};
}  // namespace

TEST(SupervisorTest, RestartsWithinIntensityThenStopsEverything) {
  Harness h(true, SupervisorPolicy{2, std::chrono::seconds(30)});
  ASSERT_EQ(h.wirings.load(), 1);
  h.fault_and_wait(2);
  EXPECT_EQ(h.wirings.load(), 2);
  EXPECT_FALSE(h.latch->get().has_value());
  h.fault_and_wait(3);
  EXPECT_EQ(h.wirings.load(), 3);
  EXPECT_FALSE(h.latch->get().has_value());
  h.fault_and_wait(4);  // third failure within the window: beyond max_restarts
  auto out = h.latch->wait_for(std::chrono::seconds(10));
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(out->kind, RunOutcome::Kind::failed);
  EXPECT_NE(out->reason.find("fragile failed: fragile: boom"), std::string::npos) << out->reason;
  EXPECT_NE(out->reason.find("restart limit 2"), std::string::npos) << out->reason;
  h.sys->await_all_actors_done();  // the steady child was stopped too: no hang
}

TEST(SupervisorTest, WindowForgetsOldRestarts) {
  Harness h(true, SupervisorPolicy{1, std::chrono::milliseconds(100)});
  h.fault_and_wait(2);
  EXPECT_EQ(h.wirings.load(), 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  h.fault_and_wait(3);
  EXPECT_EQ(h.wirings.load(), 3);
  EXPECT_FALSE(h.latch->get().has_value());
  caf::anon_send(h.sup, stop_atom_v, std::string("test over"));
  auto out = h.latch->wait_for(std::chrono::seconds(10));
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(out->kind, RunOutcome::Kind::stopped);
  EXPECT_EQ(out->reason, "test over");
  h.sys->await_all_actors_done();
}

TEST(SupervisorTest, NoRestartMeansStopOnFirstFailure) {
  Harness h(false, SupervisorPolicy{5, std::chrono::seconds(30)});
  h.fault_and_wait(2);
  auto out = h.latch->wait_for(std::chrono::seconds(10));
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(out->kind, RunOutcome::Kind::failed);
  EXPECT_EQ(h.wirings.load(), 1);
  h.sys->await_all_actors_done();
}

TEST(SupervisorTest, ChildQuittingOnItsOwnIsAFailure) {
  Harness h(false, SupervisorPolicy{});
  caf::anon_send_exit(h.child("steady"), caf::exit_reason::user_shutdown);
  auto out = h.latch->wait_for(std::chrono::seconds(10));
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(out->kind, RunOutcome::Kind::failed);
  EXPECT_NE(out->reason.find("steady stopped unexpectedly"), std::string::npos) << out->reason;
  h.sys->await_all_actors_done();
}
