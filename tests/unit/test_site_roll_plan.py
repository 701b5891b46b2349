"""site.yml's engines play, and its driver play (whose reboots take nodes down), on a serving
cluster: one replica per batch, head first, the roll stops at a replica that fails; on a new
cluster (no head's engine running) or with vllm_service_restart_all, every node in one batch. A GPU
host outside every replica comes last, in a batch of its own. Runs site.yml's own plan play (its
probe replaced by the state under test) and the layer's play with the play keywords as written
(hosts, serial, max_fail_percentage) and the role replaced by a task that records each batch.
Every host has a local connection and is never reached: the tasks run on the controller."""
import json
import os
import pathlib
import re
import shutil
import subprocess

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="ansible-playbook not installed")


# Each layer whose play restarts or reboots engine nodes: its plan play and its play in site.yml.
LAYERS = {"engines": ("Plan the engines' change", "The vLLM engines"),
          "driver": ("Plan the driver's reboots", "NVIDIA driver")}


def _inventory(sizes):
    """Replicas r1.. of the given sizes: heads h<r>, workers w<r>_<n>, listed workers first and the
    heads in reverse, so that inventory order is not replica order."""
    heads, workers = {}, {}
    for r, size in enumerate(sizes, 1):
        heads[f"h{r}"] = {"vllm_service_replica": f"r{r}"}
        for n in range(1, size):
            workers[f"w{r}_{n}"] = {"vllm_service_replica": f"r{r}"}
    heads = dict(reversed(list(heads.items())))
    vllm = {"children": {"vllm_workers": {"hosts": workers}, "vllm_heads": {"hosts": heads}}}
    # gpu_nodes: every engine node (as in the shipped inventories) and one GPU host without an engine.
    gpu = {"hosts": {"gpu_only": {}}, "children": {"vllm_nodes": vllm}}
    return {"all": {"vars": {"ansible_connection": "local", "ansible_python_interpreter": "auto_silent"},
                    "children": {"cluster": {"children": {"gpu_nodes": gpu}}}}}


def _run(tmp_path, sizes, serving, *extra, fail_on=None, layer="engines"):
    site = yaml.safe_load((ROOT / "playbooks" / "site.yml").read_text(encoding="utf-8"))
    plan = next(p for p in site if p["name"].startswith(LAYERS[layer][0]))
    engines = next(p for p in site if p["name"] == LAYERS[layer][1] or p["name"].startswith(LAYERS[layer][1] + " "))
    order_task = next(t for t in plan["tasks"] if t["ansible.builtin.include_role"]["tasks_from"] == "plan")
    probe = {"name": "The heads' engines as under test", "hosts": "vllm_heads", "gather_facts": False,
             "tasks": [{"name": "Probe", "ansible.builtin.set_fact": {
                 "vllm_service__probe": {"stdout": "{{ 'active' if inventory_hostname in %s else 'inactive' }}"
                                         % json.dumps(serving)}}}]}
    plan = dict(plan, tasks=[order_task])
    record = [{"name": "Record the batch", "ansible.builtin.debug": {
        "msg": "BATCH={{ ansible_play_batch | join(',') }}"}, "run_once": True},
        {"name": "A replica that fails", "ansible.builtin.fail": {"msg": "boom"},
         "when": "inventory_hostname == %s" % json.dumps(fail_on or "")}]
    engines = {k: v for k, v in engines.items() if k != "roles"}
    engines["tasks"] = record
    (tmp_path / "site.yml").write_text(yaml.safe_dump([probe, plan, engines], sort_keys=False), encoding="utf-8")
    (tmp_path / "hosts.json").write_text(json.dumps(_inventory(sizes)), encoding="utf-8")
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".cache" / "collections"),
               ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(["ansible-playbook", "-i", str(tmp_path / "hosts.json"), str(tmp_path / "site.yml"), *extra],
                          capture_output=True, text=True, env=env, check=False, timeout=300)
    batches = [b.split(",") for b in re.findall(r'msg: BATCH=([\w,]+)', proc.stdout)]
    return proc, batches


# The driver's play also holds the GPU host outside every replica: last, on its own.
EXTRA = {"engines": [], "driver": [["gpu_only"]]}


@pytest.mark.parametrize("layer", sorted(LAYERS))
@pytest.mark.parametrize("sizes", [[2, 2], [1, 1, 1], [2, 1], [3, 1, 2]])
def test_a_serving_cluster_changes_one_replica_per_batch_head_first(tmp_path, sizes, layer):
    proc, batches = _run(tmp_path, sizes, ["h1"], layer=layer)
    assert proc.returncode == 0, proc.stdout[-3000:]
    # Replicas in the order of their heads in vllm_heads (reversed by _inventory), each head first.
    expected = [[f"h{r}"] + [f"w{r}_{n}" for n in range(1, size)] for r, size in reversed(list(enumerate(sizes, 1)))]
    assert batches == expected + EXTRA[layer], proc.stdout[-3000:]
    assert "the cluster serves: one replica at a time" in proc.stdout


@pytest.mark.parametrize("layer", sorted(LAYERS))
@pytest.mark.parametrize("serving, extra", [([], []), (["h2"], ["-e", "vllm_service_restart_all=true"])])
def test_a_new_cluster_or_restart_all_changes_every_node_at_once(tmp_path, serving, extra, layer):
    proc, batches = _run(tmp_path, [2, 2], serving, *extra, layer=layer)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert len(batches) == 1, proc.stdout[-3000:]
    assert sorted(batches[0]) == sorted(["h1", "h2", "w1_1", "w2_1"] + sum(EXTRA[layer], [])), proc.stdout[-3000:]


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_the_roll_stops_at_a_replica_that_fails(tmp_path, layer):
    proc, batches = _run(tmp_path, [2, 2, 2], ["h3"], fail_on="w2_1", layer=layer)
    assert proc.returncode != 0
    # r3 changed (first head in vllm_heads), r2 failed, r1 never started.
    assert batches == [["h3", "w3_1"], ["h2", "w2_1"]], proc.stdout[-3000:]


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_a_limit_keeps_the_batches_whole_replicas_of_the_limit(tmp_path, layer):
    proc, batches = _run(tmp_path, [2, 2], ["h2"], "--limit", "h2,w2_1,w1_1", layer=layer)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert batches == [["h2", "w2_1"], ["w1_1"]], proc.stdout[-3000:]
