#include "actors/supervisor.hpp"

#include <spdlog/spdlog.h>

#include <exception>

namespace foxhunt::actors {

const char* kind_name(RunOutcome::Kind k) {
  switch (k) {
    case RunOutcome::Kind::completed:
      return "completed";
    case RunOutcome::Kind::stopped:
      return "stopped";
    case RunOutcome::Kind::failed:
      return "failed";
  }
  return "?";
}

void OutcomeLatch::set(RunOutcome outcome) {
  {
    std::lock_guard lock(mutex_);
    if (outcome_) return;  // first outcome wins
    outcome_ = std::move(outcome);
  }
  cv_.notify_all();
}

std::optional<RunOutcome> OutcomeLatch::wait_for(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  cv_.wait_for(lock, timeout, [this] { return outcome_.has_value(); });
  return outcome_;
}

std::optional<RunOutcome> OutcomeLatch::get() {
  std::lock_guard lock(mutex_);
  return outcome_;
}

std::string describe(caf::actor_system& sys, const caf::error& reason) {
  if (!reason) return "no error";
  const auto& ctx = reason.context();
  if (ctx.size() >= 1 && ctx.match_element<std::string>(0)) return ctx.get_as<std::string>(0);
  return sys.render(reason);
}

void report_exceptions_as(caf::scheduled_actor* self, std::string role) {
  self->set_exception_handler([role](caf::scheduled_actor*, std::exception_ptr& eptr) -> caf::error {
    try {
      std::rethrow_exception(eptr);
    } catch (const std::exception& e) {
      return caf::make_error(caf::sec::runtime_error, role + ": " + e.what());
    } catch (...) {
      return caf::make_error(caf::sec::runtime_error, role + ": unknown exception");
    }
  });
}

namespace {

using Self = SupervisorActor::stateful_pointer<SupervisorState>;

std::map<std::string, caf::actor> live_children(Self self) {
  std::map<std::string, caf::actor> out;
  for (auto& c : self->state.children)
    if (!c.down) out.emplace(c.spec.name, c.handle);
  return out;
}

void finish_if_all_down(Self self, const std::shared_ptr<OutcomeLatch>& latch) {
  for (auto& c : self->state.children)
    if (!c.down) return;
  spdlog::info("supervisor: pipeline {} ({})", kind_name(self->state.outcome.kind), self->state.outcome.reason);
  latch->set(self->state.outcome);
  self->quit();
}

// Stops every live child; the first reason given wins.
void stop_all(Self self, RunOutcome outcome, const std::shared_ptr<OutcomeLatch>& latch) {
  if (!self->state.stopping) {
    self->state.stopping = true;
    self->state.outcome = std::move(outcome);
    if (self->state.outcome.kind == RunOutcome::Kind::failed)
      spdlog::error("supervisor: stopping the pipeline: {}", self->state.outcome.reason);
    else
      spdlog::info("supervisor: stopping the pipeline: {}", self->state.outcome.reason);
    for (auto& c : self->state.children)
      if (!c.down) self->send_exit(c.handle, caf::exit_reason::user_shutdown);
  }
  finish_if_all_down(self, latch);
}

}  // namespace

SupervisorActor::behavior_type supervisor_actor(Self self, std::vector<ChildSpec> specs, SupervisorPolicy policy,
                                                WireFn wire, std::shared_ptr<OutcomeLatch> latch,
                                                AgentFinishedFn on_agent_finished) {
  report_exceptions_as(self, "supervisor");
  for (auto& spec : specs) {
    caf::actor child = spec.spawn(self);
    self->monitor(child);
    self->state.children.push_back({std::move(spec), std::move(child), false});
  }
  if (wire) wire(self, live_children(self));

  self->set_down_handler([self, policy, wire, latch](caf::down_msg& msg) {
    auto& st = self->state;
    SupervisorState::Child* child = nullptr;
    for (auto& c : st.children)
      if (!c.down && c.handle.address() == msg.source) child = &c;
    if (child == nullptr) return;  // an old incarnation or a stranger
    child->down = true;
    const bool asked = st.stopping || !msg.reason || msg.reason == caf::exit_reason::user_shutdown;
    if (asked) {
      if (!st.stopping)  // a child quit on its own without failing: the pipeline cannot go on
        stop_all(self, {RunOutcome::Kind::failed, child->spec.name + " stopped unexpectedly"}, latch);
      else
        finish_if_all_down(self, latch);
      return;
    }
    const std::string why = child->spec.name + " failed: " + describe(self->system(), msg.reason);
    auto now = std::chrono::steady_clock::now();
    while (!st.restarts.empty() && now - st.restarts.front() > policy.window) st.restarts.pop_front();
    if (child->spec.restart && static_cast<int>(st.restarts.size()) < policy.max_restarts) {
      st.restarts.push_back(now);
      ++st.restart_count;
      spdlog::warn("supervisor: {}; restarting it ({} of {} within {} ms)", why, st.restarts.size(),
                   policy.max_restarts, policy.window.count());
      child->handle = child->spec.spawn(self);
      child->down = false;
      self->monitor(child->handle);
      if (wire) wire(self, live_children(self));
      return;
    }
    std::string reason = why;
    if (child->spec.restart) reason += " (restart limit " + std::to_string(policy.max_restarts) + " reached)";
    stop_all(self, {RunOutcome::Kind::failed, reason}, latch);
  });

  return {
      [self, latch, on_agent_finished](finished_atom) {
        auto& st = self->state;
        const caf::actor_addr sender = caf::actor_cast<caf::actor_addr>(self->current_sender());
        const std::string* agent = nullptr;
        for (auto& c : st.children)
          if (c.handle.address() == sender) agent = &c.spec.agent;
        if (agent != nullptr && !agent->empty() && !st.stopping) {
          // Its actors go idle (no work is left to them) until every agent is done.
          if (st.finished_agents.insert(*agent).second) {
            spdlog::info("supervisor: agent {} reached its configured number of environment steps", *agent);
            if (on_agent_finished) on_agent_finished(*agent);
          }
          for (auto& c : st.children)
            if (st.finished_agents.count(c.spec.agent) == 0) return;
        }
        stop_all(self, {RunOutcome::Kind::completed, "reached the configured number of environment steps"}, latch);
      },
      [self, latch](stop_atom, const std::string& why) {
        stop_all(self, {RunOutcome::Kind::stopped, why}, latch);
      },
      [self, latch](failure_atom, const std::string& why) {
        stop_all(self, {RunOutcome::Kind::failed, why}, latch);
      },
  };
}

}  // namespace foxhunt::actors
