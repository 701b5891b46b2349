"""Unit tests for plugins/filter/firewall.py (the firewall role's validation and address sets)."""
from __future__ import annotations

import importlib.util
import os

import pytest

_PATH = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "plugins", "filter", "firewall.py")
_spec = importlib.util.spec_from_file_location("llmops_firewall_filter", os.path.abspath(_PATH))
fw = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fw)


def test_valid_ports_have_no_errors():
    assert fw.firewall_port_errors([1, 8000, "9100", 65535], "p") == []
    assert fw.firewall_port_errors(8000, "vllm_service_api.port") == []
    assert fw.firewall_port_errors(None, "p") == []


@pytest.mark.parametrize("ports, message", [
    ([0], "p[0]: '0' is not a port number"),
    ([80, 65536], "p[1]: '65536' is not a port number"),
    (["http"], "p[0]: 'http' is not a port number"),
    ([True], "p[0]: 'True' is not a port number"),
    ([-1], "p[0]: '-1' is not a port number"),
])
def test_bad_ports_are_named(ports, message):
    errors = fw.firewall_port_errors(ports, "p")
    assert len(errors) == 1 and errors[0].startswith(message), errors


def test_single_bad_port_names_the_variable_without_index():
    assert fw.firewall_port_errors("abc", "vllm_service_api.port") == [
        "vllm_service_api.port: 'abc' is not a port number (an integer 1..65535)"]


def test_valid_cidrs_have_no_errors():
    assert fw.firewall_cidr_errors(["10.0.0.7", "10.0.0.0/24", "0.0.0.0/0", "::/0", "2001:db8::/32", "fe80::1"], "c") == []


@pytest.mark.parametrize("value, reason", [
    ("10.0.0.5/24", "has host bits set"),
    ("10.0.0.300", "does not appear to be an IPv4 or IPv6"),
    ("10.0.0.0/33", "10.0.0.0/33"),
    ("10.0.0.0/x", "prefix 'x' is not a number"),
    ("lb1", "does not appear to be an IPv4 or IPv6"),
    ("", "must be an IPv4/IPv6 address or network"),
    (8000, "must be an IPv4/IPv6 address or network"),
])
def test_bad_cidrs_are_named(value, reason):
    errors = fw.firewall_cidr_errors(["10.0.0.0/8", value], "firewall_allowed_cidrs")
    assert len(errors) == 1, errors
    assert errors[0].startswith("firewall_allowed_cidrs[1]: '%s'" % value), errors
    assert reason in errors[0], errors


def test_cidrs_must_be_a_list():
    assert "must be a list" in fw.firewall_cidr_errors("10.0.0.0/24", "c")[0]


def test_split_collapses_and_skips_names():
    out = fw.firewall_split(["10.0.0.1", "10.0.0.0/24", "10.0.1.0/24", "lb1", "", "fe80::1%eth0", "2001:db8::/32", None])
    assert out == {"v4": ["10.0.0.0/23"], "v6": ["2001:db8::/32", "fe80::1"]}
    assert fw.firewall_split([]) == {"v4": [], "v6": []}


def svc(name="engine_api", ports=(8000,), hosts=("lb1",), cidrs=(), protocol="tcp", origin=None):
    return {"name": name, "protocol": protocol, "ports": list(ports), "hosts": list(hosts), "cidrs": list(cidrs),
            "origin": origin or name}


def test_plan_resolves_hosts_and_cidrs():
    plan = fw.firewall_plan([svc(hosts=["lb1", "mon1"], cidrs=["192.168.0.0/16"]), svc("exporters", [9100, 9400], ["mon1"])],
                            {"lb1": ["10.0.0.10", "lb1.example"], "mon1": ["10.0.0.11", "2001:db8::11"]})
    assert plan["errors"] == []
    api, exporters = plan["services"]
    assert api["v4"] == ["10.0.0.10/31", "192.168.0.0/16"]  # adjacent addresses collapse and api["v6"] == ["2001:db8::11"]
    assert exporters["ports"] == [9100, 9400] and exporters["v4"] == ["10.0.0.11"]


def test_plan_allows_an_empty_source_list():
    # no balancer and no monitoring host: only loopback reaches the port
    plan = fw.firewall_plan([svc(hosts=[])], {})
    assert plan["errors"] == [] and plan["services"][0]["v4"] == [] and plan["services"][0]["v6"] == []


@pytest.mark.parametrize("services, addresses, message", [
    ([svc(hosts=["lb1"])], {"lb1": ["lb1.example"]}, "no address is known for source host 'lb1'"),
    ([svc(), svc("exporters", [8000], [], origin="firewall_exporter_ports")], {"lb1": ["10.0.0.10"]},
     "firewall_exporter_ports: tcp port 8000 is already protected by engine_api"),
    ([svc("Bad-Name")], {"lb1": ["10.0.0.10"]}, "service name 'Bad-Name' must match"),
    ([svc(), svc()], {"lb1": ["10.0.0.10"]}, "service name 'engine_api' is used twice"),
    ([svc(protocol="sctp")], {"lb1": ["10.0.0.10"]}, "protocol 'sctp' must be one of tcp, udp"),
    ([svc(ports=[])], {"lb1": ["10.0.0.10"]}, "no ports to protect"),
    ([svc(ports=[70000], origin="firewall_extra_services[0]")], {"lb1": ["10.0.0.10"]},
     "firewall_extra_services[0].ports[0]: '70000' is not a port number"),
])
def test_plan_errors_name_the_variable(services, addresses, message):
    plan = fw.firewall_plan(services, addresses)
    assert any(message in e for e in plan["errors"]), plan["errors"]


def test_same_port_on_tcp_and_udp_is_two_services():
    plan = fw.firewall_plan([svc(), svc("dns", [8000], [], protocol="udp")], {"lb1": ["10.0.0.10"]})
    assert plan["errors"] == []


PLAN = [{"name": "engine_api", "v4": ["10.0.0.10", "10.8.0.0/24"], "v6": ["fd00::10"]},
        {"name": "engine_distributed", "v4": ["10.0.0.2", "192.168.100.12"], "v6": []},
        {"name": "exporters", "v4": ["10.0.0.9"], "v6": []}]


def test_ip_allow_takes_the_named_services_and_extra_sources_collapsed():
    allow = fw.firewall_ip_allow(PLAN, ["engine_api", "engine_distributed"],
                                 [{"v4": ["192.168.100.12", "10.0.0.1"], "v6": ["fe80::1"]}, ["10.8.0.7"], []])
    assert allow == ["10.0.0.1", "10.0.0.2", "10.0.0.10", "10.8.0.0/24", "192.168.100.12", "fd00::10", "fe80::1"]
    assert "10.0.0.9" not in allow  # the exporters' sources are not the engine's


def test_ip_allow_without_names_takes_every_service():
    assert "10.0.0.9" in fw.firewall_ip_allow(PLAN)
    assert fw.firewall_ip_allow([], ["engine_api"], None) == []
