// Parser of the Jinja subset (text/jinja.h): the lexer's tokens (text/jinja_lex.cpp) to the statement and
// expression tree. The grammar and operator precedence follow jinja2/parser.py.
#include <cstring>

#include "text/jinja.h"
#include "text/jinja_lex.h"

namespace vkspec::jinja {
namespace {

class Parser {
 public:
  explicit Parser(std::vector<Token> t) : t_(std::move(t)) {}

  Body parse_all() {
    Body b = subparse({});
    if (cur().type != Token::End) fail("unexpected tag '" + cur().text + "'");
    return b;
  }

 private:
  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  [[noreturn]] void fail(const std::string& msg) const { fail_at(cur().line, cur().col, msg); }
  bool is_op(const char* op) const { return cur().type == Token::Op && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == Token::Name && cur().text == n; }
  bool skip_op(const char* op) { if (!is_op(op)) return false; ++i_; return true; }
  bool skip_name(const char* n) { if (!is_name(n)) return false; ++i_; return true; }
  void expect_op(const char* op) { if (!skip_op(op)) fail(std::string("expected '") + op + "'" + got()); }
  void expect_name(const char* n) { if (!skip_name(n)) fail(std::string("expected '") + n + "'" + got()); }
  std::string got() const {
    switch (cur().type) {
      case Token::End: return ", got the end of the template";
      case Token::BlockEnd: return ", got the end of the statement";
      case Token::VarEnd: return ", got the end of the print statement";
      case Token::Name: case Token::Op: return ", got '" + cur().text + "'";
      default: return "";
    }
  }
  std::string name() {
    if (cur().type != Token::Name) fail("expected a name" + got());
    return t_[i_++].text;
  }
  void block_end() {
    if (cur().type != Token::BlockEnd) fail("expected the end of the statement" + got());
    ++i_;
  }
  struct Depth {   // bounds recursion on hostile input (deep nesting would exhaust the stack)
    Parser& p;
    explicit Depth(Parser& q) : p(q) { if (++p.depth_ > kMaxNesting) p.fail("nesting too deep"); }
    ~Depth() { --p.depth_; }
  };
  // A left-associative chain (a ~ b ~ c, x | f | g, x.a.b, a or b or c) is parsed by a loop, not by recursion,
  // but builds a tree as deep as the chain is long, which evaluation and destruction then recurse through:
  // each link counts as a level of nesting until the chain's expression is done.
  struct Chain {
    Parser& p;
    uint32_t links = 0;
    explicit Chain(Parser& q) : p(q) {}
    ~Chain() { p.depth_ -= links; }
    void link() {
      ++links;
      if (++p.depth_ > kMaxNesting) p.fail("nesting too deep");
    }
  };
  ExprPtr make(Expr::Kind k, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = at.line;
    e->col = at.col;
    return e;
  }
  ExprPtr binary(std::string op, ExprPtr a, ExprPtr b) {
    auto e = std::make_unique<Expr>();
    e->kind = Expr::Kind::Binary;
    e->line = a->line, e->col = a->col;
    e->name = std::move(op);
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }

