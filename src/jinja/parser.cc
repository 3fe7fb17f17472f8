// Lexer and recursive-descent parser. Operator precedence, loosest first, as Jinja2's:
// a if b else c; or; and; not; comparisons and in; + - ~; * / // %; **; is; |; unary - +;
// calls, attributes and subscripts.
#include <algorithm>
#include <charconv>
#include <string_view>

#include "base/error.h"
#include "jinja/ast.h"
#include "jinja/chars.h"

namespace mlaserve::jinja {
namespace {

struct Token {
  enum class Kind {
    Text,
    OpenStatement,
    CloseStatement,
    OpenExpression,
    CloseExpression,
    Name,
    Number,
    String,
    Operator,
    End
  };
  Kind kind;
  std::string text;
  int line;
};

[[noreturn]] void fail_at(int line, const std::string& message) {
  throw Error(fmt::format("chat template line {}: {}", line, message));
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

class Lexer {
 public:
  explicit Lexer(std::string_view source) : source_(source) {
    if (!source_.empty() && source_.back() == '\n') source_.remove_suffix(1);
  }

  std::vector<Token> run() {
    while (pos_ < source_.size()) {
      lex_text();
      if (pos_ >= source_.size()) break;
      lex_tag();
    }
    tokens_.push_back({Token::Kind::End, "", line_});
    return std::move(tokens_);
  }

 private:
  void advance(size_t count) {
    for (size_t i = 0; i < count && pos_ < source_.size(); ++i, ++pos_)
      if (source_[pos_] == '\n') ++line_;
  }

  // The text up to the next {{, {% or {#, with lstrip_blocks and a {%- / {{- / {#- applied.
  void lex_text() {
    size_t end = pos_;
    while ((end = source_.find('{', end)) != std::string_view::npos) {
      const char next = end + 1 < source_.size() ? source_[end + 1] : '\0';
      if (next == '%' || next == '{' || next == '#') break;
      ++end;
    }
    if (end == std::string_view::npos) end = source_.size();
    std::string text(source_.substr(pos_, end - pos_));
    const int line = line_;
    advance(end - pos_);
    if (end < source_.size()) {
      const char tag = source_[end + 1];
      const char modifier = end + 2 < source_.size() ? source_[end + 2] : '\0';
      if ((tag == '%' || tag == '#') && modifier != '+') lstrip_block(text, end);  // {%+ keeps them
      if (modifier == '-')
        while (!text.empty() && is_space(text.back())) text.pop_back();
    }
    if (!text.empty()) tokens_.push_back({Token::Kind::Text, std::move(text), line});
  }

  // lstrip_blocks: spaces and tabs between the start of a line and a block tag go.
  void lstrip_block(std::string& text, size_t tag_start) const {
    size_t start = tag_start;
    while (start > 0 && (source_[start - 1] == ' ' || source_[start - 1] == '\t')) --start;
    if (start > 0 && source_[start - 1] != '\n') return;
    const size_t blanks = tag_start - start;
    text.resize(text.size() - std::min(blanks, text.size()));
  }

  void skip_whitespace() {
    while (pos_ < source_.size() && is_space(source_[pos_])) advance(1);
  }

  void lex_tag() {
    const char tag = source_[pos_ + 1];
    if (tag == '#') return lex_comment();
    const bool statement = tag == '%';
    if (statement && lex_raw()) return;
    tokens_.push_back({statement ? Token::Kind::OpenStatement : Token::Kind::OpenExpression, "", line_});
    advance(source_[pos_ + 2] == '-' || (statement && source_[pos_ + 2] == '+') ? 3 : 2);
    int curly_depth = 0;
    while (true) {
      skip_whitespace();
      if (pos_ >= source_.size()) fail_at(line_, statement ? "missing %}" : "missing }}");
      const std::string_view rest = source_.substr(pos_);
      const std::string_view close = statement ? "%}" : "}}";
      const bool dash = rest.size() >= 3 && rest[0] == '-' && rest.substr(1, 2) == close;
      const bool plus =
          statement && rest.size() >= 3 && rest[0] == '+' && rest.substr(1, 2) == close;  // no trim_blocks
      if (dash || plus || (rest.substr(0, 2) == close && (statement || curly_depth == 0))) {
        tokens_.push_back({statement ? Token::Kind::CloseStatement : Token::Kind::CloseExpression, "", line_});
        advance(dash || plus ? 3 : 2);
        if (dash)
          skip_whitespace();
        else if (statement && !plus && pos_ < source_.size() && source_[pos_] == '\n')
          advance(1);  // trim_blocks
        return;
      }
      lex_expression_token(curly_depth);
    }
  }

  // The tag "{%[-+] name [-+]%}" at `at`: the index after it and its modifiers, or npos.
  struct BlockTag {
    size_t end = std::string_view::npos;
    char open_modifier = 0, close_modifier = 0;
  };
  BlockTag block_tag(size_t at, std::string_view name) const {
    BlockTag tag;
    if (source_.substr(at, 2) != "{%") return tag;
    size_t i = at + 2;
    if (i < source_.size() && (source_[i] == '-' || source_[i] == '+')) tag.open_modifier = source_[i++];
    while (i < source_.size() && is_space(source_[i])) ++i;
    if (source_.substr(i, name.size()) != name) return tag;
    i += name.size();
    while (i < source_.size() && is_space(source_[i])) ++i;
    if (i < source_.size() && (source_[i] == '-' || source_[i] == '+')) tag.close_modifier = source_[i++];
    if (source_.substr(i, 2) != "%}") return tag;
    tag.end = i + 2;
    return tag;
  }

  // {% raw %}...{% endraw %}: the text between as it is (the tags' whitespace control applied).
  bool lex_raw() {
    const BlockTag open = block_tag(pos_, "raw");
    if (open.end == std::string_view::npos) return false;
    size_t close_at = open.end;
    BlockTag close;
    while ((close_at = source_.find("{%", close_at)) != std::string_view::npos) {
      close = block_tag(close_at, "endraw");
      if (close.end != std::string_view::npos) break;
      close_at += 2;
    }
    if (close_at == std::string_view::npos) fail_at(line_, "'raw' is never closed");
    const int line = line_;
    size_t start = open.end;
    if (open.close_modifier == '-') {
      while (start < close_at && is_space(source_[start])) ++start;
    } else if (open.close_modifier != '+' && start < close_at && source_[start] == '\n') {
      ++start;  // trim_blocks
    }
    std::string text(source_.substr(start, close_at - start));
    if (close.open_modifier == '-') {
      while (!text.empty() && is_space(text.back())) text.pop_back();
    } else if (close.open_modifier != '+') {
      lstrip_block(text, close_at);
    }
    if (!text.empty()) tokens_.push_back({Token::Kind::Text, std::move(text), line});
    advance(close.end - pos_);
    if (close.close_modifier == '-')
      skip_whitespace();
    else if (close.close_modifier != '+' && pos_ < source_.size() && source_[pos_] == '\n')
      advance(1);
    return true;
  }

  void lex_comment() {
    const size_t end = source_.find("#}", pos_ + 2);
    if (end == std::string_view::npos) fail_at(line_, "missing #} after a comment");
    const bool strip_after = end > pos_ + 2 && source_[end - 1] == '-';
    advance(end + 2 - pos_);
    if (strip_after)
      skip_whitespace();
    else if (pos_ < source_.size() && source_[pos_] == '\n')
      advance(1);  // trim_blocks
  }

  void lex_expression_token(int& curly_depth) {
    const char c = source_[pos_];
    if (c == '\'' || c == '"') return lex_string(c);
    if (is_digit(c)) return lex_number();
    if (is_word(c)) {
      size_t end = pos_;
      while (end < source_.size() && is_word(source_[end])) ++end;
      tokens_.push_back({Token::Kind::Name, std::string(source_.substr(pos_, end - pos_)), line_});
      return advance(end - pos_);
    }
    static constexpr std::string_view kOperators[] = {"**", "//", "==", "!=", "<=", ">=", "(", ")", "[",
                                                      "]",  "{",  "}",  ",",  ".",  ":",  "|", "=", "<",
                                                      ">",  "+",  "-",  "~",  "*",  "/",  "%"};
    for (std::string_view op : kOperators) {
      if (source_.substr(pos_, op.size()) != op) continue;
      if (op == "{") ++curly_depth;
      if (op == "}") --curly_depth;
      tokens_.push_back({Token::Kind::Operator, std::string(op), line_});
      return advance(op.size());
    }
    fail_at(line_, fmt::format("unexpected character '{}'", c));
  }

  // Digits with single underscores between them, from pos.
  size_t digits_end(size_t pos, bool (*digit)(char)) const {
    while (pos < source_.size() &&
           (digit(source_[pos]) || (source_[pos] == '_' && pos + 1 < source_.size() && digit(source_[pos + 1]))))
      ++pos;
    return pos;
  }

  // As Jinja2's lexer: 0x, 0o and 0b integers, decimal integers, and floats with a fraction
  // and/or an exponent; underscores between digits. An integer right after '.' is an index
  // (a.0.1) and takes no fraction.
  void lex_number() {
    static const auto decimal = [](char c) { return is_digit(c); };
    const std::string_view rest = source_.substr(pos_);
    size_t end = pos_;
    if (rest.size() > 2 && rest[0] == '0' && std::string_view("xXoObB").find(rest[1]) != std::string_view::npos) {
      static const auto hex = [](char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); };
      end = digits_end(pos_ + 2, hex);
    } else {
      end = digits_end(pos_, decimal);
      const bool after_dot =
          !tokens_.empty() && tokens_.back().kind == Token::Kind::Operator && tokens_.back().text == ".";
      if (!after_dot && end + 1 < source_.size() && source_[end] == '.' && is_digit(source_[end + 1]))
        end = digits_end(end + 1, decimal);
      if (!after_dot && end < source_.size() && (source_[end] == 'e' || source_[end] == 'E')) {
        size_t exponent = end + 1;
        if (exponent < source_.size() && (source_[exponent] == '+' || source_[exponent] == '-')) ++exponent;
        if (exponent < source_.size() && is_digit(source_[exponent])) end = digits_end(exponent, decimal);
      }
    }
    tokens_.push_back({Token::Kind::Number, std::string(source_.substr(pos_, end - pos_)), line_});
    advance(end - pos_);
  }

  void lex_string(char quote) {
    const int line = line_;
    std::string value;
    advance(1);
    while (true) {
      if (pos_ >= source_.size()) fail_at(line, "unterminated string");
      const char c = source_[pos_];
      if (c == quote) break;
      advance(1);
      if (c != '\\') {
        value += c;
        continue;
      }
      if (pos_ >= source_.size()) fail_at(line, "unterminated string");
      const char escaped = source_[pos_];
      advance(1);
      switch (escaped) {
        case 'n': value += '\n'; break;
        case 't': value += '\t'; break;
        case 'r': value += '\r'; break;
        case 'b': value += '\b'; break;
        case 'f': value += '\f'; break;
        case 'v': value += '\v'; break;
        case '\'':
        case '"':
        case '\\': value += escaped; break;
        case 'x':
        case 'u': append_hex_escape(value, escaped == 'x' ? 2 : 4, line); break;
        default: fail_at(line, fmt::format("unknown escape \\{} in a string", escaped));
      }
    }
    advance(1);
    tokens_.push_back({Token::Kind::String, std::move(value), line});
  }

  void append_hex_escape(std::string& value, size_t digits, int line) {
    const std::string hex(source_.substr(pos_, digits));
    if (hex.size() != digits || hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
      fail_at(line, "bad hexadecimal escape in a string");
    advance(digits);
    const auto code = uint32_t(std::stoul(hex, nullptr, 16));
    if (code < 0x80) {
      value += char(code);
    } else if (code < 0x800) {
      value += char(0xC0 | (code >> 6));
      value += char(0x80 | (code & 0x3F));
    } else {
      value += char(0xE0 | (code >> 12));
      value += char(0x80 | ((code >> 6) & 0x3F));
      value += char(0x80 | (code & 0x3F));
    }
  }

  std::string_view source_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  NodeList run() {
    NodeList program;
    while (peek().kind != Token::Kind::End) append_statement(program);
    return program;
  }

 private:
  using Kind = Node::Kind;
  using TokenKind = Token::Kind;

  // Nesting (brackets, operators, blocks) past this is an error, not a stack overflow of this
  // recursive-descent parser or of the renderer that walks its tree.
  static constexpr int kMaxNesting = 200;
  class Nested {
   public:
    explicit Nested(Parser& parser) : parser_(parser) {
      if (++parser_.nesting_ > kMaxNesting) parser_.fail(fmt::format("nested more than {} levels deep", kMaxNesting));
    }
    ~Nested() { --parser_.nesting_; }
    Nested(const Nested&) = delete;
    Nested& operator=(const Nested&) = delete;

   private:
    Parser& parser_;
  };
  int nesting_ = 0;

  const Token& peek(size_t ahead = 0) const { return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)]; }
  const Token& next() {
    const Token& token = peek();
    if (token.kind != TokenKind::End) ++pos_;
    return token;
  }
  bool at_operator(std::string_view op) const { return peek().kind == TokenKind::Operator && peek().text == op; }
  bool at_name(std::string_view name, size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::Name && peek(ahead).text == name;
  }
  [[noreturn]] void fail(const std::string& message) const { fail_at(peek().line, message); }
  void expect_operator(std::string_view op) {
    if (!at_operator(op)) fail(fmt::format("expected '{}', found '{}'", op, describe(peek())));
    next();
  }
  void expect_close() {
    if (peek().kind != TokenKind::CloseStatement) fail(fmt::format("expected %}}, found '{}'", describe(peek())));
    next();
  }
  static std::string describe(const Token& token) {
    switch (token.kind) {
      case TokenKind::End: return "end of template";
      case TokenKind::CloseStatement: return "%}";
      case TokenKind::CloseExpression: return "}}";
      default: return token.text;
    }
  }
  NodePtr node(Kind kind) const { return std::make_unique<Node>(kind, peek().line); }

