#include "traces/routing_trace.h"

#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <map>
#include <mutex>
#include <string_view>

#include "core/diagnostics.h"
#include "core/io.h"
#include "core/json_reader.h"

namespace tierflow::traces {
namespace {

constexpr std::array<std::string_view, 4> kPickKeys = {"pass", "layer", "token", "experts"};

}  // namespace

RoutingTrace parse_routing_trace(std::string_view text, const std::string& file) {
  RoutingTrace trace;
  trace.file = file;
  JsonReader r(text, file);
  // Lines counted as the reader moves on: every object starts a line.
  size_t counted_to = 0;
  uint32_t line = 1;
  size_t line_start = 0;
  const auto advance = [&](size_t to) {
    for (; counted_to < to; ++counted_to) {
      if (text[counted_to] == '\n') {
        ++line;
        line_start = counted_to + 1;
      }
    }
  };
  while (r.peek() != JsonReader::Kind::kEnd) {
    const size_t at = r.offset();
    advance(at);
    if (at != line_start && text.substr(line_start, at - line_start).find_first_not_of(" \t\r") !=
                                std::string_view::npos) {
      r.fail_at(at, "a second value on one line: a routing trace holds one JSON object per line");
    }
    if (r.peek() != JsonReader::Kind::kObject) {
      r.fail_at(at, "expected a JSON object {{\"pass\", \"layer\", \"token\", \"experts\"}}: a "
                    "routing trace holds one per line");
    }
    std::array<int64_t, 3> number{};
    unsigned seen = 0;
    RoutingPick pick;
    r.begin_object("a routing pick");
    std::string_view key;
    while (r.next_key(key)) {
      const size_t key_at = r.key_offset();
      const auto k = static_cast<unsigned>(std::find(kPickKeys.begin(), kPickKeys.end(), key) - kPickKeys.begin());
      if (k == kPickKeys.size()) {
        r.fail_at(key_at, "unknown key '{}' in a routing pick (pass, layer, token, experts){}", key,
                  did_you_mean(key, kPickKeys));
      }
      if ((seen & (1U << k)) != 0) r.fail_at(key_at, "duplicate key '{}'", key);
      seen |= 1U << k;
      switch (k) {
        case 0:
          number[0] = r.read_int("pass", 0, kMaxRoutingPasses - 1);
          break;
        case 1:
          number[1] = r.read_int("layer", 0, kMaxRoutingLayers - 1);
          break;
        case 2:
          number[2] = r.read_int("token", 0, static_cast<int64_t>(kMaxRoutingToken));
          break;
        default: {
          const size_t array_at = r.offset();
          advance(array_at);
          pick.line = line;
          pick.column = static_cast<uint32_t>(array_at - line_start + 1);
          r.begin_array("experts");
          while (r.next_item()) {
            const size_t item_at = r.offset();
            const auto e = static_cast<uint16_t>(r.read_int("an expert", 0, kMaxRoutingExperts - 1));
            if (std::find(pick.experts.begin(), pick.experts.end(), e) != pick.experts.end()) {
              r.fail_at(item_at, "expert {} is picked twice", e);
            }
            if (pick.experts.size() == 256) r.fail_at(item_at, "more than 256 experts for one token");
            pick.experts.push_back(e);
          }
          if (pick.experts.empty()) r.fail_at(array_at, "experts is empty: a token picks at least one");
          break;
        }
      }
    }
    if (seen != 0xFU) {
      for (unsigned k = 0; k < kPickKeys.size(); ++k) {
        if ((seen & (1U << k)) == 0) {
          r.fail_at(at, "missing key '{}' in a routing pick (each needs pass, layer, token and "
                        "experts)",
                    kPickKeys[k]);
        }
      }
    }
    const uint64_t id = RoutingTrace::key(static_cast<uint32_t>(number[0]),
                                          static_cast<uint32_t>(number[1]),
                                          static_cast<uint64_t>(number[2]));
    const auto [it, added] = trace.picks.try_emplace(id, std::move(pick));
    if (!added) {
      r.fail_at(at, "pass {}, layer {}, token {} is given twice (first on line {})", number[0],
                number[1], number[2], it->second.line);
    }
  }
  if (trace.picks.empty()) {
    throw InputError::at(SourcePos{file}, "empty routing trace: no picks");
  }
  return trace;
}

const RoutingPick* RoutingTrace::find(uint32_t pass, uint32_t layer, uint64_t token) const {
  const auto it = picks.find(key(pass, layer, token));
  return it == picks.end() ? nullptr : &it->second;
}

std::shared_ptr<const RoutingTrace> read_routing_trace(const std::string& path) {
  // Shared by path, while the file is unchanged (its size and modification time).
  static std::mutex m;
  static std::map<std::string, std::shared_ptr<const RoutingTrace>> cache;
  struct stat st {};
  std::string key = path;
  if (::stat(path.c_str(), &st) == 0) {
    key += fmt::format("\n{}\n{}.{}", st.st_size, st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
  }
  {
    const std::lock_guard lock(m);
    if (const auto it = cache.find(key); it != cache.end()) return it->second;
  }
  const FileText file(path);
  auto trace = std::make_shared<const RoutingTrace>(parse_routing_trace(file.view(), path));
  const std::lock_guard lock(m);
  return cache.try_emplace(key, std::move(trace)).first->second;
}

}  // namespace tierflow::traces
