// The request generator: a spec of comma-separated items turned into a seeded trace.
// Every random draw comes from std::mt19937_64 (its output is fixed by the standard)
// through the distributions written here, never std:: distributions, whose output differs
// between standard libraries: the same spec gives the same requests everywhere.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <numbers>
#include <optional>
#include <random>

#include "core/diagnostics.h"
#include "core/units.h"
#include "traces/requests.h"

namespace tierflow::traces {
namespace {

/// The largest sampled length (a prompt's new message or an output), in tokens.
constexpr int64_t kMaxSampledTokens = int64_t{1} << 20;
constexpr int64_t kMaxGroups = 1'000'000;
constexpr int64_t kMaxTurns = 1'000;
constexpr double kMaxRatePerS = 1e9;
constexpr double kMaxCv = 10.0;
constexpr double kMaxSigma = 4.0;

constexpr std::array<std::string_view, 2> kProcesses = {"poisson", "gamma"};
constexpr std::array<std::string_view, 10> kKeys = {"rate",   "n",      "prompt", "output", "cv",
                                                    "groups", "system", "turns",  "think",  "seed"};
enum Key : size_t { kRate, kN, kPrompt, kOutput, kCv, kGroups, kSystem, kTurns, kThink, kSeed };

struct Length {
  enum class Kind { kFixed, kUniform, kLognormal } kind = Kind::kFixed;
  int64_t lo = 0;  ///< fixed: the length; uniform: the least
  int64_t hi = 0;  ///< uniform: the largest
  double mu = 0;   ///< lognormal: the underlying normal's mean
  double sigma = 0;
};

struct Spec {
  bool gamma = false;
  double rate_per_s = 0;
  double cv = 1;
  int64_t n = 0;
  Length prompt;
  Length output;
  int64_t groups = 0;  ///< 0: no shared system prompts
  int64_t system = 0;
  int64_t turns = 1;
  int64_t think_ps = 0;
  uint64_t seed = 1;
  /// The value text of each key as given (empty: not given).
  std::array<std::string, kKeys.size()> text;
};

/// `t` without the spaces around it.
std::string_view trim(std::string_view t) {
  while (!t.empty() && t.front() == ' ') t.remove_prefix(1);
  while (!t.empty() && t.back() == ' ') t.remove_suffix(1);
  return t;
}

class SpecParser {
 public:
  explicit SpecParser(std::string_view source) : source_(source) {}

  template <class... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) const {
    throw InputError(SourcePos{std::string(source_)}, fmt::format(f, std::forward<Args>(args)...));
  }

  double number(std::string_view key, std::string_view t) const {
    double v = 0;
    const auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (t.empty() || ec != std::errc() || p != t.data() + t.size() || !std::isfinite(v)) {
      fail("{}: expected a number, got '{}'", key, t);
    }
    return v;
  }

  int64_t count(std::string_view key, std::string_view t, int64_t lo, int64_t hi) const {
    const ParseResult<int64_t> r = parse_count(t);
    if (!r.ok()) fail("{}: {}", key, r.error);
    if (r.value < lo || r.value > hi) fail("{}={} is outside [{}, {}]", key, t, lo, hi);
    return r.value;
  }