  // Is the next tag {% one of names %}?
  bool at_statement(std::initializer_list<std::string_view> names) const {
    if (peek().kind != TokenKind::OpenStatement) return false;
    for (std::string_view name : names)
      if (at_name(name, 1)) return true;
    return false;
  }

  // Statements until {% one of `ends` %}; the end tag's name is left to the caller.
  NodeList statements_until(std::initializer_list<std::string_view> ends, std::string_view opener) {
    NodeList body;
    while (!at_statement(ends)) {
      if (peek().kind == TokenKind::End) fail(fmt::format("'{}' is never closed", opener));
      append_statement(body);
    }
    next();  // {%
    return body;
  }
  void end_tag(std::string_view name) {
    if (!at_name(name)) fail(fmt::format("expected '{}'", name));
    next();
    expect_close();
  }

  void append_statement(NodeList& out) {
    const Token& token = peek();
    if (token.kind == TokenKind::Text) {
      auto text = node(Kind::Text);
      text->name = next().text;
      out.push_back(std::move(text));
    } else if (token.kind == TokenKind::OpenExpression) {
      next();
      auto output = node(Kind::Output);
      output->children.push_back(expression());
      if (peek().kind != TokenKind::CloseExpression) fail(fmt::format("expected }}}}, found '{}'", describe(peek())));
      next();
      out.push_back(std::move(output));
    } else if (token.kind == TokenKind::OpenStatement) {
      next();
      out.push_back(statement());
    } else {
      fail(fmt::format("unexpected '{}'", describe(token)));
    }
  }

