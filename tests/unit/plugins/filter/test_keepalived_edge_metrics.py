"""Unit tests for roles/keepalived/files/keepalived-edge-metrics (the pair's state for the node
exporter's textfile collector): its parser on `ip -o addr show` output as iproute2 prints it on a
balancer that holds the virtual address (a secondary address of eth0), and the whole script run as the
timer runs it (python3 -I), with a stand-in track check, into a temporary directory."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import types

import pytest

SCRIPT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "roles", "keepalived",
                                      "files", "keepalived-edge-metrics"))
metrics = types.ModuleType("keepalived_edge_metrics")
with open(SCRIPT, encoding="utf-8") as _fh:
    exec(compile(_fh.read(), SCRIPT, "exec"), metrics.__dict__)  # pylint: disable=exec-used

# iproute2's one-line form on a balancer holding 10.89.218.254/24 (keepalived adds it as secondary).
IP_HOLDER = """\
1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever
1: lo    inet6 ::1/128 scope host noprefixroute \\       valid_lft forever preferred_lft forever
2: eth0    inet 10.89.218.10/24 brd 10.89.218.255 scope global eth0\\       valid_lft forever preferred_lft forever
2: eth0    inet 10.89.218.254/24 scope global secondary eth0\\       valid_lft forever preferred_lft forever
2: eth0    inet6 fd00:89::254/64 scope global nodad \\       valid_lft forever preferred_lft forever
2: eth0    inet6 fe80::6c:aff:fe59:da0a/64 scope link \\       valid_lft forever preferred_lft forever
"""
IP_BACKUP = "\n".join(line for line in IP_HOLDER.splitlines() if "254" not in line)


def test_parser_finds_the_virtual_address_on_the_holder_only():
    held = metrics.held_addresses(IP_HOLDER)
    assert "10.89.218.254" in held and "10.89.218.10" in held and "fd00:89::254" in held
    assert "10.89.218.254" not in metrics.held_addresses(IP_BACKUP)
    # A prefix or broadcast address is not an address of the host.
    assert "10.89.218.255" not in held and "10.89.218.254/24" not in held
    assert metrics.held_addresses("") == set()


def test_render_labels_every_series_with_the_address():
    text = metrics.render(["10.89.218.254", "fd00:89::254"], metrics.held_addresses(IP_HOLDER), True, False, 2)
    assert 'llmops_keepalived_vip_held{address="10.89.218.254"} 1' in text
    assert 'llmops_keepalived_vip_held{address="fd00:89::254"} 1' in text
    assert 'llmops_keepalived_up{address="10.89.218.254"} 1' in text
    assert 'llmops_keepalived_check_ok{address="10.89.218.254"} 0' in text
    assert 'llmops_keepalived_members{address="10.89.218.254"} 2' in text
    backup = metrics.render(["10.89.218.254"], metrics.held_addresses(IP_BACKUP), False, True, 2)
    assert 'llmops_keepalived_vip_held{address="10.89.218.254"} 0' in backup
    assert 'llmops_keepalived_up{address="10.89.218.254"} 0' in backup


def test_script_writes_the_file_whole(tmp_path):
    check = tmp_path / "check"
    check.write_text("import sys\nsys.exit(0 if sys.argv[1] == 'http://ok' else 1)\n", encoding="utf-8")
    out = tmp_path / "llmops_keepalived.prom"
    for url, ok in (("http://ok", 1), ("http://down", 0), ("http://ok,http://ok", 1), ("http://ok,http://down", 0)):
        res = subprocess.run([sys.executable, "-I", SCRIPT, str(out), "2", str(check), url, "192.0.2.254"],
                             capture_output=True, text=True, check=False)
        assert res.returncode == 0, res.stderr
        text = out.read_text(encoding="ascii")
        assert 'llmops_keepalived_check_ok{address="192.0.2.254"} %d' % ok in text
        assert 'llmops_keepalived_vip_held{address="192.0.2.254"} 0' in text
        assert not (tmp_path / "llmops_keepalived.prom.tmp").exists()
    assert oct(out.stat().st_mode & 0o777) == "0o644"


def test_script_refuses_missing_arguments(tmp_path):
    res = subprocess.run([sys.executable, "-I", SCRIPT, str(tmp_path / "x.prom"), "two"], capture_output=True,
                         text=True, check=False)
    assert res.returncode == 2 and "usage" in res.stderr


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/usr/bin/python3"),
                    reason="switching to another user needs root, and an interpreter any user may run")
def test_the_checks_run_as_keepalived_check_user(tmp_path):
    # A stand-in check that passes only when it does not run as root, in a directory any user may read.
    shared = tempfile.mkdtemp(prefix="edge-metrics-")
    try:
        os.chmod(shared, 0o755)
        check = os.path.join(shared, "check")
        with open(check, "w", encoding="utf-8") as fh:
            fh.write("import os, sys\nsys.exit(0 if os.getuid() != 0 else 1)\n")
        os.chmod(check, 0o644)
        out = tmp_path / "m.prom"
        for user, ok in (("", 0), ("nobody", 1)):
            env = dict(os.environ, KEEPALIVED_CHECK_USER=user)
            # The distribution's interpreter, as on a balancer (this venv's may sit in root's home).
            res = subprocess.run(["/usr/bin/python3", "-I", SCRIPT, str(out), "2", check, "http://x", "192.0.2.254"],
                                 capture_output=True, text=True, check=False, env=env)
            assert res.returncode == 0, res.stderr
            assert 'llmops_keepalived_check_ok{address="192.0.2.254"} %d' % ok in out.read_text(encoding="ascii")
    finally:
        shutil.rmtree(shared)
