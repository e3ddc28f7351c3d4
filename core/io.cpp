#include "core/io.h"

#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <filesystem>
#include <mutex>
#include <set>
#include <sys/mman.h>
#include <sys/stat.h>
#include <system_error>
#include <unistd.h>
#include <vector>

#include "core/diagnostics.h"
#include "core/units.h"

namespace tierflow {
namespace {

// One write(2) per MiB keeps syscall overhead negligible for timelines of millions of
// events while bounding memory.
constexpr size_t kBufferBytes = size_t{1} << 20;
constexpr uint64_t kDefaultMaxInput = uint64_t{4} << 30;

std::string errno_text(int error) {
  return error == 0 ? std::string("I/O error") : std::generic_category().message(error);
}

// ---- guarded files ----------------------------------------------------------------------

struct Guarded {
  dev_t dev;
  ino_t ino;
  std::string path;
  std::string role;
};

std::mutex guard_mutex;
std::vector<Guarded> guarded;  // few entries: a command reads a handful of files
std::atomic<bool> guarding{false};
int open_scopes = 0;  // OutputGuardScope objects alive; under guard_mutex
/// Guarding was turned on by OutputGuardScope objects (calls of a host such as Python that
/// may run at once), not for the whole process: an output one call wrote is no input of
/// another.
std::atomic<bool> scopes_guarding{false};

/// Guards the file whose stat is `st`.
void guard_stat(const struct stat& st, const std::string& path, std::string_view role) {
  if (!guarding.load(std::memory_order_relaxed)) return;
  const std::lock_guard lock(guard_mutex);
  for (const Guarded& g : guarded) {
    if (g.dev == st.st_dev && g.ino == st.st_ino) return;
  }
  guarded.push_back(Guarded{st.st_dev, st.st_ino, path, std::string(role)});
}

/// Throws when the file whose stat is `st` is guarded: `path` would replace it.
void refuse_if_guarded(const struct stat& st, const std::string& path) {
  if (!guarding.load(std::memory_order_relaxed)) return;
  const std::lock_guard lock(guard_mutex);
  for (const Guarded& g : guarded) {
    if (g.dev != st.st_dev || g.ino != st.st_ino) continue;
    const std::string same = g.path == path ? "" : fmt::format(" ('{}' is the same file)", g.path);
    throw InputError(SourcePos{path},
                     fmt::format("refusing to write this output: it is {}{}; tierflow never "
                                 "overwrites its inputs, choose another path",
                                 g.role, same));
  }
}

std::string file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

/// Opens `path` for reading and checks what it is: a regular file no larger than the input
/// limit, or a pipe (read with the limit as a cap). Returns the descriptor and its stat.
int open_input(const std::string& path, struct stat& st) {
  const uint64_t cap = max_input_bytes();  // before the open: it may throw
  // A path from Python may hold a NUL byte, which the system call would cut the path at.
  if (path.find('\0') != std::string::npos) {
    throw InputError(SourcePos{path.substr(0, path.find('\0'))},
                     "cannot open file: the path holds a NUL byte");
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    throw InputError(SourcePos{path}, error == ENOENT ? std::string("cannot open file: no such file")
                                                      : fmt::format("cannot open file: {}",
                                                                    errno_text(error)));
  }
  if (::fstat(fd, &st) != 0) {
    const int error = errno;
    ::close(fd);
    throw InputError(SourcePos{path}, fmt::format("cannot read file: {}", errno_text(error)));
  }
  if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode)) {
    ::close(fd);
    throw InputError(SourcePos{path},
                     fmt::format("cannot read file: it is {}; inputs are regular files or pipes",
                                 file_kind(st.st_mode)));
  }
  if (S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) > cap) {
    ::close(fd);
    throw InputError(SourcePos{path},
                     fmt::format("file is {}, above the input limit of {} (set "
                                 "TIERFLOW_MAX_INPUT_BYTES to read larger inputs)",
                                 to_string(Bytes{static_cast<uint64_t>(st.st_size)}),
                                 to_string(Bytes{cap})));
  }
  return fd;
}

/// Reads `fd` to its end into `out`, at most max_input_bytes(); closes it.
void read_all(int fd, const std::string& path, std::string& out) {
  const uint64_t cap = max_input_bytes();
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      ::close(fd);
      throw InputError(SourcePos{path}, fmt::format("cannot read file: {}", errno_text(error)));
    }
    if (out.size() + static_cast<uint64_t>(n) > cap) {
      ::close(fd);
      throw InputError(SourcePos{path},
                       fmt::format("input is larger than the input limit of {} (set "
                                   "TIERFLOW_MAX_INPUT_BYTES to read larger inputs)",
                                   to_string(Bytes{cap})));
    }
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
}