  NodePtr statement() {
    const Nested nested(*this);
    if (peek().kind != TokenKind::Name) fail("expected a statement name after {%");
    const std::string name = next().text;
    if (name == "if") return if_statement();
    if (name == "for") return for_statement();
    if (name == "set") return set_statement();
    if (name == "macro") return macro_statement();
    if (name == "call") return call_statement();
    if (name == "filter") return filter_statement();
    if (name == "with") return with_statement();
    if (name == "break" || name == "continue" || name == "generation" || name == "endgeneration") {
      auto control = node(name == "break" ? Kind::Break : name == "continue" ? Kind::Continue : Kind::Nothing);
      expect_close();
      return control;
    }
    fail(fmt::format("unsupported statement '{}'", name));
  }

  NodePtr if_statement() {
    auto result = node(Kind::If);
    result->children.push_back(expression());
    expect_close();
    result->body = statements_until({"elif", "else", "endif"}, "if");
    if (at_name("elif")) {
      next();
      result->alternate.push_back(if_statement());
      return result;  // the nested if consumed the endif
    }
    if (at_name("else")) {
      next();
      expect_close();
      result->alternate = statements_until({"endif"}, "else");
    }
    end_tag("endif");
    return result;
  }

  NodePtr for_statement() {
    auto result = node(Kind::For);
    result->children.push_back(target_sequence());
    if (!at_name("in")) fail("expected 'in' after the loop variable");
    next();
    result->children.push_back(or_expression());  // the loop's "if" filters it: no conditional expression here
    if (at_name("if")) {
      next();
      result->children.push_back(or_expression());
    }
    if (at_name("recursive")) fail("recursive loops are not supported");
    expect_close();
    result->body = statements_until({"endfor", "else"}, "for");
    if (at_name("else")) {
      next();
      expect_close();
      result->alternate = statements_until({"endfor"}, "else");
    }
    end_tag("endfor");
    return result;
  }

