// Sweep results in SQLite (Debian's libsqlite3): one database file per sweep or shard.
//
//   meta(key TEXT PRIMARY KEY, value TEXT)   format ("tierflow.sweep/1"), sweep_id, name,
//                                            spec (its text), shard ("I/N", or "merged"),
//                                            points (of the whole spec), axes
//   results(point INTEGER PRIMARY KEY,       one row per finished point: its number, the
//           <axis paths...>, exit_class,     value each axis took as the spec wrote it, its
//           <study row columns...>)          exit class (0 ok, 1 infeasible, 2 bad input,
//                                            3 internal error), then every column of
//                                            study::columns() (row.h) with its type
//   timing(point INTEGER PRIMARY KEY,        wall seconds per point and when it finished:
//          wall_s REAL, finished TEXT)       kept apart so that results stay deterministic
//
// Each point is written in its own transaction with synchronous=FULL and a rollback journal:
// a process killed at any moment leaves every committed row and no partial one, and the
// file is whole after each commit (shards can be copied off a node as they are).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tools/study/row.h"
#include "tools/study/sweep.h"

struct sqlite3;

namespace tierflow::study {

struct MergeSummary {
  int64_t points = 0;  ///< of the whole spec
  int64_t rows = 0;    ///< in the merged database
  std::vector<std::string> shards;  ///< as each input recorded it
  bool kept_output = false;  ///< `out` existed (an earlier merge of the sweep): its rows are kept
};

class ResultDb {
 public:
  /// Opens `path` for `spec`'s shard `shard`, creating it when missing. An existing
  /// database must hold the same sweep id and shard (InputError otherwise, naming both).
  /// ":memory:" keeps it in memory (the Python API).
  static ResultDb for_sweep(const std::string& path, const SweepSpec& spec, const Shard& shard);
  /// Opens an existing database read-only; InputError when it is not a tierflow sweep.
  static ResultDb open(const std::string& path);

  ResultDb(ResultDb&&) noexcept;
  ResultDb& operator=(ResultDb&&) noexcept;
  ~ResultDb();

  /// A meta value; empty when absent.
  [[nodiscard]] std::string meta(std::string_view key) const;
  /// Points recorded so far, with their exit class.
  [[nodiscard]] std::map<int64_t, int> recorded() const;
  /// Writes one point in one transaction (replacing a failed row being retried).
  void record(const SweepPoint& p, const Row& row, int exit_class, double wall_s);

  struct Table {
    std::vector<std::string> columns;  ///< point, the axis paths, exit_class, the row columns
    std::vector<CellType> types;       ///< per column, as declared
    std::vector<std::vector<Cell>> rows;  ///< ordered by point
  };
  /// The results table, ordered by point.
  [[nodiscard]] Table table() const;
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  friend MergeSummary merge_results(const std::string& out, const std::vector<std::string>& inputs);
  ResultDb(std::string path, sqlite3* db);
  /// open() without guarding the file: merge reads the database it is about to replace.
  static ResultDb read_only(const std::string& path);
  std::string path_;
  sqlite3* db_ = nullptr;
  /// A descriptor of the database file holding an exclusive flock(2) while a sweep writes
  /// it: a second sweep on the same file is refused instead of interleaving. Closed only
  /// after SQLite's own handle (closing a descriptor of the file drops the process's POSIX
  /// locks, SQLite's included). -1 when none is held.
  int lock_fd_ = -1;
  /// Per axis column: the index of its value in SweepPoint::values, and its type.
  std::vector<std::pair<size_t, CellType>> axis_slots_;
};

/// Joins shard databases into a new database `out` (written to a temporary file and
/// renamed). Inputs must hold the same sweep id; a point recorded in two inputs must have
/// equal rows. An existing `out` must be a database of the same sweep that no sweep is
/// writing (its rows are merged too); any other file there is refused. InputError names
/// the input at fault.
MergeSummary merge_results(const std::string& out, const std::vector<std::string>& inputs);

/// What `sweep merge` prints: the inputs, the rows and where they went; and, on standard
/// error, how many points are still missing (empty when none is).
std::string merge_summary_text(const MergeSummary& m, const std::string& out);
std::string merge_missing_text(const MergeSummary& m);

/// The table as CSV (header, RFC 4180 quoting, doubles in shortest round-trip form) or
/// JSON Lines (keys in column order); the bytes do not depend on how the rows were made
/// (one run, a resumed run, or merged shards).
std::string table_csv(const ResultDb::Table& t);
std::string table_jsonl(const ResultDb::Table& t);

}  // namespace tierflow::study
