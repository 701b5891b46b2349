"""Unit tests for plugins/filter/cluster.py (one source of replica facts), cases in cluster_cases.yml."""
from __future__ import annotations

import importlib.util
import os

import pytest
import yaml

_HERE = os.path.dirname(__file__)
_PATH = os.path.join(_HERE, "..", "..", "..", "..", "plugins", "filter", "cluster.py")
_spec = importlib.util.spec_from_file_location("llmops_cluster_filter", os.path.abspath(_PATH))
cluster = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cluster)

with open(os.path.join(_HERE, "cluster_cases.yml"), encoding="utf-8") as _fh:
    CASES = yaml.safe_load(_fh)


def _subset(expected, actual, where):
    if isinstance(expected, dict):
        assert isinstance(actual, dict), "%s: expected a mapping, got %r" % (where, actual)
        for key, value in expected.items():
            assert key in actual, "%s: missing %r (have %s)" % (where, key, sorted(actual))
            _subset(value, actual[key], "%s.%s" % (where, key))
    else:
        assert actual == expected, "%s: expected %r, got %r" % (where, expected, actual)


@pytest.mark.parametrize("ifname, device", sorted(CASES["rdma_devices"].items()))
def test_rdma_device(ifname, device):
    assert cluster.cluster_rdma_device(ifname) == device


@pytest.mark.parametrize("case", CASES["replicas"], ids=[c["name"] for c in CASES["replicas"]])
def test_replicas(case):
    out = cluster.cluster_replicas(case["hostvars"], case["heads"], case["workers"], None, case.get("local"))
    assert sorted(out) == sorted(case["expect"])
    _subset(case["expect"], out, "replicas")


@pytest.mark.parametrize("case", CASES["errors"], ids=[c["name"] for c in CASES["errors"]])
def test_errors(case):
    errors = cluster.cluster_errors(case["hostvars"], case["heads"], case["workers"], case.get("local"))
    assert len(errors) == len(case["expect"]), errors
    for message, fragment in zip(errors, case["expect"]):
        assert fragment in message


def test_defaults_are_used_when_the_head_sets_no_ports():
    out = cluster.cluster_replicas({"h": {}}, ["h"], [], {"master_port": 1234, "api_port": 9000})
    assert out["h"]["master_port"] == 1234 and out["h"]["api_port"] == 9000