  // A loop or set target: a name, names separated by commas, or (for set) ns.attribute.
  NodePtr target_sequence() {
    NodePtr first = postfix(primary());
    if (!at_operator(",")) return first;
    auto tuple = node(Kind::Tuple);
    tuple->children.push_back(std::move(first));
    while (at_operator(",")) {
      next();
      tuple->children.push_back(primary());
    }
    return tuple;
  }

  NodePtr set_statement() {
    auto result = node(Kind::Set);
    NodePtr target = target_sequence();
    const auto is_name = [](const Node& n) { return n.kind == Kind::Name; };
    bool valid = is_name(*target) || (target->kind == Kind::Attribute && is_name(*target->children[0]));
    if (target->kind == Kind::Tuple) {
      valid = true;
      for (const auto& item : target->children) valid = valid && is_name(*item);
    }
    if (!valid) fail("set needs a name, names, or namespace.attribute to assign");
    result->children.push_back(std::move(target));
    if (at_operator("=")) {
      next();
      result->children.push_back(expression_sequence());
      expect_close();
      return result;
    }
    expect_close();
    result->body = statements_until({"endset"}, "set");
    end_tag("endset");
    return result;
  }

  NodePtr macro_statement() {
    auto result = node(Kind::Macro);
    if (peek().kind != TokenKind::Name) fail("expected the macro's name");
    result->name = next().text;
    result->children = parameters();
    expect_close();
    result->body = statements_until({"endmacro"}, "macro");
    end_tag("endmacro");
    return result;
  }

