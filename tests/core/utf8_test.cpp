// Unit tests for core/utf8: well-formed sequences by Unicode table 3-7, and repair.
#include "core/utf8.h"

#include <doctest/doctest.h>

#include <string>

namespace tierflow {
namespace {

TEST_CASE("utf8_length: one sequence per lead byte, malformed ones are 0") {
  CHECK(utf8_length("a", 0) == 1);
  CHECK(utf8_length("\xC3\xA9", 0) == 2);          // é
  CHECK(utf8_length("\xE6\x97\xA5", 0) == 3);      // 日
  CHECK(utf8_length("\xF0\x9F\x9A\x80", 0) == 4);  // 🚀
  CHECK(utf8_length("\xC0\xAF", 0) == 0);          // overlong '/'
  CHECK(utf8_length("\xE0\x80\xAF", 0) == 0);      // overlong, three bytes
  CHECK(utf8_length("\xED\xA0\x80", 0) == 0);      // a surrogate
  CHECK(utf8_length("\xF4\x90\x80\x80", 0) == 0);  // above U+10FFFF
  CHECK(utf8_length("\xE6\x97", 0) == 0);          // cut short
  CHECK(utf8_length("\xFF", 0) == 0);
  CHECK(utf8_length("\x80", 0) == 0);  // a continuation byte alone
}

TEST_CASE("repair_utf8: every byte that starts no sequence becomes U+FFFD") {
  const std::string fffd(kReplacementChar);
  CHECK(is_utf8("caf\xC3\xA9"));
  CHECK_FALSE(is_utf8("bad\xFF"));
  CHECK(repair_utf8("caf\xC3\xA9") == "caf\xC3\xA9");
  CHECK(repair_utf8("bad\xFF byte \xC3 cut") == "bad" + fffd + " byte " + fffd + " cut");
  CHECK(repair_utf8("\xED\xA0\x80") == fffd + fffd + fffd);
}

}  // namespace
}  // namespace tierflow
