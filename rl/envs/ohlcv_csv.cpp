#include "rl/envs/ohlcv_csv.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
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
bool timestamp_of(const std::string& s, std::int64_t& out) {
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
  if (!timestamp_of(fields[c.timestamp], b.timestamp))
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

OhlcvData load_ohlcv_all(const MarketConfig& config) {
  if (config.process != PriceProcess::replay) throw ConfigError("load_ohlcv: process.kind is not \"replay\"");
  if (config.files.empty()) throw ConfigError("replay.files: no CSV file named");
  const std::int64_t min_bars = static_cast<std::int64_t>(config.window) + config.episode_length + 1;
  if (config.layout == CsvLayout::long_format) return load_ohlcv_long(config.files.at(0), config.symbols, min_bars);
  std::vector<std::filesystem::path> files(config.files.begin(), config.files.end());
  return load_ohlcv_per_asset(files, min_bars);
}

OhlcvData load_ohlcv(const MarketConfig& config) {
  OhlcvData all = load_ohlcv_all(config);
  const SplitBars train = split_bars(config, all.timestamps, Split::train);
  const SplitBars part = split_bars(config, all.timestamps, config.replay_split);
  all.step_vol = close_volatility(all, train.first, train.end);
  if (part.history == 0 && part.end == all.bars) return all;
  return slice_bars(all, part.history, part.end);
}

bool parse_timestamp(const std::string& text, std::int64_t& seconds) { return timestamp_of(text, seconds); }

std::string format_timestamp(std::int64_t seconds) {
  // Howard Hinnant's civil_from_days.
  std::int64_t days = seconds >= 0 ? seconds / 86400 : -((-seconds + 86399) / 86400);
  const std::int64_t rest = seconds - days * 86400;
  days += 719468;
  const std::int64_t era = (days >= 0 ? days : days - 146096) / 146097;
  const unsigned doe = static_cast<unsigned>(days - era * 146097);
  const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const unsigned mp = (5 * doy + 2) / 153;
  const unsigned d = doy - (153 * mp + 2) / 5 + 1;
  const unsigned m = mp < 10 ? mp + 3 : mp - 9;
  const std::int64_t y = static_cast<std::int64_t>(yoe) + era * 400 + (m <= 2);
  char buf[64];
  if (rest == 0)
    std::snprintf(buf, sizeof buf, "%04lld-%02u-%02u", static_cast<long long>(y), m, d);
  else
    std::snprintf(buf, sizeof buf, "%04lld-%02u-%02u %02d:%02d:%02d", static_cast<long long>(y), m, d,
                  static_cast<int>(rest / 3600), static_cast<int>(rest / 60 % 60), static_cast<int>(rest % 60));
  return buf;
}

OhlcvData slice_bars(const OhlcvData& data, std::int64_t begin, std::int64_t end) {
  if (begin < 0 || end > data.bars || begin >= end)
    throw std::invalid_argument("slice_bars: [" + std::to_string(begin) + ", " + std::to_string(end) +
                                ") is not a range of the " + std::to_string(data.bars) + " bars");
  OhlcvData out;
  out.assets = data.assets;
  out.bars = end - begin;
  out.first_bar = data.first_bar + begin;
  out.symbols = data.symbols;
  out.timestamps.assign(data.timestamps.begin() + begin, data.timestamps.begin() + end);
  const std::array<const std::vector<double>*, 5> from = {&data.open, &data.high, &data.low, &data.close, &data.volume};
  const std::array<std::vector<double>*, 5> to = {&out.open, &out.high, &out.low, &out.close, &out.volume};
  for (std::size_t c = 0; c < from.size(); ++c) {
    to[c]->reserve(static_cast<std::size_t>(out.assets * out.bars));
    for (int a = 0; a < data.assets; ++a) {
      const auto row = from[c]->begin() + a * data.bars;
      to[c]->insert(to[c]->end(), row + begin, row + end);
    }
  }
  out.step_vol = data.step_vol;
  return out;
}

std::vector<double> close_volatility(const OhlcvData& data, std::int64_t begin, std::int64_t end) {
  std::vector<double> vol(static_cast<std::size_t>(data.assets), 1e-4);
  const std::int64_t m = end - begin - 1;  // returns
  if (begin < 0 || end > data.bars || m < 1) return vol;
  for (int a = 0; a < data.assets; ++a) {
    const double* close = data.close.data() + static_cast<std::size_t>(a) * data.bars;
    double s = 0, s2 = 0;
    for (std::int64_t b = begin; b + 1 < end; ++b) {
      const double r = std::log(close[b + 1] / close[b]);
      s += r;
      s2 += r * r;
    }
    const double mean = s / m;
    const double v = std::sqrt(std::max(s2 / m - mean * mean, 0.0));
    if (v > 0) vol[a] = v;  // a constant series keeps the scale finite
  }
  return vol;
}

void check_split(const MarketConfig& c, const std::vector<std::int64_t>& ts,
                 const std::function<void(const std::string&, const std::string&)>& bad, MarketConfig* resolved) {
  if (resolved != nullptr) *resolved = c;
  if (!c.split.given) return;
  const auto B = static_cast<std::int64_t>(ts.size());
  const std::int64_t W = c.window, L = c.episode_length;
  const std::string range = std::to_string(B) + " bars, " +
                            (B > 0 ? format_timestamp(ts.front()) + " .. " + format_timestamp(ts.back()) : "none");
  // A boundary as a bar index: a date starts its part at the first bar at or after it.
  auto resolve = [&](const SplitPoint& p, const std::string& key) -> std::int64_t {
    std::int64_t bar = p.bar;
    if (p.by_time) bar = std::lower_bound(ts.begin(), ts.end(), p.time) - ts.begin();
    if (bar <= 0 || bar >= B) {
      bad(key, (p.by_time ? std::string("no bar of the data is on both sides of it")
                          : "must be a bar index in [1, " + std::to_string(B - 1) + "]") +
                   " (the data has " + range + ")");
      return -1;
    }
    return bar;
  };
  const std::int64_t t = resolve(c.split.train_end, "split.train_end");
  const bool val = c.split.has_validation();
  const std::int64_t v = val ? resolve(c.split.validation_end, "split.validation_end") : t;
  if (t < 0 || v < 0) return;
  auto bars_of = [&](std::int64_t a, std::int64_t b) {
    return "[" + std::to_string(a) + ", " + std::to_string(b) + ") has " + std::to_string(b - a) + " bars";
  };
  bool ok = true;
  if (t < W + L + 1) {
    bad("split.train_end", "the train part " + bars_of(0, t) + ", needs at least " + std::to_string(W + L + 1) +
                               " (market.window + market.episode_length + 1)");
    ok = false;
  }
  if (val && v <= t) {
    bad("split.validation_end",
        "must be after split.train_end (bar " + std::to_string(v) + " is not after bar " + std::to_string(t) + ")");
    return;
  }
  if (val && v - t < L + 1) {
    bad("split.validation_end", "the validation part " + bars_of(t, v) + ", needs at least " + std::to_string(L + 1) +
                                    " (market.episode_length + 1)");
    ok = false;
  }
  if (B - v < L + 1) {
    bad(val ? "split.validation_end" : "split.train_end", "the test part " + bars_of(v, B) + ", needs at least " +
                                                              std::to_string(L + 1) + " (market.episode_length + 1)");
    ok = false;
  }
  if (ok && resolved != nullptr) {
    resolved->split.train_end.bar = t;
    resolved->split.validation_end.bar = val ? v : -1;
  }
}

SplitBars split_bars(const MarketConfig& c, const std::vector<std::int64_t>& ts, Split which) {
  SplitBars s;
  s.split = which;
  s.total = static_cast<std::int64_t>(ts.size());
  if (!c.split.given) {
    if (which != Split::train)
      throw ConfigError(std::string("split: the market has no [split], so no ") + to_string(which) +
                        " part (add [split] train_end = ... to the market config)");
    s.end = s.total;
    return s;
  }
  if (which == Split::validation && !c.split.has_validation())
    throw ConfigError("split.validation_end: the market's [split] has no validation part (give validation_end)");
  std::vector<std::string> problems;
  MarketConfig r;
  check_split(
      c, ts, [&](const std::string& key, const std::string& what) { problems.push_back(key + ": " + what); }, &r);
  if (!problems.empty()) throw ConfigError("market config [split]", problems);
  const std::int64_t t = r.split.train_end.bar;
  const std::int64_t v = c.split.has_validation() ? r.split.validation_end.bar : t;
  if (which == Split::train) {
    s.first = 0, s.end = t, s.history = 0;
  } else {
    s.first = which == Split::validation ? t : v;
    s.end = which == Split::validation ? v : s.total;
    s.history = s.first - c.window;
  }
  return s;
}

std::string describe_split(const MarketConfig& c, const OhlcvData& data, Split which) {
  const SplitBars s = split_bars(c, data.timestamps, which);
  std::string files;
  for (const auto& f : c.files) files += (files.empty() ? "" : ", ") + std::filesystem::path(f).filename().string();
  std::string out = std::string(to_string(which)) + ": bars " + std::to_string(s.first) + ".." +
                    std::to_string(s.end - 1) + " of " + files + " (" +
                    format_timestamp(data.timestamps[static_cast<std::size_t>(s.first)]) + " .. " +
                    format_timestamp(data.timestamps[static_cast<std::size_t>(s.end - 1)]) + ", " +
                    std::to_string(s.end - s.first) + " bars";
  if (which == Split::train)
    out += "; episodes trade from bar " + std::to_string(c.window) + ", after a full window)";
  else
    out += "; the observation window reaches back to bar " + std::to_string(s.history) + ")";
  return out;
}

std::string describe_split(const MarketConfig& c, Split which) { return describe_split(c, load_ohlcv_all(c), which); }

}  // namespace foxhunt::rl
