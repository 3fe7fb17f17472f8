#include "jinja/builtins.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <set>
#include <string_view>

#include "base/error.h"
#include "jinja/ast.h"
#include "jinja/budget.h"
#include "jinja/chars.h"
#include "jinja/python_str.h"

namespace mlaserve::jinja {

using ValueKind = Value::Kind;

// Python's str.strip family: whitespace, or (given) any of `chars`' characters.
std::string strip(const std::string& text, bool left, bool right, const Value* chars) {
  if (chars && !chars->is_none()) {
    MLA_CHECK(chars->is_string(), "strip's argument must be a string, got {}", chars->type_name());
    const std::vector<std::string> set = utf8_characters(chars->as_string());
    std::vector<std::string> characters = utf8_characters(text);
    const auto in_set = [&](const std::string& c) { return std::find(set.begin(), set.end(), c) != set.end(); };
    size_t begin = 0, end = characters.size();
    while (left && begin < end && in_set(characters[begin])) ++begin;
    while (right && end > begin && in_set(characters[end - 1])) --end;
    std::string out;
    for (size_t i = begin; i < end; ++i) out += characters[i];
    return out;
  }
  size_t begin = 0, end = text.size();
  while (left && begin < end && is_space(text[begin])) ++begin;
  while (right && end > begin && is_space(text[end - 1])) --end;
  return text.substr(begin, end - begin);
}

std::string ascii_case(std::string text, bool upper) {
  for (char& c : text) c = upper ? to_upper(c) : to_lower(c);
  return text;
}

namespace {

// Python's str.title: the first letter of each run of letters upper case, the others lower
// (a non-ASCII character counts as a letter, so that "héllo" stays one word).
std::string title_case(std::string text) {
  const auto letter = [](char c) { return is_alpha(c) || uint8_t(c) >= 0x80; };
  for (size_t i = 0; i < text.size(); ++i)
    text[i] = i > 0 && letter(text[i - 1]) ? to_lower(text[i]) : to_upper(text[i]);
  return text;
}

}  // namespace

std::string capitalize(const std::string& text) {
  return text.empty() ? text : std::string(1, to_upper(text[0])) + ascii_case(text.substr(1), false);
}

// Python's str.center (and ljust, rjust): the extra space of an odd padding goes right unless the
// width is odd too.
std::string pad(const std::string& text, int64_t width, const std::string& fill, char align) {
  const auto length = int64_t(utf8_length(text));
  if (width <= length) return text;
  check_string_size(size_t(width));
  const int64_t margin = width - length;
  const int64_t left = align == '<' ? 0 : align == '>' ? margin : margin / 2 + (margin & width & 1);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += text;
  for (int64_t i = left; i < margin; ++i) out += fill;
  return out;
}

// A sort of n items: about n log2 n comparisons.
void charge_sort(size_t n) { charge_steps(n * size_t(std::bit_width(n))); }

namespace {

// text.find(pattern, from) in time linear in the text: glibc's memmem (the two-way algorithm),
// since std::string's find may compare the whole pattern at every offset (32 MiB of 'a'
// searched for 16 MiB of 'a' and a 'b').
size_t find_text(std::string_view text, std::string_view pattern, size_t from) {
  if (from > text.size()) return std::string_view::npos;
  const void* found = memmem(text.data() + from, text.size() - from, pattern.data(), pattern.size());
  return found ? size_t(static_cast<const char*>(found) - text.data()) : std::string_view::npos;
}

std::string replace_all(const std::string& text, const std::string& from, const std::string& to, int64_t count) {
  if (count == 0) return text;
  std::string out;
  size_t pos = 0;
  int64_t done = 0;
  if (from.empty()) {  // an empty pattern matches between every two characters
    for (const std::string& character : utf8_characters(text)) {
      if (count < 0 || done < count) out += to, ++done;
      out += character;
      check_string_size(out.size());
    }
    if (count < 0 || done < count) out += to;
    return out;
  }
  while (count < 0 || done < count) {
    const size_t found = find_text(text, from, pos);
    if (found == std::string::npos) break;
    out += text.substr(pos, found - pos) + to;
    check_string_size(out.size());
    pos = found + from.size();
    ++done;
  }
  return out + text.substr(pos);
}

// str.split(sep=None, maxsplit=-1) as Python: no separator splits on runs of whitespace.
Value split(const std::string& text, const Value* separator, int64_t max_split) {
  Array parts;
  if (!separator || separator->is_none()) {
    size_t pos = 0;
    while (true) {
      while (pos < text.size() && is_space(text[pos])) ++pos;
      if (pos >= text.size()) break;
      if (max_split >= 0 && int64_t(parts.size()) >= max_split) {
        parts.emplace_back(text.substr(pos));
        break;
      }
      size_t end = pos;
      while (end < text.size() && !is_space(text[end])) ++end;
      check_list_size(parts.size() + 1);
      parts.emplace_back(text.substr(pos, end - pos));
      pos = end;
    }
    return Value::array(std::move(parts));
  }
  MLA_CHECK(separator->is_string(), "split's separator must be a string");
  const std::string& sep = separator->as_string();
  MLA_CHECK(!sep.empty(), "split: empty separator");
  size_t pos = 0;
  while (max_split < 0 || int64_t(parts.size()) < max_split) {
    const size_t found = find_text(text, sep, pos);
    if (found == std::string::npos) break;
    check_list_size(parts.size() + 2);  // this part and the last
    parts.emplace_back(text.substr(pos, found - pos));
    pos = found + sep.size();
  }
  parts.emplace_back(text.substr(pos));
  return Value::array(std::move(parts));
}

bool matches_prefix_or_suffix(const std::string& text, const Value& pattern, bool prefix) {
  const auto check = [&](const Value& p) {
    MLA_CHECK(p.is_string(), "{} takes a string or a tuple of strings", prefix ? "startswith" : "endswith");
    const std::string& s = p.as_string();
    return s.size() <= text.size() &&
           (prefix ? text.compare(0, s.size(), s) == 0 : text.compare(text.size() - s.size(), s.size(), s) == 0);
  };
  if (!pattern.is_array()) return check(pattern);
  return std::any_of(pattern.items().begin(), pattern.items().end(), check);
}

}  // namespace

int64_t int_argument(const Arguments& args, size_t index, std::string_view name, int64_t fallback) {
  const Value* value = args.get(index, name);
  if (!value || value->is_none()) return fallback;
  MLA_CHECK(value->kind() == ValueKind::Int, "'{}' must be an integer, got {}", name, value->type_name());
  return value->as_int();
}

bool bool_argument(const Arguments& args, size_t index, std::string_view name, bool fallback) {
  const Value* value = args.get(index, name);
  if (!value || value->is_none()) return fallback;
  MLA_CHECK(value->kind() == ValueKind::Bool, "'{}' must be a boolean, got {}", name, value->type_name());
  return value->as_bool();
}

const Value& argument(const Arguments& args, size_t index, std::string_view name, std::string_view method) {
  const Value* value = args.get(index, name);
  MLA_CHECK(value != nullptr, "{} needs its argument '{}'", method, name);
  return *value;
}

namespace {

// One conversion of a format: [[fill]align][sign][0][width][.precision][type], as Python's
// format spec (str.format) and printf's flags (%) both reduce to it.
struct Spec {
  std::string fill = " ";
  char align = 0, sign = 0, type = 0;
  bool zero = false;
  int64_t width = 0, precision = -1;
};

std::string format_value(const Value& value, const Spec& spec) {
  std::string body;
  const char type = spec.type;
  if (type == 's' || type == 0 || type == 'r') {
    body = type == 'r' ? value.repr() : value.str();
    if (spec.precision >= 0) body = slice_value(Value(body), nullptr, &spec.precision, 1).as_string();
  } else if (type == 'c') {
    MLA_CHECK(value.kind() == ValueKind::Int, "%c needs an integer");
    body = std::string(1, char(value.as_int()));
  } else {
    MLA_CHECK(value.is_number() || value.kind() == ValueKind::Bool, "format '{}' needs a number, got {}", type,
              value.type_name());
    const double x = value.as_number();
    const std::string sign = spec.sign == '+' ? "+" : spec.sign == ' ' ? " " : "";
    if (type == 'd' || type == 'i' || type == 'u')
      body = fmt::format("{}", int64_t(std::trunc(x)));
    else if (type == 'x' || type == 'X' || type == 'o' || type == 'b') {
      const int64_t n = int64_t(std::trunc(x));
      body = (n < 0 ? "-" : "") + fmt::format(fmt::runtime(std::string("{:") + type + "}"), uint64_t(n < 0 ? -n : n));
    } else if (type == '%') {
      body = fmt::format("{:.{}f}%", x * 100, spec.precision < 0 ? 6 : spec.precision);
    } else if (std::string_view("fFeEgG").find(type) != std::string_view::npos) {
      body = fmt::format(fmt::runtime(fmt::format("{{:.{}{}}}", spec.precision < 0 ? 6 : spec.precision, type)), x);
    } else {
      fail("unsupported format type '{}'", type);
    }
    if (!body.empty() && body[0] != '-') body = sign + body;
  }
  const auto length = int64_t(utf8_length(body));
  if (spec.width <= length) return body;
  if (spec.zero && !spec.align && type && type != 's' && type != 'r') {  // zeros after the sign
    const size_t after_sign = !body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ') ? 1 : 0;
    return body.substr(0, after_sign) + std::string(size_t(spec.width - length), '0') + body.substr(after_sign);
  }
  const char align = spec.align ? spec.align : (type && type != 's' && type != 'r' && type != 'c') ? '>' : '<';
  return pad(body, spec.width, spec.fill, align == '=' ? '>' : align);
}

int64_t read_count(std::string_view text, size_t& i) {
  int64_t n = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9')
    n = std::min<int64_t>(n * 10 + (text[i++] - '0'), 1 << 20);
  return n;
}

}  // namespace

// printf-style `format % values`: %s %r %d %i %f %e %g %x %o %c %% with flags, width and
// precision; a tuple gives one value a conversion, a dict names them (%(key)s).
std::string printf_format(const std::string& format, const Value& values) {
  std::string out;
  size_t next = 0;
  const bool several = values.is_tuple();
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    MLA_CHECK(++i < format.size(), "incomplete format");
    if (format[i] == '%') {
      out += '%';
      continue;
    }
    const Value* value = nullptr;
    Value keyed;
    if (format[i] == '(') {
      const size_t close = format.find(')', i);
      MLA_CHECK(close != std::string::npos && values.has_attributes(), "a %(key) format needs a dict");
      const Value* found = values.attributes().find(format.substr(i + 1, close - i - 1));
      MLA_CHECK(found, "format key '{}' is missing", format.substr(i + 1, close - i - 1));
      keyed = *found;
      value = &keyed;
      i = close + 1;
    }
    Spec spec;
    for (; i < format.size() && std::string_view("-+ 0#").find(format[i]) != std::string_view::npos; ++i) {
      if (format[i] == '-') spec.align = '<';
      if (format[i] == '+' || (format[i] == ' ' && spec.sign != '+')) spec.sign = format[i];
      if (format[i] == '0') spec.zero = true;
    }
    spec.width = read_count(format, i);
    if (i < format.size() && format[i] == '.') spec.precision = read_count(format, ++i);
    MLA_CHECK(i < format.size(), "incomplete format");
    spec.type = format[i];
    if (!value) {
      if (several) {
        MLA_CHECK(next < values.items().size(), "not enough arguments for format string");
        value = &values.items()[next++];
      } else {
        MLA_CHECK(next++ == 0, "not enough arguments for format string");
        value = &values;
      }
    }
    if (spec.type == 'r' || spec.type == 'a') spec.type = 'r';
    out += format_value(*value, spec);
    check_string_size(out.size());
  }
  MLA_CHECK(!several || next == values.items().size(), "not all arguments converted during string formatting");
  return out;
}

