#pragma once
// The one TOML reader behind every foxhunt config file (run configs, configs/markets/*.toml).
// A file is read in one pass that collects every problem instead of stopping at the first; each
// problem names the file, the line of the key, the key, the value as written and what is allowed:
//   run.toml:14: replay.batch_size = 128.0: must be an integer in [1, 1048576]
//   run.toml:3: [replya]: unknown table; did you mean 'replay'?
// A missing key or table names the file and the table instead of a line of its own. The reader
// also keeps what it resolved (every key it was asked about, with its default when absent) and
// the keys it accepts, for the resolved config of a run and the docs/configs.md test.
#include <cstdint>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <toml++/toml.h>

#include "config/error.hpp"

namespace foxhunt::config {

// A closed, half-open or open interval of numbers, printed as messages show it: "[0, 1]", "(0, inf)".
struct Range {
  double lo, hi;
  bool lo_open = false, hi_open = false;
  static Range closed(double lo, double hi) { return {lo, hi, false, false}; }
  static Range open_low(double lo, double hi) { return {lo, hi, true, false}; }   // (lo, hi]
  static Range open_high(double lo, double hi) { return {lo, hi, false, true}; }  // [lo, hi)
  static Range open(double lo, double hi) { return {lo, hi, true, true}; }        // (lo, hi)
  bool contains(double v) const;
  std::string text() const;
};

// Optimal-string-alignment (restricted Damerau-Levenshtein) distance: a swap of two neighbours
// counts one edit, as a typo does.
std::size_t edit_distance(std::string_view a, std::string_view b);
// A number as a message prints it: up to 6 significant digits, "inf" for infinity.
std::string format_number(double v);

class Reader {
 public:
  // Parses `text`; a TOML syntax error is recorded (source:line:column) and the file then reads
  // as empty, so finish() reports it.
  Reader(const std::string& text, std::string source);
  const std::string& source() const { return source_; }
  bool syntax_ok() const { return syntax_ok_; }

  // Reads the file as if, instead of the array of tables `array` ([[agent]] ...), it had only
  // element `index` of it as the table [array], with that element's sub-tables named in `merged`
  // merged into the top-level tables of the same names (its keys win; every value keeps its line).
  // One reader per element reads a file of several agents over shared tables. False (nothing
  // changed) when the file has no such element or it is not a table.
  bool select_element(const std::string& array, std::size_t index, const std::vector<std::string>& merged);

  // ---- tables ---------------------------------------------------------------------------------
  // Makes `name` ("replay", "process.jumps") the current table and a known one. Returns whether
  // the file has it; a required table that is absent is an error naming `hint` (what it holds).
  bool table(const std::string& name, bool required = false, std::string_view hint = {});
  const std::string& current() const { return table_; }

  // ---- typed keys of the current table --------------------------------------------------------
  // Each marks the key known and resolved; a key that is absent keeps `v` (its default); a key
  // with a bad value is an error and keeps the default too.
  void integer(const char* key, std::int64_t& v, std::int64_t lo, std::int64_t hi);
  void integer(const char* key, int& v, int lo, int hi);
  void unsigned_integer(const char* key, std::uint64_t& v);
  void number(const char* key, double& v, Range allowed);
  void boolean(const char* key, bool& v);
  void choice(const char* key, std::string& v, const std::vector<std::string>& allowed);
  template <class E>
  void choice(const char* key, E& v, std::initializer_list<std::pair<const char*, E>> allowed);
  void text(const char* key, std::string& v);        // a non-empty string
  void plain_name(const char* key, std::string& v);  // [A-Za-z0-9._-]+, not "." or ".."
  void path(const char* key, std::string& v);        // a string; "" = not set
  void integers(const char* key, std::vector<std::int64_t>& v, std::size_t min_len, std::size_t max_len,
                std::int64_t lo, std::int64_t hi);
  // `count` finite numbers, or one number for all `count` when `broadcast` (ranges: the caller).
  void numbers(const char* key, std::vector<double>& v, std::size_t count, bool broadcast);
  // `rows` entries, each one number (for all `cols`) or `cols` numbers; row-major into v.
  void matrix(const char* key, std::vector<double>& v, std::size_t rows, std::size_t cols, std::string_view row_is);
  // A string or a list of strings.
  void strings(const char* key, std::vector<std::string>& v);

