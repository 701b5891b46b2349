"""Unit tests for plugins/filter/firewall.py's inventory readers (firewall_sources,
firewall_source_addresses, firewall_address_errors), cases in firewall_cases.yml."""
from __future__ import annotations

import pytest

from filter_cases import case_ids as _ids
from filter_cases import load_cases, load_filter, subset

fw = load_filter("firewall")
CASES = load_cases("firewall_cases.yml")


@pytest.mark.parametrize("case", CASES["sources"], ids=_ids(CASES["sources"]))
def test_sources(case):
    settings = dict(CASES["settings"], **case.get("set", {}))
    out = fw.firewall_sources(CASES["hostvars"], case["host"], CASES["groups"], settings)
    subset(case["expect"], out, case["host"])


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
