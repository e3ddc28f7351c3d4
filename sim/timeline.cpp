#include "sim/timeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <iterator>
#include <type_traits>
#include <variant>

#include "core/diagnostics.h"
#include "core/json_reader.h"

namespace tierflow::sim {
namespace {

constexpr int64_t kPsPerUs = 1'000'000;
// Integers above 2^53 are not exact as JavaScript numbers, which chrome://tracing uses.
constexpr uint64_t kMaxFlowId = uint64_t{1} << 53;
constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD in UTF-8
// Formatted bytes handed to the writer at a time (a little more: whole events).
constexpr size_t kChunkBytes = size_t{1} << 20;

// Length of the well-formed UTF-8 sequence starting at s[i] (Unicode table 3-7: no
// overlong forms, no surrogates, nothing above U+10FFFF), or 0 where there is none.
size_t utf8_length(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned lead = byte(i);
  if (lead < 0x80) return 1;
  size_t n = 0;
  unsigned lo = 0x80;  // range of the second byte; later ones are always 80..BF
  unsigned hi = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    n = 2;
  } else if (lead == 0xE0) {
    n = 3;
    lo = 0xA0;
  } else if (lead == 0xED) {
    n = 3;
    hi = 0x9F;
  } else if (lead >= 0xE1 && lead <= 0xEF) {
    n = 3;
  } else if (lead == 0xF0) {
    n = 4;
    lo = 0x90;
  } else if (lead == 0xF4) {
    n = 4;
    hi = 0x8F;
  } else if (lead >= 0xF1 && lead <= 0xF3) {
    n = 4;
  } else {
    return 0;
  }
  if (i + n > s.size() || byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  }
  return n;
}

// Appends `s` as a JSON string. Names come from user files, so bytes that are not UTF-8
// become U+FFFD: a viewer rejects the whole file over one bad string.
void append_json_text(std::string& out, std::string_view s) {
  // Fast path: printable ASCII with nothing to escape (every name tierflow generates).
  if (std::all_of(s.begin(), s.end(), [](char c) {
        const auto u = static_cast<unsigned char>(c);
        return u >= 0x20 && u < 0x80 && c != '"' && c != '\\';
      })) {
    out += '"';
    out += s;
    out += '"';
    return;
  }
  size_t i = 0;
  while (i < s.size() && utf8_length(s, i) != 0) i += utf8_length(s, i);
  if (i == s.size()) {
    append_json_string(out, s);
    return;
  }
  std::string repaired(s.substr(0, i));
  while (i < s.size()) {
    const size_t n = utf8_length(s, i);
    if (n == 0) {
      repaired += kReplacementChar;
      ++i;
    } else {
      repaired += s.substr(i, n);
      i += n;
    }
  }
  append_json_string(out, repaired);
}

}  // namespace

Timeline::Timeline(const std::string& path) : out_(path) {
  chunk_.reserve(kChunkBytes + 4096);
  writing_.reserve(kChunkBytes + 4096);
  chunk_ += R"({"displayTimeUnit":"ns","traceEvents":[)"
            "\n";
  writer_ = std::thread([this] { write_loop(); });
}

Timeline::~Timeline() { stop_writer(); }

void Timeline::hand_off() {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [this] { return !pending_; });
  std::swap(chunk_, writing_);  // chunk_ gets the written, empty buffer back
  pending_ = true;
  cv_.notify_all();
}

void Timeline::write_loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    cv_.wait(lock, [this] { return pending_ || closing_; });
    if (!pending_) return;
    lock.unlock();
    out_.write(writing_);
    writing_.clear();
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
  TF_ASSERT(last_counter_.size() + 1 < kFirstTrack, "too many timeline processes");
  last_counter_.emplace_back();
  const auto pid = static_cast<ProcessId>(last_counter_.size());
  begin_event('M');
  fmt::format_to(std::back_inserter(chunk_), R"(,"pid":{})", pid);
  put_string("name", "process_name");
  chunk_ += R"(,"args":{"name":)";
  append_json_text(chunk_, name);
  chunk_ += '}';
  end_event();
  begin_event('M');
  fmt::format_to(std::back_inserter(chunk_),
                 R"(,"pid":{},"name":"process_sort_index","args":{{"sort_index":{}}})", pid,
                 sort_index);
  end_event();
  return pid;
}

TrackId Timeline::track(ProcessId pid, std::string_view name, int sort_index) {
  TF_ASSERT(pid >= 1 && pid <= last_counter_.size(), "unknown timeline process {}", pid);
  TF_ASSERT(track_pid_.size() < size_t{UINT32_MAX - kFirstTrack}, "too many timeline tracks");
  const auto tid = static_cast<TrackId>(kFirstTrack + track_pid_.size());
  track_pid_.push_back(pid);
  begin_event('M');
  put_ids(pid, tid);
  put_string("name", "thread_name");
  chunk_ += R"(,"args":{"name":)";
  append_json_text(chunk_, name);
  chunk_ += '}';
  end_event();
  begin_event('M');
  put_ids(pid, tid);
  fmt::format_to(std::back_inserter(chunk_),
                 R"(,"name":"thread_sort_index","args":{{"sort_index":{}}})", sort_index);
  end_event();
  return tid;
}

