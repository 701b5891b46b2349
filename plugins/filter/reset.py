# -*- coding: utf-8 -*-
# Copyright: llmops.vllm_cluster developers
# Apache License 2.0 (see galaxy.yml)
"""The plan of playbooks/reset.yml: what the collection installed on a host, from the layout in
playbooks/vars/reset.yml (one entry per layer, in the reverse order of site.yml), with the host's own
values, read in one remote call and sorted into what goes and what stays.

  reset_settings(settings)                         -> {confirmed, remove_data, remove_packages, partial_replicas}
  reset_half_replicas(replicas, hosts)             -> [{replica, reset, kept}]: replicas only partly in HOSTS
  reset_names(layout)                              -> the variables the layout's placeholders read
  reset_layout(layout, values, groups, facts=None) -> {errors, layers, probe}: the layout for one host
  reset_plan(probe_stdout, resolved, settings)     -> {stop, holds, packages, lines, remove, tables, users,
                                                       groups, commands, daemon_reload, reset_failed,
                                                       engine_active, removed, kept}

A placeholder `{name}` (or `{name|dirname}`, `{name|basename}`) in the layout is the host's value of a
role variable (its inventory value, else the role's own default from roles/<role>/defaults/main.yml,
or its constant from roles/<role>/vars/main.yml, read here: the layout copies no path), or of a
playbook option (its default from playbooks/vars/argument_specs.yml), or a value the playbook
computed (`reset_*`). A value the inventory sets is checked against its syntax class first
(plugins/plugin_utils/_syntax_table.py); every path to remove must be an absolute path that is not a
system directory.
"""

from __future__ import annotations

import fnmatch
import functools
import itertools
import os
import posixpath
import re

import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.vllm_cluster.plugins.filter.nvidia_host import nvidia_driver_plan
from ansible_collections.llmops.vllm_cluster.plugins.plugin_utils import _syntax, _syntax_table

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The kinds of data a reset keeps unless reset_remove_data names them.
KINDS = ("models", "caches", "builds", "metrics", "backups")
_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0", "")
_PLACEHOLDER = re.compile(r"\{([a-z_][a-z0-9_]*)(?:\|(dirname|basename))?\}")
# The Jinja a role default may hold and this resolver reads: `{{ name }}`, `{{ name | default(literal) }}`.
_EXPR = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:\|\s*default\(\s*(?:'([^']*)'|\"([^\"]*)\"|([0-9]+))\s*\)\s*)?\}\}")
_SAFE_PATH = re.compile(r"/[A-Za-z0-9._+@%:=,/*~-]*")
_UNIT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,250}")
_PACKAGE = re.compile(r"[a-z0-9][a-z0-9+.-]+(:[a-z0-9]+)?")
_ACCOUNT = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
_ACTIVE = ("active", "activating", "reloading", "deactivating")
_ENABLED = ("enabled", "enabled-runtime", "linked", "linked-runtime")
_SECTIONS = ("files", "data", "kept", "units", "services", "kept_units", "packages", "users", "lines", "tables", "commands")


class _Unresolved(Exception):
    pass


def _bool(value):
    """A yes/no setting given as a bool or as the text -e key=value makes of it."""
    if isinstance(value, bool):
        return value
    return ("" if value is None else str(value)).strip().lower() in _TRUE


def reset_settings(settings):
    """The reset's own variables, read: reset_confirm (yes), reset_remove_data (true, false, all or kinds
    of data), reset_remove_packages, reset_partial_replicas (true or false). Their syntax classes
    (_syntax_table.PLAYBOOKS['reset']) are checked by the playbook's first task, before this reads them."""
    if not isinstance(settings, dict):
        raise AnsibleFilterError("reset_settings: expected a mapping of the reset_* variables, got %r" % (settings,))
    confirm = settings.get("reset_confirm")
    data = settings.get("reset_remove_data")
    if isinstance(data, str) and data.strip().lower() not in _TRUE + _FALSE:
        data = [v.strip() for v in data.split(",")]
    if isinstance(data, (list, tuple)):
        kinds = list(KINDS) if "all" in data else [k for k in KINDS if k in data]
    else:
        kinds = list(KINDS) if _bool(data) else []
    return {
        "confirmed": confirm is True or confirm == "yes",
        "remove_data": kinds,
        "remove_packages": _bool(settings.get("reset_remove_packages")),
        "partial_replicas": _bool(settings.get("reset_partial_replicas")),
    }