namespace {

// Python's str.format: {} {0} {name} fields, {{ }} braces, and a spec after ':'.
std::string python_format(const std::string& format, const Arguments& args) {
  std::string out;
  size_t automatic = 0;
  for (size_t i = 0; i < format.size(); ++i) {
    const char c = format[i];
    if ((c == '{' || c == '}') && i + 1 < format.size() && format[i + 1] == c) {
      out += c;
      ++i;
      continue;
    }
    if (c != '{') {
      MLA_CHECK(c != '}', "single '{}' encountered in format string", "}");
      out += c;
      continue;
    }
    const size_t close = format.find('}', i);
    MLA_CHECK(close != std::string::npos, "single '{}' encountered in format string", "{");
    const std::string field = format.substr(i + 1, close - i - 1);
    const size_t colon = field.find(':');
    const std::string name = field.substr(0, colon);
    const Value* value = nullptr;
    if (name.empty())
      value = args.get(automatic++, "");
    else if (std::all_of(name.begin(), name.end(), ::isdigit))
      value = args.get(size_t(std::stoull(name.substr(0, 9))), "");
    else
      value = args.keyword(name);
    MLA_CHECK(value, "format field '{}' has no argument", name);
    Spec spec;
    if (colon != std::string::npos) {
      const std::string text = field.substr(colon + 1);
      size_t k = 0;
      if (text.size() >= 2 && std::string_view("<>^=").find(text[1]) != std::string_view::npos)
        spec.fill = text.substr(0, 1), k = 1;
      if (k < text.size() && std::string_view("<>^=").find(text[k]) != std::string_view::npos) spec.align = text[k++];
      if (k < text.size() && (text[k] == '+' || text[k] == '-' || text[k] == ' ')) spec.sign = text[k++];
      if (k < text.size() && text[k] == '0') spec.zero = true, ++k;
      spec.width = read_count(text, k);
      if (k < text.size() && text[k] == '.') spec.precision = read_count(text, ++k);
      if (k < text.size()) spec.type = text[k++];
      MLA_CHECK(k == text.size(), "format spec '{}' is not supported", text);
    }
    out += format_value(*value, spec);
    check_string_size(out.size());
    i = close;
  }
  return out;
}

// str.count, str.index/rindex (an error when missing), str.find/rfind: by characters.
int64_t find_in(const std::string& text, const std::string& needle, bool from_right) {
  size_t found = std::string::npos;
  if (!from_right)
    found = find_text(text, needle, 0);
  else
    found = text.rfind(needle);
  return found == std::string::npos ? -1 : int64_t(utf8_length(text.substr(0, found)));
}

Value partition(const std::string& text, const std::string& separator, bool from_right) {
  MLA_CHECK(!separator.empty(), "empty separator");
  const size_t at = from_right ? text.rfind(separator) : find_text(text, separator, 0);
  if (at == std::string::npos)
    return from_right ? Value::tuple({Value(""), Value(""), Value(text)})
                      : Value::tuple({Value(text), Value(""), Value("")});
  return Value::tuple({Value(text.substr(0, at)), Value(separator), Value(text.substr(at + separator.size()))});
}

// str.splitlines: at \n, \r\n, \r, \v, \f and \x1c-\x1e.
Value split_lines(const std::string& text, bool keep_ends) {
  Array lines;
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c != '\n' && c != '\r' && c != '\v' && c != '\f' && !(c >= '\x1c' && c <= '\x1e')) continue;
    const size_t end = c == '\r' && i + 1 < text.size() && text[i + 1] == '\n' ? i + 2 : i + 1;
    lines.emplace_back(text.substr(start, (keep_ends ? end : i) - start));
    start = end;
    i = end - 1;
  }
  if (start < text.size()) lines.emplace_back(text.substr(start));
  return Value::array(std::move(lines));
}

