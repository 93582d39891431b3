// AnalyzeTemplate: real chat templates pass with nothing above info; every
// escape route (dunder attributes by any syntax, built names, private
// attributes, format methods, loads, unknown calls/filters/tests) is flagged
// with its id and severity at the construct's offset; syntax errors and each
// limit at N and N+1.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "jinja.h"

namespace core = modelgate::core;
namespace scanner = modelgate::scanner;
using scanner::internal::AnalyzeTemplate;
using scanner::internal::TemplateLimits;

namespace {

std::vector<scanner::Finding> Analyze(const std::string& text, uint64_t base = 1000,
                                      const TemplateLimits& limits = {}) {
  std::vector<scanner::Finding> f;
  AnalyzeTemplate(text, base, "chat_template of tokenizer_config.json", limits, &f);
  return f;
}

std::string Ids(const std::vector<scanner::Finding>& f) {
  std::string s;
  for (const auto& x : f) s += (s.empty() ? "" : " ") + x.id;
  return s;
}

bool Has(const std::vector<scanner::Finding>& f, const std::string& id, core::Severity sev) {
  for (const auto& x : f) {
    if (x.id == id && x.severity == sev) return true;
  }
  return false;
}

bool NothingAboveInfo(const std::vector<scanner::Finding>& f) {
  for (const auto& x : f) {
    if (x.severity != core::Severity::kInfo) return false;
  }
  return true;
}

const char* kLlama3 =
    "{{- bos_token }}\n"
    "{%- if custom_tools is defined %}{%- set tools = custom_tools %}{%- endif %}\n"
    "{%- if not tools_in_user_message is defined %}{%- set tools_in_user_message = true %}{%- endif %}\n"
    "{%- if not date_string is defined %}\n"
    "    {%- if strftime_now is defined %}{%- set date_string = strftime_now(\"%d %b %Y\") %}\n"
    "    {%- else %}{%- set date_string = \"26 Jul 2024\" %}{%- endif %}\n"
    "{%- endif %}\n"
    "{%- if messages[0]['role'] == 'system' %}\n"
    "    {%- set system_message = messages[0]['content']|trim %}\n"
    "    {%- set messages = messages[1:] %}\n"
    "{%- else %}{%- set system_message = \"\" %}{%- endif %}\n"
    "{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n"
    "{%- if tools is not none %}{{- \"Environment: ipython\\n\" }}{%- endif %}\n"
    "{{- \"Today Date: \" + date_string + \"\\n\\n\" }}\n"
    "{%- if tools is not none and not tools_in_user_message %}\n"
    "    {%- for t in tools %}{{- t | tojson(indent=4) }}{{- \"\\n\\n\" }}{%- endfor %}\n"
    "{%- endif %}\n"
    "{{- system_message }}{{- \"<|eot_id|>\" }}\n"
    "{%- for message in messages %}\n"
    "    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}\n"
    "        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}\n"
    "    {%- elif 'tool_calls' in message %}\n"
    "        {%- if not message.tool_calls|length == 1 %}\n"
    "            {{- raise_exception(\"This model only supports single tool-calls at once!\") }}\n"
    "        {%- endif %}\n"
    "        {%- set tool_call = message.tool_calls[0].function %}\n"
    "        {{- '{\"name\": \"' + tool_call.name + '\", ' }}\n"
    "        {{- '\"parameters\": ' }}{{- tool_call.arguments | tojson }}{{- \"}\" }}{{- \"<|eot_id|>\" }}\n"
    "    {%- elif message.role == \"tool\" or message.role == \"ipython\" %}\n"
    "        {{- \"<|start_header_id|>ipython<|end_header_id|>\\n\\n\" }}\n"
    "        {%- if message.content is mapping or message.content is iterable %}\n"
    "            {{- message.content | tojson }}\n"
    "        {%- else %}{{- message.content }}{%- endif %}\n"
    "        {{- \"<|eot_id|>\" }}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}\n";

const char* kChatml =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

const char* kMistral =
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}"
    "{% endfor %}";

