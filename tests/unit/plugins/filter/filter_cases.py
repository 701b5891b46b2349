"""Shared by the filter tests that read YAML cases: load a filter file of plugins/filter by path, read a
cases file beside the tests, and compare only the keys a case gives."""
from __future__ import annotations

import importlib.util
import os

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
FILTERS = os.path.join(HERE, "..", "..", "..", "..", "plugins", "filter")


def load_filter(name):
    """plugins/filter/<name>.py as a module."""
    spec = importlib.util.spec_from_file_location("llmops_filter_" + name, os.path.abspath(os.path.join(FILTERS, name + ".py")))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_cases(file_name):
    with open(os.path.join(HERE, file_name), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def case_ids(cases):
    return [c["name"] for c in cases]


def subset(expected, actual, where):
    """Asserts every key expected gives has that value in actual (lists of mappings entry by entry)."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), "%s: expected a mapping, got %r" % (where, actual)
        for key, value in expected.items():
            assert key in actual, "%s: missing %r (have %s)" % (where, key, sorted(actual))
            subset(value, actual[key], "%s.%s" % (where, key))
    elif isinstance(expected, list) and expected and isinstance(expected[0], dict):
        assert len(actual) == len(expected), "%s: expected %d entries, got %r" % (where, len(expected), actual)
        for index, (want, got) in enumerate(zip(expected, actual)):
            subset(want, got, "%s[%d]" % (where, index))
    else:
        assert actual == expected, "%s: expected %r, got %r" % (where, expected, actual)