  // (a, b=default, ...)
  NodeList parameters() {
    NodeList list;
    expect_operator("(");
    while (!at_operator(")")) {
      if (peek().kind != TokenKind::Name) fail("expected a parameter name");
      auto parameter = node(Kind::Name);
      parameter->name = next().text;
      if (at_operator("=")) {
        next();
        auto with_default = node(Kind::KeywordArgument);
        with_default->name = parameter->name;
        with_default->children.push_back(expression());
        parameter = std::move(with_default);
      }
      list.push_back(std::move(parameter));
      if (!at_operator(",")) break;
      next();
    }
    expect_operator(")");
    return list;
  }

  NodePtr call_statement() {
    auto result = node(Kind::CallBlock);
    NodeList caller_parameters;
    if (at_operator("(")) caller_parameters = parameters();
    NodePtr call = postfix(primary());
    if (call->kind != Kind::Call) fail("{% call %} needs a macro call");
    result->children.push_back(std::move(call));
    for (auto& parameter : caller_parameters) result->children.push_back(std::move(parameter));
    expect_close();
    result->body = statements_until({"endcall"}, "call");
    end_tag("endcall");
    return result;
  }

  // {% with a = 1, b = x %}...{% endwith %}: names for the body only.
  NodePtr with_statement() {
    auto result = node(Kind::With);
    while (peek().kind == TokenKind::Name) {
      auto target = node(Kind::Name);
      target->name = next().text;
      expect_operator("=");
      result->children.push_back(std::move(target));
      result->children.push_back(expression());
      if (!at_operator(",")) break;
      next();
    }
    expect_close();
    result->body = statements_until({"endwith"}, "with");
    end_tag("endwith");
    return result;
  }

