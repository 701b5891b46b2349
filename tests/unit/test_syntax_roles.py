"""The syntax check as the roles run it (llmops.vllm_cluster.syntax_check, first task of every preflight):

- every shipped inventory, the lab's and the test inventories pass every role's check on every host
  (no valid value refused);
- the reported hostile values, each applied to its role in check mode on localhost, stop the role at
  its first task, naming the variable, with nothing changed.
"""
import json
import pathlib
import subprocess
import sys

import pytest
import yaml

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from ansible_run import ROOT, ansible_env, fixture_inventory  # noqa: E402  pylint: disable=wrong-import-position
from syntax_run import check_inventory, checked_roles  # noqa: E402  pylint: disable=wrong-import-position

FIXTURES = ROOT / "tests" / "unit" / "fixtures" / "inventories"
INVENTORIES = sorted(p.name for p in (ROOT / "inventories").iterdir() if (p / "hosts.yml").is_file())


def test_every_role_with_a_preflight_is_checked():
    assert checked_roles() == ["container_toolkit", "dspark_build", "firewall", "headless", "keepalived", "monitoring",
                               "network", "nginx_lb", "nvidia_driver", "response_cache", "vllm_router",
                               "vllm_service"]


@pytest.mark.parametrize("inventory", INVENTORIES + sorted(p.name for p in FIXTURES.iterdir()))
def test_no_valid_value_of_an_inventory_is_refused(inventory, tmp_path):
    path = ROOT / "inventories" / inventory if inventory in INVENTORIES else fixture_inventory(inventory)
    results = check_inventory(path, tmp_path / "work")
    assert results, "no host checked"
    refused = ["%s %s: %s" % (host, role, err) for host, roles in results.items() for role, errs in roles.items()
               for err in errs]
    assert not refused, "\n".join(refused)


EXAMPLES = [(e["role"], e["values"], e["variable"]) for e in yaml.safe_load(
    (ROOT / "tests" / "unit" / "fixtures" / "syntax_examples.yml").read_text(encoding="utf-8"))]
BASE = {"vllm_service": {"vllm_service_model": {"name": "tiny-llama"}}, "dspark_build": {"dspark_build_target_device": "cpu"}}
FIRST_TASK = "Check every variable's syntax before any change"


def test_reported_examples_stop_the_role_at_its_first_task_in_check_mode(tmp_path):
    tasks = []
    for i, (role, values, _variable) in enumerate(EXAMPLES):
        tasks.append({"name": "Example %d" % i, "block": [
            {"name": "Apply %s" % role, "ansible.builtin.include_role": {"name": "llmops.vllm_cluster.%s" % role},
             "vars": dict(BASE.get(role, {}), **values)},
            {"name": "Record the acceptance", "ansible.builtin.set_fact": {
                "results": "{{ results | default({}) | combine({'%d': {'failed': false}}) }}" % i}}],
            "rescue": [{"name": "Record the refusal", "ansible.builtin.set_fact": {
                "results": "{{ results | default({}) | combine({'%d': {'failed': true, 'task': ansible_failed_task.name, "
                           "'msg': ansible_failed_result.msg | default('')}}) }}" % i}}]})
    write = {"content": "{{ results | to_json }}", "dest": str(tmp_path / "out.json"), "mode": "0600"}
    tasks.append({"name": "Write", "ansible.builtin.copy": write, "check_mode": False, "changed_when": False})
    play = [{"name": "Examples", "hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": tasks}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False, width=1000), encoding="utf-8")
    proc = subprocess.run(["ansible-playbook", "--check", "-i", "localhost,", str(tmp_path / "play.yml"),
                           "-e", json.dumps({"ansible_python_interpreter": sys.executable})],
                          capture_output=True, text=True, env=ansible_env(), check=False, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "changed=0" in proc.stdout
    results = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))
    wrong = []
    for i, (role, values, variable) in enumerate(EXAMPLES):
        rec = results.get(str(i), {})
        if not rec.get("failed") or not rec["task"].endswith(FIRST_TASK) or variable not in rec["msg"]:
            wrong.append("%s %s: %s" % (role, values, rec))
    assert not wrong, "\n".join(wrong)


SCENARIOS = sorted(p.parent.name for p in (ROOT / "molecule").glob("*/molecule.yml") if p.parent.name != "bad_inputs")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_no_value_of_a_molecule_scenario_is_refused(scenario, tmp_path):
    from syntax_run import molecule_inventory  # pylint: disable=import-outside-toplevel
    inventory, extra = molecule_inventory(scenario, tmp_path)
    results = check_inventory(inventory, tmp_path / "work", extra=extra)
    # A value that reads the running lab (a lookup of a container's address, a file the scenario's
    # prepare writes) templates only there: molecule checks it on the lab.
    refused = ["%s %s: %s" % (host, role, err) for host, roles in results.items() for role, errs in roles.items()
               for err in errs if "does not template (The lookup plugin" not in err]
    assert not refused, "\n".join(refused)