  Length length(std::string_view key, std::string_view t) const {
    std::array<std::string_view, 4> parts{};
    size_t n = 0;
    for (size_t start = 0;;) {
      const size_t colon = t.find(':', start);
      if (n == parts.size()) fail("{}: too many ':' in '{}'", key, t);
      parts[n++] = t.substr(start, colon == std::string_view::npos ? colon : colon - start);
      if (colon == std::string_view::npos) break;
      start = colon + 1;
    }
    constexpr std::array<std::string_view, 3> kKinds = {"fixed", "uniform", "lognormal"};
    constexpr std::array<size_t, 3> kArgs = {1, 2, 2};
    const auto k =
        static_cast<size_t>(std::find(kKinds.begin(), kKinds.end(), parts[0]) - kKinds.begin());
    if (k == kKinds.size()) {
      fail("{}: unknown distribution '{}'{} (fixed:N, uniform:LO:HI or lognormal:MEAN:SIGMA)", key,
           parts[0], did_you_mean(parts[0], kKinds));
    }
    if (n - 1 != kArgs[k]) {
      fail("{}: '{}' takes {} value{} ({})", key, parts[0], kArgs[k], kArgs[k] == 1 ? "" : "s",
           std::array{"fixed:N", "uniform:LO:HI", "lognormal:MEAN:SIGMA"}[k]);
    }
    Length l;
    const std::string what = fmt::format("{} {}", key, parts[0]);
    if (k == 0) {
      l.kind = Length::Kind::kFixed;
      l.lo = count(what, parts[1], 1, kMaxSampledTokens);
    } else if (k == 1) {
      l.kind = Length::Kind::kUniform;
      l.lo = count(what + " LO", parts[1], 1, kMaxSampledTokens);
      l.hi = count(what + " HI", parts[2], l.lo, kMaxSampledTokens);
    } else {
      l.kind = Length::Kind::kLognormal;
      const double mean = number(what + " MEAN", parts[1]);
      if (mean < 1 || mean > static_cast<double>(kMaxSampledTokens)) {
        fail("{} MEAN {} is outside [1, {}]", what, parts[1], kMaxSampledTokens);
      }
      l.sigma = number(what + " SIGMA", parts[2]);
      if (l.sigma < 0 || l.sigma > kMaxSigma)
        fail("{} SIGMA {} is outside [0, {}]", what, parts[2], kMaxSigma);
      // The mean of exp(N(mu, sigma^2)) is exp(mu + sigma^2 / 2).
      l.mu = std::log(mean) - l.sigma * l.sigma / 2;
    }
    return l;
  }

  double rate(std::string_view t) const {
    const size_t slash = t.find('/');
    if (slash == std::string_view::npos) {
      fail("rate={}: give a unit: 5/s, 300/min or 36000/h", t);
    }
    const double v = number("rate", t.substr(0, slash));
    const std::string_view unit = t.substr(slash + 1);
    constexpr std::array<std::string_view, 3> kUnits = {"s", "min", "h"};
    constexpr std::array<double, 3> kSeconds = {1, 60, 3600};
    const auto u =
        static_cast<size_t>(std::find(kUnits.begin(), kUnits.end(), unit) - kUnits.begin());
    if (u == kUnits.size()) fail("rate={}: unknown unit '/{}' (requests per s, min or h)", t, unit);
    const double per_s = v / kSeconds[u];
    if (!(per_s > 0) || per_s > kMaxRatePerS) fail("rate={} is outside (0, 1000000000/s]", t);
    return per_s;
  }

