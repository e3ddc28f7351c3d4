#include "tools/export/svg_plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "core/utf8.h"

namespace tierflow::exporter {
namespace {

// A coordinate with one decimal; never "-0.0".
std::string num(double v) {
  const double r = std::round(v * 10) / 10;
  if (r == 0) return "0";
  if (r == std::floor(r)) return fmt::format("{:.0f}", r);
  return fmt::format("{:.1f}", r);
}

double round1(double v) {
  return std::round(v * 10) / 10;
}

template <size_t N>
Unit pick(double max, double step, const std::array<std::string_view, N>& names) {
  Unit u{1, std::string(names[0])};
  for (size_t i = 1; i < N; ++i) {
    const double div = std::pow(step, static_cast<double>(i));
    if (max < div) break;
    u = Unit{div, std::string(names[i])};
  }
  return u;
}

}  // namespace

std::string escape_html(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x80) {
      i += append_repaired(out, s, i);
      continue;
    }
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        if ((u >= 0x20 && u != 0x7F) || c == '\t' || c == '\n') out += c;
        break;
    }
    ++i;
  }
  return out;
}

Unit bytes_unit(double max_bytes) {
  return pick(max_bytes, 1024, std::array<std::string_view, 5>{"B", "KiB", "MiB", "GiB", "TiB"});
}

Unit rate_unit(double max_bytes_per_s) {
  return pick(max_bytes_per_s, 1000,
              std::array<std::string_view, 5>{"B/s", "kB/s", "MB/s", "GB/s", "TB/s"});
}

Unit time_unit(double max_ps) {
  return pick(max_ps, 1000, std::array<std::string_view, 5>{"ps", "ns", "\u00b5s", "ms", "s"});
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  std::vector<double> out;
  if (!(hi > lo) || target < 1) {
    out.push_back(lo);
    return out;
  }
  const double raw = (hi - lo) / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  const double step = (norm <= 1 ? 1 : norm <= 2 ? 2 : norm <= 5 ? 5 : 10) * mag;
  const double first = std::ceil(lo / step - 1e-9) * step;
  for (int i = 0;; ++i) {
    const double v = first + i * step;
    if (v > hi + step * 1e-9) break;
    out.push_back(std::abs(v) < step * 1e-9 ? 0 : v);
  }
  return out;
}

std::string tick_label(double v) {
  std::string s = fmt::format("{:.3f}", v);
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s == "-0" ? "0" : s;
}

std::string sig(double v, int digits) {
  if (v == 0 || !std::isfinite(v)) return "0";
  const int mag = static_cast<int>(std::floor(std::log10(std::abs(v))));
  const int decimals = std::max(0, digits - 1 - mag);
  std::string s = fmt::format("{:.{}f}", v, decimals);
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  return s;
}

double Frame::x(double v) const {
  const double span = x_hi > x_lo ? x_hi - x_lo : 1;
  return left + (v - x_lo) / span * (width - left - right);
}

double Frame::y(double v) const {
  const double span = y_hi > y_lo ? y_hi - y_lo : 1;
  return y0() - (v - y_lo) / span * (y0() - y1());
}

Svg::Svg(const Frame& f, std::string_view css, std::string_view title) : f_(f) {
  out_ = fmt::format(
      R"(<svg class="{}" viewBox="0 0 {} {}" width="{}" height="{}" role="img"><title>{}</title>)",
      css, num(f.width), num(f.height), num(f.width), num(f.height), escape_html(title));
}

void Svg::axes(const Unit& x, std::string_view x_title, const Unit& y, std::string_view y_title) {
  const Frame& f = f_;
  out_ += R"(<g class="grid">)";
  for (const double t : nice_ticks(f.y_lo / y.div, f.y_hi / y.div, 4)) {
    const std::string py = num(f.y(t * y.div));
    out_ +=
        fmt::format(R"(<line x1="{}" y1="{}" x2="{}" y2="{}"/>)", num(f.x0()), py, num(f.x1()), py);
  }
  out_ += "</g>";
  out_ += R"(<g class="tick">)";
  for (const double t : nice_ticks(f.y_lo / y.div, f.y_hi / y.div, 4)) {
    out_ += fmt::format(R"(<text x="{}" y="{}" text-anchor="end">{}</text>)", num(f.x0() - 6),
                        num(f.y(t * y.div) + 4), tick_label(t));
  }
  for (const double t : nice_ticks(f.x_lo / x.div, f.x_hi / x.div, 8)) {
    const double px = f.x(t * x.div);
    out_ += fmt::format(R"(<line class="mark" x1="{0}" y1="{1}" x2="{0}" y2="{2}"/>)", num(px),
                        num(f.y0()), num(f.y0() + 4));
    out_ += fmt::format(R"(<text x="{}" y="{}" text-anchor="middle">{}</text>)", num(px),
                        num(f.y0() + 17), tick_label(t));
  }
  out_ += "</g>";
  out_ += fmt::format(R"(<path class="axis" d="M{} {}V{}H{}"/>)", num(f.x0()), num(f.y1()),
                      num(f.y0()), num(f.x1()));
  out_ += fmt::format(R"(<text class="title" x="{}" y="{}" text-anchor="middle">{}</text>)",
                      num((f.x0() + f.x1()) / 2), num(f.height - 4), escape_html(x_title));
  const double cy = (f.y0() + f.y1()) / 2;
  out_ += fmt::format(
      R"svg(<text class="title" x="14" y="{}" text-anchor="middle" transform="rotate(-90 14 {})">{}</text>)svg",
      num(cy), num(cy), escape_html(y_title));
}

