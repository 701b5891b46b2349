"""The balancer pair as it runs: one of cluster-lb1 and cluster-lb2 holds the virtual address, the
firewall takes VRRP from the peer only, Prometheus reads the pair's state from both, and a killed
nginx on the holder comes back by itself while clients keep being served through the virtual address.
Traffic goes only to this molecule run's podman network (the virtual address is on it)."""
import json
import re
import time

import testinfra

from conftest import BALANCERS, FAULTS, VIP

PEER = {"cluster-lb1": "cluster-lb2", "cluster-lb2": "cluster-lb1"}


def host(name):
    return testinfra.get_host("podman://" + name)


def holders():
    return [b for b in BALANCERS
            if re.search(r" inet %s/" % re.escape(VIP), host(b).check_output("ip -o addr show"))]


def wait_one_holder(seconds=30):
    deadline = time.monotonic() + seconds
    while True:
        now = holders()
        if len(now) == 1 or time.monotonic() > deadline:
            return now
        time.sleep(0.5)


def address_of(name):
    return host(name).check_output("ip -4 -o addr show dev eth0 | awk '{print $4}' | head -1").split("/")[0]


def test_one_balancer_holds_the_virtual_address_and_both_run_keepalived():
    assert len(wait_one_holder()) == 1, holders()
    for b in BALANCERS:
        assert host(b).service("keepalived").is_running, b
        assert host(b).service("nginx").is_running, b
        conf = host(b).check_output("cat /etc/keepalived/keepalived.conf")
        # Unicast to the peer's inventory address; the peer comes back without taking the address.
        assert address_of(PEER[b]) in conf and "nopreempt" in conf, conf


def test_the_firewall_takes_vrrp_from_the_peer_only():
    holder = wait_one_holder()[0]
    ruleset = host(holder).check_output("nft list table inet llmops")
    assert re.search(r"set vrrp_peers_v4 \{[^}]*elements = \{ %s \}" % re.escape(address_of(PEER[holder])),
                     ruleset, re.S), ruleset

    def dropped():
        out = host(holder).check_output("nft list chain inet llmops input")
        match = re.search(r"meta l4proto (?:vrrp|112) counter packets (\d+)", out)
        assert match, out
        return int(match.group(1))

    before = dropped()
    # A forged VRRP advert (version 2, the pair's router id 40, priority 255) from a GPU node of the same network.
    forge = ("import socket; s = socket.socket(socket.AF_INET, socket.SOCK_RAW, 112); "
             "pkt = bytes([0x21, 40, 255, 1, 0, 1, 0, 0]) + socket.inet_aton('%s') + bytes(16); "
             "[s.sendto(pkt, ('%s', 0)) for _ in range(5)]" % (VIP, address_of(holder)))
    host("cluster-dgx1").check_output("python3 -c %s" % json.dumps(forge))
    deadline = time.monotonic() + 10
    while dropped() < before + 5 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert dropped() >= before + 5
    assert holders() == [holder]


def prometheus(query):
    out = host("cluster-lb1").check_output(
        "python3 -c %s" % json.dumps(
            "import json, urllib.parse, urllib.request; print(urllib.request.urlopen('http://127.0.0.1:9090/api/v1/query?query='"
            " + urllib.parse.quote(%s), timeout=10).read().decode())" % json.dumps(query)))
    return json.loads(out)["data"]["result"]


def test_prometheus_reads_the_pair_state_from_both_balancers():
    deadline = time.monotonic() + 120
    while True:
        # The series of the role's own scrape jobs (host=): the alerts count only those.
        held = prometheus('llmops_keepalived_vip_held{address="%s",host=~"cluster-lb[12]"}' % VIP)
        ready = prometheus('llmops_keepalived_up{host=~"cluster-lb[12]"} * llmops_keepalived_check_ok{host=~"cluster-lb[12]"}')
        if (len(held) == 2 and sum(float(r["value"][1]) for r in held) == 1
                and len(ready) == 2 and all(r["value"][1] == "1" for r in ready)) or time.monotonic() > deadline:
            break
        time.sleep(5)
    assert len(held) == 2 and sum(float(r["value"][1]) for r in held) == 1, held
    assert len(ready) == 2 and all(r["value"][1] == "1" for r in ready), ready
    members = prometheus('llmops_keepalived_members{host=~"cluster-lb[12]"}')
    assert {r["value"][1] for r in members} == {"2"}, members
    # The edge alerts are loaded, and none fires on a healthy pair.
    loaded = host("cluster-lb1").check_output(
        "python3 -c %s" % json.dumps("import urllib.request; print(urllib.request.urlopen("
                                     "'http://127.0.0.1:9090/api/v1/rules?type=alert', timeout=10).read().decode())"))
    names = {r["name"]: r["state"] for g in json.loads(loaded)["data"]["groups"] for r in g["rules"]}
    for alert in ("EdgeAddressSplitBrain", "EdgeAddressNotHeld", "EdgeSingleBalancer"):
        assert names.get(alert) == "inactive", (alert, names.get(alert))


