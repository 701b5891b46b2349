"""The plans of upgrade.yml's canary and of tune_speculative.yml refuse bad settings before any host is
contacted, naming the variable and what is valid; good settings give the plan the rolling plays
read. Only the plan plays run (localhost); every host of the test inventory has a local connection
and is never reached."""
import json
import os
import pathlib
import shutil
import subprocess

import re

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="ansible-playbook not installed")


def _inventory(replicas=2, method="ngram"):
    heads = {f"h{r}": {"ansible_host": f"192.0.2.{10 + r}", "vllm_service_replica": f"r{r}",
                       "vllm_service_speculative": {"method": method, "num_speculative_tokens": 3} if method else {}}
             for r in range(1, replicas + 1)}
    return {"all": {"vars": {"ansible_connection": "local"}, "children": {"cluster": {"children": {
        "vllm_nodes": {"children": {"vllm_heads": {"hosts": heads}, "vllm_workers": {"hosts": {}}}},
        "balancers": {"hosts": {"lb1": {"ansible_host": "192.0.2.10"}}}}}}}}


def _plan(tmp_path, playbook, plan_play, inventory, extra, show):
    plays = yaml.safe_load((ROOT / "playbooks" / playbook).read_text(encoding="utf-8"))
    plan = [p for p in plays if p["name"] in ("Refuse --limit", plan_play)]
    assert len(plan) == 2, [p["name"] for p in plays]
    plan.append({"name": "Show", "hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "Show", "ansible.builtin.debug": {"msg": "SHOW={{ %s | to_json }}" % show}}]})
    (tmp_path / "plan.yml").write_text(yaml.safe_dump(plan), encoding="utf-8")
    (tmp_path / "hosts.json").write_text(json.dumps(inventory), encoding="utf-8")
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".cache" / "collections"),
               ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_STDOUT_CALLBACK="default")
    proc = subprocess.run(["ansible-playbook", "-i", str(tmp_path / "hosts.json"), str(tmp_path / "plan.yml"),
                           "-e", json.dumps(extra)], capture_output=True, text=True, env=env, check=False, timeout=300)
    return proc, " ".join(proc.stdout.split())


def shown(out):
    match = re.search(r"SHOW=(.*?)'?\s*PLAY RECAP", out)
    assert match, out[-3000:]
    return json.loads(match.group(1))


def canary(tmp_path, inventory=None, **extra):
    extra = dict({"upgrade_layer": "vllm_service", "upgrade_canary": True}, **extra)
    return _plan(tmp_path, "upgrade.yml", "Plan the rolling change", inventory or _inventory(), extra,
                 "[upgrade_canary_levels_list, upgrade_canary_limits]")


def test_the_canary_defaults(tmp_path):
    proc, out = canary(tmp_path)
    assert proc.returncode == 0, out[-3000:]
    assert shown(out) == [[1, 8], {"max_ttft_ratio": 1.25, "max_itl_ratio": 1.25, "min_throughput_ratio": 0.8,
                                   "max_error_rate": 0.0, "min_acceptance": None}]


@pytest.mark.parametrize("extra, inventory, fragment", [
    ({"upgrade_layer": "restart"}, None, "upgrade_layer vllm_service or dspark_build (got restart)"),
    ({}, _inventory(replicas=1), "this inventory has 1"),
    # each value's syntax: the playbook's first task (llmops.vllm_cluster.syntax_check)
    ({"upgrade_canary_levels": [0, 8]}, None, "upgrade_canary_levels[0]: '0' must be an integer in 1..9999"),
    ({"upgrade_canary_levels": "1,x"}, None, "upgrade_canary_levels[1]: 'x' must be an integer in 1..9999"),
    ({"upgrade_canary_max_ttft_ratio": "fast"}, None, "upgrade_canary_max_ttft_ratio: 'fast' must be a number in (0, inf)"),
    ({"upgrade_canary_min_acceptance": -0.5}, None, "upgrade_canary_min_acceptance: '-0.5' must be a number in [0, 1]"),
    ({"upgrade_canary_report_dir": "-rf /"}, None, "upgrade_canary_report_dir: '-rf /' must be a path on the controller"),
])
def test_bad_canary_settings_are_refused_before_any_change(tmp_path, extra, inventory, fragment):
    proc, out = canary(tmp_path, inventory, **extra)
    assert proc.returncode != 0 and fragment in out and "nothing was changed" in out.lower(), out[-3000:]


def tune(tmp_path, inventory=None, **extra):
    return _plan(tmp_path, "tune_speculative.yml", "Plan the tuning", inventory or _inventory(), extra,
                 "[tune_chosen, tune_settings | map(attribute='name') | list, groups['tune_sequence']]")


def test_the_tuning_plan_lists_off_then_each_k(tmp_path):
    proc, out = tune(tmp_path, tune_replica="r2", tune_k="5,2")
    assert proc.returncode == 0, out[-3000:]
    assert shown(out) == ["r2", ["off", "k5", "k2"], ["h2"]]


@pytest.mark.parametrize("extra, inventory, fragment", [
    ({"tune_replica": "r9"}, None, "tune_replica to name a replica of this inventory (r1, r2; got 'r9')"),
    ({}, _inventory(replicas=1), "this inventory has 1"),
    ({}, _inventory(method=""), "a speculative method on that replica"),
    ({"tune_k": [0]}, None, "tune_k[0]: '0' must be an integer in 1..20"),
    ({"tune_levels": ["many"]}, None, "tune_levels[0]: 'many' must be an integer in 1..9999"),
    ({"tune_max_itl_ratio": "low"}, None, "tune_max_itl_ratio: 'low' must be a number in (0, inf)"),
    ({"tune_prompts": ["a\u0000b"]}, None, "tune_prompts[0]: "),
])
def test_bad_tuning_settings_are_refused_before_any_change(tmp_path, extra, inventory, fragment):
    proc, out = tune(tmp_path, inventory, **extra)
    assert proc.returncode != 0 and fragment in out and "nothing was changed" in out.lower(), out[-3000:]
