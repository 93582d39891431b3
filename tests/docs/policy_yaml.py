"""load_policy_yaml reads a modelgate policy into JSON data the way
modelgate's parser reads it, so docs/schemas/policy.schema.json can judge it.

PyYAML's SafeLoader is YAML 1.1: it reads `yes` as true, `010` as 8 and
`2027-01-31` as a date, and it keeps the last of two duplicate keys. modelgate
reads none of those that way (policy/src/parse.cc), so this module builds the
data from PyYAML's event stream instead, with modelgate's rules:

  - one document; no anchors, aliases or tags; mapping keys are strings and
    unique (after unquoting); nesting at most 32; strict UTF-8 without a BOM
    or control characters other than tab, LF and CR; at most 1 MiB.
    Breaking one of these raises PolicyYamlError (modelgate: exit 2).
  - a quoted or block scalar is a string;
  - a plain scalar is null (`~`, `null`, `Null`, `NULL`, empty), a boolean
    (exactly `true` / `false`), an integer (decimal digits, no sign, no
    leading zero), else, when YAML 1.1 or 1.2 would read it as a boolean or
    a number (`yes`, `Off`, `010`, `1_000`, `-1`, `1.5`, `0x1f`, `.inf`,
    `1:30`), an Ambiguous value that matches no JSON Schema type (modelgate
    refuses it whatever the field wants: quote it or write true/false),
    else a string (`2027-01-31` is a string).

Standard library and python3-yaml only.
"""
import re

import yaml

MAX_POLICY_BYTES = 1 << 20
MAX_DEPTH = 32

YAML11_BOOLS = {"y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "true", "True", "TRUE",
                "false", "False", "FALSE", "on", "On", "ON", "off", "Off", "OFF"}
NULLS = {"", "~", "null", "Null", "NULL"}
CANONICAL_INT = re.compile(r"(0|[1-9][0-9]*)")


class PolicyYamlError(ValueError):
    """The text is not a policy modelgate would read at all."""


class Ambiguous:
    """A plain scalar that YAML reads as a boolean or number other than
    modelgate's true/false/decimal: no JSON Schema type accepts it."""

    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return f"Ambiguous({self.text!r})"

    def __eq__(self, other):
        return isinstance(other, Ambiguous) and other.text == self.text

    def __hash__(self):
        return hash(("Ambiguous", self.text))


def looks_numeric(v):
    """What YAML 1.1 or 1.2 resolves as an int or float (parse.cc LooksNumeric)."""
    r = v[1:] if v[:1] in ("+", "-") else v
    if r in (".inf", ".Inf", ".INF", ".nan", ".NaN", ".NAN"):
        return True
    if len(r) > 2 and r[0] == "0" and r[1] in "xob":
        return all(c in "0123456789abcdefABCDEF_" for c in r[2:])
    k, digit = 0, False
    while k < len(r) and (r[k].isdigit() and r[k].isascii() or r[k] in "_:"):
        digit |= r[k].isdigit()
        k += 1
    if k < len(r) and r[k] == ".":
        k += 1
        while k < len(r) and (r[k].isdigit() and r[k].isascii() or r[k] == "_"):
            digit |= r[k].isdigit()
            k += 1
    if not digit:
        return False
    if k < len(r) and r[k] in "eE":
        k += 1
        if k < len(r) and r[k] in "+-":
            k += 1
        start = k
        while k < len(r) and r[k].isdigit() and r[k].isascii():
            k += 1
        if k == start:
            return False
    return k == len(r)


def plain_value(text):
    if text in NULLS:
        return None
    if text == "true":
        return True
    if text == "false":
        return False
    if CANONICAL_INT.fullmatch(text):
        return int(text)
    if text in YAML11_BOOLS or looks_numeric(text):
        return Ambiguous(text)
    return text


def check_text(raw):
    if len(raw) > MAX_POLICY_BYTES:
        raise PolicyYamlError(f"policy is larger than {MAX_POLICY_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PolicyYamlError(f"invalid UTF-8 at byte {e.start}") from None
    for i, c in enumerate(text):
        if (ord(c) < 0x20 and c not in "\t\n\r") or c == "\x7f":
            raise PolicyYamlError(f"control character {ord(c):#04x} at character {i}")
        if c == "\ufeff":
            raise PolicyYamlError("byte order mark")
    return text


def where(event):
    m = event.start_mark
    return f"line {m.line + 1}, column {m.column + 1}"


def load_policy_yaml(raw):
    """JSON data (dict, list, str, int, bool, None, Ambiguous) for policy
    bytes `raw`; PolicyYamlError when modelgate would refuse the YAML."""
    text = check_text(raw if isinstance(raw, bytes) else raw.encode("utf-8"))
    try:
        events = list(yaml.parse(text, Loader=yaml.SafeLoader))
    except yaml.YAMLError as e:
        raise PolicyYamlError(f"YAML syntax: {e}") from None
    stack = []  # [container, pending key] pairs
    root = []
    documents = 0
    for ev in events:
        if isinstance(ev, yaml.DocumentStartEvent):
            documents += 1
            if documents > 1:
                raise PolicyYamlError(f"a second YAML document at {where(ev)}")
            continue
        if isinstance(ev, yaml.AliasEvent):
            raise PolicyYamlError(f"an alias at {where(ev)}")
        if isinstance(ev, (yaml.ScalarEvent, yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            if ev.anchor is not None:
                raise PolicyYamlError(f"an anchor at {where(ev)}")
            if ev.tag is not None:
                raise PolicyYamlError(f"a tag ({ev.tag}) at {where(ev)}")
        if isinstance(ev, yaml.ScalarEvent):
            value = plain_value(ev.value) if ev.style is None else ev.value
            add(stack, root, value, ev, is_scalar_key=True)
        elif isinstance(ev, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            if len(stack) >= MAX_DEPTH:
                raise PolicyYamlError(f"nesting deeper than {MAX_DEPTH} at {where(ev)}")
            container = [] if isinstance(ev, yaml.SequenceStartEvent) else {}
            add(stack, root, container, ev, is_scalar_key=False)
            stack.append([container, None, False])
        elif isinstance(ev, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            stack.pop()
    if documents == 0 or not root or root[0] is None:
        raise PolicyYamlError("empty policy")
    return root[0]


def add(stack, root, value, ev, is_scalar_key):
    if not stack:
        root.append(value)
        return
    top = stack[-1]
    container = top[0]
    if isinstance(container, list):
        container.append(value)
        return
    if not top[2]:  # a key
        if not is_scalar_key:
            raise PolicyYamlError(f"a mapping key that is not a string at {where(ev)}")
        key = ev.value  # the key's text, whatever its style (parse.cc compares values)
        if key in container:
            raise PolicyYamlError(f"duplicate key {key!r} at {where(ev)}")
        top[1], top[2] = key, True
        container[key] = None
        return
    container[top[1]] = value
    top[1], top[2] = None, False
