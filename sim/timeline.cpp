#include "sim/timeline.h"

#include <fmt/compile.h>
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <iterator>
#include <type_traits>
#include <variant>

#include "core/diagnostics.h"
#include "core/json_writer.h"

namespace tierflow::sim {
namespace {

constexpr int64_t kPsPerUs = 1'000'000;
// Integers above 2^53 are not exact as JavaScript numbers, which chrome://tracing uses.
constexpr uint64_t kMaxFlowId = uint64_t{1} << 53;
// Formatted bytes handed to the writer at a time (a little more: whole events).
constexpr size_t kChunkBytes = size_t{1} << 20;
// Room asked for ahead of an event's fixed parts; names and arguments ask for their own.
constexpr size_t kEventRoom = 256;

// True when `s` is printable ASCII with nothing to escape (every name tierflow generates).
bool plain_text(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u >= 0x20 && u < 0x80 && c != '"' && c != '\\';
  });
}

char* copy(char* p, std::string_view s) {
  std::memcpy(p, s.data(), s.size());
  return p + s.size();
}

char* write_uint(char* p, uint64_t v) { return std::to_chars(p, p + 20, v).ptr; }

// `,"key":` then `ps` in microseconds with six decimals (the picoseconds within the
// microsecond), printed exactly from the integer; at most key.size() + 31 bytes.
char* write_time(char* p, std::string_view key, int64_t ps) {
  TF_ASSERT(ps >= 0, "negative timeline time {} ps for '{}'", ps, key);
  p = copy(p, ",\"");
  p = copy(p, key);
  p = copy(p, "\":");
  p = write_uint(p, static_cast<uint64_t>(ps / kPsPerUs));
  auto rest = static_cast<uint32_t>(ps % kPsPerUs);
  p[0] = '.';
  for (int i = 6; i > 0; --i) {
    p[i] = static_cast<char>('0' + rest % 10);
    rest /= 10;
  }
  return p + 7;
}

// `,"pid":P,"tid":T`; at most 36 bytes.
char* write_ids(char* p, uint32_t pid, uint32_t track) {
  p = copy(p, R"(,"pid":)");
  p = write_uint(p, pid);
  p = copy(p, R"(,"tid":)");
  return write_uint(p, track);
}

}  // namespace

Timeline::Timeline(const std::string& path) : own_(std::in_place, path), out_(*own_) {
  start();
}

Timeline::Timeline(AtomicOutput& out) : out_(out) {
  start();
}

void Timeline::start() {
  chunk_.resize(kChunkBytes + kEventRoom * 16);
  writing_.resize(chunk_.size());
  // `ts` and `dur` are microseconds whatever displayTimeUnit says (it only sets how times
  // are shown); otherData, shown as the trace's metadata, says so for readers of the file.
  put(R"({"displayTimeUnit":"ns","otherData":{"ts_unit":"us","dur_unit":"us",)"
      R"("ts_decimals":6,"ts_exact_from":"integer picoseconds"},"traceEvents":[)"
      "\n");
  writer_ = std::thread([this] { write_loop(); });
}

Timeline::~Timeline() { stop_writer(); }

char* Timeline::room(size_t n) {
  // Only an event with very long names or arguments outgrows the chunk's slack.
  if (len_ + n > chunk_.size()) chunk_.resize(len_ + n + kEventRoom * 16);
  return chunk_.data() + len_;
}

void Timeline::put(std::string_view s) { advance(copy(room(s.size()), s)); }

void Timeline::hand_off() {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [this] { return !pending_; });
  std::swap(chunk_, writing_);  // chunk_ gets the written buffer back
  writing_len_ = len_;
  len_ = 0;
  pending_ = true;
  cv_.notify_all();
}

void Timeline::write_loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    cv_.wait(lock, [this] { return pending_ || closing_; });
    if (!pending_) return;
    lock.unlock();
    out_.write(std::string_view(writing_.data(), writing_len_));
    lock.lock();
    pending_ = false;
    cv_.notify_all();
  }
}

void Timeline::stop_writer() {
  if (!writer_.joinable()) return;
  {
    const std::lock_guard lock(mutex_);
    closing_ = true;
  }
  cv_.notify_all();
  writer_.join();
}

ProcessId Timeline::process(std::string_view name, int sort_index) {
  TF_ASSERT(series_of_.size() + 1 < kFirstTrack, "too many timeline processes");
  series_of_.emplace_back();
  const auto pid = static_cast<ProcessId>(series_of_.size());
  begin_event('M');
  put(R"(,"pid":)");
  put_uint(pid);
  put_string("name", "process_name");
  put(R"(,"args":{"name":)");
  std::string text;
  append_json_string(text, name);
  put(text);
  put("}");
  end_event();
  begin_event('M');
  put(R"(,"pid":)");
  put_uint(pid);
  put(R"(,"name":"process_sort_index","args":{"sort_index":)");
  put_int(sort_index);
  put("}");
  end_event();
  return pid;
}

