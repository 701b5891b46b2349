"""Shared helpers for the network scenario's verify: run the role again with other data."""
import json
import os
import subprocess
import tempfile

import pytest

FABRIC = "molecule-network-fabric"


def run_role(limit, extra):
    """Run converge.yml against `limit` with `extra` as that host's inventory vars; return (rc, output).

    The overrides are set with set_fact on that host only by converge_override.yml (extra vars would
    apply to every host, peers included, and the peers' data is what the duplicate and fabric checks
    read; a second inventory source loses to the scenario's host_vars)."""
    project = os.environ["MOLECULE_PROJECT_DIRECTORY"]
    scenario = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ)
    env.update({
        "ANSIBLE_ROLES_PATH": os.path.join(project, "roles"),
        "ANSIBLE_COLLECTIONS_PATH": os.path.join(project, ".cache", "collections"),
        "ANSIBLE_CONFIG": os.path.join(project, "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
    })
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump({"network_test_override": extra}, fh)
    try:
        proc = subprocess.run(
            ["ansible-playbook", "-i", os.path.dirname(os.environ["MOLECULE_INVENTORY_FILE"]),
             "--limit", limit, "-e", "@" + fh.name, os.path.join(scenario, "converge_override.yml")],
            env=env, capture_output=True, text=True, timeout=300, check=False)
    finally:
        os.unlink(fh.name)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.fixture(scope="session", autouse=True)
def remove_fabric_network_at_end():
    """The shared destroy removes only the scenario network: detach and remove the fabric here."""
    yield
    names = subprocess.run(["podman", "ps", "-a", "--filter", "network=" + FABRIC, "--format", "{{.Names}}"],
                           capture_output=True, text=True, check=False).stdout.split()
    for name in names:
        if name.startswith("network-"):
            subprocess.run(["podman", "network", "disconnect", FABRIC, name], check=False)
    subprocess.run(["podman", "network", "rm", FABRIC], check=False, capture_output=True)