// ---- temp files removed on a fatal signal ------------------------------------------------

constexpr size_t kTempSlots = 64;
constexpr size_t kTempPathMax = 4096;
// A slot holds a live temp file's path while `live` is set; the handler reads only these.
std::array<std::array<char, kTempPathMax>, kTempSlots> temp_paths{};
std::array<std::atomic<bool>, kTempSlots> temp_live{};
std::once_flag handlers_once;

extern "C" void remove_temps_and_reraise(int sig) {
  for (size_t i = 0; i < kTempSlots; ++i) {
    if (temp_live[i].load()) ::unlink(temp_paths[i].data());
  }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

/// Installs the handler for SIGINT, SIGTERM, SIGHUP where the signal still has its default
/// action (a host program, such as Python, keeps its own).
void install_handlers() {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) continue;
    struct sigaction sa {};
    sa.sa_handler = remove_temps_and_reraise;
    sigemptyset(&sa.sa_mask);
    ::sigaction(sig, &sa, nullptr);
  }
}

/// Records a live temp file for the handler; returns its slot, or kTempSlots when none is
/// free or the path is too long (the file is then only removed by the next run).
size_t track_temp(const std::string& path) {
  std::call_once(handlers_once, install_handlers);
  if (path.size() >= kTempPathMax) return kTempSlots;
  static std::mutex m;
  const std::lock_guard lock(m);
  for (size_t i = 0; i < kTempSlots; ++i) {
    if (temp_live[i].load()) continue;
    std::memcpy(temp_paths[i].data(), path.c_str(), path.size() + 1);
    temp_live[i].store(true);
    return i;
  }
  return kTempSlots;
}

void untrack_temp(size_t slot) {
  if (slot < kTempSlots) temp_live[slot].store(false);
}

/// Temp file names this process writes now: two threads writing one path at once (the
/// Python API) take `PATH.tmp.PID` and `PATH.tmp.PID.1`, not each other's file.
std::mutex temp_names_mutex;
std::set<std::string> temp_names;

/// The first of `base`, `base.1`, `base.2`, ... that no output of this process writes now,
/// claimed until release_temp_name.
std::string claim_temp_name(const std::string& base) {
  const std::lock_guard lock(temp_names_mutex);
  std::string name = base;
  for (unsigned k = 1; temp_names.contains(name); ++k) name = fmt::format("{}.{}", base, k);
  temp_names.insert(name);
  return name;
}

void release_temp_name(const std::string& name) {
  const std::lock_guard lock(temp_names_mutex);
  temp_names.erase(name);
}

/// Removes `PATH.tmp.PID` (and `PATH.tmp.PID.K`) files beside `path` whose process no
/// longer runs.
void remove_stale_temps(const std::string& path) {
  const std::filesystem::path p(path);
  const std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
  const std::string prefix = p.filename().string() + ".tmp.";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  while (const dirent* e = ::readdir(d)) {
    const std::string_view name(e->d_name);
    if (name.size() <= prefix.size() || name.substr(0, prefix.size()) != prefix) continue;
    std::string_view digits = name.substr(prefix.size());
    if (const size_t dot = digits.find('.'); dot != std::string_view::npos) {
      const std::string_view k = digits.substr(dot + 1);
      if (k.empty() || k.size() > 9 ||
          k.find_first_not_of("0123456789") != std::string_view::npos) {
        continue;
      }
      digits = digits.substr(0, dot);
    }
    if (digits.empty() || digits.size() > 9 ||
        digits.find_first_not_of("0123456789") != std::string_view::npos) {
      continue;
    }
    const long pid = std::strtol(std::string(digits).c_str(), nullptr, 10);
    if (pid <= 0 || pid == static_cast<long>(::getpid())) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    ::unlink((std::filesystem::path(dir) / std::string(name)).c_str());
  }
  ::closedir(d);
}

}  // namespace

uint64_t max_input_bytes() {
  // A malformed value is an error (thrown again at each read), never a silent default.
  static const uint64_t limit = [] {
    const char* env = std::getenv("TIERFLOW_MAX_INPUT_BYTES");
    if (env == nullptr || *env == '\0') return kDefaultMaxInput;
    const std::string_view text(env);
    // A plain byte count, as the name says, or a size with its unit.
    uint64_t count = 0;
    if (const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), count);
        ec == std::errc() && end == text.data() + text.size() && count > 0) {
      return count;
    }
    const auto r = parse_bytes(text);
    if (!r.ok() || r.value.value == 0) {
      throw InputError(SourcePos{"TIERFLOW_MAX_INPUT_BYTES"},
                       fmt::format("expected a size above 0 such as 8GiB or 100B, got '{}'{}", env,
                                   r.ok() ? "" : fmt::format(" ({})", r.error)));
    }
    return r.value.value;
  }();
  return limit;
}

