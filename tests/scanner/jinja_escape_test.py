#!/usr/bin/python3
"""What a hostile chat template does, and that the gate's analyzer flags it.

Usage: jinja_escape_test.py ANALYZE_TEMPLATE SCRATCH_DIR

For each hostile template: rendered in a plain jinja2.Environment (what
llama-cpp-python used before CVE-2024-34359) it really runs code (writes a
marker file through os); rendered in ImmutableSandboxedEnvironment (what
transformers uses, with its globals) it raises SecurityError and writes
nothing; and the analyzer (the analyze_template driver) reports it critical.
Benign chat templates render in the sandbox and get no finding above info.
Needs Debian's python3-jinja2; a missing module fails the test.
"""

import os
import shutil
import subprocess
import sys

import jinja2
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment

FAILURES = []
PASSED = [0]


def check(cond, what):
    PASSED[0] += bool(cond)
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what)


def transformers_env():
    # transformers' _compile_jinja_template, without its generation tag.
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: "03 Dec 2026"
    return env


def analyze(driver, path):
    out = subprocess.run([driver, path], check=True, capture_output=True, text=True).stdout
    return [line.split() for line in out.splitlines() if line.strip()]


def hostile(marker):
    m = marker.replace("'", "")
    cmd = f"touch {m}"
    return {
        "cycler_globals": "{{ cycler.__init__.__globals__.os.popen('%s').read() }}" % cmd,
        "lipsum_globals": "{{ lipsum.__globals__['os'].system('%s') }}" % cmd,
        "joiner_attr_filter": "{{ (joiner|attr('__init__')|attr('__globals__'))['os'].system('%s') }}" % cmd,
        "escaped_names": "{{ namespace['\\x5f\\x5finit\\x5f\\x5f']['__glo' ~ 'bals__'].os.system('%s') }}" % cmd,
        "in_chat_loop": ("{% for message in messages %}{{ message['content'] }}"
                         "{% if loop.last %}{{ self._TemplateReference__context.cycler.__init__"
                         ".__globals__.os.system('" + cmd + "') }}{% endif %}{% endfor %}"),
    }


BENIGN = {
    "chatml": ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
               "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
               "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"),
    "mistral": ("{{ bos_token }}{% for message in messages %}"
                "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
                "{{ raise_exception('Conversation roles must alternate') }}{% endif %}"
                "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
                "{% else %}{{ message['content'] + eos_token }}{% endif %}{% endfor %}"),
    "namespace_state": ("{% set ns = namespace(found=false) %}{% for m in messages %}"
                        "{% if m.role == 'system' %}{% set ns.found = true %}{% endif %}{% endfor %}"
                        "{% if not ns.found %}Today is {{ strftime_now('%d %b %Y') }}.{% endif %}"
                        "{% for m in messages %}{{ m.content|trim }}{% if loop.last %}{% break %}"
                        "{% endif %}{% endfor %}"),
}

GRAMMAR = [
    "{{ a }}", "{{ a b }}", "{{ }}", "{{ () }}", "{{ (a,) }}", "{{ a, b }}", "{{ [1, 2,] }}",
    "{{ {'a': 1,} }}", "{{ {'a'} }}", "{{ a if b }}", "{{ a if b else c if d else e }}",
    "{{ not not a }}", "{{ a not in b }}", "{{ a is not defined }}", "{{ a is divisibleby 3 }}",
    "{{ a is b is c }}", "{{ a|f(1, x=2) }}", "{{ f(x=1, 2) }}", "{{ f(*a, **b) }}",
    "{{ f(**b, *a) }}", "{{ f(a,) }}", "{{ a[1:2:3] }}", "{{ a[::] }}", "{{ a[] }}", "{{ a.0.b }}",
    "{{ a. }}", "{{ -a|abs }}", "{{ a ** -b }}", "{{ 1.5e3 + 0x1f + 0b11 + 1_000 }}", "{{ 01 }}",
    "{{ 'a' 'b' \"c\" }}", "{{ a ~ b ~ c }}", "{{ a // b % c }}", "{{ a < b <= c }}",
    "{{ a === b }}", "{{ a !b }}", "{{ a }", "{{ (a] }}", "{{ a }}}", "{% if a %}{% elif b %}{% else %}{% endif %}",
    "{% if a %}{% else %}{% elif b %}{% endif %}", "{% for a, b in c if d recursive %}{{ loop(b) }}{% else %}{% endfor %}",
    "{% for a in b %}{% break %}{% continue %}{% endfor %}", "{% for a.b in c %}{% endfor %}",
    "{% set a, b = 1, 2 %}", "{% set a.b = 1 %}", "{% set a | upper %}x{% endset %}", "{% set 1 = 2 %}",
    "{% macro m(a, b=1) %}{% endmacro %}", "{% macro m(a=1, b) %}{% endmacro %}", "{% macro m(a,) %}{% endmacro %}",
    "{% call(x) m(1) %}{% endcall %}", "{% call m %}{% endcall %}", "{% filter upper|trim %}x{% endfilter %}",
    "{% with a = 1, b = 2 %}{% endwith %}", "{% block b scoped %}{% endblock b %}", "{% block b-c %}{% endblock %}",
    "{% autoescape true %}{% endautoescape %}", "{% do a.append(1) %}", "{% print a, b %}",
    "{% include 'a' ignore missing without context %}", "{% from 'a' import b as c, d with context %}",
    "{% from 'a' import _b %}", "{% import 'a' as b %}", "{% extends 'a' %}", "{% raw %}{{ x {% endraw %}",
    "{%- raw -%} x {%- endraw -%}", "{# a #}{#- b -#}", "{# a", "{% endfor %}", "{% frob %}", "{% if a %}",
    "{{- a -}}{%- if a -%}{%+ endif +%}", "{{ a -}}", "{{ '\\x4' }}", "{{ '\\N{LOW LINE}' }}", "{{ a\u00a0}}",
    "{% for a in b %}{% endfor x %}", "{% if a %}{% endif %}{% endif %}", "{{ a is sameas none }}",
    "{{ a|map('upper')|list }}", "{{ a.b(c).d[e](f) }}", "{{ {'a': {'b': {}}} }}",
]

