"""file_set end to end: the action plugin and the module through ansible-playbook on this machine
(local connection, files under pytest's temporary directory), so templating, check mode, diff,
validation and the module's writes all run for real.

Classes of input: every state, each content source, unchanged content with wrong attributes, a
failing check in a set of several changed files (nothing of the set replaced), check mode, backups,
and the refusals (relative or missing dest, two sources, unknown state, a directory where a file
goes, removing a directory, a duplicate key, a validate without %s, vars on a non-template).
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
from ansible_run import ansible_env  # noqa: E402

TEMPLATE = "{{ ansible_managed | comment }}\nvalue={{ value }} unit={{ unit | default('none') }}\n"


@pytest.fixture()
def role(tmp_path):
    """A play directory with one role whose tasks are the test's file_set task."""
    base = tmp_path / "play"
    for sub in ("templates", "files", "tasks"):
        (base / "roles" / "r" / sub).mkdir(parents=True)
    (base / "roles" / "r" / "templates" / "a.conf.j2").write_text(TEMPLATE)
    (base / "roles" / "r" / "files" / "helper").write_text("#!/bin/sh\necho helper\n")
    (base / "play.yml").write_text("- hosts: localhost\n  connection: local\n  gather_facts: false\n  roles: [r]\n")
    return base


def run(role, files, *args, extra=None):
    """Call file_set with FILES in a playbook on localhost; give back (rc, the task's result, its output)."""
    task = [{"name": "Set", "llmops.vllm_cluster.file_set": {"files": files}, "register": "r"}]
    (role / "roles" / "r" / "tasks" / "main.yml").write_text(json.dumps(task))
    env = dict(ansible_env(), ANSIBLE_STDOUT_CALLBACK="ansible.posix.json")
    cmd = ["ansible-playbook", "-i", "localhost,", str(role / "play.yml"), "-e", json.dumps(extra or {"value": 1}),
           "-e", "ansible_python_interpreter=" + sys.executable, *args]
    proc = subprocess.run(cmd, cwd=str(role), env=env, capture_output=True, text=True, check=False)
    try:
        doc = json.loads(proc.stdout)
        result = doc["plays"][0]["tasks"][0]["hosts"]["localhost"]
    except (ValueError, KeyError, IndexError):
        result = {}
    return proc.returncode, result, proc.stdout + proc.stderr


def mode(path):
    return oct(os.stat(path).st_mode & 0o7777)


def test_every_source_and_state_then_no_change(role, tmp_path):
    out = tmp_path / "out"
    (tmp_path / "gone").write_text("x")
    files = [
        {"dest": str(out / "d"), "state": "directory", "mode": "0750"},
        {"key": "a", "dest": str(out / "d" / "a.conf"), "template": "a.conf.j2", "mode": "0640"},
        {"key": "u", "dest": str(out / "d" / "u.conf"), "template": "a.conf.j2", "vars": {"unit": "x.service"}, "mode": "0644"},
        {"key": "h", "dest": str(out / "d" / "helper"), "src": "helper", "mode": "0755"},
        {"key": "c", "dest": str(out / "d" / "c"), "content": "hello\n", "mode": "0600"},
        {"key": "gone", "dest": str(tmp_path / "gone"), "state": "absent", "template": "not-read.j2"},
    ]
    rc, res, log = run(role, files)
    assert rc == 0, log
    assert res["changed_keys"] == [str(out / "d"), "a", "u", "h", "c", "gone"]
    text = (out / "d" / "a.conf").read_text()
    assert text.startswith("#\n# Ansible managed\n#\n") and "value=1 unit=none" in text
    assert "unit=x.service" in (out / "d" / "u.conf").read_text()
    assert (out / "d" / "helper").read_text() == "#!/bin/sh\necho helper\n"
    assert mode(out / "d") == "0o750" and mode(out / "d" / "a.conf") == "0o640" and mode(out / "d" / "c") == "0o600"
    assert not (tmp_path / "gone").exists()
    # No temporary file is left beside the destinations.
    assert sorted(p.name for p in (out / "d").iterdir()) == ["a.conf", "c", "helper", "u.conf"]

    rc, res, log = run(role, files)
    assert rc == 0 and res["changed"] is False and res["changed_keys"] == [], log


