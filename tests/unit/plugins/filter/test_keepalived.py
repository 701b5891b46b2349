"""Unit tests for plugins/filter/keepalived.py (the keepalived role's peers, priority, interface and checks)."""
from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from filter_cases import load_filter

ka = load_filter("keepalived")

MEMBERS = ["lb1", "lb2"]
HOSTVARS = {"lb1": {"ansible_host": "10.0.0.11"}, "lb2": {"ansible_host": "10.0.0.12"}}
PASSWORD = "s3cr3t-1"


def settings(**over):
    base = {
        "keepalived_virtual_ipv4": "10.0.0.100/24",
        "keepalived_virtual_ipv6": "",
        "keepalived_virtual_router_id": 51,
        "keepalived_priority": 150,
        "keepalived_auth_type": "PASS",
        "keepalived_auth_pass": PASSWORD,
        "keepalived_check_url": "http://127.0.0.1:80/lb-health",
    }
    base.update(over)
    return base


def errors(host="lb1", hostvars=None, members=None, **over):
    hv = HOSTVARS if hostvars is None else hostvars
    peers = ka.keepalived_peers(MEMBERS if members is None else members, hv)
    return ka.keepalived_errors(peers, host, settings(**over), hv)


# keepalived_priority

def test_priority_follows_the_group_order():
    assert [ka.keepalived_priority(["a", "b", "c"], h) for h in ("a", "b", "c")] == [150, 140, 130]
    assert ka.keepalived_priority(["a", "b"], "b", top=200, step=50) == 150


def test_priority_never_below_one_and_top_outside_the_group():
    members = ["h%d" % i for i in range(20)]
    assert ka.keepalived_priority(members, "h19") == 1
    assert ka.keepalived_priority(members, "elsewhere") == 150
    assert ka.keepalived_priority([], "lb1") == 150


def test_priority_refuses_non_integers():
    with pytest.raises(AnsibleFilterError):
        ka.keepalived_priority(["a"], "a", top="high")


# keepalived_peers

def test_peers_take_ansible_host_unless_the_host_sets_its_unicast_address():
    hv = {"lb1": {"ansible_host": "lb1.example", "keepalived_unicast_address": "10.0.1.11"},
          "lb2": {"ansible_host": "10.0.0.12", "keepalived_unicast_address": ""},
          "lb3": {}}
    assert ka.keepalived_peers(["lb1", "lb2", "lb3"], hv) == [
        {"name": "lb1", "address": "10.0.1.11", "source": "keepalived_unicast_address"},
        {"name": "lb2", "address": "10.0.0.12", "source": "ansible_host"},
        {"name": "lb3", "address": "", "source": ""},
    ]


def test_peers_of_an_empty_group():
    assert ka.keepalived_peers([], HOSTVARS) == []
    assert ka.keepalived_peers(None, HOSTVARS) == []


# keepalived_interface

FACTS = {
    "interfaces": ["lo", "eth0", "br-lan", "eth1.100"],
    "lo": {"device": "lo", "ipv4": {"address": "127.0.0.1"}},
    "eth0": {"device": "eth0", "ipv4": {"address": "192.168.1.5"},
             "ipv6": [{"address": "fe80::1%eth0"}, {"address": "2001:db8::5"}]},
    "br_lan": {"device": "br-lan", "ipv4": {"address": "10.0.0.11"},
               "ipv4_secondaries": [{"address": "10.0.0.50"}]},
    "eth1_100": {"device": "eth1.100", "ipv4": {"address": "172.16.0.1"}},
}


@pytest.mark.parametrize("address, device", [
    ("10.0.0.11", "br-lan"),
    ("10.0.0.50", "br-lan"),
    ("192.168.1.5", "eth0"),
    ("2001:db8::5", "eth0"),
    ("172.16.0.1", "eth1.100"),
    ("10.9.9.9", ""),
    ("lb1.example", ""),
    ("", ""),
])
def test_interface_that_holds_an_address(address, device):
    assert ka.keepalived_interface(FACTS, address) == device


def test_interface_without_facts():
    assert ka.keepalived_interface({}, "10.0.0.11") == ""
    assert ka.keepalived_interface(None, "10.0.0.11") == ""


