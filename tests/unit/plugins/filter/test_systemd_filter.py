"""plugins/filter/systemd.py (systemd_probe) on a real capture, and plugins/filter/file_set.py
(systemd_dropin_files) on every class of unit and file name."""
from __future__ import annotations

import os

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.vllm_cluster.plugins.filter import file_set, systemd

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "systemd")
ASKED = ["gdm3.service", "lightdm.service", "sshd.service", "ssh.service", "llmops-firewall.service",
         "lxdm.service", "systemd-journald.service"]


def capture():
    with open(os.path.join(FIX, "probe-debian12.txt"), encoding="utf-8") as handle:
        return handle.read()


def test_probe_reads_every_unit_state_of_the_capture():
    state = systemd.systemd_probe(capture(), ASKED)
    assert state["manager"] == "systemd" and state["default_target"] == "multi-user.target"
    units = state["units"]
    assert units["gdm3"] == {"id": "gdm3.service", "load": "not-found", "file_state": "", "present": False, "alias": False}
    assert units["sshd"]["alias"] is True and units["sshd"]["present"] is True
    assert units["ssh"]["alias"] is False and units["ssh"]["file_state"] == "enabled"
    assert units["lxdm"]["load"] == "masked" and units["lxdm"]["file_state"] == "masked" and units["lxdm"]["present"]
    assert units["systemd-journald"]["file_state"] == "static"


def test_probe_on_a_host_without_systemd():
    assert systemd.systemd_probe("manager=other\n", ["gdm3.service"]) == {"manager": "other", "default_target": "", "gui": [], "units": {}}


def test_probe_with_no_unit_asked():
    assert systemd.systemd_probe("manager=systemd\ndefault=graphical.target\n", [])["default_target"] == "graphical.target"


@pytest.mark.parametrize("text, names, message", [
    ("", [], "names no service manager"),
    ("manager=systemd\ndefault=multi-user.target\n", ["gdm3"], "1 units asked, 0 answered"),
    ("manager=systemd\nsomething odd\n", [], "unexpected line"),
    (None, [], "expected the probe's output"),
])
def test_probe_refuses_output_it_cannot_read(text, names, message):
    with pytest.raises(AnsibleFilterError, match=message):
        systemd.systemd_probe(text, names)


def test_dropin_entries():
    out = file_set.systemd_dropin_files(["prometheus", "mtail.service"], "llmops-hardening.conf", "h.conf.j2")
    assert out[0] == {"dest": "/etc/systemd/system/prometheus.service.d", "state": "directory",
                      "owner": "root", "group": "root", "mode": "0755"}
    assert out[1]["key"] == "prometheus" and out[1]["vars"] == {"unit": "prometheus"} and out[1]["state"] == "file"
    assert out[1]["dest"] == "/etc/systemd/system/prometheus.service.d/llmops-hardening.conf"
    assert out[2]["dest"] == "/etc/systemd/system/mtail.service.d"
    removed = file_set.systemd_dropin_files(["prometheus"], "x.conf", "h.conf.j2", present=False)
    assert removed[1]["state"] == "absent"
    assert file_set.systemd_dropin_files([], "x.conf", "t.j2") == []


@pytest.mark.parametrize("unit", ["../etc", "a/b", "..", ".hidden", "x\n", "x y", "", "unit;rm", "a..b", 5])
def test_dropin_refuses_unit_names_that_leave_the_directory(unit):
    with pytest.raises(AnsibleFilterError, match="not a systemd unit name"):
        file_set.systemd_dropin_files([unit], "x.conf", "t.j2")


@pytest.mark.parametrize("name", ["../x.conf", "a/b.conf", ".conf", "x.txt", "x.conf\n", "", None])
def test_dropin_refuses_file_names(name):
    with pytest.raises(AnsibleFilterError, match="not a drop-in file name"):
        file_set.systemd_dropin_files(["u"], name, "t.j2")


def test_dropin_refuses_a_non_list():
    with pytest.raises(AnsibleFilterError, match="units must be a list"):
        file_set.systemd_dropin_files("prometheus", "x.conf", "t.j2")


def test_probe_reads_the_gui_processes():
    text = "manager=systemd\ndefault=graphical.target\ngui=1234,5678\n"
    assert systemd.systemd_probe(text, [])["gui"] == ["1234", "5678"]
    assert systemd.systemd_probe("manager=systemd\ndefault=x\ngui=\n", [])["gui"] == []
    assert systemd.systemd_probe("manager=systemd\ndefault=x\n", [])["gui"] == []


def test_directory_entries():
    assert file_set.file_set_directories(["/srv/models/a"], "root", "root", "0755") == [
        {"dest": "/srv/models/a", "state": "directory", "owner": "root", "group": "root", "mode": "0755"}]
    assert file_set.file_set_directories([]) == []


@pytest.mark.parametrize("path", ["relative/x", "/srv/../etc", "/srv/x\n", "", None, ".."])
def test_directory_entries_refuse_paths(path):
    with pytest.raises(AnsibleFilterError):
        file_set.file_set_directories([path])