  NodePtr filter_statement() {
    auto result = node(Kind::FilterBlock);
    auto filter = node(Kind::Filter);
    filter->children.push_back(nullptr);
    filter_name_and_arguments(*filter);
    result->children.push_back(std::move(filter));
    expect_close();
    result->body = statements_until({"endfilter"}, "filter");
    end_tag("endfilter");
    return result;
  }

  // a, b, c as a tuple (set x = 1, 2); one expression alone as itself.
  NodePtr expression_sequence() {
    NodePtr first = expression();
    if (!at_operator(",")) return first;
    auto tuple = node(Kind::Tuple);
    tuple->children.push_back(std::move(first));
    while (at_operator(",")) {
      next();
      tuple->children.push_back(expression());
    }
    return tuple;
  }

  NodePtr expression() {
    const Nested nested(*this);
    NodePtr value = or_expression();
    if (!at_name("if")) return value;
    next();
    NodePtr condition = or_expression();
    if (!at_name("else")) {
      auto select = node(Kind::Select);
      select->children.push_back(std::move(value));
      select->children.push_back(std::move(condition));
      return select;
    }
    next();
    auto ternary = node(Kind::Ternary);
    ternary->children.push_back(std::move(condition));
    ternary->children.push_back(std::move(value));
    ternary->children.push_back(expression());
    return ternary;
  }

  NodePtr binary(std::string op, NodePtr left, NodePtr right) {
    auto result = std::make_unique<Node>(Kind::Binary, left->line);
    result->name = std::move(op);
    result->children.push_back(std::move(left));
    result->children.push_back(std::move(right));
    return result;
  }

  NodePtr or_expression() {
    NodePtr left = and_expression();
    while (at_name("or")) {
      next();
      left = binary("or", std::move(left), and_expression());
    }
    return left;
  }

  NodePtr and_expression() {
    NodePtr left = not_expression();
    while (at_name("and")) {
      next();
      left = binary("and", std::move(left), not_expression());
    }
    return left;
  }

  NodePtr not_expression() {
    const Nested nested(*this);
    if (!at_name("not")) return comparison();
    auto result = node(Kind::Unary);
    next();
    result->name = "not";
    result->children.push_back(not_expression());
    return result;
  }

  // a < b < c is (a < b) and (b < c), as Python chains comparisons (b is evaluated twice; template
  // expressions have no side effects to repeat).
  NodePtr comparison() {
    NodePtr left = additive();
    NodePtr chain;
    const Node* last = nullptr;  // the previous comparison's right operand
    while (true) {
      std::string op;
      if (at_name("not") && at_name("in", 1)) {
        next();
        op = "not in";
      } else if (at_name("in")) {
        op = "in";
      } else if (peek().kind == TokenKind::Operator &&
                 (peek().text == "==" || peek().text == "!=" || peek().text == "<" || peek().text == ">" ||
                  peek().text == "<=" || peek().text == ">=")) {
        op = peek().text;
      } else {
        return chain ? std::move(chain) : std::move(left);
      }
      next();
      if (!chain) {
        chain = binary(op, std::move(left), additive());
        last = chain->children[1].get();
        continue;
      }
      NodePtr again = copy_expression(*last);
      NodePtr next_comparison = binary(op, std::move(again), additive());
      last = next_comparison->children[1].get();
      chain = binary("and", std::move(chain), std::move(next_comparison));
    }
  }

