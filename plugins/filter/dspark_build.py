# -*- coding: utf-8 -*-
# Copyright: llmops.vllm_cluster developers
# Apache License 2.0 (see galaxy.yml)
"""Filters for the dspark_build role: the patches applied to a source build, and the pinned release.

  dspark_patch_errors(patches, remote, active_release, method) -> [message, ...] (empty when valid)
  dspark_patch_list(patches, patch_dir)                         -> [{name, file} | {name, commit}, ...]
  dspark_cuda_arch_list(explicit, capabilities)                 -> TORCH_CUDA_ARCH_LIST ("12.1a", "9.0a;12.1a")
"""

from __future__ import annotations

import json
import os
import re

from ansible.errors import AnsibleFilterError

COMMIT_RE = re.compile(r"^[0-9a-f]{7,40}$")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,99}$")
RELEASE_RE = re.compile(r"^vllm-[0-9a-f]{12}$")
KEYS = ("name", "file", "commit")


def _name(item, index):
    """The name a patch is reported by: its `name`, else the file's base name, else the commit."""
    if not isinstance(item, dict):
        return "#%d" % index
    return item.get("name") or os.path.basename(item.get("file") or "") or item.get("commit") or "#%d" % index


def dspark_patch_errors(patches, remote="", active_release="", method="source"):
    """Every problem with dspark_build_patches / dspark_build_patch_git_url / dspark_build_active_release."""
    errors = []
    if active_release and not RELEASE_RE.fullmatch(str(active_release)):
        errors.append("dspark_build_active_release must be empty (the release the settings build) or a recorded "
                      "release's name, vllm- and 12 hex digits (for example vllm-0123456789ab, as "
                      "`ls /opt/vllm/releases` and the report list them); got '%s'" % active_release)
    if not isinstance(patches, list):
        return errors + ["dspark_build_patches must be a list of {name, file} or {name, commit} entries"]
    if patches and method != "source":
        errors.append("dspark_build_patches apply to source builds only (dspark_build_method=source); "
                      "dspark_build_method is '%s'" % method)
    names = []
    for index, item in enumerate(patches):
        where = "dspark_build_patches[%d] (%s)" % (index, _name(item, index))
        if not isinstance(item, dict):
            errors.append("%s must be a mapping with file or commit" % where)
            continue
        unknown = sorted(set(item) - set(KEYS))
        if unknown:
            errors.append("%s: unknown keys %s (valid: %s)" % (where, ", ".join(unknown), ", ".join(KEYS)))
        has_file, has_commit = bool(item.get("file")), bool(item.get("commit"))
        if has_file == has_commit:
            errors.append("%s must have exactly one of file (a patch file on the controller) or commit "
                          "(from dspark_build_patch_git_url)" % where)
            continue
        name = _name(item, index)
        if not NAME_RE.fullmatch(name):
            errors.append("%s: name must be letters, digits, '_', '.', '+', '-' (at most 100), got '%s'"
                          % (where, name))
        if name in names:
            errors.append("%s: name '%s' is used twice" % (where, name))
        names.append(name)
        if has_file:
            path = str(item["file"])
            if not os.path.isabs(path):
                errors.append("%s: file must be an absolute path on the controller (for example "
                              "\"{{ inventory_dir }}/patches/%s\"), got '%s'" % (where, os.path.basename(path), path))
            elif not os.path.isfile(path):
                errors.append("%s: file %s does not exist on the controller" % (where, path))
        else:
            commit = str(item["commit"])
            if not COMMIT_RE.fullmatch(commit):
                errors.append("%s: commit must be 7 to 40 lower-case hex digits (a commit id), got '%s'"
                              % (where, commit))
            if not remote:
                errors.append("%s: a commit needs dspark_build_patch_git_url (the git remote it is fetched from)"
                              % where)
    return errors


def dspark_patch_list(patches, patch_dir):
    """The ordered list the role's patch script applies: each file at its numbered copy on the host."""
    out = []
    for index, item in enumerate(patches or []):
        if item.get("file"):
            out.append({"name": _name(item, index), "file": "%s/%02d.patch" % (patch_dir, index)})
        else:
            out.append({"name": _name(item, index), "commit": str(item["commit"])})
    return out


def dspark_release_state(stdout):
    """The link, the releases and the current release's record from the release probe's output
    (roles/dspark_build/vars/main.yml, dspark_build__state_probe): the link's target on the first
    line (none when there is no link), then a '--- releases' line and 'MTIME PATH' per release
    directory, then a '--- record' line and the record's JSON (nothing when it is not there).
    Ansible strips the output's last newline: the markers are read as whole lines."""
    if not isinstance(stdout, str):
        raise AnsibleFilterError("dspark_release_state: expected the probe's output, got %r" % (stdout,))
    lines = stdout.split("\n")
    if "--- releases" not in lines or "--- record" not in lines:
        raise AnsibleFilterError("dspark_release_state: the probe's output lacks its '--- releases' or '--- record' line")
    at_releases, at_record = lines.index("--- releases"), lines.index("--- record")
    if at_record < at_releases:
        raise AnsibleFilterError("dspark_release_state: the probe's sections are out of order")
    releases = []
    for line in lines[at_releases + 1:at_record]:
        mtime, dummy, path = line.partition(" ")
        if mtime.isdigit() and path:
            releases.append({"path": path, "mtime": int(mtime)})
    record = "\n".join(lines[at_record + 1:])
    parsed = None
    if record.strip():
        try:
            parsed = json.loads(record)
        except ValueError:
            parsed = None
    return {"link": "\n".join(lines[:at_releases]).strip(), "releases": releases, "record": parsed}


ARCH_RE = re.compile(r"^([0-9]{1,2})\.([0-9])([af]?)$")


def dspark_cuda_arch_list(explicit, capabilities):
    """TORCH_CUDA_ARCH_LIST for a CUDA source build: `explicit` when set, else the GPUs' compute
    capabilities, 12.x with the arch-specific suffix ("12.1" -> "12.1a"), as the public GB10 builds
    set it and FlashInfer's JIT names it (its compilation context turns 12.1 into 12.1a); 9.x and
    10.x as they are, as vLLM's own CUDA wheels build them (its arch-specific kernel lists add the
    suffix themselves: CMakeLists.txt "9.0a", "10.0f"). Sorted, each once, ';'-separated."""
    if explicit:
        return str(explicit)
    out = []
    for cap in capabilities or []:
        m = ARCH_RE.match(str(cap).strip())
        if not m:
            raise AnsibleFilterError("dspark_cuda_arch_list: '%s' is not a compute capability such as 9.0 or 12.1" % cap)
        major, minor, suffix = int(m.group(1)), m.group(2), m.group(3)
        arch = "%d.%s%s" % (major, minor, suffix or ("a" if major == 12 else ""))
        if arch not in out:
            out.append(arch)
    return ";".join(sorted(out, key=lambda a: (int(a.split(".")[0]), a.split(".")[1])))


class FilterModule(object):
    """dspark_build filters."""

    def filters(self):
        return {"dspark_cuda_arch_list": dspark_cuda_arch_list,
                "dspark_patch_errors": dspark_patch_errors,
                "dspark_patch_list": dspark_patch_list,
                "dspark_release_state": dspark_release_state}
