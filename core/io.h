// The one door for files: every input is read through read_text_file or FileText (a
// regular file or a pipe, never larger than the input limit), and every output is written
// through AtomicOutput, which refuses a path that is one of the run's inputs and never
// leaves a half-written file.
//
// Glossary
//   input limit  the largest input file a command reads: 4 GiB, or the environment's
//                TIERFLOW_MAX_INPUT_BYTES (a size: 8GiB, 100B). docs/cli.md, "Limits".
//   file id      a file's device and inode: `sub/../w.json`, a symbolic link and a hard
//                link to w.json all have w.json's id.
//   guarded      a file this process read as an input (or wrote as an output, or holds
//                open as a database): no output may replace it.
//   target       where an output lands: its path with symbolic links followed (a link's
//                target is replaced, the link kept).
//   temp file    `TARGET.tierflow-tmp.PID`, in the target's directory so that the final
//                rename stays on one file system and is atomic. A temp file whose process
//                no longer runs (a run killed with SIGKILL) is removed by the next run that
//                writes TARGET; no other file is ever removed.
//   written through  a character device or a pipe (`/dev/null`, a FIFO), or a name of the
//                process's own descriptors (`/dev/stdout`, `/dev/fd/N`, `/proc/...`): written
//                straight into, never renamed over.
//   commit       flush, fsync, close and rename the temp file over the destination. Until
//                then the destination keeps its old contents (or does not exist).
#pragma once

#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <sys/stat.h>
#include <utility>
#include <vector>

namespace tierflow {

/// The largest input file read, in bytes: TIERFLOW_MAX_INPUT_BYTES when set (a byte count
/// or a size such as 8GiB; InputError when it is not one above 0), else 4 GiB.
uint64_t max_input_bytes();

/// Reads a whole file into memory. InputError (at the path) when it is missing, a
/// directory, a device or anything else that is neither a regular file nor a pipe, or larger
/// than max_input_bytes(). The file becomes guarded.
std::string read_text_file(const std::string& path);

/// A read-only view of a whole file, memory-mapped when it is a regular file (a million-op
/// workload is ~250 MB: mapping avoids copying it); the same checks as read_text_file.
class FileText {
 public:
  explicit FileText(const std::string& path);
  ~FileText();
  FileText(const FileText&) = delete;
  FileText& operator=(const FileText&) = delete;
  [[nodiscard]] std::string_view view() const { return view_; }

 private:
  void* map_ = nullptr;
  size_t size_ = 0;
  std::string copy_;  ///< used when the file cannot be mapped (pipes, empty files)
  std::string_view view_;
};

/// Marks the existing file at `path` as guarded (by its id: nothing is opened), naming it
/// `role` in messages ("it is ROLE", e.g. "the results database of this sweep"). For files
/// not read through read_text_file (SQLite databases).
void guard_file(const std::string& path, std::string_view role = "an input of this command");

/// Creates the output directory `dir` (and its parents) if needed. InputError at `flag`
/// when it exists as something else or cannot be created. True when it made `dir`.
bool make_output_dir(const std::string& dir, std::string_view flag);

/// An output folder that a command made (make_output_dir) and removes again when it leaves
/// it empty: a refused or failed run leaves no empty folder behind. A folder that existed
/// before is never removed.
class MadeDir {
 public:
  MadeDir() = default;
  MadeDir(std::string dir, bool made) : dir_(std::move(dir)), made_(made) {}
  ~MadeDir();
  MadeDir(const MadeDir&) = delete;
  MadeDir& operator=(const MadeDir&) = delete;