  // A copy of an expression node, for the middle operand of a chained comparison.
  static NodePtr copy_expression(const Node& original) {
    auto copy = std::make_unique<Node>(original.kind, original.line);
    copy->name = original.name;
    copy->value = original.value;
    copy->negate = original.negate;
    for (const NodePtr& child : original.children) copy->children.push_back(child ? copy_expression(*child) : nullptr);
    return copy;
  }

  NodePtr additive() {
    NodePtr left = multiplicative();
    while (at_operator("+") || at_operator("-") || at_operator("~")) {
      const std::string op = next().text;
      left = binary(op, std::move(left), multiplicative());
    }
    return left;
  }

  NodePtr multiplicative() {
    NodePtr left = power();
    while (at_operator("*") || at_operator("/") || at_operator("//") || at_operator("%")) {
      const std::string op = next().text;
      left = binary(op, std::move(left), power());
    }
    return left;
  }

  NodePtr power() {
    NodePtr left = test();
    while (at_operator("**")) {
      next();
      left = binary("**", std::move(left), test());
    }
    return left;
  }

  NodePtr test() {
    NodePtr operand = filtered();
    while (at_name("is")) {
      auto result = node(Kind::Test);
      next();
      if (at_name("not")) {
        next();
        result->negate = true;
      }
      if (peek().kind != TokenKind::Name) fail("expected a test name after 'is'");
      result->name = next().text;
      if (!known_test(result->name)) fail(fmt::format("unsupported test '{}'", result->name));
      result->children.push_back(std::move(operand));
      if (at_operator("(")) {
        append_arguments(*result);
      } else if (test_argument_follows()) {  // is divisibleby 3, is in xs: one argument, no parentheses
        result->children.push_back(postfix(primary()));
      }
      operand = std::move(result);
    }
    return operand;
  }

  // As Jinja2: a test takes one argument without parentheses when a name (other than else, or,
  // and), a literal, or a bracket follows.
  bool test_argument_follows() const {
    const Token& token = peek();
    if (token.kind == TokenKind::Name) return token.text != "else" && token.text != "or" && token.text != "and";
    return token.kind == TokenKind::Number || token.kind == TokenKind::String || at_operator("[") || at_operator("{");
  }

  NodePtr filtered() {
    NodePtr operand = unary();
    while (at_operator("|")) {
      next();
      auto filter = node(Kind::Filter);
      filter->children.push_back(std::move(operand));
      filter_name_and_arguments(*filter);
      operand = std::move(filter);
    }
    return operand;
  }

  void filter_name_and_arguments(Node& filter) {
    if (peek().kind != TokenKind::Name) fail("expected a filter name after '|'");
    filter.name = next().text;
    if (!known_filter(filter.name)) fail_at(filter.line, fmt::format("unsupported filter '{}'", filter.name));
    if (at_operator("(")) append_arguments(filter);
  }

  NodePtr unary() {
    const Nested nested(*this);
    if (!at_operator("-") && !at_operator("+")) return postfix(primary());
    auto result = node(Kind::Unary);
    result->name = next().text;
    result->children.push_back(unary());
    return result;
  }

  // (args) appended to node.children: expressions, or name=expression.
  void append_arguments(Node& call) {
    expect_operator("(");
    while (!at_operator(")")) {
      if (peek().kind == TokenKind::Name && peek(1).kind == TokenKind::Operator && peek(1).text == "=") {
        auto keyword = node(Kind::KeywordArgument);
        keyword->name = next().text;
        next();
        keyword->children.push_back(expression());
        call.children.push_back(std::move(keyword));
      } else {
        call.children.push_back(expression());
      }
      if (!at_operator(",")) break;
      next();
    }
    expect_operator(")");
  }

  NodePtr postfix(NodePtr object) {
    while (true) {
      if (at_operator(".")) {
        next();
        auto attribute = node(Kind::Attribute);
        if (peek().kind != TokenKind::Name && peek().kind != TokenKind::Number)
          fail("expected an attribute name after '.'");
        attribute->name = next().text;
        attribute->children.push_back(std::move(object));
        object = std::move(attribute);
      } else if (at_operator("[")) {
        next();
        object = subscript(std::move(object));
      } else if (at_operator("(")) {
        auto call = node(Kind::Call);
        call->children.push_back(std::move(object));
        append_arguments(*call);
        object = std::move(call);
      } else {
        return object;
      }
    }
  }

