// The report's files (report/report.hpp): report.json's schema (keys and types, null for
// undefined numbers), the aggregates across checkpoints, the CSV layouts, and the HTML's
// self-containment (no script, no external reference).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "report/csv.hpp"
#include "report/html.hpp"
#include "report/json.hpp"
#include "tests/report/fake_report.hpp"

namespace foxhunt::report {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

void expect_keys(const json& j, const std::vector<std::pair<std::string, json::value_t>>& keys, const std::string& at) {
  for (const auto& [k, type] : keys) {
    ASSERT_TRUE(j.contains(k)) << at << " lacks " << k;
    const json::value_t t = j.at(k).type();
    // Integers may come out unsigned or signed; floats may be integers when whole.
    const bool number = type == json::value_t::number_float && j.at(k).is_number();
    const bool integer = type == json::value_t::number_integer && j.at(k).is_number_integer();
    EXPECT_TRUE(t == type || number || integer) << at << "." << k << " is " << j.at(k).type_name();
  }
}

void expect_interval(const json& m, const std::string& at) {
  for (const char* k : {"mean", "ci_low", "ci_high"})
    EXPECT_TRUE(m.at(k).is_number() || m.at(k).is_null()) << at << "." << k;
  EXPECT_TRUE(m.at("count").is_number_integer()) << at;
}

TEST(ReportFiles, JsonSchema) {
  Report r = test::fake_report();
  summarize(r);
  const json j = json::parse(report_json(r).dump());
  using V = json::value_t;
  expect_keys(j,
              {{"schema", V::string},
               {"schema_version", V::number_integer},
               {"environment", V::string},
               {"market", V::string},
               {"data", V::string},
               {"assets", V::number_integer},
               {"episodes", V::number_integer},
               {"steps", V::number_integer},
               {"periods_per_year", V::number_float},
               {"initial_equity", V::number_float},
               {"seed", V::number_integer},
               {"reference_policy", V::string},
               {"cost_multipliers", V::array},
               {"bootstrap", V::object},
               {"checkpoints", V::array},
               {"metrics", V::array},
               {"runs", V::array},
               {"aggregates", V::array}},
              "report");
  EXPECT_EQ(j["schema"], "foxhunt.eval.report");
  EXPECT_EQ(j["schema_version"], kSchemaVersion);
  EXPECT_EQ(j["seed"].get<std::uint64_t>(), 18446744073709551557ull);
  expect_keys(j["bootstrap"],
              {{"method", V::string},
               {"resamples", V::number_integer},
               {"level", V::number_float},
               {"seed", V::number_integer},
               {"over", V::string}},
              "bootstrap");
  EXPECT_EQ(j["bootstrap"]["resamples"], 2000);
  ASSERT_EQ(j["checkpoints"].size(), 2u);
  expect_keys(j["checkpoints"][0],
              {{"index", V::number_integer},
               {"path", V::string},
               {"config", V::string},
               {"run_seed", V::number_integer},
               {"learner", V::string}},
              "checkpoints[0]");
  ASSERT_EQ(j["metrics"].size(), r.columns.size());
  expect_keys(j["metrics"][0], {{"key", V::string}, {"label", V::string}, {"unit", V::string}}, "metrics[0]");
  // 2 multipliers x (2 agents + 3 baselines).
  ASSERT_EQ(j["runs"].size(), 10u);
  for (const json& run : j["runs"]) {
    expect_keys(run,
                {{"policy", V::string},
                 {"label", V::string},
                 {"agent", V::boolean},
                 {"cost_multiplier", V::number_float},
                 {"episode_stats", V::object},
                 {"metrics", V::object},
                 {"curves", V::object}},
                "run");
    EXPECT_TRUE(run["checkpoint"].is_number_integer() == run["agent"].get<bool>()) << run["label"];
    for (const MetricColumn& c : r.columns) expect_interval(run["metrics"].at(c.key), run["label"].get<std::string>());
    const json& cv = run["curves"];
    EXPECT_EQ(cv["steps"], 101);
    EXPECT_EQ(cv["equity"].size(), 101u);
    EXPECT_EQ(cv["drawdown"].size(), 101u);
    ASSERT_EQ(cv["weights"].size(), 2u);  // one array per asset
    EXPECT_EQ(cv["weights"][1].size(), 101u);
  }
  EXPECT_EQ(j["runs"][0]["label"], "greedy[1]");
  // The flat baseline's hit rate is undefined: null, with no interval.
  const json& flat = j["runs"][3];
  ASSERT_EQ(flat["policy"], "flat");
  EXPECT_TRUE(flat["metrics"]["hit_rate"]["mean"].is_null());
  EXPECT_EQ(flat["metrics"]["hit_rate"]["count"], 0);
  // One aggregate per agent policy and multiplier, over both checkpoints.
  ASSERT_EQ(j["aggregates"].size(), 2u);
  const json& a = j["aggregates"][0];
  expect_keys(a,
              {{"policy", V::string},
               {"cost_multiplier", V::number_float},
               {"checkpoints", V::number_integer},
               {"interval", V::string},
               {"metrics", V::object}},
              "aggregate");
  EXPECT_EQ(a["checkpoints"], 2);
  const json& sharpe = a["metrics"]["sharpe"];
  expect_interval(sharpe, "aggregate.sharpe");
  ASSERT_EQ(sharpe["values"].size(), 2u);
  EXPECT_NEAR(sharpe["mean"].get<double>(),
              (sharpe["values"][0].get<double>() + sharpe["values"][1].get<double>()) / 2.0, 1e-12);
  EXPECT_LT(sharpe["ci_low"].get<double>(), sharpe["mean"].get<double>());
}

TEST(ReportFiles, SummariesAreTheEpisodeMeans) {
  Report r = test::fake_report(200);
  summarize(r);
  for (const PolicyRun& run : r.runs)
    for (std::size_t c = 0; c < r.columns.size(); ++c) {
      const Interval& i = run.summary[c];
      const double want = mean_defined(run.episodes[c]);
      EXPECT_TRUE(i.mean == want || (std::isnan(i.mean) && std::isnan(want))) << i.mean << " vs " << want;
      if (std::isfinite(i.mean) && run.policy != "flat") {
        EXPECT_LE(i.low, i.mean);
        EXPECT_GE(i.high, i.mean);
      }
    }
  // One checkpoint: aggregates exist but their interval is undefined.
  Report one = test::fake_report(20, 10, 1);
  summarize(one);
  ASSERT_FALSE(one.aggregates.empty());
  EXPECT_TRUE(std::isnan(one.aggregates[0].across[1].low));
  EXPECT_EQ(run_label(one, one.runs[0]), "greedy");
}

TEST(ReportFiles, CsvLayouts) {
  Report r = test::fake_report(8, 5);
  summarize(r);
  std::istringstream eq(equity_csv(r));
  std::string header, line;
  std::getline(eq, header);
  EXPECT_EQ(header, "policy,checkpoint,cost_multiplier,step,equity,drawdown,weight_0,weight_1");
  std::getline(eq, line);
  EXPECT_EQ(line.rfind("greedy,1,1,0,1,0,", 0), 0u) << line;
  int rows = 1;
  while (std::getline(eq, line)) ++rows;
  EXPECT_EQ(rows, 10 * 6);  // 10 runs x (5 steps + the start)
  std::istringstream ep(episodes_csv(r));
  std::getline(ep, header);
  EXPECT_EQ(header,
            "policy,checkpoint,cost_multiplier,episode,total_return,sharpe,max_drawdown,hit_rate,trades,"
            "turnover,cost");
  rows = 0;
  bool empty_field = false;
  while (std::getline(ep, line)) {
    ++rows;
    empty_field = empty_field || (line.rfind("flat,", 0) == 0 && line.find(",,") != std::string::npos);
  }
  EXPECT_EQ(rows, 10 * 8);
  EXPECT_TRUE(empty_field) << "an undefined value is an empty field";
  EXPECT_EQ(csv_field("a,b"), "\"a,b\"");
  EXPECT_EQ(csv_field("say \"x\""), "\"say \"\"x\"\"\"");
}

TEST(ReportFiles, HtmlIsSelfContained) {
  Report r = test::fake_report();
  summarize(r);
  const std::string html = report_html(r);
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  for (const char* banned : {"<script", "http://", "https://", "<link", "@import", "url(", "src="}) {
    std::string rest = html;
    // The SVG namespace is an identifier, not a fetch.
    for (std::size_t p; (p = rest.find("xmlns=\"http://www.w3.org/2000/svg\"")) != std::string::npos;)
      rest.erase(p, 34);
    EXPECT_EQ(rest.find(banned), std::string::npos) << banned;
  }
  EXPECT_EQ(chart_plot_boxes(r).size(), 3u);
  size_t svgs = 0;
  for (std::size_t p = 0; (p = html.find("<svg", p)) != std::string::npos; ++p) ++svgs;
  EXPECT_EQ(svgs, 3u);
  for (const char* s : {"greedy[1]", "buy_and_hold", "Cost sensitivity", "Across checkpoints", "Sharpe", "n/a"})
    EXPECT_NE(html.find(s), std::string::npos) << s;
}

TEST(ReportFiles, WriteReportWritesEveryFile) {
  Report r = test::fake_report(8, 5);
  summarize(r);
  const fs::path dir = fs::temp_directory_path() / ("foxhunt_report_files_" + std::to_string(::getpid())) / "eval";
  fs::remove_all(dir.parent_path());
  const auto files = write_report(r, dir);
  ASSERT_EQ(files.size(), 4u);
  for (const char* f : {"report.json", "equity.csv", "episodes.csv", "report.html"})
    EXPECT_GT(fs::file_size(dir / f), 0u) << f;
  std::ifstream in(dir / "report.json");
  EXPECT_EQ(json::parse(in)["schema_version"], kSchemaVersion);
  fs::remove_all(dir.parent_path());
  EXPECT_THROW(write_report(r, "/proc/foxhunt_cannot_write_here"), std::runtime_error);
}

}  // namespace
}  // namespace foxhunt::report
