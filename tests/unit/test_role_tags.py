"""Every documented tag of a role runs on its own: `--tags <role>_<phase>` also runs the role's
preflight (which validates the variables and computes the role's facts) and the role's skip
decision, so no phase meets an undefined fact or runs on a host the role skips.

Checked on the role's task list as ansible-playbook itself lists it for site.yml (no host contacted).
"""
import os
import pathlib
import shutil
import subprocess

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
ROLES = sorted(p.parent.parent.name for p in ROOT.glob("roles/*/tasks/main.yml"))

pytestmark = pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="ansible-playbook not installed")


def phases(role):
    tasks = yaml.safe_load((ROOT / "roles" / role / "tasks" / "main.yml").read_text(encoding="utf-8"))
    out = []
    for task in tasks:
        for tag in task.get("tags", []):
            if tag.startswith(role + "_") and tag not in out:
                out.append(tag)
    return out


def listed_tasks(tag):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".cache" / "collections"),
               ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(["ansible-playbook", "-i", str(ROOT / "inventories" / "lab"), str(ROOT / "playbooks" / "site.yml"),
                           "--list-tasks", "--tags", tag], capture_output=True, text=True, env=env, check=False, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def preflight_names(role):
    """The preflight's task names; a static import is not a task of its own (its tasks are listed)."""
    tasks = yaml.safe_load((ROOT / "roles" / role / "tasks" / "preflight.yml").read_text(encoding="utf-8"))
    return [t["name"] for t in tasks if "ansible.builtin.import_tasks" not in t]


@pytest.mark.parametrize("role", ROLES)
def test_preflight_and_skip_carry_every_phase_tag(role):
    tasks = yaml.safe_load((ROOT / "roles" / role / "tasks" / "main.yml").read_text(encoding="utf-8"))
    want = {role, role + "_preflight", role + "_install", role + "_configure", role + "_service"} | set(phases(role))
    assert want <= {role} | set(phases(role)), phases(role)
    for task in tasks:
        if task.get("ansible.builtin.import_tasks") == "preflight.yml" or "block" in task or "ansible.builtin.debug" in task:
            for sub in task.get("block", [task]):
                tags = set(task.get("tags", [])) | set(sub.get("tags", []))
                assert want <= tags, f"{role}: '{sub.get('name')}' is not tagged with every phase ({sorted(want)})"


@pytest.mark.parametrize("phase", ["configure", "service"])
def test_phase_tags_alone_list_the_preflight(phase):
    """One --list-tasks run with every role's <role>_<phase> tag: each role's preflight is in it."""
    out = listed_tasks(",".join(f"{role}_{phase}" for role in ROLES))
    for role in ROLES:
        missing = [name for name in preflight_names(role) if f"{role} : {name}" not in out]
        assert not missing, f"--tags {role}_{phase} leaves out the preflight tasks {missing} of {role}"
