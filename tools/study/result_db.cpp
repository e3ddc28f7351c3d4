#include "tools/study/result_db.h"

#include <fmt/format.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <ctime>
#include <filesystem>
#include <set>

#include "core/diagnostics.h"
#include "core/io.h"
#include "tools/study/serve_row.h"

#ifndef TIERFLOW_VERSION
#define TIERFLOW_VERSION "0.1.0"
#endif

namespace tierflow::study {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kFormat = "tierflow.sweep/1";

/// An SQL identifier, double-quoted (axis paths hold dots and dashes).
std::string ident(std::string_view name) {
  std::string out = "\"";
  for (char c : name) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + '"';
}

/// A failed SQLite call: the database file is named, as the user chose it.
[[noreturn]] void fail(sqlite3* db, const std::string& path, std::string_view what) {
  throw InputError::at(SourcePos{path}, "{}: {}", what, db != nullptr ? sqlite3_errmsg(db) : "out of memory");
}

class Statement {
 public:
  Statement(sqlite3* db, const std::string& path, const std::string& sql) : db_(db), path_(path) {
    if (sqlite3_prepare_v2(db, sql.c_str(), static_cast<int>(sql.size()), &st_, nullptr) != SQLITE_OK) {
      fail(db, path, "cannot prepare a query");
    }
  }
  ~Statement() { sqlite3_finalize(st_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  void bind(int i, const Cell& c) {
    int rc = SQLITE_OK;
    if (const auto* v = std::get_if<int64_t>(&c)) {
      rc = sqlite3_bind_int64(st_, i, *v);
    } else if (const auto* d = std::get_if<double>(&c)) {
      rc = sqlite3_bind_double(st_, i, *d);
    } else if (const auto* s = std::get_if<std::string>(&c)) {
      rc = sqlite3_bind_text(st_, i, s->data(), static_cast<int>(s->size()), SQLITE_TRANSIENT);
    } else if (const auto* b = std::get_if<bool>(&c)) {
      rc = sqlite3_bind_int(st_, i, *b ? 1 : 0);
    } else {
      rc = sqlite3_bind_null(st_, i);
    }
    if (rc != SQLITE_OK) fail(db_, path_, "cannot bind a value");
  }
  /// Steps once: true while a row is there.
  bool step() {
    const int rc = sqlite3_step(st_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    fail(db_, path_, "query failed");
  }
  [[nodiscard]] std::string text(int i) const {
    const auto* t = sqlite3_column_text(st_, i);
    return t == nullptr ? std::string() : std::string(reinterpret_cast<const char*>(t));
  }
  [[nodiscard]] int64_t integer(int i) const { return sqlite3_column_int64(st_, i); }
  /// A column as the cell of its declared type.
  [[nodiscard]] Cell cell(int i, CellType type) const {
    if (sqlite3_column_type(st_, i) == SQLITE_NULL) return Cell{};
    switch (type) {
      case CellType::kInteger: return Cell{sqlite3_column_int64(st_, i)};
      case CellType::kReal: return Cell{sqlite3_column_double(st_, i)};
      case CellType::kBool: return Cell{sqlite3_column_int64(st_, i) != 0};
      case CellType::kText: break;
    }
    return Cell{text(i)};
  }

 private:
  sqlite3* db_;
  const std::string& path_;
  sqlite3_stmt* st_ = nullptr;
};

void exec(sqlite3* db, const std::string& path, const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    const std::string msg = err != nullptr ? err : sqlite3_errmsg(db);
    sqlite3_free(err);
    throw InputError::at(SourcePos{path}, "{}", msg);
  }
}

sqlite3* open_db(const std::string& path, int flags) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, flags, nullptr) != SQLITE_OK) {
    const std::string msg = db != nullptr ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    throw InputError::at(SourcePos{path}, "cannot open the results database: {}", msg);
  }
  // Waits out a reader (export) holding the file for a moment instead of failing.
  sqlite3_busy_timeout(db, 10000);
  return db;
}

