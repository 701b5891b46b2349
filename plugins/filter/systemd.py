# -*- coding: utf-8 -*-
# Copyright: llmops.vllm_cluster developers
# Apache License 2.0 (see galaxy.yml)
"""Reading systemd's own output in one remote call.

  systemd_probe(stdout, names) -> {'manager': 'systemd'|'other', 'default_target': str, 'gui': [pid, ...],
                                    'units': {name: {'id', 'load', 'file_state', 'present', 'alias'}}}
      from the output of the probe in roles/headless/vars/main.yml (headless__probe): `manager=`,
      `default=` and (optional) `gui=` lines, then `systemctl show --property=Id,LoadState,UnitFileState
      NAME...`, one block per NAME in the order given.

Only Python's standard library.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


def _unit_name(name):
    return name if name.endswith(".service") else name + ".service"


def systemd_probe(stdout, names):
    """The service manager, the default target and each named unit's state (see the module docstring)."""
    if not isinstance(stdout, str):
        raise AnsibleFilterError("systemd_probe: expected the probe's output (a string), got %r" % (stdout,))
    head, blocks, block = {}, [], None
    for line in stdout.splitlines():
        if not line.strip():
            block = None
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise AnsibleFilterError("systemd_probe: unexpected line %r" % line)
        if key in ("manager", "default", "gui") and block is None and not blocks:
            head[key] = value.strip()
            continue
        if block is None:
            block = {}
            blocks.append(block)
        block[key] = value.strip()
    if "manager" not in head:
        raise AnsibleFilterError("systemd_probe: the output names no service manager")
    if head["manager"] != "systemd":
        return {"manager": head["manager"], "default_target": "", "gui": [], "units": {}}
    names = [_unit_name(n) for n in names]
    if len(blocks) != len(names):
        raise AnsibleFilterError("systemd_probe: %d units asked, %d answered" % (len(names), len(blocks)))
    units = {}
    for name, info in zip(names, blocks):
        load = info.get("LoadState", "")
        units[name[:-len(".service")]] = {
            "id": info.get("Id", ""),
            "load": load,
            "file_state": info.get("UnitFileState", ""),
            # Only referenced (graphical.target wants display-manager.service): not present.
            "present": load not in ("not-found", ""),
            "alias": info.get("Id", name) != name,
        }
    gui = [pid for pid in head.get("gui", "").split(",") if pid]
    return {"manager": "systemd", "default_target": head.get("default", ""), "gui": gui, "units": units}


class FilterModule(object):
    def filters(self):
        return {"systemd_probe": systemd_probe}
