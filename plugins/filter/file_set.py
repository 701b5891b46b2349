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
        return {"systemd_dropin_files": systemd_dropin_files, "file_set_directories": file_set_directories}
