"""Unit tests for roles/keepalived/files/keepalived-test-config, the validate: command of keepalived.conf:
keepalived -t in a session of its own, and for keepalived before 2.2.8 (whose config test sends SIGTERM
to its own process group when the file has a vrrp_script) the file tested without its script blocks
and the scripts checked apart. keepalived itself is a stand-in here (a shell script that answers -v and
-t like it, and kills its process group on a vrrp_script as the old versions do); the real ones (Debian
12's 2.2.7, Debian 13's 2.3.3) are exercised by the keepalived molecule scenario."""
from __future__ import annotations

import os
import subprocess
import sys
import types

import pytest

SCRIPT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "roles", "keepalived",
                                      "files", "keepalived-test-config"))
# Loaded from its source without a bytecode cache (nothing is written beside the role's files).
tc = types.ModuleType("keepalived_test_config")
with open(SCRIPT, encoding="utf-8") as _fh:
    exec(compile(_fh.read(), SCRIPT, "exec"), tc.__dict__)  # pylint: disable=exec-used

CONF = """# Managed by Ansible {with a brace in a comment
global_defs {
    router_id lb1
    enable_script_security
    script_user %(user)s
}

vrrp_script llmops_nginx {
    script "%(program)s -I %(check)s http://127.0.0.1:80/lb-health 3"
    interval 2
}

vrrp_instance llmops_edge {
    state BACKUP
    interface eth0
    virtual_router_id 51
    priority 150
    virtual_ipaddress {
        10.0.0.100/24 dev eth0
    }
    track_script {
        %(tracked)s
    }
}
"""

# Answers -v with $FAKE_VERSION; -t fails on the word bogus (status 5, keepalived's own words), and on a
# vrrp_script kills its whole process group with SIGTERM when $FAKE_KILLS is 1 (keepalived before 2.2.8).
FAKE = """#!/bin/sh
case "$1" in
  -v) echo "Keepalived v${FAKE_VERSION} (01/16,2022)" >&2; exit 0 ;;
  -t) f=$3
      echo "$f" >> "$FAKE_SEEN"
      if [ "$FAKE_KILLS" = 1 ] && grep -q vrrp_script "$f"; then kill -TERM 0; sleep 5; fi
      if grep -q bogus "$f"; then echo "(Line 3) Unknown keyword 'bogus'" >&2; exit 5; fi
      exit 0 ;;
esac
exit 2
"""


@pytest.fixture()
def world(tmp_path):
    """A stand-in keepalived, a check file and an interpreter in a directory only the running user owns."""
    fake = tmp_path / "keepalived"
    fake.write_text(FAKE)
    fake.chmod(0o755)
    secure = tmp_path / "secure"
    secure.mkdir(mode=0o755)
    check = secure / "keepalived-check-nginx"
    check.write_text("pass\n")
    check.chmod(0o644)
    program = secure / "python3"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    return {"fake": str(fake), "check": str(check), "program": str(program), "dir": tmp_path,
            "seen": str(tmp_path / "seen")}


def conf(world, **over):
    values = {"user": "root", "program": world["program"], "check": world["check"], "tracked": "llmops_nginx"}
    values.update(over)
    path = world["dir"] / "candidate.conf"
    path.write_text(CONF % values)
    return str(path)


def run(world, candidate, version="2.3.3", kills=False):
    """The helper as the role runs it, in a process of its own (so that a stand-in that kills its process
    group could only end that process): (exit status, stderr, the files keepalived -t was given)."""
    code = ("import sys; mod = {'__name__': 't'}; exec(compile(open(%r).read(), 't', 'exec'), mod); "
            "mod['KEEPALIVED'] = %r; mod['ROOT_UID'] = %d; sys.exit(mod['main'](['x', %r]))"
            % (SCRIPT, world["fake"], os.getuid(), candidate))
    env = dict(os.environ, FAKE_VERSION=version, FAKE_KILLS="1" if kills else "0", FAKE_SEEN=world["seen"])
    proc = subprocess.run([sys.executable, "-B", "-c", code], capture_output=True, text=True, env=env, timeout=60,
                          check=False)
    seen = open(world["seen"], encoding="utf-8").read().split() if os.path.exists(world["seen"]) else []
    return proc.returncode, proc.stderr, seen


@pytest.mark.parametrize("text, parsed", [
    ("Keepalived v2.2.7 (01/16,2022)\n\nCopyright(C) 2001-2022", (2, 2, 7)),
    ("Keepalived v2.3.3 (03/30,2025)", (2, 3, 3)),
    ("keepalived: command not found", None),
])
def test_version(text, parsed):
    assert tc.version(text) == parsed


