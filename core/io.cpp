#include "core/io.h"

#include <algorithm>
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
    throw InputError(SourcePos{path}, error == ENOENT
                                          ? std::string("cannot open file: no such file")
                                          : fmt::format("cannot open file: {}", errno_text(error)));
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
    throw InputError(
        SourcePos{path},
        fmt::format("file is {}, above the input limit of {} (set "
                    "TIERFLOW_MAX_INPUT_BYTES to read larger inputs)",
                    to_string(Bytes{static_cast<uint64_t>(st.st_size)}), to_string(Bytes{cap})));
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

/// Whether the file whose stat is `st` is guarded.
bool is_guarded(const struct stat& st) {
  if (!guarding.load(std::memory_order_relaxed)) return false;
  const std::lock_guard lock(guard_mutex);
  return std::ranges::any_of(
      guarded, [&](const Guarded& g) { return g.dev == st.st_dev && g.ino == st.st_ino; });
}

/// The marker between a destination's name and the writing process's id in a temp file's
/// name. Only names with it are ever removed as stale: `out.json.tmp.99` may be the user's.
constexpr std::string_view kTempMarker = ".tierflow-tmp.";
/// A destination's name is cut to this many bytes in its temp file's name, so that a name
/// near the system's limit of 255 still has a temp file.
constexpr size_t kTempStem = 200;

/// `PATH.tierflow-tmp.` for the destination `target`: the prefix of its temp files' names.
std::string temp_prefix(const std::string& target) {
  const std::filesystem::path p(target);
  const std::string name = p.filename().string();
  return (p.parent_path() / name.substr(0, std::min(name.size(), kTempStem))).string() +
         std::string(kTempMarker);
}

/// Removes `PATH.tierflow-tmp.PID` (and `...PID.K`) files beside `target` whose process no
/// longer runs (a run killed with SIGKILL), never a file this run reads.
void remove_stale_temps(const std::string& target) {
  const std::filesystem::path prefix_path(temp_prefix(target));
  const std::string dir =
      prefix_path.has_parent_path() ? prefix_path.parent_path().string() : std::string(".");
  const std::string prefix = prefix_path.filename().string();
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
    const std::string stale = (std::filesystem::path(dir) / std::string(name)).string();
    struct stat st {};
    if (::lstat(stale.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || is_guarded(st)) continue;
    ::unlink(stale.c_str());
  }
  ::closedir(d);
}

/// The descriptor of this process that `path` names: "-" and /dev/stdout 1, /dev/stderr 2,
/// /dev/fd/N and /proc/self/fd/N (or /proc/PID/fd/N with this process's PID) N; none for
/// any other path.
std::optional<int> own_descriptor(const std::string& path) {
  if (path == "-" || path == "/dev/stdout") return 1;
  if (path == "/dev/stderr") return 2;
  const std::string self = fmt::format("/proc/{}/fd/", ::getpid());
  for (const std::string_view prefix :
       {std::string_view("/dev/fd/"), std::string_view("/proc/self/fd/"), std::string_view(self)}) {
    if (!path.starts_with(prefix)) continue;
    const std::string_view digits = std::string_view(path).substr(prefix.size());
    int fd = -1;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), fd);
    if (ec == std::errc() && end == digits.data() + digits.size() && !digits.empty() && fd >= 0) {
      return fd;
    }
    return std::nullopt;
  }
  return std::nullopt;
}

/// What descriptor `fd` of this process is called in messages.
std::string descriptor_name(int fd) {
  if (fd == 1) return "standard output";
  if (fd == 2) return "standard error";
  return fmt::format("descriptor {}", fd);
}

/// Whether an output to `path` is written straight into it, with no temp file and no
/// rename: a character device or a pipe (`/dev/null`, a FIFO), or what the process's own
/// descriptors name (`/dev/stdout`, `/dev/fd/3`, `/proc/self/fd/1`: whatever the shell
/// opened, a regular file included). Renaming over these would replace the device node or
/// the link, not write to them.
bool writes_through(const std::string& path, const struct stat& st) {
  return S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode) || own_descriptor(path).has_value() ||
         path.starts_with("/proc/");
}

