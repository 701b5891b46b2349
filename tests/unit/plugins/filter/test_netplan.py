"""Unit tests for plugins/filter/netplan.py (the network role's validation and rendering)."""
from __future__ import annotations

import importlib.util
import os

import pytest
import yaml

_PATH = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "plugins", "filter", "netplan.py")
_spec = importlib.util.spec_from_file_location("llmops_netplan_filter", os.path.abspath(_PATH))
netplan = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(netplan)

PRESENT = ["lo", "eth0", "enp1s0f0np0", "enp1s0f1np1"]


def fabric(address="192.168.100.11/24", **kw):
    item = {"name": "enp1s0f0np0", "role": "fabric", "addresses": [address], "mtu": 9000}
    item.update(kw)
    return item


def test_valid_host_has_no_errors():
    ifaces = [fabric(), {"name": "eth0", "role": "management", "dhcp4": True}]
    assert netplan.netplan_errors(ifaces, [], PRESENT, "spark1") == []


@pytest.mark.parametrize("address, reason", [
    ("192.168.100.300/24", "does not appear to be an IPv4 or IPv6 interface"),
    ("192.168.100.11/33", "IPv4 or IPv6"),
    ("192.168.100.11", "ADDRESS/PREFIX"),
    ("192.168.100.11/x", "not a number"),
    ("192.168.100.0/24", "network or broadcast"),
    ("192.168.100.255/24", "network or broadcast"),
])
def test_invalid_address_or_prefix_is_named(address, reason):
    errors = netplan.netplan_errors([fabric(address)], [], PRESENT, "spark1")
    assert len(errors) == 1
    assert "network_interfaces[0] (enp1s0f0np0).addresses on spark1" in errors[0]
    assert address in errors[0] and reason in errors[0]


def test_slash_31_and_ipv6_are_valid():
    assert netplan.netplan_errors([fabric("10.0.0.0/31")], [], PRESENT, "h") == []
    assert netplan.netplan_errors([fabric("fd00::1/64")], [], PRESENT, "h") == []


def test_missing_interface_is_named_with_what_exists():
    errors = netplan.netplan_errors([fabric(name="enp9s0")], [], PRESENT, "spark2")
    assert errors == ["network_interfaces[0] (enp9s0) on spark2: the host has no interface 'enp9s0' "
                      "(it has: enp1s0f0np0, enp1s0f1np1, eth0, lo)"]


def test_gateway_outside_subnet_is_rejected():
    errors = netplan.netplan_errors([fabric(gateway="192.168.101.1")], [], PRESENT, "h")
    assert len(errors) == 1 and "gateway 192.168.101.1 is outside" in errors[0]
    assert "(enp1s0f0np0).gateway" in errors[0] and "192.168.100.0/24" in errors[0]
    errors = netplan.netplan_errors([fabric(routes=[{"to": "10.0.0.0/8", "via": "10.1.1.1"}])], [], PRESENT, "h")
    assert len(errors) == 1 and "routes[0]" in errors[0]


def test_gateway_inside_subnet_or_on_link_is_accepted():
    assert netplan.netplan_errors([fabric(gateway="192.168.100.1")], [], PRESENT, "h") == []
    ok = fabric(routes=[{"to": "default", "via": "172.16.0.1", "on_link": True}])
    assert netplan.netplan_errors([ok], [], PRESENT, "h") == []


def test_gateway_equal_to_own_address_is_rejected():
    errors = netplan.netplan_errors([fabric(gateway="192.168.100.11")], [], PRESENT, "h")
    assert len(errors) == 1 and "own address" in errors[0]


def test_bad_route_destination_and_mtu_and_role_and_link_local():
    item = fabric(routes=[{"to": "10.0.0.1/8", "via": "192.168.100.1"}], mtu=20, role="storage",
                  link_local=["ipv5"])
    errors = netplan.netplan_errors([item], [], PRESENT, "h")
    text = "\n".join(errors)
    assert len(errors) == 4, errors
    assert "routes[0].to" in text and ".mtu on h must be an integer 68-65535" in text
    assert ".role on h must be one of management, fabric, other" in text
    assert ".link_local on h must be a list of ipv4, ipv6" in text


def test_unknown_keys_and_duplicate_names():
    errors = netplan.netplan_errors([fabric(), fabric(adresses=[])], [], PRESENT, "h")
    text = "\n".join(errors)
    assert "defined twice" in text and "unknown keys ['adresses']" in text


def test_bond_members_must_exist_and_not_be_configured_twice():
    bond = {"name": "bond0", "interfaces": ["enp1s0f0np0", "enp7s0"], "addresses": ["10.9.0.2/24"]}
    errors = netplan.netplan_errors([fabric()], [bond], PRESENT, "h")
    text = "\n".join(errors)
    assert "bond member 'enp7s0' is not an interface" in text
    assert "'enp1s0f0np0' is a bond member" in text
    assert netplan.netplan_errors([], [{"name": "bond0", "interfaces": []}], PRESENT, "h") == [
        "network_bonds[0] (bond0).interfaces on h must list the bond's member interfaces"]


