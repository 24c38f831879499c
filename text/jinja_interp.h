#pragma once
// Internal to the Jinja interpreter: the evaluator (text/jinja_render.cpp) and the builtins it calls
// (text/jinja_builtins.cpp). Not a public header: text/chat_template.h and text/jinja.h are.
#include <string>
#include <unordered_map>

#include "text/jinja.h"

namespace vkspec::jinja {

// Variables of one template frame. A for-loop iteration, a macro call and a `with` block each get a child
// scope, so `set` inside them does not leak out (jinja2's scoping; namespaces exist for that).
struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
  const Value* find(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent.get()) {
      auto it = s->vars.find(name);
      if (it != s->vars.end()) return &it->second;
    }
    return nullptr;
  }
};

class Interpreter {
 public:
  explicit Interpreter(const Limits& limits) : limits_(limits) {}

  enum class Flow { Normal, Break, Continue };
  Flow exec(const Body& body, const std::shared_ptr<Scope>& scope, std::string& out);
  Value eval(const Expr& e, const std::shared_ptr<Scope>& scope);
  Value call(const Value& fn, CallArgs& args);

  void step() {   // one loop iteration or call
    if (++steps_ > limits_.max_steps)
      throw Error("the template ran more than " + std::to_string(limits_.max_steps) + " loop iterations and calls");
  }
  void charge(uint64_t units) {   // work (Limits::max_work): Value::weight of what an operation visits or builds
    work_ = work_ + units < work_ ? UINT64_MAX : work_ + units;
    if (work_ > limits_.max_work)
      throw Error("the template did more than " + std::to_string(limits_.max_work) +
                  " units of work (elements of values compared, copied or written; 64 bytes of text count one)");
  }
  void check_size(size_t bytes) const {
    if (bytes > limits_.max_output_bytes)
      throw Error("the template's output exceeds " + std::to_string(limits_.max_output_bytes) + " bytes");
  }
  struct CallDepth {
    Interpreter& in;
    explicit CallDepth(Interpreter& i) : in(i) {
      if (++in.call_depth_ > in.limits_.max_call_depth)
        throw Error("macro calls nested more than " + std::to_string(in.limits_.max_call_depth) + " deep");
    }
    ~CallDepth() { --in.call_depth_; }
  };

 private:
  Flow exec_node(const Node& n, const std::shared_ptr<Scope>& scope, std::string& out);
  Value eval_inner(const Expr& e, const std::shared_ptr<Scope>& scope);
  void assign(Scope& scope, const std::vector<std::string>& targets, const Value& v);

  const Limits& limits_;
  uint64_t steps_ = 0;
  uint64_t work_ = 0;
  uint32_t call_depth_ = 0;
};

// Builtins (text/jinja_builtins.cpp).
Value apply_filter(Interpreter& in, const std::string& name, const Value& v, CallArgs& args);
bool apply_test(Interpreter& in, const std::string& name, const Value& v, CallArgs& args);
Value binary_op(Interpreter& in, const std::string& op, const Value& a, const Value& b);
Value get_attr(const Value& obj, const std::string& name);   // obj.name: attribute first, then item
Value get_item(const Value& obj, const Value& key);          // obj[key]: item first, then attribute
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
std::vector<Value> iterate(const Value& v);                  // for-loops and filters over sequences
void add_globals(Scope& root);                               // range, namespace, dict, raise_exception, ...
[[noreturn]] void undefined_error(const Value& v);

// Python string operations shared by methods and filters.
int64_t int_arg(const Value& v, const char* what);
std::string change_case(const std::string& s, bool upper);           // str.upper() / str.lower()
std::string title_case(const std::string& s, bool only_first);       // str.title() / capitalize's first letter
std::vector<std::string> split(const std::string& s, const Value& sep, int64_t maxsplit);   // str.split()
std::string replace(const std::string& s, const std::string& a, const std::string& b, int64_t count);
std::string html_escape(const std::string& s);
// `attribute` of v ("a.b", or an index), lower-cased when a string and not case_sensitive (jinja2's sort keys).
Value sort_key(const Value& v, const Value& attribute, bool case_sensitive);
Value attribute_of(const Value& v, const Value& attribute);

// Keyword or positional argument `index` named `name` of a builtin, or `def` when absent.
Value arg(const CallArgs& a, size_t index, const char* name, const Value& def);   // a copy: `def` may be a temporary

}  // namespace vkspec::jinja
