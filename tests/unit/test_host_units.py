"""Rendered host units and arguments that cannot run on this machine (no GPU, no Grafana package):
the DCGM exporter's container is on the host's network (no published port, which docker/podman
DNAT through the FORWARD chain, past the firewall role's input-only table), Grafana listens on
loopback, Prometheus gets its web config only with basic auth. Templates rendered by Ansible
itself, with the role's defaults and constants."""
import shutil

import pytest

from ansible_run import render_role_templates  # tests/unit

MONITORING_ROLES = ["monitoring", "monitoring_dcgm", "monitoring_grafana", "monitoring_prometheus"]
MONITORING_TEMPLATES = ("dcgm-exporter.service.j2", "grafana-listen.conf.j2", "prometheus.default.j2")

pytestmark = pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="ansible-playbook not installed")


def render(tmp_path, extra=None):
    return render_role_templates(tmp_path, MONITORING_ROLES, MONITORING_TEMPLATES, extra)


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


VLLM_FACTS = {"vllm_service__is_head": True, "vllm_service__node_rank": 0,
              "vllm_service__env_file": "/etc/vllm/vllm.env", "vllm_service__config_file": "/etc/vllm/config.yaml",
              "vllm_service__ip_allow": ["10.0.0.1", "10.0.0.2", "10.0.0.10", "192.168.100.0/24", "fd00::10"]}


def render_vllm(tmp_path, extra=None):
    return render_role_templates(tmp_path, "vllm_service", ["vllm.service.j2"], dict(VLLM_FACTS, **(extra or {})))["vllm.service.j2"]


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


def test_vllm_unit_restarts_after_a_clean_exit(tmp_path):
    # A head whose worker dies ends with EngineDeadError and exits 0 ("Finished server process"):
    # Restart=on-failure would leave the replica down for good. Only `systemctl stop` keeps it down.
    for facts in ({}, {"vllm_service__is_head": False, "vllm_service__node_rank": 1}):
        unit = render_vllm(tmp_path, facts)
        assert directives(unit, "Restart") == ["always"], directives(unit, "Restart")
        assert int(directives(unit, "RestartSec")[0]) > 0


WATCH_FACTS = {"vllm_service_replica": "r1", "vllm_service__master_addr": "10.89.241.11",
               "vllm_service__head_watch_command": ["/usr/bin/python3", "/usr/local/libexec/llmops/vllm-head-watch",
                                                    "--unit", "vllm", "--user", "vllm", "--master-addr", "10.89.241.11",
                                                    "--master-port", "29501", "--interval", "2", "--failures", "3"]}


def render_watch(tmp_path, extra=None):
    return render_role_templates(tmp_path, "vllm_service", ["vllm-head-watch.service.j2"],
                                 dict(WATCH_FACTS, **(extra or {})))["vllm-head-watch.service.j2"]


def test_head_watch_unit_runs_the_watch_and_reaches_only_the_head(tmp_path):
    unit = render_watch(tmp_path)
    assert directives(unit, "ExecStart") == [" ".join(WATCH_FACTS["vllm_service__head_watch_command"])]
    assert directives(unit, "Restart") == ["always"]
    assert directives(unit, "IPAddressDeny") == ["any"] and directives(unit, "IPAddressAllow") == ["10.89.241.11"]
    assert directives(unit, "CapabilityBoundingSet") == [""] and directives(unit, "NoNewPrivileges") == ["yes"]


def test_head_watch_unit_for_a_head_known_by_name_or_ipv6(tmp_path):
    # a name needs the resolver, which an address filter would cut off; an IPv6 address is filtered
    (tmp_path / "name").mkdir()
    (tmp_path / "six").mkdir()
    by_name = render_watch(tmp_path / "name", {"vllm_service__master_addr": "spark1.example"})
    assert not directives(by_name, "IPAddressDeny") and not directives(by_name, "IPAddressAllow")
    six = render_watch(tmp_path / "six", {"vllm_service__master_addr": "fd00::11"})
    assert directives(six, "IPAddressAllow") == ["fd00::11"]