def test_duplicates_across_hosts():
    errors = netplan.netplan_duplicates({
        "spark1": ["192.168.100.11/24"], "spark2": ["192.168.100.11/24", "192.168.100.12/24"],
        "spark3": ["192.168.100.13/24", "bad"]})
    assert errors == ["network_interfaces/network_bonds: address 192.168.100.11 is configured more "
                      "than once (on spark1, spark2)"]
    assert netplan.netplan_duplicates({"a": ["10.0.0.1/24"], "b": ["10.0.0.2/24"]}) == []


def test_host_addresses_by_role():
    ifaces = [fabric(), {"name": "eth0", "role": "management", "addresses": ["10.1.0.5/16"]}]
    assert netplan.netplan_host_addresses(ifaces, [], ["fabric"]) == ["192.168.100.11"]
    assert netplan.netplan_host_addresses(ifaces, [], None, True) == ["192.168.100.11/24", "10.1.0.5/16"]


def test_render_is_valid_netplan_shape():
    ifaces = [fabric(gateway="192.168.100.1", link_local=["ipv4"], netplan={"accept-ra": False}),
              {"name": "eth0", "role": "management", "dhcp4": True,
               "nameservers": {"addresses": ["192.168.100.1"]}}]
    bonds = [{"name": "bond0", "interfaces": ["enp1s0f1np1"], "parameters": {"mode": "active-backup"},
              "routes": [{"to": "10.0.0.0/8", "via": "10.9.0.1", "on_link": True}], "addresses": ["10.9.0.2/24"]}]
    doc = netplan.netplan_config(ifaces, bonds)
    assert doc == {"network": {
        "version": 2, "renderer": "networkd",
        "ethernets": {
            "enp1s0f0np0": {"addresses": ["192.168.100.11/24"], "dhcp4": False, "link-local": ["ipv4"],
                            "mtu": 9000, "routes": [{"to": "default", "via": "192.168.100.1"}],
                            "accept-ra": False},
            "eth0": {"dhcp4": True, "nameservers": {"addresses": ["192.168.100.1"]}},
            "enp1s0f1np1": {"dhcp4": False}},
        "bonds": {"bond0": {"addresses": ["10.9.0.2/24"], "dhcp4": False,
                            "routes": [{"to": "10.0.0.0/8", "via": "10.9.0.1", "on-link": True}],
                            "interfaces": ["enp1s0f1np1"], "parameters": {"mode": "active-backup"}}}}}
    yaml.safe_dump(doc)  # plain data: serialisable as netplan YAML


def test_filter_module_exports():
    assert set(netplan.FilterModule().filters()) == {
        "netplan_errors", "netplan_duplicates", "netplan_config", "netplan_host_addresses",
        "netplan_static_addresses", "netplan_renderer"}


def test_static_addresses_lists_static_links_only():
    doc = netplan.netplan_config(
        [{"name": "eth1", "role": "fabric", "addresses": ["192.168.77.11/24", "fd00:77::b/64"]},
         {"name": "eth0", "role": "management", "dhcp4": True},
         {"name": "enp1s0f1np1", "link_local": ["ipv4"]}],
        [{"name": "bond0", "interfaces": ["enp2s0", "enp3s0"], "addresses": ["10.9.0.1/24"]}])
    out = netplan.netplan_static_addresses(doc)
    assert out.splitlines() == [
        "enp1s0f1np1",            # static, no address: every earlier address is stale
        "enp2s0", "enp3s0",       # bond members carry no address of their own
        "eth1 192.168.77.11/24 fd00:77::b/64",
        "bond0 10.9.0.1/24",
    ]
    assert "eth0" not in out      # DHCP links are never pruned


def test_static_addresses_accepts_netplan_mapping_form_and_empty():
    doc = {"network": {"ethernets": {"eth1": {"addresses": [{"10.0.0.5/24": {"label": "eth1:fab"}}]}}}}
    assert netplan.netplan_static_addresses(doc) == "eth1 10.0.0.5/24\n"
    assert netplan.netplan_static_addresses({"network": {"version": 2}}) == ""


@pytest.mark.parametrize("wanted, dgx_os, nm_active, renderer, error", [
    ("auto", False, False, "networkd", ""),
    ("auto", True, False, "NetworkManager", ""),
    ("auto", False, True, "NetworkManager", ""),
    ("networkd", False, False, "networkd", ""),
    ("NetworkManager", False, False, "NetworkManager", ""),
    ("NetworkManager", True, True, "NetworkManager", ""),
    ("networkd", True, False, "networkd", "DGX OS (/etc/dgx-release) manages its network with NetworkManager"),
    ("networkd", False, True, "networkd", "NetworkManager is active"),
])
def test_renderer_keeps_the_hosts_own(wanted, dgx_os, nm_active, renderer, error):
    out = netplan.netplan_renderer(wanted, dgx_os, nm_active, "spark1")
    assert out["renderer"] == renderer
    if error:
        assert error in out["error"] and "network_renderer=networkd on spark1" in out["error"]
        assert "valid: auto, networkd, NetworkManager" in out["error"]
    else:
        assert out["error"] == ""