  // After '[': an index or a slice start:stop:step.
  NodePtr subscript(NodePtr object) {
    NodeList parts;
    bool slice = false;
    parts.push_back(at_operator(":") ? nullptr : expression());
    while (at_operator(":") && parts.size() < 3) {
      slice = true;
      next();
      parts.push_back(at_operator(":") || at_operator("]") ? nullptr : expression());
    }
    expect_operator("]");
    auto result = node(slice ? Kind::Slice : Kind::Index);
    result->children.push_back(std::move(object));
    for (auto& part : parts) result->children.push_back(std::move(part));
    while (slice && result->children.size() < 4) result->children.push_back(nullptr);
    return result;
  }

  // A number literal as the lexer cut it: an integer (decimal, 0x, 0o, 0b) in 64 bits, or a float.
  Value number_literal(std::string text) {
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    int base = 10;
    size_t skip = 0;
    if (text.size() > 2 && text[0] == '0' && std::string_view("xXoObB").find(text[1]) != std::string_view::npos) {
      base = text[1] == 'x' || text[1] == 'X' ? 16 : text[1] == 'o' || text[1] == 'O' ? 8 : 2;
      skip = 2;
    }
    const char* begin = text.data() + skip;
    const char* end = text.data() + text.size();
    if (base != 10 || text.find_first_of(".eE") == std::string::npos) {
      int64_t integer = 0;
      const auto [stop, error] = std::from_chars(begin, end, integer, base);
      if (error == std::errc() && stop == end) return Value(integer);
    } else {
      double number = 0;
      const auto [stop, error] = std::from_chars(begin, end, number);
      if (error == std::errc() && stop == end) return Value(number);
    }
    fail(fmt::format("number {} is not a 64-bit integer or a float", text));
  }

  NodePtr primary() {
    const Token& token = peek();
    switch (token.kind) {
      case TokenKind::Number: {
        auto literal = node(Kind::Literal);
        literal->value = number_literal(next().text);
        return literal;
      }
      case TokenKind::String: {
        auto literal = node(Kind::Literal);
        std::string text = next().text;
        while (peek().kind == TokenKind::String) text += next().text;  // adjacent literals join
        literal->value = Value(std::move(text));
        return literal;
      }
      case TokenKind::Name: {
        auto name = node(Kind::Name);
        name->name = next().text;
        return name;
      }
      case TokenKind::Operator:
        if (token.text == "(") return parenthesized();
        if (token.text == "[") return list_literal();
        if (token.text == "{") return dict_literal();
        [[fallthrough]];
      default: fail(fmt::format("unexpected '{}' in an expression", describe(token)));
    }
  }

  // (expression), or a tuple: (), (a,), (a, b).
  NodePtr parenthesized() {
    next();
    if (at_operator(")")) {
      next();
      return node(Kind::Tuple);
    }
    NodePtr inner = expression();
    if (at_operator(",")) {
      auto tuple = node(Kind::Tuple);
      tuple->children.push_back(std::move(inner));
      while (at_operator(",")) {
        next();
        if (at_operator(")")) break;
        tuple->children.push_back(expression());
      }
      inner = std::move(tuple);
    }
    expect_operator(")");
    return inner;
  }

  NodePtr list_literal() {
    auto list = node(Kind::List);
    next();
    while (!at_operator("]")) {
      list->children.push_back(expression());
      if (!at_operator(",")) break;
      next();
    }
    expect_operator("]");
    return list;
  }

  NodePtr dict_literal() {
    auto dict = node(Kind::Dict);
    next();
    while (!at_operator("}")) {
      dict->children.push_back(expression());
      expect_operator(":");
      dict->children.push_back(expression());
      if (!at_operator(",")) break;
      next();
    }
    expect_operator("}");
    return dict;
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
};

}  // namespace

NodeList parse_template(std::string_view source) { return Parser(Lexer(source).run()).run(); }

}  // namespace mlaserve::jinja
