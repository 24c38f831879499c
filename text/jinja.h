#pragma once
// A Jinja interpreter for chat templates, rendering as Hugging Face transformers does: jinja2's
// ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and the loopcontrols extension.
//   parse():  source -> Template (text/jinja_parse.cpp: lexer with jinja2's whitespace rules, and a
//             recursive-descent parser with jinja2's operator precedence)
//   render(): Template + variables -> text (text/jinja_render.cpp: statements, expressions, scopes;
//             text/jinja_builtins.cpp: filters, tests, methods and global functions)
// Errors are vkspec::Error whose message starts with "line L, column C:" of the template.
// Bounded (Limits): output and string sizes, loop iterations plus calls, the work of operations on values
// (what each visits or builds), call depth, expression nesting, so a hostile template ends with an error
// instead of hanging or exhausting memory.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "text/jinja_value.h"

namespace vkspec::jinja {

struct Limits {
  size_t max_output_bytes = kMaxStringBytes;   // the rendered text, and any one string a template builds
  uint64_t max_steps = 1'000'000;        // loop iterations and macro calls
  // Value::weight of what operations visit (compare, serialize, sort, search) or build (lists, dicts,
  // strings): a render that copies a growing string or list each iteration is quadratic, and a value that
  // shares its parts can be exponentially larger than its memory. (64M: about a second here.)
  uint64_t max_work = 64'000'000;
  uint32_t max_call_depth = 100;         // nested macro calls
};
constexpr uint32_t kMaxNesting = 200;    // parser: nested expressions and statements
constexpr int64_t kMaxRange = 100000;    // jinja2's sandbox: range() larger than this is refused

struct Expr;
struct Node;
using ExprPtr = std::unique_ptr<Expr>;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Expr {
  enum class Kind {
    Literal,   // value
    Name,      // name
    List, Tuple, DictLit,   // args (DictLit: key, value, key, value, ...)
    GetAttr,   // args[0].name
    GetItem,   // args[0][args[1]]
    Slice,     // args[0][args[1]:args[2]:args[3]] (null parts omitted)
    Call,      // args[0](args[1..], kwargs)
    Filter,    // args[0] | name(args[1..], kwargs); args[0] null inside {% filter %}
    Test,      // args[0] is [not] name(args[1..])
    Unary,     // op args[0]: "-", "+", "not"
    Binary,    // args[0] op args[1]: + - * / // % ** ~ == != < <= > >= in notin and or
    Cond,      // args[1] if args[0] else args[2] (args[2] may be null)
  };
  Kind kind;
  int line = 0, col = 0;
  Value value;
  std::string name;   // Name, GetAttr, Call/Filter/Test name, operator
  bool negated = false;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

struct Node {
  enum class Kind { Text, Output, If, For, Set, SetBlock, Macro, CallBlock, FilterBlock, With, Break, Continue };
  Kind kind;
  int line = 0, col = 0;
  std::string text;                    // Text; Set/SetBlock/Macro: target name
  std::string attr;                    // Set: namespace attribute (`set ns.attr = ...`)
  std::vector<std::string> targets;    // For: loop variables; Set: tuple targets; With: names
  std::vector<ExprPtr> exprs;          // Output: [value]; If: conditions; For: [iter, cond?]; Set: [value];
                                       // SetBlock/FilterBlock: filters; CallBlock: [call]; With: values
  std::vector<Body> bodies;            // If: one per condition + else; For: [body, else]; others: [body]
  std::vector<std::pair<std::string, ExprPtr>> params;   // Macro / CallBlock caller: name, default (or null)
};

struct Template {
  Body body;
  std::string source;   // newline-normalized
};

// Parses `source`; throws Error("line L, column C: ...") on a syntax error.
std::shared_ptr<const Template> parse(const std::string& source);

// Today's date for strftime_now(): VKSPEC_TODAY=YYYY-MM-DD when set (reproducible output), else now.
std::string strftime_today(const std::string& format);

// Renders with `vars` as the template's globals (plus jinja2's and transformers' global functions).
std::string render(const Template& t, const std::map<std::string, Value>& vars, const Limits& limits = {});

}  // namespace vkspec::jinja