void enable_output_guard() { guarding.store(true); }

void disable_output_guard() {
  guarding.store(false);
  const std::lock_guard lock(guard_mutex);
  guarded.clear();
}

OutputGuardScope::OutputGuardScope() {
  const std::lock_guard lock(guard_mutex);
  if (open_scopes++ == 0 && !guarding.load()) {
    scopes_guarding.store(true);
    guarding.store(true);
  }
}

OutputGuardScope::~OutputGuardScope() {
  const std::lock_guard lock(guard_mutex);
  if (--open_scopes == 0 && scopes_guarding.load()) {
    scopes_guarding.store(false);
    guarding.store(false);
    guarded.clear();
  }
}

std::string read_text_file(const std::string& path) {
  struct stat st {};
  const int fd = open_input(path, st);
  guard_stat(st, path, "an input of this command");
  std::string out;
  // Read in one allocation when the size is known (a million-op workload is ~250 MB).
  if (S_ISREG(st.st_mode)) out.reserve(static_cast<size_t>(st.st_size));
  read_all(fd, path, out);
  return out;
}

FileText::FileText(const std::string& path) {
  struct stat st {};
  const int fd = open_input(path, st);
  guard_stat(st, path, "an input of this command");
  if (S_ISREG(st.st_mode) && st.st_size > 0) {
    void* m = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    if (m != MAP_FAILED) {
      map_ = m;
      size_ = static_cast<size_t>(st.st_size);
      ::madvise(map_, size_, MADV_SEQUENTIAL);
      view_ = std::string_view(static_cast<const char*>(map_), size_);
      ::close(fd);
      return;
    }
  }
  read_all(fd, path, copy_);
  view_ = copy_;
}

FileText::~FileText() {
  if (map_ != nullptr) ::munmap(map_, size_);
}

void guard_file(const std::string& path, std::string_view role) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) guard_stat(st, path, role);
}

void make_output_dir(const std::string& dir, std::string_view flag) {
  std::error_code ec;
  if (dir.empty()) throw InputError(SourcePos{std::string(flag)}, "empty directory path");
  if (std::filesystem::create_directories(dir, ec); ec) {
    throw InputError(SourcePos{std::string(flag)},
                     fmt::format("cannot create the directory '{}': {}", dir, ec.message()));
  }
  if (!std::filesystem::is_directory(dir, ec)) {
    throw InputError(SourcePos{std::string(flag)},
                     fmt::format("'{}' exists and is not a directory", dir));
  }
}

void check_output_path(const std::string& path) {
  if (path == "-") return;
  if (path.empty()) throw InputError(SourcePos{"(empty path)"}, "cannot write: empty output path");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (guarding.load(std::memory_order_relaxed)) refuse_if_guarded(st, path);
    if (S_ISDIR(st.st_mode)) throw InputError(SourcePos{path}, "cannot write: it is a directory");
  }
  // The folder the file will be renamed into: found now, not after the work.
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::string dir = parent.empty() ? std::string(".") : parent.string();
  if (struct stat d {}; ::stat(dir.c_str(), &d) != 0 || !S_ISDIR(d.st_mode)) {
    throw InputError(SourcePos{path}, fmt::format("cannot write: no folder '{}'", dir));
  }
  if (::access(dir.c_str(), W_OK) != 0) {
    const int error = errno;
    throw InputError(SourcePos{path},
                     fmt::format("cannot write into '{}': {}", dir, errno_text(error)));
  }
}

void check_outputs(std::initializer_list<OutputArg> outputs) {
  namespace fs = std::filesystem;
  std::vector<std::pair<const OutputArg*, fs::path>> seen;
  for (const OutputArg& o : outputs) {
    if (o.path.empty() || o.path == "-") continue;
    try {
      check_output_path(o.path);
    } catch (const InputError& e) {
      throw InputError(e.pos(), fmt::format("{}: {}", o.flag, e.message()));
    }
    std::error_code ec;
    fs::path where = fs::weakly_canonical(fs::absolute(o.path, ec), ec);
    if (ec) where = fs::path(o.path).lexically_normal();
    for (const auto& [other, other_where] : seen) {
      std::error_code same_ec;
      if (where == other_where || fs::equivalent(o.path, other->path, same_ec)) {
        throw InputError(SourcePos{o.path},
                         fmt::format("{} names the same file as {}: one would be written over "
                                     "the other; give each output its own file",
                                     o.flag, other->flag));
      }
    }
    seen.emplace_back(&o, std::move(where));
  }
}