// Python's str.isdigit, isalpha, ... over ASCII (a non-ASCII character counts as neither).
Value string_predicate(const std::string& text, const std::string& name) {
  if (name == "islower" || name == "isupper") {
    const bool cased = std::any_of(text.begin(), text.end(), is_alpha);
    const bool all = std::none_of(text.begin(), text.end(), name == "islower" ? is_upper : is_lower);
    return Value(cased && all);
  }
  const auto all_of = [&](auto predicate) {
    return Value(!text.empty() && std::all_of(text.begin(), text.end(), predicate));
  };
  if (name == "isdigit" || name == "isdecimal" || name == "isnumeric")
    return all_of([](char c) { return c >= '0' && c <= '9'; });
  if (name == "isalpha") return all_of(is_alpha);
  if (name == "isalnum") return all_of([](char c) { return is_alpha(c) || (c >= '0' && c <= '9'); });
  return all_of(is_space);  // "isspace"
}

Value string_method(const std::string& text, const std::string& name) {
  const auto bind = [&](auto fn) {
    return Value::function([text, fn](const Arguments& args) { return Value(fn(text, args)); });
  };
  const auto string_argument = [](const Arguments& args, size_t index, const char* param, const char* method) {
    const Value& value = argument(args, index, param, method);
    MLA_CHECK(value.is_string(), "{}'s argument must be a string, got {}", method, value.type_name());
    return value.as_string();
  };
  if (name == "upper" || name == "lower")
    return bind([upper = name == "upper"](const std::string& s, const Arguments&) { return ascii_case(s, upper); });
  if (name == "swapcase")
    return bind([](std::string s, const Arguments&) {
      for (char& c : s) c = is_upper(c) ? to_lower(c) : to_upper(c);
      return s;
    });
  if (name == "strip" || name == "lstrip" || name == "rstrip")
    return bind([left = name != "rstrip", right = name != "lstrip"](const std::string& s, const Arguments& args) {
      return strip(s, left, right, args.get(0, "chars"));
    });
  if (name == "title") return bind([](const std::string& s, const Arguments&) { return title_case(s); });
  if (name == "capitalize") return bind([](const std::string& s, const Arguments&) { return capitalize(s); });
  if (name == "startswith" || name == "endswith") {
    const bool prefix = name == "startswith";
    return bind([prefix](const std::string& s, const Arguments& args) {
      return matches_prefix_or_suffix(s, argument(args, 0, "prefix", prefix ? "startswith" : "endswith"), prefix);
    });
  }
  if (name == "split" || name == "rsplit")
    return bind([right = name == "rsplit"](const std::string& s, const Arguments& args) {
      const int64_t max_split = int_argument(args, 1, "maxsplit", -1);
      if (!right || max_split < 0) return split(s, args.get(0, "sep"), max_split);
      // From the right: split the reversed text by the reversed separator, and reverse back.
      const Value* separator = args.get(0, "sep");
      const auto reversed = [](std::string t) { return std::string(t.rbegin(), t.rend()); };
      Value separator_reversed =
          separator && separator->is_string() ? Value(reversed(separator->as_string())) : Value::none();
      Value parts = split(reversed(s), &separator_reversed, max_split);
      Array out;
      for (auto it = parts.items().rbegin(); it != parts.items().rend(); ++it)
        out.emplace_back(reversed(it->as_string()));
      return Value::array(std::move(out));
    });
  if (name == "splitlines")
    return bind([](const std::string& s, const Arguments& args) {
      return split_lines(s, bool_argument(args, 0, "keepends", false));
    });
  if (name == "replace")
    return bind([string_argument](const std::string& s, const Arguments& args) {
      return replace_all(s, string_argument(args, 0, "old", "replace"), string_argument(args, 1, "new", "replace"),
                         int_argument(args, 2, "count", -1));
    });
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex")
    return bind([name, string_argument](const std::string& s, const Arguments& args) {
      const int64_t at = find_in(s, string_argument(args, 0, "sub", name.c_str()), name[0] == 'r');
      MLA_CHECK(at >= 0 || name.find("index") == std::string::npos, "substring not found");
      return at;
    });
  if (name == "count")
    return bind([string_argument](const std::string& s, const Arguments& args) {
      const std::string needle = string_argument(args, 0, "sub", "count");
      if (needle.empty()) return int64_t(utf8_length(s) + 1);
      int64_t n = 0;
      for (size_t at = find_text(s, needle, 0); at != std::string::npos; at = find_text(s, needle, at + needle.size()))
        ++n;
      return n;
    });
  if (name == "join")
    return bind([](const std::string& s, const Arguments& args) {
      const Value& items = argument(args, 0, "iterable", "join");
      MLA_CHECK(items.is_array(), "join takes a list of strings, got {}", items.type_name());
      std::string out;
      for (size_t i = 0; i < items.items().size(); ++i) {
        MLA_CHECK(items.items()[i].is_string(), "join: item {} is {}, not a string", i, items.items()[i].type_name());
        out += (i ? s : "") + items.items()[i].as_string();
        check_string_size(out.size());
      }
      return out;
    });
  if (name == "center" || name == "ljust" || name == "rjust")
    return bind([align = name == "center"  ? '^'
                         : name == "ljust" ? '<'
                                           : '>'](const std::string& s, const Arguments& args) {
      const Value* fill = args.get(1, "fillchar");
      return pad(s, int_argument(args, 0, "width", 0), fill && fill->is_string() ? fill->as_string() : " ", align);
    });
  if (name == "zfill")
    return bind([](const std::string& s, const Arguments& args) {
      Spec spec;
      spec.width = int_argument(args, 0, "width", 0);
      const size_t sign = !s.empty() && (s[0] == '-' || s[0] == '+') ? 1 : 0;
      const auto length = int64_t(utf8_length(s));
      return spec.width <= length ? s
                                  : s.substr(0, sign) + std::string(size_t(spec.width - length), '0') + s.substr(sign);
    });
  if (name == "partition" || name == "rpartition")
    return Value::function([text, right = name == "rpartition", string_argument](const Arguments& args) {
      return partition(text, string_argument(args, 0, "sep", "partition"), right);
    });
  if (name == "removeprefix" || name == "removesuffix")
    return bind([prefix = name == "removeprefix", string_argument](const std::string& s, const Arguments& args) {
      const std::string affix = string_argument(args, 0, prefix ? "prefix" : "suffix", "removeprefix");
      if (prefix) return s.starts_with(affix) ? s.substr(affix.size()) : s;
      return s.ends_with(affix) ? s.substr(0, s.size() - affix.size()) : s;
    });
  if (name == "format") return bind([](const std::string& s, const Arguments& args) { return python_format(s, args); });
  if (name == "isdigit" || name == "isdecimal" || name == "isnumeric" || name == "isalpha" || name == "isalnum" ||
      name == "isspace" || name == "islower" || name == "isupper")
    return Value::function([text, name](const Arguments&) { return string_predicate(text, name); });
  return Value();
}

}  // namespace

