// docs/configs.md stays true: it names every key the run config and market config readers accept,
// and no key they do not.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "actors/run_config.hpp"
#include "rl/envs/market_config.hpp"

namespace {

namespace fs = std::filesystem;

// The keys of one part of the page ("## Run config" or "## Market config"): each "### [table]"
// heading, then its rows "| `key` | ...".
std::set<std::string> documented(const std::string& part) {
  std::ifstream in(fs::path(FOXHUNT_SOURCE_DIR) / "docs" / "configs.md");
  EXPECT_TRUE(in.good()) << "docs/configs.md is missing";
  std::set<std::string> keys;
  bool inside = false;
  std::string table;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("## ", 0) == 0) inside = line == "## " + part;
    if (!inside) continue;
    if (line.rfind("### [[", 0) == 0)  // an array of tables: "### [[agent]]"
      table = line.substr(6, line.find(']') - 6);
    else if (line.rfind("### [", 0) == 0)
      table = line.substr(5, line.find(']') - 5);
    if (line.rfind("| `", 0) == 0 && !table.empty()) keys.insert(table + "." + line.substr(3, line.find('`', 3) - 3));
  }
  return keys;
}

void expect_same(const std::set<std::string>& page, const std::vector<std::string>& reader) {
  const std::set<std::string> accepted(reader.begin(), reader.end());
  for (const auto& k : accepted)
    EXPECT_TRUE(page.count(k)) << k << ": accepted by the reader, missing from docs/configs.md";
  for (const auto& k : page) EXPECT_TRUE(accepted.count(k)) << k << ": in docs/configs.md, not accepted by the reader";
  EXPECT_GT(page.size(), 10u);
}

TEST(DocsConfigs, RunConfigKeysAreAllDocumented) {
  expect_same(documented("Run config"), foxhunt::actors::run_config_keys());
}

TEST(DocsConfigs, MarketConfigKeysAreAllDocumented) {
  expect_same(documented("Market config"), foxhunt::rl::market_config_keys());
}

}  // namespace