void Svg::x_axis(const Unit& x, std::string_view title) {
  const Frame& f = f_;
  const std::vector<double> ticks = nice_ticks(f.x_lo / x.div, f.x_hi / x.div, 8);
  out_ += R"(<g class="grid">)";
  for (const double t : ticks) {
    const std::string px = num(f.x(t * x.div));
    out_ +=
        fmt::format(R"(<line x1="{0}" y1="{1}" x2="{0}" y2="{2}"/>)", px, num(f.y1()), num(f.y0()));
  }
  out_ += R"(</g><g class="tick">)";
  for (const double t : ticks) {
    out_ += fmt::format(R"(<text x="{}" y="{}" text-anchor="middle">{}</text>)",
                        num(f.x(t * x.div)), num(f.y0() + 17), tick_label(t));
  }
  out_ += "</g>";
  out_ +=
      fmt::format(R"(<path class="axis" d="M{} {}H{}"/>)", num(f.x0()), num(f.y0()), num(f.x1()));
  out_ += fmt::format(R"(<text class="title" x="{}" y="{}" text-anchor="middle">{}</text>)",
                      num((f.x0() + f.x1()) / 2), num(f.height - 4), escape_html(title));
}

void Svg::limit(double v, std::string_view label) {
  const std::string py = num(f_.y(v));
  out_ += fmt::format(R"(<line class="limit" x1="{}" y1="{}" x2="{}" y2="{}"/>)", num(f_.x0()), py,
                      num(f_.x1()), py);
  out_ += fmt::format(R"(<text class="limit-label" x="{}" y="{}" text-anchor="end">{}</text>)",
                      num(f_.x1() - 4), num(f_.y(v) - 4), escape_html(label));
}

void Svg::area(const std::string& d, std::string_view fill, std::string_view tip) {
  out_ += fmt::format(R"(<path d="{}" fill="{}">)", d, fill);
  if (!tip.empty()) out_ += fmt::format("<title>{}</title>", escape_html(tip));
  out_ += "</path>";
}

void Svg::line(const std::string& d, std::string_view stroke, double width, std::string_view tip) {
  out_ += fmt::format(R"(<path d="{}" fill="none" stroke="{}" stroke-width="{}">)", d, stroke,
                      num(width));
  if (!tip.empty()) out_ += fmt::format("<title>{}</title>", escape_html(tip));
  out_ += "</path>";
}

void Svg::rect(double x, double y, double w, double h, std::string_view fill, std::string_view tip,
               double opacity) {
  out_ += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="{}")", num(x), num(y),
                      num(w), num(h), fill);
  if (opacity < 1) out_ += fmt::format(R"( fill-opacity="{}")", tick_label(opacity));
  if (tip.empty()) {
    out_ += "/>";
  } else {
    out_ += fmt::format("><title>{}</title></rect>", escape_html(tip));
  }
}

void Svg::text(double x, double y, std::string_view s, std::string_view anchor,
               std::string_view css) {
  out_ += fmt::format(R"(<text x="{}" y="{}")", num(x), num(y));
  if (anchor != "start") out_ += fmt::format(R"( text-anchor="{}")", anchor);
  if (!css.empty()) out_ += fmt::format(R"( class="{}")", css);
  out_ += fmt::format(">{}</text>", escape_html(s));
}

std::string Svg::finish() {
  out_ += "</svg>";
  return std::move(out_);
}

std::string step_path(const std::vector<double>& x, const std::vector<double>& y) {
  if (y.empty() || x.size() != y.size() + 1) return "";
  double cur = round1(y[0]);
  std::string d = fmt::format("M{} {}", num(x[0]), num(cur));
  for (size_t i = 1; i < y.size(); ++i) {
    const double v = round1(y[i]);
    if (v == cur) continue;
    d += fmt::format("H{}V{}", num(x[i]), num(v));
    cur = v;
  }
  d += fmt::format("H{}", num(x.back()));
  return d;
}

std::string band_path(const std::vector<double>& x, const std::vector<double>& top,
                      const std::vector<double>& bottom) {
  if (top.empty() || top.size() != bottom.size() || x.size() != top.size() + 1) return "";
  std::string d = step_path(x, top);
  const size_t n = bottom.size();
  double cur = round1(bottom[n - 1]);
  d += fmt::format("V{}", num(cur));
  for (size_t i = n - 1; i > 0; --i) {
    const double v = round1(bottom[i - 1]);
    if (v == cur) continue;
    d += fmt::format("H{}V{}", num(x[i]), num(v));
    cur = v;
  }
  d += fmt::format("H{}Z", num(x[0]));
  return d;
}

std::string bar_chart(std::string_view title, const std::vector<std::string>& labels,
                      const std::vector<double>& values,
                      const std::vector<std::string>& values_text,
                      const std::vector<std::string>& colors, double width) {
  constexpr double kRow = 24, kTop = 30, kLabel = 130, kValue = 90;
  Frame f;
  f.width = width;
  f.height = kTop + kRow * static_cast<double>(labels.size()) + 8;
  Svg svg(f, "bars", title);
  svg.text(0, 16, title, "start", "bar-title");
  double max = 0;
  for (const double v : values) max = std::max(max, v);
  const double span = width - kLabel - kValue;
  for (size_t i = 0; i < labels.size(); ++i) {
    const double y = kTop + kRow * static_cast<double>(i);
    const double w = max > 0 ? values[i] / max * span : 0;
    svg.text(kLabel - 8, y + 15, labels[i], "end");
    const std::string& color = colors.empty() ? std::string("#6c8ebf") : colors[i % colors.size()];
    svg.rect(kLabel, y + 3, std::max(w, 1.0), kRow - 8, color,
             labels[i] + ": " + (i < values_text.size() ? values_text[i] : ""));
    if (i < values_text.size()) svg.text(kLabel + std::max(w, 1.0) + 6, y + 15, values_text[i]);
  }
  return svg.finish();
}

}  // namespace tierflow::exporter