Value dictsort(const Value& object, const Arguments& args) {
  const bool case_sensitive = bool_argument(args, 0, "case_sensitive", false);
  const Value* by = args.get(1, "by");
  const bool by_value = by && by->is_string() && by->as_string() == "value";
  MLA_CHECK(!by || (by->is_string() && (by->as_string() == "key" || by_value)),
            "dictsort's 'by' must be 'key' or 'value'");
  const bool reverse = bool_argument(args, 2, "reverse", false);
  Array pairs;
  for (const auto& [key, value] : object.attributes().entries) pairs.push_back(Value::tuple({Value(key), value}));
  charge_sort(pairs.size());
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& a, const Value& b) {
    const int order = compare(a.items()[by_value ? 1 : 0], b.items()[by_value ? 1 : 0], case_sensitive);
    return reverse ? order > 0 : order < 0;
  });
  return Value::array(std::move(pairs));
}

namespace {

Value dict_method(const Value& object, const std::string& name) {
  const auto entries = [object](auto project) {
    Array out;
    for (const auto& entry : object.attributes().entries) out.push_back(project(entry));
    return Value::array(std::move(out));
  };
  if (name == "get")
    return Value::function([object](const Arguments& args) {
      const Value& key = argument(args, 0, "key", "get");
      MLA_CHECK(key.is_string(), "dict keys are strings, got {}", key.type_name());
      const Value* found = object.attributes().find(key.as_string());
      if (found) return *found;
      const Value* fallback = args.get(1, "default");
      return fallback ? *fallback : Value::none();
    });
  if (name == "items")
    return Value::function([entries](const Arguments&) {
      return entries([](const auto& e) { return Value::tuple({Value(e.first), e.second}); });
    });
  if (name == "keys")
    return Value::function(
        [entries](const Arguments&) { return entries([](const auto& e) { return Value(e.first); }); });
  if (name == "values")
    return Value::function([entries](const Arguments&) { return entries([](const auto& e) { return e.second; }); });
  if (name == "dictsort") return Value::function([object](const Arguments& args) { return dictsort(object, args); });
  if (name == "update" || name == "pop" || name == "popitem" || name == "setdefault" || name == "clear")
    fail("access to attribute '{}' of 'dict' object is unsafe (the sandbox allows no changes to a dict)", name);
  return Value();
}

// A list's methods as Jinja2's immutable sandbox allows them: index and count; the ones that
// change it (append, pop, ...) are an error, as they are for transformers.
Value list_method(const Value& list, const std::string& name) {
  if (name == "index" || name == "count")
    return Value::function([list, index = name == "index"](const Arguments& args) {
      const Value& item = argument(args, 0, "value", index ? "index" : "count");
      int64_t count = 0;
      charge_steps(list.items().size());
      for (size_t i = 0; i < list.items().size(); ++i) {
        if (!loosely_equal(list.items()[i], item)) continue;
        if (index) return Value(int64_t(i));
        ++count;
      }
      MLA_CHECK(!index, "{} is not in list", item.repr());
      return Value(count);
    });
  if (name == "append" || name == "pop" || name == "extend" || name == "insert" || name == "remove" ||
      name == "clear" || name == "sort" || name == "reverse")
    fail("access to attribute '{}' of 'list' object is unsafe (the sandbox allows no changes to a list)", name);
  return Value();
}

}  // namespace