/// Whether the existing regular file at `path` may not be replaced: no write permission
/// for anyone (`chmod a-w`, which root could ignore), or none for this process.
bool read_only(const std::string& path, const struct stat& st) {
  return (st.st_mode & (S_IWUSR | S_IWGRP | S_IWOTH)) == 0 || ::access(path.c_str(), W_OK) != 0;
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
        ec == std::errc() && end == text.data() + text.size()) {
      if (count > 0) return count;
      throw InputError(SourcePos{"TIERFLOW_MAX_INPUT_BYTES"},
                       "expected a size above 0 such as 8GiB or 100 (bytes), got '0'");
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

void enable_output_guard() {
  guarding.store(true);
}

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

MadeDir::~MadeDir() {
  std::error_code ec;
  // remove() takes only an empty folder.
  if (made_ && std::filesystem::is_empty(dir_, ec)) std::filesystem::remove(dir_, ec);
}

bool make_output_dir(const std::string& dir, std::string_view flag) {
  std::error_code ec;
  if (dir.empty()) throw InputError(SourcePos{std::string(flag)}, "empty directory path");
  const bool made = std::filesystem::create_directories(dir, ec);
  if (ec) {
    throw InputError(SourcePos{std::string(flag)},
                     fmt::format("cannot create the directory '{}': {}", dir, ec.message()));
  }
  if (!std::filesystem::is_directory(dir, ec)) {
    throw InputError(SourcePos{std::string(flag)},
                     fmt::format("'{}' exists and is not a directory", dir));
  }
  return made;
}

std::string output_target(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path p(path);
  std::error_code ec;
  // A loop of links is left as it is: opening the path then fails, naming it.
  for (int hops = 0; hops < 40 && fs::is_symlink(fs::symlink_status(p, ec)); ++hops) {
    const fs::path to = fs::read_symlink(p, ec);
    if (ec) break;
    p = to.is_absolute() ? to : p.parent_path() / to;
  }
  return p.string();
}

void check_output_path(const std::string& path) {
  if (path == "-") return;
  if (path.empty()) throw InputError(SourcePos{"(empty path)"}, "cannot write: empty output path");
  if (path.find('\0') != std::string::npos) {
    throw InputError(SourcePos{path.substr(0, path.find('\0'))},
                     "cannot write: the path holds a NUL byte");
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (guarding.load(std::memory_order_relaxed)) refuse_if_guarded(st, path);
    if (S_ISDIR(st.st_mode)) throw InputError(SourcePos{path}, "cannot write: it is a directory");
    if (S_ISBLK(st.st_mode) || S_ISSOCK(st.st_mode)) {
      throw InputError(SourcePos{path},
                       fmt::format("cannot write: it is {}; outputs are regular files, pipes or "
                                   "character devices",
                                   file_kind(st.st_mode)));
    }
    if (writes_through(path, st)) return;
    if (read_only(path, st)) {
      throw InputError(SourcePos{path},
                       fmt::format("cannot write: the file is read-only (mode {:04o}); tierflow "
                                   "does not replace it: make it writable or choose another path",
                                   st.st_mode & 07777));
    }
  }
  // The folder the file will be renamed into (a link's target's): found now, not after the
  // work.
  const std::filesystem::path parent = std::filesystem::path(output_target(path)).parent_path();
  const std::string dir = parent.empty() ? std::string(".") : parent.string();
  if (struct stat d{}; ::stat(dir.c_str(), &d) != 0 || !S_ISDIR(d.st_mode)) {
    throw InputError(SourcePos{path}, fmt::format("cannot write: no folder '{}'", dir));
  }
  if (::access(dir.c_str(), W_OK) != 0) {
    const int error = errno;
    throw InputError(SourcePos{path},
                     fmt::format("cannot write into '{}': {}", dir, errno_text(error)));
  }
}

void check_outputs(std::span<const OutputArg> outputs) {
  namespace fs = std::filesystem;
  // Two outputs on one descriptor of this process ("-" and /dev/stdout) would interleave
  // their bytes; an output to the file a descriptor output goes to (`-o - --timeline t.json
  // > t.json`) would be renamed over the other's bytes.
  std::vector<std::pair<const OutputArg*, int>> streams;
  std::vector<const OutputArg*> files;
  for (const OutputArg& o : outputs) {
    if (o.path.empty()) continue;
    const std::optional<int> fd = own_descriptor(o.path);
    if (!fd) {
      files.push_back(&o);
      continue;
    }
    for (const auto& [other, other_fd] : streams) {
      if (other_fd != *fd) continue;
      throw InputError(SourcePos{std::string(o.flag)},
                       fmt::format("{} and {} both write to {}: their bytes would interleave; "
                                   "give one of them a file",
                                   other->flag, o.flag, descriptor_name(*fd)));
    }
    streams.emplace_back(&o, *fd);
  }
  for (const OutputArg* file : files) {
    const OutputArg& o = *file;
    struct stat st {};
    if (streams.empty() || ::stat(o.path.c_str(), &st) != 0) continue;
    for (const auto& [stream, fd] : streams) {
      struct stat to {};
      if (::fstat(fd, &to) != 0 || S_ISCHR(to.st_mode)) continue;  // a terminal, /dev/null
      if (to.st_dev != st.st_dev || to.st_ino != st.st_ino) continue;
      throw InputError(SourcePos{o.path},
                       fmt::format("{} names the file {} goes to, where {} writes: one would be "
                                   "renamed over the other; give each output its own file",
                                   o.flag, descriptor_name(fd), stream->flag));
    }
  }
  std::vector<std::pair<const OutputArg*, fs::path>> seen;
  for (const OutputArg& o : outputs) {
    if (o.path.empty() || o.path == "-") continue;
    try {
      check_output_path(o.path);
    } catch (const InputError& e) {
      throw InputError(e.pos(), fmt::format("{}: {}", o.flag, e.message()));
    }
    std::error_code ec;
    // Where it lands: a link to another output (made or not yet) is that output.
    const std::string target = output_target(o.path);
    fs::path where = fs::weakly_canonical(fs::absolute(target, ec), ec);
    if (ec) where = fs::path(target).lexically_normal();
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

TempFile::TempFile(const std::string& dest) : target_(output_target(dest)) {
  remove_stale_temps(target_);
  path_ = claim_temp_name(temp_prefix(target_) + std::to_string(static_cast<long>(::getpid())));
  slot_ = track_temp(path_);
}

TempFile::~TempFile() {
  if (path_.empty()) return;
  ::unlink(path_.c_str());
  untrack_temp(slot_);
  release_temp_name(path_);
}

void TempFile::rename_over(const std::string& dest) {
  // Checked again at the last moment: an input read while the temp file was written.
  try {
    check_output_path(dest);
  } catch (const InputError&) {
    ::unlink(path_.c_str());
    throw;
  }
  // The destination's permission bits (and owner, where this process may set it) carry
  // over: a file kept private stays private.
  if (struct stat st{}; ::stat(target_.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
    (void)::chmod(path_.c_str(), st.st_mode & 07777);
    if (::geteuid() == 0) (void)::chown(path_.c_str(), st.st_uid, st.st_gid);
  }
  std::error_code ec;
  std::filesystem::rename(path_, target_, ec);
  if (ec) {
    ::unlink(path_.c_str());
    throw InputError(SourcePos{dest}, fmt::format("cannot replace file: {}", ec.message()));
  }
  untrack_temp(slot_);
  release_temp_name(path_);
  path_.clear();
}

AtomicOutput::AtomicOutput(std::string path) : path_(std::move(path)) {
  buffer_.reserve(kBufferBytes);
  if (path_ == "-") {
    file_ = stdout;
    return;
  }
  check_output_path(path_);
  if (const std::optional<int> fd = own_descriptor(path_)) {
    // Written through a copy of the descriptor: into what the shell opened, at its offset
    // (`>> log` appends); opening the path again would truncate a file and write from its
    // start over what was there.
    const int copy = ::dup(*fd);
    file_ = copy < 0 ? nullptr : ::fdopen(copy, "wb");
    if (file_ == nullptr) {
      const int error = errno;
      if (copy >= 0) ::close(copy);
      throw InputError(SourcePos{path_}, fmt::format("cannot write: {}", errno_text(error)));
    }
    direct_ = true;
    std::setvbuf(file_, nullptr, _IONBF, 0);
    return;
  }
  if (struct stat st{}; ::stat(path_.c_str(), &st) == 0 && writes_through(path_, st)) {
    file_ = std::fopen(path_.c_str(), "wb");
    if (file_ == nullptr) {
      const int error = errno;
      throw InputError(SourcePos{path_}, fmt::format("cannot write: {}", errno_text(error)));
    }
    direct_ = true;
    std::setvbuf(file_, nullptr, _IONBF, 0);
    return;
  }
  temp_.emplace(path_);
  const std::string& temp = temp_->path();
  file_ = std::fopen(temp.c_str(), "wbx");
  if (file_ == nullptr && errno == EEXIST) {
    // No output of this process writes it: left by an earlier process of the same id.
    std::remove(temp.c_str());
    file_ = std::fopen(temp.c_str(), "wbx");
  }
  if (file_ == nullptr) {
    const int error = errno;
    temp_.reset();
    throw InputError(SourcePos{path_}, fmt::format("cannot write: {}", errno_text(error)));
  }
  // buffer_ is the only buffer: stdio's own would copy every byte a second time.
  std::setvbuf(file_, nullptr, _IONBF, 0);
}

AtomicOutput::~AtomicOutput() {
  // The temp file (temp_) is removed after this, unless committed.
  if (file_ != nullptr && file_ != stdout) std::fclose(file_);
}

void AtomicOutput::write(std::string_view data) {
  TF_ASSERT(!committed_ && !finished_, "AtomicOutput::write on '{}' after commit", path_);
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
  finish();
  publish();
}

void AtomicOutput::finish() {
  TF_ASSERT(!committed_ && !finished_, "AtomicOutput::finish on '{}' called twice", path_);
  drain();
  finished_ = true;
  if (!temp_) {  // standard output, a device or a pipe: written through
    if (!failed_ && std::fflush(file_) != 0) {
      error_ = errno;
      failed_ = true;
    }
    if (direct_) {
      if (std::fclose(file_) != 0 && !failed_) {
        error_ = errno;
        failed_ = true;
      }
      file_ = nullptr;
    }
    if (failed_) {
      committed_ = true;
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
  have_id_ = ::fstat(::fileno(file_), &written_) == 0;
  const bool closed = std::fclose(file_) == 0;
  file_ = nullptr;
  if (!closed && !failed_) {
    error_ = errno;
    failed_ = true;
  }
  if (failed_) {
    committed_ = true;
    temp_.reset();
    throw InputError(SourcePos{path_}, fmt::format("cannot write: {}", errno_text(error_)));
  }
}

void AtomicOutput::publish() {
  TF_ASSERT(finished_ && !committed_, "AtomicOutput::publish on '{}' before finish", path_);
  committed_ = true;
  if (!temp_) return;  // written through
  temp_->rename_over(path_);
  temp_.reset();
  // A second output to the same path in this run would replace this one.
  if (have_id_ && !scopes_guarding.load()) {
    guard_stat(written_, path_, "an output this command already wrote");
  }
}

void write_file_atomic(const std::string& path, std::string_view content) {
  AtomicOutput out(path);
  out.write(content);
  out.commit();
}

AtomicOutput* OutputSet::open(const std::string& path) {
  if (path.empty()) return nullptr;
  return outputs_.emplace_back(std::make_unique<AtomicOutput>(path)).get();
}

void OutputSet::add(const std::string& path, std::string_view content) {
  if (AtomicOutput* out = open(path)) out->write(content);
}

void OutputSet::publish() {
  // Files first: a failure there leaves every destination, the written-through ones included.
  for (const bool through : {false, true}) {
    for (const auto& out : outputs_) {
      if (out->written_through() == through) out->finish();
    }
  }
  for (const auto& out : outputs_) out->publish();
}

void write_files_atomic(std::span<const std::pair<std::string, std::string>> outputs) {
  OutputSet set;
  for (const auto& [path, content] : outputs) set.add(path, content);
  set.publish();
}

}  // namespace tierflow
