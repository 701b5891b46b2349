"""Rendered host units and arguments that cannot run on this machine (no GPU, no Grafana package):
the DCGM exporter's container is on the host's network (no published port, which docker/podman
DNAT through the FORWARD chain, past the firewall role's input-only table), Grafana listens on
loopback, Prometheus gets its web config only with basic auth. Templates rendered by Ansible
itself, with the role's defaults and constants."""
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1].parent
ROLE = ROOT / "roles" / "monitoring"
PLAY = """
- name: Render the monitoring role's templates
  hosts: localhost
  connection: local
  gather_facts: false
  vars_files:
    - {role}/defaults/main.yml
    - {role}/vars/main.yml
  tasks:
    - name: Render
      ansible.builtin.copy:
        content: "{{{{ lookup('ansible.builtin.template', '{role}/templates/' ~ item) }}}}"
        dest: "{{{{ out_dir }}}}/{{{{ item }}}}"
        mode: "0600"
      loop: [dcgm-exporter.service.j2, grafana-listen.conf.j2, prometheus.default.j2]
"""

pytestmark = pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="ansible-playbook not installed")


def render(tmp_path, extra=None):
    (tmp_path / "play.yml").write_text(PLAY.format(role=ROLE), encoding="utf-8")
    extra_vars = {"out_dir": str(tmp_path), "ansible_python_interpreter": sys.executable}
    extra_vars.update(extra or {})
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".cache" / "collections"),
               ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(["ansible-playbook", "-i", "localhost,", str(tmp_path / "play.yml"), "-e", json.dumps(extra_vars)],
                          capture_output=True, text=True, env=env, check=False, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {name: (tmp_path / name).read_text() for name in
            ("dcgm-exporter.service.j2", "grafana-listen.conf.j2", "prometheus.default.j2")}


def exec_start(unit):
    return [line for line in unit.splitlines() if line.startswith("ExecStart=")][0]


@pytest.fixture(scope="module")
def defaults(tmp_path_factory):
    return render(tmp_path_factory.mktemp("defaults"))


@pytest.fixture(scope="module")
def changed(tmp_path_factory):
    return render(tmp_path_factory.mktemp("changed"), {
        "monitoring_dcgm_exporter_container_runtime": "podman", "monitoring_dcgm_exporter_port": 9401,
        "monitoring_prometheus_web_username": "admin", "monitoring_prometheus_listen_address": "0.0.0.0:9090"})


def assert_host_network(line, port):
    args = line.split()
    assert "--network" in args and args[args.index("--network") + 1] == "host", line
    assert "-p" not in args and "--publish" not in args and not any(a.startswith("--publish=") for a in args), line
    # the exporter itself binds the port the firewall protects (firewall_exporter_ports reads it)
    assert args[-2:] == ["--address", ":%d" % port], line


def test_dcgm_exporter_container_on_the_host_network(defaults, changed):
    assert "docker run" in exec_start(defaults["dcgm-exporter.service.j2"])
    assert_host_network(exec_start(defaults["dcgm-exporter.service.j2"]), 9400)
    assert "podman run" in exec_start(changed["dcgm-exporter.service.j2"])
    assert_host_network(exec_start(changed["dcgm-exporter.service.j2"]), 9401)


def test_dcgm_exporter_binary_binds_its_port(tmp_path):
    line = exec_start(render(tmp_path, {"monitoring_dcgm_exporter_method": "binary"})["dcgm-exporter.service.j2"])
    assert "--address :9400" in line, line


def test_grafana_and_prometheus_on_loopback_by_default(defaults):
    assert "Environment=GF_SERVER_HTTP_ADDR=127.0.0.1\n" in defaults["grafana-listen.conf.j2"]
    assert "Environment=GF_SERVER_HTTP_PORT=3000\n" in defaults["grafana-listen.conf.j2"]
    assert "--web.listen-address=127.0.0.1:9090" in defaults["prometheus.default.j2"]
    assert "--web.config.file" not in defaults["prometheus.default.j2"]


def test_prometheus_web_config_only_with_basic_auth(changed):
    assert "--web.config.file=/etc/prometheus/web.yml" in changed["prometheus.default.j2"]


VLLM_PLAY = """
- name: Render the vllm_service role's unit
  hosts: localhost
  connection: local
  gather_facts: false
  vars_files:
    - {role}/defaults/main.yml
    - {role}/vars/main.yml
  tasks:
    - name: Render
      ansible.builtin.copy:
        content: "{{{{ lookup('ansible.builtin.template', '{role}/templates/vllm.service.j2') }}}}"
        dest: "{{{{ out_dir }}}}/vllm.service"
        mode: "0600"
"""
VLLM_FACTS = {"vllm_service__is_head": True, "vllm_service__node_rank": 0,
              "vllm_service__env_file": "/etc/vllm/vllm.env", "vllm_service__config_file": "/etc/vllm/config.yaml",
              "vllm_service__ip_allow": ["10.0.0.1", "10.0.0.2", "10.0.0.10", "192.168.100.0/24", "fd00::10"]}


def render_vllm(tmp_path, extra=None):
    role = ROOT / "roles" / "vllm_service"
    (tmp_path / "play.yml").write_text(VLLM_PLAY.format(role=role), encoding="utf-8")
    extra_vars = dict(VLLM_FACTS, out_dir=str(tmp_path), ansible_python_interpreter=sys.executable)
    extra_vars.update(extra or {})
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".cache" / "collections"),
               ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(["ansible-playbook", "-i", "localhost,", str(tmp_path / "play.yml"), "-e", json.dumps(extra_vars)],
                          capture_output=True, text=True, env=env, check=False, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return (tmp_path / "vllm.service").read_text()


def directives(unit, key):
    return [line.split("=", 1)[1] for line in unit.splitlines() if line.startswith(key + "=")]


def test_vllm_unit_requires_the_firewall_and_filters_addresses(tmp_path):
    unit = render_vllm(tmp_path)
    assert directives(unit, "Requires") == ["llmops-firewall.service"]
    assert "llmops-firewall.service" in directives(unit, "After")[0].split()
    assert directives(unit, "IPAddressDeny") == ["any"]
    assert directives(unit, "IPAddressAllow") == ["localhost"] + VLLM_FACTS["vllm_service__ip_allow"]


def test_vllm_unit_without_the_firewall_layer(tmp_path):
    unit = render_vllm(tmp_path, {"vllm_service_firewall_unit": "", "vllm_service_ip_filter": False})
    assert not directives(unit, "Requires") and "firewall" not in directives(unit, "After")[0]
    assert not directives(unit, "IPAddressDeny") and not directives(unit, "IPAddressAllow")
