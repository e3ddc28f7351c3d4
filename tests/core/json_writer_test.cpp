// Unit tests for core/json_writer: escaping, numbers, and the three layouts; and
// core/json_tree: nlohmann::json trees through the same writer.
#include "core/json_writer.h"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>

#include "core/diagnostics.h"
#include "core/json_reader.h"
#include "core/json_tree.h"
#include "core/utf8.h"

namespace tierflow {
namespace {

TEST_CASE("append_json_string: quotes, backslashes and control characters escaped") {
  CHECK(json_string("plain.name-0") == R"("plain.name-0")");
  CHECK(json_string("a\"b\\c") == R"("a\"b\\c")");
  CHECK(json_string("l1\nl2\tx\ry") == R"("l1\nl2\tx\ry")");
  CHECK(json_string(std::string("\x01\x1f\x7f", 3)) == "\"\\u0001\\u001f\x7f\"");
  CHECK(json_string(std::string_view("nul\0end", 7)) == R"("nul\u0000end")");
  CHECK(json_string("") == R"("")");
}

TEST_CASE("append_json_string: UTF-8 kept, bytes that are not UTF-8 become U+FFFD") {
  const std::string fffd(kReplacementChar);
  CHECK(json_string("caf\xC3\xA9 \xF0\x9F\x9A\x80") == "\"caf\xC3\xA9 \xF0\x9F\x9A\x80\"");
  CHECK(json_string("bad\xFF \"q\" \xC3") == "\"bad" + fffd + " \\\"q\\\" " + fffd + "\"");
  // What is written reads back: the reader rejects ill-formed UTF-8.
  const std::string text = json_string("x\xED\xA0\x80y\\");
  JsonReader r(text, "test");
  CHECK(r.read_string("s") == "x" + fffd + fffd + fffd + "y\\");
}

TEST_CASE("JsonReader: numbers as JSON's grammar writes them, and what it writes reads back") {
  auto reads = [](const std::string& text) {
    try {
      JsonReader r(text, "test");
      (void)r.read_number("x");
      return true;
    } catch (const InputError&) {
      return false;
    }
  };
  for (const char* ok : {"0", "-0", "6", "6.5", "-6.25e+3", "1E5", "1e-07", "0.5", "123456789"}) {
    CAPTURE(ok);
    CHECK(reads(ok));
  }
  // std::from_chars takes the first three; JSON does not (nor does nlohmann, which the
  // Hugging Face importer reads with after JsonReader has checked the text).
  for (const char* bad : {"6.", "1.e5", "4e", "1e+", "-", "01", "-01.5", "1.5.2"}) {
    CAPTURE(bad);
    CHECK_FALSE(reads(bad));
  }
  for (const double v : {3.0, 0.25, 1e20, 1e-7, 1.979e15}) {
    std::string out;
    append_json_double(out, v);
    CHECK(reads(out));
  }
}

TEST_CASE("append_json_double: shortest round trip as fmt's {} writes it") {
  std::string out;
  for (const double v : {3.0, 0.25, -1.5, 1e20, 1e-7, 123456789012345680000.0, 0.1 + 0.2}) {
    out += ' ';
    append_json_double(out, v);
  }
  CHECK(out == " 3 0.25 -1.5 1e+20 1e-07 1.2345678901234568e+20 0.30000000000000004");
}

TEST_CASE("JsonWriter: compact and spaced layouts") {
  std::string out;
  JsonWriter w(out);
  w.begin_object(JsonLayout::kCompact);
  w.key("n").integer(-3);
  w.key("list")
      .begin_array(JsonLayout::kCompact)
      .integer(uint64_t{1})
      .boolean(true)
      .null()
      .end_array();
  w.key("s").string("a\"b");
  w.end_object();
  CHECK(w.done());
  CHECK(out == R"({"n":-3,"list":[1,true,null],"s":"a\"b"})");

