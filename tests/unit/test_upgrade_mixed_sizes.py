"""playbooks/upgrade.yml's plan: the order of the nodes and the batches of its rolling play, one
replica per batch, also for replicas of different sizes (a two-node replica beside a single-node
one). Only the plan plays run (localhost): every host of this test inventory has a local connection
and is never reached."""
import json
import os
import pathlib
import shutil
import subprocess

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
INVENTORY = {
    "all": {"vars": {"ansible_connection": "local"}, "children": {"cluster": {"children": {
        "vllm_nodes": {"children": {
            "vllm_heads": {"hosts": {"dgx1": {"ansible_host": "192.0.2.11", "vllm_service_replica": "r1"},
                                     "dgx3": {"ansible_host": "192.0.2.13", "vllm_service_replica": "r2"}}},
            "vllm_workers": {"hosts": {"dgx2": {"ansible_host": "192.0.2.12", "vllm_service_replica": "r1"}}}}},
        "balancers": {"hosts": {"lb1": {"ansible_host": "192.0.2.10"}}}}}}}}

pytestmark = pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="ansible-playbook not installed")


def _plan(tmp_path, inventory, *extra):
    """upgrade.yml's own plan plays (read from the playbook), then a localhost play that prints the
    planned sequence: no host of the inventory is contacted (the rolling plays are not run)."""
    plays = yaml.safe_load((ROOT / "playbooks" / "upgrade.yml").read_text(encoding="utf-8"))
    plan = [p for p in plays if p["name"] in ("Refuse --limit", "Plan the rolling change")]
    assert len(plan) == 2, [p["name"] for p in plays]
    plan.append({"name": "Show", "hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "Sequence", "ansible.builtin.debug": {"msg": "SEQUENCE={{ groups['upgrade_sequence'] | default([]) | join(',') }}"}},
        {"name": "Batches", "ansible.builtin.debug": {"msg": "BATCHES={{ (groups['upgrade_sequence'] | default([])"
         " | map('extract', hostvars, 'vllm_service__roll') | first | default({})).batches | default([]) | join(',') }}"}}]})
    (tmp_path / "plan.yml").write_text(yaml.safe_dump(plan), encoding="utf-8")
    inv = tmp_path / "hosts.json"
    inv.write_text(json.dumps(inventory), encoding="utf-8")
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".cache" / "collections"),
               ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    return subprocess.run(["ansible-playbook", "-i", str(inv), str(tmp_path / "plan.yml"), "-e", "upgrade_layer=restart", *extra],
                          capture_output=True, text=True, env=env, check=False, timeout=300)


def _two_by_two(**worker_vars):
    inv = json.loads(json.dumps(INVENTORY))
    nodes = inv["all"]["children"]["cluster"]["children"]["vllm_nodes"]["children"]
    nodes["vllm_workers"]["hosts"]["dgx4"] = {"ansible_host": "192.0.2.14", "vllm_service_replica": "r2"}
    for name, value in worker_vars.items():
        nodes["vllm_workers"]["hosts"][name].update(value)
    return inv


@pytest.mark.parametrize("chosen, sequence", [
    ("", "dgx1,dgx2,dgx3,dgx4"), ("r2", "dgx3,dgx4"), ("r2,r1", "dgx1,dgx2,dgx3,dgx4")])
def test_the_plan_orders_each_replica_head_then_workers(tmp_path, chosen, sequence):
    proc = _plan(tmp_path, _two_by_two(), *(["-e", "upgrade_replicas=" + chosen] if chosen else []))
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "SEQUENCE=" + sequence in proc.stdout, proc.stdout[-3000:]
    assert "BATCHES=" + ",".join(["2"] * (len(sequence.split(",")) // 2)) in proc.stdout, proc.stdout[-3000:]


def test_mixed_replica_sizes_roll_one_replica_per_batch(tmp_path):
    proc = _plan(tmp_path, INVENTORY)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "SEQUENCE=dgx1,dgx2,dgx3" in proc.stdout and "BATCHES=2,1" in proc.stdout, proc.stdout[-3000:]


def test_a_worker_without_a_head_is_refused_by_the_plan(tmp_path):
    proc = _plan(tmp_path, _two_by_two(dgx4={"vllm_service_replica": "r9"}))
    out = " ".join(proc.stdout.split())
    assert proc.returncode != 0 and "worker dgx4 is in replica 'r9'" in out and "Nothing was changed" in out, out[-3000:]
