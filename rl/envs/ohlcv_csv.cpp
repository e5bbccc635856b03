#include "rl/envs/ohlcv_csv.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string_view>

namespace foxhunt::rl {
namespace {

// Columns in OhlcvData order; a header may name the timestamp "timestamp", "date", "datetime" or
// "time", and the symbol "symbol" or "ticker".
constexpr std::array<std::string_view, 5> kPriceColumns = {"open", "high", "low", "close", "volume"};

[[noreturn]] void fail(const std::string& file, std::int64_t line, const std::string& why) {
  throw CsvError(file + ":" + std::to_string(line) + ": " + why);
}

std::string trim(std::string_view s) {
  std::size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  std::string out(s.substr(b, e - b));
  if (out.size() >= 2 && out.front() == '"' && out.back() == '"') out = out.substr(1, out.size() - 2);
  return out;
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::vector<std::string> split(std::string_view line) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (std::size_t k = 0; k <= line.size(); ++k) {
    if (k == line.size() || line[k] == ',') {
      out.push_back(trim(line.substr(start, k - start)));
      start = k + 1;
    }
  }
  return out;
}

// Lines of the text with their 1-based numbers; CR stripped, blank lines dropped.
std::vector<std::pair<std::int64_t, std::string>> lines_of(const std::string& text) {
  std::vector<std::pair<std::int64_t, std::string>> out;
  std::int64_t number = 0;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    ++number;
    std::string line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!trim(line).empty()) out.emplace_back(number, std::move(line));
    start = end + 1;
  }
  return out;
}

// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil).
std::int64_t days_from_civil(std::int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<std::int64_t>(doe) - 719468;
}

