// Inline SVG for the HTML report, written as text: axes with units and gridlines, step
// lines, stacked areas, horizontal bars, and the escaping every name goes through.
// Nothing here knows about plans or simulations.
//
// Glossary
//   unit    how a quantity is shown: the divisor from its base unit (bytes, bytes/s,
//           picoseconds) and the unit's name, chosen so that the axis maximum reads between
//           1 and 1000 ("GiB", "GB/s", "ms").
//   frame   the plot area inside an SVG's margins; x and y map values into it.
//   tick    a round value on an axis (1, 2 or 5 times a power of ten, in the axis unit).
//
// Coordinates are printed with one decimal, so the same data give the same bytes.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tierflow::exporter {

/// `s` as HTML text or attribute value: & < > " ' escaped, control characters other than
/// tab and newline dropped, bytes that are not UTF-8 replaced by U+FFFD (names come from
/// user files; the page must stay well formed).
std::string escape_html(std::string_view s);

struct Unit {
  double div = 1;    ///< base units per displayed unit
  std::string name;  ///< "GiB"
};
/// IEC bytes: B, KiB, MiB, GiB, TiB.
Unit bytes_unit(double max_bytes);
/// SI bytes per second: B/s, kB/s, MB/s, GB/s, TB/s.
Unit rate_unit(double max_bytes_per_s);
/// Time from picoseconds: ps, ns, us, ms, s.
Unit time_unit(double max_ps);

/// Round values from about `lo` to `hi` (at most about `target` of them), in steps of 1, 2
/// or 5 times a power of ten.
std::vector<double> nice_ticks(double lo, double hi, int target);
/// A tick label: the shortest of up to three decimals ("0", "2.5", "0.125").
std::string tick_label(double v);
/// `v` with `digits` significant digits, no exponent and no trailing zeros, e.g. 8.395,
/// 74.5, 1200, 1.
std::string sig(double v, int digits = 4);

/// The plot area of an SVG `width` x `height` and the value ranges it shows.
struct Frame {
  double width = 960, height = 200;
  double left = 70, right = 18, top = 14, bottom = 40;
  double x_lo = 0, x_hi = 1;  ///< values at the left and right edges
  double y_lo = 0, y_hi = 1;  ///< values at the bottom and top edges

  [[nodiscard]] double x(double v) const;
  [[nodiscard]] double y(double v) const;
  [[nodiscard]] double x0() const { return left; }
  [[nodiscard]] double x1() const { return width - right; }
  [[nodiscard]] double y0() const { return height - bottom; }  ///< bottom edge
  [[nodiscard]] double y1() const { return top; }              ///< top edge
};

/// An SVG element built up as text.
class Svg {
 public:
  /// `<svg>` of the frame's size with class `css` and a title read by screen readers.
  Svg(const Frame& f, std::string_view css, std::string_view title);
  /// Axes: gridlines and tick labels on both, `x_title` under the x axis, `y_title`
  /// along the y axis. Ticks are in the units' values (x_lo / x.div, ...).
  void axes(const Unit& x, std::string_view x_title, const Unit& y, std::string_view y_title);
  /// A time axis alone: vertical gridlines and tick labels along the bottom, `title` under.
  void x_axis(const Unit& x, std::string_view title);
  /// A horizontal dashed line at value `v` with `label` at its right end (a capacity).
  void limit(double v, std::string_view label);
  /// A filled path; `d` in SVG path syntax, `tip` shown on hover (may be empty).
  void area(const std::string& d, std::string_view fill, std::string_view tip);
  /// A stroked path.
  void line(const std::string& d, std::string_view stroke, double width, std::string_view tip);
  void rect(double x, double y, double w, double h, std::string_view fill, std::string_view tip,
            double opacity = 1);
  /// Text at (x, y); `anchor` start, middle or end; `css` a class (may be empty).
  void text(double x, double y, std::string_view s, std::string_view anchor = "start",
            std::string_view css = "");
  /// Markup added as is (already escaped).
  void raw(std::string_view markup) { out_ += markup; }
  [[nodiscard]] const Frame& frame() const { return f_; }
  /// Closes the element.
  std::string finish();

 private:
  Frame f_;
  std::string out_;
};

/// A step path through (x[i], y[i]) held until x[i + 1]: "M x0 y0 H x1 V y1 H x2 ...".
/// `x` has one more entry than `y` (the end of the last step). Consecutive equal values
/// merge.
std::string step_path(const std::vector<double>& x, const std::vector<double>& y);
/// A closed area between two step functions over the same `x`: `top` left to right, then
/// `bottom` right to left.
std::string band_path(const std::vector<double>& x, const std::vector<double>& top,
                      const std::vector<double>& bottom);

/// A horizontal bar chart: one bar per label, value text at its end (`values_text`), bars
/// coloured `colors[i % size]`. Returns the SVG.
std::string bar_chart(std::string_view title, const std::vector<std::string>& labels,
                      const std::vector<double>& values,
                      const std::vector<std::string>& values_text,
                      const std::vector<std::string>& colors, double width = 460);

}  // namespace tierflow::exporter