  out.clear();
  w.begin_object();
  w.key("x").number(0.5);
  w.key("avg").fixed(2.5, /*decimals=*/0);
  w.key("pi").fixed(3.14159, /*decimals=*/2);
  w.key("raw").raw(R"({"k": [1]})");
  w.key("empty").begin_array().end_array();
  w.end_object();
  CHECK(out == R"({"x": 0.5, "avg": 2, "pi": 3.14, "raw": {"k": [1]}, "empty": []})");
}

TEST_CASE("JsonWriter: lines layout indents by open line containers") {
  // Expected, with the spaced record nested in a lines array:
  //   {
  //     "a": 1,
  //     "list": [
  //       {"k": [
  //         2
  //       ]}
  //     ],
  //     "none": [],
  //     "kept": [
  //     ]
  //   }
  std::string out;
  JsonWriter w(out);
  w.begin_object(JsonLayout::kLines);
  w.key("a").integer(1);
  w.key("list").begin_array(JsonLayout::kLines);
  w.begin_object().key("k").begin_array(JsonLayout::kLines).integer(2).end_array().end_object();
  w.end_array();
  w.key("none").begin_array(JsonLayout::kLines).end_array();
  w.key("kept").begin_array(JsonLayout::kLinesAlwaysBreak).end_array();
  w.end_object();
  CHECK(out ==
        "{\n  \"a\": 1,\n  \"list\": [\n    {\"k\": [\n      2\n    ]}\n  ],\n  \"none\": [],\n"
        "  \"kept\": [\n  ]\n}");
}

TEST_CASE("JsonWriter: several items a line") {
  std::string out;
  JsonWriter w(out);
  w.begin_array(JsonLayout::kLines, /*per_line=*/3);
  for (int i = 0; i < 7; ++i) w.integer(i);
  w.end_array();
  CHECK(out == "[\n  0, 1, 2,\n  3, 4, 5,\n  6\n]");
}

TEST_CASE("JsonWriter: JSON Lines are documents one after another") {
  std::string out;
  JsonWriter w(out);
  for (int i = 0; i < 2; ++i) {
    w.begin_object().key("i").integer(i).end_object();
    out += '\n';
  }
  CHECK(out == "{\"i\": 0}\n{\"i\": 1}\n");
}

TEST_CASE("JsonWriter::real keeps a decimal point on integral values") {
  std::string out;
  JsonWriter w(out);
  w.begin_array().real(3.0).real(0.25).real(-2.0).real(1e20).real(199290224704.0).end_array();
  CHECK(out == "[3.0, 0.25, -2.0, 1e+20, 199290224704.0]");
  out.clear();
  w.begin_array().real(1.979e15).real(-1e15).real(1234567890123456.5).real(999999999999999.0);
  w.end_array();
  CHECK(out == "[1.979e+15, -1e+15, 1.2345678901234565e+15, 999999999999999.0]");
}

TEST_CASE("json_text: the layout nlohmann's dump(2) gives, through the one writer") {
  // The command outputs built as trees read the same as before they went through
  // JsonWriter: one member a line, two spaces a level, empty containers closed at once.
  nlohmann::json j = nlohmann::json::object();
  j["name"] = "h100 \"sxm\"\tserver\n\xc3\xa9";
  j["count"] = 8;
  j["negative"] = -3;
  j["big"] = uint64_t{18446744073709551615ULL};
  j["ratio"] = 0.25;
  j["whole"] = 3.0;
  j["bytes"] = 199290224704.0;
  j["tiny"] = 1.5e-7;
  j["rate"] = 1.979e15;
  j["rates"] = {1e15, 9.99e15, 1e16, 2.5e-5, 123456.789};
  j["flag"] = true;
  j["none"] = nullptr;
  j["empty_list"] = nlohmann::json::array();
  j["empty_map"] = nlohmann::json::object();
  j["list"] = {1, 2.5, "x", nlohmann::json::array({nlohmann::json::object({{"a", 1}})})};
  j["nested"]["deeper"]["value"] = "\x01";
  CHECK(json_text(j) == j.dump(2) + "\n");
  // Ordered trees keep their members in insertion order.
  nlohmann::ordered_json o;
  o["z"] = 1;
  o["a"] = {{"y", 2.0}, {"b", nlohmann::ordered_json::array()}};
  CHECK(json_text(o) == o.dump(2) + "\n");
  CHECK(json_text(o).find("\"z\"") < json_text(o).find("\"a\""));
  CHECK(json_text(nlohmann::json::array()) == "[]\n");
  CHECK(json_text(nlohmann::json(7)) == "7\n");
}

TEST_CASE("json_text: no infinity or NaN in JSON, and bad UTF-8 repaired instead of thrown") {
  nlohmann::json j;
  j["inf"] = std::numeric_limits<double>::infinity();
  j["nan"] = std::nan("");
  j["bad"] = std::string(
      "a\xff"
      "b");
  CHECK(json_text(j) ==
        "{\n  \"bad\": \"a\xef\xbf\xbd"
        "b\",\n  \"inf\": null,\n  \"nan\": null\n}\n");
}

}  // namespace
}  // namespace tierflow