Value get_attribute(const Value& object, const std::string& name) {
  if (object.has_attributes()) {
    if (const Value* found = object.attributes().find(name)) return *found;
    return object.is_object() ? dict_method(object, name) : Value();
  }
  if (object.is_string()) return string_method(object.as_string(), name);
  if (object.is_array()) {
    if (!name.empty() && std::all_of(name.begin(), name.end(), ::isdigit)) return get_item(object, std::stoll(name));
    return list_method(object, name);
  }
  return Value();
}

Value get_item(const Value& object, int64_t index) {
  if (object.is_array()) {
    const auto n = int64_t(object.items().size());
    if (index < 0) index += n;
    return index >= 0 && index < n ? object.items()[size_t(index)] : Value();
  }
  if (object.is_string()) {
    const std::string& text = object.as_string();
    const std::vector<size_t> offsets = utf8_offsets(text);
    const auto n = int64_t(offsets.size() - 1);
    if (index < 0) index += n;
    if (index < 0 || index >= n) return Value();
    return Value(text.substr(offsets[size_t(index)], offsets[size_t(index) + 1] - offsets[size_t(index)]));
  }
  MLA_CHECK(!object.has_attributes(), "dict keys are strings, not integers");
  return Value();
}

Value slice_value(const Value& object, const int64_t* start, const int64_t* stop, int64_t step) {
  MLA_CHECK(object.is_array() || object.is_string(), "cannot slice {}", object.type_name());
  MLA_CHECK(step != 0, "slice step cannot be zero");
  const std::vector<size_t> offsets = object.is_string() ? utf8_offsets(object.as_string()) : std::vector<size_t>();
  const auto n = int64_t(object.is_array() ? object.items().size() : offsets.size() - 1);
  const auto clamp = [&](const int64_t* bound, int64_t fallback, int64_t low, int64_t high) {
    if (!bound) return fallback;
    const int64_t b = *bound < 0 ? *bound + n : *bound;
    return std::clamp(b, low, high);
  };
  std::vector<size_t> picked;  // the indices the slice takes, in order
  // A step past the end jumps to the end, so that i + step cannot overflow.
  if (step > 0) {
    const int64_t end = clamp(stop, n, 0, n);
    for (int64_t i = clamp(start, 0, 0, n); i<end; i = end - i> step ? i + step : end) picked.push_back(size_t(i));
  } else {
    const int64_t end = clamp(stop, -1, -1, n - 1);
    for (int64_t i = clamp(start, n - 1, -1, n - 1); i > end; i = end - i < step ? i + step : end)
      picked.push_back(size_t(i));
  }
  if (object.is_array()) {
    Array out;
    for (size_t i : picked) out.push_back(object.items()[i]);
    return Value::array(std::move(out));
  }
  std::string text;
  for (size_t i : picked) text.append(object.as_string(), offsets[i], offsets[i + 1] - offsets[i]);
  return Value(std::move(text));
}

