#include "core/io.h"

#include <cerrno>
#include <filesystem>
#include <system_error>
#include <unistd.h>

#include "core/diagnostics.h"

namespace tierflow {
namespace {

// One write(2) per MiB keeps syscall overhead negligible for timelines of millions of
// events while bounding memory.
constexpr size_t kBufferBytes = size_t{1} << 20;

std::string errno_text(int error) {
  return error == 0 ? std::string("I/O error") : std::generic_category().message(error);
}

}  // namespace

AtomicOutput::AtomicOutput(std::string path) : path_(std::move(path)) {
  buffer_.reserve(kBufferBytes);
  if (path_ == "-") {
    file_ = stdout;
    return;
  }
  temp_path_ = fmt::format("{}.tmp.{}", path_, static_cast<long>(::getpid()));
  file_ = std::fopen(temp_path_.c_str(), "wb");
  if (file_ == nullptr) {
    const int error = errno;
    throw InputError(SourcePos{path_}, fmt::format("cannot write: {}", errno_text(error)));
  }
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
  const bool closed = std::fclose(file_) == 0;
  file_ = nullptr;
  if (!closed && !failed_) {
    error_ = errno;
    failed_ = true;
  }
  if (failed_) {
    std::remove(temp_path_.c_str());
    throw InputError(SourcePos{path_}, fmt::format("cannot write: {}", errno_text(error_)));
  }
  std::error_code ec;
  std::filesystem::rename(temp_path_, path_, ec);
  if (ec) {
    std::remove(temp_path_.c_str());
    throw InputError(SourcePos{path_}, fmt::format("cannot replace file: {}", ec.message()));
  }
}

void AtomicOutput::discard_temp() {
  if (temp_path_.empty() || file_ == nullptr) return;
  std::fclose(file_);
  file_ = nullptr;
  std::remove(temp_path_.c_str());
}

void write_file_atomic(const std::string& path, std::string_view content) {
  AtomicOutput out(path);
  out.write(content);
  out.commit();
}

}  // namespace tierflow
