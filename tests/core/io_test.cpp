// Unit tests for core/io: the destination appears only on commit, complete; nothing is
// left behind otherwise.
#include "core/io.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "core/diagnostics.h"
#include "tests/support/scratch_dir.h"

namespace tierflow {
namespace {

namespace fs = std::filesystem;

using tierflow::testing::ScratchDir;

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST_CASE("AtomicOutput: commit renames the complete file into place") {
  ScratchDir dir("commit");
  const std::string path = dir.file("out.txt");
  {
    AtomicOutput out(path);
    out.write("hello, ");
    out.write("world\n");
    // Before commit only the temp file exists, never a half-written destination.
    CHECK_FALSE(fs::exists(path));
    CHECK(dir.entries().size() == 1);
    out.commit();
  }
  CHECK(read_all(path) == "hello, world\n");
  CHECK(dir.entries() == std::vector<std::string>{"out.txt"});
}

TEST_CASE("AtomicOutput: destruction without commit leaves neither file nor temp file") {
  ScratchDir dir("abandon");
  const std::string path = dir.file("out.txt");
  {
    AtomicOutput out(path);
    out.write("partial");
  }
  CHECK(dir.entries().empty());

  // An existing destination keeps its old contents.
  write_file_atomic(path, "old\n");
  {
    AtomicOutput out(path);
    out.write("new, but abandoned\n");
  }
  CHECK(read_all(path) == "old\n");
  CHECK(dir.entries() == std::vector<std::string>{"out.txt"});
}

TEST_CASE("write_files_atomic: outputs appear together, or none when one cannot be written") {
  ScratchDir dir("set");
  const std::string a = dir.file("a.txt"), b = dir.file("b.txt");
  write_file_atomic(a, "old a\n");
  write_file_atomic(b, "old b\n");
  using Out = std::pair<std::string, std::string>;
  const Out both[] = {{a, "new a\n"}, {"", "skipped"}, {b, "new b\n"}};
  write_files_atomic(both);
  CHECK(read_all(a) == "new a\n");
  CHECK(read_all(b) == "new b\n");
  // A device that is always full fails at its flush, after a and b are written: neither is
  // replaced, and no temp file is left.
  if (::access("/dev/full", W_OK) == 0) {
    const Out failing[] = {{a, "newer a\n"}, {b, "newer b\n"}, {"/dev/full", "x"}};
    CHECK_THROWS_WITH_AS(write_files_atomic(failing), doctest::Contains("/dev/full: cannot write"),
                         InputError);
    CHECK(read_all(a) == "new a\n");
    CHECK(read_all(b) == "new b\n");
    CHECK(dir.entries() == std::vector<std::string>{"a.txt", "b.txt"});
  } else {
    MESSAGE("skipped the failing half: no writable /dev/full");
  }
}

TEST_CASE("OutputSet: outputs written piece by piece appear with the rest; none unpublished") {
  ScratchDir dir("outset");
  const std::string a = dir.file("a.txt"), b = dir.file("b.txt");
  write_file_atomic(a, "old a\n");
  {
    OutputSet set;
    set.add(a, "new a\n");
    AtomicOutput* streamed = set.open(b);
    REQUIRE(streamed != nullptr);
    CHECK(set.open("") == nullptr);
    streamed->write("new ");
    streamed->write("b\n");
    // Written and not published: nothing at either destination yet.
    CHECK(read_all(a) == "old a\n");
    CHECK_FALSE(std::filesystem::exists(b));
  }
  // Destroyed unpublished (a command that failed between its outputs): none written, no
  // temp file left.
  CHECK(read_all(a) == "old a\n");
  CHECK(dir.entries() == std::vector<std::string>{"a.txt"});
  OutputSet set;
  set.add(a, "new a\n");
  set.open(b)->write("new b\n");
  set.publish();
  CHECK(read_all(a) == "new a\n");
  CHECK(read_all(b) == "new b\n");
  if (::access("/dev/full", W_OK) == 0) {
    // A device fails at its flush, which comes after every file's: no file is renamed.
    OutputSet failing;
    failing.add("/dev/full", "x");
    failing.add(a, "newer a\n");
    CHECK_THROWS_WITH_AS(failing.publish(), doctest::Contains("/dev/full: cannot write"),
                         InputError);
    CHECK(read_all(a) == "new a\n");
  }
  CHECK(dir.entries() == std::vector<std::string>{"a.txt", "b.txt"});
}

TEST_CASE(
    "AtomicOutput: the process's own descriptors are written through a copy, at their offset") {
  ScratchDir dir("fd");
  const std::string log = dir.file("log.txt");
  write_file_atomic(log, "an earlier line\n");
  // As `>> log.txt` opens it: appending. Opening /dev/fd/N again would truncate it.
  const int fd = ::open(log.c_str(), O_WRONLY | O_APPEND);
  REQUIRE(fd >= 0);
  for (const std::string& path :
       {fmt::format("/dev/fd/{}", fd), fmt::format("/proc/self/fd/{}", fd),
        fmt::format("/proc/{}/fd/{}", ::getpid(), fd)}) {
    write_file_atomic(path, path + "\n");
  }
  CHECK(::close(fd) == 0);  // still open: the outputs closed their copies only
  CHECK(read_all(log) ==
        fmt::format("an earlier line\n/dev/fd/{0}\n/proc/self/fd/{0}\n/proc/{1}/fd/{0}\n", fd,
                    ::getpid()));
  CHECK(dir.entries() == std::vector<std::string>{"log.txt"});
}

TEST_CASE(
    "check_outputs: two outputs on one descriptor, or one on the file standard output goes to") {
  ScratchDir dir("streams");
  const std::string dash = "-", dev_stdout = "/dev/stdout", fd1 = "/dev/fd/1", err = "/dev/stderr";
  const std::string file = dir.file("t.json"), none;
  CHECK_THROWS_WITH_AS(check_outputs({{"-o", dash}, {"--timeline", dash}}),
                       "--timeline: -o and --timeline both write to standard output: their bytes "
                       "would interleave; give one of them a file",
                       InputError);
  CHECK_THROWS_WITH_AS(check_outputs({{"-o", dash}, {"--transfers", dev_stdout}}),
                       doctest::Contains("-o and --transfers both write to standard output"),
                       InputError);
  CHECK_THROWS_WITH_AS(check_outputs({{"-o", fd1}, {"--timeline", dash}}),
                       doctest::Contains("both write to standard output"), InputError);
  // One each, or one and a file elsewhere: fine.
  CHECK_NOTHROW(
      check_outputs({{"-o", dash}, {"--timeline", err}, {"--transfers", file}, {"x", none}}));
  // Standard output sent to the file another output names (`> t.json`).
  write_file_atomic(file, "");
  const int saved = ::dup(1);
  REQUIRE(saved >= 0);
  const int to_file = ::open(file.c_str(), O_WRONLY | O_APPEND);
  REQUIRE(to_file >= 0);
  std::fflush(stdout);
  REQUIRE(::dup2(to_file, 1) == 1);
  std::string refused;
  try {
    check_outputs({{"-o", dash}, {"--timeline", file}});
  } catch (const InputError& e) {
    refused = e.what();
  }
  const bool alone_ok = [&] {
    try {
      check_outputs({{"--timeline", file}});  // nothing on standard output: nothing to lose
      return true;
    } catch (const InputError&) {
      return false;
    }
  }();
  std::fflush(stdout);
  ::dup2(saved, 1);
  ::close(saved);
  ::close(to_file);
  CHECK(refused == file +
                       ": --timeline names the file standard output goes to, where -o writes: "
                       "one would be renamed over the other; give each output its own file");
  CHECK(alone_ok);
}

TEST_CASE("AtomicOutput: writes larger than its buffer arrive intact and in order") {
  ScratchDir dir("large");
  const std::string path = dir.file("big.bin");
  std::string expected;
  {
    AtomicOutput out(path);
    // 3000 small lines (buffered), one 3 MiB block (written through), more small lines.
    for (int i = 0; i < 3000; ++i) {
      const std::string line = fmt::format("line {}\n", i);
      out.write(line);
      expected += line;
    }
    const std::string block(size_t{3} << 20, 'x');
    out.write(block);
    expected += block;
    for (int i = 0; i < 3000; ++i) {
      const std::string line = fmt::format("tail {}\n", i);
      out.write(line);
      expected += line;
    }
    out.commit();
  }
  CHECK(read_all(path) == expected);
}

TEST_CASE("AtomicOutput: a directory that cannot be written throws InputError naming the path") {
  // A missing directory rather than a read-only one: tests may run as root, which ignores
  // permission bits.
  const std::string path = "/nonexistent-tierflow-dir/sub/out.json";
  try {
    AtomicOutput out(path);
    FAIL("expected InputError");
  } catch (const InputError& e) {
    CHECK(e.pos().file == path);
    CHECK(std::string(e.what()).find(path) != std::string::npos);
    CHECK(e.message().find("cannot write") != std::string::npos);
  }
  CHECK_THROWS_AS(write_file_atomic(path, "x"), InputError);
}

TEST_CASE("AtomicOutput: a directory at the destination is refused before anything is written") {
  ScratchDir dir("rename");
  const std::string path = dir.file("taken");
  fs::create_directories(fs::path(path) / "child");
  try {
    AtomicOutput out(path);
    FAIL("expected InputError");
  } catch (const InputError& e) {
    CHECK(e.pos().file == path);
    CHECK(e.message().find("it is a directory") != std::string::npos);
  }
  CHECK(dir.entries() == std::vector<std::string>{"taken"});
}

TEST_CASE("AtomicOutput: a destination gone bad while writing throws and removes the temp") {
  ScratchDir dir("rename");
  // The destination becomes a non-empty directory while the output is written: the check
  // before the rename refuses it (a file could not be renamed over it either).
  const std::string path = dir.file("taken");
  AtomicOutput out(path);
  out.write("data");
  fs::create_directories(fs::path(path) / "child");
  try {
    out.commit();
    FAIL("expected InputError");
  } catch (const InputError& e) {
    CHECK(e.pos().file == path);
    CHECK(e.message().find("cannot write: it is a directory") != std::string::npos);
  }
  CHECK(dir.entries() == std::vector<std::string>{"taken"});
}

TEST_CASE("inputs: devices and directories are refused, files above the limit too") {
  CHECK_THROWS_WITH_AS(read_text_file("/dev/zero"),
                       "/dev/zero: cannot read file: it is a character device; inputs are regular "
                       "files or pipes",
                       InputError);
  ScratchDir dir("inputs");
  CHECK_THROWS_WITH_AS(FileText(dir.file("")), doctest::Contains("it is a directory"), InputError);
  CHECK_THROWS_WITH_AS(read_text_file(dir.file("missing")), doctest::Contains("no such file"),
                       InputError);
  CHECK(max_input_bytes() > 0);
}

TEST_CASE("outputs: a path that is one of the run's inputs is refused, links and dot-dot too") {
  ScratchDir dir("guard");
  const std::string in = dir.file("w.json");
  write_file_atomic(in, "{}");
  struct Guard {
    Guard() { enable_output_guard(); }
    ~Guard() { disable_output_guard(); }
  } guard;
  (void)read_text_file(in);
  fs::create_directories(dir.file("sub"));
  fs::create_hard_link(in, dir.file("hard.json"));
  for (const std::string& out : {in, dir.file("sub/../w.json"), dir.file("hard.json")}) {
    CHECK_THROWS_WITH_AS(write_file_atomic(out, "replaced"),
                         doctest::Contains("it is an input of this command"), InputError);
  }
  CHECK(read_text_file(in) == "{}");
  // A new path is fine, and then guarded itself: a second output there would replace it.
  write_file_atomic(dir.file("plan.json"), "1");
  CHECK_THROWS_WITH_AS(write_file_atomic(dir.file("plan.json"), "2"),
                       doctest::Contains("an output this command already wrote"), InputError);
}

TEST_CASE("outputs: a temp file whose process is gone is removed by the next write") {
  ScratchDir dir("stale");
  const std::string out = dir.file("o.txt");
  write_file_atomic(out + ".tierflow-tmp.999999999", "left by a killed run");
  write_file_atomic(out, "new");
  CHECK(dir.entries() == std::vector<std::string>{"o.txt"});
  // Only tierflow's own temp names: a user's file named like a temp file stays.
  write_file_atomic(out + ".tmp.999999999", "the user's");
  write_file_atomic(out, "newer");
  CHECK(dir.entries() == std::vector<std::string>{"o.txt", "o.txt.tmp.999999999"});
  // Nor a file this run reads, even with the marker.
  const std::string input = out + ".tierflow-tmp.999999998";
  write_file_atomic(input, "an input");
  enable_output_guard();
  CHECK(read_text_file(input) == "an input");
  write_file_atomic(out, "again");
  disable_output_guard();
  CHECK(read_all(input) == "an input");
}

TEST_CASE("outputs: a link's target is replaced, the link kept; a file keeps its mode") {
  ScratchDir dir("link");
  std::filesystem::create_directory(dir.file("sub"));
  const std::string target = dir.file("sub/t.json");
  write_file_atomic(target, "old");
  std::filesystem::create_symlink("sub/t.json", dir.file("l.json"));
  write_file_atomic(dir.file("l.json"), "new");
  CHECK(std::filesystem::is_symlink(dir.file("l.json")));
  CHECK(read_all(target) == "new");
  // A dangling link: its target is made.
  std::filesystem::create_symlink("sub/made.json", dir.file("d.json"));
  write_file_atomic(dir.file("d.json"), "made");
  CHECK(std::filesystem::is_symlink(dir.file("d.json")));
  CHECK(read_all(dir.file("sub/made.json")) == "made");
  // A private file stays private.
  const std::string priv = dir.file("p.json");
  write_file_atomic(priv, "1");
  ::chmod(priv.c_str(), 0600);
  write_file_atomic(priv, "2");
  struct stat st {};
  REQUIRE(::stat(priv.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0600);
  // A read-only one is refused, before any work and when written.
  ::chmod(priv.c_str(), 0444);
  CHECK_THROWS_WITH_AS(check_output_path(priv), doctest::Contains("read-only (mode 0444)"),
                       InputError);
  CHECK_THROWS_WITH_AS(write_file_atomic(priv, "3"), doctest::Contains("read-only"), InputError);
  CHECK(read_all(priv) == "2");
  ::chmod(priv.c_str(), 0600);
}

TEST_CASE("outputs: a pipe or a character device is written into, never replaced") {
  ScratchDir dir("fifo");
  const std::string fifo = dir.file("ff");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::string got;
  std::thread reader([&] { got = read_all(fifo); });
  write_file_atomic(fifo, "through the pipe");
  reader.join();
  CHECK(got == "through the pipe");
  struct stat st {};
  REQUIRE(::lstat(fifo.c_str(), &st) == 0);
  CHECK(S_ISFIFO(st.st_mode));
  // /dev/null stays the device.
  write_file_atomic("/dev/null", "gone");
  REQUIRE(::lstat("/dev/null", &st) == 0);
  CHECK(S_ISCHR(st.st_mode));
  CHECK(dir.entries() == std::vector<std::string>{"ff"});
}

TEST_CASE("write_file_atomic writes and replaces whole files") {
  ScratchDir dir("whole");
  const std::string path = dir.file("w.txt");
  write_file_atomic(path, "first\n");
  CHECK(read_all(path) == "first\n");
  write_file_atomic(path, "second, longer\n");
  CHECK(read_all(path) == "second, longer\n");
  write_file_atomic(path, "");
  CHECK(read_all(path).empty());
  CHECK(dir.entries() == std::vector<std::string>{"w.txt"});
}

TEST_CASE("check_output_path: an empty path, a directory or a missing folder, before any work") {
  ScratchDir dir("check");
  CHECK_NOTHROW(check_output_path("-"));
  CHECK_NOTHROW(check_output_path(dir.file("new.json")));
  CHECK_THROWS_WITH_AS(check_output_path(""), doctest::Contains("empty output path"), InputError);
  CHECK_THROWS_WITH_AS(check_output_path(dir.file("")), doctest::Contains("it is a directory"),
                       InputError);
  CHECK_THROWS_WITH_AS(check_output_path(dir.file("nowhere/x.json")),
                       doctest::Contains("cannot write: no folder"), InputError);
  CHECK(dir.entries().empty());  // nothing written
}

}  // namespace
}  // namespace tierflow