bool all_digits(std::string_view s) {
  return !s.empty() &&
         std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

// Integer seconds, or YYYY-MM-DD[( |T)HH:MM[:SS]][Z] as UTC seconds. false when malformed.
bool parse_timestamp(const std::string& s, std::int64_t& out) {
  if (s.empty()) return false;
  const bool negative = s[0] == '-';
  const std::string_view digits = std::string_view(s).substr(negative || s[0] == '+' ? 1 : 0);
  if (all_digits(digits)) {
    if (digits.size() > 18) return false;
    out = std::strtoll(s.c_str(), nullptr, 10);
    return true;
  }
  std::string t = s;
  if (!t.empty() && (t.back() == 'Z' || t.back() == 'z')) t.pop_back();
  if (t.size() < 10 || t[4] != '-' || t[7] != '-') return false;
  const std::string_view v(t);
  if (!all_digits(v.substr(0, 4)) || !all_digits(v.substr(5, 2)) || !all_digits(v.substr(8, 2))) return false;
  const int year = std::stoi(t.substr(0, 4)), month = std::stoi(t.substr(5, 2)), day = std::stoi(t.substr(8, 2));
  if (month < 1 || month > 12 || day < 1 || day > 31) return false;
  std::int64_t seconds = 0;
  if (t.size() > 10) {
    if ((t[10] != ' ' && t[10] != 'T') || t.size() < 16 || t[13] != ':') return false;
    if (!all_digits(v.substr(11, 2)) || !all_digits(v.substr(14, 2))) return false;
    const int hh = std::stoi(t.substr(11, 2)), mm = std::stoi(t.substr(14, 2));
    int ss = 0;
    if (t.size() > 16) {
      if (t.size() != 19 || t[16] != ':' || !all_digits(v.substr(17, 2))) return false;
      ss = std::stoi(t.substr(17, 2));
    }
    if (hh > 23 || mm > 59 || ss > 60) return false;
    seconds = hh * 3600 + mm * 60 + ss;
  }
  out = days_from_civil(year, static_cast<unsigned>(month), static_cast<unsigned>(day)) * 86400 + seconds;
  return true;
}

struct Columns {
  int timestamp = -1;
  int symbol = -1;
  std::array<int, 5> price{-1, -1, -1, -1, -1};
  std::size_t count = 0;
};

Columns read_header(const std::string& file, std::int64_t line, const std::string& text, bool want_symbol) {
  const std::vector<std::string> names = split(text);
  Columns c;
  c.count = names.size();
  for (std::size_t k = 0; k < names.size(); ++k) {
    const std::string n = lower(names[k]);
    const int idx = static_cast<int>(k);
    if (n == "timestamp" || n == "date" || n == "datetime" || n == "time") {
      if (c.timestamp < 0) c.timestamp = idx;
    } else if (n == "symbol" || n == "ticker") {
      if (c.symbol < 0) c.symbol = idx;
    } else {
      for (std::size_t p = 0; p < kPriceColumns.size(); ++p)
        if (n == kPriceColumns[p] && c.price[p] < 0) c.price[p] = idx;
    }
  }
  std::string have;
  for (const auto& n : names) have += (have.empty() ? "" : ", ") + n;
  if (c.timestamp < 0) fail(file, line, "missing column 'timestamp' (or date/datetime/time); header has: " + have);
  for (std::size_t p = 0; p < kPriceColumns.size(); ++p)
    if (c.price[p] < 0) fail(file, line, "missing column '" + std::string(kPriceColumns[p]) + "'; header has: " + have);
  if (want_symbol && c.symbol < 0)
    fail(file, line, "missing column 'symbol' (or ticker) for the long layout; header has: " + have);
  return c;
}

struct Bar {
  std::int64_t line;
  std::int64_t timestamp;
  std::array<double, 5> v;  // open, high, low, close, volume
};

Bar read_bar(const std::string& file, std::int64_t line, const std::vector<std::string>& fields, const Columns& c) {
  if (fields.size() != c.count)
    fail(file, line, "expected " + std::to_string(c.count) + " fields, got " + std::to_string(fields.size()));
  Bar b;
  b.line = line;
  if (!parse_timestamp(fields[c.timestamp], b.timestamp))
    fail(file, line, "bad timestamp '" + fields[c.timestamp] + "' (an integer or YYYY-MM-DD[ HH:MM[:SS]])");
  for (std::size_t p = 0; p < kPriceColumns.size(); ++p) {
    const std::string& f = fields[c.price[p]];
    const std::string col(kPriceColumns[p]);
    char* end = nullptr;
    errno = 0;
    const double v = f.empty() ? 0.0 : std::strtod(f.c_str(), &end);
    if (f.empty() || end != f.c_str() + f.size() || errno == ERANGE)
      fail(file, line, "non-numeric field in column '" + col + "': '" + f + "'");
    if (std::isnan(v)) fail(file, line, "NaN in column '" + col + "'");
    if (!std::isfinite(v)) fail(file, line, "infinite value in column '" + col + "'");
    if (p < 4 && !(v > 0)) fail(file, line, "column '" + col + "' must be > 0 (got " + f + ")");
    if (p == 4 && v < 0) fail(file, line, "column 'volume' must be >= 0 (got " + f + ")");
    b.v[p] = v;
  }
  if (b.v[1] < b.v[2]) fail(file, line, "high is below low");
  return b;
}

void check_increasing(const std::string& file, const std::vector<Bar>& bars) {
  for (std::size_t k = 1; k < bars.size(); ++k)
    if (bars[k].timestamp <= bars[k - 1].timestamp)
      fail(file, bars[k].line,
           "timestamps must increase strictly (" + std::to_string(bars[k].timestamp) + " after " +
               std::to_string(bars[k - 1].timestamp) + " on line " + std::to_string(bars[k - 1].line) + ")");
}

void check_length(const std::string& file, const std::vector<Bar>& bars, std::int64_t last_line, std::int64_t min_bars,
                  const std::string& what) {
  if (static_cast<std::int64_t>(bars.size()) < min_bars)
    fail(file, last_line,
         "too few rows for one episode: " + std::to_string(bars.size()) + " bars" + what + ", need at least " +
             std::to_string(min_bars) + " (market.window + market.episode_length + 1)");
}

// Fills `out` from per-asset bar lists that were checked to share their timestamps.
OhlcvData assemble(const std::vector<std::vector<Bar>>& per_asset, std::vector<std::string> symbols) {
  OhlcvData d;
  d.assets = static_cast<int>(per_asset.size());
  d.bars = static_cast<std::int64_t>(per_asset.front().size());
  d.symbols = std::move(symbols);
  for (const Bar& b : per_asset.front()) d.timestamps.push_back(b.timestamp);
  std::array<std::vector<double>*, 5> cols = {&d.open, &d.high, &d.low, &d.close, &d.volume};
  for (auto* c : cols) c->reserve(static_cast<std::size_t>(d.assets * d.bars));
  for (const auto& bars : per_asset)
    for (const Bar& b : bars)
      for (std::size_t p = 0; p < 5; ++p) cols[p]->push_back(b.v[p]);
  return d;
}

void check_aligned(const std::vector<std::vector<Bar>>& per_asset, const std::vector<std::string>& names,
                   const std::vector<std::string>& files) {
  for (std::size_t a = 1; a < per_asset.size(); ++a) {
    const auto& ref = per_asset.front();
    const auto& cur = per_asset[a];
    const std::size_t m = std::min(ref.size(), cur.size());
    for (std::size_t k = 0; k < m; ++k)
      if (cur[k].timestamp != ref[k].timestamp)
        fail(files[a], cur[k].line,
             names[a] + "'s timestamp " + std::to_string(cur[k].timestamp) + " differs from " + names[0] + "'s " +
                 std::to_string(ref[k].timestamp) + " at bar " + std::to_string(k) + " (assets must share their bars)");
    if (cur.size() != ref.size())
      fail(files[a],
           (cur.size() > m ? cur[m].line
            : cur.empty()  ? 1
                           : cur.back().line),
           names[a] + " has " + std::to_string(cur.size()) + " bars, " + names[0] + " has " +
               std::to_string(ref.size()) + " (assets must share their bars)");
  }
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw CsvError(p.string() + ":0: cannot open the file");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

OhlcvData parse_ohlcv_per_asset(const std::vector<std::string>& texts, const std::vector<std::string>& names,
                                std::int64_t min_bars) {
  if (texts.empty() || texts.size() != names.size())
    throw CsvError("parse_ohlcv_per_asset: one name per text, at least one");
  std::vector<std::vector<Bar>> per_asset;
  std::vector<std::string> symbols;
  for (std::size_t a = 0; a < texts.size(); ++a) {
    const std::string& file = names[a];
    const auto lines = lines_of(texts[a]);
    if (lines.empty()) fail(file, 1, "empty file: expected a header (timestamp, open, high, low, close, volume)");
    const Columns c = read_header(file, lines.front().first, lines.front().second, false);
    std::vector<Bar> bars;
    for (std::size_t k = 1; k < lines.size(); ++k)
      bars.push_back(read_bar(file, lines[k].first, split(lines[k].second), c));
    check_increasing(file, bars);
    check_length(file, bars, lines.back().first, min_bars, "");
    per_asset.push_back(std::move(bars));
    symbols.push_back(std::filesystem::path(file).stem().string());
  }
  check_aligned(per_asset, symbols, names);
  return assemble(per_asset, symbols);
}

OhlcvData parse_ohlcv_long(const std::string& text, const std::string& name, const std::vector<std::string>& symbols,
                           std::int64_t min_bars) {
  if (symbols.empty()) throw CsvError(name + ":0: the long layout needs replay.symbols (one per asset)");
  const auto lines = lines_of(text);
  if (lines.empty()) fail(name, 1, "empty file: expected a header (timestamp, symbol, open, high, low, close, volume)");
  const Columns c = read_header(name, lines.front().first, lines.front().second, true);
  std::map<std::string, std::size_t> wanted;
  for (std::size_t a = 0; a < symbols.size(); ++a)
    if (!wanted.emplace(symbols[a], a).second) throw CsvError(name + ":0: symbol '" + symbols[a] + "' is listed twice");
  std::vector<std::vector<Bar>> per_asset(symbols.size());
  for (std::size_t k = 1; k < lines.size(); ++k) {
    const auto fields = split(lines[k].second);
    if (fields.size() != c.count)
      fail(name, lines[k].first,
           "expected " + std::to_string(c.count) + " fields, got " + std::to_string(fields.size()));
    const auto it = wanted.find(fields[c.symbol]);
    if (it == wanted.end()) continue;  // other symbols are not part of this market
    per_asset[it->second].push_back(read_bar(name, lines[k].first, fields, c));
  }
  for (std::size_t a = 0; a < symbols.size(); ++a) {
    if (per_asset[a].empty()) fail(name, lines.back().first, "symbol '" + symbols[a] + "' has no rows");
    check_increasing(name, per_asset[a]);
    check_length(name, per_asset[a], lines.back().first, min_bars, " for symbol '" + symbols[a] + "'");
  }
  check_aligned(per_asset, symbols, std::vector<std::string>(symbols.size(), name));
  return assemble(per_asset, symbols);
}

OhlcvData load_ohlcv_per_asset(const std::vector<std::filesystem::path>& files, std::int64_t min_bars) {
  std::vector<std::string> texts, names;
  for (const auto& f : files) {
    texts.push_back(read_file(f));
    names.push_back(f.string());
  }
  return parse_ohlcv_per_asset(texts, names, min_bars);
}

OhlcvData load_ohlcv_long(const std::filesystem::path& file, const std::vector<std::string>& symbols,
                          std::int64_t min_bars) {
  return parse_ohlcv_long(read_file(file), file.string(), symbols, min_bars);
}

OhlcvData load_ohlcv(const MarketConfig& config) {
  if (config.process != PriceProcess::replay) throw ConfigError("load_ohlcv: process.kind is not \"replay\"");
  const std::int64_t min_bars = static_cast<std::int64_t>(config.window) + config.episode_length + 1;
  if (config.layout == CsvLayout::long_format) return load_ohlcv_long(config.files.at(0), config.symbols, min_bars);
  std::vector<std::filesystem::path> files(config.files.begin(), config.files.end());
  return load_ohlcv_per_asset(files, min_bars);
}

}  // namespace foxhunt::rl
