"""The cluster scenario's verify: validate.yml on the whole site, then faults under load.

Load goes only to the scenario's balancer pair (cluster-lb1 and cluster-lb2) through their virtual
address, on the podman network this molecule run created; the replicas are reached through it. Every fault test adds a row to the fault table that
is printed at the end of the run (and written to reports/faults-latest.md):
fault, requests sent, failed, time to recover.
"""
import os
import re

import pytest
import yaml
from lab_load import Load  # tests/lab, on the verifier's PYTHONPATH
from lab_testinfra import container_ip

LB = "cluster-lb1"
# The balancer pair (molecule.yml): clients use the virtual address (host_vars' keepalived_virtual_ipv4).
BALANCERS = ("cluster-lb1", "cluster-lb2")
# Two replicas of tensor parallel 2 (molecule.yml): r1 = dgx1 + dgx2, r2 = dgx3 + dgx4.
HEADS = ("cluster-dgx1", "cluster-dgx3")
WORKERS = {"cluster-dgx2": "cluster-dgx1", "cluster-dgx4": "cluster-dgx3"}  # worker: its head
# replica (vllm_service_replica: the balancer's and upgrade.yml's name for it): (head, worker)
REPLICAS = {"r1": ("cluster-dgx1", "cluster-dgx2"), "r2": ("cluster-dgx3", "cluster-dgx4")}
MODEL = "tiny-llama"
REPO = os.environ.get("MOLECULE_PROJECT_DIRECTORY") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def virtual_address():
    with open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "host_vars", "cluster-lb1.yml"),
              encoding="utf-8") as fh:
        return yaml.safe_load(fh)["keepalived_virtual_ipv4"].split("/")[0]


VIP = virtual_address()


def lab_keys():
    with open(os.path.join(REPO, "inventories", "lab", "group_vars", "all.yml"), encoding="utf-8") as fh:
        data = yaml.safe_load(fh)
    return data["lab_edge_api_key"], data["lab_vllm_api_key"]


EDGE_KEY, VLLM_KEY = lab_keys()
FAULTS = []  # (fault, sent, failed, time to recover or "-", what was checked)


def pytest_collection_modifyitems(config, items):
    """CI runs test_1_validate only; the faults, the rolling change and the secrets search (about
    20 min more on 2 cores) run with LLMOPS_CLUSTER_FAULTS=1: `make molecule-faults`."""
    if os.environ.get("LLMOPS_CLUSTER_FAULTS") == "1":
        return
    skip = pytest.mark.skip(reason="faults, rolling change, secrets: LLMOPS_CLUSTER_FAULTS=1 (make molecule-faults)")
    for item in items:
        if not os.path.basename(str(item.fspath)).startswith("test_1_"):
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter):
    if not FAULTS:
        return
    head = f"{'fault':44} {'sent':>6} {'failed':>7} {'recovered in':>13}  checked"
    lines = [head, "-" * len(head)]
    for fault, sent, failed, recover, checked in FAULTS:
        rec = recover if isinstance(recover, str) else f"{recover:.1f} s"
        lines.append(f"{fault:44} {sent:6d} {failed:7d} {rec:>13}  {checked}")
    terminalreporter.write_sep("=", "faults under load (cluster scenario)")
    for line in lines:
        terminalreporter.write_line(line)
    try:
        os.makedirs(os.path.join(REPO, "reports"), exist_ok=True)
        with open(os.path.join(REPO, "reports", "faults-latest.md"), "w", encoding="utf-8") as fh:
            fh.write("# Faults under load (molecule/cluster)\n\n```\n" + "\n".join(lines) + "\n```\n")
    except OSError:
        pass


@pytest.fixture(scope="session")
def lb_url():
    """Where clients send their requests: the balancer pair's virtual address."""
    return "http://" + VIP


@pytest.fixture(scope="session")
def head_ip():
    return {name: container_ip(name) for name in HEADS}


@pytest.fixture()
def load(lb_url):
    """A constant load of 4 streaming clients through the balancer; stopped at the end of the test."""
    made = []

    # Bounded in count and time: at the load's ~10 requests/s, the cap outlasts the longest wait
    # of a test (a replica's rejoin, REJOIN_TIMEOUT); max_seconds ends it in any case.
    def make(concurrency=4, max_tokens=16, timeout=90, max_seconds=1500):
        lo = Load(lb_url, EDGE_KEY, MODEL, concurrency=concurrency, max_tokens=max_tokens, cap=15000,
                  timeout=timeout, max_seconds=max_seconds)
        made.append(lo)
        return lo

    yield make
    for lo in made:
        lo.take()


def served_by(result, ip):
    """True when nginx's X-Upstream header says the request's last attempt went to ip."""
    return bool(result.get("upstream")) and result["upstream"].split(", ")[-1].split(":")[0] == ip


def one_line(text):
    """The YAML result format wraps long messages wherever their length puts a break."""
    return re.sub(r"\s+", " ", text)
