"""pytest plugin for molecule verify steps: testinfra hosts over the podman:// backend.

Molecule's testinfra verifier defaults to the ansible backend, which runs every check through an
ansible-playbook round trip. The lab hosts are podman containers, so this plugin points testinfra
at them directly (about ten times faster). It reads the scenario's instances from molecule's
instance config (MOLECULE_INSTANCE_CONFIG) and groups from its inventory, and offers:

  host           the testinfra host, parametrised over every instance (testinfra's own fixture)
  lab_groups     {group: [instance, ...]} from molecule's inventory
  lab_host(name) a testinfra host by instance name
"""
import os

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
