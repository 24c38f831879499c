// Lexer of the Jinja subset (text/jinja.h). The whitespace rules are jinja2's lexer's with
// trim_blocks and lstrip_blocks (jinja2/lexer.py, Lexer.tokeniter):
//   - newlines are normalized to \n and one trailing newline of the source is dropped;
//   - `{%-`/`{{-`/`{#-` strip all whitespace before the tag, `-%}`/`-}}`/`-#}` all whitespace after it;
//   - lstrip_blocks: spaces and tabs between the start of a line and `{%` or `{#` are removed (not before
//     `{{`, and not with `{%+`);
//   - trim_blocks: one newline right after `%}` or `#}` is removed (not after `+%}`).
#include <cstring>

#include "text/jinja_lex.h"
#include "core/utf8.h"

namespace vkspec::jinja {

void fail_at(int line, int col, const std::string& msg) {
  throw Error("line " + std::to_string(line) + ", column " + std::to_string(col) + ": " + msg);
}

namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

class Lexer {
 public:
  explicit Lexer(const std::string& src) : s_(src) {}

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < s_.size()) {
      size_t p = s_.find('{', pos_);
      while (p != std::string::npos && p + 1 < s_.size() && !strchr("{%#", s_[p + 1])) p = s_.find('{', p + 1);
      if (p == std::string::npos || p + 1 >= s_.size()) {
        text(s_.substr(pos_));
        break;
      }
      std::string data = s_.substr(pos_, p - pos_);
      const char kind = s_[p + 1];
      const char sign = p + 2 < s_.size() && (s_[p + 2] == '-' || s_[p + 2] == '+') ? s_[p + 2] : 0;
      if (sign == '-') {
        size_t e = data.size();
        while (e > 0 && is_ws(data[e - 1])) --e;
        data.resize(e);
      } else if (sign != '+' && kind != '{') {   // lstrip_blocks
        const size_t l = data.rfind('\n') == std::string::npos ? 0 : data.rfind('\n') + 1;
        bool blank = l < data.size();
        for (size_t k = l; k < data.size(); ++k) blank &= is_ws(data[k]);
        if ((l > 0 || line_starting) && blank) data.resize(l);
      }
      text(data);
      advance_to(p);
      const int tag_line = line_, tag_col = col_;
      advance_to(p + 2 + (sign ? 1 : 0));
      if (kind == '#') {
        line_starting = comment(tag_line, tag_col);
        continue;
      }
      if (kind == '%' && raw_block(tag_line, tag_col, line_starting)) continue;
      out_.push_back({kind == '{' ? Token::VarBegin : Token::BlockBegin, "", {}, tag_line, tag_col});
      line_starting = inside_tag(kind == '{', tag_line, tag_col);
    }
    out_.push_back({Token::End, "", {}, line_, col_});
    return std::move(out_);
  }

 private:
  void advance_to(size_t p) {
    for (; pos_ < p; ++pos_) {
      if (s_[pos_] == '\n') ++line_, col_ = 1;
      else ++col_;
    }
  }
  void text(const std::string& t) {
    if (!t.empty()) out_.push_back({Token::Text, t, {}, line_, col_});
  }
  // After an end tag at pos_ of `len` characters: '-' strips following whitespace; trim_blocks one newline.
  // Returns whether the consumed text ended with a newline (jinja2's line_starting).
  bool end_tag(size_t len, char sign, bool trim_newline) {
    advance_to(pos_ + len);
    if (sign == '-') {
      size_t e = pos_;
      while (e < s_.size() && is_ws(s_[e])) ++e;
      const bool nl = e > pos_ && s_[e - 1] == '\n';
      advance_to(e);
      return nl;
    }
    if (sign != '+' && trim_newline && pos_ < s_.size() && s_[pos_] == '\n') {
      advance_to(pos_ + 1);
      return true;
    }
    return false;
  }
  bool comment(int line, int col) {
    for (size_t e = s_.find("#}", pos_); e != std::string::npos; e = s_.find("#}", e + 1)) {
      const char sign = e > pos_ && (s_[e - 1] == '-' || s_[e - 1] == '+') ? s_[e - 1] : 0;
      advance_to(sign ? e - 1 : e);
      return end_tag(sign ? 3 : 2, sign, true);
    }
    fail_at(line, col, "missing end of comment tag");
  }
  // {% raw %}...{% endraw %}: the text between is literal. Returns false when the tag is not `raw`.
  bool raw_block(int line, int col, bool& line_starting) {
    size_t q = pos_;
    while (q < s_.size() && is_ws(s_[q])) ++q;
    if (s_.compare(q, 3, "raw") != 0) return false;
    q += 3;
    while (q < s_.size() && is_ws(s_[q])) ++q;
    const char sign = q < s_.size() && (s_[q] == '-' || s_[q] == '+') ? s_[q] : 0;
    if (s_.compare(q + (sign ? 1 : 0), 2, "%}") != 0) return false;
    advance_to(q);
    end_tag(sign ? 3 : 2, sign, true);
    for (size_t e = s_.find("{%", pos_); e != std::string::npos; e = s_.find("{%", e + 1)) {
      size_t r = e + 2;
      const char open_sign = r < s_.size() && (s_[r] == '-' || s_[r] == '+') ? s_[r] : 0;
      if (open_sign) ++r;
      while (r < s_.size() && is_ws(s_[r])) ++r;
      if (s_.compare(r, 6, "endraw") != 0) continue;
      r += 6;
      while (r < s_.size() && is_ws(s_[r])) ++r;
      const char close_sign = r < s_.size() && (s_[r] == '-' || s_[r] == '+') ? s_[r] : 0;
      if (s_.compare(r + (close_sign ? 1 : 0), 2, "%}") != 0) continue;
      std::string data = s_.substr(pos_, e - pos_);
      if (open_sign == '-') {
        while (!data.empty() && is_ws(data.back())) data.pop_back();
      } else if (open_sign != '+') {
        const size_t l = data.rfind('\n') == std::string::npos ? 0 : data.rfind('\n') + 1;
        bool blank = l < data.size();
        for (size_t k = l; k < data.size(); ++k) blank &= is_ws(data[k]);
        if (blank) data.resize(l);
      }
      text(data);
      advance_to(r);
      line_starting = end_tag(close_sign ? 3 : 2, close_sign, true);
      return true;
    }
    fail_at(line, col, "missing end of raw directive");
  }
  // Tokens up to the end of a {{ }} or {% %} tag; returns line_starting after it.
  bool inside_tag(bool variable, int line, int col) {
    int balance = 0;
    while (true) {
      while (pos_ < s_.size() && is_ws(s_[pos_])) advance_to(pos_ + 1);
      if (pos_ >= s_.size()) fail_at(line, col, variable ? "unexpected end of template: '}}' is missing" : "unexpected end of template: '%}' is missing");
      const char* end = variable ? "}}" : "%}";
      if (balance == 0) {
        if (s_.compare(pos_, 2, end) == 0) {
          out_.push_back({variable ? Token::VarEnd : Token::BlockEnd, "", {}, line_, col_});
          return end_tag(2, 0, !variable);
        }
        if ((s_[pos_] == '-' || s_[pos_] == '+') && s_.compare(pos_ + 1, 2, end) == 0 && !(variable && s_[pos_] == '+')) {
          out_.push_back({variable ? Token::VarEnd : Token::BlockEnd, "", {}, line_, col_});
          return end_tag(3, s_[pos_], !variable);
        }
      }
      const int tl = line_, tc = col_;
      const char c = s_[pos_];
      if (isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = pos_;
        while (e < s_.size() && (isalnum(static_cast<unsigned char>(s_[e])) || s_[e] == '_')) ++e;
        out_.push_back({Token::Name, s_.substr(pos_, e - pos_), {}, tl, tc});
        advance_to(e);
      } else if (isdigit(static_cast<unsigned char>(c))) {
        number(tl, tc);
      } else if (c == '\'' || c == '"') {
        string_literal(tl, tc);
      } else {
        static const char* ops[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]", "(", ")",
                                    "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"};
        const char* op = nullptr;
        for (const char* o : ops)
          if (s_.compare(pos_, strlen(o), o) == 0) { op = o; break; }
        if (!op) fail_at(tl, tc, std::string("unexpected character '") + c + "'");
        if (strchr("([{", op[0])) ++balance;
        if (strchr(")]}", op[0]) && --balance < 0) fail_at(tl, tc, std::string("unexpected '") + op + "'");
        out_.push_back({Token::Op, op, {}, tl, tc});
        advance_to(pos_ + strlen(op));
      }
    }
  }
  void number(int line, int col) {
    size_t e = pos_;
    auto digits = [&] { while (e < s_.size() && (isdigit(static_cast<unsigned char>(s_[e])) || s_[e] == '_')) ++e; };
    digits();
    bool is_float = false;
    if (e + 1 < s_.size() && s_[e] == '.' && isdigit(static_cast<unsigned char>(s_[e + 1]))) { ++e; digits(); is_float = true; }
    if (e < s_.size() && (s_[e] == 'e' || s_[e] == 'E')) {
      size_t x = e + 1;
      if (x < s_.size() && (s_[x] == '+' || s_[x] == '-')) ++x;
      if (x < s_.size() && isdigit(static_cast<unsigned char>(s_[x]))) { e = x; digits(); is_float = true; }
    }
    std::string t;
    for (size_t k = pos_; k < e; ++k) if (s_[k] != '_') t += s_[k];
    Token tok{is_float ? Token::Float : Token::Int, t, {}, line, col};
    if (is_float) {
      tok.value = Value::number(strtod(t.c_str(), nullptr));
    } else {
      errno = 0;
      const long long v = strtoll(t.c_str(), nullptr, 10);
      if (errno == ERANGE) fail_at(line, col, "integer literal " + t + " is too large");
      tok.value = Value::integer(v);
    }
    out_.push_back(tok);
    advance_to(e);
  }
  // Python's string escapes (jinja2 decodes literals with unicode-escape).
  void string_literal(int line, int col) {
    const char q = s_[pos_];
    std::string v;
    size_t e = pos_ + 1;
    for (;; ++e) {
      if (e >= s_.size()) fail_at(line, col, "unterminated string");
      const char c = s_[e];
      if (c == q) break;
      if (c != '\\' || e + 1 >= s_.size()) { v += c; continue; }
      const char n = s_[++e];
      auto hex = [&](int len) {
        uint32_t cp = 0;
        for (int k = 0; k < len; ++k) {
          if (e + 1 >= s_.size() || !isxdigit(static_cast<unsigned char>(s_[e + 1]))) fail_at(line, col, "truncated \\x/\\u escape in a string");
          const char h = s_[++e];
          cp = cp * 16 + uint32_t(isdigit(static_cast<unsigned char>(h)) ? h - '0' : (tolower(h) - 'a' + 10));
        }
        if (cp > 0x10ffff) fail_at(line, col, "illegal Unicode character in a string");
        utf8::append(cp, v);
      };
      switch (n) {
        case 'n': v += '\n'; break;
        case 't': v += '\t'; break;
        case 'r': v += '\r'; break;
        case 'a': v += '\a'; break;
        case 'b': v += '\b'; break;
        case 'f': v += '\f'; break;
        case 'v': v += '\v'; break;
        case '\\': v += '\\'; break;
        case '\'': v += '\''; break;
        case '"': v += '"'; break;
        case '\n': break;
        case 'x': hex(2); break;
        case 'u': hex(4); break;
        case 'U': hex(8); break;
        default:
          if (n >= '0' && n <= '7') {
            uint32_t cp = uint32_t(n - '0');
            for (int k = 0; k < 2 && e + 1 < s_.size() && s_[e + 1] >= '0' && s_[e + 1] <= '7'; ++k) cp = cp * 8 + uint32_t(s_[++e] - '0');
            utf8::append(cp, v);
          } else {
            v += '\\';
            v += n;
          }
      }
    }
    out_.push_back({Token::String, "", Value::str(v), line, col});
    advance_to(e + 1);
  }

  const std::string& s_;
  size_t pos_ = 0;
  int line_ = 1, col_ = 1;
  std::vector<Token> out_;
};

}  // namespace

std::vector<Token> lex(const std::string& source) { return Lexer(source).run(); }

}  // namespace vkspec::jinja