/// The type of an axis column: integer or real when every value reads as one, else text.
CellType axis_type(const std::vector<std::string>& values) {
  bool integer = true, real = true;
  for (const std::string& v : values) {
    int64_t i = 0;
    double d = 0;
    const auto [ie, iec] = std::from_chars(v.data(), v.data() + v.size(), i);
    integer = integer && iec == std::errc() && ie == v.data() + v.size();
    const auto [de, dec] = std::from_chars(v.data(), v.data() + v.size(), d);
    real = real && dec == std::errc() && de == v.data() + v.size();
  }
  return integer ? CellType::kInteger : real ? CellType::kReal : CellType::kText;
}

/// The row columns of the spec's points: a study row, or a serving row.
const std::vector<Column>& row_columns(const SweepSpec& spec) {
  return spec.serving() ? serve_columns() : columns();
}

/// Axis paths that are not already study columns (`batch`, `policy` are; a topology path
/// or `layers` is not), with their types.
std::vector<std::pair<std::string, CellType>> axis_columns(const SweepSpec& spec) {
  std::set<std::string> row;
  for (const Column& c : row_columns(spec)) row.insert(c.name);
  std::vector<std::pair<std::string, CellType>> out;
  for (const AxisGroup& g : spec.groups) {
    for (const Axis& a : g.axes) {
      if (!row.contains(a.path)) out.emplace_back(a.path, axis_type(a.values));
    }
  }
  return out;
}

std::string schema_sql(const std::vector<std::pair<std::string, CellType>>& axes,
                       const std::vector<Column>& columns) {
  std::string sql = "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);\n";
  sql += "CREATE TABLE results(point INTEGER PRIMARY KEY";
  for (const auto& [name, type] : axes) {
    sql += fmt::format(", {} {}", ident(name), kCellTypeNames[static_cast<size_t>(type)]);
  }
  sql += ", exit_class INTEGER NOT NULL";
  for (const Column& c : columns) {
    sql += fmt::format(", {} {}", ident(c.name), kCellTypeNames[static_cast<size_t>(c.type)]);
  }
  sql += ");\nCREATE TABLE timing(point INTEGER PRIMARY KEY, wall_s REAL, finished TEXT);\n";
  return sql;
}

/// The declared type of a results column back as a CellType.
CellType type_of_decl(std::string_view decl) {
  for (size_t i = 0; i < kCellTypeNames.size(); ++i) {
    if (decl == kCellTypeNames[i]) return static_cast<CellType>(i);
  }
  return CellType::kText;
}

std::string meta_of(sqlite3* db, const std::string& path, std::string_view key) {
  Statement st(db, path, "SELECT value FROM meta WHERE key = ?1");
  st.bind(1, Cell{std::string(key)});
  return st.step() ? st.text(0) : std::string();
}

/// Throws unless `db` is a tierflow sweep database.
void expect_sweep(sqlite3* db, const std::string& path) {
  bool ok = false;
  std::string why;
  try {
    Statement st(db, path,
                 "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('meta', "
                 "'results', 'timing')");
    ok = st.step() && st.integer(0) == 3 && meta_of(db, path, "format") == kFormat;
  } catch (const InputError& e) {
    why = fmt::format(": {}", e.message());
  }
  if (!ok) throw InputError::at(SourcePos{path}, "not a tierflow sweep database ({}){}", kFormat, why);
}

/// The spec's point count a database records (meta 'points'); InputError when it is not a
/// count, e.g. a database edited by hand.
int64_t points_of(sqlite3* db, const std::string& path) {
  const std::string text = meta_of(db, path, "points");
  int64_t n = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size() || n < 0) {
    throw InputError::at(
        SourcePos{path},
        "its meta 'points' is '{}', not a point count: the database was edited or damaged", text);
  }
  return n;
}

/// Throws unless every row of the results is one a sweep of `points` points writes: a point
/// number in [0, points) and an exit class tierflow has (0 ok, 1 infeasible, 2 bad input, 3
/// internal error).
void check_rows(sqlite3* db, const std::string& path, int64_t points) {
  Statement st(db, path,
               "SELECT point, exit_class FROM results WHERE point < 0 OR point >= ?1 OR "
               "exit_class NOT IN (0, 1, 2, 3) OR typeof(exit_class) != 'integer' LIMIT 1");
  st.bind(1, Cell{points});
  if (!st.step()) return;
  const int64_t point = st.integer(0);
  if (point < 0 || point >= points) {
    throw InputError::at(
        SourcePos{path},
        "holds point {}, but its sweep has {} points (0 to {}): the database was edited or damaged",
        point, points, points - 1);
  }
  throw InputError::at(
      SourcePos{path},
      "point {} has exit class '{}', which is none of tierflow's (0 ok, 1 infeasible, 2 bad "
      "input, 3 internal error): the database was edited or damaged",
      point, st.text(1));
}