AtomicOutput::AtomicOutput(std::string path) : path_(std::move(path)) {
  if (path_ == "-") {
    buffer_.reserve(kBufferBytes);
    file_ = stdout;
    return;
  }
  if (path_.empty()) throw InputError(SourcePos{"(empty path)"}, "cannot write: empty output path");
  if (struct stat st {}; ::stat(path_.c_str(), &st) == 0) {
    refuse_if_guarded(st, path_);
    if (S_ISDIR(st.st_mode)) throw InputError(SourcePos{path_}, "cannot write: it is a directory");
  }
  remove_stale_temps(path_);
  buffer_.reserve(kBufferBytes);
  temp_path_ = claim_temp_name(fmt::format("{}.tmp.{}", path_, static_cast<long>(::getpid())));
  file_ = std::fopen(temp_path_.c_str(), "wbx");
  if (file_ == nullptr && errno == EEXIST) {
    // No output of this process writes it: left by an earlier process of the same id.
    std::remove(temp_path_.c_str());
    file_ = std::fopen(temp_path_.c_str(), "wbx");
  }
  if (file_ == nullptr) {
    const int error = errno;
    release_temp_name(temp_path_);
    temp_path_.clear();
    throw InputError(SourcePos{path_}, fmt::format("cannot write: {}", errno_text(error)));
  }
  temp_slot_ = track_temp(temp_path_);
  // buffer_ is the only buffer: stdio's own would copy every byte a second time.
  std::setvbuf(file_, nullptr, _IONBF, 0);
}

AtomicOutput::~AtomicOutput() {
  if (!committed_) discard_temp();
}

void AtomicOutput::write(std::string_view data) {
  TF_ASSERT(!committed_, "AtomicOutput::write on '{}' after commit", path_);
  if (failed_) return;
  if (buffer_.size() + data.size() > kBufferBytes) {
    drain();
    if (data.size() >= kBufferBytes) {
      if (std::fwrite(data.data(), 1, data.size(), file_) != data.size()) {
        error_ = errno;
        failed_ = true;
      }
      return;
    }
  }
  buffer_.append(data);
}

void AtomicOutput::drain() {
  if (failed_ || buffer_.empty()) return;
  if (std::fwrite(buffer_.data(), 1, buffer_.size(), file_) != buffer_.size()) {
    error_ = errno;
    failed_ = true;
  }
  buffer_.clear();
}

void AtomicOutput::commit() {
  TF_ASSERT(!committed_, "AtomicOutput::commit on '{}' called twice", path_);
  drain();
  committed_ = true;
  if (temp_path_.empty()) {
    if (!failed_ && std::fflush(file_) != 0) {
      error_ = errno;
      failed_ = true;
    }
    if (failed_) {
      throw InputError(SourcePos{path_}, fmt::format("cannot write: {}", errno_text(error_)));
    }
    return;
  }
  // fsync before rename: otherwise a crash can leave the new name pointing at an empty
  // file on file systems that reorder metadata and data writes.
  if (!failed_ && (std::fflush(file_) != 0 || ::fsync(::fileno(file_)) != 0)) {
    error_ = errno;
    failed_ = true;
  }
  // The file's id, which the destination takes on with the rename.
  struct stat written {};
  const bool have_id = ::fstat(::fileno(file_), &written) == 0;
  const bool closed = std::fclose(file_) == 0;
  file_ = nullptr;
  if (!closed && !failed_) {
    error_ = errno;
    failed_ = true;
  }
  if (failed_) {
    remove_temp();
    throw InputError(SourcePos{path_}, fmt::format("cannot write: {}", errno_text(error_)));
  }
  // Checked again at the last moment: an input read while this output was being written.
  try {
    check_output_path(path_);
  } catch (const InputError&) {
    remove_temp();
    throw;
  }
  std::error_code ec;
  std::filesystem::rename(temp_path_, path_, ec);
  if (ec) {
    remove_temp();
    throw InputError(SourcePos{path_}, fmt::format("cannot replace file: {}", ec.message()));
  }
  untrack_temp(temp_slot_);
  release_temp_name(temp_path_);
  // A second output to the same path in this run would replace this one.
  if (have_id && !scopes_guarding.load()) {
    guard_stat(written, path_, "an output this command already wrote");
  }
}

void AtomicOutput::discard_temp() {
  if (temp_path_.empty() || file_ == nullptr) return;
  std::fclose(file_);
  file_ = nullptr;
  remove_temp();
}

void AtomicOutput::remove_temp() {
  std::remove(temp_path_.c_str());
  untrack_temp(temp_slot_);
  release_temp_name(temp_path_);
}

void write_file_atomic(const std::string& path, std::string_view content) {
  AtomicOutput out(path);
  out.write(content);
  out.commit();
}

}  // namespace tierflow