def reset_half_replicas(replicas, hosts):
    """The replicas (cluster_replicas) that HOSTS holds only some nodes of: {replica, reset, kept}."""
    if not isinstance(replicas, dict):
        raise AnsibleFilterError("reset_half_replicas: expected the cluster_replicas mapping, got %r" % (replicas,))
    chosen = set(hosts or [])
    out = []
    for name in sorted(replicas):
        nodes = list((replicas[name] or {}).get("nodes") or {})
        reset = [n for n in nodes if n in chosen]
        if reset and len(reset) < len(nodes):
            out.append({"replica": name, "reset": reset, "kept": [n for n in nodes if n not in chosen]})
    return out


def _strings(node):
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from _strings(key)
            yield from _strings(value)
    elif isinstance(node, (list, tuple)):
        for item in node:
            yield from _strings(item)


def reset_names(layout):
    """Every variable a placeholder of the layout (or of a condition's keys) reads."""
    names = set()
    for layer in layout or []:
        for text in _strings(layer):
            names.update(m.group(1) for m in _PLACEHOLDER.finditer(text))
        for section in _SECTIONS:
            for item in layer.get(section) or []:
                if isinstance(item, dict):
                    for key in ("if", "remove_if", "release_if"):
                        for cond in _conditions(item.get(key)):
                            names.update(cond)
        for cond in _conditions(layer.get("if")):
            names.update(cond)
    return sorted(n for n in names if not n.startswith("reset_"))


def _load(path):
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle) or {}


@functools.lru_cache(maxsize=None)
def _sources(root=_ROOT):
    """(defaults, constants, playbook defaults) of the collection at ROOT: role defaults and constants,
    each role's argument spec options, and the playbooks' option defaults."""
    defaults, constants, options = {}, {}, {}
    roles = os.path.join(root, "roles")
    for role in sorted(os.listdir(roles)):
        for name, value in _load(os.path.join(roles, role, "defaults", "main.yml")).items():
            defaults.setdefault(name, value)
        for name, value in _load(os.path.join(roles, role, "vars", "main.yml")).items():
            constants.setdefault(name, value)
        options[role] = _syntax.spec_options(_load(os.path.join(roles, role, "meta", "argument_specs.yml")))
    playbook_defaults = {}
    specs = _load(os.path.join(root, "playbooks", "vars", "argument_specs.yml")).get("argument_specs") or {}
    for entry, spec in specs.items():
        options["playbook:" + entry] = (spec or {}).get("options") or {}
        for name, option in options["playbook:" + entry].items():
            if "default" in option:
                playbook_defaults.setdefault(name, option["default"])
    return defaults, constants, playbook_defaults, options


def _table_of(name):
    """(table, options) of the syntax class that checks NAME, or None."""
    _defaults, _constants, _playbook, options = _sources()
    for tables, prefix in ((_syntax_table.TABLE, ""), (_syntax_table.PLAYBOOKS, "playbook:")):
        for owner, table in tables.items():
            if any(path.split(".")[0].split("[")[0] == name for path in table):
                return table, options.get(prefix + owner) or {}
    return None


