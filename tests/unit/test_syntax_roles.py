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
from ansible_run import ROOT, ansible_env  # noqa: E402  pylint: disable=wrong-import-position
from syntax_run import check_inventory, checked_roles  # noqa: E402  pylint: disable=wrong-import-position

FIXTURES = ROOT / "tests" / "unit" / "fixtures" / "inventories"
INVENTORIES = sorted(p.name for p in (ROOT / "inventories").iterdir() if (p / "hosts.yml").is_file())


def _fixture_dir(name, tmp_path):
    """A test inventory built on a shipped one (its file `base`): the base's files, then its own."""
    import shutil
    src = FIXTURES / name
    base = ROOT / "inventories" / (src / "base").read_text(encoding="utf-8").strip()
    work = tmp_path / name
    work.mkdir()
    shutil.copy(src / "hosts.yml" if (src / "hosts.yml").exists() else base / "hosts.yml", work / "hosts.yml")
    for sub in ("group_vars", "host_vars"):
        if (base / sub).is_dir():
            shutil.copytree(base / sub, work / sub)
        if (src / sub).is_dir():
            shutil.copytree(src / sub, work / sub, dirs_exist_ok=True)
    return work


def test_every_role_with_a_preflight_is_checked():
    assert checked_roles() == ["container_toolkit", "dspark_build", "firewall", "headless", "monitoring", "network",
                               "nginx_lb", "nvidia_driver", "response_cache", "vllm_service"]


@pytest.mark.parametrize("inventory", INVENTORIES + sorted(p.name for p in FIXTURES.iterdir()))
def test_no_valid_value_of_an_inventory_is_refused(inventory, tmp_path):
    path = ROOT / "inventories" / inventory if inventory in INVENTORIES else _fixture_dir(inventory, tmp_path)
    results = check_inventory(path, tmp_path / "work")
    assert results, "no host checked"
    refused = ["%s %s: %s" % (host, role, err) for host, roles in results.items() for role, errs in roles.items()
               for err in errs]
    assert not refused, "\n".join(refused)


# The hostile values of the syntax-class issue, each with the variable its message must name.
EXAMPLES = [
    ("nginx_lb", {"nginx_lb_server_name": "llm.example; return 200 pwned"}, "nginx_lb_server_name"),
    ("nginx_lb", {"nginx_lb_client_max_body_size": "16m; error_log /tmp/x debug"}, "nginx_lb_client_max_body_size"),
    ("nginx_lb", {"nginx_lb_upstream_name": "vllm_replicas { server 127.0.0.1:1; }"}, "nginx_lb_upstream_name"),
    ("vllm_service", {"vllm_service_model": {"name": "../../etc"}}, "vllm_service_model.name"),
    ("vllm_service", {"vllm_service_model": {"name": "--trust-remote-code"}}, "vllm_service_model.name"),
    ("vllm_service", {"vllm_service_api": {"host": "0.0.0.0 --trust-remote-code", "port": 8000}},
     "vllm_service_api.host"),
    ("vllm_service", {"vllm_service_user": "root"}, "vllm_service_user"),
    ("vllm_service", {"vllm_service_user": "bad user"}, "vllm_service_user"),
    ("vllm_service", {"vllm_service_environment": {"FOO": "a\nVLLM_API_KEY=evil"}}, "vllm_service_environment.FOO"),
    ("vllm_service", {"vllm_service_environment": {"A B": "x"}}, "vllm_service_environment"),
    ("vllm_service", {"vllm_service_engine": {"gpu_memory_utilization": 1.5}},
     "vllm_service_engine.gpu_memory_utilization"),
    ("vllm_service", {"vllm_service_engine": {"max_num_seqs": -4}}, "vllm_service_engine.max_num_seqs"),
    ("vllm_service", {"vllm_service_speculative": {"method": "ngram", "num_speculative_tokens": 0}},
     "vllm_service_speculative.num_speculative_tokens"),
    ("vllm_service", {"vllm_service_speculative": {"method": "ngram", "num_speculative_tokens": 3,
                                                   "prompt_lookup_min": 5, "prompt_lookup_max": 2}},
     "vllm_service_speculative.prompt_lookup_min"),
    ("firewall", {"firewall_default_policy": "drop", "firewall_ssh_ports": []}, "firewall_ssh_ports"),
    ("dspark_build", {"dspark_build_root": "/"}, "dspark_build_root"),
    ("dspark_build", {"dspark_build_git_ref": "--upload-pack=touch /tmp/pwned"}, "dspark_build_git_ref"),
    ("dspark_build", {"dspark_build_git_url": "ext::sh -c touch% /tmp/pwned"}, "dspark_build_git_url"),
]
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