  Spec parse(std::string_view spec) const {
    Spec s;
    std::optional<std::string_view> process;
    for (size_t start = 0; start <= spec.size();) {
      size_t comma = spec.find(',', start);
      if (comma == std::string_view::npos) comma = spec.size();
      const std::string_view item = trim(spec.substr(start, comma - start));
      start = comma + 1;
      if (item.empty()) fail("an empty item in '{}'", spec);
      const size_t eq = item.find('=');
      if (eq == std::string_view::npos) {
        if (std::find(kProcesses.begin(), kProcesses.end(), item) != kProcesses.end()) {
          if (process) fail("two arrival processes: '{}' and '{}'", *process, item);
          process = item;
          continue;
        }
        std::vector<std::string_view> words(kProcesses.begin(), kProcesses.end());
        words.insert(words.end(), kKeys.begin(), kKeys.end());
        fail("unknown item '{}': an arrival process (poisson, gamma) or key=value{}", item,
             did_you_mean(item, words));
      }
      const std::string_view key = trim(item.substr(0, eq));
      const std::string_view value = trim(item.substr(eq + 1));
      const auto k =
          static_cast<size_t>(std::find(kKeys.begin(), kKeys.end(), key) - kKeys.begin());
      if (k == kKeys.size()) fail("unknown key '{}'{}", key, did_you_mean(key, kKeys));
      if (!s.text[k].empty()) fail("duplicate key '{}'", key);
      if (value.empty()) fail("{}= has no value", key);
      s.text[k] = value;
    }
    s.gamma = process == "gamma";
    const auto given = [&](Key k) { return !s.text[k].empty(); };
    const auto need = [&](Key k, std::string_view example) {
      if (!given(k)) fail("'{}' is required (e.g. {})", kKeys[k], example);
    };
    need(kRate, "rate=5/s");
    need(kN, "n=1000");
    need(kPrompt, "prompt=lognormal:2000:0.6");
    need(kOutput, "output=uniform:50:400");
    s.rate_per_s = rate(s.text[kRate]);
    s.n = count("n", s.text[kN], 1, static_cast<int64_t>(kMaxRequests));
    s.prompt = length("prompt", s.text[kPrompt]);
    s.output = length("output", s.text[kOutput]);
    if (s.gamma) {
      need(kCv, "gamma,cv=3");
      s.cv = number("cv", s.text[kCv]);
      if (!(s.cv > 0) || s.cv > kMaxCv) fail("cv={} is outside (0, {}]", s.text[kCv], kMaxCv);
    } else if (given(kCv)) {
      fail("cv applies to gamma arrivals only (poisson gaps have cv 1)");
    }
    if (given(kGroups) && !given(kSystem))
      fail("groups needs system=L, the tokens of each group's system prompt");
    if (given(kSystem)) {
      s.system = count("system", s.text[kSystem], 1, kMaxSampledTokens);
      s.groups = given(kGroups) ? count("groups", s.text[kGroups], 1, kMaxGroups) : 1;
    }
    if (given(kTurns)) s.turns = count("turns", s.text[kTurns], 1, kMaxTurns);
    if (s.turns > 1 && !given(kThink))
      fail("turns needs think=D, the time between turns (e.g. think=20s)");
    if (given(kThink)) {
      if (s.turns == 1) fail("think applies to sessions of turns=2 or more");
      const ParseResult<Duration> d = parse_duration(s.text[kThink]);
      if (!d.ok()) fail("think: {}", d.error);
      if (d.value.ps < 0 || d.value.ps > kMaxArrivalPs)
        fail("think={} is outside [0s, 2^61 ps]", s.text[kThink]);
      s.think_ps = d.value.ps;
    }
    if (given(kSeed)) {
      const std::string_view t = s.text[kSeed];
      const auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), s.seed);
      if (ec != std::errc() || p != t.data() + t.size())
        fail("seed: expected a whole number below 2^64, got '{}'", t);
    }
    return s;
  }

 private:
  std::string_view source_;
};

/// The spec with every default written out, in one order: it generates the same trace.
std::string canonical(const Spec& s) {
  std::string out = s.gamma ? "gamma" : "poisson";
  const auto add = [&](Key k, std::string_view value) {
    out += fmt::format(",{}={}", kKeys[k], value);
  };
  add(kRate, s.text[kRate]);
  if (s.gamma) add(kCv, s.text[kCv]);
  add(kN, s.text[kN]);
  add(kPrompt, s.text[kPrompt]);
  add(kOutput, s.text[kOutput]);
  if (s.groups > 0) {
    add(kGroups, s.text[kGroups].empty() ? "1" : s.text[kGroups]);
    add(kSystem, s.text[kSystem]);
  }
  if (s.turns > 1) {
    add(kTurns, s.text[kTurns]);
    add(kThink, s.text[kThink]);
  }
  add(kSeed, fmt::format("{}", s.seed));
  return out;
}

/// The distributions, written out so that every standard library draws the same numbers.
class Draw {
 public:
  explicit Draw(uint64_t seed) : rng_(seed) {}

