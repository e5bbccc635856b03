// config::Reader on its own: typed keys with defaults, values echoed as written, every problem of
// a file in one pass, "did you mean" within two edits, missing tables, the resolved TOML and the
// list of accepted keys.
#include <gtest/gtest.h>

#include <string>

#include "config/reader.hpp"

namespace foxhunt::config {
namespace {

// Reads a small schema: [a] n (integer), x (number), flag, mode; [a.sub] k.
struct Small {
  std::int64_t n = 4;
  double x = 0.5;
  bool flag = false;
  std::string mode = "fast";
  std::int64_t k = 1;
};

Small read(Reader& r) {
  Small s;
  r.table("a", true, "the settings");
  r.integer("n", s.n, 1, 100);
  r.number("x", s.x, Range::open_low(0.0, 1.0));
  r.boolean("flag", s.flag);
  r.choice("mode", s.mode, {"fast", "slow"});
  r.table("a.sub");
  r.integer("k", s.k, 0, 9);
  r.table("a");
  r.no_effect("a.mode", s.flag, "a.flag");
  return s;
}

std::string problems(const std::string& text) {
  Reader r(text, "f.toml");
  read(r);
  try {
    r.finish();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ConfigReader, EditDistanceCountsASwapAsOneEdit) {
  EXPECT_EQ(edit_distance("replay", "replay"), 0u);
  EXPECT_EQ(edit_distance("replya", "replay"), 1u);
  EXPECT_EQ(edit_distance("batch_sise", "batch_size"), 1u);
  EXPECT_EQ(edit_distance("btach_size", "batch_size"), 1u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
}

TEST(ConfigReader, RangesPrintAsWritten) {
  EXPECT_EQ(Range::closed(0, 1).text(), "[0, 1]");
  EXPECT_EQ(Range::open_low(0, 1).text(), "(0, 1]");
  EXPECT_EQ(Range::open_high(0, 1).text(), "[0, 1)");
  EXPECT_EQ(Range::open(0, std::numeric_limits<double>::infinity()).text(), "(0, inf)");
  EXPECT_TRUE(Range::open_low(0, 1).contains(1.0));
  EXPECT_FALSE(Range::open_low(0, 1).contains(0.0));
  EXPECT_FALSE(Range::closed(0, 1).contains(NAN));
}

TEST(ConfigReader, ReadsValuesAndKeepsDefaults) {
  Reader r("[a]\nn = 7\nflag = true\n[a.sub]\nk = 3\n", "f.toml");
  const Small s = read(r);
  EXPECT_NO_THROW(r.finish());
  EXPECT_EQ(s.n, 7);
  EXPECT_DOUBLE_EQ(s.x, 0.5);
  EXPECT_TRUE(s.flag);
  EXPECT_EQ(s.mode, "fast");
  EXPECT_EQ(s.k, 3);
  EXPECT_EQ(r.accepted_keys(), (std::vector<std::string>{"a.flag", "a.mode", "a.n", "a.sub.k", "a.x"}));
}

TEST(ConfigReader, EchoesValuesAsWritten) {
  const std::string m = problems("[a]\nn = 128.0\nx = 1e-9\nmode = 'quick'\nflag = 1\n");
  EXPECT_NE(m.find("f.toml:2: a.n = 128.0: must be an integer in [1, 100]"), std::string::npos) << m;
  EXPECT_NE(m.find("f.toml:4: a.mode = 'quick': must be one of \"fast\" | \"slow\""), std::string::npos) << m;
  EXPECT_NE(m.find("f.toml:5: a.flag = 1: must be a boolean"), std::string::npos) << m;
  // 1e-9 is in (0, 1]; a.mode's own check waits for a valid a.flag. In the order of the file:
  EXPECT_NE(m.find("invalid configuration (3 problems):\n  f.toml:2: a.n = 128.0: must be an integer in [1, 100]\n"
                   "  f.toml:4: a.mode"),
            std::string::npos)
      << m;
  EXPECT_NE(problems("[a]\nx = 0x10\n").find("a.x = 0x10: must be a number in (0, 1]"), std::string::npos);
}

TEST(ConfigReader, SuggestsKnownNamesWithinTwoEdits) {
  EXPECT_NE(problems("[a]\nflga = true\n").find("f.toml:2: a.flga: unknown key; did you mean 'flag'?"),
            std::string::npos);
  EXPECT_NE(problems("[b]\n").find("f.toml:1: [b]: unknown table; did you mean 'a'?"), std::string::npos);
  EXPECT_NE(problems("[a]\n[a.sbu]\nk = 1\n").find("[a.sbu]: unknown table; did you mean 'sub'?"), std::string::npos);
  EXPECT_NE(problems("[a]\n[a.sub]\nmode = 1\n").find("a.sub.mode: unknown key; did you mean 'a.mode'?"),
            std::string::npos);
  const std::string far = problems("[a]\ncompletely_different = 1\n");
  EXPECT_EQ(far.find("did you mean"), std::string::npos) << far;
  EXPECT_NE(far.find("known in [a]: flag, mode, n, x"), std::string::npos) << far;
}

TEST(ConfigReader, MissingTablesAndSyntaxErrorsAreNamed) {
  EXPECT_NE(problems("").find("f.toml: [a]: missing table (the settings)"), std::string::npos);
  const std::string syntax = problems("[a]\nn = = 1\n");
  EXPECT_NE(syntax.find("f.toml:2:"), std::string::npos) << syntax;
  EXPECT_NE(syntax.find("TOML syntax error"), std::string::npos) << syntax;
  EXPECT_EQ(syntax.find("missing table"), std::string::npos) << syntax;  // no noise after a syntax error
}

TEST(ConfigReader, KeysWithoutEffectAreErrorsWhenGivenAndCommentsWhenResolved) {
  EXPECT_NE(problems("[a]\nmode = \"slow\"\n")
                .find("f.toml:2: a.mode = \"slow\": has no effect with a.flag = false; remove it or change a.flag"),
            std::string::npos);
  Reader r("[a]\nn = 2\n", "f.toml");
  read(r);
  EXPECT_EQ(
      r.resolved_toml(),
      "[a]\nn = 2\nx = 0.5\nflag = false\n# mode = \"fast\"  # no effect with a.flag = false\n\n[a.sub]\nk = 1\n");
}

}  // namespace
}  // namespace foxhunt::config
