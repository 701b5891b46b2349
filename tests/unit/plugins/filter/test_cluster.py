"""Unit tests for plugins/filter/cluster.py (one source of replica facts), cases in cluster_cases.yml."""
from __future__ import annotations

import pytest

from filter_cases import load_cases, load_filter
from filter_cases import subset as _subset

cluster = load_filter("cluster")
CASES = load_cases("cluster_cases.yml")


@pytest.mark.parametrize("ifname, device", sorted(CASES["rdma_devices"].items()))
def test_rdma_device(ifname, device):
    assert cluster.cluster_rdma_device(ifname) == device


@pytest.mark.parametrize("case", CASES["replicas"], ids=[c["name"] for c in CASES["replicas"]])
def test_replicas(case):
    out = cluster.cluster_replicas(case["hostvars"], case["heads"], case["workers"])
    assert sorted(out) == sorted(case["expect"])
    _subset(case["expect"], out, "replicas")


@pytest.mark.parametrize("case", CASES["errors"], ids=[c["name"] for c in CASES["errors"]])
def test_errors(case):
    errors = cluster.cluster_errors(case["hostvars"], case["heads"], case["workers"])
    assert len(errors) == len(case["expect"]), errors
    for message, fragment in zip(errors, case["expect"]):
        assert fragment in message


def test_defaults_are_used_when_the_head_sets_no_ports():
    out = cluster.cluster_replicas({"h": {}}, ["h"], [], {"master_port": 1234, "api_port": 9000})
    assert out["h"]["master_port"] == 1234 and out["h"]["api_port"] == 9000
