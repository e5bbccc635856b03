#include "report/report.hpp"

#include <algorithm>
#include <fstream>
#include <stdexcept>

#include "report/csv.hpp"
#include "report/html.hpp"
#include "report/json.hpp"

namespace foxhunt::report {
namespace fs = std::filesystem;

const char* to_string(Unit u) {
  switch (u) {
    case Unit::fraction:
      return "fraction";
    case Unit::number:
      return "number";
    case Unit::count:
      return "count";
    case Unit::steps:
      return "steps";
  }
  return "number";
}

void summarize(Report& r) {
  const std::size_t K = r.columns.size();
  for (PolicyRun& run : r.runs) {
    run.summary.assign(K, Interval{});
    if (run.episodes.size() == K && K > 0) run.summary = bootstrap_means(run.episodes, r.bootstrap);
  }
  r.aggregates.clear();
  if (K == 0) return;
  auto learner_of = [&r](const PolicyRun& run) {
    return run.checkpoint >= 0 && run.checkpoint < static_cast<int>(r.checkpoints.size())
               ? r.checkpoints[run.checkpoint].learner
               : std::string();
  };
  for (double m : r.cost_multipliers) {
    std::vector<std::pair<std::string, std::string>> groups;  // (policy, learner), in order of appearance
    for (const PolicyRun& run : r.runs) {
      const std::pair<std::string, std::string> g{run.policy, learner_of(run)};
      if (run.agent && run.cost_multiplier == m && std::find(groups.begin(), groups.end(), g) == groups.end())
        groups.push_back(g);
    }
    for (const auto& [p, learner] : groups) {
      Aggregate a;
      a.policy = p;
      a.learner = learner;
      a.cost_multiplier = m;
      a.values.assign(K, {});
      for (const PolicyRun& run : r.runs)
        if (run.agent && run.cost_multiplier == m && run.policy == p && learner_of(run) == learner)
          for (std::size_t k = 0; k < K; ++k) a.values[k].push_back(run.summary[k].mean);
      for (std::size_t k = 0; k < K; ++k) a.across.push_back(t_interval(a.values[k], r.bootstrap.level));
      r.aggregates.push_back(std::move(a));
    }
  }
}

std::string run_label(const Report& r, const PolicyRun& run) {
  if (!run.agent || r.checkpoints.size() <= 1 || run.checkpoint < 0) return run.policy;
  if (run.checkpoint < static_cast<int>(r.checkpoints.size())) {
    const std::string& name = r.checkpoints[run.checkpoint].agent;
    const auto same = std::count_if(r.checkpoints.begin(), r.checkpoints.end(),
                                    [&name](const CheckpointInfo& c) { return c.agent == name; });
    if (!name.empty() && same == 1) return run.policy + "[" + name + "]";
  }
  return run.policy + "[" + std::to_string(run.checkpoint + 1) + "]";
}

int column_index(const Report& r, std::string_view key) {
  for (std::size_t k = 0; k < r.columns.size(); ++k)
    if (r.columns[k].key == key) return static_cast<int>(k);
  return -1;
}

double chart_multiplier(const Report& r) {
  for (double m : r.cost_multipliers)
    if (m == 1.0) return m;
  return r.cost_multipliers.empty() ? 1.0 : r.cost_multipliers.front();
}

void write_text_file(const fs::path& file, std::string_view text) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error("cannot write " + file.string());
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.close();
  if (!out) throw std::runtime_error("cannot write " + file.string());
}

std::vector<fs::path> write_report(const Report& r, const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error("cannot create the report directory " + dir.string() + ": " + ec.message());
  std::vector<fs::path> files;
  write_text_file(dir / "report.json", report_json(r).dump(2) + "\n");
  files.push_back(dir / "report.json");
  bool curves = false;
  for (const PolicyRun& run : r.runs) curves = curves || run.curves.rows > 0;
  if (curves) {
    write_text_file(dir / "equity.csv", equity_csv(r));
    files.push_back(dir / "equity.csv");
    write_text_file(dir / "episodes.csv", episodes_csv(r));
    files.push_back(dir / "episodes.csv");
    write_text_file(dir / "report.html", report_html(r));
    files.push_back(dir / "report.html");
  }
  return files;
}

}  // namespace foxhunt::report