class _Resolver(object):
    """The host's value of each name: computed > role constant > inventory > role or playbook default."""

    def __init__(self, values, facts):
        self.defaults, self.constants, self.playbook, _options = _sources()
        self.values = dict(values or {})
        self.facts = dict(facts or {})
        self.cache = {}
        self.from_inventory = set()
        self.stack = []

    def __call__(self, name):
        if name in self.cache:
            return self.cache[name]
        if name in self.stack:
            raise _Unresolved("%s refers to itself" % name)
        self.stack.append(name)
        try:
            if name in self.facts:
                value = self.facts[name]
            elif name in _DERIVED:
                value = _DERIVED[name](self)
            elif name in self.constants:
                value = self.render(self.constants[name], name)
            elif name in self.values:
                value = self.values[name]
                self.from_inventory.add(name)
            elif name in self.defaults:
                value = self.render(self.defaults[name], name)
            elif name in self.playbook:
                value = self.playbook[name]
            else:
                raise _Unresolved("%s is neither a role variable, a playbook option nor a value the playbook computes" % name)
        finally:
            self.stack.pop()
        self.cache[name] = value
        return value

    def render(self, raw, name):
        if isinstance(raw, list):
            return [self.render(item, name) for item in raw]
        if isinstance(raw, dict):
            return dict((k, self.render(v, name)) for k, v in raw.items())
        if not isinstance(raw, str) or "{" not in raw:
            return raw
        whole = _EXPR.fullmatch(raw.strip())
        if whole:
            return self._expr(whole)
        text = _EXPR.sub(lambda m: str(self._expr(m)), raw)
        if "{{" in text or "{%" in text:
            raise _Unresolved("the default of %s (%r) is more Jinja than this plan reads" % (name, raw))
        return text.strip() if raw != raw.strip() else text

    def _expr(self, match):
        name, single, double, number = match.groups()
        try:
            return self(name)
        except _Unresolved:
            if single is not None or double is not None:
                return single if single is not None else double
            if number is not None:
                return int(number)
            raise


def _nvidia_packages(resolve):
    """Every driver package the nvidia_driver role could have installed and held on this host, for its
    settings and distribution (Secure Boot on or off, NVSwitches or none)."""
    names = []
    for secure_boot, nvswitches in itertools.product(("enabled", "disabled"), (0, 1)):
        plan = nvidia_driver_plan({
            "distribution": resolve("reset_distribution"), "source": resolve("nvidia_driver_source"),
            "branch": resolve("nvidia_driver_branch"), "flavor": resolve("nvidia_driver_flavor"),
            "packages": resolve("nvidia_driver_packages"), "kernel_modules": resolve("nvidia_driver_kernel_modules"),
            "secure_boot": secure_boot, "kernel": resolve("reset_kernel"),
            "precompiled_kernel": resolve("nvidia_driver_precompiled_kernel"),
            "fabricmanager": resolve("nvidia_driver_fabricmanager"), "nvswitches": nvswitches,
            "fabricmanager_packages": resolve("nvidia_driver_fabricmanager_packages")})
        for name in plan["packages"] + plan["fabricmanager_packages"]:
            name = name.split("=", 1)[0]
            if name not in names and _PACKAGE.fullmatch(name) and not name.endswith("-"):
                names.append(name)
    return names


# Values the plan derives from others.
_DERIVED = {"reset_nvidia_driver_packages": _nvidia_packages}


def _conditions(cond):
    if cond is None:
        return []
    return list(cond) if isinstance(cond, list) else [cond]


def _matches(resolve, cond):
    """True when no condition is given, or every key of one of the given mappings has its value."""
    conds = _conditions(cond)
    if not conds:
        return True
    for one in conds:
        ok = True
        for name, want in one.items():
            value = resolve(name)
            if isinstance(want, bool):
                got = value if isinstance(value, bool) else str(value).strip().lower() in _TRUE
                ok = ok and got == want
            elif isinstance(want, list):
                ok = ok and value in want
            else:
                ok = ok and str(value) == str(want)
        if ok:
            return True
    return False


def _expand(text, resolve):
    """TEXT with its placeholders replaced: one string per combination of list values; none when a
    placeholder's value is empty."""
    parts, choices = [], []
    pos = 0
    for match in _PLACEHOLDER.finditer(text):
        parts.append(text[pos:match.start()])
        value = resolve(match.group(1))
        values = value if isinstance(value, (list, tuple)) else [value]
        values = [str(v) for v in values if v is not None and str(v) != ""]
        if match.group(2):
            values = [getattr(posixpath, match.group(2))(v.rstrip("/")) for v in values]
        choices.append(values)
        parts.append(None)
        pos = match.end()
    parts.append(text[pos:])
    out = []
    for combo in itertools.product(*choices):
        it = iter(combo)
        out.append("".join(next(it) if p is None else p for p in parts))
    return out