# keepalived_errors

def test_a_good_pair_has_no_errors():
    assert errors() == []
    assert errors(host="lb2", keepalived_priority=140) == []
    assert errors(keepalived_virtual_ipv6="fd00::100/64", keepalived_auth_type="AH") == []
    assert errors(keepalived_check_url="https://127.0.0.1:443/lb-health") == []


@pytest.mark.parametrize("over, message", [
    ({"keepalived_virtual_ipv4": ""}, "keepalived_virtual_ipv4 is empty"),
    ({"keepalived_virtual_ipv4": "10.0.0.100"}, "keepalived_virtual_ipv4: '10.0.0.100' is not an IPv4 ADDRESS/PREFIX"),
    ({"keepalived_virtual_ipv4": "10.0.0.300/24"}, "keepalived_virtual_ipv4: '10.0.0.300/24' is not an IPv4"),
    ({"keepalived_virtual_ipv4": "fd00::1/64"}, "keepalived_virtual_ipv4: 'fd00::1/64' is not an IPv4"),
    ({"keepalived_virtual_ipv4": "10.0.0.0/24"}, "keepalived_virtual_ipv4: 10.0.0.0 is the network address of 10.0.0.0/24"),
    ({"keepalived_virtual_ipv4": "10.0.0.255/24"}, "keepalived_virtual_ipv4: 10.0.0.255 is the broadcast address of 10.0.0.0/24"),
    ({"keepalived_virtual_ipv4": "10.0.0.12/24"}, "keepalived_virtual_ipv4: 10.0.0.12 is the unicast address of lb2"),
    ({"keepalived_virtual_ipv6": "10.0.0.100/24"}, "keepalived_virtual_ipv6: '10.0.0.100/24' is not an IPv6"),
    ({"keepalived_virtual_ipv6": "fd00::100"}, "keepalived_virtual_ipv6: 'fd00::100' is not an IPv6"),
    ({"keepalived_virtual_router_id": 0}, "keepalived_virtual_router_id: '0' is not an integer 1..255"),
    ({"keepalived_virtual_router_id": 256}, "keepalived_virtual_router_id: '256' is not an integer 1..255"),
    ({"keepalived_virtual_router_id": "x"}, "keepalived_virtual_router_id: 'x' is not an integer 1..255"),
    ({"keepalived_virtual_router_id": True}, "keepalived_virtual_router_id: 'True' is not an integer 1..255"),
    ({"keepalived_priority": 255}, "keepalived_priority: '255' is not an integer 1..254"),
    ({"keepalived_priority": 0}, "keepalived_priority: '0' is not an integer 1..254"),
    ({"keepalived_auth_type": "NONE"}, "keepalived_auth_type: 'NONE' is not one of PASS, AH"),
    ({"keepalived_auth_pass": ""}, "keepalived_auth_pass is empty: set 1 to 8 characters"),
    ({"keepalived_check_url": "ftp://127.0.0.1/x"}, "keepalived_check_url: 'ftp://127.0.0.1/x' is not an http://"),
    ({"keepalived_check_url": "http://127.0.0.1"}, "keepalived_check_url: 'http://127.0.0.1' is not an http://"),
    ({"keepalived_check_url": "http://10.0.0.100:80/lb-health"}, "keepalived_check_url: 10.0.0.100 is the virtual address"),
    ({"keepalived_check_url": "http://10.0.0.12/lb-health"}, "keepalived_check_url: 10.0.0.12 is the address of lb2"),
    ({"keepalived_check_upstream_url": "udp://127.0.0.1/x"},
     "keepalived_check_upstream_url: 'udp://127.0.0.1/x' is not an http://"),
    ({"keepalived_check_upstream_url": "http://10.0.0.100:8081/upstream-health"},
     "keepalived_check_upstream_url: 10.0.0.100 is the virtual address"),
    ({"keepalived_check_upstream_url": "http://10.0.0.12:8081/upstream-health"},
     "keepalived_check_upstream_url: 10.0.0.12 is the address of lb2"),
])
def test_each_bad_setting_is_named(over, message):
    found = errors(**over)
    assert len(found) == 1, found
    assert found[0].startswith(message), found


