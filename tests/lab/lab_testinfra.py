"""pytest plugin for molecule verify steps: testinfra hosts over the podman:// backend.

Molecule's testinfra verifier defaults to the ansible backend, which runs every check through an
ansible-playbook round trip. The lab hosts are podman containers, so this plugin points testinfra
at them directly (about ten times faster). It reads the scenario's instances from molecule's
instance config (MOLECULE_INSTANCE_CONFIG) and groups from its inventory, and offers:

  host           the testinfra host, parametrised over every instance (testinfra's own fixture)
  lab_groups     {group: [instance, ...]} from molecule's inventory
  lab_host(name) a testinfra host by instance name
  run_play       runs a playbook (text) against the scenario's inventory; role_play() writes a
                 one-role play for it
  run_converge   runs the scenario's converge.yml (or another of its playbooks) again with other
                 variables: (rc, output)

and helpers for the tests: wait_until (poll, fail naming what did not happen), podman / running
(the lab's containers from this machine), container_ip, exposure, main_pid_user.
"""
import os
import subprocess
import time

import pytest
import testinfra
import yaml


def _instances():
    path = os.environ.get("MOLECULE_INSTANCE_CONFIG")
    if not path or not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as fh:
        return [item["instance"] for item in (yaml.safe_load(fh) or [])]


def pytest_configure(config):
    names = _instances()
    if names:
        config.option.hosts = ",".join("podman://" + n for n in names)
        config.option.connection = None
        config.option.ansible_inventory = None


@pytest.fixture(scope="session")
def lab_groups():
    inv = os.environ.get("MOLECULE_INVENTORY_FILE")
    groups = {}
    if inv and os.path.exists(inv):
        with open(inv, encoding="utf-8") as fh:
            data = yaml.safe_load(fh) or {}

        def walk(name, node):
            node = node or {}
            members = set((node.get("hosts") or {}).keys())
            for child, sub in (node.get("children") or {}).items():
                members |= walk(child, sub)
            groups[name] = sorted(members)
            return members

        for name, node in data.items():
            walk(name, node)
    return groups


@pytest.fixture(scope="session")
def lab_host():
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = testinfra.get_host("podman://" + name)
        return cache[name]

    return get


class PlayResult:
    def __init__(self, rc, output):
        self.rc = rc
        self.output = output

    def __repr__(self):
        return "PlayResult(rc=%s)\n%s" % (self.rc, self.output[-4000:])


def _playbook(path, extra_vars=None, limit=None, check=False, args=(), timeout=900):
    """ansible-playbook PATH against this scenario's inventory, in plain text; a PlayResult."""
    import json

    cmd = ["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"], str(path)]
    if extra_vars:
        cmd += ["-e", json.dumps(extra_vars)]
    if limit:
        cmd += ["--limit", limit]
    if check:
        cmd.append("--check")
    cmd += list(args)
    # plain text for the tests' regexes (molecule may force colour, as it does under CI=true)
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                          timeout=timeout, check=False)
    return PlayResult(proc.returncode, proc.stdout)


@pytest.fixture(scope="session")
def run_play(tmp_path_factory):
    """Run a playbook (its text) against this scenario's inventory:
    run_play(yaml_text, extra_vars={}, limit=None, check=False, args=[more ansible-playbook arguments]).

    For behaviour that only a play shows: bad input refused before any change, a broken config
    rejected while the working one keeps serving.
    """
    workdir = tmp_path_factory.mktemp("plays")

    def run(playbook, extra_vars=None, limit=None, check=False, args=(), timeout=900):
        path = workdir / ("play%d.yml" % len(list(workdir.iterdir())))
        path.write_text(playbook, encoding="utf-8")
        return _playbook(path, extra_vars=extra_vars, limit=limit, check=check, args=args, timeout=timeout)

    return run


@pytest.fixture(scope="session")
def run_converge():
    """Runs one of the scenario's playbooks (converge.yml unless told) again with extra variables:
    run_converge(extra, limit=None, timeout=900, playbook="converge.yml", one_line=False) -> (rc, output).

    one_line=True joins the output's whitespace: the YAML result format wraps long messages wherever
    their length puts a break, which splits the phrases a test looks for.
    """
    scenario = os.environ["MOLECULE_SCENARIO_DIRECTORY"]

    def run(extra, limit=None, timeout=900, playbook="converge.yml", one_line=False):
        res = _playbook(os.path.join(scenario, playbook), extra_vars=extra, limit=limit, timeout=timeout)
        return res.rc, (" ".join(res.output.split()) if one_line else res.output)

    return run


def role_play(role, hosts="all", gather_facts=False):
    """The text of a one-role play (llmops.vllm_cluster.ROLE on HOSTS), for run_play."""
    return ("- name: Apply %s\n  hosts: %s\n  gather_facts: %s\n  roles:\n    - role: llmops.vllm_cluster.%s\n"
            % (role, hosts, str(bool(gather_facts)).lower(), role))


def report_table(terminalreporter, title, lines, path):
    """A scenario's table of measures at the end of its pytest run, and the same lines in PATH (beside
    the scenario's log); a file that cannot be written is left out."""
    terminalreporter.write_sep("=", title)
    for line in lines:
        terminalreporter.write_line(line)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")
    except OSError:
        pass


def container_ip(name):
    """The address of lab container NAME on its (first) podman network: for real HTTP from this machine."""
    out = subprocess.run(
        ["podman", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}", name],
        check=True, capture_output=True, text=True).stdout.split()
    assert out, f"{name} has no address"
    return out[0]


def exposure(host, unit):
    """systemd-analyze's "Overall exposure level" of UNIT on HOST (0 = fully sandboxed, 10 = none).

    Fails the test with the command's output when the line is missing (unit unknown, old systemd).
    """
    import re

    name = unit if "." in unit else unit + ".service"
    res = host.run(f"systemd-analyze security --no-pager {name}")
    match = re.search(r"Overall exposure level for " + re.escape(name) + r": ([0-9]+(?:\.[0-9]+)?)", res.stdout)
    if not match:
        pytest.fail(f"systemd-analyze security {name} gave no overall exposure level "
                    f"(rc {res.rc}):\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}")
    return float(match.group(1))


def main_pid_user(host, unit):
    """The user that UNIT's main process runs as (ps -o user= of its MainPID)."""
    pid = host.check_output(f"systemctl show -p MainPID --value {unit}")
    assert pid and pid != "0", f"{unit} has no main process"
    return host.check_output(f"ps -o user= -p {pid}")


def wait_until(check, timeout=60, interval=0.5, what="the condition"):
    """Polls check() until it returns a truthy value and returns that value; after TIMEOUT seconds
    the test fails, naming WHAT and the last value seen."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what} (last: {value!r})")
        time.sleep(interval)


def podman(*args, check=True, timeout=300):
    """Runs podman on this machine (the lab's containers); fails the test with its stderr unless check=False."""
    res = subprocess.run(["podman", *args], capture_output=True, text=True, check=False, timeout=timeout)
    if check and res.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)}: rc {res.returncode}: {res.stderr.strip()}")
    return res


def running(name):
    """True while lab container NAME runs."""
    return podman("inspect", "--format", "{{.State.Running}}", name).stdout.strip() == "true"