std::string now_utc() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                     tm.tm_hour, tm.tm_min, tm.tm_sec);
}

}  // namespace

ResultDb::ResultDb(std::string path, sqlite3* db) : path_(std::move(path)), db_(db) {}

ResultDb::ResultDb(ResultDb&& o) noexcept
    : path_(std::move(o.path_)),
      db_(std::exchange(o.db_, nullptr)),
      lock_fd_(std::exchange(o.lock_fd_, -1)),
      axis_slots_(std::move(o.axis_slots_)) {}

ResultDb& ResultDb::operator=(ResultDb&& o) noexcept {
  if (this != &o) {
    sqlite3_close(db_);
    if (lock_fd_ >= 0) ::close(lock_fd_);
    path_ = std::move(o.path_);
    db_ = std::exchange(o.db_, nullptr);
    lock_fd_ = std::exchange(o.lock_fd_, -1);
    axis_slots_ = std::move(o.axis_slots_);
  }
  return *this;
}

ResultDb::~ResultDb() {
  sqlite3_close(db_);
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

namespace {

/// Opens (creating) the database file and takes the sweep's exclusive lock on it; the file
/// becomes guarded, so no output of the run may replace it. InputError when another
/// process holds the lock.
/// Opens `path` (`flags`; 0644 when O_CREAT makes it) and takes an exclusive flock(2) on it
/// without waiting: the lock a sweep holds on its database while it writes. InputError at
/// the path, `busy` when another process holds the lock. The caller closes the descriptor.
int open_locked(const std::string& path, int flags, std::string_view busy) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int error = errno;
    throw InputError::at(SourcePos{path}, "cannot open the results database: {}",
                         std::generic_category().message(error));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    ::close(fd);
    if (error == EWOULDBLOCK) throw InputError::at(SourcePos{path}, "{}", busy);
    throw InputError::at(SourcePos{path}, "cannot lock the results database: {}",
                         std::generic_category().message(error));
  }
  return fd;
}

int lock_for_writing(const std::string& path) {
  check_output_path(path);  // an input of this run (the spec) given as -o
  const int fd = open_locked(path, O_RDWR | O_CREAT,
                             "the results database is in use by another sweep; wait for it to "
                             "finish (a rerun then resumes), or give another -o");
  guard_file(path, "the results database of this sweep");
  return fd;
}

}  // namespace