def test_a_long_password_is_refused_with_keepalived_limit_and_never_shown():
    long_password = "0123456789-long"
    found = errors(keepalived_auth_pass=long_password)
    assert found == ["keepalived_auth_pass has 15 characters: keepalived uses only the first 8 (for PASS and AH alike) "
                     "and drops the rest, so the role refuses it; use 1 to 8 characters (the value is not shown)"]
    assert long_password not in found[0] and long_password[:8] not in found[0]
    assert errors(keepalived_auth_pass="12345678") == []


def test_the_check_may_name_this_host_own_address():
    assert errors(keepalived_check_url="http://10.0.0.11:80/lb-health") == []


def test_the_upstream_check_is_optional():
    assert errors(keepalived_check_upstream_url="") == []
    assert errors(keepalived_check_upstream_url="http://127.0.0.1:8081/upstream-health") == []


def test_a_host_outside_the_group_is_refused():
    found = errors(host="web1")
    assert found == ["web1 is not in the balancers' group (keepalived_group): the role runs only on its members"]


@pytest.mark.parametrize("hostvars, message", [
    ({"lb1": {"ansible_host": "10.0.0.11"}, "lb2": {}},
     "lb2 has no unicast address: set keepalived_unicast_address in its host_vars"),
    ({"lb1": {"ansible_host": "10.0.0.11"}, "lb2": {"ansible_host": "lb2.example"}},
     "lb2: ansible_host 'lb2.example' is not an IPv4 address"),
    ({"lb1": {"ansible_host": "10.0.0.11"}, "lb2": {"ansible_host": "x", "keepalived_unicast_address": "fd00::12"}},
     "lb2: keepalived_unicast_address 'fd00::12' is not an IPv4 address"),
    ({"lb1": {"ansible_host": "10.0.0.11"}, "lb2": {"ansible_host": "10.0.0.11"}},
     "lb1 and lb2 have the same unicast address 10.0.0.11"),
])
def test_each_bad_peer_is_named(hostvars, message):
    found = errors(hostvars=hostvars)
    assert len(found) == 1, found
    assert found[0].startswith(message), found


def test_shared_settings_must_match_the_other_balancers_inventory():
    hv = {"lb1": dict(HOSTVARS["lb1"]),
          "lb2": dict(HOSTVARS["lb2"], keepalived_virtual_router_id="52", keepalived_auth_pass="other-pw",
                      keepalived_virtual_ipv4="10.0.0.100/24")}
    found = errors(hostvars=hv)
    assert found == [
        "keepalived_virtual_router_id differs between lb1 ('51') and lb2 ('52'): every balancer of the pair needs "
        "the same",
        "keepalived_auth_pass differs between lb1 and lb2 (the values are not shown): every balancer of the pair needs "
        "the same",
    ]
    assert "other-pw" not in " ".join(found) and PASSWORD not in " ".join(found)


def test_without_hostvars_nothing_is_compared():
    peers = ka.keepalived_peers(MEMBERS, HOSTVARS)
    assert ka.keepalived_errors(peers, "lb1", settings()) == []


def test_a_lone_forced_balancer_has_no_peer_error():
    assert errors(members=["lb1"]) == []


def test_settings_must_be_a_mapping():
    with pytest.raises(AnsibleFilterError):
        ka.keepalived_errors([], "lb1", "nope")


def test_no_message_ever_holds_the_password():
    secret = "Zq9-pw"
    bad = settings(keepalived_auth_pass=secret, keepalived_virtual_ipv4="", keepalived_virtual_router_id=0,
                   keepalived_check_url="x")
    hv = {"lb1": {"ansible_host": "10.0.0.11"}, "lb2": {"ansible_host": "10.0.0.12", "keepalived_auth_pass": "Yy8-pw"}}
    found = ka.keepalived_errors(ka.keepalived_peers(MEMBERS, hv), "lb1", bad, hv)
    assert found and all(secret not in m and "Yy8-pw" not in m for m in found), found


def test_the_filters_are_registered():
    assert sorted(ka.FilterModule().filters()) == ["keepalived_errors", "keepalived_interface", "keepalived_peers",
                                                   "keepalived_priority"]