void Timeline::slice(TrackId track, int64_t start_ps, int64_t end_ps, std::string_view name,
                     std::string_view category, std::span<const Arg> args) {
  TF_ASSERT(end_ps >= start_ps, "slice '{}' ends at {} ps before it starts at {} ps", name, end_ps,
            start_ps);
  begin_event('X');
  put_ids(pid_of(track), track);
  put_time("ts", start_ps);
  put_time("dur", end_ps - start_ps);
  put_string("name", name);
  put_string("cat", category);
  put_args(args);
  end_event();
}

void Timeline::counter(ProcessId pid, std::string_view name, int64_t t_ps, double value) {
  TF_ASSERT(pid >= 1 && pid <= last_counter_.size(), "unknown timeline process {}", pid);
  TF_ASSERT(std::isfinite(value), "counter '{}' sample is not finite", name);
  auto& last = last_counter_[pid - 1];
  const auto it = last.find(name);
  if (it == last.end()) {
    last.emplace(std::string(name), value);
  } else if (it->second == value) {
    return;
  } else {
    it->second = value;
  }
  begin_event('C');
  chunk_ += R"(,"pid":)";
  put_uint(pid);
  put_time("ts", t_ps);
  put_string("name", name);
  chunk_ += R"(,"args":{"value":)";
  put_double(value);
  chunk_ += '}';
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
    if (phase == 'f') chunk_ += R"(,"bp":"e")";
    chunk_ += R"(,"id":)";
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
  chunk_ += R"(,"s":"t")";
  put_ids(pid_of(track), track);
  put_time("ts", t_ps);
  put_string("name", name);
  put_args(args);
  end_event();
}

void Timeline::finish() {
  TF_ASSERT(!finished_, "Timeline::finish called twice");
  finished_ = true;
  chunk_ += "\n]}\n";
  hand_off();
  stop_writer();
  out_.commit();
}

void Timeline::begin_event(char phase) {
  TF_ASSERT(!finished_, "timeline event after finish");
  if (!first_event_) chunk_ += ",\n";
  first_event_ = false;
  chunk_ += R"({"ph":")";
  chunk_ += phase;
  chunk_ += '"';
}

void Timeline::end_event() {
  chunk_ += '}';
  if (chunk_.size() > kChunkBytes) hand_off();
}

void Timeline::put_int(int64_t v) {
  char buf[24];
  chunk_.append(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
}

void Timeline::put_uint(uint64_t v) {
  char buf[24];
  chunk_.append(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
}

void Timeline::put_double(double v) {
  // fmt's shortest round-trip form ("{}"), as before; to_chars would switch to fixed
  // notation for large values where fmt keeps the exponent.
  char buf[32];
  chunk_.append(buf, fmt::format_to_n(buf, sizeof buf, "{}", v).out);
}

void Timeline::put_ids(ProcessId pid, TrackId track) {
  chunk_ += R"(,"pid":)";
  put_uint(pid);
  chunk_ += R"(,"tid":)";
  put_uint(track);
}

void Timeline::put_time(std::string_view key, int64_t ps) {
  TF_ASSERT(ps >= 0, "negative timeline time {} ps for '{}'", ps, key);
  chunk_ += ",\"";
  chunk_ += key;
  chunk_ += "\":";
  put_int(ps / kPsPerUs);
  // Six decimals, the picoseconds within the microsecond.
  char frac[7] = {'.', '0', '0', '0', '0', '0', '0'};
  for (int64_t rest = ps % kPsPerUs, i = 6; rest > 0; rest /= 10, --i) {
    frac[i] = static_cast<char>('0' + rest % 10);
  }
  chunk_.append(frac, sizeof frac);
}

void Timeline::put_string(std::string_view key, std::string_view value) {
  chunk_ += ",\"";
  chunk_ += key;
  chunk_ += "\":";
  append_json_text(chunk_, value);
}

void Timeline::put_args(std::span<const Arg> args) {
  if (args.empty()) return;
  chunk_ += R"(,"args":{)";
  bool first = true;
  for (const Arg& arg : args) {
    if (!first) chunk_ += ',';
    first = false;
    append_json_text(chunk_, arg.key);
    chunk_ += ':';
    std::visit(
        [&](const auto& v) {
          using V = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<V, std::string_view>) {
            append_json_text(chunk_, v);
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
  chunk_ += '}';
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
