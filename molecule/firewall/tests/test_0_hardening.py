"""Issue 8: the firewall's unit (a oneshot that loads the table with nft) is sandboxed; the table
still loads at start, reload and boot (test_firewall.py)."""
import pytest

from lab_testinfra import exposure

# systemd-analyze's overall exposure (0 = fully sandboxed, 10 = none). Before issue 8: 6.0. Now
# 1.7 measured (Debian 12 and 13): what remains is what nft needs to load a table - root with
# CAP_NET_ADMIN, netlink sockets, the host's network namespace. 2.5 leaves room for another
# systemd's scoring and fails if the sandbox is lost.
FIREWALL_EXPOSURE_THRESHOLD = 2.5


@pytest.mark.parametrize("name", ["firewall-head", "firewall-worker"])  # Debian 12 and 13
def test_firewall_unit_is_sandboxed_and_loaded(lab_host, name):
    h = lab_host(name)
    assert h.check_output("systemctl show -p ActiveState --value llmops-firewall") == "active"
    assert h.run("nft list table inet llmops").rc == 0
    level = exposure(h, "llmops-firewall")
    print(f"\nexposure {name} llmops-firewall.service: {level}")
    assert level < FIREWALL_EXPOSURE_THRESHOLD, level
    assert h.check_output("systemctl show -p CapabilityBoundingSet --value llmops-firewall") == "cap_net_admin"
