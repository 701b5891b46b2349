"""No secret in Ansible's output: `ansible-playbook --diff -vvv` never shows a secret that a role
writes to a file.

A secret is a role variable whose argument spec says `no_log: true` (every option named like a
password, token, key or secret must say so). A task writes one when its module is a file writer
(template, copy, lineinfile, blockinfile) and its arguments, loop, vars or template source
reference the variable. Ansible would show the secret in the diff (template, copy and the others
under --diff) and in the module's arguments (copy's `content`, lineinfile's `line`, blockinfile's
`block` at -vvv), so such a task needs `diff: false` or `no_log: true` (both hide the diff) and,
where the arguments carry the text, `no_log: true`.

The static check covers every role. Where the task can be rendered from the role's defaults and
constants alone, it also runs: the very task (module, arguments, `diff`, `no_log`, `vars`, `loop` as
written; the destination in a temporary directory, owner/group/validate/when/notify dropped) in
check mode with --diff -vvv on localhost, each secret set to a random marker. The marker must
appear nowhere in the output; the same task with `diff: true` and `no_log: false` must show it (so
the check would see a leak, such as the Redis include without its `diff: false`).
"""
import json
import os
import pathlib
import re
import secrets
import shutil
import subprocess
import sys

import jinja2
import pytest
import yaml

from ansible_run import applied_roles  # tests/unit

ROOT = pathlib.Path(__file__).resolve().parents[1].parent
WRITERS = {"template", "copy", "lineinfile", "blockinfile", "file_set"}
# Arguments that carry the written text (shown with the module's arguments at -vvv).
TEXT_ARGS = {"copy": "content", "lineinfile": "line", "blockinfile": "block"}
SECRET_NAME = re.compile(r"(password|passwd|token|secret|api_key|master_key|metrics_key|_keys?$|tenants$)")
# Options whose names look secret but hold none (a path to a file, a switch).
NOT_SECRET = {
    "nginx_lb_tls_key": "the path of the TLS private key file",
    "response_cache_tls_key": "the path of the TLS private key file",
    "vllm_service_model_stage.token_file": "the path of a root-only file holding the token",
    "vllm_service_speculative_stage.token_file": "the path of a root-only file holding the token",
}
# Tasks that also run for real (rendered from defaults and constants alone); the others are
# checked statically (they read facts of a converged host).
RUN = {
    ("response_cache", "Write the Redis settings of the cache (bind, password, memory limit, eviction, persistence)"),
    ("response_cache", "Write the gateway's secrets (read by systemd as root, passed to the service as environment)"),
}


def spec_options(role):
    """{dotted option name: spec} of every entry point of the role's argument spec."""
    path = ROOT / "roles" / role / "meta" / "argument_specs.yml"
    out = {}

    def walk(options, prefix):
        for name, spec in (options or {}).items():
            out[prefix + name] = spec
            walk(spec.get("options"), prefix + name + ".")

    for entry in yaml.safe_load(path.read_text(encoding="utf-8"))["argument_specs"].values():
        walk(entry.get("options"), "")
    return out


ROLES = sorted(p.parent.parent.name for p in ROOT.glob("roles/*/meta/argument_specs.yml"))
SECRETS = {role: sorted(n for n, s in spec_options(role).items() if s.get("no_log") and "." not in n) for role in ROLES}
# A layer's component roles (no main entry point: monitoring_prometheus, monitoring_grafana, ...)
# write with the layer's variables, so the layer's secrets are theirs.
LAYERS = applied_roles()


def owner(role):
    """The role whose variables ROLE reads: itself, or the layer whose component it is."""
    return role if role in LAYERS else max((r for r in LAYERS if role.startswith(r + "_")), key=len, default=role)


def walk(tasks):
    for task in tasks or []:
        for key in ("block", "rescue", "always"):
            if key in task:
                yield from walk(task[key])
        yield task


def identifiers(text):
    """Variables a Jinja text reads; `NAME | length` (a count, no secret) is not a read."""
    names = set()
    text = re.sub(r"[A-Za-z_][A-Za-z0-9_]*\s*\|\s*length\b", "", text)
    for a, b in re.findall(r"\{\{(.*?)\}\}|\{%(.*?)%\}", text, re.S):
        names |= set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", a + b))
    return names