MESSAGES = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    driver, scratch = sys.argv[1], sys.argv[2]
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    for name, _ in hostile("x").items():
        marker = os.path.join(scratch, name + ".marker")
        text = hostile(marker)[name]
        path = os.path.join(scratch, name + ".jinja")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        # 1. The sandbox refuses it and nothing is written.
        try:
            transformers_env().from_string(text).render(messages=MESSAGES)
            check(False, f"{name}: ImmutableSandboxedEnvironment rendered it")
        except SecurityError as e:
            check("unsafe" in str(e), f"{name}: sandbox refusal names the attribute: {e}")
        except jinja2.exceptions.UndefinedError:
            # |attr() of an unsafe name gives an Undefined in the sandbox;
            # the next step then fails on it.
            pass
        check(not os.path.exists(marker), f"{name}: the sandbox wrote the marker")
        # 2. A plain Environment runs it: the marker appears.
        jinja2.Environment().from_string(text).render(messages=MESSAGES)
        check(os.path.exists(marker), f"{name}: plain Environment did not run the command")
        # 3. The analyzer calls it critical.
        findings = analyze(driver, path)
        ids = [f[0] for f in findings]
        check(["MG-TMPL-UNSAFE-ATTR", "critical"] in [f[:2] for f in findings],
              f"{name}: analyzer findings {ids} lack a critical MG-TMPL-UNSAFE-ATTR")
        for f in findings:
            check(f[0].startswith("MG-TMPL-") and 0 <= int(f[2]) <= len(text.encode()),
                  f"{name}: finding {f} has a bad id or offset")
    for name, text in BENIGN.items():
        path = os.path.join(scratch, name + ".jinja")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        out = transformers_env().from_string(text).render(
            messages=MESSAGES, bos_token="<s>", eos_token="</s>", add_generation_prompt=True)
        check("hello" in out, f"{name}: the sandbox did not render it")
        findings = analyze(driver, path)
        check(all(f[1] == "info" for f in findings), f"{name}: benign template got {findings}")
    # Escapes decoded as jinja2 decodes them: the analyzer's folded name is
    # the one jinja2 reads.
    for literal, value in (("'\\x5f\\x5fclass\\x5f\\x5f'", "__class__"),
                           ("'\\N{LOW LINE}\\N{low line}class__'", "__class__"),
                           ("'\\137_class_\\137'", "__class__")):
        check(jinja2.Environment().from_string("{{ %s }}" % literal).render() == value,
              f"jinja2 decodes {literal} as {value}")
        path = os.path.join(scratch, "escape.jinja")
        with open(path, "w", encoding="utf-8") as f:
            f.write("{{ x[%s] }}" % literal)
        check(["MG-TMPL-UNSAFE-ATTR", "critical", "4"] in analyze(driver, path),
              f"analyzer reads x[{literal}] as a dunder")
    # The grammar: jinja2 (with the tags transformers enables, and do) and the
    # analyzer accept and refuse the same templates.
    env = jinja2.Environment(extensions=["jinja2.ext.loopcontrols", "jinja2.ext.do"])
    for i, text in enumerate(GRAMMAR):
        try:
            env.parse(text)
            accepted = True
        except jinja2.exceptions.TemplateSyntaxError:
            accepted = False
        path = os.path.join(scratch, "grammar%d.jinja" % i)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        ids = [f[0] for f in analyze(driver, path)]
        check(accepted == ("MG-TMPL-UNPARSEABLE" not in ids),
              f"grammar: jinja2 {'accepts' if accepted else 'refuses'} {text!r}, analyzer gives {ids}")
    print(f"{PASSED[0]} passed, {len(FAILURES)} failed")
    sys.exit(1 if FAILURES else 0)


if __name__ == "__main__":
    main()
