"""The engine unit's own network protection: it requires the host firewall's unit, and its
IPAddressAllow= (cgroup BPF, from the firewall role's source plan) refuses everyone but loopback,
the balancer, the allowed networks (here the verifier on this machine) and the replica's peers, even
when the nftables table is gone. Real TCP between the containers of this scenario's network."""
from conftest import HEADS, LB
from lab_testinfra import container_ip

RULESET = "/etc/llmops/firewall/llmops.nft"


def show(h, unit, *props):
    out = h.check_output("systemctl show %s %s" % (unit, " ".join("-p " + p for p in props)))
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def curl_metrics(h, address, timeout=4):
    """(curl exit code, HTTP status) of GET /metrics on address:8000 from lab host h."""
    res = h.run("curl -s -o /dev/null -w '%%{http_code}' --connect-timeout %d --max-time %d http://%s:8000/metrics"
                % (timeout, timeout + 2, address))
    return res.rc, res.stdout.strip()


def test_engine_unit_requires_the_firewall_and_filters_addresses(lab_host):
    h = lab_host(HEADS[0])
    props = show(h, "vllm", "Requires", "After", "IPAddressDeny", "IPAddressAllow")
    assert "llmops-firewall.service" in props["Requires"].split(), props
    assert "llmops-firewall.service" in props["After"].split(), props
    # systemd's order of the two families varies between versions
    assert set(props["IPAddressDeny"].split()) == {"0.0.0.0/0", "::/0"}, props
    # systemd prints single addresses with their prefix length (10.0.0.3/32)
    allow = {a.split("/")[0] if a.endswith(("/32", "/128")) else a for a in props["IPAddressAllow"].split()}
    assert "127.0.0.0/8" in allow and "::1" in allow, allow
    lb_ip, other_head_ip = container_ip(LB), container_ip(HEADS[1])
    gateway = container_ip(HEADS[0]).rsplit(".", 1)[0] + ".1"
    assert lb_ip in allow and gateway in allow, allow
    assert other_head_ip not in allow, allow


def test_engine_refuses_outsiders_even_without_its_nftables_table(lab_host, heads):
    h, other, lb = lab_host(HEADS[0]), lab_host(HEADS[1]), lab_host(LB)
    address = container_ip(HEADS[0])
    # With the table: the other head (another replica, no balancer) is refused by nftables.
    assert curl_metrics(other, address)[0] in (7, 28)
    h.check_output("nft delete table inet llmops")
    try:
        assert h.run("nft list table inet llmops").rc != 0
        # Without the table the engine unit's own filter drops the connection (curl times out).
        rc, code = curl_metrics(other, address)
        assert rc in (7, 28) and code != "200", (rc, code)
        # The balancer and the allowed verifier still get through.
        assert curl_metrics(lb, address) == (0, "200")
        status, _unused, body = heads[HEADS[0]].request("GET", "/metrics")
        assert status == 200 and b"vllm:" in body
    finally:
        h.check_output("systemctl reload llmops-firewall")
    assert "jump engine_api" in h.check_output("nft list table inet llmops")


def test_engine_stops_with_its_firewall_and_does_not_start_without_it(lab_host):
    # On the second head (test_serving's last test restarted it; this one does not wait for it to serve).
    h = lab_host(HEADS[1])
    h.check_output("systemctl start vllm")
    h.check_output("systemctl stop llmops-firewall")
    try:
        assert show(h, "vllm", "ActiveState")["ActiveState"] in ("inactive", "deactivating", "failed")
        # A ruleset that fails to load: the firewall unit fails, and the engine is not started.
        h.check_output("cp -p %s /root/llmops.nft.good && echo 'this is not nft' >> %s" % (RULESET, RULESET))
        res = h.run("systemctl start vllm")
        assert res.rc != 0, res.stdout + res.stderr
        assert show(h, "vllm", "ActiveState")["ActiveState"] in ("inactive", "failed")
        assert show(h, "llmops-firewall", "ActiveState")["ActiveState"] == "failed"
        assert h.run("nft list table inet llmops").rc != 0
    finally:
        h.run("cp -p /root/llmops.nft.good %s" % RULESET)
        h.run("systemctl reset-failed llmops-firewall vllm")
        start = h.run("systemctl start vllm")
    assert start.rc == 0, start.stdout + start.stderr
    # Starting the engine started its firewall first.
    assert show(h, "llmops-firewall", "ActiveState")["ActiveState"] == "active"
    assert "jump engine_api" in h.check_output("nft list table inet llmops")
