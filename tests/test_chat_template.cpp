// The Jinja interpreter and chat templates against the reference: python3-jinja2 configured as Hugging Face
// transformers configures it (tests/chat_template_reference.py). Every case is rendered by both; vkspec's
// text must equal jinja2's byte for byte, or both must fail.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "text/chat_template.h"
#include "platform/platform.h"
#include "tests/run_program.h"

namespace vkspec {
namespace {

using ojson = nlohmann::ordered_json;
namespace fs = std::filesystem;

std::string shared_dir() {
  const char* s = getenv("VKSPEC_SHARED");
  return s ? s : "../shared";
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

struct Case {
  std::string name, tmpl;
  ojson vars;
};

struct Outcome {
  bool ok;
  std::string text;   // or the error
};

Outcome render_vkspec(const Case& c) {
  try {
    std::map<std::string, jinja::Value> vars;
    for (const auto& [k, v] : c.vars.items()) vars[k] = jinja::Value::from_json(v);
    return {true, jinja::render(*jinja::parse(c.tmpl), vars)};
  } catch (const Error& e) {
    return {false, e.what()};
  }
}

// Debian 12's python3 with python3-jinja2 (scripts/install-deps.sh), or else any python3 that has jinja2;
// empty when there is none.
std::string reference_python() {
  for (const char* py : {"/usr/bin/python3", "python3"})
    if (test::run_program({py, "-c", "import jinja2.sandbox"}).code == 0) return py;
  return "";
}

// Renders every case with jinja2 in one process.
std::vector<Outcome> render_reference(const std::vector<Case>& cases) {
  ojson in = ojson::array();
  for (const Case& c : cases) in.push_back({{"template", c.tmpl}, {"vars", c.vars}});
  const std::string path = ::testing::TempDir() + "/vkspec-jinja-cases-" + std::to_string(platform::process_id()) + ".json";
  std::ofstream(path, std::ios::binary) << in.dump();
  const std::string script = std::string(VKSPEC_SOURCE_DIR) + "/tests/chat_template_reference.py";
  const test::Result r = test::run_program({reference_python(), script}, path);
  std::vector<Outcome> out;
  if (r.code != 0) return out;
  for (const auto& o : ojson::parse(r.out))
    out.push_back({o["ok"].get<bool>(), o.contains("text") ? o["text"].get<std::string>() : o["error"].get<std::string>()});
  return out;
}

void expect_same_as_reference(const std::vector<Case>& cases) {
  if (reference_python().empty()) GTEST_SKIP() << "python3-jinja2 is not installed (scripts/install-deps.sh installs it)";
  const std::vector<Outcome> ref = render_reference(cases);
  ASSERT_EQ(ref.size(), cases.size()) << "the reference renderer failed";
  int failures = 0;
  for (size_t k = 0; k < cases.size(); ++k) {
    const Outcome got = render_vkspec(cases[k]);
    const bool same = got.ok == ref[k].ok && (!got.ok || got.text == ref[k].text);
    if (!same && ++failures <= 20)
      ADD_FAILURE() << "case " << cases[k].name << "\n--- template:\n" << cases[k].tmpl << "\n--- vars: " << cases[k].vars.dump()
                    << "\n--- jinja2 (" << (ref[k].ok ? "ok" : "error") << "):\n" << ref[k].text << "\n--- vkspec ("
                    << (got.ok ? "ok" : "error") << "):\n" << got.text;
  }
  EXPECT_EQ(failures, 0) << "of " << cases.size() << " cases";
}

// Message lists every shared template is rendered with.
std::vector<std::pair<std::string, ojson>> message_sets() {
  const ojson tools = ojson::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "Weather at a place", "parameters": {"type": "object", "properties": {"city": {"type": "string",
      "description": "City name"}, "days": {"type": "integer"}}, "required": ["city"]}}}])");
  const ojson call = ojson::parse(R"([{"id": "abc123def", "type": "function", "function": {"name": "get_weather",
      "arguments": {"city": "Zürich", "days": 2}}}])");
  std::vector<std::pair<std::string, ojson>> sets = {
      {"user", {{"messages", ojson::parse(R"([{"role": "user", "content": "Hello"}])")}}},
      {"system+user", {{"messages", ojson::parse(R"([{"role": "system", "content": "You are terse."},
                                                     {"role": "user", "content": "Hi"}])")}}},
      {"multi-turn", {{"messages", ojson::parse(R"([{"role": "system", "content": "Be kind."},
          {"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4."},
          {"role": "user", "content": "And 3+3?"}])")}}},
      {"multi-turn-no-system", {{"messages", ojson::parse(R"([{"role": "user", "content": "a"},
          {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}])")}}},
      {"unicode", {{"messages", ojson::parse(R"([{"role": "user",
          "content": "Grüße, 世界 🌍 — \"quotes\" and 'apostrophes', a \\ backslash,\nnewline\ttab \u00a0nbsp"}])")}}},
      {"empty-content", {{"messages", ojson::parse(R"([{"role": "user", "content": ""},
          {"role": "assistant", "content": ""}, {"role": "user", "content": "  padded  \n"}])")}}},
      {"ends-with-assistant", {{"messages", ojson::parse(R"([{"role": "user", "content": "Hi"},
          {"role": "assistant", "content": "Hello! "}])")}}},
      {"two-users", {{"messages", ojson::parse(R"([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])")}}},
      {"unknown-role", {{"messages", ojson::parse(R"([{"role": "narrator", "content": "Once"}, {"role": "user", "content": "x"}])")}}},
      {"empty", {{"messages", ojson::array()}}},
      {"tools", {{"messages", ojson::parse(R"([{"role": "system", "content": "Use tools."},
          {"role": "user", "content": "Weather in Zürich?"}])")}, {"tools", tools}}},
      {"tool-call", {{"messages", ojson::array({{{"role", "user"}, {"content", "Weather?"}},
                                                {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", call}},
                                                {{"role", "tool"}, {"tool_call_id", "abc123def"}, {"content", "{\"temp\": 21.5}"}},
                                                {{"role", "user"}, {"content", "Thanks"}}})},
                     {"tools", tools}}},
      {"tool-result-mapping", {{"messages", ojson::array({{{"role", "user"}, {"content", "Weather?"}},
                                                          {{"role", "assistant"}, {"content", ""}, {"tool_calls", call}},
                                                          {{"role", "tool"}, {"tool_call_id", "abc123def"},
                                                           {"content", {{"temp", 21.5}, {"sky", "clear"}, {"list", {1, 2.0, nullptr, true}}}}}})}}},
  };
  return sets;
}

TEST(ChatTemplate, SharedTemplatesEqualJinja2) {
  platform::set_env("VKSPEC_TODAY", "2026-02-03");   // Llama 3.2 prints strftime_now("%d %b %Y")
  const fs::path dir = fs::path(shared_dir()) / "chat-templates";
  if (!fs::exists(dir)) GTEST_SKIP() << dir << " is missing";
  std::vector<Case> cases;
  int templates = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".jinja") continue;
    ++templates;
    const std::string source = read_file(entry.path());
    for (auto [name, vars] : message_sets())
      for (bool gen : {true, false}) {
        vars["add_generation_prompt"] = gen;
        vars["bos_token"] = "<s>";
        vars["eos_token"] = "</s>";
        cases.push_back({entry.path().filename().string() + " / " + name + (gen ? " / gen" : ""), source, vars});
      }
  }
  EXPECT_GE(templates, 6);
  expect_same_as_reference(cases);
}

// One case per construct the issue lists, each small enough to read in a failure message.
TEST(ChatTemplate, ConstructsEqualJinja2) {
  const ojson msgs = ojson::parse(R"([{"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Yo"}])");
  const ojson v = {{"messages", msgs}, {"xs", {3, 1, 2}}, {"d", {{"b", 1}, {"a", 2}}}, {"s", "  MiXed Case  "},
                   {"n", nullptr}, {"f", 2.5}, {"u", "héllo wörld"}, {"people", ojson::parse(R"([{"name": "Bo", "age": 30},
                   {"name": "al", "age": 20}, {"name": "Cy"}])")}};
  const std::vector<std::string> templates = {
      // whitespace control, trim_blocks, lstrip_blocks
      "  {% if true %}\n  x\n  {% endif %}\n  {{ 'y' }}\n  {# c #}\n z",
      "a  {%- if true -%}  b  {%- endif -%}  c",
      "a {{- ' x ' -}} b\n",
      "a\n  {%+ if true %}b{% endif +%}\nc",
      "{% raw %}{{ not rendered }} {% if %}{% endraw %}!",
      "line1\r\nline2\rline3\n\n",
      "{#- comment -#}  x  {# two\nlines #}\ny",
      "{% for m in messages %}\n  {{ m.role }}\n{% endfor %}\n",
      // expressions
      "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 4 / 2 }}",
      "{{ 1.5 + 1 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1e-5 }} {{ 123456789012345678 }} {{ -0.0 }} {{ 3.0 }} {{ 1e16 }} {{ 1.5e300 * 1e10 }}",
      "{{ 'a' ~ 1 ~ none ~ true ~ undefined_name ~ 2.0 }} {{ 'ab' * 3 }} {{ [1] * 2 + [3] }}",
      "{{ 1 < 2 and 2 <= 2 and not 3 > 4 }} {{ 'a' < 'b' }} {{ 1 == 1.0 }} {{ 'x' != 'y' }} {{ none == none }}",
      "{{ 'b' in 'abc' }} {{ 2 in xs }} {{ 'a' in d }} {{ 5 not in xs }} {{ 'z' not in 'abc' }}",
      "{{ 'yes' if xs else 'no' }} {{ 'yes' if n else 'no' }} [{{ 'x' if false }}] {{ n or 'fallback' }} {{ xs and 'all' }}",
      "{{ xs[0] }} {{ xs[-1] }} {{ xs[1:] }} {{ xs[::-1] }} {{ xs[:-1] }} {{ u[1:4] }} {{ u[-1] }} {{ u[::2] }} {{ xs[10] }}|",
      "{{ d.a }} {{ d['b'] }} {{ d.missing }}|{{ d.get('a') }} {{ d.get('zz', 'def') }} {{ d.get('zz') }}",
      "{{ [1, 'two', none, true, 2.5, [3], {'k': 'v'}] }} {{ (1,) }} {{ (1, 2) }} {{ {'a': none, 1: 'x'} }} {{ d }}",
      "{{ \"it's\" }} {{ 'say \"hi\"' }} {{ ['it\\'s', \"q\\\"\", 'tab\\there', 'nl\\n', 'é', '\\u00a0'] }}",
      "{{ 'a\\nb\\tc\\\\d\\x41\\u00e9' }} {{ 'adj' 'acent' }}",
      // tests
      "{{ n is none }} {{ xs is iterable }} {{ d is mapping }} {{ s is string }} {{ 3 is number }} {{ true is number }} "
      "{{ 3 is integer }} {{ f is float }} {{ nope is defined }} {{ nope is undefined }} {{ 4 is even }} {{ 3 is odd }} "
      "{{ 9 is divisibleby 3 }} {{ 9 is divisibleby(2) }} {{ 'a' is in 'cat' }} {{ 2 is eq 2 }} {{ 'x' is not string }} "
      "{{ true is boolean }} {{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 1 is sameas 1 }} {{ nope is iterable }}",
      // filters
      "{{ s | trim }}|{{ s | lower }}|{{ s | upper }}|{{ s | length }}|{{ u | length }}|{{ xs | length }}|{{ d | length }}",
      "{{ xs | first }} {{ xs | last }} {{ xs | sort }} {{ xs | sort(reverse=true) }} {{ xs | join('-') }} {{ xs | sum }} {{ xs | min }} {{ xs | max }}",
      "{{ d | tojson }} {{ people | tojson(indent=2) }} {{ u | tojson }} {{ 'a\"b\\n' | tojson }} {{ [] | tojson(indent=4) }}",
      "{{ n | default('dflt') }} {{ nope | default('dflt') }} {{ '' | default('e', true) }} {{ nope | d('x') }}",
      "{{ people | map(attribute='name') | join(', ') }} {{ people | selectattr('age') | map(attribute='name') | list }} "
      "{{ people | rejectattr('age', 'gt', 25) | map(attribute='name') | list }} {{ people | map(attribute='age', default=0) | list }}",
      "{{ xs | select('odd') | list }} {{ xs | reject('odd') | list }} {{ ['a', 'B', 'a', 'b'] | unique | list }} {{ xs | map('string') | list }}",
      "{{ d | items | list }} {{ d | dictsort }} {{ d.items() | list }} {{ d.keys() | list }} {{ d.values() | list }} {{ d | list }}",
      "{{ 'hello world' | replace('o', '0') }} {{ 'hello' | replace('l', 'L', 1) }} {{ 'ab' | string }} {{ 3 | string }} {{ xs | string }}",
      "{{ 'abc' | reverse }} {{ xs | reverse | list }} {{ -3 | abs }} {{ '42' | int + 1 }} {{ '4.5' | float }} {{ 'x' | int }} {{ 2.567 | round(2) }}",
      "{{ people | sort(attribute='name') | map(attribute='name') | join }} {{ 'hello world' | title }} {{ 'hELLO' | capitalize }}",
      "{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(3, true) }}|{{ '<a href=\"x\">&</a>' | e }}|{{ 'x' | safe }} {{ 'one two  three' | wordcount }}",
      "{{ u | upper }} {{ 'ÀÉÎ' | lower }} {{ 'straße' | length }}",
      // methods
      "{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ 'xxaxx'.strip('x') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}",
      "{{ 'hello'.startswith('he') }} {{ 'hello'.endswith(('lo', 'x')) }} {{ 'Hi'.upper() }} {{ 'Hi'.lower() }} {{ 'a-b'.replace('-', '+') }} "
      "{{ 'abcabc'.find('c') }} {{ 'abcabc'.count('b') }} {{ ', '.join(['x', 'y']) }} {{ 'l1\\nl2'.splitlines() }} {{ 'ab'.title() }}",
      // statements
      "{% for a, b in [[1, 2], [3, 4]] %}{{ loop.index }}:{{ a }}{{ b }}/{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }} {% endfor %}",
      "{% for x in xs if x > 1 %}{{ x }}{{ loop.length }}{% else %}none{% endfor %}|{% for x in [] %}x{% else %}empty{% endfor %}",
      "{% for x in xs %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}",
      "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %} {% for k in d %}{{ k }}{% endfor %} {% for c in 'héj' %}[{{ c }}]{% endfor %}",
      "{% for x in xs %}{{ loop.previtem }}>{{ x }}<{{ loop.nextitem }} {{ loop.cycle('odd', 'even') }} {% endfor %}",
      "{% for r in [[1, 2], [3]] %}{% for c in r %}{{ loop.index }}{% endfor %}{{ loop.index }};{% endfor %}",
      "{% set x = 0 %}{% for i in [1, 2] %}[{{ x }}{% set x = i %}{{ x }}]{% endfor %}{{ x }}",
      "{% set ns = namespace(total=0, names=[]) %}{% for p in people %}{% set ns.total = ns.total + (p.age or 0) %}"
      "{% set ns.names = ns.names + [p.name] %}{% endfor %}{{ ns.total }} {{ ns.names }}",
      "{% if true %}{% set inner = 'set in if' %}{% endif %}{{ inner }} {% set a, b = 1, 2 %}{{ a }}{{ b }} {% set t = (1, 2) %}{{ t }}",
      "{% set block %}  captured {{ xs | length }}  {% endset %}[{{ block }}] {% set up | upper %}shout{% endset %}{{ up }}",
      "{% macro greet(name, punct='!') %}Hello {{ name }}{{ punct }}{% endmacro %}{{ greet('Bo') }} {{ greet('Al', punct='?') }} {{ greet(name='Cy') }}",
      "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ xs[0] }}{% endcall %}",
      "{% macro row(x) %}{{ x }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ row(1, 2, 3, k=4) }}",
      "{% filter upper %}shout {{ 'this' }}{% endfilter %} {% with a = 5, b = 6 %}{{ a * b }}{% endwith %}{{ a }}",
      "{{ range(3) | list }} {{ range(1, 10, 3) | list }} {{ range(5, 0, -2) | list }} {{ dict(a=1, b='x') }} {{ namespace(a=1).a }}",
      "{% if xs | length > 2 %}long{% elif xs %}short{% else %}empty{% endif %} {% if not n %}not-n{% endif %}",
      "{{ messages[0]['content'] }} {{ messages[-1].content | trim }} {{ messages | selectattr('role', 'equalto', 'user') | list | length }}",
      // errors (both must fail)
      "{% if true %}unterminated",
      "{{ x | no_such_filter }}",
      "{{ nope.attr }}",
      "{{ 'a' + 1 }}",
      "{{ 1 / 0 }}",
      "{% endfor %}",
      "{{ 1 is no_such_test }}",
      "{{ 'unclosed }}",
      "{# unclosed comment",
      "{{ raise_exception('custom failure') }}",
      "{% for x in 5 %}{% endfor %}",
      "{{ nope() }}",
      "{{ [1, 2] < 'a' }}",
      "{{ xs[1:2:0] }}",
      "{{ {[1]: 2} }}",
      "{{ range(1000000) | length }}",
      "{% break %}",
      "{{ nope + 1 }}",
      "{{ }}",
      "{% if %}{% endif %}",
  };
  std::vector<Case> cases;
  for (size_t k = 0; k < templates.size(); ++k) cases.push_back({std::to_string(k), templates[k], v});
  expect_same_as_reference(cases);
}

TEST(ChatTemplate, ErrorsNameLineAndColumn) {
  auto error_of = [](const std::string& t, ojson vars = ojson::object()) {
    Outcome o = render_vkspec({"", t, vars});
    EXPECT_FALSE(o.ok) << t;
    return o.text;
  };
  EXPECT_EQ(error_of("ab\n  {{ x | nope }}"), "line 2, column 10: no filter named 'nope'");
  EXPECT_EQ(error_of("{% if true %}\nx").rfind("line 2, ", 0), 0u) << error_of("{% if true %}\nx");
  EXPECT_NE(error_of("\n\n{{ raise_exception('No system role') }}").find("line 3, column 4: the template raised an error: No system role"),
            std::string::npos);
  EXPECT_NE(error_of("{{ a.b }}").find("'a' is undefined"), std::string::npos);
  EXPECT_NE(error_of("x {% foo %}").find("line 1, column 6: unknown tag 'foo'"), std::string::npos);
}

TEST(ChatTemplate, HostileTemplatesAreBounded) {
  // Nested loops: the step limit ends them (10^10 iterations otherwise).
  Outcome o = render_vkspec({"", "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", ojson::object()});
  EXPECT_FALSE(o.ok);
  EXPECT_NE(o.text.find("loop iterations"), std::string::npos) << o.text;
  // Doubling a string: the size limit ends it (2^100 bytes otherwise).
  o = render_vkspec({"", "{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", ojson::object()});
  EXPECT_FALSE(o.ok);
  EXPECT_NE(o.text.find("exceeds"), std::string::npos) << o.text;
  o = render_vkspec({"", "{{ 'x' * 1000000000000 }}", ojson::object()});
  EXPECT_FALSE(o.ok);
  // Unbounded recursion of a macro.
  o = render_vkspec({"", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", ojson::object()});
  EXPECT_FALSE(o.ok);
  EXPECT_NE(o.text.find("nested more than"), std::string::npos) << o.text;
  // Deeply nested source: refused by the parser, not a stack overflow.
  o = render_vkspec({"", "{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}", ojson::object()});
  EXPECT_FALSE(o.ok);
  o = render_vkspec({"", "{{ " + std::string(50000, '['), ojson::object()});
  EXPECT_FALSE(o.ok);
  std::string ifs;
  for (int k = 0; k < 5000; ++k) ifs += "{% if true %}";
  o = render_vkspec({"", ifs, ojson::object()});
  EXPECT_FALSE(o.ok);
  // Left-associative chains are parsed by loops but build trees as deep as they are long, which rendering and
  // destruction recurse through: 100,000 links of each kind are refused as nesting (they crashed the process).
  const auto chain = [](const std::string& first, const std::string& link) {
    std::string t = "{{ " + first;
    for (int k = 0; k < 100000; ++k) t += link;
    return t + " }}";
  };
  for (const std::string& t : {chain("a", " ~ a"), chain("x", " | string"), chain("x", ".a"), chain("x", "[0]"),
                               chain("f", "()"), chain("1", " + 1"), chain("1", " * 1"), chain("2", " ** 1"),
                               chain("1", " == 1"), chain("a", " or a"), chain("a", " and a"),
                               chain("1", " if 1 else 1")}) {
    o = render_vkspec({"", t, ojson::object()});
    EXPECT_FALSE(o.ok) << t.substr(0, 40);
    EXPECT_NE(o.text.find("nesting too deep"), std::string::npos) << t.substr(0, 40) << ": " << o.text;
  }
  // a chain as long as real templates write still renders
  o = render_vkspec({"", chain("'a'", " ~ 'b'").substr(0, 3 + 3 + 50 * 6) + " }}", ojson::object()});
  EXPECT_TRUE(o.ok) << o.text;
  // Values nested without end.
  o = render_vkspec({"", "{% set ns = namespace(l=[]) %}{% for i in range(5000) %}{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l | length }}", ojson::object()});
  EXPECT_FALSE(o.ok);
  EXPECT_NE(o.text.find("nested more than"), std::string::npos) << o.text;
  // A namespace inside a namespace could make a cycle: refused (jinja2 allows it; no real template does it).
  o = render_vkspec({"", "{% set ns = namespace() %}{% set ns2 = namespace() %}{% set ns.inner = ns2 %}", ojson::object()});
  EXPECT_FALSE(o.ok);
  // Deep JSON in the messages.
  EXPECT_THROW(jinja::Value::from_json(ojson::parse(std::string(1000, '[') + std::string(1000, ']'))), Error);
  // Work (Limits::max_work): values that share their parts (a list doubled by reference 60 times has 2^60
  // leaves in 60 steps) compared, serialized, written, searched, sorted; a growing string or list copied each
  // iteration (quadratic); a quadratic search. Each ran for ever (or to 10 GB) and is now refused within seconds.
  const std::string doubled = "{% set ns = namespace(x=[1], y=[1]) %}{% for i in range(60) %}"
                              "{% set ns.x = [ns.x, ns.x] %}{% set ns.y = [ns.y, ns.y] %}{% endfor %}";
  for (const std::string& t :
       {doubled + "{{ ns.x == ns.y }}", doubled + "{{ ns.x | tojson }}", doubled + "{{ ns.x }}",
        doubled + "{{ ns.x in [ns.y] }}", doubled + "{{ [ns.x, ns.y] | sort }}", doubled + "{{ [ns.x, ns.y] | unique | list }}",
        doubled + "{{ ns.x is eq ns.y }}", std::string("{% set x = [[1] * 100000] * 100000 %}{{ x == x }}"),
        "{% set ns = namespace(s='') %}{% for i in range(100000) %}{% set ns.s = ns.s ~ '" + std::string(600, 'x') +
            "' %}{% endfor %}",
        std::string("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = ns.l + [i] %}{% endfor %}"),
        std::string("{{ range(100000) | unique | list | length }}")}) {
    const auto t0 = std::chrono::steady_clock::now();
    o = render_vkspec({"", t, ojson::object()});
    EXPECT_FALSE(o.ok) << t;
    EXPECT_NE(o.text.find("units of work"), std::string::npos) << t << ": " << o.text;
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 20.0) << t;
  }
  // A list doubled by copying: refused at a million items (it reached 10 GB).
  o = render_vkspec({"", "{% set ns = namespace(x=[1]) %}{% for i in range(60) %}{% set ns.x = ns.x + ns.x %}{% endfor %}", ojson::object()});
  EXPECT_NE(o.text.find("a list of more than 1000000 items"), std::string::npos) << o.text;
  EXPECT_LT(platform::peak_resident_bytes(), size_t(2) << 30);
}

// The work budget leaves room for what real templates do with a long conversation: 2,000 messages of 1 KB
// (2 MB of text) render with every shared template.
TEST(ChatTemplate, LongConversationsRenderWithinTheLimits) {
  const fs::path dir = fs::path(shared_dir()) / "chat-templates";
  if (!fs::exists(dir)) GTEST_SKIP() << dir << " is missing";
  ojson messages = ojson::array({{{"role", "system"}, {"content", std::string(1000, 's')}}});
  for (int k = 0; k < 2000; ++k)
    messages.push_back({{"role", k % 2 ? "assistant" : "user"}, {"content", std::to_string(k) + std::string(1000, 'm')}});
  const ChatInputs in = parse_chat_request(ojson{{"messages", messages}}.dump());
  int templates = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".jinja") continue;
    ++templates;
    try {
      EXPECT_GT(ChatTemplate(read_file(entry.path())).apply(in).size(), 2000u * 1000) << entry.path();
    } catch (const Error& e) {
      // (a template may refuse the roles; never the limits)
      EXPECT_EQ(std::string(e.what()).find("units of work"), std::string::npos) << entry.path() << ": " << e.what();
      EXPECT_EQ(std::string(e.what()).find("exceeds"), std::string::npos) << entry.path() << ": " << e.what();
    }
  }
  EXPECT_GE(templates, 6);
}

TEST(ChatTemplate, StrftimeNowUsesVkspecToday) {
  platform::set_env("VKSPEC_TODAY", "2024-07-26");
  EXPECT_EQ(render_vkspec({"", "{{ strftime_now('%d %b %Y') }} {{ strftime_now('%A %j') }}", ojson::object()}).text,
            "26 Jul 2024 Friday 208");
  platform::set_env("VKSPEC_TODAY", "yesterday");
  EXPECT_FALSE(render_vkspec({"", "{{ strftime_now('%d') }}", ojson::object()}).ok);
  platform::unset_env("VKSPEC_TODAY");
}

TEST(ChatTemplate, ParsesChatRequests) {
  ChatInputs in = parse_chat_request(R"([{"role": "user", "content": "hi", "z": 1, "a": 2}])");
  ASSERT_EQ(in.messages.size(), 1u);
  EXPECT_FALSE(in.tools);
  EXPECT_EQ(in.messages[0].begin().key(), "role");   // key order kept, as Python's json does
  in = parse_chat_request(R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]})");
  ASSERT_TRUE(in.tools);
  EXPECT_EQ(in.tools->size(), 1u);
  for (const char* bad : {"", "[", "{}", "42", "[1]", "[{\"content\": \"x\"}]", "[{\"role\": 3}]", "{\"messages\": [], \"tools\": 1}"})
    EXPECT_THROW(parse_chat_request(bad), Error) << bad;
}

TEST(ChatTemplate, AppliesWithBosEosAndGenerationPrompt) {
  ChatTemplate t("{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
                 "{% if add_generation_prompt %}<assistant>{% else %}{{ eos_token }}{% endif %}");
  ChatInputs in = parse_chat_request(R"([{"role": "user", "content": "hi"}])");
  in.bos_token = "<s>";
  in.eos_token = "</s>";
  EXPECT_EQ(t.apply(in), "<s><user>hi<assistant>");
  in.add_generation_prompt = false;
  EXPECT_EQ(t.apply(in), "<s><user>hi</s>");
  EXPECT_THROW(ChatTemplate("{% for %}"), Error);
  try {
    ChatTemplate("{{ raise_exception('nope') }}").apply(in);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "chat template: line 1, column 4: the template raised an error: nope");
  }
}

}  // namespace
}  // namespace vkspec