 private:
  std::string dir_;
  bool made_ = false;
};

/// Turns guarding on for this process (the CLI does, first thing): from then on every file
/// read is guarded. Off by default, so a long-lived host (Python) may read and rewrite a
/// file across calls.
void enable_output_guard();
/// Turns guarding off and forgets every guarded file (tests that turned it on).
void disable_output_guard();

/// Guarding for the lifetime of the object, in a host that leaves it off (Python): the
/// files a call reads are guarded during the call, and forgotten when the last scope open
/// at once ends. Nothing changes where guarding was already on (the CLI).
class OutputGuardScope {
 public:
  OutputGuardScope();
  ~OutputGuardScope();
  OutputGuardScope(const OutputGuardScope&) = delete;
  OutputGuardScope& operator=(const OutputGuardScope&) = delete;
};

/// `path` with its symbolic links followed, as far as they lead (a dangling link: where it
/// points); `path` itself when it is no link.
std::string output_target(const std::string& path);

/// Throws InputError (at `path`) when `path` names a guarded file (same file id): an output
/// that would replace one of the run's inputs; and, guarding or not, when it is empty, a
/// directory, a block device or socket, a read-only file, or in a folder that does not exist
/// or cannot be written. "-" is always allowed. Commands call it before long work so that a bad
/// output path is refused at once; AtomicOutput calls it again before it writes.
void check_output_path(const std::string& path);

/// An output option of a command: its flag ("--timeline") and the path it was given (empty:
/// not given).
struct OutputArg {
  std::string_view flag;
  const std::string& path;
};

/// check_output_path for every given output, the error naming its flag; and InputError
/// when two of them name the same file (the same path, or the same file id), which would
/// write one over the other. "-" (standard output) is not a file. Commands call it before
/// any work, so that a refused run writes nothing.
void check_outputs(std::span<const OutputArg> outputs);
inline void check_outputs(std::initializer_list<OutputArg> outputs) {
  check_outputs(std::span<const OutputArg>(outputs.begin(), outputs.size()));
}

/// The temp file of an output to `dest`: its name claimed (`TARGET.tierflow-tmp.PID`, or
/// `...PID.K` while this process writes the first), the stale ones of dead processes
/// removed, and the file removed on a fatal signal or on destruction unless renamed. The
/// file itself is made by its user (fopen, SQLite).
class TempFile {
 public:
  explicit TempFile(const std::string& dest);
  ~TempFile();
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  [[nodiscard]] const std::string& path() const { return path_; }
  /// Checks `dest` again (check_output_path), gives the temp file the target's permission
  /// bits (and owner, as root) when it exists, and renames it over the target. InputError,
  /// the temp file removed, on failure.
  void rename_over(const std::string& dest);

 private:
  std::string target_;
  std::string path_;        ///< empty once renamed
  size_t slot_ = SIZE_MAX;  ///< the signal handler's record of path_
};

/// A file written piece by piece that appears at its path only when complete. "-" means
/// standard output, and a device or pipe is written through (nothing to rename). Errors
/// are InputError positioned at the path: the user chose it and can fix it.
class AtomicOutput {
 public:
  /// Checks the path (check_output_path) and opens its temp file for writing. Throws
  /// InputError when it cannot be created.
  explicit AtomicOutput(std::string path);
  /// Closes and removes the temp file unless committed; the destination is untouched.
  ~AtomicOutput();
  AtomicOutput(const AtomicOutput&) = delete;
  AtomicOutput& operator=(const AtomicOutput&) = delete;

  /// Appends `data`. Buffered; a failed write is remembered and reported by commit().
  void write(std::string_view data);
  /// Flushes, fsyncs, closes and renames the temp file over the destination. Throws
  /// InputError on a write, sync or rename failure (the temp file is removed). Call once.
  void commit();
  /// commit() in two halves, for several outputs that appear together
  /// (write_files_atomic): finish() flushes, syncs and closes (throws as commit() does, the
  /// destination untouched); publish() then renames. commit() is finish() then publish().
  void finish();
  void publish();

  /// The destination path, as given.
  [[nodiscard]] const std::string& path() const { return path_; }
  /// Written straight to its destination (standard output, a device, a pipe): nothing to
  /// hold back until publish().
  [[nodiscard]] bool written_through() const { return !temp_; }

 private:
  void drain();  ///< writes buffer_ to file_ and empties it

  std::string path_;
  std::optional<TempFile> temp_;  ///< none when written through
  std::FILE* file_ = nullptr;
  bool direct_ = false;  ///< file_ is the destination itself (a device or pipe), not stdout
  std::string buffer_;   ///< pending bytes; drained when it reaches kBufferBytes
  int error_ = 0;        ///< errno of the first failure
  bool failed_ = false;  ///< a write, flush or sync failed; commit() reports it
  bool committed_ = false;
  bool finished_ = false;
  struct stat written_ {};  ///< the temp file's id, taken by the destination on rename
  bool have_id_ = false;
};

/// Writes `content` to `path` atomically. "-" means standard output. Throws InputError
/// (position: the path) when the directory is not writable.
void write_file_atomic(const std::string& path, std::string_view content);

/// The outputs of one command, which appear together. Each is written to its temp file as
/// it is added; publish() first finishes every one (flush and sync: a failure to write any,
/// a full disk, leaves every destination as it was), then renames them all. Outputs written
/// through (standard output, a device, a pipe) are finished last, after every file. What
/// is not published is removed when the set is destroyed: a command that fails between
/// two outputs writes none.
class OutputSet {
 public:
  /// An output at `path` written piece by piece (a Timeline's); nullptr for an empty path.
  AtomicOutput* open(const std::string& path);
  /// An output at `path` holding `content`; an empty path is skipped.
  void add(const std::string& path, std::string_view content);
  /// Finishes every output, then renames them into place. Throws InputError as
  /// AtomicOutput::finish does, with no destination touched. Call once.
  void publish();

 private:
  std::vector<std::unique_ptr<AtomicOutput>> outputs_;
};

/// Writes several outputs of one command as a set (OutputSet). Outputs with an empty path
/// are skipped.
void write_files_atomic(std::span<const std::pair<std::string, std::string>> outputs);

}  // namespace tierflow
