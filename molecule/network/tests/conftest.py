"""Shared helpers for the network scenario's verify: run the role again with other data."""
import subprocess

import pytest

FABRIC = "molecule-network-fabric"


@pytest.fixture(scope="session")
def run_role(run_converge):
    """run_role(limit, extra): converge `limit` with `extra` as that host's variables; (rc, output).

    The overrides are set with set_fact on that host only by converge_override.yml (extra vars would
    apply to every host, peers included, and the peers' data is what the duplicate and fabric checks
    read; a second inventory source loses to the scenario's host_vars)."""

    def run(limit, extra):
        return run_converge({"network_test_override": extra}, limit=limit, timeout=300,
                            playbook="converge_override.yml")

    return run


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