def test_split_scripts_takes_out_every_script_block_and_keeps_the_rest(world):
    text = open(conf(world), encoding="utf-8").read()
    rest, scripts, tracked = tc.split_scripts(text)
    assert list(scripts) == ["llmops_nginx"] and "interval 2" in scripts["llmops_nginx"]
    assert tracked == ["llmops_nginx"]
    assert "vrrp_script" not in rest and "track_script" not in rest and "llmops_nginx" not in rest
    assert "virtual_ipaddress {\n        10.0.0.100/24 dev eth0\n    }" in rest
    plain = tc._uncommented(rest)
    assert plain.count("{") == plain.count("}") and "# Managed by Ansible {with a brace in a comment" in rest


def test_split_scripts_refuses_unbalanced_braces():
    with pytest.raises(ValueError):
        tc.split_scripts("vrrp_script s {\n    script \"/bin/true\"\n")


def test_script_problems_of_a_good_file_are_none(world, monkeypatch):
    monkeypatch.setattr(tc, "ROOT_UID", os.getuid())
    text = open(conf(world), encoding="utf-8").read()
    _rest, scripts, tracked = tc.split_scripts(text)
    assert tc.script_problems(text, scripts, tracked) == []


@pytest.mark.parametrize("over, problem", [
    ({"tracked": "other"}, "track_script names other, which no vrrp_script defines"),
    ({"user": "no_such_user_here"}, "script_user no_such_user_here does not exist"),
    ({"program": "python3"}, "the program 'python3' is not an absolute path"),
    ({"program": "/nonexistent/python3"}, "/nonexistent/python3 is not an executable file"),
])
def test_script_problems_are_named(world, monkeypatch, over, problem):
    monkeypatch.setattr(tc, "ROOT_UID", os.getuid())
    text = open(conf(world, **over), encoding="utf-8").read()
    _rest, scripts, tracked = tc.split_scripts(text)
    found = tc.script_problems(text, scripts, tracked)
    assert any(problem in p for p in found), found


def test_a_script_others_could_change_is_refused(world, monkeypatch):
    monkeypatch.setattr(tc, "ROOT_UID", os.getuid())
    os.chmod(os.path.dirname(world["check"]), 0o777)
    text = open(conf(world), encoding="utf-8").read()
    _rest, scripts, tracked = tc.split_scripts(text)
    found = tc.script_problems(text, scripts, tracked)
    assert any("is writable by group or others" in p for p in found), found


def test_a_fixed_keepalived_tests_the_file_itself(world):
    candidate = conf(world)
    assert run(world, candidate, "2.3.3") == (0, "", [candidate])


def test_a_fixed_keepalived_refusal_is_passed_on(world):
    candidate = conf(world)
    with open(candidate, "a", encoding="utf-8") as fh:
        fh.write("bogus 1\n")
    rc, err, _seen = run(world, candidate, "2.2.8")
    assert rc == 1 and "Unknown keyword 'bogus'" in err, err


def test_an_old_keepalived_tests_the_file_without_its_scripts_and_survives(world):
    candidate = conf(world)
    rc, err, seen = run(world, candidate, "2.2.7", kills=True)
    assert (rc, err) == (0, ""), err
    assert len(seen) == 1 and seen[0] != candidate and not os.path.exists(seen[0]), "the copy is tested, then removed"


def test_an_old_keepalived_still_finds_the_rest_and_the_scripts_problems(world):
    candidate = conf(world, user="no_such_user_here")
    with open(candidate, "a", encoding="utf-8") as fh:
        fh.write("bogus 1\n")
    rc, err, _seen = run(world, candidate, "2.2.7", kills=True)
    assert rc == 1, err
    assert "Unknown keyword 'bogus'" in err and "script_user no_such_user_here does not exist" in err, err
    assert "tested the file without its vrrp_script and track_script blocks" in err, err


def test_a_config_test_ended_by_a_signal_is_a_failure_and_ends_nothing_else(world):
    # A version the helper believes fixed, but whose test kills its process group: only that group ends.
    rc, err, _seen = run(world, conf(world), "2.3.3", kills=True)
    assert rc == 1 and "was ended by a signal" in err, err


def test_usage():
    proc = subprocess.run([sys.executable, "-I", SCRIPT], capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and "usage" in proc.stderr
