"""Every documented tag of a role runs on its own: `--tags <role>_<phase>` also runs the role's
preflight (which validates the variables and computes the role's facts) and the role's skip
decision, so no phase meets an undefined fact or runs on a host the role skips.

Checked on the role's task list as ansible-playbook itself lists it for site.yml (no host contacted).
The unit run lists each phase once for every role together (a role's tags carry its name, so one
role's tasks cannot stand in for another's); `make test-tags` (LLMOPS_TAGS_ALONE=1) runs
ansible-playbook once per tag, every `<role>` and `<role>_<phase>` tag of site.yml alone.

`make test-tags-lab` (LLMOPS_TAGS_LAB=1, after `make demo`) runs each of those tags alone in check
mode against the converged lab (inventories/lab, the lab's own containers): each must pass and find
nothing to change (changed=0 on every host).
"""
import json
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


SITE_TAGS = sorted({tag for play in yaml.safe_load((ROOT / "playbooks" / "site.yml").read_text(encoding="utf-8"))
                    for tag in play.get("tags", [])})
ALONE = os.environ.get("LLMOPS_TAGS_ALONE") == "1"
ON_LAB = os.environ.get("LLMOPS_TAGS_LAB") == "1"
EVERY_TAG = [t for role in ROLES for t in [role] + phases(role)]


def site(*args, timeout=300, env=None):
    """ansible-playbook playbooks/site.yml on inventories/lab with ARGS (and env on top of this
    process's); the finished process."""
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".cache" / "collections"),
               ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", **(env or {}))
    return subprocess.run(["ansible-playbook", "-i", str(ROOT / "inventories" / "lab"), str(ROOT / "playbooks" / "site.yml"),
                           *args], capture_output=True, text=True, env=env, check=False, timeout=timeout)


def listed_tasks(tag):
    proc = site("--list-tasks", "--tags", tag)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def skip_names(role):
    """The names of the tasks of the role's skip decision (the block at the top of tasks/main.yml), if any."""
    tasks = yaml.safe_load((ROOT / "roles" / role / "tasks" / "main.yml").read_text(encoding="utf-8"))
    return [sub["name"] for task in tasks if "block" in task for sub in task["block"]]


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


def test_every_play_of_site_is_tagged_with_its_role():
    assert SITE_TAGS == ROLES


def every_phase():
    return sorted({tag[len(role) + 1:] for role in ROLES for tag in phases(role)})


def check_listing(out, roles, tags):
    for role in roles:
        missing = [name for name in skip_names(role) + preflight_names(role) if f"{role} : {name}" not in out]
        assert not missing, f"--tags {tags} leaves out {role}'s skip decision or preflight tasks {missing}"


@pytest.mark.skipif(ALONE, reason="make test-tags lists every tag alone instead")
@pytest.mark.parametrize("phase", every_phase())
def test_phase_tags_list_the_skip_decision_and_the_preflight(phase):
    """One --list-tasks run with every role's <role>_<phase> tag: each role's skip decision and preflight are in it."""
    roles = [role for role in ROLES if f"{role}_{phase}" in phases(role)]
    tags = ",".join(f"{role}_{phase}" for role in roles)
    check_listing(listed_tasks(tags), roles, tags)


@pytest.mark.skipif(not ALONE, reason="one ansible-playbook run per tag (~2 s each): make test-tags")
@pytest.mark.parametrize("tag", EVERY_TAG)
def test_each_tag_alone_lists_the_skip_decision_and_the_preflight(tag):
    role = next(r for r in sorted(ROLES, key=len, reverse=True) if tag == r or tag.startswith(r + "_"))
    check_listing(listed_tasks(tag), [role], tag)


@pytest.mark.skipif(not ON_LAB, reason="check mode on the converged lab: make demo, then make test-tags-lab")
@pytest.mark.parametrize("tag", EVERY_TAG)
def test_each_tag_alone_in_check_mode_on_the_lab_changes_nothing(tag):
    # Ansible's json callback (ansible.posix.json): per-host stats and each task's result per host.
    proc = site("--check", "--tags", tag, timeout=900, env={"ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json"})
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        doc = {}
    stats = doc.get("stats") or {}
    assert proc.returncode == 0 and stats, f"--tags {tag} --check failed (rc {proc.returncode}):\n{(proc.stdout + proc.stderr)[-5000:]}"
    changed = {host: s["changed"] for host, s in stats.items() if s.get("changed")}
    tasks = sorted({f"{host}: {task['task']['name']}" for play in doc.get("plays", []) for task in play.get("tasks", [])
                    for host, res in task.get("hosts", {}).items() if res.get("changed")})
    assert not changed, f"--tags {tag} --check on the converged lab would change {changed}: {tasks}"
