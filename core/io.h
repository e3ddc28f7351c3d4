// Output files that never lose user data: written to a temporary file beside the
// destination, flushed, then renamed over it.
//
// Glossary
//   temp file  `PATH.tmp.PID`, in the destination's directory so that the final rename
//              stays on one file system and is atomic.
//   commit     flush, fsync, close and rename the temp file over the destination. Until
//              then the destination keeps its old contents (or does not exist).
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace tierflow {

/// A file written piece by piece that appears at its path only when complete. "-" means
/// standard output (written through, nothing to rename). Errors are InputError
/// positioned at the path: the user chose it and can fix it.
class AtomicOutput {
 public:
  /// Opens `PATH.tmp.PID` for writing. Throws InputError when it cannot be created.
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

  /// The destination path, as given.
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  void drain();         ///< writes buffer_ to file_ and empties it
  void discard_temp();  ///< closes file_ and removes the temp file

  std::string path_;
  std::string temp_path_;  ///< empty when writing to stdout
  std::FILE* file_ = nullptr;
  std::string buffer_;   ///< pending bytes; drained when it reaches kBufferBytes
  int error_ = 0;        ///< errno of the first failure
  bool failed_ = false;  ///< a write, flush or sync failed; commit() reports it
  bool committed_ = false;
};

/// Writes `content` to `path` atomically. "-" means standard output. Throws InputError
/// (position: the path) when the directory is not writable.
void write_file_atomic(const std::string& path, std::string_view content);

}  // namespace tierflow
