"""The firewall role's plan for the shipped inventories, worked out by its own preflight (no host is
contacted: preflight only reads the inventory; fact gathering is off)."""
import json
import os
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PLAY = """
- name: Firewall plan only
  hosts: cluster
  gather_facts: false
  tasks:
    - name: Preflight of the firewall role
      ansible.builtin.include_role:
        name: llmops.vllm_cluster.firewall
        tasks_from: preflight
    - name: Write the plan
      ansible.builtin.copy:
        content: >-
          {{ {'services': firewall__services, 'peers': firewall__peers, 'vrrp': firewall__vrrp,
              'allow': firewall__plan.services | llmops.vllm_cluster.firewall_ip_allow(['engine_api', 'engine_distributed'],
                                                                                     [firewall__peers, firewall__own])} | to_json }}
        dest: "{{ plan_dir }}/{{ inventory_hostname }}.json"
        mode: "0600"
      delegate_to: localhost
"""

pytestmark = pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="ansible-playbook not installed")


def plan(tmp_path, inventory, extra=None):
    (tmp_path / "play.yml").write_text(PLAY, encoding="utf-8")
    extra_vars = {"firewall_gather_facts": False, "plan_dir": str(tmp_path),
                  "vault_vllm_api_key": "unused", "vault_edge_api_keys": ["unused"]}
    extra_vars.update(extra or {})
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".cache" / "collections"),
               ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(["ansible-playbook", "-i", str(ROOT / "inventories" / inventory), str(tmp_path / "play.yml"),
                           "-e", json.dumps(extra_vars)], capture_output=True, text=True, env=env, check=False, timeout=300)
    out = {}
    for path in tmp_path.glob("*.json"):
        data = json.loads(path.read_text())
        out[path.stem] = ({s["name"]: s for s in data["services"]}, data["peers"])
        out[path.stem + ".allow"] = data["allow"]
        out[path.stem + ".vrrp"] = data["vrrp"]
    return proc, out


def test_dgx_spark_two_tp2_replicas(tmp_path):
    proc, out = plan(tmp_path, "dgx_spark")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    services, peers = out["dgx1"]
    # The engines' API from both balancers of the pair (10.0.0.10 and .11, collapsed) and nobody else.
    assert services["engine_api"]["ports"] == [8000] and services["engine_api"]["v4"] == ["10.0.0.10/31"]
    # dgx1's replica peer is dgx2, by its management and its fabric address (network_interfaces)
    assert services["engine_distributed"]["ports"] == [29501]
    assert services["engine_distributed"]["v4"] == ["10.0.0.2", "192.168.100.12", "192.168.101.12"]
    assert peers["v4"] == ["10.0.0.2", "192.168.100.12", "192.168.101.12"]
    assert out["dgx3"][1]["v4"] == ["10.0.0.4", "192.168.100.14", "192.168.101.14"]
    assert services["exporters"]["ports"] == [3903, 9100, 9113, 9400] and services["exporters"]["v4"] == ["10.0.0.10"]
    lb_services, lb_peers = out["lb1"]
    assert set(lb_services) == {"exporters", "monitoring_ui"} and lb_peers == {"v4": [], "v6": []}
    # Prometheus (on loopback by default) and Grafana: only from the monitoring hosts
    assert lb_services["monitoring_ui"]["ports"] == [3000, 9090] and lb_services["monitoring_ui"]["v4"] == ["10.0.0.10"]
    # The engine unit's IPAddressAllow= (vllm_service) from the same plan: the balancer/monitoring
    # hosts (both balancers), the replica peer by all its addresses (management, both fabric ports) and the node's own
    # addresses; nobody else.
    # VRRP: each balancer of the pair accepts adverts from the other one only; no GPU node takes any.
    assert out["lb1.vrrp"] == ["10.0.0.11"] and out["lb2.vrrp"] == ["10.0.0.10"]
    assert out["dgx1.vrrp"] == [] and out["dgx2.vrrp"] == []
    assert out["dgx1.allow"] == ["10.0.0.1", "10.0.0.2", "10.0.0.10/31", "192.168.100.11", "192.168.100.12",
                                 "192.168.101.11", "192.168.101.12"]


def test_dgx_spark_single_has_no_peers(tmp_path):
    proc, out = plan(tmp_path, "dgx_spark_single", {"firewall_api_allowed_cidrs": ["10.8.0.0/24"]})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    services, peers = out["dgx2"]
    assert services["engine_distributed"]["v4"] == [] and peers == {"v4": [], "v6": []}
    # A lone balancer runs no keepalived: no VRRP rule.
    assert out["lb1.vrrp"] == []
    assert services["engine_api"]["v4"] == ["10.0.0.10", "10.8.0.0/24"]


def test_lab_replica_peers_by_management_and_fabric_address(tmp_path):
    # inventories/lab: ansible_host (management) and vllm_service_advertise_address (the fabric stand-in)
    proc, out = plan(tmp_path, "lab")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    services, peers = out["dgx1"]
    assert services["engine_api"]["v4"] == ["10.89.40.10", "10.89.40.20"]
    assert out["lb1.vrrp"] == ["10.89.40.20"] and out["lb2.vrrp"] == ["10.89.40.10"] and out["dgx1.vrrp"] == []
    assert services["engine_distributed"]["v4"] == ["10.89.40.12", "10.89.41.12"]
    assert peers["v4"] == ["10.89.40.12", "10.89.41.12"] and out["dgx3"][1]["v4"] == ["10.89.40.14", "10.89.41.14"]


def test_without_addresses_or_facts_names_the_host_and_the_variable(tmp_path):
    # an inventory that gives no address (and no facts): the plan names what is missing
    inv = tmp_path / "hosts.yml"
    inv.write_text("""all:
  vars: {ansible_connection: local}
  children:
    cluster:
      children:
        vllm_nodes: {children: {vllm_heads: {hosts: {dgx1: {}}}, vllm_workers: {hosts: {}}}}
        balancers: {hosts: {lb1: {}}}
        monitoring: {hosts: {lb1: {}}}
""", encoding="utf-8")
    proc, out = plan(tmp_path, str(inv))
    assert proc.returncode != 0 and not out
    assert "no address is known for source host 'lb1'" in proc.stdout, proc.stdout
    assert "firewall_host_addresses" in proc.stdout
