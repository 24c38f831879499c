// The Jinja evaluator: statements and expressions over scopes (text/jinja_interp.h).
#include <cstring>

#include "text/jinja_interp.h"

namespace vkspec::jinja {
namespace {

std::string at(int line, int col) { return "line " + std::to_string(line) + ", column " + std::to_string(col) + ": "; }
bool has_position(const Error& e) { return strncmp(e.what(), "line ", 5) == 0; }

// A {% macro %} (or the body of a {% call %} block, as `caller`), called with jinja2's argument binding:
// positional, then keyword, then defaults; extras go to `varargs` / `kwargs`.
struct Macro : Callable {
  const Node* def;
  std::weak_ptr<Scope> closure;   // weak: the scope holds the macro (no reference cycle)
  Value caller;                   // {% call %}: the block, visible as `caller` inside
  Value call(Interpreter& in, CallArgs& a) override {
    Interpreter::CallDepth depth(in);
    in.step();
    auto parent = closure.lock();
    if (!parent) throw Error("macro '" + name + "' was called after the scope that defined it ended");
    auto scope = std::make_shared<Scope>();
    scope->parent = parent;
    const auto& params = def->params;
    std::vector<Value> extra;
    for (size_t k = 0; k < a.pos.size(); ++k) {
      if (k < params.size()) scope->vars[params[k].first] = a.pos[k];
      else extra.push_back(a.pos[k]);
    }
    Dict kwargs;
    for (auto& [k, v] : a.kw) {
      bool is_param = false;
      for (size_t p = 0; p < params.size(); ++p) {
        if (params[p].first != k) continue;
        if (p < a.pos.size()) throw Error("macro '" + name + "' got multiple values for argument '" + k + "'");
        scope->vars[k] = v;
        is_param = true;
      }
      if (!is_param && k == "caller") scope->vars["caller"] = v;
      else if (!is_param) kwargs.set(Value::str(k), v);
    }
    for (const auto& [p, d] : params)
      if (!scope->vars.count(p)) scope->vars[p] = d ? in.eval(*d, scope) : Value::undefined(p);
    if (!caller.is_undefined()) scope->vars["caller"] = caller;
    scope->vars["varargs"] = Value::make_list(std::move(extra), true);
    scope->vars["kwargs"] = Value::make_dict(std::move(kwargs));
    std::string out;
    in.exec(def->bodies[0], scope, out);
    return Value::str(std::move(out));
  }
};

}  // namespace

Value Interpreter::call(const Value& fn, CallArgs& args) {
  if (fn.is_undefined()) undefined_error(fn);
  if (!fn.is_callable()) throw Error("'" + fn.type_name() + "' object is not callable");
  return fn.fn->call(*this, args);
}

void Interpreter::assign(Scope& scope, const std::vector<std::string>& targets, const Value& v) {
  if (targets.size() == 1) {
    scope.vars[targets[0]] = v;
    return;
  }
  std::vector<Value> items = iterate(v);
  if (items.size() != targets.size())
    throw Error("cannot unpack " + std::to_string(items.size()) + " values into " + std::to_string(targets.size()) + " names");
  for (size_t k = 0; k < targets.size(); ++k) scope.vars[targets[k]] = items[k];
}

Interpreter::Flow Interpreter::exec(const Body& body, const std::shared_ptr<Scope>& scope, std::string& out) {
  for (const NodePtr& n : body) {
    const Flow f = exec_node(*n, scope, out);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

Interpreter::Flow Interpreter::exec_node(const Node& n, const std::shared_ptr<Scope>& scope, std::string& out) {
  try {
    switch (n.kind) {
      case Node::Kind::Text:
        out += n.text;
        check_size(out.size());
        return Flow::Normal;
      case Node::Kind::Output: {
        const Value v = eval(*n.exprs[0], scope);
        charge(v.weight());   // (written out)
        out += to_str(v);
        check_size(out.size());
        return Flow::Normal;
      }
      case Node::Kind::If:
        for (size_t k = 0; k < n.exprs.size(); ++k)
          if (eval(*n.exprs[k], scope).truthy()) return exec(n.bodies[k], scope, out);
        return n.bodies.size() > n.exprs.size() ? exec(n.bodies.back(), scope, out) : Flow::Normal;
      case Node::Kind::For: {
        std::vector<Value> items = iterate(eval(*n.exprs[0], scope));
        if (n.exprs.size() > 1) {   // {% for x in xs if cond %}: filtered before the loop (loop.length counts them)
          std::vector<Value> kept;
          for (Value& v : items) {
            step();
            auto s = std::make_shared<Scope>();
            s->parent = scope;
            assign(*s, n.targets, v);
            if (eval(*n.exprs[1], s).truthy()) kept.push_back(std::move(v));
          }
          items = std::move(kept);
        }
        if (items.empty()) {
          auto s = std::make_shared<Scope>();
          s->parent = scope;
          exec(n.bodies[1], s, out);
          return Flow::Normal;
        }
        const int64_t len = int64_t(items.size());
        for (int64_t k = 0; k < len; ++k) {
          step();
          auto s = std::make_shared<Scope>();
          s->parent = scope;
          assign(*s, n.targets, items[size_t(k)]);
          Dict loop;
          loop.set(Value::str("index"), Value::integer(k + 1));
          loop.set(Value::str("index0"), Value::integer(k));
          loop.set(Value::str("revindex"), Value::integer(len - k));
          loop.set(Value::str("revindex0"), Value::integer(len - k - 1));
          loop.set(Value::str("first"), Value::boolean(k == 0));
          loop.set(Value::str("last"), Value::boolean(k == len - 1));
          loop.set(Value::str("length"), Value::integer(len));
          loop.set(Value::str("depth"), Value::integer(1));
          loop.set(Value::str("depth0"), Value::integer(0));
          if (k > 0) loop.set(Value::str("previtem"), items[size_t(k - 1)]);
          if (k + 1 < len) loop.set(Value::str("nextitem"), items[size_t(k + 1)]);
          struct Cycle : Callable {
            int64_t index;
            Value call(Interpreter&, CallArgs& a) override {
              if (a.pos.empty()) throw Error("no items for cycling given");
              return a.pos[size_t(index % int64_t(a.pos.size()))];
            }
          };
          auto cycle = std::make_shared<Cycle>();
          cycle->name = "loop.cycle";
          cycle->index = k;
          loop.set(Value::str("cycle"), Value::func(cycle));
          s->vars["loop"] = Value::make_dict(std::move(loop));
          if (exec(n.bodies[0], s, out) == Flow::Break) break;
        }
        return Flow::Normal;
      }
      case Node::Kind::Set: {
        Value v = eval(*n.exprs[0], scope);
        if (n.attr.empty()) {
          assign(*scope, n.targets, v);
          return Flow::Normal;
        }
        const Value* ns = scope->find(n.targets[0]);
        if (!ns || ns->kind != Value::Kind::Namespace)
          throw Error("cannot assign attribute on non-namespace object '" + n.targets[0] + "'");
        if (v.kind == Value::Kind::Namespace || (v.list && v.list->has_namespace) ||
            (v.kind == Value::Kind::Dict && v.dict->has_namespace))
          throw Error("a namespace cannot hold another namespace");
        ns->dict->depth = std::max(ns->dict->depth, v.depth() + 1);
        if (ns->dict->depth > kMaxDepth) throw Error("values nested more than " + std::to_string(kMaxDepth) + " deep");
        ns->dict->set(Value::str(n.attr), std::move(v));
        return Flow::Normal;
      }
      case Node::Kind::SetBlock:
      case Node::Kind::FilterBlock: {
        std::string text;
        auto s = std::make_shared<Scope>();
        s->parent = scope;
        exec(n.bodies[0], n.kind == Node::Kind::SetBlock ? scope : s, text);
        Value v = Value::str(std::move(text));
        for (const ExprPtr& f : n.exprs) {
          CallArgs a;
          for (size_t k = 1; k < f->args.size(); ++k) a.pos.push_back(eval(*f->args[k], scope));
          for (const auto& [k, e] : f->kwargs) a.kw.emplace_back(k, eval(*e, scope));
          v = apply_filter(*this, f->name, v, a);
        }
        if (n.kind == Node::Kind::SetBlock) scope->vars[n.targets[0]] = std::move(v);
        else out += to_str(v), check_size(out.size());
        return Flow::Normal;
      }
      case Node::Kind::Macro: {
        auto m = std::make_shared<Macro>();
        m->name = n.text;
        m->def = &n;
        m->closure = scope;
        scope->vars[n.text] = Value::func(m);
        return Flow::Normal;
      }
      case Node::Kind::CallBlock: {
        const Expr& c = *n.exprs[0];
        auto caller = std::make_shared<Macro>();
        caller->name = "caller";
        caller->def = &n;
        caller->closure = scope;
        Value fn = eval(*c.args[0], scope);
        CallArgs a;
        for (size_t k = 1; k < c.args.size(); ++k) a.pos.push_back(eval(*c.args[k], scope));
        for (const auto& [k, e] : c.kwargs) a.kw.emplace_back(k, eval(*e, scope));
        a.kw.emplace_back("caller", Value::func(caller));
        out += to_str(call(fn, a));
        check_size(out.size());
        return Flow::Normal;
      }
      case Node::Kind::With: {
        auto s = std::make_shared<Scope>();
        s->parent = scope;
        for (size_t k = 0; k < n.targets.size(); ++k) s->vars[n.targets[k]] = eval(*n.exprs[k], scope);
        return exec(n.bodies[0], s, out);
      }
      case Node::Kind::Break: return Flow::Break;
      case Node::Kind::Continue: return Flow::Continue;
    }
  } catch (const Error& e) {
    if (has_position(e)) throw;
    throw Error(at(n.line, n.col) + e.what());
  }
  return Flow::Normal;
}

Value Interpreter::eval(const Expr& e, const std::shared_ptr<Scope>& scope) {
  try {
    Value v = eval_inner(e, scope);
    // what an operation made is charged as built (a name, an attribute, an item or a branch is a value that
    // exists already)
    if (e.kind != Expr::Kind::Literal && e.kind != Expr::Kind::Name && e.kind != Expr::Kind::GetAttr &&
        e.kind != Expr::Kind::GetItem && e.kind != Expr::Kind::Cond)
      charge(v.weight());
    return v;
  } catch (const Error& err) {
    if (has_position(err)) throw;
    throw Error(at(e.line, e.col) + err.what());
  }
}

Value Interpreter::eval_inner(const Expr& e, const std::shared_ptr<Scope>& scope) {
  using K = Expr::Kind;
  switch (e.kind) {
    case K::Literal: return e.value;
    case K::Name: {
      const Value* v = scope->find(e.name);
      return v ? *v : Value::undefined(e.name);
    }
    case K::List: case K::Tuple: {
      std::vector<Value> items;
      for (const ExprPtr& a : e.args) items.push_back(eval(*a, scope));
      return Value::make_list(std::move(items), e.kind == K::Tuple);
    }
    case K::DictLit: {
      Dict d;
      for (size_t k = 0; k + 1 < e.args.size(); k += 2) d.set(eval(*e.args[k], scope), eval(*e.args[k + 1], scope));
      return Value::make_dict(std::move(d));
    }
    case K::GetAttr: {
      Value obj = eval(*e.args[0], scope);
      if (obj.is_undefined()) undefined_error(obj);
      return get_attr(obj, e.name);
    }
    case K::GetItem: {
      Value obj = eval(*e.args[0], scope);
      if (obj.is_undefined()) undefined_error(obj);
      return get_item(obj, eval(*e.args[1], scope));
    }
    case K::Slice: {
      Value obj = eval(*e.args[0], scope);
      if (obj.is_undefined()) undefined_error(obj);
      auto part = [&](size_t k) { return e.args[k] ? eval(*e.args[k], scope) : Value::none(); };
      return slice(obj, part(1), part(2), part(3));
    }
    case K::Call: {
      Value fn = eval(*e.args[0], scope);
      CallArgs a;
      for (size_t k = 1; k < e.args.size(); ++k) a.pos.push_back(eval(*e.args[k], scope));
      for (const auto& [k, x] : e.kwargs) a.kw.emplace_back(k, eval(*x, scope));
      return call(fn, a);
    }
    case K::Filter: case K::Test: {
      Value v = eval(*e.args[0], scope);
      CallArgs a;
      for (size_t k = 1; k < e.args.size(); ++k) a.pos.push_back(eval(*e.args[k], scope));
      for (const auto& [k, x] : e.kwargs) a.kw.emplace_back(k, eval(*x, scope));
      if (e.kind == K::Filter) return apply_filter(*this, e.name, v, a);
      return Value::boolean(apply_test(*this, e.name, v, a) != e.negated);
    }
    case K::Unary: {
      Value v = eval(*e.args[0], scope);
      if (e.name == "not") return Value::boolean(!v.truthy());
      if (v.is_undefined()) undefined_error(v);
      if (!v.is_number()) throw Error("bad operand type for unary " + e.name + ": '" + v.type_name() + "'");
      if (e.name == "+") return v.kind == Value::Kind::Bool ? Value::integer(v.as_int()) : v;
      if (v.kind == Value::Kind::Float) return Value::number(-v.f);
      if (v.as_int() == INT64_MIN) throw Error("integer overflow");
      return Value::integer(-v.as_int());
    }
    case K::Binary: {
      Value a = eval(*e.args[0], scope);
      if (e.name == "and") return a.truthy() ? eval(*e.args[1], scope) : a;
      if (e.name == "or") return a.truthy() ? a : eval(*e.args[1], scope);
      return binary_op(*this, e.name, a, eval(*e.args[1], scope));
    }
    case K::Cond:
      if (eval(*e.args[0], scope).truthy()) return eval(*e.args[1], scope);
      return e.args[2] ? eval(*e.args[2], scope) : Value::undefined();
  }
  return Value::undefined();
}

std::string render(const Template& t, const std::map<std::string, Value>& vars, const Limits& limits) {
  auto globals = std::make_shared<Scope>();
  add_globals(*globals);
  auto root = std::make_shared<Scope>();
  root->parent = globals;
  for (const auto& [k, v] : vars) root->vars[k] = v;
  Interpreter in(limits);
  std::string out;
  in.exec(t.body, root, out);
  return out;
}

}  // namespace vkspec::jinja