def template_sources(role, src, loop):
    """The template files a task's src names: each loop item's, or every template of the role
    where the loop is an expression (the check errs on the side of a secret)."""
    if "{{" not in src:
        return [src]
    if isinstance(loop, list):
        return [jinja2.Template(src).render(item=item) for item in loop]
    return [p.name for p in (ROOT / "roles" / role / "templates").iterdir()]


def file_set_templates(role, text):
    """The templates a file_set task renders: every template of the role that its arguments or vars
    name (entries built by an expression name theirs too); every template when none is named."""
    templates = ROOT / "roles" / role / "templates"
    every = sorted(p.name for p in templates.iterdir()) if templates.is_dir() else []
    named = [name for name in every if name in text]
    return named or (every if "template" in text else [])


def file_set_content(task, module):
    """Whether a file_set task passes text in an entry's `content` (shown with its arguments at -vvv)."""
    args = task[next(k for k in task if k.endswith(module))] or {}
    entries = args.get("files") if isinstance(args, dict) else None
    return isinstance(entries, list) and any(isinstance(e, dict) and "content" in e for e in entries)


def writers():
    """(role, tasks file, task, module, secrets it writes) for every file writer of every role."""
    out = []
    for path in sorted(ROOT.glob("roles/*/tasks/*.yml")):
        role = path.parts[-3]
        for task in walk(yaml.safe_load(path.read_text(encoding="utf-8"))):
            module = next((k for k in task if k.split(".")[-1] in WRITERS), None)
            if module is None:
                continue
            text = yaml.safe_dump([task[module], task.get("loop"), task.get("vars")])
            args = task[module] if isinstance(task[module], dict) else {}
            if module.endswith("template"):
                sources = template_sources(role, args.get("src"), task.get("loop"))
                for src in sources:
                    text += (ROOT / "roles" / role / "templates" / src).read_text(encoding="utf-8")
            elif module.endswith("file_set"):
                for src in file_set_templates(role, text):
                    text += (ROOT / "roles" / role / "templates" / src).read_text(encoding="utf-8")
            used = sorted(identifiers(text) & set(SECRETS.get(owner(role), [])))
            out.append((role, path.name, task, module.split(".")[-1], used))
    return out


WRITERS_FOUND = writers()
SECRET_WRITERS = [w for w in WRITERS_FOUND if w[4]]


def test_the_search_finds_the_known_secret_writers():
    """The search itself works: the files known to hold secrets are among those found."""
    found = {(w[0], w[2].get("name")) for w in SECRET_WRITERS}
    assert RUN <= found, sorted(found)
    assert {"nginx_lb", "vllm_service", "monitoring"} <= {owner(w[0]) for w in SECRET_WRITERS}, sorted(found)
    # The environment file and the edge keys are written by file_set.
    assert {("vllm_service", "file_set"), ("nginx_lb", "file_set")} <= {(w[0], w[3]) for w in SECRET_WRITERS}, sorted(found)
    assert {"monitoring_prometheus", "monitoring_grafana"} <= {w[0] for w in SECRET_WRITERS}, sorted(found)


@pytest.mark.parametrize("role", ROLES)
def test_every_option_named_like_a_secret_is_no_log(role):
    loose = [name for name, spec in spec_options(role).items()
             if SECRET_NAME.search(name.rsplit(".", 1)[-1]) and not spec.get("no_log") and name not in NOT_SECRET
             and spec.get("type") not in ("bool", "int")]
    assert not loose, f"{role}: options named like secrets without no_log: true in meta/argument_specs.yml: {loose}"


@pytest.mark.parametrize("writer", SECRET_WRITERS, ids=lambda w: f"{w[0]}/{w[1]}: {w[2].get('name')}")
def test_a_task_writing_a_secret_hides_it_from_diff_and_arguments(writer):
    role, filename, task, module, used = writer
    # A no_log given as an expression is the condition under which the file holds the secret
    # (monitoring's Grafana datasource holds the Prometheus password only with a username).
    no_log = task.get("no_log") is True or "{{" in str(task.get("no_log"))
    assert no_log or task.get("diff") is False, (f"{role}/tasks/{filename}: '{task.get('name')}' writes {used} and "
                                                 "would show it under --diff: it needs `diff: false` (or `no_log: true`)")
    if module == "file_set" and file_set_content(task, module):
        assert no_log, (f"{role}/tasks/{filename}: '{task.get('name')}' carries {used} in an entry's `content`, "
                        "shown at -vvv: it needs `no_log: true`")
    if module in TEXT_ARGS and TEXT_ARGS[module] in (task[next(k for k in task if k.endswith(module))] or {}):
        assert no_log, (f"{role}/tasks/{filename}: '{task.get('name')}' carries {used} in its "
                        f"`{TEXT_ARGS[module]}` argument, shown at -vvv: it needs `no_log: true`")