// Loop state in a namespace, a macro, a generation block, loop controls,
// filters with attribute paths, and a comment and raw block.
const char* kNamespaceState =
    "{#- tools and reasoning -#}\n"
    "{%- set ns = namespace(found=false, last_user=0, parts=[]) -%}\n"
    "{%- macro render(m) -%}{{ m.content | string | trim }}{%- endmacro -%}\n"
    "{%- for message in messages[::-1] %}\n"
    "  {%- if message.role == 'user' and not ns.found %}{% set ns.found = true %}"
    "{% set ns.last_user = messages|length - loop.index0 - 1 %}{% break %}{% endif %}\n"
    "{%- endfor %}\n"
    "{%- for message in messages if message.role != 'system' %}\n"
    "  {%- if loop.index0 > ns.last_user %}{% generation %}{{ render(message) }}{% endgeneration %}"
    "{% else %}{{ render(message) }}{% endif %}\n"
    "  {%- if message.tool_calls is defined %}{% for c in message.tool_calls|selectattr('type', 'equalto', 'function')|map(attribute='function.name') %}"
    "{{ c ~ (',' if not loop.last) }}{% continue %}{% endfor %}{% endif %}\n"
    "{%- endfor %}{% raw %}{{ not parsed }}{% endraw %}\n"
    "{{- (messages|map(attribute='content')|join('\\n')).split('\\n')|first|upper }}"
    "{{ {'a': {'b': [1, 2]}}['a']['b'][0] }}{{ ns.parts[0] if ns.parts else '' }}";

}  // namespace

TEST_CASE("jinja: real chat templates give nothing above info", "[scanner][jinja]") {
  for (const char* t : {kLlama3, kChatml, kMistral, kNamespaceState}) {
    auto f = Analyze(t);
    INFO(t);
    INFO(Ids(f));
    CHECK(NothingAboveInfo(f));
  }
}

TEST_CASE("jinja: dunder attributes by every syntax are critical at their offset", "[scanner][jinja]") {
  struct Case {
    std::string text;
    uint64_t pos;  // offset of the flagged construct in text
  };
  const std::vector<Case> cases = {
      {"{{ cycler.__init__.__globals__.os.popen('id').read() }}", 10},
      {"{{ ''.__class__.__mro__[1].__subclasses__() }}", 6},
      {"{{ x['__globals__'] }}", 4},
      {"{{ x|attr('__init__') }}", 5},
      {"{{ x['\\x5f\\x5fclass\\x5f\\x5f'] }}", 4},
      {"{{ x['__cla' ~ 'ss__'] }}", 4},
      {"{{ x['__cla' + 'ss__'] }}", 4},
      {"{{ x['_'*2 ~ 'class' ~ '_'*2] }}", 4},
      {"{{ x['\\N{LOW LINE}\\N{low line}class__'] }}", 4},
      {"{{ x[\"__cl\" 'ass__'] }}", 4},
      {"{{ x|attr(['__', 'class', '__']|join) }}", 5},
      {"{{ x|attr('__CLASS__'|lower) }}", 5},
      {"{{ lipsum.__globals__['os'] }}", 10},
      {"{{ joiner.__init__ }}", 10},
      {"{{ namespace.__init__.__globals__ }}", 13},
      {"{{ range.__doc__ }}", 9},
      {"{{ dict.mro() }}", 8},
      {"{% set k = '__class__' %}{{ x[k] }}", 29},
      {"{{ x|map(attribute='__class__')|list }}", 5},
      {"{{ x|selectattr('a.__class__') }}", 5},
      {"{{ x|sort(attribute='__class__') }}", 5},
      {"{{ x|map('attr', '__class__') }}", 5},
      {"{{ (x if y else z).__class__ }}", 19},
      {"{{ x.gi_frame.f_globals }}", 5},
      {"{% set ns = namespace() %}{% set ns.__class__ = 1 %}", 33},
      {"{{ x['__class__' if a else 'b'] }}", 4},
      {"{% macro m(k='__class__') %}{{ x[k] }}{% endmacro %}", 32},
      {"{% for k in ['a', '__init__'] %}{{ x[k] }}{% endfor %}", 36},
      {"{% macro m() %}{{ caller('__class__') }}{% endmacro %}{% call(k) m() %}{{ x[k] }}{% endcall %}", 75},
      {"{% set ns = namespace(a='__class__') %}{{ y[ns.a] }}", 43},
      {"{{ x[('__ssalc__'|reverse)] }}", 4},
  };
  for (const Case& c : cases) {
    auto f = Analyze(c.text);
    INFO(c.text);
    INFO(Ids(f));
    REQUIRE(Has(f, "MG-TMPL-UNSAFE-ATTR", core::Severity::kCritical));
    for (const auto& x : f) {
      if (x.id == "MG-TMPL-UNSAFE-ATTR") {
        CHECK(x.offset == 1000 + c.pos);
        CHECK(x.message.rfind("chat_template of tokenizer_config.json: ", 0) == 0);
        break;
      }
    }
  }
}