TrackId Timeline::track(ProcessId pid, std::string_view name, int sort_index) {
  TF_ASSERT(pid >= 1 && pid <= series_of_.size(), "unknown timeline process {}", pid);
  TF_ASSERT(track_pid_.size() < size_t{UINT32_MAX - kFirstTrack}, "too many timeline tracks");
  const auto tid = static_cast<TrackId>(kFirstTrack + track_pid_.size());
  track_pid_.push_back(pid);
  begin_event('M');
  put_ids(pid, tid);
  put_string("name", "thread_name");
  put(R"(,"args":{"name":)");
  std::string text;
  append_json_string(text, name);
  put(text);
  put("}");
  end_event();
  begin_event('M');
  put_ids(pid, tid);
  put(R"(,"name":"thread_sort_index","args":{"sort_index":)");
  put_int(sort_index);
  put("}");
  end_event();
  return tid;
}

void Timeline::slice(TrackId track, int64_t start_ps, int64_t end_ps, std::string_view name,
                     std::string_view category, std::span<const Arg> args) {
  TF_ASSERT(end_ps >= start_ps, "slice '{}' ends at {} ps before it starts at {} ps", name, end_ps,
            start_ps);
  begin_event('X');
  // The fixed parts in one stretch of room: ids and two times.
  char* p = room(112);
  p = write_ids(p, pid_of(track), track);
  p = write_time(p, "ts", start_ps);
  advance(write_time(p, "dur", end_ps - start_ps));
  put_string("name", name);
  put_string("cat", category);
  put_args(args);
  end_event();
}

SeriesId Timeline::series(ProcessId pid, std::string_view name) {
  return series(pid, name, {});
}

SeriesId Timeline::series(ProcessId pid, std::string_view name,
                          std::span<const std::string_view> keys) {
  TF_ASSERT(pid >= 1 && pid <= series_of_.size(), "unknown timeline process {}", pid);
  // Keys are kept as they are written: `"key":`.
  std::vector<std::string> rendered;
  for (const std::string_view key : keys) {
    std::string text;
    append_json_string(text, key);
    rendered.push_back(text + ':');
  }
  auto& by_name = series_of_[pid - 1];
  const auto it = by_name.find(name);
  if (it != by_name.end()) {
    TF_ASSERT(series_[it->second].keys == rendered, "counter '{}' asked for with other keys", name);
    return it->second;
  }
  const auto id = static_cast<SeriesId>(series_.size());
  const size_t values = std::max<size_t>(1, rendered.size());
  series_.push_back(
      Series{pid, std::string(name), std::move(rendered), std::vector<double>(values)});
  by_name.emplace(std::string(name), id);
  return id;
}

void Timeline::counter(ProcessId pid, std::string_view name, int64_t t_ps, double value) {
  counter(series(pid, name), t_ps, value);
}

void Timeline::counter(SeriesId id, int64_t t_ps, double value) {
  TF_ASSERT(id < series_.size(), "unknown counter series {}", id);
  Series& s = series_[id];
  TF_ASSERT(s.keys.empty(), "counter '{}' has keys: sample it with one value per key", s.name);
  TF_ASSERT(std::isfinite(value), "counter '{}' sample is not finite", s.name);
  if (s.written && s.last[0] == value) return;
  s.written = true;
  s.last[0] = value;
  begin_event('C');
  put(R"(,"pid":)");
  put_uint(s.pid);
  put_time("ts", t_ps);
  put_string("name", s.name);
  put(R"(,"args":{"value":)");
  put_double(value);
  put("}");
  end_event();
}

void Timeline::counter(SeriesId id, int64_t t_ps, std::span<const double> values) {
  TF_ASSERT(id < series_.size(), "unknown counter series {}", id);
  Series& s = series_[id];
  TF_ASSERT(!s.keys.empty() && values.size() == s.keys.size(),
            "counter '{}' has {} keys, sampled with {} values", s.name, s.keys.size(),
            values.size());
  for (const double v : values) {
    TF_ASSERT(std::isfinite(v), "counter '{}' sample is not finite", s.name);
  }
  if (s.written && std::equal(values.begin(), values.end(), s.last.begin())) return;
  s.written = true;
  std::copy(values.begin(), values.end(), s.last.begin());
  begin_event('C');
  put(R"(,"pid":)");
  put_uint(s.pid);
  put_time("ts", t_ps);
  put_string("name", s.name);
  put(R"(,"args":{)");
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) put(",");
    put(s.keys[i]);
    put_double(values[i]);
  }
  put("}");
  end_event();
}