  // A known key that this file reads elsewhere or only under some options (not resolved).
  void declare(const char* key);
  // Whether the file gives `full_key` ("replay.alpha").
  bool given(std::string_view full_key) const { return node(full_key) != nullptr; }
  // Whether a problem about `full_key` was reported (so a later check need not repeat it).
  bool has_error(std::string_view full_key) const { return errored_.count(std::string(full_key)) != 0; }
  const toml::node* node(std::string_view full_key) const;
  // An absent key that the options need.
  void require(const char* key, std::string_view allowed);

  // ---- problems -------------------------------------------------------------------------------
  // An error about `full_key`: at its line with its value as written, or (absent) its resolved value.
  void fail(std::string_view full_key, std::string_view what);
  // An error about a key that has no effect with another key's value. Given keys are errors
  // naming both; an absent one stays in the resolved config as a comment.
  void no_effect(std::string_view full_key, bool has_effect, std::string_view other_key, std::string_view hint = {});
  // A relation between two keys that must hold; the error names both with their values.
  void relation(bool ok, std::string_view full_key, std::string_view other_key, std::string_view what);
  // A free-form problem line (already located by the caller).
  void add_error(std::string line) { errors_.push_back(std::move(line)); }

  // Unknown tables and keys (with a "did you mean" suggestion), then throws Error when any
  // problem was found.
  void finish();
  const std::vector<std::string>& errors() const { return errors_; }

  // ---- what was read --------------------------------------------------------------------------
  std::vector<std::string> accepted_keys() const;  // "table.key", sorted
  // The resolved tables as TOML, in the order read, with keys that have no effect commented out.
  std::string resolved_toml() const;
  // The value of a key as a message shows it: as written when given, else as resolved.
  std::string value_text(std::string_view full_key) const;

 private:
  struct Resolved {
    std::string key;    // within its table
    std::string value;  // TOML text
    std::string note;   // non-empty: no effect (commented out, with this reason)
  };
  const toml::node* find(const char* key);
  std::string full(const char* key) const { return table_ + "." + key; }
  std::string where(const toml::node* n) const;  // "source:line" or "source"
  std::string written(const toml::node& n) const;
  void bad(const char* key, const toml::node& n, std::string_view what);
  template <class T>
  void put(const char* key, const T& v);
  void put_text(const char* key, std::string value);
  void check_unknown(const toml::table& t, const std::string& prefix);
  std::string suggest(const std::string& name, const std::string& prefix, bool is_table) const;

  std::string source_;
  std::vector<std::string> lines_;
  toml::table root_;
  bool syntax_ok_ = true;
  std::string table_;
  const toml::table* current_ = nullptr;
  std::vector<std::string> tables_;                    // known, in order
  std::map<std::string, std::set<std::string>> keys_;  // table -> known keys
  std::map<std::string, const toml::node*> nodes_;     // given keys
  std::map<std::string, std::vector<Resolved>> resolved_;
  std::vector<std::string> errors_;
  std::set<std::string> errored_;
};

template <class E>
void Reader::choice(const char* key, E& v, std::initializer_list<std::pair<const char*, E>> allowed) {
  std::vector<std::string> names;
  std::string current;
  for (const auto& [name, value] : allowed) {
    names.emplace_back(name);
    if (value == v) current = name;
  }
  std::string chosen = current;
  choice(key, chosen, names);
  for (const auto& [name, value] : allowed)
    if (chosen == name) v = value;
}

}  // namespace foxhunt::config