namespace {

bool contains(const Value& container, const Value& item) {
  if (container.is_array()) {
    charge_steps(container.items().size());
    return std::any_of(container.items().begin(), container.items().end(),
                       [&](const Value& v) { return loosely_equal(v, item); });
  }
  if (container.is_string() && item.is_string())
    return find_text(container.as_string(), item.as_string(), 0) != std::string::npos;
  if (container.has_attributes() && item.is_string()) return container.attributes().find(item.as_string()) != nullptr;
  fail("cannot test whether {} is in {}", item.type_name(), container.type_name());
}

// An integer result as Python gives it, or an error where int64 cannot hold it.
int64_t integer_result(double x) {
  MLA_CHECK(x >= -9223372036854775808.0 && x < 9223372036854775808.0, "integer result {} out of range", x);
  return int64_t(x);
}

int64_t integer_arithmetic(char op, int64_t a, int64_t b) {
  int64_t result = 0;
  const bool overflow = op == '+'   ? __builtin_add_overflow(a, b, &result)
                        : op == '-' ? __builtin_sub_overflow(a, b, &result)
                                    : __builtin_mul_overflow(a, b, &result);
  MLA_CHECK(!overflow, "integer overflow in {} {} {}", a, op, b);
  return result;
}

Value arithmetic(const std::string& op, const Value& left, const Value& right) {
  const double a = left.as_number(), b = right.as_number();
  const bool as_float = left.kind() == ValueKind::Float || right.kind() == ValueKind::Float;
  const auto number = [&](double x) { return as_float ? Value(x) : Value(integer_result(x)); };
  if (op == "+" || op == "-" || op == "*")
    return as_float ? Value(op == "+"   ? a + b
                            : op == "-" ? a - b
                                        : a * b)
                    : Value(integer_arithmetic(op[0], left.as_int(), right.as_int()));
  MLA_CHECK(b != 0 || (op != "/" && op != "//" && op != "%"), "division by zero");  // as Python
  if (op == "/") return Value(a / b);
  if (op == "//") return number(std::floor(a / b));
  if (op == "%") {  // Python's: the remainder takes the divisor's sign
    if (as_float) {
      const double r = std::fmod(a, b);
      return Value(r != 0 && (r < 0) != (b < 0) ? r + b : r);
    }
    if (right.as_int() == -1) return Value(int64_t(0));  // INT64_MIN % -1 overflows in C++
    const int64_t r = left.as_int() % right.as_int();
    return Value(r != 0 && (r < 0) != (right.as_int() < 0) ? r + right.as_int() : r);
  }
  if (op == "**")
    return (as_float || b < 0) ? Value(std::pow(a, b)) : Value(integer_result(std::nearbyint(std::pow(a, b))));
  if (op == "<") return Value(a < b);
  if (op == ">") return Value(a > b);
  if (op == "<=") return Value(a <= b);
  if (op == ">=") return Value(a >= b);
  fail("unknown operator '{}'", op);
}

Value concatenate(const std::string& left, const std::string& right) {
  check_string_size(left.size() + right.size());
  return Value(left + right);
}

// A string or list repeated (Python's "ab" * 3, [1] * 2).
Value repeated(const Value& sequence, int64_t times) {
  times = std::max<int64_t>(times, 0);
  if (sequence.is_string()) {
    check_string_size(sequence.as_string().size() * size_t(std::min<int64_t>(times, int64_t(1) << 40)));
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += sequence.as_string();
    return Value(std::move(out));
  }
  check_list_size(sequence.items().size() * size_t(std::min<int64_t>(times, int64_t(1) << 40)));
  Array items;
  for (int64_t i = 0; i < times; ++i) items.insert(items.end(), sequence.items().begin(), sequence.items().end());
  return sequence.is_tuple() ? Value::tuple(std::move(items)) : Value::array(std::move(items));
}

}  // namespace