void Timeline::flow(uint64_t id, TrackId from_track, int64_t from_ps, TrackId to_track,
                    int64_t to_ps, std::string_view name, std::string_view category) {
  TF_ASSERT(id < kMaxFlowId, "flow id {} is not exact in JavaScript viewers", id);
  TF_ASSERT(from_ps <= to_ps, "flow '{}' goes back in time ({} ps to {} ps)", name, from_ps, to_ps);
  for (const char phase : {'s', 'f'}) {
    const TrackId track = phase == 's' ? from_track : to_track;
    begin_event(phase);
    // "bp":"e": bind the end to the enclosing slice, not to the next slice that starts.
    if (phase == 'f') put(R"(,"bp":"e")");
    put(R"(,"id":)");
    put_uint(id);
    put_ids(pid_of(track), track);
    put_time("ts", phase == 's' ? from_ps : to_ps);
    put_string("name", name);
    put_string("cat", category);
    end_event();
  }
}

void Timeline::instant(TrackId track, int64_t t_ps, std::string_view name,
                       std::span<const Arg> args) {
  begin_event('i');
  put(R"(,"s":"t")");
  put_ids(pid_of(track), track);
  put_time("ts", t_ps);
  put_string("name", name);
  put_args(args);
  end_event();
}

void Timeline::finish() {
  TF_ASSERT(!finished_, "Timeline::finish called twice");
  finished_ = true;
  put("\n]}\n");
  hand_off();
  stop_writer();
  if (own_) own_->commit();
}

void Timeline::begin_event(char phase) {
  TF_ASSERT(!finished_, "timeline event after finish");
  char* p = room(kEventRoom);
  if (!first_event_) p = copy(p, ",\n");
  first_event_ = false;
  p = copy(p, R"({"ph":")");
  *p++ = phase;
  *p++ = '"';
  advance(p);
}

void Timeline::end_event() {
  put("}");
  if (len_ > kChunkBytes) hand_off();
}

void Timeline::put_int(int64_t v) {
  char* p = room(24);
  advance(std::to_chars(p, p + 24, v).ptr);
}

void Timeline::put_uint(uint64_t v) {
  advance(write_uint(room(24), v));
}

void Timeline::put_double(double v) {
  char* p = room(32);
  // An integer below 2^53 prints as its digits, as fmt's shortest round-trip form ("{}")
  // writes it (fixed notation up to 16 digits); to_chars is much quicker for it. Every
  // other value goes through fmt, as before (to_chars would switch to fixed notation for
  // large values where fmt keeps the exponent).
  if (v >= 0 && v < 0x1p53 && !std::signbit(v) && v == std::floor(v)) {
    advance(write_uint(p, static_cast<uint64_t>(v)));
  } else {
    advance(fmt::format_to(p, FMT_COMPILE("{}"), v));
  }
}

void Timeline::put_ids(ProcessId pid, TrackId track) {
  advance(write_ids(room(40), pid, track));
}

void Timeline::put_time(std::string_view key, int64_t ps) {
  advance(write_time(room(key.size() + 32), key, ps));
}

void Timeline::put_string(std::string_view key, std::string_view value) {
  // Keys here are tierflow's own ("name", "cat"): plain text.
  if (plain_text(value)) {
    char* p = room(key.size() + value.size() + 6);
    p = copy(p, ",\"");
    p = copy(p, key);
    p = copy(p, "\":\"");
    p = copy(p, value);
    *p++ = '"';
    advance(p);
    return;
  }
  std::string text = ",";
  append_json_string(text, key);
  text += ':';
  append_json_string(text, value);
  put(text);
}

void Timeline::put_args(std::span<const Arg> args) {
  if (args.empty()) return;
  put(R"(,"args":{)");
  bool first = true;
  std::string text;
  for (const Arg& arg : args) {
    if (!first) put(",");
    first = false;
    if (plain_text(arg.key)) {
      char* p = room(arg.key.size() + 3);
      *p++ = '"';
      p = copy(p, arg.key);
      p = copy(p, "\":");
      advance(p);
    } else {
      text.clear();
      append_json_string(text, arg.key);
      text += ':';
      put(text);
    }
    std::visit(
        [&](const auto& v) {
          using V = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<V, std::string_view>) {
            text.clear();
            append_json_string(text, v);
            put(text);
          } else if constexpr (std::is_same_v<V, double>) {
            TF_ASSERT(std::isfinite(v), "argument '{}' is not finite", arg.key);
            put_double(v);
          } else if constexpr (std::is_same_v<V, int64_t>) {
            put_int(v);
          } else {
            put_uint(v);
          }
        },
        arg.value);
  }
  put("}");
}

ProcessId Timeline::pid_of(TrackId track) const {
  TF_ASSERT(track >= kFirstTrack && track - kFirstTrack < track_pid_.size(),
            "unknown timeline track {}", track);
  return track_pid_[track - kFirstTrack];
}

uint32_t Lanes::acquire() {
  if (free_.empty()) {
    busy_.push_back(true);
    return static_cast<uint32_t>(busy_.size() - 1);
  }
  const uint32_t lane = free_.top();
  free_.pop();
  busy_[lane] = true;
  return lane;
}

void Lanes::release(uint32_t lane) {
  TF_ASSERT(lane < busy_.size() && busy_[lane], "lane {} released but not in use", lane);
  busy_[lane] = false;
  free_.push(lane);
}

}  // namespace tierflow::sim
