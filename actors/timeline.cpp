#include "actors/timeline.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <map>
#include <stdexcept>

#include "gpu/check.hpp"

namespace foxhunt::actors {
namespace {

// Sorted, merged [start, end) pairs per lane.
std::map<std::string, std::vector<std::pair<double, double>>> merged_by_lane(const std::vector<BusyInterval>& in) {
  std::map<std::string, std::vector<std::pair<double, double>>> lanes;
  for (const auto& i : in)
    if (i.end_us > i.start_us) lanes[i.lane].emplace_back(i.start_us, i.end_us);
  for (auto& [lane, v] : lanes) {
    std::sort(v.begin(), v.end());
    std::vector<std::pair<double, double>> m;
    for (const auto& iv : v) {
      if (!m.empty() && iv.first <= m.back().second)
        m.back().second = std::max(m.back().second, iv.second);
      else
        m.push_back(iv);
    }
    v = std::move(m);
  }
  return lanes;
}

}  // namespace

std::string chrome_trace_json(const std::vector<BusyInterval>& intervals) {
  std::map<std::string, int> tid;
  for (const auto& i : intervals) tid.emplace(i.lane, 0);
  int next = 1;
  for (auto& [lane, id] : tid) id = next++;
  nlohmann::json events = nlohmann::json::array();
  for (const auto& [lane, id] : tid)
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", id}, {"args", {{"name", lane}}}});
  for (const auto& i : intervals)
    events.push_back({{"name", i.name},
                      {"cat", i.lane},
                      {"ph", "X"},
                      {"ts", i.start_us},
                      {"dur", std::max(0.0, i.end_us - i.start_us)},
                      {"pid", 0},
                      {"tid", tid[i.lane]}});
  nlohmann::json doc = {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  return doc.dump();
}

void write_chrome_trace(const std::filesystem::path& file, const std::vector<BusyInterval>& intervals) {
  std::filesystem::path tmp = file;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << chrome_trace_json(intervals);
    if (!out) throw std::runtime_error("cannot write " + tmp.string());
  }
  std::filesystem::rename(tmp, file);
}

double busy_us(const std::vector<BusyInterval>& intervals, const std::string& lane) {
  auto lanes = merged_by_lane(intervals);
  double t = 0;
  for (const auto& [a, b] : lanes[lane]) t += b - a;
  return t;
}

double overlap_fraction(const std::vector<BusyInterval>& intervals, int min_lanes) {
  auto lanes = merged_by_lane(intervals);
  std::vector<std::pair<double, int>> edges;  // (time, +1 / -1); ends sort before starts at ties
  for (const auto& [lane, v] : lanes)
    for (const auto& [a, b] : v) {
      edges.emplace_back(a, +1);
      edges.emplace_back(b, -1);
    }
  if (edges.empty()) return 0.0;
  std::sort(edges.begin(), edges.end());
  const double span = edges.back().first - edges.front().first;
  if (span <= 0) return 0.0;
  double covered = 0, prev = edges.front().first;
  int busy = 0;
  for (const auto& [t, d] : edges) {
    if (busy >= min_lanes) covered += t - prev;
    busy += d;
    prev = t;
  }
  return covered / span;
}

StreamTimeline::StreamTimeline(std::size_t max_intervals) : max_(max_intervals) {}

StreamTimeline::~StreamTimeline() {
  for (auto& r : recs_) {
    if (r.begin) cudaEventDestroy(r.begin);
    if (r.end) cudaEventDestroy(r.end);
  }
  for (cudaEvent_t e : spare_) cudaEventDestroy(e);
  if (origin_) cudaEventDestroy(origin_);
}

void StreamTimeline::reserve(std::size_t intervals) {
  std::lock_guard lock(mutex_);
  const std::size_t want = 2 * std::min(intervals, max_);
  spare_.reserve(want);
  recs_.reserve(std::min(intervals, max_));
  while (spare_.size() < want) {
    cudaEvent_t e = nullptr;
    FH_CHECK(cudaEventCreate(&e));
    spare_.push_back(e);
  }
}

void StreamTimeline::start(cudaStream_t stream) {
  std::lock_guard lock(mutex_);
  if (!origin_) FH_CHECK(cudaEventCreate(&origin_));
  FH_CHECK(cudaEventRecord(origin_, stream));
}

int StreamTimeline::begin(const char* lane, const char* name, cudaStream_t stream) {
  std::lock_guard lock(mutex_);
  if (!origin_ || recs_.size() >= max_) return -1;
  Rec r{lane, name};
  for (cudaEvent_t* e : {&r.begin, &r.end}) {
    if (!spare_.empty()) {
      *e = spare_.back();
      spare_.pop_back();
    } else {
      FH_CHECK(cudaEventCreate(e));
    }
  }
  FH_CHECK(cudaEventRecord(r.begin, stream));
  recs_.push_back(r);
  return static_cast<int>(recs_.size()) - 1;
}

void StreamTimeline::end(int token, cudaStream_t stream) {
  if (token < 0) return;
  std::lock_guard lock(mutex_);
  Rec& r = recs_.at(static_cast<std::size_t>(token));
  FH_CHECK(cudaEventRecord(r.end, stream));
  r.ended = true;
}

std::vector<BusyInterval> StreamTimeline::resolve() const {
  std::lock_guard lock(mutex_);
  std::vector<BusyInterval> out;
  out.reserve(recs_.size());
  for (const auto& r : recs_) {
    if (!r.ended) continue;
    float a = 0, b = 0;
    FH_CHECK(cudaEventSynchronize(r.end));
    FH_CHECK(cudaEventElapsedTime(&a, origin_, r.begin));
    FH_CHECK(cudaEventElapsedTime(&b, origin_, r.end));
    out.push_back({r.lane, r.name, a * 1000.0, b * 1000.0});
  }
  return out;
}

}  // namespace foxhunt::actors
