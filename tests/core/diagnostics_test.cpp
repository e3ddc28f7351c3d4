#include "core/diagnostics.h"

#include <doctest/doctest.h>

#include "core/table.h"

using namespace tierflow;

TEST_CASE("edit distance counts insertions, deletions, substitutions and transpositions") {
  CHECK(edit_distance("", "") == 0);
  CHECK(edit_distance("abc", "") == 3);
  CHECK(edit_distance("bandwidth", "bandwdith") == 1);  // transposition
  CHECK(edit_distance("capacity", "capacty") == 1);     // deletion
  CHECK(edit_distance("latency", "latencyy") == 1);     // insertion
  CHECK(edit_distance("kind", "mind") == 1);            // substitution
  CHECK(edit_distance("tier", "link") == 3);
}

TEST_CASE("nearest suggests only plausible typos, first declared wins ties") {
  const std::vector<std::string> keys = {"bandwidth", "latency", "duplex", "dma_setup"};
  CHECK(nearest("bandwdith", keys) == "bandwidth");
  CHECK(nearest("LATENCY", keys) == "latency");  // case-insensitive match
  CHECK(nearest("speed", keys).empty());
  CHECK(did_you_mean("duplx", keys) == "; did you mean 'duplex'?");
  CHECK(did_you_mean("zzzzzz", keys).empty());
  const std::vector<std::string> tie = {"ab", "ac"};
  CHECK(nearest("aa", tie) == "ab");
}

TEST_CASE("InputError carries its position and prints file:line:col") {
  InputError e = InputError::at(SourcePos{"x.yaml", 3, 7}, "bad {}", "thing");
  CHECK(std::string(e.what()) == "x.yaml:3:7: bad thing");
  CHECK(e.message() == "bad thing");
  CHECK(e.pos().line == 3);
  CHECK(SourcePos{"f", 2, 0}.str() == "f:2");
  CHECK(SourcePos{"f", 0, 0}.str() == "f");
}

TEST_CASE("tables align columns and trim trailing spaces") {
  Table t({"id", "size"}, {Table::Align::kLeft, Table::Align::kRight});
  t.add_row({"hbm", "80GB"});
  t.add_row({"pool", "1TB"});
  CHECK(t.render(0) ==
        "id    size\n"
        "----  ----\n"
        "hbm   80GB\n"
        "pool   1TB\n");
  CHECK(display_width("µs") == 2);
}
