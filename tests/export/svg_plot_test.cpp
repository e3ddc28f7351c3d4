// Unit tests for tools/export/svg_plot: escaping of names, units and ticks, and the exact
// path text of steps and bands.
#include "tools/export/svg_plot.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace tierflow::exporter {
namespace {

TEST_CASE("escape_html: markup characters, control characters and broken UTF-8") {
  CHECK(escape_html("plain name_1.w") == "plain name_1.w");
  CHECK(escape_html(R"(<script>alert("x")</script> & 'q')") ==
        "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;q&#39;");
  // Control characters other than tab and newline are dropped.
  CHECK(escape_html("a\x01"
                    "b\tc\nd\x7f") == "ab\tc\nd");
  // Well-formed UTF-8 is kept, every byte that is not becomes U+FFFD.
  const std::string fffd = "\xEF\xBF\xBD";
  CHECK(escape_html("caf\xC3\xA9 \xE6\x97\xA5 \xF0\x9F\x9A\x80") ==
        "caf\xC3\xA9 \xE6\x97\xA5 \xF0\x9F\x9A\x80");
  CHECK(escape_html("bad\xFF cut\xC3") == "bad" + fffd + " cut" + fffd);
  CHECK(escape_html("\xED\xA0\x80") == fffd + fffd + fffd);  // a surrogate
  CHECK(escape_html("\xC0\xAF") == fffd + fffd);             // an overlong '/'
}

TEST_CASE("units put the maximum between 1 and 1000 (1024 for bytes)") {
  CHECK(bytes_unit(512).name == "B");
  CHECK(bytes_unit(3.0 * (1 << 30)).name == "GiB");
  CHECK(bytes_unit(3.0 * (1 << 30)).div == double(1 << 30));
  CHECK(bytes_unit(2048).name == "KiB");
  CHECK(rate_unit(53.8e9).name == "GB/s");
  CHECK(rate_unit(999).name == "B/s");
  CHECK(time_unit(597.9e9).name == "ms");  // 597.9 ms in ps
  CHECK(time_unit(1500).name == "ns");
  CHECK(time_unit(2e12).name == "s");
}

TEST_CASE("ticks: steps of 1, 2 or 5 times a power of ten; labels without trailing zeros") {
  CHECK(nice_ticks(0, 3.2, 4) == std::vector<double>{0, 1, 2, 3});
  CHECK(nice_ticks(0, 597.9, 8) == std::vector<double>{0, 100, 200, 300, 400, 500});
  const std::vector<double> small = nice_ticks(0, 0.5, 4);
  REQUIRE(small.size() == 3);
  CHECK(small[2] == doctest::Approx(0.4));
  CHECK(tick_label(0) == "0");
  CHECK(tick_label(2.5) == "2.5");
  CHECK(tick_label(0.30000000000000004) == "0.3");
  CHECK(tick_label(-0.0001) == "0");
  CHECK(sig(8.39512) == "8.395");
  CHECK(sig(74.5, 3) == "74.5");
  CHECK(sig(1200, 3) == "1200");
}

TEST_CASE("paths: steps merge equal values, bands go out on top and back on the bottom") {
  // x: 0 10 20 30 40; values 5 5 8 8 (pixels).
  const std::vector<double> x = {0, 10, 20, 30, 40};
  CHECK(step_path(x, {5, 5, 8, 8}) == "M0 5H20V8H40");
  CHECK(step_path(x, {1.25, 1.25, 1.25, 1.25}) == "M0 1.3H40");
  CHECK(band_path(x, {5, 5, 8, 8}, {50, 50, 50, 60}) == "M0 5H20V8H40V60H30V50H0Z");
  CHECK(step_path({0}, {}).empty());  // nothing to draw
}

TEST_CASE("an SVG with axes has ticks in the units and escaped titles") {
  Frame f;
  f.width = 400;
  f.height = 100;
  f.x_hi = 600e9;  // 600 ms in ps
  f.y_hi = 3.0 * (1 << 30);
  Svg svg(f, "plot", "hbm<0>");
  svg.axes(time_unit(f.x_hi), "time (ms)", bytes_unit(f.y_hi), "GiB");
  svg.limit(2.0 * (1 << 30), "budget 2GiB");
  const std::string text = svg.finish();
  CHECK(text.rfind(R"(<svg class="plot" viewBox="0 0 400 100")", 0) == 0);
  CHECK(text.find("<title>hbm&lt;0&gt;</title>") != std::string::npos);
  CHECK(text.find(">500</text>") != std::string::npos);  // an x tick, in ms
  CHECK(text.find(">3</text>") != std::string::npos);    // a y tick, in GiB
  CHECK(text.find(">budget 2GiB</text>") != std::string::npos);
  CHECK(text.substr(text.size() - 6) == "</svg>");
}

TEST_CASE("bar charts scale to the largest value") {
  const std::string svg = bar_chart("makespan", {"a", "b"}, {2, 1}, {"2ms", "1ms"}, {"#123456"});
  CHECK(svg.find(">makespan</text>") != std::string::npos);
  // The larger bar spans the whole bar area (460 - 130 - 90 = 240), the other half of it.
  CHECK(svg.find(R"(width="240" height="16" fill="#123456")") != std::string::npos);
  CHECK(svg.find(R"(width="120" height="16" fill="#123456")") != std::string::npos);
}

}  // namespace
}  // namespace tierflow::exporter