def test_unchanged_content_with_wrong_mode_is_corrected(role, tmp_path):
    dest = tmp_path / "c"
    dest.write_text("same\n")
    os.chmod(dest, 0o666)
    rc, res, log = run(role, [{"key": "c", "dest": str(dest), "content": "same\n", "mode": "0600"}])
    assert rc == 0 and res["changed_keys"] == ["c"], log
    assert mode(dest) == "0o600"


def test_a_failed_check_replaces_nothing_of_the_set(role, tmp_path):
    first, second = tmp_path / "first.conf", tmp_path / "second.conf"
    first.write_text("old first\n")
    second.write_text("old second\n")
    files = [
        {"key": "first", "dest": str(first), "content": "new first\n", "mode": "0644", "validate": "true %s"},
        {"key": "second", "dest": str(second), "content": "new second\n", "mode": "0644",
         "validate": "sh -c 'echo refused by the check >&2; exit 3' sh %s"},
    ]
    rc, res, log = run(role, files)
    assert rc != 0
    assert "second" in res["msg"] and "refused by the check" in res["msg"] and res["rc"] == 3, log
    assert first.read_text() == "old first\n" and second.read_text() == "old second\n"
    # Nothing was staged in the destination's directory.
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["first.conf", "second.conf", "play"])


def test_the_check_sees_the_new_content(role, tmp_path):
    dest = tmp_path / "x.conf"
    files = [{"dest": str(dest), "content": "good\n", "mode": "0644", "validate": "grep -qx good %s"}]
    rc, res, log = run(role, files)
    assert rc == 0 and dest.read_text() == "good\n", log
    files[0]["content"] = "bad\n"
    rc, res, log = run(role, files)
    assert rc != 0 and dest.read_text() == "good\n", log


def test_the_check_gets_the_destination_name_outside_its_directory(role, tmp_path):
    """A check may read the extension (vLLM's parser wants .yaml); the candidate sits in a private
    directory, so a glob of the destination's directory (nginx's *.conf) does not see it."""
    dest = tmp_path / "config.yaml"
    check = ("sh -c 'case $1 in */config.yaml) ;; *) exit 1;; esac; "
             "[ $(dirname $1) != %s ] && ls %s | grep -vqx config.yaml; [ $? -eq 1 ] || true' sh %%s" % (tmp_path, tmp_path))
    rc, res, log = run(role, [{"dest": str(dest), "content": "a: 1\n", "mode": "0644", "validate": check}])
    assert rc == 0 and dest.read_text() == "a: 1\n", log
    rc, res, log = run(role, [{"dest": str(tmp_path / "config.yml.new"), "content": "x", "mode": "0644",
                               "validate": "sh -c 'case $1 in *.yaml) ;; *) exit 1;; esac' sh %s"}])
    assert rc != 0, log


def test_check_mode_writes_nothing_and_diff_shows_the_change(role, tmp_path):
    dest = tmp_path / "a.conf"
    dest.write_text("old\n")
    files = [
        {"dest": str(tmp_path / "newdir"), "state": "directory", "mode": "0755"},
        {"key": "a", "dest": str(dest), "content": "new\n", "mode": "0644"},
        {"key": "n", "dest": str(tmp_path / "newdir" / "n"), "content": "n\n", "mode": "0644"},
    ]
    rc, res, log = run(role, files, "--check", "--diff")
    assert rc == 0 and res["changed_keys"] == [str(tmp_path / "newdir"), "a", "n"], log
    assert dest.read_text() == "old\n" and not (tmp_path / "newdir").exists()
    diffs = {d["after_header"]: d for d in res["diff"]}
    assert diffs["a"]["before"] == "old\n" and diffs["a"]["after"] == "new\n"


