#pragma once
// Internal to the Jinja interpreter: the lexer's tokens (text/jinja_lex.cpp) that the parser
// (text/jinja_parse.cpp) reads.
#include <string>
#include <vector>

#include "text/jinja_value.h"

namespace vkspec::jinja {

struct Token {
  enum Type { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, End } type;
  std::string text;
  Value value;   // String, Int, Float
  int line = 0, col = 0;
};

[[noreturn]] void fail_at(int line, int col, const std::string& msg);   // Error("line L, column C: msg")

// The tokens of a newline-normalized template: text, tag delimiters and the expressions inside tags, with
// jinja2's whitespace rules applied (see jinja_lex.cpp).
std::vector<Token> lex(const std::string& source);

}  // namespace vkspec::jinja