TEST_CASE("jinja: one critical finding per attribute chain", "[scanner][jinja]") {
  auto f = Analyze("{{ cycler.__init__.__globals__.os.popen('id').read() }}");
  CHECK(Ids(f) == "MG-TMPL-UNSAFE-ATTR");
  CHECK(f[0].message.find("cycler") != std::string::npos);
}

TEST_CASE("jinja: private attributes are high", "[scanner][jinja]") {
  auto f = Analyze("{{ self._TemplateReference__context }}");
  CHECK(Has(f, "MG-TMPL-PRIVATE-ATTR", core::Severity::kHigh));
  CHECK(f[0].offset == 1000 + 8);
  f = Analyze("{{ x._private }}");
  CHECK(Ids(f) == "MG-TMPL-PRIVATE-ATTR");
  // private, then a dunder further along: the dunder is critical still
  f = Analyze("{{ self._TemplateReference__context.cycler.__init__ }}");
  CHECK(Has(f, "MG-TMPL-UNSAFE-ATTR", core::Severity::kCritical));
}

TEST_CASE("jinja: names the analyzer cannot compute are high", "[scanner][jinja]") {
  for (const char* t : {"{{ x|attr(name) }}", "{{ x|attr('%c%cclass%c%c' % (95,95,95,95)) }}",
                        "{{ x['%c%cclass' % (95, 95) ~ y] }}", "{{ x[a ~ b] }}",
                        "{% set k = '%c%c' % (95, 95) %}{{ x[k] }}",
                        "{% set k %}__class__{% endset %}{{ x[k] }}",
                        "{{ x['\\N{EM SPACE}'] }}", "{{ x|map(attribute=y) }}",
                        "{% set u = (lipsum|string)[18] %}{% set k = u ~ u %}{{ lipsum[k] }}",
                        "{% macro m(k) %}{{ x[k] }}{% endmacro %}{{ m('%c' % 95) }}",
                        "{% set k = '%c' % 95 %}{{ x[k|lower] }}",
                        "{% set k = '%c' % 95 %}{% set k2 = k %}{% set ns = namespace(a=k2) %}{{ x[ns.a] }}"}) {
    auto f = Analyze(t);
    INFO(t);
    INFO(Ids(f));
    CHECK(Has(f, "MG-TMPL-DYNAMIC-ATTR", core::Severity::kHigh));
  }
  // Ordinary indexing by a variable is not flagged.
  CHECK(Analyze("{% for i in range(3) %}{{ messages[i]['content'] }}{{ d[message.role] }}{% endfor %}").empty());
  CHECK(Analyze("{% set last = messages|last %}{% set sys = messages[0]['content']|trim %}"
                "{{ role_map[last.role] }}{{ messages[(messages|length) - 1] }}").empty());
}

TEST_CASE("jinja: strings naming internals are high wherever they appear", "[scanner][jinja]") {
  auto f = Analyze("{% set k = '__class__' %}");
  CHECK(Ids(f) == "MG-TMPL-UNSAFE-STRING");
  CHECK(f[0].offset == 1000 + 11);
  CHECK(Ids(Analyze("{{ dict(__class__=1)|first }}")).find("MG-TMPL-UNSAFE-STRING") != std::string::npos);
  CHECK(Ids(Analyze("{{ '__glo' ~ x }}")) == "MG-TMPL-UNSAFE-STRING");
  // Text that only looks a bit like it is fine.
  CHECK(Analyze("{{ '<__media__>' ~ '__' ~ 'snake_case' ~ '_' }}").empty());
}

