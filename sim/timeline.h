// The simulator's timeline: Chrome Trace Event Format JSON, streamed to disk as events
// happen, for ui.perfetto.dev and chrome://tracing.
//
// Glossary
//   process  a named group of tracks (a device, a memory tier, a link); pid in the JSON.
//   track    one row of slices inside a process; a "thread" (tid) in the JSON. Track ids
//            are unique across processes and never equal a pid.
//   lane     one of the tracks a resource uses for concurrent work: a link carrying two
//            transfers at once draws them on two lanes so that they never overlap on one
//            track (viewers only nest slices, they cannot show partial overlaps).
//   slice    an interval on a track ("X", a complete event): a kernel, a transfer.
//   counter  a sampled value of a named series in a process ("C"): bytes resident. A
//            series may hold several values under fixed keys (bytes per tensor kind):
//            chrome://tracing stacks them; Perfetto draws one track per key, "NAME KEY".
//   flow     an arrow from one slice to another ("s" then "f", same id/cat/name): a
//            transfer that feeds a kernel. Each end binds to the slice that is open on its
//            track at its time (see Timeline::flow).
//
// Times are integer picoseconds; `ts`/`dur` are microseconds, as the format defines them,
// printed exactly from the integer (6 decimals), so no precision is lost to floating point.
// `displayTimeUnit` only chooses how viewers show times ("ns": sub-microsecond steps stay
// readable); `otherData` (the viewer's metadata) states the unit of `ts`. A few lines of
// output (one event per line):
//
//   {"displayTimeUnit":"ns","otherData":{"ts_unit":"us",...},"traceEvents":[
//   {"ph":"M","pid":1,"name":"process_name","args":{"name":"gpu0"}},
//   {"ph":"M","pid":1,"tid":65536,"name":"thread_name","args":{"name":"h2d lane 0"}},
//   {"ph":"X","pid":1,"tid":65536,"ts":0.000000,"dur":1.500000,"name":"w0","cat":"transfer"},
//   {"ph":"X","pid":1,"tid":65537,"ts":1.500000,"dur":1.250001,"name":"mm","cat":"compute"},
//   {"ph":"C","pid":1,"ts":1.500000,"name":"hbm bytes","args":{"value":4096}},
//   {"ph":"C","pid":1,"ts":1.500000,"name":"hbm by kind","args":{"weight":4096,"kv":0}},
//   {"ph":"s","id":7,"pid":1,"tid":65536,"ts":0.000000,"name":"w0","cat":"flow"},
//   {"ph":"f","bp":"e","id":7,"pid":1,"tid":65537,"ts":1.500000,"name":"w0","cat":"flow"},
//   {"ph":"i","s":"t","pid":1,"tid":65537,"ts":2.750001,"name":"oom"}
//   ]}
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <queue>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <variant>
#include <vector>

#include "core/io.h"

namespace tierflow::sim {

/// A process (group of tracks) in the timeline.
using ProcessId = uint32_t;
/// A track (row of slices); unique across processes.
using TrackId = uint32_t;
/// A counter series (a name in one process).
using SeriesId = uint32_t;

/// One entry of an event's "args" object, shown in the viewer's details panel.
struct Arg {
  std::string_view key;
  std::variant<int64_t, uint64_t, double, std::string_view> value;
};

/// Streams a Chrome Trace Event Format file (the JSON-object form) through an
/// AtomicOutput: memory does not grow with the number of events, and the file appears at
/// its path only after finish(). The same calls give byte-identical output.
/// Negative or reversed times, unknown ids and non-finite values are programmer errors.
/// Events are formatted into chunks of about 1 MiB that a writer thread hands to the
/// file while the next chunk is formatted.
class Timeline {
 public:
  /// Opens `path` ("-" = stdout) and writes the header. Throws InputError if it cannot.
  explicit Timeline(const std::string& path);
  /// Writes into `out`, which the caller finishes and publishes (an OutputSet's, so that
  /// the timeline appears with the command's other outputs); finish() here writes the
  /// closing bytes only.
  explicit Timeline(AtomicOutput& out);
  /// Stops the writer; without finish() no file is left behind.
  ~Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  /// A process shown as `name`, ordered among processes by `sort_index`. Returns its pid.
  ProcessId process(std::string_view name, int sort_index);
  /// A track inside process `pid` shown as `name`, ordered within it by `sort_index`.
  TrackId track(ProcessId pid, std::string_view name, int sort_index);