def _path_error(path, what):
    if not _SAFE_PATH.fullmatch(path) or "/../" in path + "/" or "//" in path:
        return "%s: %r is not an absolute path of letters, digits and . _ + @ %% : = , / - (nothing was changed)" % (what, path)
    if path.rstrip("/") in _syntax.SYSTEM_DIRS or path in _syntax.SYSTEM_DIRS:
        return "%s: %r is a system directory; a reset removes only what the collection owns (nothing was changed)" % (what, path)
    return None


def reset_layout(layout, values, groups, facts=None):
    """The layout for one host: each layer whose hosts include one of GROUPS (the host's group_names),
    its items whose conditions hold, with their placeholders replaced by the host's values (VALUES: the
    variables the inventory sets; FACTS: what the playbook computed, reset_*). Errors name each value
    the inventory sets that its syntax class refuses, and each path that a reset must not remove."""
    if not isinstance(layout, list):
        raise AnsibleFilterError("reset_layout: expected the layout (a list of layers), got %r" % (layout,))
    resolve = _Resolver(values, facts)
    mine = set(groups or [])
    errors, layers = [], []
    for entry in layout:
        name = entry.get("layer", "?")
        try:
            layers.append(_layer(entry, resolve, mine, errors))
        except _Unresolved as exc:
            errors.append("reset: the layout of %s cannot be read (%s): a collection defect, report it" % (name, exc))
    for var in sorted(resolve.from_inventory):
        found = _table_of(var)
        if found is not None:
            table, options = found
            errors += _syntax.Checker(table, options).run({var: resolve.values[var]})
    layers = [layer for layer in layers if layer is not None]
    return {"errors": errors, "layers": layers, "probe": _probe_args(layers)}


def _in_hosts(hosts, resolve, mine):
    if hosts is None:
        return True
    names = []
    for text in hosts if isinstance(hosts, list) else [hosts]:
        names += _expand(text, resolve)
    return bool(mine & set(names))


def _layer(entry, resolve, mine, errors):
    if not _in_hosts(entry.get("hosts"), resolve, mine) or not _matches(resolve, entry.get("if")):
        return None
    out = dict((section, []) for section in _SECTIONS)
    out["layer"] = entry["layer"]
    for section in _SECTIONS:
        for item in entry.get(section) or []:
            item = item if isinstance(item, dict) else {_KEY[section]: item}
            if not _in_hosts(item.get("hosts"), resolve, mine) or not _matches(resolve, item.get("if")):
                continue
            out[section] += _item(section, item, resolve, errors, entry["layer"])
    return out


_KEY = {"files": "path", "data": "path", "kept": "path", "units": "name", "services": "name", "kept_units": "name",
        "packages": "name",
        "users": "name", "lines": "path", "tables": "name", "commands": "argv"}


