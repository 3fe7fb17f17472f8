#include "tokenizer/regex.h"

#include <gtest/gtest.h>

#include "base/error.h"
#include "tokenizer/tokenizer.h"

namespace mlaserve {
namespace {

std::string utf8(uint32_t code) {
  std::string out;
  if (code < 0x80) {
    out.push_back(char(code));
  } else if (code < 0x800) {
    out += {char(0xc0 | (code >> 6)), char(0x80 | (code & 0x3f))};
  } else if (code < 0x10000) {
    out += {char(0xe0 | (code >> 12)), char(0x80 | ((code >> 6) & 0x3f)), char(0x80 | (code & 0x3f))};
  } else {
    out += {char(0xf0 | (code >> 18)), char(0x80 | ((code >> 12) & 0x3f)), char(0x80 | ((code >> 6) & 0x3f)),
            char(0x80 | (code & 0x3f))};
  }
  return out;
}

bool full_match(const Regex& regex, const std::string& text) {
  const auto matches = regex.find_all(text);
  return matches.size() == 1 && matches[0].first == 0 && matches[0].second == text.size();
}

TEST(Regex, RewritesIntersectionTextually) {
  EXPECT_EQ(rewrite_class_intersections(R"([\p{L}&&[^\p{Han}]]+)"), R"((?:(?![\p{Han}])[\p{L}])+)");
  EXPECT_EQ(rewrite_class_intersections(R"([a-z&&[aeiou]])"), R"((?:(?=[aeiou])[a-z]))");
  EXPECT_EQ(rewrite_class_intersections(R"(\[x&&y\] [^\r\n])"), R"(\[x&&y\] [^\r\n])");
  EXPECT_THROW(rewrite_class_intersections("[abc"), Error);
}

// The rewritten class must accept exactly the code points in A and not in B, for every
// code point of the BMP and a slice of the supplementary planes (CJK Extension B included).
TEST(Regex, IntersectionRewriteMatchesSetSemantics) {
  for (const auto& [left, right] : {std::pair{R"(\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M})", R"(\p{Han})"},
                                    std::pair{R"(\p{Ll}\p{Lm}\p{Lo}\p{M})", R"(\p{Han})"}}) {
    const Regex combined(rewrite_class_intersections(std::string("[") + left + "&&[^" + right + "]]"));
    const Regex in_left(std::string("[") + left + "]"), in_right(std::string("[") + right + "]");
    int64_t checked = 0;
    for (uint32_t code = 1; code < 0x30000; code += (code < 0x10000 ? 1 : 7)) {
      if (code >= 0xd800 && code <= 0xdfff) continue;
      const std::string text = utf8(code);
      const bool want = full_match(in_left, text) && !full_match(in_right, text);
      ASSERT_EQ(full_match(combined, text), want) << "U+" << std::hex << code;
      ++checked;
    }
    EXPECT_GT(checked, 80000);
  }
}

TEST(Regex, KimiPatternCompilesAndSplits) {
  const Regex kimi(rewrite_class_intersections(kKimiPattern));
  const std::string text = "Hello世界 it's 12345!";
  std::vector<std::string> pieces;
  for (const auto& [begin, end] : kimi.find_all(text)) pieces.push_back(text.substr(begin, end - begin));
  EXPECT_EQ(pieces, (std::vector<std::string>{"Hello", "世界", " it's", " ", "123", "45", "!"}));
}

}  // namespace
}  // namespace mlaserve
