#include "config/reader.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>

namespace foxhunt::config {
namespace {

std::string header(const std::string& source, std::size_t n) {
  return source + ": invalid configuration (" + std::to_string(n) + (n == 1 ? " problem" : " problems") + "):";
}

std::string join_errors(const std::string& source, const std::vector<std::string>& errors) {
  std::string s = header(source, errors.size());
  for (const auto& e : errors) s += "\n  " + e;
  return s;
}

std::string quoted(std::string_view s) { return "\"" + std::string(s) + "\""; }

std::string alternatives(const std::vector<std::string>& allowed) {
  std::string s;
  for (const auto& a : allowed) s += (s.empty() ? "" : " | ") + quoted(a);
  return s;
}

// A value node as TOML prints it (the fallback when the source text is not at hand).
std::string formatted(const toml::node& n) {
  if (n.is_table()) return "a table";
  std::ostringstream s;
  n.visit([&](const auto& v) { s << v; });
  return s.str();
}

}  // namespace

Error::Error(const std::string& source, std::vector<std::string> errors)
    : std::invalid_argument(join_errors(source, errors)), errors_(std::move(errors)) {}

Error::Error(const std::string& message) : std::invalid_argument(message), errors_{message} {}

bool Range::contains(double v) const {
  return std::isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
}

std::string Range::text() const {
  return std::string(lo_open ? "(" : "[") + format_number(lo) + ", " + format_number(hi) +
         (hi_open || std::isinf(hi) ? ")" : "]");
}

std::string format_number(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::ostringstream s;
  s << v;
  return s.str();
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  const std::size_t n = a.size(), m = b.size();
  std::vector<std::vector<std::size_t>> d(n + 1, std::vector<std::size_t>(m + 1));
  for (std::size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= n; ++i)
    for (std::size_t j = 1; j <= m; ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[n][m];
}

Reader::Reader(const std::string& text, std::string source) : source_(std::move(source)) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines_.push_back(line);
  try {
    root_ = toml::parse(text, source_);
  } catch (const toml::parse_error& e) {
    syntax_ok_ = false;
    std::ostringstream s;
    s << source_ << ":" << e.source().begin.line << ":" << e.source().begin.column
      << ": TOML syntax error: " << e.description();
    errors_.push_back(s.str());
  }
}

bool Reader::select_element(const std::string& array, std::size_t index, const std::vector<std::string>& merged) {
  toml::array* elements = root_[array].as_array();
  if (elements == nullptr || index >= elements->size() || !(*elements)[index].is_table()) return false;
  // Moved, not copied: toml++ keeps a node's source position only when it is moved.
  toml::table element = std::move(*(*elements)[index].as_table());
  for (const std::string& name : merged) {
    toml::table* sub = element[name].as_table();
    if (sub == nullptr) continue;
    if (root_.get(name) == nullptr) root_.insert_or_assign(name, toml::table{});
    toml::table* top = root_[name].as_table();
    if (top == nullptr) continue;  // not a table at the top: table() reports it
    for (auto&& [key, value] : *sub) top->insert_or_assign(key, std::move(value));
    element.erase(name);
  }
  root_.insert_or_assign(array, std::move(element));
  return true;
}

// ---- tables -----------------------------------------------------------------------------------

bool Reader::table(const std::string& name, bool required, std::string_view hint) {
  table_ = name;
  current_ = nullptr;
  if (std::find(tables_.begin(), tables_.end(), name) == tables_.end()) tables_.push_back(name);
  keys_[name];
  resolved_[name];
  const toml::node* n = root_.at_path(name).node();
  if (n != nullptr && !n->is_table()) {
    errors_.push_back(where(n) + ": " + name + " = " + written(*n) + ": must be a table ([" + name + "])");
    return false;
  }
  if (n != nullptr) {
    current_ = n->as_table();
    return true;
  }
  if (required && syntax_ok_)
    errors_.push_back(source_ + ": [" + name + "]: missing table" +
                      (hint.empty() ? "" : " (" + std::string(hint) + ")"));
  return false;
}

// ---- typed keys -------------------------------------------------------------------------------

const toml::node* Reader::find(const char* key) {
  keys_[table_].insert(key);
  const toml::node* n = current_ != nullptr ? current_->get(key) : nullptr;
  if (n != nullptr) nodes_[full(key)] = n;
  return n;
}

const toml::node* Reader::node(std::string_view full_key) const {
  const auto it = nodes_.find(std::string(full_key));
  if (it != nodes_.end()) return it->second;
  return root_.at_path(full_key).node();
}

void Reader::declare(const char* key) {
  keys_[table_].insert(key);
  if (current_ != nullptr)
    if (const toml::node* n = current_->get(key)) nodes_[full(key)] = n;
}

void Reader::integer(const char* key, std::int64_t& v, std::int64_t lo, std::int64_t hi) {
  if (const toml::node* n = find(key)) {
    const std::string allowed = "must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
    if (!n->is_integer() || n->as_integer()->get() < lo || n->as_integer()->get() > hi)
      bad(key, *n, allowed);
    else
      v = n->as_integer()->get();
  }
  put(key, v);
}

void Reader::integer(const char* key, int& v, int lo, int hi) {
  std::int64_t x = v;
  integer(key, x, lo, hi);
  v = static_cast<int>(x);
}

void Reader::unsigned_integer(const char* key, std::uint64_t& v) {
  std::int64_t x = static_cast<std::int64_t>(v);
  integer(key, x, 0, std::numeric_limits<std::int64_t>::max());
  v = static_cast<std::uint64_t>(x);
}

void Reader::number(const char* key, double& v, Range allowed) {
  if (const toml::node* n = find(key)) {
    const double x = n->is_number() ? n->value<double>().value_or(NAN) : NAN;
    if (!n->is_number())
      bad(key, *n, "must be a number in " + allowed.text());
    else if (!std::isfinite(x))
      bad(key, *n, "must be a finite number in " + allowed.text());
    else if (!allowed.contains(x))
      bad(key, *n, "must be a number in " + allowed.text());
    else
      v = x;
  }
  put(key, v);
}

void Reader::boolean(const char* key, bool& v) {
  if (const toml::node* n = find(key)) {
    if (!n->is_boolean())
      bad(key, *n, "must be a boolean, true or false");
    else
      v = n->as_boolean()->get();
  }
  put(key, v);
}

void Reader::choice(const char* key, std::string& v, const std::vector<std::string>& allowed) {
  if (const toml::node* n = find(key)) {
    const std::string* s = n->is_string() ? &n->as_string()->get() : nullptr;
    if (s == nullptr || std::find(allowed.begin(), allowed.end(), *s) == allowed.end())
      bad(key, *n, "must be one of " + alternatives(allowed));
    else
      v = *s;
  }
  put(key, v);
}

void Reader::text(const char* key, std::string& v) {
  if (const toml::node* n = find(key)) {
    if (!n->is_string() || n->as_string()->get().empty())
      bad(key, *n, "must be a non-empty string");
    else
      v = n->as_string()->get();
  }
  put(key, v);
}

void Reader::plain_name(const char* key, std::string& v) {
  if (const toml::node* n = find(key)) {
    const std::string* s = n->is_string() ? &n->as_string()->get() : nullptr;
    const bool ok =
        s != nullptr && !s->empty() && *s != "." && *s != ".." && std::all_of(s->begin(), s->end(), [](char ch) {
          return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
                 ch == '_' || ch == '-';
        });
    if (!ok)
      bad(key, *n,
          "must be a plain name of letters, digits, '.', '_' and '-' (no path separators, not \".\" or \"..\")");
    else
      v = *s;
  }
  put(key, v);
}

void Reader::path(const char* key, std::string& v) {
  if (const toml::node* n = find(key)) {
    if (!n->is_string())
      bad(key, *n, "must be a string (a file path)");
    else
      v = n->as_string()->get();
  }
  put(key, v);
}

void Reader::integers(const char* key, std::vector<std::int64_t>& v, std::size_t min_len, std::size_t max_len,
                      std::int64_t lo, std::int64_t hi) {
  if (const toml::node* n = find(key)) {
    const toml::array* a = n->as_array();
    bool ok = a != nullptr && a->size() >= min_len && a->size() <= max_len;
    std::vector<std::int64_t> out;
    for (std::size_t k = 0; ok && k < a->size(); ++k) {
      const toml::node& e = (*a)[k];
      ok = e.is_integer() && e.as_integer()->get() >= lo && e.as_integer()->get() <= hi;
      if (ok) out.push_back(e.as_integer()->get());
    }
    if (!ok)
      bad(key, *n,
          "must be a list of " + std::to_string(min_len) + " to " + std::to_string(max_len) + " integers in [" +
              std::to_string(lo) + ", " + std::to_string(hi) + "]");
    else
      v = std::move(out);
  }
  toml::array arr;
  for (auto x : v) arr.push_back(x);
  put(key, arr);
}

void Reader::numbers(const char* key, std::vector<double>& v, std::size_t count, bool broadcast) {
  const toml::node* n = find(key);
  if (n == nullptr) return;
  const std::string shape = (broadcast ? "a number or a list of " : "a list of ") + std::to_string(count) + " numbers";
  if (n->is_number()) {
    const double x = n->value<double>().value_or(NAN);
    if (!broadcast)
      bad(key, *n, "must be " + shape);
    else if (!std::isfinite(x))
      bad(key, *n, "must be a finite number");
    else
      v.assign(count, x);
    return;
  }
  const toml::array* a = n->as_array();
  if (a == nullptr) return bad(key, *n, "must be " + shape);
  if (a->size() != count) return bad(key, *n, "must be " + shape + " (got " + std::to_string(a->size()) + " values)");
  std::vector<double> out;
  for (const auto& e : *a) {
    const double x = e.is_number() ? e.value<double>().value_or(NAN) : NAN;
    if (!std::isfinite(x)) return bad(key, *n, "must be " + shape + ", each finite");
    out.push_back(x);
  }
  v = std::move(out);
}

void Reader::matrix(const char* key, std::vector<double>& v, std::size_t rows, std::size_t cols,
                    std::string_view row_is) {
  const toml::node* n = find(key);
  if (n == nullptr) return;
  const std::string shape = "must be a list of " + std::to_string(rows) + " rows (" + std::string(row_is) +
                            "), each a number or " + std::to_string(cols) + " numbers";
  const toml::array* a = n->as_array();
  if (a == nullptr) return bad(key, *n, shape);
  if (a->size() != rows) return bad(key, *n, shape + " (got " + std::to_string(a->size()) + " rows)");
  std::vector<double> out;
  for (const auto& row : *a) {
    if (row.is_number()) {
      out.insert(out.end(), cols, row.value<double>().value_or(NAN));
    } else if (const toml::array* r = row.as_array(); r != nullptr && r->size() == cols) {
      for (const auto& e : *r) out.push_back(e.is_number() ? e.value<double>().value_or(NAN) : NAN);
    } else {
      return bad(key, *n, shape);
    }
  }
  if (!std::all_of(out.begin(), out.end(), [](double x) { return std::isfinite(x); }))
    return bad(key, *n, shape + ", each finite");
  v = std::move(out);
}

void Reader::strings(const char* key, std::vector<std::string>& v) {
  const toml::node* n = find(key);
  if (n == nullptr) return;
  if (n->is_string()) {
    v = {n->as_string()->get()};
    return;
  }
  const toml::array* a = n->as_array();
  std::vector<std::string> out;
  for (std::size_t k = 0; a != nullptr && k < a->size(); ++k) {
    if (!(*a)[k].is_string()) return bad(key, *n, "must be a string or a list of strings");
    out.push_back((*a)[k].as_string()->get());
  }
  if (a == nullptr) return bad(key, *n, "must be a string or a list of strings");
  v = std::move(out);
}

void Reader::require(const char* key, std::string_view allowed) {
  keys_[table_].insert(key);
  if (current_ != nullptr && current_->get(key) != nullptr) return;
  if (!syntax_ok_) return;
  errors_.push_back(where(current_) + ": " + full(key) + ": missing in [" + table_ + "]; " + std::string(allowed));
}

// ---- problems ---------------------------------------------------------------------------------

std::string Reader::where(const toml::node* n) const {
  if (n != nullptr && n->source().begin.line > 0) return source_ + ":" + std::to_string(n->source().begin.line);
  return source_;
}

// The value's text in the file (so 128.0 reads 128.0 and 1e-4 reads 1e-4); TOML's own printing
// for a value that spans lines.
std::string Reader::written(const toml::node& n) const {
  if (n.is_table()) return "a table";
  const auto& r = n.source();
  if (r.begin.line > 0 && r.begin.line == r.end.line && r.begin.line <= lines_.size()) {
    const std::string& line = lines_[r.begin.line - 1];
    const std::size_t b = r.begin.column - 1, e = std::min<std::size_t>(r.end.column - 1, line.size());
    if (b < e) return line.substr(b, e - b);
  }
  std::string s = formatted(n);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

void Reader::bad(const char* key, const toml::node& n, std::string_view what) {
  errored_.insert(full(key));
  errors_.push_back(where(&n) + ": " + full(key) + " = " + written(n) + ": " + std::string(what));
}

std::string Reader::value_text(std::string_view full_key) const {
  if (const toml::node* n = node(full_key)) return written(*n);
  const std::size_t dot = full_key.rfind('.');
  if (dot != std::string_view::npos) {
    const auto it = resolved_.find(std::string(full_key.substr(0, dot)));
    if (it != resolved_.end())
      for (const auto& r : it->second)
        if (r.key == full_key.substr(dot + 1)) return r.value;
  }
  return "(not set)";
}

void Reader::fail(std::string_view full_key, std::string_view what) {
  const toml::node* n = node(full_key);
  errored_.insert(std::string(full_key));
  if (n != nullptr && n->is_table()) {
    errors_.push_back(where(n) + ": [" + std::string(full_key) + "]: " + std::string(what));
    return;
  }
  errors_.push_back(where(n) + ": " + std::string(full_key) + " = " + value_text(full_key) + ": " + std::string(what));
}

void Reader::no_effect(std::string_view full_key, bool has_effect, std::string_view other_key, std::string_view hint) {
  if (has_effect || has_error(full_key) || has_error(other_key)) return;  // reported on their own
  const std::string because = std::string(other_key) + " = " + value_text(other_key);
  if (given(full_key)) {
    fail(full_key, "has no effect with " + because + (hint.empty() ? "" : " (" + std::string(hint) + ")") +
                       "; remove it or change " + std::string(other_key));
    return;
  }
  const std::size_t dot = full_key.rfind('.');
  auto it = resolved_.find(std::string(full_key.substr(0, dot)));
  if (it != resolved_.end())
    for (auto& r : it->second)
      if (r.key == full_key.substr(dot + 1)) r.note = "no effect with " + because;
}

void Reader::relation(bool ok, std::string_view full_key, std::string_view other_key, std::string_view what) {
  if (ok || has_error(full_key) || has_error(other_key)) return;
  const toml::node* n = node(full_key);
  if (n == nullptr) n = node(other_key);
  errors_.push_back(where(n) + ": " + std::string(full_key) + " = " + value_text(full_key) + ", " +
                    std::string(other_key) + " = " + value_text(other_key) + ": " + std::string(what));
}

std::string Reader::suggest(const std::string& name, const std::string& prefix, bool is_table) const {
  std::string best;
  std::size_t best_d = 3;
  auto consider = [&](const std::string& candidate) {
    const std::size_t d = edit_distance(name, candidate);
    if (d < best_d) best_d = d, best = candidate;
  };
  if (is_table) {
    for (const auto& t : tables_) {
      const std::size_t dot = t.rfind('.');
      const std::string parent = dot == std::string::npos ? "" : t.substr(0, dot);
      if (parent == prefix) consider(dot == std::string::npos ? t : t.substr(dot + 1));
    }
  }
  if (const auto it = keys_.find(prefix); it != keys_.end())
    for (const auto& k : it->second) consider(k);
  if (!best.empty()) return "; did you mean '" + best + "'?";
  // The same name in another table: a key put in the wrong place.
  for (const auto& [t, ks] : keys_)
    if (ks.count(name) != 0 && t != prefix) return "; did you mean '" + t + "." + name + "'?";
  if (const auto it = keys_.find(prefix); it != keys_.end() && !it->second.empty()) {
    std::string known;
    for (const auto& k : it->second) known += (known.empty() ? "" : ", ") + k;
    return " (known in [" + prefix + "]: " + known + ")";
  }
  std::string known;
  for (const auto& t : tables_)
    if (t.find('.') == std::string::npos) known += (known.empty() ? "" : ", ") + t;
  return " (tables: " + known + ")";
}

void Reader::check_unknown(const toml::table& t, const std::string& prefix) {
  for (const auto& [k, n] : t) {
    const std::string name(k.str());
    const std::string path = prefix.empty() ? name : prefix + "." + name;
    const bool known_table = std::find(tables_.begin(), tables_.end(), path) != tables_.end();
    const auto keys = keys_.find(prefix);
    const bool known_key = !prefix.empty() && keys != keys_.end() && keys->second.count(name) != 0;
    if (known_table && n.is_table()) {
      check_unknown(*n.as_table(), path);
    } else if (!known_table && !known_key) {
      const bool is_table = n.is_table();
      std::string what = is_table ? "[" + path + "]: unknown table" : path + ": unknown key";
      if (!is_table && prefix.empty()) what += " outside any table";
      errors_.push_back(where(&n) + ": " + what + suggest(name, prefix, is_table));
    }
  }
}

void Reader::finish() {
  if (syntax_ok_) check_unknown(root_, "");
  if (errors_.empty()) return;
  // In the order of the file: by line, problems without a line first; an indented problem (from
  // a file this one names) stays after the problem it belongs to.
  const std::string prefix = source_ + ":";
  auto line_of = [&](const std::string& e) -> std::size_t {
    if (e.rfind(prefix, 0) != 0) return 0;
    return std::strtoul(e.c_str() + prefix.size(), nullptr, 10);
  };
  std::vector<std::vector<std::string>> groups;
  for (auto& e : errors_) {
    if (e.rfind("  ", 0) == 0 && !groups.empty())
      groups.back().push_back(std::move(e));
    else
      groups.push_back({std::move(e)});
  }
  std::stable_sort(groups.begin(), groups.end(),
                   [&](const auto& a, const auto& b) { return line_of(a.front()) < line_of(b.front()); });
  errors_.clear();
  for (auto& g : groups)
    for (auto& e : g) errors_.push_back(std::move(e));
  throw Error(source_, errors_);
}

// ---- what was read ----------------------------------------------------------------------------

template <class T>
void Reader::put(const char* key, const T& v) {
  std::ostringstream s;
  if constexpr (std::is_same_v<T, double>) {
    // The shortest text that reads back to the same double (0.005, not 0.0050000000000000001).
    char buf[64];
    const auto end = std::to_chars(buf, buf + sizeof buf, v).ptr;
    std::string t(buf, end);
    if (t.find_first_of(".eEn") == std::string::npos) t += ".0";  // a TOML float, not an integer
    s << t;
  } else if constexpr (std::is_same_v<T, std::string>) {
    const bool plain = std::all_of(v.begin(), v.end(), [](char ch) { return ch != '"' && ch != '\\' && ch >= ' '; });
    if (plain)
      s << '"' << v << '"';  // as a user writes it
    else
      s << toml::value<std::string>(v);
  } else if constexpr (std::is_same_v<T, toml::array>) {
    s << v;
  } else {
    s << toml::value<T>(v);
  }
  put_text(key, s.str());
}

void Reader::put_text(const char* key, std::string value) {
  auto& entries = resolved_[table_];
  for (auto& e : entries)
    if (e.key == key) {
      e.value = std::move(value);
      return;
    }
  entries.push_back({key, std::move(value), {}});
}

std::vector<std::string> Reader::accepted_keys() const {
  std::vector<std::string> out;
  for (const auto& [t, ks] : keys_)
    for (const auto& k : ks) out.push_back(t + "." + k);
  std::sort(out.begin(), out.end());
  return out;
}

std::string Reader::resolved_toml() const {
  std::string s;
  for (const auto& t : tables_) {
    const auto it = resolved_.find(t);
    if (it == resolved_.end() || it->second.empty()) continue;
    s += (s.empty() ? "[" : "\n[") + t + "]\n";
    for (const auto& e : it->second) {
      if (e.note.empty())
        s += e.key + " = " + e.value + "\n";
      else
        s += "# " + e.key + " = " + e.value + "  # " + e.note + "\n";
    }
  }
  return s;
}

}  // namespace foxhunt::config