def test_backup_keeps_the_replaced_file(role, tmp_path):
    dest = tmp_path / "a.conf"
    dest.write_text("old\n")
    rc, res, log = run(role, [{"key": "a", "dest": str(dest), "content": "new\n", "mode": "0644", "backup": True}])
    assert rc == 0, log
    backup = res["files"]["a"]["backup_file"]
    assert pathlib.Path(backup).read_text() == "old\n" and dest.read_text() == "new\n"
    assert res["files"]["a"]["mode"] == "0644"


@pytest.mark.parametrize("item, message", [
    ({"dest": "relative/path", "content": "x"}, "dest must be an absolute path"),
    ({"content": "x"}, "dest must be an absolute path"),
    ({"dest": "/tmp/x", "content": "x", "src": "helper"}, "exactly one of template, src and content"),
    ({"dest": "/tmp/x"}, "exactly one of template, src and content (got none)"),
    ({"dest": "/tmp/x", "state": "link"}, "state must be one of file, directory, absent"),
    ({"dest": "/tmp/x", "state": "directory", "content": "x"}, "state=directory takes none"),
    ({"dest": "/tmp/x", "content": "x", "vars": {"a": 1}}, "vars is for a template entry"),
    ({"dest": "/tmp/x", "template": "a.conf.j2", "vars": "a=1"}, "vars must be a dict"),
    ({"dest": "/tmp/x", "template": "no-such.j2"}, "no-such.j2"),
    ({"dest": "/tmp/x", "src": "no-such-file"}, "no-such-file"),
    ({"dest": "/tmp/x", "content": "x", "validate": "true"}, "validate must contain %s"),
])
def test_refusals_name_the_entry(role, item, message):
    rc, res, log = run(role, [item])
    assert rc != 0 and message in res.get("msg", ""), log


def test_duplicate_keys_are_refused(role, tmp_path):
    files = [{"key": "k", "dest": str(tmp_path / "a"), "content": "a"}, {"key": "k", "dest": str(tmp_path / "b"), "content": "b"}]
    rc, res, log = run(role, files)
    assert rc != 0 and "key 'k' is used twice" in res["msg"], log
    assert not (tmp_path / "a").exists()


def test_a_directory_in_the_way_and_removing_a_directory_are_refused(role, tmp_path):
    (tmp_path / "dir").mkdir()
    rc, res, log = run(role, [{"dest": str(tmp_path / "dir"), "content": "x"}])
    assert rc != 0 and "is a directory" in res["msg"], log
    rc, res, log = run(role, [{"dest": str(tmp_path / "dir"), "state": "absent"}])
    assert rc != 0 and "removes only files and links" in res["msg"], log
    assert (tmp_path / "dir").is_dir()
    (tmp_path / "file").write_text("x")
    rc, res, log = run(role, [{"dest": str(tmp_path / "file"), "state": "directory"}])
    assert rc != 0 and "is not a directory" in res["msg"], log


def test_a_file_in_a_missing_directory_names_it(role, tmp_path):
    rc, res, log = run(role, [{"dest": str(tmp_path / "missing" / "f"), "content": "x"}])
    assert rc != 0 and "does not exist (list it first with state=directory)" in res["msg"], log


def test_the_module_alone_refuses_controller_options(tmp_path):
    """Called without the action (template/src/vars need the controller), it says so."""
    from ansible_collections.llmops.vllm_cluster.plugins.modules import file_set
    items = [dict(key=None, dest="/tmp/x", state="file", template="a.j2", src=None, vars=None, content=None,
                  owner=None, group=None, mode=None, backup=False, validate=None)]
    errors = file_set.check_items(items)
    assert any("read by the action plugin" in e for e in errors)
    assert any("a file needs content" in e for e in errors)


def test_example_in_the_docs_is_valid_yaml():
    import yaml
    from ansible_collections.llmops.vllm_cluster.plugins.modules import file_set
    tasks = yaml.safe_load(textwrap.dedent(file_set.EXAMPLES))
    assert tasks[0]["llmops.vllm_cluster.file_set"]["files"][1]["key"] == "config"
