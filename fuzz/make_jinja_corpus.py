#!/usr/bin/env python3
"""Writes the seed corpus for fuzz_jinja: real chat template shapes and one
hostile template per MG-TMPL rule (escapes, built names, private attributes,
format, loads, unknown calls/filters/tests, syntax errors, deep nesting).

Usage: python3 fuzz/make_jinja_corpus.py   (from anywhere; stdlib only)
The corpus directory is rewritten from scratch, so the output is deterministic.
"""

import os
import shutil

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus", "fuzz_jinja")

SEEDS = {
    "ok_chatml": "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                 "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
                 "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
    "ok_mistral": "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
                  "(loop.index0 % 2 == 0) %}{{ raise_exception('roles must alternate') }}{% endif %}"
                  "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
                  "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}"
                  "{% endif %}{% endfor %}",
    "ok_namespace": "{%- set ns = namespace(found=false, idx=0) -%}{%- for m in messages[::-1] %}"
                    "{%- if m.role == 'user' and not ns.found %}{% set ns.found = true %}"
                    "{% set ns.idx = loop.index0 %}{% break %}{% endif %}{%- endfor %}"
                    "{% macro r(m) %}{{ m.content|trim }}{% endmacro %}{% generation %}"
                    "{{ r(messages[0]) }}{% endgeneration %}{{ strftime_now('%d %b %Y') }}",
    "ok_filters": "{{ tools|map(attribute='function.name')|join(', ') }}{{ x|selectattr('type', "
                  "'equalto', 'function')|list|length }}{{ {'a': [1, 2.5e3, 0x1F]}|tojson(indent=2) }}"
                  "{# comment #}{% raw %}{{ raw }}{% endraw %}{{- x is defined and y is not none -}}",
    "ok_call_block": "{% macro m(a, b=1) %}{{ caller(a) }}{% endmacro %}{% call(v) m(1) %}{{ v }}"
                     "{% endcall %}{% filter upper %}x{% endfilter %}{% with a = 1 %}{{ a }}{% endwith %}"
                     "{% set j = joiner(',') %}{{ j() }}{% set t %}x{% endset %}{{ t|lower }}",
    "bad_cycler": "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
    "bad_lipsum": "{{ lipsum.__globals__['os'].system('id') }}",
    "bad_attr": "{{ joiner|attr('__init__')|attr('__globals__') }}",
    "bad_escapes": "{{ x['\\x5f\\x5fclass\\x5f\\x5f'] ~ x['\\N{LOW LINE}_mro__'] ~ x['\\137_doc__'] }}",
    "bad_concat": "{{ x['__cla' ~ 'ss__'] }}{{ x['_'*2 ~ 'base' ~ '_'*2] }}{{ x|attr(['__','init','__']|join) }}",
    "bad_private": "{{ self._TemplateReference__context.cycler.__init__ }}",
    "bad_dynamic": "{% set k = '%c%c' % (95, 95) %}{{ x[k ~ 'class__'] }}{{ x|attr(name) }}",
    "bad_set_string": "{% set k = '__globals__' %}{{ lipsum[k] }}{{ dict(__class__=1)|first }}",
    "bad_format": "{{ '{0.__class__}'.format(x) }}{{ s.format_map(d) }}",
    "bad_load": "{% include 'x.jinja' %}{% import 'm' as m %}{% from 'f' import g %}{% extends 'b' %}",
    "bad_unknown": "{{ open('/etc/passwd') }}{{ x|shell }}{% if x is evil %}{% endif %}{{ x.popen() }}",
    "bad_syntax_eof": "{% for x in y %}{{ x ",
    "bad_syntax_tag": "{% frobnicate %}{{ 'unterminated }}",
    "bad_deep": "{{ " + "(" * 300 + "x" + ")" * 300 + " }}",
    "bad_chain": "{{ a" + " + a" * 300 + " }}",
    "bad_utf8": b"{{ '\xff' }}",
    "ok_unicode": "{{ 'caf\u00e9 \\u00e9' ~ x\u00a0}}",
}


def main():
    shutil.rmtree(CORPUS, ignore_errors=True)
    os.makedirs(CORPUS)
    for name, text in sorted(SEEDS.items()):
        data = text if isinstance(text, bytes) else text.encode("utf-8")
        with open(os.path.join(CORPUS, name + ".jinja"), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
