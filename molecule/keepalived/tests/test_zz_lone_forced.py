"""keepalived_enabled forced on a lone balancer: the client host, alone in its group, stands in for
it. It is Debian 12: keepalived 2.2.7, whose own config test cannot take a vrrp_script, so the role's
file passes keepalived-test-config's other path here. Another virtual address and router id than the
pair's; the host runs no nginx, so its check fails and it holds nothing: the pair is not disturbed.
Runs after the failovers (the name)."""
import time

from conftest import CLIENT, CONF, holders
from lab_testinfra import role_play

LONE_VIP = "10.89.211.101"


def test_a_forced_lone_balancer_runs_keepalived_without_a_peer(lab_host, run_play):
    before = holders(lab_host)
    res = run_play(role_play("keepalived", hosts="clients"),
                   extra_vars={"keepalived_group": "clients", "keepalived_enabled": True, "keepalived_auth_pass": "lab-lone",
                               "keepalived_virtual_ipv4": LONE_VIP + "/24", "keepalived_virtual_router_id": 212})
    assert res.rc == 0, res
    text = " ".join(res.output.split())
    assert "keepalived_enabled is forced on keepalived-client, the only balancer" in text, res
    assert "sends its adverts by multicast (224.0.0.18)" in text, res
    client = lab_host(CLIENT)
    conf = client.file(CONF).content_string
    assert "unicast_peer" not in conf and "unicast_src_ip" not in conf, conf
    assert "%s/24 dev eth0" % LONE_VIP in conf
    assert client.service("keepalived").is_running
    # No nginx on this host: the check fails, and the instance never becomes MASTER nor holds the address.
    deadline = time.monotonic() + 60
    while "VRRP_Script(llmops_nginx) failed" not in client.check_output("journalctl -u keepalived --no-pager -o cat"):
        assert time.monotonic() < deadline, client.check_output("journalctl -u keepalived --no-pager -n 20 -o cat")
        time.sleep(0.5)
    time.sleep(6)  # longer than three adverts: an instance that could would have become MASTER by now
    journal = client.check_output("journalctl -u keepalived --no-pager -o cat")
    assert "Entering MASTER STATE" not in journal, journal[-3000:]
    assert LONE_VIP not in client.check_output("ip -4 -o addr show")
    assert holders(lab_host) == before