  // Statements until a block whose first name is one of `ends` (left unconsumed, after its BlockBegin).
  Body subparse(const std::vector<std::string>& ends) {
    Depth d(*this);
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == Token::End) {
        if (!ends.empty()) fail("unexpected end of template: expected '" + ends[0] + "'");
        return body;
      }
      if (t.type == Token::Text) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::Text;
        n->text = t.text;
        body.push_back(std::move(n));
        ++i_;
      } else if (t.type == Token::VarBegin) {
        ++i_;
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::Output;
        n->line = t.line, n->col = t.col;
        n->exprs.push_back(tuple(true, false));
        if (cur().type != Token::VarEnd) fail("expected the end of the print statement '}}'" + got());
        ++i_;
        body.push_back(std::move(n));
      } else if (t.type == Token::BlockBegin) {
        const Token& n = peek();
        if (n.type == Token::Name)
          for (const auto& e : ends)
            if (n.text == e) { ++i_; return body; }
        ++i_;
        body.push_back(statement());
      } else {
        fail("unexpected token");
      }
    }
  }

  NodePtr node(Node::Kind k, const Token& at) {
    auto n = std::make_unique<Node>();
    n->kind = k;
    n->line = at.line, n->col = at.col;
    return n;
  }

  NodePtr statement() {
    const Token at = cur();
    if (at.type != Token::Name) fail("expected a statement name" + got());
    const std::string kw = name();
    if (kw == "if") {
      auto n = node(Node::Kind::If, at);
      n->exprs.push_back(expression(true));
      block_end();
      while (true) {
        n->bodies.push_back(subparse({"elif", "else", "endif"}));
        const std::string e = name();
        if (e == "elif") { n->exprs.push_back(expression(true)); block_end(); continue; }
        if (e == "else") { block_end(); n->bodies.push_back(subparse({"endif"})); expect_name("endif"); }
        block_end();
        return n;
      }
    }
    if (kw == "for") {
      auto n = node(Node::Kind::For, at);
      n->targets = assign_targets();
      expect_name("in");
      n->exprs.push_back(tuple(false, false));
      if (skip_name("if")) n->exprs.push_back(expression(true));
      if (is_name("recursive")) fail("recursive loops are not supported");
      block_end();
      ++loops_;
      n->bodies.push_back(subparse({"endfor", "else"}));
      --loops_;
      if (name() == "else") { block_end(); n->bodies.push_back(subparse({"endfor"})); expect_name("endfor"); }
      else n->bodies.emplace_back();
      block_end();
      return n;
    }
    if (kw == "set") {
      auto n = node(Node::Kind::Set, at);
      n->targets = assign_targets(&n->attr);
      if (skip_op("=")) {
        n->exprs.push_back(tuple(true, false));
        block_end();
        return n;
      }
      if (n->targets.size() != 1 || !n->attr.empty()) fail("a block set assigns one name");
      n->kind = Node::Kind::SetBlock;
      while (skip_op("|")) n->exprs.push_back(filter_call(nullptr));
      block_end();
      n->bodies.push_back(subparse({"endset"}));
      expect_name("endset");
      block_end();
      return n;
    }
    if (kw == "macro") {
      auto n = node(Node::Kind::Macro, at);
      n->text = name();
      params(n->params);
      block_end();
      const int outer_loops = loops_;
      loops_ = 0;
      n->bodies.push_back(subparse({"endmacro"}));
      loops_ = outer_loops;
      expect_name("endmacro");
      if (cur().type == Token::Name) ++i_;   // {% endmacro name %}
      block_end();
      return n;
    }
    if (kw == "call") {
      auto n = node(Node::Kind::CallBlock, at);
      if (is_op("(")) params(n->params);
      n->exprs.push_back(expression(true));
      if (n->exprs[0]->kind != Expr::Kind::Call) fail("expected a call after 'call'");
      block_end();
      n->bodies.push_back(subparse({"endcall"}));
      expect_name("endcall");
      block_end();
      return n;
    }
    if (kw == "filter") {
      auto n = node(Node::Kind::FilterBlock, at);
      do n->exprs.push_back(filter_call(nullptr)); while (skip_op("|"));
      block_end();
      n->bodies.push_back(subparse({"endfilter"}));
      expect_name("endfilter");
      block_end();
      return n;
    }
    if (kw == "with") {
      auto n = node(Node::Kind::With, at);
      while (cur().type != Token::BlockEnd) {
        if (!n->targets.empty()) expect_op(",");
        n->targets.push_back(name());
        expect_op("=");
        n->exprs.push_back(expression(true));
      }
      block_end();
      n->bodies.push_back(subparse({"endwith"}));
      expect_name("endwith");
      block_end();
      return n;
    }
    if (kw == "break" || kw == "continue") {
      if (loops_ == 0) fail_at(at.line, at.col, "'" + kw + "' outside of a loop");
      auto n = node(kw == "break" ? Node::Kind::Break : Node::Kind::Continue, at);
      block_end();
      return n;
    }
    fail_at(at.line, at.col, "unknown tag '" + kw + "'");
  }

  // name | name.attr (set only) | a, b | (a, b)
  std::vector<std::string> assign_targets(std::string* attr = nullptr) {
    std::vector<std::string> names;
    const bool paren = skip_op("(");
    do {
      if (paren && is_op(")")) break;
      names.push_back(name());
      if (attr && names.size() == 1 && !paren && is_op(".")) {
        ++i_;
        *attr = name();
        return names;
      }
    } while (skip_op(","));
    if (paren) expect_op(")");
    return names;
  }

  void params(std::vector<std::pair<std::string, ExprPtr>>& out) {
    expect_op("(");
    while (!skip_op(")")) {
      if (!out.empty()) expect_op(",");
      if (skip_op(")")) break;
      std::string n = name();
      ExprPtr def;
      if (skip_op("=")) def = expression(true);
      out.emplace_back(std::move(n), std::move(def));
    }
  }

  // A comma-separated expression list: a tuple when there is a comma (or `()`), else the one expression.
  ExprPtr tuple(bool condexpr, bool parens) {
    const Token at = cur();
    std::vector<ExprPtr> items;
    bool comma = false;
    while (true) {
      if (!items.empty()) {
        if (!skip_op(",")) break;
        comma = true;
      }
      if (cur().type == Token::VarEnd || cur().type == Token::BlockEnd || is_op(")") ||
          (!items.empty() && (is_name("if") || is_name("in"))))
        break;
      items.push_back(expression(condexpr));
    }
    if (!comma && items.size() == 1) return std::move(items[0]);
    if (items.empty() && !parens) fail("expected an expression" + got());
    auto e = make(Expr::Kind::Tuple, at);
    e->args = std::move(items);
    return e;
  }

  ExprPtr expression(bool condexpr) {
    Depth d(*this);
    if (!condexpr) return or_expr();
    ExprPtr e = or_expr();
    Chain chain(*this);
    while (skip_name("if")) {
      chain.link();
      auto c = make(Expr::Kind::Cond, cur());
      c->line = e->line, c->col = e->col;
      c->args.push_back(or_expr());
      c->args.push_back(std::move(e));
      c->args.push_back(skip_name("else") ? expression(true) : nullptr);
      e = std::move(c);
    }
    return e;
  }
  ExprPtr or_expr() {
    ExprPtr e = and_expr();
    Chain chain(*this);
    while (skip_name("or")) chain.link(), e = binary("or", std::move(e), and_expr());
    return e;
  }
  ExprPtr and_expr() {
    ExprPtr e = not_expr();
    Chain chain(*this);
    while (skip_name("and")) chain.link(), e = binary("and", std::move(e), not_expr());
    return e;
  }
  ExprPtr not_expr() {
    if (is_name("not")) {
      auto e = make(Expr::Kind::Unary, cur());
      ++i_;
      Depth d(*this);
      e->name = "not";
      e->args.push_back(not_expr());
      return e;
    }
    return compare();
  }
  ExprPtr compare() {
    ExprPtr e = math1();
    Chain chain(*this);
    for (;; chain.link()) {
      if (cur().type == Token::Op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                      cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
        const std::string op = t_[i_++].text;
        e = binary(op, std::move(e), math1());
      } else if (skip_name("in")) {
        e = binary("in", std::move(e), math1());
      } else if (is_name("not") && peek().type == Token::Name && peek().text == "in") {
        i_ += 2;
        e = binary("notin", std::move(e), math1());
      } else {
        return e;
      }
    }
  }
  ExprPtr math1() {
    ExprPtr e = concat();
    Chain chain(*this);
    while (is_op("+") || is_op("-")) {
      chain.link();
      const std::string op = t_[i_++].text;
      e = binary(op, std::move(e), concat());
    }
    return e;
  }
  ExprPtr concat() {
    ExprPtr e = math2();
    Chain chain(*this);
    while (skip_op("~")) chain.link(), e = binary("~", std::move(e), math2());
    return e;
  }
  ExprPtr math2() {
    ExprPtr e = pow();
    Chain chain(*this);
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      chain.link();
      const std::string op = t_[i_++].text;
      e = binary(op, std::move(e), pow());
    }
    return e;
  }
  ExprPtr pow() {
    ExprPtr e = unary(true);
    Chain chain(*this);
    while (skip_op("**")) chain.link(), e = binary("**", std::move(e), unary(true));
    return e;
  }
  ExprPtr unary(bool with_filter) {
    Depth d(*this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = make(Expr::Kind::Unary, cur());
      e->name = t_[i_++].text;
      e->args.push_back(unary(false));
    } else {
      e = postfix(primary());
    }
    return with_filter ? filter_expr(std::move(e)) : std::move(e);
  }
  ExprPtr primary() {
    const Token at = cur();
    if (at.type == Token::Name) {
      ++i_;
      if (at.text == "true" || at.text == "True") { auto e = make(Expr::Kind::Literal, at); e->value = Value::boolean(true); return e; }
      if (at.text == "false" || at.text == "False") { auto e = make(Expr::Kind::Literal, at); e->value = Value::boolean(false); return e; }
      if (at.text == "none" || at.text == "None") { auto e = make(Expr::Kind::Literal, at); e->value = Value::none(); return e; }
      auto e = make(Expr::Kind::Name, at);
      e->name = at.text;
      return e;
    }
    if (at.type == Token::String) {
      std::string s;
      while (cur().type == Token::String) s += t_[i_++].value.s;   // adjacent literals concatenate
      auto e = make(Expr::Kind::Literal, at);
      e->value = Value::str(std::move(s));
      return e;
    }
    if (at.type == Token::Int || at.type == Token::Float) {
      ++i_;
      auto e = make(Expr::Kind::Literal, at);
      e->value = at.value;
      return e;
    }
    if (skip_op("(")) {
      ExprPtr e = tuple(true, true);
      expect_op(")");
      return e;
    }
    if (skip_op("[")) {
      auto e = make(Expr::Kind::List, at);
      while (!skip_op("]")) {
        if (!e->args.empty()) expect_op(",");
        if (skip_op("]")) break;
        e->args.push_back(expression(true));
      }
      return e;
    }
    if (skip_op("{")) {
      auto e = make(Expr::Kind::DictLit, at);
      while (!skip_op("}")) {
        if (!e->args.empty()) expect_op(",");
        if (skip_op("}")) break;
        e->args.push_back(expression(true));
        expect_op(":");
        e->args.push_back(expression(true));
      }
      return e;
    }
    fail("unexpected " + std::string(at.type == Token::End ? "end of template" : at.type == Token::BlockEnd ? "end of statement" :
                                     at.type == Token::VarEnd ? "'}}'" : "'" + at.text + "'"));
  }
  ExprPtr postfix(ExprPtr e) {
    Chain chain(*this);
    for (;; chain.link()) {
      const Token at = cur();
      if (skip_op(".")) {
        if (cur().type == Token::Int) {
          auto g = make(Expr::Kind::GetItem, at);
          auto k = make(Expr::Kind::Literal, cur());
          k->value = t_[i_++].value;
          g->args.push_back(std::move(e));
          g->args.push_back(std::move(k));
          e = std::move(g);
          continue;
        }
        auto g = make(Expr::Kind::GetAttr, at);
        g->name = name();
        g->args.push_back(std::move(e));
        e = std::move(g);
      } else if (skip_op("[")) {
        e = subscript(std::move(e), at);
      } else if (is_op("(")) {
        e = call(std::move(e));
      } else {
        return e;
      }
    }
  }
  ExprPtr subscript(ExprPtr obj, const Token& at) {
    std::vector<ExprPtr> parts;   // start, stop, step
    bool slice = false;
    parts.emplace_back();
    while (!is_op("]")) {
      if (skip_op(":")) {
        slice = true;
        if (parts.size() == 3) fail("a slice has at most three parts");
        parts.emplace_back();
        continue;
      }
      if (parts.back()) fail("expected ']'" + got());
      parts.back() = expression(true);
      if (!slice && is_op(",")) fail("tuple subscripts are not supported");
    }
    ++i_;
    if (!slice) {
      if (!parts[0]) fail("expected an index");
      auto g = make(Expr::Kind::GetItem, at);
      g->args.push_back(std::move(obj));
      g->args.push_back(std::move(parts[0]));
      return g;
    }
    auto g = make(Expr::Kind::Slice, at);
    g->args.push_back(std::move(obj));
    parts.resize(3);
    for (auto& p : parts) g->args.push_back(std::move(p));
    return g;
  }
  void call_args(Expr& e) {
    expect_op("(");
    for (bool first = true; !skip_op(")"); first = false) {
      if (!first) {
        expect_op(",");
        if (skip_op(")")) break;
      }
      if (is_op("*") || is_op("**")) fail("*args and **kwargs in calls are not supported");
      if (cur().type == Token::Name && peek().type == Token::Op && peek().text == "=") {
        std::string k = name();
        ++i_;
        e.kwargs.emplace_back(std::move(k), expression(true));
      } else {
        if (!e.kwargs.empty()) fail("positional argument after keyword argument");
        e.args.push_back(expression(true));
      }
    }
  }
  ExprPtr call(ExprPtr callee) {
    auto e = make(Expr::Kind::Call, cur());
    e->line = callee->line, e->col = callee->col;
    e->args.push_back(std::move(callee));
    call_args(*e);
    return e;
  }
  // name(args) of a filter, applied to `value` (null in {% filter %} and block set).
  ExprPtr filter_call(ExprPtr value) {
    auto e = make(Expr::Kind::Filter, cur());
    e->name = name();
    while (is_op(".") && peek().type == Token::Name) {   // a dotted filter name
      i_ += 1;
      e->name += '.';
      e->name += name();
    }
    e->args.push_back(std::move(value));
    if (is_op("(")) call_args(*e);
    return e;
  }
  ExprPtr filter_expr(ExprPtr e) {
    Chain chain(*this);
    for (;; chain.link()) {
      if (skip_op("|")) {
        e = filter_call(std::move(e));
      } else if (is_name("is")) {
        ++i_;
        auto t = make(Expr::Kind::Test, cur());
        t->line = e->line, t->col = e->col;
        t->negated = skip_name("not");
        t->name = name();
        t->args.push_back(std::move(e));
        if (is_op("(")) {
          call_args(*t);
        } else if ((cur().type == Token::Name || cur().type == Token::String || cur().type == Token::Int ||
                    cur().type == Token::Float || is_op("(") || is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
          if (is_name("is")) fail("you cannot chain multiple tests with 'is'");
          t->args.push_back(postfix(primary()));
        }
        e = std::move(t);
      } else if (is_op("(")) {
        e = call(std::move(e));
      } else {
        return e;
      }
    }
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  uint32_t depth_ = 0;
  int loops_ = 0;   // for-loops around the statement being parsed (break/continue need one)
};

}  // namespace

std::shared_ptr<const Template> parse(const std::string& source) {
  auto t = std::make_shared<Template>();
  // jinja2: \r\n and \r become \n; one trailing newline is dropped (keep_trailing_newline=False)
  std::string& s = t->source;
  s.reserve(source.size());
  for (size_t k = 0; k < source.size(); ++k) {
    if (source[k] == '\r') {
      s += '\n';
      if (k + 1 < source.size() && source[k + 1] == '\n') ++k;
    } else {
      s += source[k];
    }
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();
  Parser p(lex(s));
  t->body = p.parse_all();
  return t;
}

}  // namespace vkspec::jinja
