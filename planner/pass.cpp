#include "planner/pass.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>

#include "core/diagnostics.h"
#include "core/units.h"

namespace tierflow::planner {

PassOptions::PassOptions(std::string pass, std::vector<std::pair<std::string, std::string>> items,
                         int column)
    : pass_(std::move(pass)), items_(std::move(items)), column_(column) {
  // An option given twice: the first would win unnoticed.
  for (size_t i = 0; i < items_.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (items_[j].first != items_[i].first) continue;
      bad(items_[i].first, fmt::format("given twice ({}, then {}): give it once", items_[j].second,
                                       items_[i].second));
    }
  }
}

const std::string* PassOptions::find(std::string_view key) {
  known_.emplace_back(key);
  for (const auto& [k, v] : items_) {
    if (k == key) return &v;
  }
  return nullptr;
}

void PassOptions::bad(std::string_view key, std::string_view why) const {
  throw InputError::at(SourcePos{"--pipeline", 1, column_}, "option '{}' of pass '{}': {}", key,
                       pass_, why);
}

double PassOptions::share(std::string_view key, double fallback) {
  const double x = number(key, fallback);
  if (x >= 1) bad(key, fmt::format("'{}' is not a share of the budget in [0, 1)", *find(key)));
  return x;
}

double PassOptions::number(std::string_view key, double fallback) {
  const std::string* v = find(key);
  if (v == nullptr) return fallback;
  std::string text = *v;
  double scale = 1;
  if (!text.empty() && text.back() == '%') {
    text.pop_back();
    scale = 0.01;
  }
  double x = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), x);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty() || !std::isfinite(x) ||
      x < 0) {
    bad(key, fmt::format("'{}' is not a finite non-negative number", *v));
  }
  return x * scale;
}

uint64_t PassOptions::bytes(std::string_view key, uint64_t fallback) {
  const std::string* v = find(key);
  if (v == nullptr) return fallback;
  const auto r = parse_bytes(*v);
  if (!r.ok()) bad(key, r.error);
  return r.value.value;
}

uint32_t PassOptions::count(std::string_view key, uint32_t fallback) {
  const std::string* v = find(key);
  if (v == nullptr) return fallback;
  uint32_t x = 0;
  const auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), x);
  if (ec != std::errc() || end != v->data() + v->size() || v->empty()) {
    bad(key, fmt::format("'{}' is not a whole number", *v));
  }
  return x;
}

bool PassOptions::flag(std::string_view key, bool fallback) {
  const std::string* v = find(key);
  if (v == nullptr) return fallback;
  if (*v == "true" || *v == "1") return true;
  if (*v == "false" || *v == "0") return false;
  bad(key, fmt::format("'{}' is not true or false", *v));
}

std::string PassOptions::text(std::string_view key, std::string fallback) {
  const std::string* v = find(key);
  return v == nullptr ? fallback : *v;
}

std::string PassOptions::choice(std::string_view key,
                                std::initializer_list<std::string_view> allowed) {
  const std::string* v = find(key);
  if (v == nullptr) return std::string(*allowed.begin());
  if (std::find(allowed.begin(), allowed.end(), *v) != allowed.end()) return *v;
  std::string list;
  size_t i = 0;
  for (std::string_view a : allowed) {
    list += fmt::format("{}{}", i == 0 ? "" : i + 1 == allowed.size() ? " or " : ", ", a);
    ++i;
  }
  bad(key, fmt::format("'{}' is not {}", *v, list));
}

void PassOptions::finish() {
  for (const auto& [k, v] : items_) {
    if (std::find(known_.begin(), known_.end(), k) != known_.end()) continue;
    std::string list;
    for (const std::string& name : known_) list += (list.empty() ? "" : ", ") + name;
    throw InputError::at(SourcePos{"--pipeline", 1, column_}, "pass '{}' has no option '{}'{}{}",
                         pass_, k, did_you_mean(k, known_),
                         known_.empty() ? " (it takes none)" : fmt::format(" (it takes {})", list));
  }
}

void PassReport::stat(std::string_view pass, std::string_view name, double value) {
  for (Stat& s : stats) {
    if (s.pass == pass && s.name == name) {
      s.value += value;
      return;
    }
  }
  stats.push_back(Stat{std::string(pass), std::string(name), value});
}

bool gives_up(PassContext& ctx, const PlanState& s, uint32_t i, uint64_t fetched) {
  if (fetched < ctx.limits.fetch_bytes) return false;
  ctx.limits.gave_up = true;
  ctx.failure = fmt::format("gave up at op {}: {} fetched, enough to lose", s.order[i],
                            to_string_approx(Bytes{fetched}));
  return true;
}

