#include "models/diffusion/schedule.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <span>
#include <stdexcept>

#include "gpu/check.hpp"

namespace foxhunt::models {

ScheduleKind parse_schedule_kind(const std::string& name) {
  if (name == "linear") return ScheduleKind::linear;
  if (name == "cosine") return ScheduleKind::cosine;
  throw std::invalid_argument("schedule = \"" + name + "\": must be one of \"linear\" | \"cosine\"");
}

ScheduleTables schedule_tables(const ScheduleSpec& spec) {
  const std::int64_t T = spec.steps;
  if (T < 2) throw std::invalid_argument("NoiseSchedule: steps must be >= 2, got " + std::to_string(T));
  if (spec.kind == ScheduleKind::linear &&
      !(spec.beta_start > 0.0 && spec.beta_start <= spec.beta_end && spec.beta_end < 1.0))
    throw std::invalid_argument("NoiseSchedule: linear betas need 0 < beta_start <= beta_end < 1");
  ScheduleTables t;
  const auto n = static_cast<std::size_t>(T);
  t.beta.resize(n);
  t.alpha.resize(n);
  t.alpha_bar.resize(n);
  const double dT = static_cast<double>(T);
  for (std::int64_t i = 0; i < T; ++i) {
    double b;
    if (spec.kind == ScheduleKind::linear) {
      b = spec.beta_start + (spec.beta_end - spec.beta_start) * static_cast<double>(i) / (dT - 1.0);
    } else {
      constexpr double s = 0.008;
      const auto f = [&](double x) {
        const double c = std::cos((x / dT + s) / (1.0 + s) * std::numbers::pi / 2.0);
        return c * c;
      };
      b = std::min(1.0 - f(static_cast<double>(i) + 1.0) / f(static_cast<double>(i)), 0.999);
    }
    const auto k = static_cast<std::size_t>(i);
    t.beta[k] = b;
    t.alpha[k] = 1.0 - b;
    t.alpha_bar[k] = (k == 0 ? 1.0 : t.alpha_bar[k - 1]) * (1.0 - b);
  }
  return t;
}

NoiseSchedule::NoiseSchedule(const ScheduleSpec& spec, cudaStream_t stream)
    : spec_(spec), tables_(schedule_tables(spec)), table_(static_cast<std::size_t>(4 * spec.steps)) {
  const auto n = static_cast<std::size_t>(spec_.steps);
  std::vector<float> host(4 * n);
  for (std::size_t i = 0; i < n; ++i) {
    const double ab = tables_.alpha_bar[i];
    host[i] = static_cast<float>(tables_.beta[i]);
    host[n + i] = static_cast<float>(ab);
    host[2 * n + i] = static_cast<float>(std::sqrt(ab));
    host[3 * n + i] = static_cast<float>(std::sqrt(1.0 - ab));
  }
  table_.upload(std::span<const float>(host), stream);
  FH_CHECK(cudaStreamSynchronize(stream));  // set-up: the host table is freed on return
}

ScheduleView NoiseSchedule::device() const noexcept {
  const auto n = static_cast<std::size_t>(spec_.steps);
  const float* base = table_.data();
  return ScheduleView{base, base + n, base + 2 * n, base + 3 * n, spec_.steps};
}

}  // namespace foxhunt::models