def play_for(role, task, module, tmp_path, hide):
    """The role's task as written, writing into tmp_path; hide=False forces diff on and no_log off."""
    key = next(k for k in task if k.split(".")[-1] == module)
    args = dict(task[key])
    for name in ("owner", "group", "validate", "backup"):
        args.pop(name, None)
    for name in ("dest", "path"):
        if name in args:
            args[name] = str(tmp_path / "out" / ("file-{{ ansible_loop.index }}" if "loop" in task else "file"))
            if module in ("lineinfile", "blockinfile"):
                args["create"] = True
    if module == "template":
        src = args["src"]
        args["src"] = str(ROOT / "roles" / role / "templates") + "/" + src
    new = {"name": task.get("name"), "ansible.builtin." + module: args}
    for name in ("vars", "loop", "loop_control"):
        if name in task:
            new[name] = task[name]
    if "loop" in task:
        new.setdefault("loop_control", {})["extended"] = True
    if hide:
        for name in ("diff", "no_log"):
            if name in task:
                new[name] = task[name]
    else:
        new["diff"] = True
        new["no_log"] = False
    return [{
        "name": "A secret-writing task of " + role, "hosts": "localhost", "connection": "local", "gather_facts": False,
        "vars_files": [str(ROOT / "roles" / role / "defaults" / "main.yml"), str(ROOT / "roles" / role / "vars" / "main.yml")],
        "tasks": [{"name": "Directory", "ansible.builtin.file": {"path": str(tmp_path / "out"), "state": "directory",
                                                                 "mode": "0700"}}, new],
    }]


def run(play, tmp_path, markers):
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False), encoding="utf-8")
    (tmp_path / "vars.json").write_text(json.dumps(markers), encoding="utf-8")
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".cache" / "collections"),
               ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="0")
    proc = subprocess.run(["ansible-playbook", "-i", "localhost,", str(tmp_path / "play.yml"), "--check", "--diff", "-vvv",
                           "-e", "@" + str(tmp_path / "vars.json"), "-e", "ansible_python_interpreter=" + sys.executable],
                          capture_output=True, text=True, env=env, check=False, timeout=300)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    return output


def markers_for(role):
    """A random marker per secret of the role, in the shape its spec asks for."""
    specs, out = spec_options(role), {}
    for name in SECRETS[role]:
        marker = "leakmarker" + secrets.token_hex(12)
        spec = specs[name]
        if spec.get("type") == "list" and spec.get("elements") == "dict":
            out[name] = [{"name": "tenant-a", "key": marker}]
        elif spec.get("type") == "list":
            out[name] = [marker]
        else:
            out[name] = marker
    return out


def marker_values(markers):
    found = []
    for value in markers.values():
        found += re.findall(r"leakmarker[0-9a-f]{24}", json.dumps(value))
    return found


@pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="ansible-playbook not installed")
@pytest.mark.parametrize("writer", [w for w in SECRET_WRITERS if (w[0], w[2].get("name")) in RUN],
                         ids=lambda w: f"{w[0]}: {w[2].get('name')}")
def test_check_diff_vvv_shows_no_secret(writer, tmp_path):
    role, _filename, task, module, used = writer
    markers = markers_for(role)
    watched = [m for name in used for m in marker_values({name: markers[name]})]
    shown = run(play_for(role, task, module, tmp_path, hide=False), tmp_path, markers)
    assert all(m in shown for m in watched), f"the control run (diff on, no_log off) shows none of {used}: the check could not see a leak"
    hidden = run(play_for(role, task, module, tmp_path, hide=True), tmp_path, markers)
    assert "changed" in hidden or "ok:" in hidden, hidden[-2000:]
    leaked = [name for name in used for m in marker_values({name: markers[name]}) if m in hidden]
    assert not leaked, f"'{task.get('name')}' shows {leaked} under --check --diff -vvv"
