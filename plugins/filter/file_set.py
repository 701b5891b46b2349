# -*- coding: utf-8 -*-
# Copyright: llmops.vllm_cluster developers
# Apache License 2.0 (see galaxy.yml)
"""Entries for llmops.vllm_cluster.file_set.

  systemd_dropin_files(units, name, template, present=True)
      -> for each unit, its drop-in directory and the drop-in NAME rendered from TEMPLATE with the
         variable `unit` set to the unit (removed instead when PRESENT is false); the drop-in's key
         is the unit, so `changed_keys` names the units whose drop-in changed.
  file_set_directories(paths, owner, group, mode)
      -> a `state: directory` entry for each absolute path (a list built from data, such as the
         directories of the models a node stages).

Only Python's standard library.
"""

from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError

UNIT_RE = re.compile(r"^[A-Za-z0-9:_.@-]+$")
NAME_RE = re.compile(r"^[A-Za-z0-9_.@-]+\.conf$")


def systemd_dropin_files(units, name, template, present=True):
    """file_set entries for one drop-in per unit (root-owned, 0644, directories 0755)."""
    if not isinstance(units, list):
        raise AnsibleFilterError("systemd_dropin_files: units must be a list, got %r" % (units,))
    if not isinstance(name, str) or not NAME_RE.fullmatch(name) or name.startswith("."):
        raise AnsibleFilterError("systemd_dropin_files: %r is not a drop-in file name (NAME.conf)" % (name,))
    out = []
    for unit in units:
        if not isinstance(unit, str) or not UNIT_RE.fullmatch(unit) or unit.startswith(".") or ".." in unit:
            raise AnsibleFilterError("systemd_dropin_files: %r is not a systemd unit name" % (unit,))
        base = unit if "." in unit and unit.rsplit(".", 1)[1] in ("service", "socket", "timer", "mount", "path") \
            else unit + ".service"
        directory = "/etc/systemd/system/%s.d" % base
        out.append({"dest": directory, "state": "directory", "owner": "root", "group": "root", "mode": "0755"})
        out.append({"key": unit, "dest": "%s/%s" % (directory, name), "template": template,
                    "vars": {"unit": unit}, "state": "file" if present else "absent",
                    "owner": "root", "group": "root", "mode": "0644"})
    return out


RESTART_DROPIN = """# Managed by llmops.vllm_cluster (Ansible); a change here is overwritten.
# %(unit)s restarts itself when it fails, at most %(burst)d starts in %(interval)d s; past that systemd leaves
# it failed (an alert fires) instead of looping. A change here needs only a systemd reload, no restart.
[Unit]
StartLimitIntervalSec=%(interval)d
StartLimitBurst=%(burst)d

[Service]
Restart=%(restart)s
RestartSec=%(sec)d
"""


def systemd_restart_files(units, restart_sec=2, burst=5, interval=60, restart="on-failure", name="llmops-restart.conf",
                          key_prefix=""):
    """file_set entries for a drop-in per unit that makes it restart itself, with a bounded start limit."""
    try:
        numbers = dict(sec=int(restart_sec), burst=int(burst), interval=int(interval))
    except (TypeError, ValueError):
        raise AnsibleFilterError("systemd_restart_files: restart_sec, burst and interval must be integers, got %r"
                                 % ((restart_sec, burst, interval),))
    if numbers["sec"] < 0 or numbers["burst"] < 1 or numbers["interval"] < 1:
        raise AnsibleFilterError("systemd_restart_files: restart_sec >= 0, burst >= 1, interval >= 1 (got %r)"
                                 % ((restart_sec, burst, interval),))
    if restart not in ("on-failure", "on-abnormal", "always"):
        raise AnsibleFilterError("systemd_restart_files: restart must be on-failure, on-abnormal or always, got %r"
                                 % (restart,))
    out = []
    for entry in systemd_dropin_files(units, name, "unused", True):
        if "template" in entry:
            del entry["template"]
            del entry["vars"]
            entry["content"] = RESTART_DROPIN % dict(numbers, unit=entry["key"], restart=restart)
            entry["key"] = key_prefix + entry["key"]
        out.append(entry)
    return out


def file_set_directories(paths, owner="root", group="root", mode="0755"):
    """file_set entries creating each directory of PATHS (absolute, no '..' segment)."""
    if not isinstance(paths, list):
        raise AnsibleFilterError("file_set_directories: paths must be a list, got %r" % (paths,))
    out = []
    for path in paths:
        if not isinstance(path, str) or not path.startswith("/") or "\n" in path or ".." in path.split("/"):
            raise AnsibleFilterError("file_set_directories: %r is not an absolute path without '..'" % (path,))
        out.append({"dest": path, "state": "directory", "owner": owner, "group": group, "mode": mode})
    return out


class FilterModule(object):
    def filters(self):
        return {"systemd_dropin_files": systemd_dropin_files, "systemd_restart_files": systemd_restart_files,
                "file_set_directories": file_set_directories}