const std::vector<PassInfo>& registered_passes() {
  static const std::vector<PassInfo> passes = {
      {"place", "home tier per tensor: the offload tier each may go to, and user pins",
       make_place},
      {"liveness", "analysis: uses, idle gaps in ops and in estimated time", make_liveness},
      {"select", "choose what to offload under the budget (bytes x gap time vs transfer cost)",
       make_select},
      {"insert", "materialize the plan: prefetch, store and detach steps with waits",
       make_insert},
      {"schedule", "anchor each prefetch in its feasible window, link load accounted over time",
       make_schedule},
      {"reorder", "reorder compute within dependency freedom to lower the peak", make_reorder},
      {"refine", "simulator in the loop: move exposed prefetches earlier", make_refine},
      {"verify", "check the plan rules (ARCHITECTURE §6)", make_verify},
      {"page", "page tensors through the device: eviction order, clock and prefetch injected",
       make_page},
      {"reactive", "baseline: fetch on a miss, evict least recently used (a preset of page)",
       make_reactive},
      {"belady",
       "page external tensors: evict the furthest next use, prefetch as the link frees (a "
       "preset of page)",
       make_belady},
      {"layerwise", "baseline: prefetch the next layer's weights during this layer",
       make_layerwise},
      {"distance", "baseline: op-count distances for select, prefetch and release",
       make_distance},
  };
  return passes;
}

Pipeline Pipeline::parse(std::string_view text, std::string_view source) {
  Pipeline p;
  size_t i = 0;
  auto fail = [&](size_t at, std::string message) -> InputError {
    return InputError(SourcePos{std::string(source), 1, static_cast<int>(at + 1)},
                      std::move(message));
  };
  auto is_name = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'; };
  if (text.empty()) throw fail(0, "empty pipeline");
  while (i <= text.size()) {
    const size_t start = i;
    while (i < text.size() && is_name(text[i])) ++i;
    const std::string name(text.substr(start, i - start));
    if (name.empty()) throw fail(i, "expected a pass name");
    std::vector<std::pair<std::string, std::string>> items;
    if (i < text.size() && text[i] == '{') {
      ++i;
      while (true) {
        const size_t ks = i;
        while (i < text.size() && is_name(text[i])) ++i;
        std::string key(text.substr(ks, i - ks));
        if (key.empty()) throw fail(i, "expected an option name");
        if (i >= text.size() || text[i] != '=') throw fail(i, "expected '=' after option name");
        const size_t vs = ++i;
        while (i < text.size() && text[i] != ',' && text[i] != '}' && text[i] != '{') ++i;
        if (i == vs) throw fail(i, fmt::format("option '{}' has no value", key));
        items.emplace_back(std::move(key), std::string(text.substr(vs, i - vs)));
        if (i >= text.size()) throw fail(i, "unclosed '{'");
        if (text[i] == '}') {
          ++i;
          break;
        }
        if (text[i] != ',') throw fail(i, "expected ',' or '}'");
        ++i;
      }
    }
    const auto& all = registered_passes();
    const PassInfo* info = nullptr;
    for (const PassInfo& pi : all) {
      if (pi.name == name) info = &pi;
    }
    if (info == nullptr) {
      std::vector<std::string_view> names;
      for (const PassInfo& pi : all) names.push_back(pi.name);
      throw fail(start, fmt::format("unknown pass '{}'{}", name, did_you_mean(name, names)));
    }
    PassOptions opts(name, items, static_cast<int>(start + 1));
    auto pass = info->make(opts);
    opts.finish();
    pass->written = std::move(items);
    p.passes_.push_back(std::move(pass));
    if (i == text.size()) break;
    if (text[i] != ',') throw fail(i, fmt::format("expected ',' between passes, found '{}'", text[i]));
    ++i;
    if (i == text.size()) throw fail(i, "expected a pass name after ','");
  }
  return p;
}

std::string Pipeline::str(size_t first, size_t last) const {
  std::string out;
  for (size_t i = first; i < std::min(last, passes_.size()); ++i) {
    const auto& pass = passes_[i];
    if (!out.empty()) out += ',';
    out += pass->name();
    if (pass->written.empty()) continue;
    out += '{';
    for (size_t k = 0; k < pass->written.size(); ++k) {
      if (k > 0) out += ',';
      out += pass->written[k].first + '=' + pass->written[k].second;
    }
    out += '}';
  }
  return out;
}

PassResult Pipeline::run(PlanState& s, PassContext& ctx, size_t first, size_t last) const {
  PassResult overall = PassResult::kUnchanged;
  for (size_t i = first; i < std::min(last, passes_.size()); ++i) {
    const auto& pass = passes_[i];
    const PassResult r = pass->run(s, ctx);
    s.start_profile.reset();  // (the pass may have changed the runs)
    if (r == PassResult::kFailed) {
      ctx.failure = fmt::format("{}: {}", pass->name(), ctx.failure);
      return r;
    }
    if (r == PassResult::kChanged) overall = PassResult::kChanged;
    if (ctx.verify_each && s.emitted.started() && pass->name() != "verify") {
      if (auto issue = verify_plan(s.plan(), s.w)) {
        ctx.failure = fmt::format("{}: the plan breaks a rule after this pass: program {} step "
                                  "{}: {}",
                                  pass->name(), issue->program, issue->step, issue->message);
        return PassResult::kFailed;
      }
    }
    if (ctx.after_pass) {
      if (s.emitted.started()) s.plan();  // printed as steps from `insert` on
      ctx.after_pass(pass->name(), s);
    }
  }
  return overall;
}

}  // namespace tierflow::planner
