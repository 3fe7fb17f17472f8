#include "grammar/number_ranges.h"

#include <charconv>
#include <cmath>
#include <vector>

#include "base/error.h"

namespace mlaserve::grammar {
namespace {

using B = GrammarBuilder;
constexpr int64_t kMaxInteger = 9'999'999'999'999'999;  // 16 digits, as the JSON grammar bounds integers

Sequence any_digits(size_t count) { return Sequence(count, B::range('0', '9')); }

// Digit strings of one length from x to y (x <= y), leading zeros as they come: the first digit
// fixes a prefix or spans the digits strictly between, and the rest recurses.
int32_t digit_strings(GrammarBuilder& builder, const std::string& name, const std::string& x, const std::string& y) {
  if (x.empty()) return builder.rule(name, {{}});
  const std::string rest_x = x.substr(1), rest_y = y.substr(1);
  const size_t rest = rest_x.size();
  if (rest_x == std::string(rest, '0') && rest_y == std::string(rest, '9'))
    return builder.rule(name, {B::join({{B::range(uint8_t(x[0]), uint8_t(y[0]))}, any_digits(rest)})});
  if (x[0] == y[0])
    return builder.rule(name, {{B::byte(uint8_t(x[0])), B::ref(digit_strings(builder, name, rest_x, rest_y))}});
  std::vector<Sequence> options = {
      {B::byte(uint8_t(x[0])), B::ref(digit_strings(builder, name, rest_x, std::string(rest, '9')))}};
  if (x[0] + 1 <= y[0] - 1)
    options.push_back(B::join({{B::range(uint8_t(x[0] + 1), uint8_t(y[0] - 1))}, any_digits(rest)}));
  options.push_back({B::byte(uint8_t(y[0])), B::ref(digit_strings(builder, name, std::string(rest, '0'), rest_y))});
  return builder.rule(name, std::move(options));
}

int64_t power_of_ten(size_t digits) {
  int64_t value = 1;
  for (size_t i = 0; i < digits; ++i) value *= 10;
  return value;
}

// The integers a..b (0 <= a <= b) written without leading zeros: one range per digit count.
int32_t naturals(GrammarBuilder& builder, const std::string& name, int64_t a, int64_t b) {
  std::vector<Sequence> options;
  const size_t first = std::to_string(a).size(), last = std::to_string(b).size();
  for (size_t digits = first; digits <= last; ++digits) {
    const int64_t low = digits == first ? a : power_of_ten(digits - 1);
    const int64_t high = digits == last ? b : power_of_ten(digits) - 1;
    options.push_back({B::ref(digit_strings(builder, name, std::to_string(low), std::to_string(high)))});
  }
  return builder.rule(name, std::move(options));
}

int64_t clamped(double value) { return int64_t(std::max(-double(kMaxInteger), std::min(double(kMaxInteger), value))); }

// The smallest and largest integers in the bounds.
std::pair<int64_t, int64_t> integer_bounds(const NumberBounds& bounds) {
  const int64_t low =
      !bounds.low ? -kMaxInteger : clamped(bounds.low_exclusive ? std::floor(*bounds.low) + 1 : std::ceil(*bounds.low));
  const int64_t high = !bounds.high
                           ? kMaxInteger
                           : clamped(bounds.high_exclusive ? std::ceil(*bounds.high) - 1 : std::floor(*bounds.high));
  return {low, high};
}

// The integers low..high: the non-negative ones, and "-" before the negative ones' magnitudes.
std::vector<Sequence> integers(GrammarBuilder& builder, const std::string& name, int64_t low, int64_t high) {
  std::vector<Sequence> options;
  if (low > high) return options;
  if (high >= 0) options.push_back({B::ref(naturals(builder, name + " >=0", std::max<int64_t>(low, 0), high))});
  if (low < 0)
    options.push_back({B::byte('-'), B::ref(naturals(builder, name + " <0", std::max<int64_t>(1, -high), -low))});
  return options;
}

// A bound's fraction digits, as its shortest decimal writes them ("" for a whole number).
std::string fraction_digits(double value) {
  char text[64];
  const auto [end, error] = std::to_chars(text, text + sizeof(text), std::fabs(value), std::chars_format::fixed);
  const std::string written(text, error == std::errc() ? end : text);
  const size_t point = written.find('.');
  return point == std::string::npos ? "" : written.substr(point + 1);
}

// Within one unit [i, i + 1) holding both bounds: i, a point and fractions of one length between
// the bounds' fractions (non-negative bounds).
std::vector<Sequence> fractions_within_a_unit(GrammarBuilder& builder, const std::string& name,
                                              const NumberBounds& bounds) {
  const double low = *bounds.low, high = *bounds.high;
  if (low < 0 || std::floor(low) != std::floor(high) || std::floor(low) > double(kMaxInteger)) return {};
  std::string from = fraction_digits(low), to = fraction_digits(high);
  const size_t length = std::max(from.size(), to.size()) + 1;
  from.resize(length, '0'), to.resize(length, '0');
  int64_t a = std::stoll(from.substr(0, 18)), b = std::stoll(to.substr(0, 18));
  if (length > 18) return {};
  if (bounds.low_exclusive) ++a;
  if (bounds.high_exclusive) --b;
  if (a > b) return {};
  const std::string unit = std::to_string(int64_t(std::floor(low)));
  const std::string first = std::string(length - std::to_string(a).size(), '0') + std::to_string(a);
  const std::string last = std::string(length - std::to_string(b).size(), '0') + std::to_string(b);
  return {B::join({B::literal(unit + "."), {B::ref(digit_strings(builder, name + " fraction", first, last))}})};
}

}  // namespace

int32_t integer_in_range(GrammarBuilder& builder, const std::string& name, const NumberBounds& bounds) {
  const auto [low, high] = integer_bounds(bounds);
  std::vector<Sequence> options = integers(builder, name, low, high);
  MLA_CHECK(!options.empty(), "JSON schema at {}: no integer lies within its minimum and maximum", name);
  return builder.rule(name, std::move(options));
}

int32_t number_in_range(GrammarBuilder& builder, const std::string& name, const NumberBounds& bounds) {
  const auto [low, high] = integer_bounds(bounds);
  std::vector<Sequence> options = integers(builder, name, low, high);
  // A fraction that ends in a non-zero digit, so k.f lies strictly between k and k + 1.
  const int32_t fraction =
      builder.rule(name + " fraction",
                   {B::join({{B::byte('.'), B::ref(builder.repeat(name + " digits", {B::range('0', '9')}, 0, 15))},
                             {B::range('1', '9')}})});
  // Non-negative k.f: k >= low and k + 1 <= high.
  const int64_t up_low = std::max<int64_t>(0, bounds.low ? clamped(std::ceil(*bounds.low)) : 0);
  const int64_t up_high = bounds.high ? clamped(std::floor(*bounds.high)) - 1 : kMaxInteger;
  if (up_low <= up_high)
    options.push_back({B::ref(naturals(builder, name + " units", up_low, up_high)), B::ref(fraction)});
  // Negative -k.f lies in (-(k + 1), -k): -(k + 1) >= low and -k <= high.
  const int64_t down_low = std::max<int64_t>(0, bounds.high ? clamped(std::ceil(-*bounds.high)) : 0);
  const int64_t down_high = bounds.low ? clamped(std::floor(-*bounds.low)) - 1 : kMaxInteger;
  if (down_low <= down_high)
    options.push_back(
        {B::byte('-'), B::ref(naturals(builder, name + " negative units", down_low, down_high)), B::ref(fraction)});
  if (bounds.low && bounds.high) {
    for (auto& within : fractions_within_a_unit(builder, name, bounds)) options.push_back(std::move(within));
    const NumberBounds mirrored = {-*bounds.high, -*bounds.low, bounds.high_exclusive, bounds.low_exclusive};
    for (auto& within : fractions_within_a_unit(builder, name + " mirrored", mirrored))
      options.push_back(B::join({{B::byte('-')}, within}));
  }
  MLA_CHECK(!options.empty(), "JSON schema at {}: no number lies within its minimum and maximum", name);
  return builder.rule(name, std::move(options));
}

}  // namespace mlaserve::grammar