def _item(section, item, resolve, errors, layer):
    what = "%s %s %s" % (layer, section, item.get(_KEY[section]))
    if section in ("files", "data", "kept"):
        out = []
        for path in _expand(item["path"], resolve):
            error = _path_error(path, what)
            if error and not item.get("if_empty"):
                errors.append(error)
                continue
            if error:
                continue
            entry = {"path": path.rstrip("/") or path}
            if section == "files":
                entry["if_empty"] = bool(item.get("if_empty"))
            elif section == "data":
                entry["kind"] = item["kind"]
            else:
                entry["why"] = item.get("why", "")
            out.append(entry)
        return out
    if section in ("units", "services", "kept_units", "tables"):
        out = []
        for name in _expand(item["name"], resolve):
            if not _UNIT.fullmatch(name):
                errors.append("%s: %r is not a unit or table name (nothing was changed)" % (what, name))
                continue
            entry = {"name": name}
            if section == "services" and item.get("if_present"):
                entry["if_present"] = (_expand(item["if_present"], resolve) or [""])[0]
            if section == "kept_units":
                entry["why"] = item.get("why", "")
            out.append(entry)
        return out
    if section == "packages":
        remove = _matches(resolve, item.get("remove_if"))
        release = _matches(resolve, item.get("release_if"))
        present, files = [], []
        for path in item.get("if_present") or []:
            present += _expand(path, resolve)
        for path in item.get("files") or []:
            for one in _expand(path, resolve):
                error = _path_error(one, what)
                if error:
                    errors.append(error)
                else:
                    files.append(one)
        out = []
        for name in _expand(item["name"], resolve):
            name = name.split("=", 1)[0]
            if not _PACKAGE.fullmatch(name):
                errors.append("%s: %r is not a Debian package name (nothing was changed)" % (what, name))
                continue
            out.append({"name": name, "remove": remove, "release": release, "if_present": present,
                        "files": [] if out else files})
        if not out and files:
            out.append({"name": None, "remove": remove, "release": release, "if_present": present, "files": files})
        return out
    if section == "users":
        out = []
        for name in _expand(item["name"], resolve):
            group = (_expand(item["group"], resolve) or [None])[0] if item.get("group") else None
            if not _ACCOUNT.fullmatch(name) or (group is not None and not _ACCOUNT.fullmatch(group)):
                errors.append("%s: %r is not a user and group name (nothing was changed)" % (what, (name, group)))
                continue
            out.append({"name": name, "group": group, "owns": list(item.get("owns") or [])})
        return out
    if section == "lines":
        out = []
        for path in _expand(item["path"], resolve):
            for line in _expand(item["line"], resolve):
                if _path_error(path, what) or "\n" in line:
                    errors.append("%s: %r, %r cannot be edited (nothing was changed)" % (what, path, line))
                    continue
                out.append({"path": path, "line": line})
        return out
    argv = []
    for part in item["argv"] if isinstance(item["argv"], list) else [item["argv"]]:
        argv += _expand(part, resolve)
    after = []
    for path in item.get("after") or []:
        after += _expand(path, resolve)
    present = _expand(item["if_present"], resolve)[0] if item.get("if_present") else None
    return [{"argv": argv, "after": after, "if_present": present}] if argv else []


def _probe_args(layers):
    """The probe's arguments: every path, directory, unit, package, account, table and line it reads."""
    paths, dirs, units, packages, users, groups, tables, lines = [], [], [], [], [], [], [], []

    def add(seq, value):
        if value and value not in seq:
            seq.append(value)
    for layer in layers:
        for item in layer["files"] + layer["data"] + layer["kept"]:
            add(paths, item["path"])
            if item.get("if_empty"):
                add(dirs, item["path"])
        for item in layer["units"] + layer["services"] + layer["kept_units"]:
            add(units, item["name"])
            add(paths, item.get("if_present"))
        for item in layer["packages"]:
            add(packages, item["name"])
            for path in item["if_present"] + item["files"]:
                add(paths, path)
        for item in layer["users"]:
            add(users, item["name"])
            add(groups, item["group"])
        for item in layer["tables"]:
            add(tables, item["name"])
        for item in layer["commands"]:
            add(paths, item["if_present"])
        for item in layer["lines"]:
            lines += [item["path"], item["line"]]
    return (["--paths"] + paths + ["--dirs"] + dirs + ["--users"] + users + ["--groups"] + groups + ["--tables"] + tables
            + ["--lines"] + lines + ["--units"] + units + ["--packages"] + packages)