  /// A complete slice [start_ps, end_ps] on `track`. Slices on one track must nest or be
  /// disjoint (use Lanes for concurrent work on one resource).
  void slice(TrackId track, int64_t start_ps, int64_t end_ps, std::string_view name,
             std::string_view category, std::span<const Arg> args = {});
  /// A sample of counter series `name` of process `pid`: `value` holds from `t_ps` until
  /// the next sample. A value equal to the series' previous one is not written.
  void counter(ProcessId pid, std::string_view name, int64_t t_ps, double value);
  /// The series `name` of process `pid`, for the sampling call below (no look-up by name
  /// on each sample). Writes nothing; the same pid and name give the same series.
  SeriesId series(ProcessId pid, std::string_view name);
  /// A series of several values, one per key of `keys` (in that order in every sample):
  /// a stacked counter. Writes nothing; the same pid and name give the same series, which
  /// must have the same keys.
  SeriesId series(ProcessId pid, std::string_view name, std::span<const std::string_view> keys);
  /// A sample of `series`, as counter() above.
  void counter(SeriesId series, int64_t t_ps, double value);
  /// A sample of a series with keys: one value per key. Values all equal to the series'
  /// previous ones are not written.
  void counter(SeriesId series, int64_t t_ps, std::span<const double> values);
  /// An arrow from the slice open on `from_track` at `from_ps` to the slice open on
  /// `to_track` at `to_ps`. Perfetto binds each end to the innermost slice most recently
  /// started on that track at or before the time, and the viewers break ties of equal
  /// times by file order, so: pass each slice's start time (or a time strictly inside
  /// it, never its end, where the next slice of the track may already have begun), and
  /// call flow() after both slices were written. Flows are matched by (`id`, `category`,
  /// `name`): `id` must be unique among flows of that category and name, and below 2^53
  /// (JavaScript viewers read numbers as doubles).
  void flow(uint64_t id, TrackId from_track, int64_t from_ps, TrackId to_track, int64_t to_ps,
            std::string_view name, std::string_view category = "flow");
  /// An instant marker on `track` at `t_ps` (thread scope), e.g. an error.
  void instant(TrackId track, int64_t t_ps, std::string_view name, std::span<const Arg> args = {});

  /// Writes the closing bytes and renames the file into place (an output of its own).
  /// Throws InputError on an I/O failure. Without finish(), destruction leaves no file behind.
  void finish();

 private:
  /// Track ids start above every pid: a viewer that sees tid == pid takes it for the
  /// process's main thread, which would merge a track into another process.
  static constexpr TrackId kFirstTrack = TrackId{1} << 16;

  /// Room for `n` more bytes of the chunk being formatted; returns where they start.
  char* room(size_t n);
  /// Marks the chunk formatted up to `end` (a pointer from room()).
  void advance(const char* end) { len_ = static_cast<size_t>(end - chunk_.data()); }
  void put(std::string_view s);
  void begin_event(char phase);                ///< separator, `{"ph":"P"`
  void end_event();                            ///< `}`; hands a full chunk to the writer
  void put_ids(ProcessId pid, TrackId track);  ///< `,"pid":P,"tid":T`
  void put_time(std::string_view key, int64_t ps);
  /// `,"key":"value"`; `key` is plain ASCII with nothing to escape.
  void put_string(std::string_view key, std::string_view value);
  void put_args(std::span<const Arg> args);
  void put_int(int64_t v);
  void put_uint(uint64_t v);
  void put_double(double v);
  ProcessId pid_of(TrackId track) const;
  void start();        ///< writes the header and starts the writer
  void hand_off();     ///< queues chunk_ for the writer and takes an empty one
  void write_loop();   ///< the writer thread
  void stop_writer();  ///< lets the writer finish the queue and joins it

  std::optional<AtomicOutput> own_;  ///< the file opened by path; none when given one
  AtomicOutput& out_;
  /// Formatted events not yet handed to the writer: the first len_ bytes. Events are
  /// written through pointers into its spare room, which is sized ahead.
  std::vector<char> chunk_;
  size_t len_ = 0;
  // Writer thread, double-buffered: it writes `writing_` while the next chunk is
  // formatted; a hand-off waits until the chunk before is written.
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<char> writing_;
  size_t writing_len_ = 0;
  bool pending_ = false;  ///< writing_ holds a chunk not yet written
  bool closing_ = false;
  std::thread writer_;
  std::vector<ProcessId> track_pid_;  ///< process of each track, by track - kFirstTrack
  /// Counter series: the last values written of each, to skip repeats.
  struct Series {
    ProcessId pid = 0;
    std::string name;
    std::vector<std::string> keys;  ///< empty: one value, under the key "value"
    std::vector<double> last;       ///< one per key (one when keys is empty)
    bool written = false;
  };
  std::vector<Series> series_;
  /// Per process (by pid - 1): its series by name. Its size is the number of processes.
  std::vector<std::map<std::string, SeriesId, std::less<>>> series_of_;
  bool first_event_ = true;
  bool finished_ = false;
};

/// Lane allocation for one resource: each concurrent interval takes the lowest lane not
/// in use, so overlapping intervals never share a lane and few lanes are used.
class Lanes {
 public:
  /// The lowest free lane; it is busy until released.
  uint32_t acquire();
  /// Frees `lane` (from acquire(), not yet released).
  void release(uint32_t lane);
  /// Lanes ever used (one more than the highest lane handed out).
  [[nodiscard]] uint32_t count() const { return static_cast<uint32_t>(busy_.size()); }

 private:
  std::vector<bool> busy_;
  std::priority_queue<uint32_t, std::vector<uint32_t>, std::greater<>> free_;
};

}  // namespace tierflow::sim