Value binary_operation(const std::string& op, const Value& left, const Value& right) {
  const auto numeric = [](const Value& v) { return v.is_number() || v.kind() == ValueKind::Bool; };
  if (op == "==") return Value(loosely_equal(left, right));
  if (op == "!=") return Value(!loosely_equal(left, right));
  if (op == "in") return right.is_undefined() ? Value(false) : Value(contains(right, left));
  if (op == "not in") return right.is_undefined() ? Value(true) : Value(!contains(right, left));
  if (op == "~") return concatenate(left.str(), right.str());
  if (op == "%" && left.is_string()) return Value(printf_format(left.as_string(), right));
  if (numeric(left) && numeric(right)) {
    const auto as_number = [](const Value& v) { return v.kind() == ValueKind::Bool ? Value(int64_t(v.as_bool())) : v; };
    return arithmetic(op, as_number(left), as_number(right));
  }
  MLA_CHECK(!left.is_undefined() && !right.is_undefined(), "cannot apply {} to an undefined value", op);
  if (op == "*" && (left.is_string() || left.is_array()) && right.kind() == ValueKind::Int)
    return repeated(left, right.as_int());
  if (op == "*" && (right.is_string() || right.is_array()) && left.kind() == ValueKind::Int)
    return repeated(right, left.as_int());
  if (op == "+" && left.is_array() && right.is_array()) {
    check_list_size(left.items().size() + right.items().size());
    Array items = left.items();
    items.insert(items.end(), right.items().begin(), right.items().end());
    return Value::array(std::move(items));
  }
  if (op == "+" && left.is_string() && right.is_string()) return concatenate(left.as_string(), right.as_string());
  if (left.is_string() && right.is_string() && (op == "<" || op == ">" || op == "<=" || op == ">=")) {
    const int order = left.as_string().compare(right.as_string());
    return Value(op == "<" ? order < 0 : op == ">" ? order > 0 : op == "<=" ? order <= 0 : order >= 0);
  }
  fail("unsupported operator '{}' between {} and {}", op, left.type_name(), right.type_name());
}