def _read_probe(stdout, layers):
    state = {"paths": set(), "entries": {}, "users": set(), "groups": set(), "tables": set(), "lines": set(),
             "packages": {}, "units": {}}
    section, blocks, block = None, [], None
    for raw in (stdout or "").splitlines():
        line = raw.rstrip("\n")
        if line in ("--- packages", "--- units"):
            section = line[4:]
            continue
        if section == "packages":
            parts = line.split("\t")
            if len(parts) == 3:
                state["packages"][parts[0].split(":", 1)[0]] = parts[2]
            continue
        if section == "units":
            if not line.strip():
                block = None
                continue
            key, sep, value = line.partition("=")
            if sep:
                if block is None:
                    block = {}
                    blocks.append(block)
                block[key] = value.strip()
            continue
        kind, _sep, rest = line.partition(" ")
        if kind == "path":
            state["paths"].add(rest)
        elif kind == "entry":
            state["entries"].setdefault(posixpath.dirname(rest), []).append(rest)
        elif kind in ("user", "group", "table"):
            state[kind + "s"].add(rest)
        elif kind == "line" and rest.isdigit():
            state["lines"].add(int(rest))
    names = []
    for layer in layers:
        for item in layer["units"] + layer["services"] + layer["kept_units"]:
            if item["name"] not in names:
                names.append(item["name"])
    if len(blocks) == len(names):
        state["units"] = dict(zip(names, blocks))
    return state


def _matched(pattern, paths):
    if "*" not in pattern:
        return [pattern] if pattern in paths else []
    return sorted(p for p in paths if fnmatch.fnmatchcase(p, pattern))


def _under(path, top):
    return path == top or path.startswith(top.rstrip("/") + "/")


