# -*- coding: utf-8 -*-
# Copyright: llmops.vllm_cluster developers
# Apache License 2.0 (see galaxy.yml)
"""Filters for API keys that reach a configuration file (the nginx_lb role's edge keys).

  api_key_errors(keys, name, ...)  -> messages naming the variable, the position and the rule a key
                                      breaks; never the key itself
  nginx_regex_literal(text)        -> text as a PCRE literal for an nginx config string

Only Python's standard library.
"""

from __future__ import annotations

import collections
import re

from ansible.errors import AnsibleFilterError

# Characters a key may have: they survive an nginx config string, a header and a shell word unquoted.
CHARSET_RE = re.compile(r"^[A-Za-z0-9._~+/=-]*$")
CHARSET_TEXT = "A-Z a-z 0-9 . _ ~ + / = -"
# PCRE metacharacters among those a key may have (nginx_regex_literal).
REGEX_SPECIAL_RE = re.compile(r"([.+])")


def _sequential_share(key):
    """Share of neighbouring characters that step by one (abcd, 4321): a typed sequence."""
    steps = [abs(ord(b) - ord(a)) == 1 for a, b in zip(key, key[1:])]
    return sum(steps) / len(steps) if steps else 0.0


def api_key_errors(keys, name="api_keys", min_length=16, max_length=1024, min_distinct=0,
                   placeholders=None, unique=True):
    """Messages for every key that is not a string, breaks the character set or the length, is listed
    twice, contains a placeholder word, or has too little variety (fewer than min_distinct different
    characters, one character in more than half of the key, or more than half of it a sequence).
    `keys` is a list or one string (an empty string is "no key" and is not checked). The messages name
    `name`, the key's position and the rule: never the key."""
    single = isinstance(keys, str)
    if single:
        keys = [keys] if keys else []
    if not isinstance(keys, (list, tuple)):
        raise AnsibleFilterError("api_key_errors: %s must be a list of strings" % name)
    placeholders = [str(p).lower() for p in (placeholders or [])]
    errors, seen = [], {}
    for index, key in enumerate(keys):
        where = name if single else "%s[%d]" % (name, index)
        if not isinstance(key, str):
            errors.append("%s is not a string" % where)
            continue
        if not CHARSET_RE.fullmatch(key):
            errors.append("%s has a character outside %s" % (where, CHARSET_TEXT))
        if not min_length <= len(key) <= max_length:
            errors.append("%s must be %d to %d characters long" % (where, min_length, max_length))
        if unique and key in seen:
            errors.append("%s is the same key as %s[%d] (each key once)" % (where, name, seen[key]))
        seen.setdefault(key, index)
        lower = key.lower()
        found = [p for p in placeholders if p in lower]
        if found:
            errors.append("%s contains a placeholder word (%s): an example key, not a secret"
                          % (where, ", ".join(found)))
        if min_distinct and key:
            most = collections.Counter(key).most_common(1)[0][1]
            if len(set(key)) < min_distinct:
                errors.append("%s has fewer than %d different characters (low variety)" % (where, min_distinct))
            elif most * 2 > len(key):
                errors.append("%s is more than half one repeated character (low variety)" % where)
            elif _sequential_share(key) > 0.5:
                errors.append("%s is mostly a run of consecutive characters like abcd or 1234 (low variety)" % where)
    return errors


def nginx_regex_literal(text):
    """`text` (characters of a key) as a PCRE literal inside a double-quoted nginx string."""
    if not isinstance(text, str) or not CHARSET_RE.fullmatch(text):
        raise AnsibleFilterError("nginx_regex_literal: only %s can be made a literal" % CHARSET_TEXT)
    return REGEX_SPECIAL_RE.sub(r"[\1]", text)


class FilterModule(object):
    """API key filters."""

    def filters(self):
        return {"api_key_errors": api_key_errors, "nginx_regex_literal": nginx_regex_literal}