ResultDb ResultDb::for_sweep(const std::string& path, const SweepSpec& spec, const Shard& shard) {
  // The id reads every file the spec names (hashed): one missing is refused before the
  // database is made.
  const std::string id = sweep_id(spec);
  // SQLite's in-memory database is no file: nothing to lock or guard.
  const int lock = path == ":memory:" ? -1 : lock_for_writing(path);
  sqlite3* handle = nullptr;
  try {
    handle = open_db(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX);
  } catch (...) {
    if (lock >= 0) ::close(lock);
    throw;
  }
  ResultDb r(path, handle);
  r.lock_fd_ = lock;
  // The schema and meta are one transaction: a sweep killed before it committed left an
  // empty database (or an empty file), which starts over like a new one.
  const bool exists = [&] {
    try {
      Statement st(r.db_, path, "SELECT count(*) FROM sqlite_master");
      return st.step() && st.integer(0) > 0;
    } catch (const InputError&) {
      throw InputError::at(SourcePos{path}, "not a tierflow sweep database ({}): {}; give another -o",
                           kFormat, sqlite3_errmsg(r.db_));
    }
  }();
  // A rollback journal with a full sync per commit: a kill at any moment keeps every
  // committed row, and the file alone is the whole database after each commit.
  exec(r.db_, path, "PRAGMA journal_mode=DELETE; PRAGMA synchronous=FULL;");
  const std::vector<std::string> paths = spec.axis_paths();
  for (const auto& [name, type] : axis_columns(spec)) {
    const auto i = static_cast<size_t>(std::ranges::find(paths, name) - paths.begin());
    r.axis_slots_.emplace_back(i, type);
  }
  if (exists) {
    expect_sweep(r.db_, path);
    const std::string have = meta_of(r.db_, path, "sweep_id");
    if (have != id) {
      throw InputError::at(SourcePos{path},
                           "holds the results of another sweep (id {}, spec '{}'), not of '{}' (id {}): "
                           "give a new -o, or remove it to start over",
                           have.substr(0, 12), meta_of(r.db_, path, "name"), spec.name, id.substr(0, 12));
    }
    const std::string s = meta_of(r.db_, path, "shard");
    if (s != shard.text() && !(s == "merged" && shard.count == 1)) {
      throw InputError::at(SourcePos{path}, "holds shard {} of this sweep, not {}", s, shard.text());
    }
    // Rows of another tierflow version have other columns: resuming would mix them.
    std::vector<std::string> want = {"point"};
    for (const auto& [name, type] : axis_columns(spec)) want.push_back(name);
    want.emplace_back("exit_class");
    for (const Column& c : row_columns(spec)) want.push_back(c.name);
    const std::vector<std::string> have_columns = r.table().columns;
    if (have_columns != want) {
      const auto missing = std::ranges::find_if(
          want, [&](const std::string& c) { return std::ranges::find(have_columns, c) == have_columns.end(); });
      throw InputError::at(
          SourcePos{path},
          "holds this sweep's results with other columns (written by tierflow {}{}); give a new -o "
          "to run it again, or `tierflow sweep export` what it holds",
          meta_of(r.db_, path, "tierflow_version"),
          missing == want.end() ? std::string() : fmt::format(", without '{}'", *missing));
    }
    check_rows(r.db_, path, static_cast<int64_t>(spec.size()));
    return r;
  }
  exec(r.db_, path, "BEGIN IMMEDIATE;" + schema_sql(axis_columns(spec), row_columns(spec)));
  const std::vector<std::pair<std::string, std::string>> meta = {
      {"format", std::string(kFormat)},
      {"kind", spec.serving() ? "serve" : "step"},
      {"sweep_id", id},
      {"name", spec.name},
      {"description", spec.description},
      {"spec_file", spec.file},
      {"spec", spec.text},
      {"shard", shard.text()},
      {"points", std::to_string(spec.size())},
      {"axes", fmt::format("{}", fmt::join(spec.axis_paths(), "\n"))},
      {"tierflow_version", TIERFLOW_VERSION},
  };
  for (const auto& [k, v] : meta) {
    Statement ins(r.db_, path, "INSERT INTO meta(key, value) VALUES (?1, ?2)");
    ins.bind(1, Cell{k});
    ins.bind(2, Cell{v});
    ins.step();
  }
  exec(r.db_, path, "COMMIT;");
  return r;
}

ResultDb ResultDb::open(const std::string& path) {
  if (!fs::exists(path)) throw InputError::at(SourcePos{path}, "no such results database");
  guard_file(path, "a results database this command reads");
  return read_only(path);
}

ResultDb ResultDb::read_only(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec))
    throw InputError::at(SourcePos{path}, "is a directory, not a results database");
  if (!fs::is_regular_file(path, ec)) {
    throw InputError::at(SourcePos{path}, "is not a regular file, so not a results database");
  }
  ResultDb r(path, open_db(path, SQLITE_OPEN_READONLY | SQLITE_OPEN_FULLMUTEX));
  expect_sweep(r.db_, path);
  check_rows(r.db_, path, points_of(r.db_, path));
  return r;
}

std::string ResultDb::meta(std::string_view key) const { return meta_of(db_, path_, key); }

std::map<int64_t, int> ResultDb::recorded() const {
  std::map<int64_t, int> out;
  Statement st(db_, path_, "SELECT point, exit_class FROM results");
  while (st.step()) out.emplace(st.integer(0), static_cast<int>(st.integer(1)));
  return out;
}

