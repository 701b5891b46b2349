"""Faults of the edge under a constant streaming load through the balancer pair's virtual address
(faults lane: LLMOPS_CLUSTER_FAULTS=1). Each row of the fault table: requests sent, failed, the
seconds clients could not get a request served, and the rule that only requests in flight on the
failed balancer may fail. Traffic goes only to this molecule run's podman network."""
import re
import subprocess
import time

import testinfra

from conftest import BALANCERS, FAULTS, VIP
from test_1_edge import PEER, holders, judge, wait_one_holder
from test_2_rolling import UPGRADE


def host(name):
    return testinfra.get_host("podman://" + name)


def holds(name):
    return bool(re.search(r" inet %s/" % re.escape(VIP), host(name).check_output("ip -o addr show")))


def row(name, results, t0, outage_limit, note):
    """judge()'s rule for the fault at t0, and its row in the fault table."""
    failed, in_flight, refused, outage = judge(results, t0, outage_limit)
    FAULTS.append((name, len(results), failed, outage, "%d in flight, %d refused; %s" % (in_flight, refused, note)))
    return outage


def main_load(load, seconds):
    """The constant load for an edge fault. Its requests time out after 30 s: a stream in flight on the
    balancer that loses the address goes silent (its packets now reach the other balancer, or nothing),
    and a client that only waits for data learns it at its timeout."""
    lo = load(max_seconds=seconds, timeout=30)
    lo.start()
    time.sleep(5)
    return lo


def probe(load):
    """New clients from the fault on (2 streaming clients started at once): what a client that connects
    after the fault gets, whatever the main load's clients are still waiting for."""
    lo = load(concurrency=2, max_seconds=120, timeout=30)
    lo.start()
    return lo


def wait_ssh(name, seconds=180):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if host(name).run("systemctl is-active keepalived").stdout.strip() == "active":
            return True
        time.sleep(2)
    return False


def test_the_holders_host_killed_then_back(load):
    """podman kill of the holder: the peer takes the address; the host comes back (podman start) as the
    standby and takes nothing back (nopreempt)."""
    holder = wait_one_holder()[0]
    peer = PEER[holder]
    lo = main_load(load, 400)
    subprocess.run(["podman", "kill", holder], check=True, capture_output=True, timeout=60)
    t0 = time.monotonic()
    new = probe(load)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not holds(peer):
        time.sleep(0.2)
    moved = time.monotonic() - t0
    assert holds(peer)
    time.sleep(10)
    row("the holder's host killed (podman kill)", lo.take() + new.take(), t0, 15, "address moved in %.1f s" % moved)
    # The host back: it rejoins as the standby; the address stays on the peer, clients see nothing.
    lo = load(max_seconds=400)
    lo.start()
    t1 = time.monotonic()
    subprocess.run(["podman", "start", holder], check=True, capture_output=True, timeout=120)
    assert wait_ssh(holder), "keepalived did not start on %s after the host came back" % holder
    time.sleep(15)
    assert wait_one_holder() == [peer]
    results = lo.take()
    failed = [r for r in results if not r["ok"]]
    assert not failed, failed[:3]
    slowest = max((r["latency"] or 0) for r in results) if results else 0
    FAULTS.append(("the killed host back (rejoins as the standby)", len(results), 0, "-",
                   "the address stayed on %s; no request failed; slowest %.1f s" % (peer, slowest)))


def test_keepalived_stopped_on_the_holder(load):
    holder = wait_one_holder()[0]
    lo = main_load(load, 300)
    host(holder).check_output("systemctl stop keepalived")
    t0 = time.monotonic()
    new = probe(load)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and wait_one_holder(1) != [PEER[holder]]:
        time.sleep(0.2)
    moved = time.monotonic() - t0
    time.sleep(10)
    host(holder).check_output("systemctl start keepalived")
    row("keepalived stopped on the holder", lo.take() + new.take(), t0, 15, "address moved in %.1f s" % moved)
    assert wait_one_holder() == [PEER[holder]]


def test_the_balancers_cut_off_from_each_other_then_rejoined(load):
    """VRRP between the pair dropped both ways (a table of the test's own on each balancer): both hold the
    address; once it heals, one only."""
    lo = main_load(load, 300)
    for b in BALANCERS:
        peer_ip = host(PEER[b]).check_output("ip -4 -o addr show dev eth0 | awk '{print $4}' | head -1").split("/")[0]
        host(b).check_output(
            "nft add table inet llmops_test_cut && nft add chain inet llmops_test_cut in "
            "'{ type filter hook input priority -50; }' && nft add rule inet llmops_test_cut in ip saddr %s "
            "meta l4proto 112 drop" % peer_ip)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(holders()) < 2:
        time.sleep(0.5)
    split = len(holders())
    for b in BALANCERS:
        host(b).run("nft delete table inet llmops_test_cut")
    t_heal = time.monotonic()
    after = wait_one_holder(30)
    healed = time.monotonic() - t_heal
    time.sleep(10)
    results = lo.take()
    assert split == 2, "the cut did not split the pair"
    assert len(after) == 1, after
    failed = [r for r in results if not r["ok"]]
    FAULTS.append(("balancers cut off from each other, rejoined", len(results), len(failed), healed,
                   "two holders while cut; one %.1f s after healing" % healed))
    # While both answer ARP, a client's connection can land on either; each serves it whole.
    late = [r for r in failed if r["start"] > t_heal + 10]
    assert not late, late[:3]


def test_rolling_edge_upgrade_moves_the_address_once(run_play, load):
    holder = wait_one_holder()[0]
    lo = main_load(load, 900)
    t0 = time.monotonic()
    res = run_play(UPGRADE, args=["-e", "upgrade_layer=edge"], timeout=900)
    t1 = time.monotonic()
    time.sleep(5)
    results = lo.take()
    assert res.rc == 0, res
    # The holder went last: the address moved once, to the other balancer, and stays there.
    assert wait_one_holder() == [PEER[holder]], holders()
    # One move of the address: requests in flight on the holder then may fail, and new ones may be
    # refused for the moment of the move; every request started after the play succeeded.
    failed = [r for r in results if not r["ok"]]
    late = [r for r in failed if r["start"] > t1]
    assert not late, late[:3]
    refused_or_cut = [r for r in failed if r["start"] >= t0]
    assert len(failed) <= 12, [(round(r["start"] - t0, 1), r["status"], str(r.get("error"))[:60]) for r in failed]
    FAULTS.append(("rolling edge upgrade (upgrade.yml, layer edge)", len(results), len(failed), "-",
                   "play %.0f s; the address moved once; %d failed at the move" % (t1 - t0, len(refused_or_cut))))
