"""Runs llmops.vllm_cluster.syntax_check for every role on every host of an inventory, with each role's
defaults loaded as a play of site.yml loads them (local connection: no host is contacted).

  check_inventory(inventory, work, extra=None) -> {host: {role: [error, ...]}}
"""
import json
import pathlib
import subprocess
import sys

import yaml

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from ansible_run import ROOT, ansible_env  # noqa: E402  pylint: disable=wrong-import-position


def checked_roles():
    """The roles with a syntax_check task, in site.yml's order (monitoring_base: its callers' values)."""
    out = []
    for role in sorted((ROOT / "roles").iterdir()):
        pre = role / "tasks" / "preflight.yml"
        if pre.is_file() and "llmops.vllm_cluster.syntax_check" in pre.read_text(encoding="utf-8"):
            out.append(role.name)
    return out


def _play(roles):
    tasks = []
    for role in roles:
        tasks.append({"name": "Load the defaults of %s" % role,
                      "ansible.builtin.import_role": {"name": "llmops.vllm_cluster.%s" % role, "rolespec_validate": False},
                      "tags": ["never"]})
    for role in roles:
        tasks += [
            {"name": "Check %s" % role, "llmops.vllm_cluster.syntax_check": {"role": role},
             "register": "syntax_%s" % role, "ignore_errors": True},
        ]
    tasks.append({"name": "Write the results", "ansible.builtin.copy": {
        "content": "{{ %s | to_json }}" % ("{" + ", ".join("'%s': syntax_%s.errors | default([])" % (r, r)
                                                           for r in roles) + "}"),
        "dest": "{{ syntax_out }}/{{ inventory_hostname }}.json", "mode": "0600"}})
    return [{"name": "Syntax of every role's variables", "hosts": "all", "connection": "local",
             "gather_facts": False, "tasks": tasks}]


def check_inventory(inventory, work, extra=None, roles=None):
    work = pathlib.Path(work)
    out = work / "out"
    out.mkdir(parents=True, exist_ok=True)
    play = work / "syntax.yml"
    play.write_text(yaml.safe_dump(_play(roles or checked_roles()), sort_keys=False, width=1000), encoding="utf-8")
    # An inventory's vault example holds the shape of its secrets: the values stand in for the vault.
    vault = {"vault_hf_token": "hf_syntax-test-token-0001"}
    example = pathlib.Path(inventory) / "group_vars" / "all" / "vault.yml.example"
    if example.is_file():
        vault.update(yaml.safe_load(example.read_text(encoding="utf-8")) or {})
    extra = dict(vault, **dict(extra or {}, syntax_out=str(out), ansible_python_interpreter=sys.executable,
                               ansible_connection="local", ansible_become=False))
    proc = subprocess.run(["ansible-playbook", "-i", str(inventory), str(play), "-e", json.dumps(extra), "-f", "8"],
                          capture_output=True, text=True, env=ansible_env(), check=False, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(out.glob("*.json"))}


def molecule_inventory(scenario, work):
    """The inventory molecule builds for a scenario (platform groups, inventory links, host_vars and
    group_vars of molecule.yml), written as an inventory directory; and the scenario's converge plays'
    own variables (play vars, role vars), which go in as extra vars."""
    import shutil
    base = ROOT / "molecule" / scenario
    mol = yaml.safe_load((base / "molecule.yml").read_text(encoding="utf-8"))
    work = pathlib.Path(work) / ("molecule-" + scenario)
    work.mkdir(parents=True)
    groups = {}
    for plat in mol.get("platforms", []):
        for group in plat.get("groups", []):
            groups.setdefault(group, {"hosts": {}})["hosts"][plat["name"]] = None
        groups.setdefault("ungrouped", {"hosts": {}})["hosts"].setdefault(plat["name"], None)
    (work / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": groups}}), encoding="utf-8")
    inv = (mol.get("provisioner") or {}).get("inventory") or {}
    for kind in ("group_vars", "host_vars"):
        (work / kind).mkdir()
        link = (inv.get("links") or {}).get(kind)
        if link:
            shutil.copytree(base / link, work / kind, dirs_exist_ok=True)
        for name, values in (inv.get(kind) or {}).items():
            (work / kind / ("%s.yml" % name)).write_text(yaml.safe_dump(values or {}), encoding="utf-8")
    extra = {}
    converge = base / "converge.yml"
    if converge.is_file():
        for play in yaml.safe_load(converge.read_text(encoding="utf-8")) or []:
            extra.update(play.get("vars") or {})
            for role in play.get("roles") or []:
                if isinstance(role, dict):
                    extra.update(role.get("vars") or {})
    return work, extra
