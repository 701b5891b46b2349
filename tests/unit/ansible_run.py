"""Shared helpers of the unit tests that run ansible-playbook on this machine (no inventory address is
contacted: plays run with a local connection, or on localhost only).

  ansible_env(library)                         the environment: the collection from the working tree,
                                               the repository's ansible.cfg, an optional module library
  inventory_groups(inventory_dir)              {group: [host, ...]} as hosts.yml nests them
  run_inventory_play(inventory_dir, play, extra, work)
                                               runs play (text) on the inventory, with the module
                                               `inventory_facts` (FACTS_MODULE) in work/library
  render_role_templates(work, role, templates, extra)
                                               {template: text}: a role's templates rendered by Ansible
                                               with the role's defaults and constants
  fixture_inventory(name)                      a test inventory of tests/unit/fixtures/inventories, built on
                                               the shipped one its file `base` names (once per session)
  tls_standin(work, name)                      a stand-in for the balancer's certificate and key (openssl)
  applied_roles()                              the roles a user applies (a main entry point); a layer's
                                               component roles and their base take the layer's variables
"""
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "unit" / "fixtures" / "inventories"
_FIXTURE_DIRS = {}

# Reports the facts it is given, as a real host's setup would: the plays' hosts are never contacted.
FACTS_MODULE = '''#!/usr/bin/python
from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec={"facts": {"type": "dict", "required": True}}, supports_check_mode=True)
    module.exit_json(changed=False, ansible_facts=module.params["facts"])


if __name__ == "__main__":
    main()
'''

# What an Ubuntu 24.04 systemd host's setup reports (the base of every inventory play's inventory_facts:
# passed as the extra var `ubuntu_facts`; plays add architecture and addresses).
UBUNTU_FACTS = {"service_mgr": "systemd", "os_family": "Debian", "distribution": "Ubuntu", "distribution_release": "noble",
                "distribution_version": "24.04", "distribution_major_version": "24", "system": "Linux",
                "all_ipv6_addresses": []}

RENDER_PLAY = """
- name: Render a role's templates with its defaults and constants
  hosts: localhost
  connection: local
  gather_facts: false
  vars_files: {vars_files}
  tasks:
    - name: Render
      ansible.builtin.copy:
        content: "{{{{ lookup('ansible.builtin.template', item.1) }}}}"
        dest: "{{{{ out_dir }}}}/{{{{ item.0 }}}}"
        mode: "0600"
      loop: {templates}
"""


def applied_roles():
    """Sorted names of the roles with a `main` entry point in meta/argument_specs.yml."""
    out = []
    for spec in sorted((ROOT / "roles").glob("*/meta/argument_specs.yml")):
        if "main" in yaml.safe_load(spec.read_text(encoding="utf-8"))["argument_specs"]:
            out.append(spec.parent.parent.name)
    return out


def ansible_env(library=None):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".cache" / "collections"),
               ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    if library:
        env["ANSIBLE_LIBRARY"] = str(library)
    return env


def inventory_groups(inventory_dir):
    """{group: sorted hosts} from the inventory's hosts.yml (children's hosts count for their parents)."""
    data = yaml.safe_load((pathlib.Path(inventory_dir) / "hosts.yml").read_text(encoding="utf-8"))
    groups = {}

    def walk(name, node):
        node = node or {}
        hosts = list((node.get("hosts") or {}).keys())
        for child, sub in (node.get("children") or {}).items():
            hosts += walk(child, sub)
        groups[name] = sorted(set(groups.get(name, []) + hosts))
        return hosts

    walk("all", data["all"])
    return groups


def run_inventory_play(inventory_dir, play, extra, work):
    """Runs play (text) on the inventory with extra vars (and ubuntu_facts); work holds the play and the
    facts module."""
    work = pathlib.Path(work)
    extra = dict(extra, ubuntu_facts=UBUNTU_FACTS)
    (work / "library").mkdir(exist_ok=True)
    (work / "library" / "inventory_facts.py").write_text(FACTS_MODULE, encoding="utf-8")
    (work / "play.yml").write_text(play, encoding="utf-8")
    # From a file: every role's argument spec is more than one command-line argument may hold.
    (work / "extra.json").write_text(json.dumps(extra), encoding="utf-8")
    return subprocess.run(["ansible-playbook", "-i", str(inventory_dir), str(work / "play.yml"),
                           "-e", "@" + str(work / "extra.json")],
                          capture_output=True, text=True, env=ansible_env(work / "library"), check=False, timeout=600)


def render_role_templates(work, role, templates, extra=None):
    """{template: text} of the role's templates, rendered on localhost with extra vars over the role's
    defaults and constants. role: a role, or a list of roles (a layer, then its component roles: the
    components read the layer's variables); each template is taken from the first role that has it."""
    work = pathlib.Path(work)
    roles = [ROOT / "roles" / r for r in ([role] if isinstance(role, str) else role)]
    vars_files = [str(r / d / "main.yml") for r in roles for d in ("defaults", "vars") if (r / d / "main.yml").is_file()]
    paths = [[name, str(next(r / "templates" / name for r in roles if (r / "templates" / name).is_file()))] for name in templates]
    (work / "play.yml").write_text(RENDER_PLAY.format(vars_files=json.dumps(vars_files), templates=json.dumps(paths)),
                                   encoding="utf-8")
    extra_vars = {"out_dir": str(work), "ansible_python_interpreter": sys.executable}
    extra_vars.update(extra or {})
    proc = subprocess.run(["ansible-playbook", "-i", "localhost,", str(work / "play.yml"), "-e", json.dumps(extra_vars)],
                          capture_output=True, text=True, env=ansible_env(), check=False, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {name: (work / name).read_text(encoding="utf-8") for name in templates}


def fixture_inventory(name):
    """A test inventory built on a shipped one: its file `base` names the shipped inventory whose
    hosts.yml, group_vars and host_vars it starts from; its own hosts.yml and group_vars files replace
    or add to those (copied into a temporary directory once per session)."""
    if name not in _FIXTURE_DIRS:
        src = FIXTURES / name
        base = ROOT / "inventories" / (src / "base").read_text(encoding="utf-8").strip()
        work = pathlib.Path(tempfile.mkdtemp(prefix="llmops-" + name + "-")) / name
        work.mkdir()
        shutil.copy(src / "hosts.yml" if (src / "hosts.yml").exists() else base / "hosts.yml", work / "hosts.yml")
        for sub in ("group_vars", "host_vars"):
            if (base / sub).is_dir():
                shutil.copytree(base / sub, work / sub)
            if (src / sub).is_dir():
                shutil.copytree(src / sub, work / sub, dirs_exist_ok=True)
        _FIXTURE_DIRS[name] = work
    return _FIXTURE_DIRS[name]


def tls_standin(work, name):
    """The balancer's certificate an inventory names, as a stand-in made here (self-signed, for NAME,
    EC P-256, two days): {nginx_lb_tls_cert, nginx_lb_tls_key} for the preflight's TLS check."""
    work = pathlib.Path(work)
    work.mkdir(parents=True, exist_ok=True)
    cert, key = work / "tls-standin.crt", work / "tls-standin.key"
    if not cert.exists():
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                        "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=" + name,
                        "-addext", "subjectAltName=DNS:" + name], check=True, capture_output=True, timeout=60)
    return {"nginx_lb_tls_cert": str(cert), "nginx_lb_tls_key": str(key)}