  /// Uniform in [0, 1), from the top 53 bits.
  double unit() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }
  /// Uniform in (0, 1]: safe to take the logarithm of.
  double open_unit() { return 1.0 - unit(); }
  /// Uniform integer in [0, n).
  int64_t index(int64_t n) {
    return std::min(n - 1, static_cast<int64_t>(unit() * static_cast<double>(n)));
  }
  /// Standard normal (Box-Muller, the cosine half).
  double normal() {
    return std::sqrt(-2.0 * std::log(open_unit())) * std::cos(2.0 * std::numbers::pi * unit());
  }
  /// Exponential with mean 1.
  double exponential() { return -std::log(open_unit()); }
  /// Gamma with shape k and scale 1 (Marsaglia and Tsang; shape below 1 by boosting).
  double gamma(double k) {
    if (k < 1) return gamma(k + 1) * std::pow(open_unit(), 1.0 / k);
    const double d = k - 1.0 / 3.0;
    const double c = 1.0 / std::sqrt(9.0 * d);
    while (true) {
      double x = 0;
      double v = 0;
      do {
        x = normal();
        v = 1.0 + c * x;
      } while (v <= 0);
      v = v * v * v;
      const double u = open_unit();
      if (u < 1.0 - 0.0331 * x * x * x * x) return d * v;
      if (std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return d * v;
    }
  }
  int64_t length(const Length& l) {
    switch (l.kind) {
      case Length::Kind::kFixed:
        return l.lo;
      case Length::Kind::kUniform:
        return l.lo + index(l.hi - l.lo + 1);
      case Length::Kind::kLognormal:
        break;
    }
    const double x = std::exp(l.mu + l.sigma * normal());
    return x >= static_cast<double>(kMaxSampledTokens) ? kMaxSampledTokens
                                                       : std::max<int64_t>(1, std::llround(x));
  }

 private:
  std::mt19937_64 rng_;
};

/// A bijection of 64-bit numbers (the splitmix64 finaliser): distinct counters give
/// distinct hashes, which look random.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9;
  x = (x ^ (x >> 27)) * 0x94d049bb133111eb;
  return x ^ (x >> 31);
}

}  // namespace

