"""Unit tests for plugins/filter/firewall.py's inventory readers (firewall_sources,
firewall_source_addresses, firewall_address_errors), cases in firewall_cases.yml."""
from __future__ import annotations

import importlib.util
import os

import pytest
import yaml

_HERE = os.path.dirname(__file__)
_PATH = os.path.join(_HERE, "..", "..", "..", "..", "plugins", "filter", "firewall.py")
_spec = importlib.util.spec_from_file_location("llmops_firewall_filter_sources", os.path.abspath(_PATH))
fw = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fw)

with open(os.path.join(_HERE, "firewall_cases.yml"), encoding="utf-8") as _fh:
    CASES = yaml.safe_load(_fh)


def _ids(cases):
    return [c["name"] for c in cases]


def _subset(expected, actual, where):
    if isinstance(expected, dict):
        assert isinstance(actual, dict), "%s: expected a mapping, got %r" % (where, actual)
        for key, value in expected.items():
            assert key in actual, "%s: missing %r (have %s)" % (where, key, sorted(actual))
            _subset(value, actual[key], "%s.%s" % (where, key))
    elif isinstance(expected, list) and expected and isinstance(expected[0], dict):
        assert len(actual) == len(expected), "%s: expected %d entries, got %r" % (where, len(expected), actual)
        for index, (want, got) in enumerate(zip(expected, actual)):
            _subset(want, got, "%s[%d]" % (where, index))
    else:
        assert actual == expected, "%s: expected %r, got %r" % (where, expected, actual)


@pytest.mark.parametrize("case", CASES["sources"], ids=_ids(CASES["sources"]))
def test_sources(case):
    settings = dict(CASES["settings"], **case.get("set", {}))
    out = fw.firewall_sources(CASES["hostvars"], case["host"], CASES["groups"], settings)
    _subset(case["expect"], out, case["host"])


@pytest.mark.parametrize("case", CASES["source_addresses"], ids=_ids(CASES["source_addresses"]))
def test_source_addresses(case):
    assert fw.firewall_source_addresses(case["hostvars"], sorted(case["hostvars"])) == case["expect"]


@pytest.mark.parametrize("case", CASES["address_errors"], ids=_ids(CASES["address_errors"]))
def test_address_errors(case):
    groups = dict(CASES["groups"], all=sorted(case["hostvars"]))
    errors = fw.firewall_address_errors(case["hostvars"], groups, case["cidrs"], case["extra_services"])
    assert len(errors) == len(case["expect"]), errors
    for message, fragment in zip(errors, case["expect"]):
        assert message.startswith(fragment), (message, fragment)


def test_the_plan_of_a_head_resolves_with_its_sources():
    """firewall_sources feeds firewall_plan: the head's engine port is open to the balancer and monitoring."""
    out = fw.firewall_sources(CASES["hostvars"], "dgx1", CASES["groups"], CASES["settings"])
    addresses = {"lb1": ["10.0.0.10"], "mon1": ["10.0.0.20"], "dgx2": ["192.168.100.12"]}
    plan = fw.firewall_plan(out["services"], addresses)
    assert plan["errors"] == []
    api = [s for s in plan["services"] if s["name"] == "engine_api"][0]
    assert api["v4"] == ["10.0.0.10", "10.0.0.20", "10.9.0.0/24"]