TEST_CASE("jinja: format methods, loads, unknown calls, filters and tests are high", "[scanner][jinja]") {
  struct Case {
    const char* text;
    const char* id;
    uint64_t pos;
  };
  const Case cases[] = {
      {"{{ '{0.__class__}'.format(x) }}", "MG-TMPL-FORMAT-METHOD", 19},
      {"{{ s.format_map(d) }}", "MG-TMPL-FORMAT-METHOD", 5},
      {"{{ s|attr('format')(1) }}", "MG-TMPL-FORMAT-METHOD", 5},
      {"{% include 'other.jinja' %}", "MG-TMPL-LOAD", 3},
      {"{% import 'm.jinja' as m %}", "MG-TMPL-LOAD", 3},
      {"{% from 'm.jinja' import render %}{{ render() }}", "MG-TMPL-LOAD", 3},
      {"{% extends 'base.jinja' %}", "MG-TMPL-LOAD", 3},
      {"{{ open('/etc/passwd') }}", "MG-TMPL-UNKNOWN-CALL", 3},
      {"{{ x.popen('id') }}", "MG-TMPL-UNKNOWN-CALL", 5},
      {"{{ x[0]() }}", "MG-TMPL-UNKNOWN-CALL", 4},
      {"{{ x|shell }}", "MG-TMPL-UNKNOWN-FILTER", 5},
      {"{{ x|map('shell') }}", "MG-TMPL-UNKNOWN-FILTER", 9},
      {"{% if x is evil %}{% endif %}", "MG-TMPL-UNKNOWN-TEST", 8},
      {"{{ x|select('evil') }}", "MG-TMPL-UNKNOWN-TEST", 12},
  };
  for (const Case& c : cases) {
    auto f = Analyze(c.text);
    INFO(c.text);
    INFO(Ids(f));
    REQUIRE(Has(f, c.id, core::Severity::kHigh));
    for (const auto& x : f) {
      if (x.id == c.id) {
        CHECK(x.offset == 1000 + c.pos);
        break;
      }
    }
  }
  // Known methods, globals and macros are not calls to flag.
  CHECK(Analyze("{% macro m() %}{{ caller() }}{% endmacro %}{% call m() %}x{% endcall %}"
                "{{ 'a b'.split(' ')|join(',') }}{{ d.items()|list }}{{ range(3)|list }}"
                "{% set j = joiner(', ') %}{{ j() }}{{ loop.cycle('a', 'b') if loop }}")
            .empty());
}

TEST_CASE("jinja: syntax errors are MG-TMPL-UNPARSEABLE, high, at the error", "[scanner][jinja]") {
  struct Case {
    const char* text;
    uint64_t pos;
  };
  const Case cases[] = {
      {"{{ x ", 5},                          // end of template in a print
      {"{% for x in y %}", 16},             // unclosed for
      {"{% if x %}{% endfor %}", 13},       // wrong end tag
      {"{% frobnicate %}", 3},              // unknown tag
      {"{{ 'abc }}", 3},                    // unterminated string
      {"{{ '\\x5' }}", 3},                  // truncated \x escape
      {"{{ x ! y }}", 5},                   // unexpected char
      {"{{ (x] }}", 5},                     // unbalanced bracket
      {"{# never closed", 0},               // comment
      {"{% raw %} never closed", 0},        // raw
      {"{{ }}", 3},                         // empty expression
      {"{{ x is y is z }}", 10},            // chained tests
      {"{% call x %}{% endcall %}", 10},    // call block without a call
      {"{% set 1 = x %}", 9},               // bad assignment target
  };
  for (const Case& c : cases) {
    auto f = Analyze(c.text);
    INFO(c.text);
    INFO(Ids(f));
    REQUIRE(f.size() == 1);
    CHECK(f[0].id == "MG-TMPL-UNPARSEABLE");
    CHECK(f[0].severity == core::Severity::kHigh);
    CHECK(f[0].offset == 1000 + c.pos);
  }
  auto f = Analyze(std::string("{{ '\xff' }}"));
  REQUIRE(f.size() == 1);
  CHECK(f[0].id == "MG-TMPL-UNPARSEABLE");
  CHECK(f[0].offset == 1000 + 4);
}

TEST_CASE("jinja: lexer details match jinja2", "[scanner][jinja]") {
  // Braces balanced inside a print: `}}` of the dict is not the end.
  CHECK(Analyze("{{ {'a': {'b': 1}} }}").empty());
  // `{{-` strips, it is not a unary minus; `-}}` ends.
  CHECK(Analyze("{{- x -}}{%- if x -%}{%+ if y +%}{% endif %}{% endif %}").empty());
  // x.0.1 is two integer subscripts, 1.5e3 a float, 0x1F and 1_000 integers.
  CHECK(Analyze("{{ x.0.1 }}{{ 1.5e3 + 0x1F + 1_000 + 0b1 + 0o7 }}").empty());
  // Comments and raw blocks hide their contents.
  CHECK(Analyze("{# {{ x.__class__ }} #}{% raw %}{{ x.__class__ }}{% endraw %}").empty());
  // An unknown escape stays as written; \' and octal decode.
  CHECK(Ids(Analyze("{{ x['\\137\\137class\\137\\137'] }}")) == "MG-TMPL-UNSAFE-ATTR");
  CHECK(Analyze("{{ '\\q\\'' }}").empty());
  // Non-breaking space between tokens is whitespace, as in Python's \s.
  CHECK(Ids(Analyze("{{ x\xc2\xa0.__class__ }}")) == "MG-TMPL-UNSAFE-ATTR");
}

