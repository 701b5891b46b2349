"""playbooks/upgrade.yml with replicas of different sizes (a two-node replica beside a single-node
one): its plan refuses up front, naming the replicas and their nodes, before any host is contacted
(every host of this test inventory has a local connection and is never reached: the refusal is a
localhost assert)."""
import json
import os
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
INVENTORY = {
    "all": {"vars": {"ansible_connection": "local"}, "children": {"cluster": {"children": {
        "vllm_nodes": {"children": {
            "vllm_heads": {"hosts": {"dgx1": {"ansible_host": "192.0.2.11", "vllm_service_replica": "r1"},
                                     "dgx3": {"ansible_host": "192.0.2.13", "vllm_service_replica": "r2"}}},
            "vllm_workers": {"hosts": {"dgx2": {"ansible_host": "192.0.2.12", "vllm_service_replica": "r1"}}}}},
        "balancers": {"hosts": {"lb1": {"ansible_host": "192.0.2.10"}}}}}}}}

pytestmark = pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="ansible-playbook not installed")


def _upgrade(tmp_path, *extra):
    inv = tmp_path / "hosts.json"
    inv.write_text(json.dumps(INVENTORY), encoding="utf-8")
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".cache" / "collections"),
               ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    return subprocess.run(["ansible-playbook", "-i", str(inv), str(ROOT / "playbooks" / "upgrade.yml"),
                           "-e", "upgrade_layer=restart", *extra],
                          capture_output=True, text=True, env=env, check=False, timeout=300)


def test_mixed_replica_sizes_are_refused_naming_the_replicas(tmp_path):
    proc = _upgrade(tmp_path)
    out = " ".join(proc.stdout.split())
    assert proc.returncode != 0, out[-3000:]
    assert "r1 has 2 (dgx1, dgx2)" in out and "r2 has 1 (dgx3)" in out, out[-3000:]
    assert "Nothing was changed" in out and "-e upgrade_replicas=r1" in out, out[-3000:]
    # Refused in the plan: the rolling play never started.
    assert "Rolling change of the engines" not in out, out[-3000:]