void ResultDb::record(const SweepPoint& p, const Row& row, int exit_class, double wall_s) {
  std::string sql = "INSERT OR REPLACE INTO results VALUES (?";
  const size_t n = 2 + axis_slots_.size() + row.cells.size();
  for (size_t i = 1; i < n; ++i) sql += ", ?";
  sql += ")";
  exec(db_, path_, "BEGIN IMMEDIATE");
  try {
    Statement st(db_, path_, sql);
    int k = 1;
    st.bind(k++, Cell{p.index});
    // The values the point took on the axes that are not study columns.
    for (const auto& [i, type] : axis_slots_) {
      const std::string& v = p.values.at(i);
      if (type == CellType::kInteger) st.bind(k++, Cell{std::stoll(v)});
      else if (type == CellType::kReal) st.bind(k++, Cell{std::stod(v)});
      else st.bind(k++, Cell{v});
    }
    st.bind(k++, Cell{int64_t{exit_class}});
    for (const Cell& c : row.cells) st.bind(k++, c);
    st.step();
    Statement t(db_, path_, "INSERT OR REPLACE INTO timing VALUES (?1, ?2, ?3)");
    t.bind(1, Cell{p.index});
    t.bind(2, Cell{wall_s});
    t.bind(3, Cell{now_utc()});
    t.step();
    exec(db_, path_, "COMMIT");
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

ResultDb::Table ResultDb::table() const {
  Table t;
  std::vector<CellType>& types = t.types;
  {
    Statement info(db_, path_, "PRAGMA table_info(results)");
    while (info.step()) {
      t.columns.push_back(info.text(1));
      types.push_back(type_of_decl(info.text(2)));
    }
  }
  Statement st(db_, path_, "SELECT * FROM results ORDER BY point");
  while (st.step()) {
    std::vector<Cell> row;
    row.reserve(types.size());
    for (size_t i = 0; i < types.size(); ++i) row.push_back(st.cell(static_cast<int>(i), types[i]));
    t.rows.push_back(std::move(row));
  }
  return t;
}

namespace {

/// An exclusive flock(2) on the existing file `path` (the lock a running sweep holds on its
/// database), or InputError when another process holds it. The descriptor is closed by
/// the caller.
int lock_existing(const std::string& path) {
  return open_locked(path, O_RDONLY,
                     "is in use by a running sweep: refusing to replace it; wait for the sweep "
                     "to finish, or give another -o");
}

}  // namespace

MergeSummary merge_results(const std::string& out, const std::vector<std::string>& inputs) {
  if (inputs.empty()) throw InputError::at(SourcePos{"sweep merge"}, "no shard databases to merge");
  MergeSummary sum;
  check_output_path(out);  // `merge -o a.db a.db b.db` would replace a shard
  // An existing output is replaced only by a merge of the same sweep, and its rows are kept
  // (merged like an input): an earlier merge, or the database a full sweep wrote. Any other
  // file there (another sweep's database, the user's own, one a sweep is writing) is refused.
  std::vector<std::string> sources = inputs;
  int out_lock = -1;
  const auto unlock = [&] {
    if (out_lock >= 0) ::close(out_lock);
    out_lock = -1;
  };
  std::error_code size_ec;
  if (fs::exists(out) && fs::file_size(out, size_ec) > 0 && !size_ec) {
    out_lock = lock_existing(out);
    try {
      ResultDb::read_only(out);
    } catch (const InputError& e) {
      unlock();
      throw InputError::at(SourcePos{out},
                           "{}: refusing to replace it; give a new -o, or remove it", e.message());
    }
    sources.push_back(out);
  }
  const bool keep_out = out_lock >= 0;
  // The first input fixes the sweep and the schema; every other must match both.
  std::string id, schema, name;
  int64_t points = 0;
  std::vector<std::string> columns;
  try {
    for (size_t k = 0; k < sources.size(); ++k) {
      const std::string& in = sources[k];
      const bool is_out = keep_out && k + 1 == sources.size();
      const ResultDb db = is_out ? ResultDb::read_only(in) : ResultDb::open(in);
      const std::string this_id = db.meta("sweep_id");
      std::string sql;
      {
        Statement st(db.db_, in,
                     "SELECT sql FROM sqlite_master WHERE type = 'table' ORDER BY name");
        while (st.step()) sql += st.text(0) + ";\n";
      }
      if (id.empty()) {
        id = this_id;
        schema = sql;
        name = db.meta("name");
        points = points_of(db.db_, in);
        columns = db.table().columns;
      } else if (this_id != id) {
        throw InputError::at(
            SourcePos{in}, "{} another sweep ('{}', id {}) than {} ('{}', id {}){}",
            is_out ? "exists and holds the results of" : "is a shard of", db.meta("name"),
            this_id.substr(0, 12), inputs.front(), name, id.substr(0, 12),
            is_out ? ": refusing to replace it; give a new -o" : "");
      } else if (sql != schema) {
        throw InputError::at(SourcePos{in},
                             "has other columns than {} (written by another tierflow version?)",
                             inputs.front());
      } else if (points_of(db.db_, in) != points) {
        throw InputError::at(SourcePos{in},
                             "records {} points, {} records {}: the database was edited or damaged",
                             points_of(db.db_, in), inputs.front(), points);
      }
      if (!is_out) sum.shards.push_back(db.meta("shard"));
    }
  } catch (...) {
    unlock();
    throw;
  }

  // Removed on a fatal signal, as every output's temp file. No journal: the file is renamed
  // over the output only once complete, and a journal would be left beside it by a signal.
  TempFile temp_file(out);
  const std::string& temp = temp_file.path();
  fs::remove(temp);
  try {
    ResultDb db(temp, open_db(temp, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE));
    exec(db.db_, temp, "PRAGMA journal_mode=OFF; BEGIN IMMEDIATE;" + schema + "COMMIT;");
    for (size_t k = 0; k < sources.size(); ++k) {
      const std::string& in = sources[k];
      {
        Statement at(db.db_, temp, "ATTACH DATABASE ?1 AS src");
        at.bind(1, Cell{in});
        at.step();
      }
      exec(db.db_, temp, "BEGIN IMMEDIATE;");
      if (k == 0) exec(db.db_, temp, "INSERT INTO meta SELECT * FROM src.meta");
      // A point in two shards must have the same row in both.
      std::string differs;
      for (size_t i = 1; i < columns.size(); ++i) {
        differs += fmt::format("{}a.{} IS NOT b.{}", differs.empty() ? "" : " OR ", ident(columns[i]),
                               ident(columns[i]));
      }
      {
        Statement st(db.db_, temp, fmt::format("SELECT a.point FROM results a JOIN src.results b "
                                               "USING (point) WHERE {} LIMIT 1", differs));
        if (st.step()) {
          throw InputError::at(SourcePos{in}, "point {} differs from the same point in an earlier input",
                               st.integer(0));
        }
      }
      exec(db.db_, temp,
           "INSERT OR IGNORE INTO results SELECT * FROM src.results;"
           "INSERT OR IGNORE INTO timing SELECT * FROM src.timing;");
      exec(db.db_, temp, "COMMIT; DETACH DATABASE src;");
    }
    {
      Statement st(db.db_, temp, "INSERT OR REPLACE INTO meta(key, value) VALUES ('shard', 'merged'), ('shards', ?1)");
      st.bind(1, Cell{fmt::format("{}", fmt::join(sum.shards, " "))});
      st.step();
    }
    Statement n(db.db_, temp, "SELECT count(*) FROM results");
    n.step();
    sum.rows = n.integer(0);
  } catch (...) {
    fs::remove(temp);
    unlock();
    throw;
  }
  try {
    temp_file.rename_over(out);
  } catch (...) {
    unlock();
    throw;
  }
  unlock();
  sum.points = points;
  sum.kept_output = keep_out;
  return sum;
}

std::string merge_summary_text(const MergeSummary& m, const std::string& out) {
  return fmt::format("merged {} database{} (shards {}){}: {} of {} points -> {}\n", m.shards.size(),
                     m.shards.size() == 1 ? "" : "s", fmt::join(m.shards, " "),
                     m.kept_output ? " with the rows already in the output" : "", m.rows, m.points,
                     out);
}

std::string merge_missing_text(const MergeSummary& m) {
  if (m.rows >= m.points) return "";
  return fmt::format(
      "warning: {} points are missing: rerun the shards (each resumes), then merge again\n",
      m.points - m.rows);
}

std::string table_csv(const ResultDb::Table& t) { return csv_of(t.columns, t.rows); }

std::string table_jsonl(const ResultDb::Table& t) { return jsonl_of(t.columns, t.rows); }

}  // namespace tierflow::study