namespace {

Value range_function(const Arguments& args) {
  MLA_CHECK(!args.positional.empty() && args.positional.size() <= 3, "range takes 1 to 3 integers");
  for (const Value& v : args.positional)
    MLA_CHECK(v.kind() == ValueKind::Int, "range takes integers, got {}", v.type_name());
  const bool one = args.positional.size() == 1;
  const int64_t start = one ? 0 : args.positional[0].as_int();
  const int64_t stop = one ? args.positional[0].as_int() : args.positional[1].as_int();
  const int64_t step = args.positional.size() == 3 ? args.positional[2].as_int() : 1;
  MLA_CHECK(step != 0, "range() step must not be zero");
  // Counted in unsigned arithmetic, which cannot overflow where int64 would.
  const bool empty = step > 0 ? stop <= start : stop >= start;
  const uint64_t span = step > 0 ? uint64_t(stop) - uint64_t(start) : uint64_t(start) - uint64_t(stop);
  const uint64_t stride = step > 0 ? uint64_t(step) : uint64_t(-(step + 1)) + 1;
  const uint64_t count = empty ? 0 : (span - 1) / stride + 1;
  check_list_size(size_t(count));
  Array items;
  for (uint64_t k = 0; k < count; ++k) items.emplace_back(int64_t(uint64_t(start) + k * uint64_t(step)));
  return Value::array(std::move(items));
}

// The entries of namespace(mapping, **entries) and dict(mapping, **entries), as Python's dict
// builds them.
Object entries_of(const Arguments& args, std::string_view function) {
  MLA_CHECK(args.positional.size() <= 1, "{} takes at most one positional argument", function);
  Object entries;
  if (!args.positional.empty()) {
    MLA_CHECK(args.positional[0].is_object(), "{}'s argument must be a dict", function);
    entries = args.positional[0].attributes();
  }
  for (const auto& [key, value] : args.keywords) entries.set(key, value);
  return entries;
}

// joiner(sep=", "): a function that returns "" the first time it is called, sep after that.
Value joiner_function(const Arguments& args) {
  const Value* separator = args.get(0, "sep");
  return Value::function([separator = separator ? separator->str() : ", ", called = std::make_shared<bool>(false)](
                             const Arguments&) { return Value(std::exchange(*called, true) ? separator : ""); });
}

// strftime_now(format) in local time: %Y %m %d %b %B %H %M %% as the reference formats them.
Value strftime_now(const Arguments& args) {
  const Value& format = argument(args, 0, "format", "strftime_now");
  MLA_CHECK(format.is_string(), "strftime_now takes a format string");
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm local{};
  localtime_r(&now, &local);
  std::string out;
  const std::string& f = format.as_string();
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%' || i + 1 >= f.size() || std::string_view("YmdbBHM%").find(f[i + 1]) == std::string_view::npos) {
      out += f[i];
      continue;
    }
    char buffer[64];
    const char spec[] = {'%', f[++i], '\0'};
    out.append(buffer, std::strftime(buffer, sizeof buffer, spec, &local));
  }
  return Value(std::move(out));
}

}  // namespace

const Object& global_functions() {
  static const Object globals = [] {
    Object g;
    g.set("true", Value(true));
    g.set("false", Value(false));
    g.set("none", Value::none());
    g.set("True", Value(true));
    g.set("False", Value(false));
    g.set("None", Value::none());
    g.set("range", Value::function(range_function));
    g.set("namespace",
          Value::function([](const Arguments& args) { return Value::name_space(entries_of(args, "namespace")); }));
    g.set("dict", Value::function([](const Arguments& args) { return Value::object(entries_of(args, "dict")); }));
    g.set("joiner", Value::function(joiner_function));
    g.set("strftime_now", Value::function(strftime_now));
    g.set("raise_exception", Value::function([](const Arguments& args) -> Value {
            fail("the template raised an exception: {}", args.positional.empty() ? "" : args.positional[0].str());
          }));
    return g;
  }();
  return globals;
}

}  // namespace mlaserve::jinja