RequestTrace generate_requests(const std::string& spec, const TraceOptions& o,
                               std::string_view source) {
  const SpecParser parser(source);
  const Spec s = parser.parse(spec);
  const std::string name(source);
  if (o.block_tokens < 1 || o.block_tokens > kMaxBlockTokens) {
    parser.fail("block size of {} tokens is outside [1, {}]", o.block_tokens, kMaxBlockTokens);
  }
  const uint64_t block = o.block_tokens;
  RequestTrace trace;
  trace.block_tokens = o.block_tokens;
  trace.has_prefixes = true;
  trace.source = "generated: " + canonical(s);

  Draw draw(s.seed);
  const uint64_t salt = mix(s.seed);
  uint64_t next_hash = 0;
  uint64_t total_blocks = 0;
  const auto count_blocks = [&](uint64_t blocks) {
    total_blocks += blocks;
    if (total_blocks > kMaxTraceBlocks) {
      parser.fail(
          "the spec makes more than {} hash blocks in all (the limit of a trace): lower n, "
          "the lengths or groups",
          kMaxTraceBlocks);
    }
  };
  const auto fresh = [&] { return mix(salt + next_hash++); };

  // Each group's system prompt: its whole blocks are shared by the group's requests. Made
  // when a request first draws the group (its hashes the ones it would have had made up
  // front, numbers g*S .. g*S+S-1): a spec of many groups and few requests costs the
  // groups it uses.
  const uint64_t system_blocks = static_cast<uint64_t>(s.system) / block;
  std::vector<std::vector<uint64_t>> group_blocks(static_cast<size_t>(s.groups));
  next_hash = static_cast<uint64_t>(s.groups) * system_blocks;
  const auto group_chain = [&](size_t g) -> const std::vector<uint64_t>& {
    std::vector<uint64_t>& chain = group_blocks[g];
    if (chain.empty() && system_blocks > 0) {
      count_blocks(system_blocks);
      chain.resize(system_blocks);
      for (uint64_t i = 0; i < system_blocks; ++i) chain[i] = mix(salt + g * system_blocks + i);
    }
    return chain;
  };

  // Gamma gaps with mean 1/rate and coefficient of variation cv: shape 1/cv^2, scale
  // cv^2/rate. Poisson gaps are exponential with mean 1/rate.
  const double shape = 1.0 / (s.cv * s.cv);
  const double gap_scale_ps = static_cast<double>(kPsPerS) / s.rate_per_s;
  const auto n = static_cast<size_t>(s.n);
  std::vector<Request>& rs = trace.requests;
  rs.reserve(n);
  int64_t start = 0;            // the session's first arrival
  std::vector<uint64_t> chain;  // the hashes of the session's whole blocks so far
  for (uint64_t session = 1; rs.size() < n; ++session) {
    if (session > 1) {
      const double gap = s.gamma ? draw.gamma(shape) / shape : draw.exponential();
      const double next = static_cast<double>(start) + gap * gap_scale_ps;
      if (next > static_cast<double>(kMaxArrivalPs)) {
        parser.fail(
            "arrivals pass the limit of 2^61 ps (about 26.7 days) after {} requests: "
            "raise rate or lower n",
            rs.size());
      }
      start = std::llround(next);
    }
    uint64_t base = 0;  // tokens every turn's prompt starts with: system, then history
    chain.clear();
    if (s.groups > 0) {
      chain = group_chain(static_cast<size_t>(draw.index(s.groups)));
      base = static_cast<uint64_t>(s.system);
    }
    for (int64_t turn = 0; turn < s.turns && rs.size() < n; ++turn) {
      Request q;
      if (turn > 0 && s.think_ps > (kMaxArrivalPs - start) / turn) {
        parser.fail(
            "turn {} arrives past the limit of 2^61 ps (about 26.7 days): lower think or "
            "turns",
            turn + 1);
      }
      q.arrival_ps = start + turn * s.think_ps;
      const uint64_t prompt = base + static_cast<uint64_t>(draw.length(s.prompt));
      const auto output = static_cast<uint64_t>(draw.length(s.output));
      if (prompt > kMaxRequestTokens) {
        parser.fail(
            "turn {} of a session has a prompt of {} tokens, above the limit of {}: lower "
            "turns or the lengths",
            turn + 1, prompt, kMaxRequestTokens);
      }
      q.prompt_tokens = static_cast<uint32_t>(prompt);
      q.output_tokens = static_cast<uint32_t>(output);
      if (s.turns > 1) {
        q.session = session;
        q.turn = static_cast<uint32_t>(turn);
      }
      // Leading whole blocks of the content so far are shared; the rest are new (the block
      // that straddles the end of the history holds new tokens, so it is new too).
      const uint64_t blocks = (prompt + block - 1) / block;
      count_blocks(blocks);
      q.blocks.resize(blocks);
      for (uint64_t b = 0; b < blocks; ++b) q.blocks[b] = b < chain.size() ? chain[b] : fresh();
      if (turn + 1 < s.turns) {
        // The next turn's history is this prompt and its output: its whole blocks are this
        // prompt's whole blocks, then blocks holding output tokens that no request has had.
        const uint64_t whole = prompt / block;
        for (uint64_t b = chain.size(); b < whole; ++b) chain.push_back(q.blocks[b]);
        for (uint64_t b = chain.size(); b < (prompt + output) / block; ++b)
          chain.push_back(fresh());
        base = prompt + output;
      }
      rs.push_back(std::move(q));
    }
  }
  finish_trace(trace, o, name, /*note_order=*/false);
  return trace;
}

}  // namespace tierflow::traces