TEST_CASE("jinja: offsets without a base are kNoOffset", "[scanner][jinja]") {
  auto f = Analyze("{{ x.__class__ }}", core::kNoOffset);
  REQUIRE(f.size() == 1);
  CHECK(f[0].offset == core::kNoOffset);
  f = Analyze("{{ x ", core::kNoOffset);
  REQUIRE(f.size() == 1);
  CHECK(f[0].offset == core::kNoOffset);
}

TEST_CASE("jinja: template byte limit, N passes and N+1 is MG-TMPL-LIMIT", "[scanner][jinja][limits]") {
  TemplateLimits limits;
  limits.max_template_bytes = 16;
  CHECK(Analyze(std::string(16, 'a'), 0, limits).empty());
  auto f = Analyze(std::string(17, 'a'), 0, limits);
  REQUIRE(f.size() == 1);
  CHECK(f[0].id == "MG-TMPL-LIMIT");
  CHECK(f[0].severity == core::Severity::kHigh);
  CHECK(scanner::internal::kMaxTemplateBytes == TemplateLimits{}.max_template_bytes);
}

TEST_CASE("jinja: token limit, N passes and N+1 is MG-TMPL-LIMIT", "[scanner][jinja][limits]") {
  TemplateLimits limits;
  // "{{ a }}" is three tokens (begin, name, end); the end of the template
  // is not counted.
  limits.max_tokens = 3;
  CHECK(Analyze("{{ a }}", 0, limits).empty());
  auto f = Analyze("{{ a }}x", 0, limits);
  REQUIRE(f.size() == 1);
  CHECK(f[0].id == "MG-TMPL-LIMIT");
  CHECK(f[0].offset == 7);
}

TEST_CASE("jinja: depth limit, N passes and N+1 is MG-TMPL-LIMIT", "[scanner][jinja][limits]") {
  TemplateLimits limits;
  limits.max_depth = 8;
  // Depth counts the template body (1) and each bracketed expression.
  auto nested = [](int n) {
    std::string s = "{{ ";
    for (int i = 0; i < n; ++i) s += "(";
    s += "x";
    for (int i = 0; i < n; ++i) s += ")";
    return s + " }}";
  };
  int passing = -1;
  for (int n = 0; n < 12; ++n) {
    if (Analyze(nested(n), 0, limits).empty()) passing = n;
  }
  REQUIRE(passing >= 1);
  CHECK(Analyze(nested(passing), 0, limits).empty());
  auto f = Analyze(nested(passing + 1), 0, limits);
  REQUIRE(f.size() == 1);
  CHECK(f[0].id == "MG-TMPL-LIMIT");
  // A long left-associative chain is a deep tree: bounded by the same limit.
  std::string chain = "{{ a";
  for (int i = 0; i < 20; ++i) chain += " ~ a";
  CHECK(Analyze(chain + " }}", 0, limits).size() == 0);  // ~ is one Concat node
  chain = "{{ a";
  for (int i = 0; i < 20; ++i) chain += " + a";
  f = Analyze(chain + " }}", 0, limits);
  REQUIRE(f.size() == 1);
  CHECK(f[0].id == "MG-TMPL-LIMIT");
  // Default limits take deep-but-real nesting, and a 100,000-level one fails
  // cleanly rather than overflowing the stack.
  CHECK(Analyze(nested(40)).empty());
  f = Analyze(nested(100'000));
  REQUIRE(f.size() == 1);
  CHECK(f[0].id == "MG-TMPL-LIMIT");
  f = Analyze("{{ " + std::string(100'000, '-') + "x }}");
  REQUIRE(f.size() == 1);
  CHECK(f[0].id == "MG-TMPL-LIMIT");
}

TEST_CASE("jinja: findings of one id are capped, the last says how many more", "[scanner][jinja][limits]") {
  const uint64_t n = scanner::internal::kMaxTemplateFindingsPerId;
  std::string t;
  for (uint64_t i = 0; i < n; ++i) t += "{{ x.__class__ }}";
  auto f = Analyze(t);
  CHECK(f.size() == n);
  CHECK(f.back().message.find("more like it") == std::string::npos);
  t += "{{ x.__class__ }}";
  f = Analyze(t);
  CHECK(f.size() == n);
  CHECK(f.back().message.find("(1 more like it not listed)") != std::string::npos);
}