def test_a_balancer_that_reaches_no_replica_gives_the_address_away():
    """keepalived's second check (nginx_lb_upstream_health_path through the upstream): the holder's way
    to the heads cut (its output to their API port dropped, a table of the test's own), it enters
    FAULT and the other balancer takes the address; healed, it is ready again as the standby."""
    holder = wait_one_holder()[0]
    h = host(holder)
    heads = ", ".join(address_of(name) for name in ("cluster-dgx1", "cluster-dgx3"))
    assert h.check_output("python3 -c %s" % json.dumps(
        "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:8081/upstream-health', timeout=10).status)"
    )) == "200"
    h.check_output("nft add table inet llmops_test_up && nft add chain inet llmops_test_up out "
                   "'{ type filter hook output priority 0; }' && "
                   "nft add rule inet llmops_test_up out ip daddr '{ %s }' tcp dport 8000 drop" % heads)
    try:
        t0 = time.monotonic()
        deadline = t0 + 60
        while time.monotonic() < deadline and holders() != [PEER[holder]]:
            time.sleep(0.5)
        moved = time.monotonic() - t0
        assert holders() == [PEER[holder]], holders()
        journal = h.check_output("journalctl -u keepalived --no-pager -o cat -n 50")
        assert "llmops_nginx_upstream" in journal and "FAULT" in journal, journal
    finally:
        h.run("nft delete table inet llmops_test_up")
    deadline = time.monotonic() + 60
    metrics = "/var/lib/prometheus/node-exporter/llmops_keepalived.prom"
    while time.monotonic() < deadline and 'llmops_keepalived_check_ok{address="%s"} 1' % VIP not in h.check_output(
            "cat %s" % metrics):
        time.sleep(1)
    assert 'llmops_keepalived_check_ok{address="%s"} 1' % VIP in h.check_output("cat %s" % metrics)
    assert holders() == [PEER[holder]]
    FAULTS.append(("the holder cut off from every replica", 0, 0, moved,
                   "address moved to the balancer that reaches them"))


def judge(results, t0, outage_limit):
    """The edge's rule for a fault at t0: a request in flight then (started before t0) may fail; one
    started after it may fail only by not getting through (no HTTP status: refused or reset before an
    answer), and only during the outage: the longest time after t0 in which no request completed
    successfully (a client whose connection waits for the address to move is served late, not
    refused). The outage stays under outage_limit. Returns (failed, in flight, refused, outage)."""
    ends = sorted(r["end"] for r in results if r["ok"] and r["end"] >= t0)
    assert ends, ("no request was served after the fault",
                  [(round(r["start"] - t0, 1), round(r["end"] - t0, 1), r["ok"], r["status"], str(r.get("error"))[:60])
                   for r in results][-12:])
    outage, prev = 0.0, t0
    for end in ends:
        outage, prev = max(outage, end - prev), end
    failed = [r for r in results if not r["ok"]]
    in_flight = [r for r in failed if r["start"] < t0]
    after = [r for r in failed if r["start"] >= t0]
    wrong = [(round(r["start"] - t0, 1), r["status"], str(r.get("error"))[:80]) for r in after
             if r["status"] is not None or r["start"] > t0 + outage + 1]
    assert not wrong, ("failed otherwise than refused during the outage (%.1f s)" % outage, wrong[:5])
    assert outage < outage_limit, (outage, [(round(r["start"] - t0, 1), r["status"]) for r in after][:10])
    return len(failed), len(in_flight), len(after), outage


def test_a_killed_nginx_on_the_holder_comes_back_and_clients_keep_being_served(load):
    holder = wait_one_holder()[0]
    h = host(holder)
    pid_before = h.check_output("systemctl show -p MainPID --value nginx")
    lo = load(max_seconds=240)
    lo.start()
    time.sleep(5)
    h.check_output("systemctl kill -s KILL nginx")
    # The fault's time: once the kill is done (podman exec takes a moment; requests started before
    # this were in flight on the killed nginx).
    t_kill = time.monotonic()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pid = h.check_output("systemctl show -p MainPID --value nginx")
        if h.service("nginx").is_running and pid not in ("0", pid_before):
            break
        time.sleep(0.2)
    back = time.monotonic() - t_kill
    assert h.service("nginx").is_running, h.run("systemctl status nginx").stdout
    time.sleep(10)
    results = lo.take()
    failed, in_flight, refused, outage = judge(results, t_kill, 15)
    # Clients are served again, and every request from then on succeeds.
    after = [r for r in results if r["start"] > t_kill + back + 1]
    assert len(after) >= 10 and all(r["ok"] for r in after)
    assert len(wait_one_holder()) == 1, holders()
    FAULTS.append(("nginx SIGKILL on the holder (virtual address)", len(results), failed, outage,
                   "%d in flight, %d refused; nginx back by itself in %.1f s" % (in_flight, refused, back)))
