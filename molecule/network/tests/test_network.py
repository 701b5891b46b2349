"""Behaviour of the network role: netplan (networkd) really configures the fabric, peers reach
each other over it, bad data is rejected before any change, a config netplan refuses never
replaces the working one, and a change that cuts the fabric is rolled back."""
import pytest

FABRIC = {"network-a": "192.168.77.11", "network-b": "192.168.77.12", "network-c": "192.168.77.13"}
FILES = {"network-a": "/etc/netplan/40-llmops.yaml", "network-b": "/etc/netplan/40-llmops.yaml",
         "network-c": "/etc/netplan/40-cx7.yaml"}


def _name(host):
    return host.backend.name


def test_netplan_file_is_private_and_managed(host):
    f = host.file(FILES[_name(host)])
    assert f.exists and f.mode == 0o600 and f.user == "root"
    assert "Ansible managed" in f.content_string
    assert host.run("netplan generate").rc == 0


def test_networkd_configured_the_fabric_address(host):
    addr = FABRIC[_name(host)]
    out = host.check_output("ip -4 -o addr show dev eth1")
    assert addr + "/24" in out, out
    # systemd-networkd, driven by netplan, owns the link (podman's network has no IPAM)
    state = host.check_output("networkctl status eth1 --no-pager")
    assert "configured" in state, state
    assert host.service("systemd-networkd").is_enabled


def test_mtu_route_and_link_local(host):
    name = _name(host)
    if name == "network-a":
        assert "mtu 9000" in host.check_output("ip link show dev eth1")
        assert "192.168.78.0/24 via 192.168.77.1" in host.check_output("ip -4 route show dev eth1")
    if name == "network-c":
        # link-local: [ipv4] as NVIDIA's 40-cx7.yaml: networkd assigns a 169.254.0.0/16 address
        out = host.run("for i in $(seq 20); do ip -4 -o addr show dev eth1 | grep -q 'inet 169.254' "
                       "&& break; sleep 1; done; ip -4 -o addr show dev eth1")
        assert "inet 169.254." in out.stdout, out.stdout


def test_every_peer_answers_over_the_fabric(host):
    me = _name(host)
    for peer, addr in FABRIC.items():
        if peer != me:
            res = host.run("ping -c 2 -W 2 -I eth1 %s", addr)
            assert res.rc == 0, (me, peer, res.stdout, res.stderr)


@pytest.fixture()
def host_a(lab_host):
    return lab_host("network-a")


def _snapshot(h):
    return h.check_output("sha256sum /etc/netplan/40-llmops.yaml"), h.check_output("ip -4 -o addr show dev eth1")


def test_invalid_data_is_rejected_before_any_change(host_a, run_role):
    before = _snapshot(host_a)
    # An address that is no address: refused by its syntax class, the preflight's first task.
    rc, out = run_role("network-a", {"network_interfaces": [
        {"name": "eth1", "role": "fabric", "addresses": ["192.168.77.300/24"]}]})
    assert rc != 0
    assert "network_interfaces[0].addresses[0]: '192.168.77.300/24' must be an interface address" in out, out[-3000:]
    assert _snapshot(host_a) == before
    # Well-formed values the role's own checks refuse, all reported at once.
    rc, out = run_role("network-a", {"network_interfaces": [
        {"name": "eth1", "role": "fabric", "addresses": ["192.168.77.30/24"], "gateway": "10.1.1.1"},
        {"name": "enp9s0", "addresses": ["10.2.0.1/24"]}]})
    assert rc != 0
    assert "invalid network data for network-a, nothing was changed" in out
    assert "network_interfaces[0] (eth1).gateway on network-a: gateway 10.1.1.1 is outside" in out
    assert "network_interfaces[1] (enp9s0) on network-a: the host has no interface 'enp9s0'" in out
    assert _snapshot(host_a) == before


def test_duplicate_address_across_hosts_is_rejected(host_a, run_role):
    before = _snapshot(host_a)
    rc, out = run_role("network-a", {"network_interfaces": [
        {"name": "eth1", "role": "fabric", "addresses": ["192.168.77.12/24"]}]})
    assert rc != 0
    assert "address 192.168.77.12 is configured more than once (on network-a, network-b)" in out
    assert _snapshot(host_a) == before


def test_bad_type_fails_argument_validation(host_a, run_role):
    rc, out = run_role("network-a", {"network_renderer": "ifupdown"})
    assert rc != 0 and "network_renderer" in out and "networkd" in out


def test_dgx_os_keeps_network_manager_and_refuses_networkd(host_a, run_role):
    # A DGX OS stand-in: /etc/dgx-release on network-a (DGX OS runs NetworkManager).
    before = _snapshot(host_a)
    host_a.run("printf 'DGX_NAME=\"DGX Spark\"\\n' > /etc/dgx-release")
    try:
        rc, out = run_role("network-a", {"network_renderer": "networkd"})
        assert rc != 0, out[-3000:]
        assert "network_renderer=networkd on network-a: DGX OS (/etc/dgx-release) manages its network with " \
               "NetworkManager" in " ".join(out.split()), out[-3000:]
        assert _snapshot(host_a) == before
        # auto writes NetworkManager's renderer (not applied here: the lab host runs networkd).
        rc, out = run_role("network-a", {"network_apply": False})
        assert rc == 0, out[-3000:]
        assert "renderer: NetworkManager" in host_a.file("/etc/netplan/40-llmops.yaml").content_string
    finally:
        host_a.run("rm -f /etc/dgx-release")
    rc, out = run_role("network-a", {})
    assert rc == 0, out[-3000:]
    assert "renderer: networkd" in host_a.file("/etc/netplan/40-llmops.yaml").content_string
    assert _snapshot(host_a) == before


def test_config_netplan_refuses_never_replaces_the_working_one(host_a, run_role):
    before = _snapshot(host_a)
    rc, out = run_role("network-a", {"network_interfaces": [
        {"name": "eth1", "role": "fabric", "addresses": ["192.168.77.11/24"],
         "netplan": {"no-such-netplan-key": True}}]})
    assert rc != 0
    assert "failed to validate" in out and "no-such-netplan-key" in out, out[-3000:]
    assert _snapshot(host_a) == before


def test_change_that_cuts_the_fabric_is_rolled_back(host_a, lab_host, run_role):
    before = _snapshot(host_a)
    # Move network-a's fabric address to another subnet: the management link (podman exec) stays,
    # but no peer answers over the fabric, so the role must restore and re-apply the previous file.
    rc, out = run_role("network-a", {"network_interfaces": [
        {"name": "eth1", "role": "fabric", "addresses": ["192.168.79.11/24"]}],
        "network_check_retries": 3})
    assert rc != 0
    assert "it was rolled back to the previous file" in out, out[-3000:]
    assert "192.168.77.12" in out  # the unreachable peers are named
    assert host_a.check_output("cat /var/lib/llmops-network/last-result") == "rolled-back"
    assert host_a.run("systemctl is-active llmops-netplan-rollback.timer").stdout.strip() != "active"
    after = _snapshot(host_a)
    assert after[0] == before[0]
    assert "192.168.77.11/24" in after[1] and "192.168.79.11" not in after[1], after[1]
    assert lab_host("network-b").run("ping -c 2 -W 2 192.168.77.11").rc == 0
