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


@pytest.mark.parametrize("case", CASES["backends"], ids=[c["name"] for c in CASES["backends"]])
def test_backends(case):
    out = cluster.cluster_backends(case["hostvars"], case["hosts"], case.get("explicit"), case.get("override", ""))
    assert out == case["expect"]


@pytest.mark.parametrize("case", CASES["addresses"], ids=[c["name"] for c in CASES["addresses"]])
def test_addresses(case):
    assert cluster.cluster_address(case["hostvars"], case["host"], case.get("override", "")) == case["expect"]
    assert cluster.cluster_api_url(case["hostvars"], case["host"]) == case["url"]


@pytest.mark.parametrize("case", CASES["engine_logs"], ids=[c["name"] for c in CASES["engine_logs"]])
def test_engine_topology(case):
    text = case["text"].replace("\\\n", "")  # a line ending in a backslash goes on (kept short in the YAML)
    _subset(case["expect"], cluster.cluster_engine_topology(text), case["name"])


@pytest.mark.parametrize("case", CASES["join_errors"], ids=[c["name"] for c in CASES["join_errors"]])
def test_join_errors(case):
    errors = cluster.cluster_join_errors(case["journals"], case["replica"], "vllm", case.get("tail", 15),
                                         case.get("head_log"))
    assert len(errors) == len(case["expect"]), errors
    for message, fragment in zip(errors, case["expect"]):
        assert fragment in message, (fragment, message)


def test_replica_report_names_nodes_sizes_and_share():
    hostvars = {
        "dgx1": {"ansible_host": "10.0.0.1", "vllm_service_replica": "r1"},
        "dgx2": {"ansible_host": "10.0.0.2", "vllm_service_replica": "r1"},
        "dgx3": {"ansible_host": "10.0.0.3", "vllm_service_replica": "r2"},
        "dgx4": {"ansible_host": "10.0.0.4", "vllm_service_replica": "r2"},
    }
    replicas = cluster.cluster_replicas(hostvars, ["dgx1", "dgx3"], ["dgx2", "dgx4"])
    engines = {"dgx1": {"tensor_parallel_size": 2, "world_size": 2, "ranks": [0], "backend": "gloo"},
               "dgx2": {"world_size": 2, "ranks": [1]},
               "dgx3": {"tensor_parallel_size": 2, "world_size": 2, "ranks": [0]}}
    upstreams = {"10.0.0.1:8000": 59, "10.0.0.3:8000, 10.0.0.1:8000": 1, "10.0.0.3:8000": 40}
    rows = cluster.cluster_replica_report(replicas, engines, upstreams)
    assert [r["replica"] for r in rows] == ["r1", "r2"]
    r1, r2 = rows
    assert (r1["head"], r1["workers"], r1["tensor_parallel_size"], r1["world_size"]) == ("dgx1", ["dgx2"], 2, 2)
    assert r1["ranks"] == {"dgx1": [0], "dgx2": [1]} and r2["ranks"] == {"dgx3": [0]}  # dgx4 said nothing
    assert (r1["requests"], r1["share"], r2["requests"], r2["share"]) == (60, 0.6, 40, 0.4)
    empty = cluster.cluster_replica_report(replicas, {}, {})
    assert empty[0]["share"] is None and empty[0]["tensor_parallel_size"] is None


@pytest.mark.parametrize("case", CASES["scrape_jobs"], ids=[c["name"] for c in CASES["scrape_jobs"]])
def test_scrape_jobs(case):
    assert cluster.cluster_scrape_jobs(case["hostvars"], case["groups"], case["settings"]) == case["expect"]


def test_replica_report_of_replicas_of_different_sizes():
    """A two-node replica beside a single-node one: one row each, at its own size."""
    hostvars = {"dgx1": {"ansible_host": "10.0.0.1", "vllm_service_replica": "r1"},
                "dgx2": {"ansible_host": "10.0.0.2", "vllm_service_replica": "r1"},
                "dgx3": {"ansible_host": "10.0.0.3", "vllm_service_replica": "r2"}}
    replicas = cluster.cluster_replicas(hostvars, ["dgx1", "dgx3"], ["dgx2"])
    engines = {"dgx1": {"tensor_parallel_size": 2, "world_size": 2, "ranks": [0]},
               "dgx2": {"world_size": 2, "ranks": [1]},
               "dgx3": {"tensor_parallel_size": 1, "world_size": 1, "ranks": [0]}}
    rows = cluster.cluster_replica_report(replicas, engines, {"10.0.0.1:8000": 50, "10.0.0.3:8000": 50})
    assert [(r["replica"], r["head"], r["workers"], r["tensor_parallel_size"], r["world_size"], r["share"])
            for r in rows] == [("r1", "dgx1", ["dgx2"], 2, 2, 0.5), ("r2", "dgx3", [], 1, 1, 0.5)]


def _random_cluster(rng):
    """hostvars, heads, workers of 1..4 replicas of 1..3 nodes, in a shuffled inventory order."""
    heads, workers, hostvars = [], [], {}
    for r in range(rng.randint(1, 4)):
        size = rng.randint(1, 3)
        heads.append(f"r{r}n0")
        hostvars[f"r{r}n0"] = {"vllm_service_replica": f"r{r}"}
        for n in range(1, size):
            workers.append(f"r{r}n{n}")
            hostvars[f"r{r}n{n}"] = {"vllm_service_replica": f"r{r}"}
    rng.shuffle(heads)
    return hostvars, heads, workers


