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

TEST_CASE("a bounded edit distance is the distance up to the bound, bound + 1 above it") {
  CHECK(edit_distance("num_hidden_layers", "num_hidedn_layers", 1) == 1);
  CHECK(edit_distance("tier", "link", 2) == 3);
  CHECK(edit_distance(std::string(500, 'x'), "vocab_size", 3) == 4);
  CHECK_FALSE(within_edit_distance(std::string(500, 'x'), "vocab_size", 3));
  CHECK_FALSE(within_edit_distance("a", "b", -1));
  // Every bound, on random words of a small alphabet (many transpositions and repeats).
  uint64_t state = 12345;
  const auto next = [&state] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<uint32_t>(state >> 33);
  };
  const auto word = [&] {
    std::string w(next() % 9, 'a');
    for (char& c : w) c = static_cast<char>('a' + next() % 3);
    return w;
  };
  for (int trial = 0; trial < 2000; ++trial) {
    const std::string a = word(), b = word();
    const int full = edit_distance(a, b);
    for (int bound = 0; bound <= 9; ++bound) {
      INFO(a, " ", b, " bound ", bound);
      CHECK(edit_distance(a, b, bound) == std::min(full, bound + 1));
      CHECK(within_edit_distance(a, b, bound) == (full <= bound));
    }
  }
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
  // The word as a name's leading part comes first, then a typo of another name (`--hw
  // h200` suggested only 'gh200').
  const std::vector<std::string> topos = {"gh200", "h100-sxm-8gpu", "h200-sxm-8gpu"};
  CHECK(did_you_mean("h200", topos) == "; did you mean 'h200-sxm-8gpu' or 'gh200'?");
  CHECK(nearest("h200", topos) == "h200-sxm-8gpu");
  CHECK(nearest("GH200", topos) == "gh200");  // the name itself, whatever its case
}

TEST_CASE("did you mean lists candidates that hold the word as a component or a part") {
  // The link ids of configs/hw/h100-sxm-8gpu.yaml.
  const std::vector<std::string> links = {"gpu-pcie", "nvlink", "nvme-link"};
  CHECK(did_you_mean("pcie", links) == "; did you mean 'gpu-pcie'?");      // a component
  CHECK(did_you_mean("PCIe", links) == "; did you mean 'gpu-pcie'?");      // in any case
  CHECK(did_you_mean("pcie-gpu", links) == "; did you mean 'gpu-pcie'?");  // components swapped
  CHECK(did_you_mean("pcei", links) == "; did you mean 'gpu-pcie'?");      // a component's typo
  // A component outranks a substring: 'nvme-link' has 'link', 'nvlink' only contains it.
  CHECK(did_you_mean("link", links) == "; did you mean 'nvme-link' or 'nvlink'?");
  CHECK(did_you_mean("gpu-pcie-x16", links) == "; did you mean 'gpu-pcie'?");  // contains one
  // A typo of the whole word still comes alone, and nothing fits 'ssd'.
  CHECK(did_you_mean("nvlnk", links) == "; did you mean 'nvlink'?");
  CHECK(did_you_mean("ssd", links).empty());
  // More than three: the first three of the best rank, in declaration order.
  const std::vector<std::string_view> many = {"a-pcie", "b-pcie", "xpciex", "c-pcie", "d-pcie"};
  CHECK(suggestions("pcie", many) == std::vector<std::string>{"a-pcie", "b-pcie", "c-pcie"});
  CHECK(did_you_mean("pcie", many) == "; did you mean 'a-pcie', 'b-pcie' or 'c-pcie'?");
  CHECK(suggestions("pcie", many, /*limit=*/5) ==
        std::vector<std::string>{"a-pcie", "b-pcie", "c-pcie", "d-pcie", "xpciex"});
  CHECK(nearest("pcie", many) == "a-pcie");
  // A word past 256 characters is no typo: nothing is measured (two 50,000-character ids
  // took seconds).
  const std::string huge(50'000, 'a');
  const std::vector<std::string> huge_ids = {huge + "b"};
  CHECK(suggestions(huge, huge_ids).empty());
  // Parts shorter than three characters, or less than half the word they are in, suggest
  // nothing ('rc' is in 'src', 'node' in 'supernode').
  const std::vector<std::string> short_ids = {"rc", "hbm"};
  CHECK(did_you_mean("src-link", short_ids).empty());
  const std::vector<std::string> scopes = {"device", "socket", "host", "supernode"};
  CHECK(did_you_mean("node", scopes).empty());
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
