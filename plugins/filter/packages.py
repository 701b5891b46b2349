# -*- coding: utf-8 -*-
# Copyright: llmops.vllm_cluster developers
# Apache License 2.0 (see galaxy.yml)
"""Which distribution packages a host already has, read in one cheap call, so that a role calls
apt (which opens the whole package cache) only for what is missing or at another version.

  dpkg_query_argv(wanted)          -> the dpkg-query command line that reads WANTED's state
  dpkg_unmet(stdout, wanted)       -> the entries of WANTED that its output does not show installed
                                      at the asked version (all of them when it cannot be read)
  dpkg_unheld(stdout, names)       -> the NAMES that its output does not show held

WANTED entries use apt's syntax: NAME, NAME=VERSION, NAME=VERSION* (a version prefix), optionally
NAME:ARCH. Only Python's standard library.
"""

from __future__ import annotations

import fnmatch
import re

from ansible.errors import AnsibleFilterError

FORMAT = "${Package}\t${Version}\t${db:Status-Abbrev}\n"
NAME_RE = re.compile(r"[a-z0-9][a-z0-9+.-]+(:[a-z0-9]+)?")


def _split(entry):
    if not isinstance(entry, str):
        raise AnsibleFilterError("packages: %r is not a package name" % (entry,))
    name, sep, version = entry.partition("=")
    if not NAME_RE.fullmatch(name):
        raise AnsibleFilterError("packages: %r is not a Debian package name" % (entry,))
    return name, (version if sep else None)


def _state(stdout):
    """{name: (version, status abbreviation)} of dpkg-query's output (-f FORMAT)."""
    out = {}
    for line in (stdout or "").splitlines():
        parts = line.split("\t")
        if len(parts) != 3:
            continue
        out[parts[0]] = (parts[1], parts[2])
    return out


def dpkg_query_argv(wanted):
    """dpkg-query's command line for the packages of WANTED (versions dropped, '--' before names)."""
    return ["dpkg-query", "-W", "-f=" + FORMAT, "--"] + [_split(e)[0] for e in (wanted or [])]


def dpkg_unmet(stdout, wanted):
    """The entries of WANTED not installed (status 'i'), or installed at a version other than the one
    asked (NAME=VERSION exactly, NAME=PREFIX* by prefix, as apt reads it)."""
    state = _state(stdout)
    unmet = []
    for entry in wanted or []:
        name, version = _split(entry)
        found = state.get(name.split(":", 1)[0])
        if found is None or len(found[1]) < 2 or found[1][1] != "i":
            unmet.append(entry)
        elif version is not None and not (fnmatch.fnmatchcase(found[0], version) if version.endswith("*")
                                          else found[0] == version):
            unmet.append(entry)
    return unmet


def dpkg_unheld(stdout, names):
    """The packages of NAMES whose selection is not 'hold' (the first letter of the status)."""
    state = _state(stdout)
    out = []
    for entry in names or []:
        name = _split(entry)[0].split(":", 1)[0]
        found = state.get(name)
        if found is None or not found[1].startswith("h"):
            out.append(entry)
    return out


class FilterModule(object):
    def filters(self):
        return {"dpkg_query_argv": dpkg_query_argv, "dpkg_unmet": dpkg_unmet, "dpkg_unheld": dpkg_unheld}