@pytest.mark.parametrize("seed", range(300))
def test_roll_plan_batches_are_whole_replicas_head_first(seed):
    """Generated inventories, limits and choices: rolling gives one batch per replica, holding
    exactly that replica's nodes of the play, head first; not rolling gives one batch of all."""
    import random
    rng = random.Random(seed)
    hostvars, heads, workers = _random_cluster(rng)
    replicas = cluster.cluster_replicas(hostvars, heads, workers)
    nodes = heads + workers
    hosts = [n for n in nodes if rng.random() < 0.8] or nodes[:1]  # a --limit
    chosen = None if rng.random() < 0.5 else rng.sample(sorted(replicas), rng.randint(1, len(replicas)))
    rolling = rng.random() < 0.7
    plan = cluster.cluster_roll_plan(replicas, hosts, rolling, chosen)
    expected_nodes = {n for n in hosts if chosen is None or hostvars[n]["vllm_service_replica"] in chosen}
    assert sorted(plan["order"]) == sorted(expected_nodes)
    assert sum(plan["batches"]) == len(plan["order"]) or plan["order"] == []
    assert plan["rolling"] is rolling
    if not rolling:
        assert plan["batches"] == [max(len(plan["order"]), 1)]
        return
    start = 0
    for name, size in zip(plan["replicas"], plan["batches"]):
        batch = plan["order"][start:start + size]
        start += size
        assert {hostvars[n]["vllm_service_replica"] for n in batch} == {name}, (batch, name)
        assert set(batch) == {n for n in hosts if hostvars[n]["vllm_service_replica"] == name}
        if replicas[name]["head"] in batch:
            assert batch[0] == replicas[name]["head"]
    assert len(plan["replicas"]) == len(set(plan["replicas"]))
    # Every planned node of a replica knows its replica and head, the head included in a --limit
    # that leaves it out.
    assert set(plan["nodes"]) == set(plan["order"])
    for node, of in plan["nodes"].items():
        assert of == {"replica": hostvars[node]["vllm_service_replica"], "head": replicas[of["replica"]]["head"]}


def test_roll_plan_of_the_shipped_shape_and_mixed_sizes():
    hostvars = {n: {"vllm_service_replica": r} for n, r in
                (("dgx1", "r1"), ("dgx2", "r1"), ("dgx3", "r2"), ("dgx4", "r2"), ("h1", "r3"))}
    replicas = cluster.cluster_replicas(hostvars, ["dgx1", "dgx3", "h1"], ["dgx2", "dgx4"])
    every = ["dgx1", "dgx2", "dgx3", "dgx4", "h1"]
    assert cluster.cluster_roll_plan(replicas, every, True) == {
        "order": ["dgx1", "dgx2", "dgx3", "dgx4", "h1"], "batches": [2, 2, 1], "rolling": True,
        "replicas": ["r1", "r2", "r3"],
        "nodes": {"dgx1": {"replica": "r1", "head": "dgx1"}, "dgx2": {"replica": "r1", "head": "dgx1"},
                  "dgx3": {"replica": "r2", "head": "dgx3"}, "dgx4": {"replica": "r2", "head": "dgx3"},
                  "h1": {"replica": "r3", "head": "h1"}}}
    assert cluster.cluster_roll_plan(replicas, every, "false")["batches"] == [5]
    assert cluster.cluster_roll_plan(replicas, every, True, ["r2"])["order"] == ["dgx3", "dgx4"]
    # A host of the play outside every replica comes last, on its own; an empty play is one batch of one.
    assert cluster.cluster_roll_plan(replicas, ["dgx4", "stray"], True)["batches"] == [1, 1]
    assert cluster.cluster_roll_plan({}, [], True) == {
        "order": [], "batches": [1], "rolling": True, "replicas": [], "nodes": {}}


ENDPOINT_CASES = [
    # (balancers, hostvars, address, virtual)
    ([], {}, "", False),
    (["lb1"], {"lb1": {"ansible_host": "10.0.0.10"}}, "10.0.0.10", False),
    # A lone balancer with a virtual address set but keepalived not forced: its own address.
    (["lb1"], {"lb1": {"ansible_host": "10.0.0.10", "keepalived_virtual_ipv4": "10.0.0.20/24"}}, "10.0.0.10", False),
    (["lb1"], {"lb1": {"ansible_host": "10.0.0.10", "keepalived_virtual_ipv4": "10.0.0.20/24",
                       "keepalived_enabled": "true"}}, "10.0.0.20", True),
    (["lb1", "lb2"], {"lb1": {"ansible_host": "10.0.0.10", "keepalived_virtual_ipv4": "10.0.0.20/24"},
                      "lb2": {"ansible_host": "10.0.0.11"}}, "10.0.0.20", True),
    (["lb1", "lb2"], {"lb1": {"ansible_host": "10.0.0.10", "keepalived_virtual_ipv4": "fd00::20/64"}},
     "fd00::20", True),
    # A pair with keepalived turned off, or no virtual address: the first balancer's own address.
    (["lb1", "lb2"], {"lb1": {"ansible_host": "10.0.0.10", "keepalived_virtual_ipv4": "10.0.0.20/24",
                              "keepalived_enabled": False}}, "10.0.0.10", False),
    (["lb1", "lb2"], {"lb1": {"ansible_host": "10.0.0.10", "keepalived_virtual_ipv4": ""}}, "10.0.0.10", False),
    (["lb1", "lb2"], {"lb1": {"ansible_host": "10.0.0.10", "keepalived_virtual_ipv4": "not-an-address"}},
     "10.0.0.10", False),
    (["lb1", "lb2"], {}, "lb1", False),
]


@pytest.mark.parametrize("balancers, hostvars, address, virtual", ENDPOINT_CASES)
def test_endpoint(balancers, hostvars, address, virtual):
    out = cluster.cluster_endpoint(hostvars, balancers)
    assert out["address"] == address and out["virtual"] is virtual and out["balancers"] == balancers