def reset_plan(probe_stdout, resolved, settings):
    """What the reset does on the host, from the probe's output (the script in playbooks/vars/reset.yml
    run with the layout's probe arguments), the host's layout and the checked settings; `removed` and
    `kept` say it in words, for the report."""
    layers = resolved["layers"]
    state = _read_probe(probe_stdout, layers)
    kinds = set(settings.get("remove_data") or [])
    with_packages = bool(settings.get("remove_packages"))
    removed, kept = [], []
    plan = {"stop": [], "holds": [], "packages": [], "lines": [], "remove": [], "tables": [], "users": [],
            "groups": [], "commands": [], "daemon_reload": False, "reset_failed": [], "engine_active": False}

    # Units: the collection's own, and the distribution's services a layer started (only where that
    # layer's configuration is there), in layer order: the edge first, the host layers last.
    seen = set()
    for layer in layers:
        for item in layer["units"] + layer["services"]:
            name = item["name"]
            if name in seen or (item.get("if_present") and item["if_present"] not in state["paths"]):
                continue
            seen.add(name)
            info = state["units"].get(name, {})
            active = info.get("ActiveState") in _ACTIVE
            enabled = info.get("UnitFileState") in _ENABLED
            if layer["layer"] == "vllm_service" and item in layer["units"] and active:
                plan["engine_active"] = True
            if info.get("LoadState") == "loaded" and (active or enabled):
                plan["stop"].append({"name": name, "state": "stopped" if active else None, "enabled": False if enabled else None})
                removed.append("unit %s (%s)" % (name, ", ".join(w for w, on in (("stopped", active), ("disabled", enabled)) if on)))
            if info.get("ActiveState") == "failed" or (active and item in layer["units"]):
                plan["reset_failed"].append(name)
        for item in layer["kept_units"]:
            info = state["units"].get(item["name"], {})
            if info.get("LoadState") == "loaded" and info.get("UnitFileState") in _ENABLED:
                kept.append("unit %s (%s)" % (item["name"], item["why"]))

    # Paths: kept data and kept files first (nothing that holds them is removed), then the rest.
    keep, remove = [], []
    for layer in layers:
        for item in layer["data"]:
            for path in _matched(item["path"], state["paths"]):
                if item["kind"] in kinds:
                    remove.append(path)
                else:
                    keep.append(path)
                    kept.append("%s (%s data: -e reset_remove_data=%s removes it)" % (path, item["kind"], item["kind"]))
        for item in layer["kept"]:
            for path in _matched(item["path"], state["paths"]):
                keep.append(path)
                kept.append("%s (%s)" % (path, item["why"]) if item["why"] else path)
    # Packages, where the layer's configuration shows it installed them: holds released; removed, with
    # the files that serve them, only when asked (and never where the layout forbids it).
    for layer in layers:
        for item in layer["packages"]:
            if item["if_present"] and not any(p in state["paths"] for p in item["if_present"]):
                continue
            goes = with_packages and item["remove"]
            why = ("NVIDIA's, on DGX OS: never removed" if not item["remove"]
                   else "-e reset_remove_packages=true removes it")
            for path in item["files"]:
                for found in _matched(path, state["paths"]):
                    if goes:
                        remove.append(found)
                    else:
                        keep.append(found)
                        kept.append("%s (goes with the %s packages: %s)" % (found, layer["layer"], why.replace(" removes it", "")))
            status = state["packages"].get(item["name"]) if item["name"] else None
            if not status or item["name"] in plan["holds"] + plan["packages"]:
                continue
            if status.startswith("h") and item["release"]:
                plan["holds"].append(item["name"])
                removed.append("hold of package %s" % item["name"])
            if len(status) < 2 or status[1] != "i":
                continue
            if goes:
                plan["packages"].append(item["name"])
                removed.append("package %s" % item["name"])
            else:
                kept.append("package %s (%s)" % (item["name"], why))
    empties = []
    for layer in layers:
        for item in layer["files"]:
            if item["if_empty"]:
                empties.append(item["path"])
                continue
            remove += _matched(item["path"], state["paths"])
    final = []
    for path in remove:
        holder = [k for k in keep if _under(k, path) and k != path]
        if path in keep:
            continue
        if holder:
            kept.append("%s (holds kept %s)" % (path, ", ".join(sorted(holder))))
            continue
        if path not in final:
            final.append(path)
    # A directory the layers share goes once everything in it goes (never a system directory).
    changed = True
    while changed:
        changed = False
        for path in empties:
            if path in final or path not in state["paths"] or any(_under(k, path) for k in keep):
                continue
            entries = state["entries"].get(path, [])
            if all(any(_under(e, r) for r in final) for e in entries):
                final.append(path)
                changed = True
    final = [p for p in final if not any(_under(p, q) and p != q for q in final)]
    plan["remove"] = final
    removed += ["path %s" % p for p in final]
    plan["daemon_reload"] = any(_under(p, "/etc/systemd/system") for p in final) or bool(plan["stop"])

    index = 0
    for layer in layers:
        for item in layer["lines"]:
            if index in state["lines"]:
                plan["lines"].append(item)
                removed.append("line %r of %s" % (item["line"], item["path"]))
            index += 1
        for item in layer["tables"]:
            if item["name"] in state["tables"]:
                plan["tables"].append(item["name"])
                removed.append("nftables table inet %s" % item["name"])
        for item in layer["users"]:
            if item["name"] not in state["users"]:
                if item["group"] and item["group"] in state["groups"] and set(item["owns"]) <= kinds:
                    plan["groups"].append(item["group"])
                    removed.append("group %s" % item["group"])
                continue
            if set(item["owns"]) <= kinds:
                plan["users"].append(item["name"])
                removed.append("user %s" % item["name"])
                if item["group"] and item["group"] in state["groups"]:
                    plan["groups"].append(item["group"])
                    removed.append("group %s" % item["group"])
            else:
                kept.append("user %s (owns the kept %s data)" % (item["name"], ", ".join(k for k in item["owns"] if k not in kinds)))
        for item in layer["commands"]:
            if any(a in final or any(_under(a, p) for p in final) for a in item["after"]) \
                    and (not item["if_present"] or item["if_present"] in state["paths"]):
                plan["commands"].append(item["argv"])
                removed.append("ran %s" % " ".join(item["argv"]))
    plan["removed"] = removed
    plan["kept"] = kept
    return plan


class FilterModule(object):
    """The reset playbook's plan."""

    def filters(self):
        return {
            "reset_settings": reset_settings,
            "reset_half_replicas": reset_half_replicas,
            "reset_names": reset_names,
            "reset_layout": reset_layout,
            "reset_plan": reset_plan,
        }
