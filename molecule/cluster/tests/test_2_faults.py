"""Faults under load on two-node replicas (r1 = cluster-dgx1 head + cluster-dgx2 worker, r2 =
cluster-dgx3 + cluster-dgx4): each test runs a constant streaming load (4 clients) through the
balancer, causes one fault, and counts every request. A test fails when service or data is lost:
a request that fails although it was not in flight on the broken part, a replica that does not
come back, or a play that does not refuse a bad change. Each adds a row to the fault table that
conftest.py prints at the end: fault, requests sent, failed, time to recover.

Order matters (pytest keeps it): the cheap, non-destructive faults first, the host stop last.
"""
import time

from lab_testinfra import podman, role_play, running, wait_until

from conftest import FAULTS, HEADS, LB, REPLICAS, one_line, served_by

# Ready in the lab means: a replica that was killed or rebooted serves through the balancer again.
# A CPU engine with a cold page cache on a loaded 2-core CI machine takes minutes; the bound is loose.
REJOIN_TIMEOUT = 900
DRAIN = "/usr/local/libexec/llmops/nginx-lb-drain"  # nginx_lb_libexec_dir


def main_pid(h):
    return h.check_output("systemctl show -p MainPID --value vllm")


def started(lo, ip=None, timeout=180):
    """Start the load and wait until it is flowing (through ip, when given)."""
    lo.start()
    wait_until(lambda: any(r["ok"] and (ip is None or served_by(r, ip)) for r in lo.snapshot()),
               timeout, what="the load to be answered" + (f" by {ip}" if ip else ""))


def served_again(lo, ip, after, what):
    """The first request answered by ip that started after `after` (monotonic seconds)."""
    return wait_until(lambda: next((r for r in lo.snapshot() if r["ok"] and served_by(r, ip) and r["start"] > after),
                                   None), REJOIN_TIMEOUT, 2, what=what)


def assert_only_in_flight_failed(bad, concurrency, t_fault_done, fault):
    """Only requests in flight at the fault may fail: at most one per client, none sent after it."""
    assert len(bad) <= concurrency, describe(bad)
    late = [r for r in bad if r["start"] > t_fault_done]
    assert not late, f"{len(late)} requests sent after {fault} failed: {describe(late)}"


def refused_under_load(lo, res, fault, checked):
    """Stop the load, add the table row, require the play to have failed; (failed requests, output)."""
    results = lo.take()
    bad = failures(results)
    FAULTS.append((fault, len(results), len(bad), "-", checked))
    assert res.rc != 0, res
    return bad, one_line(res.output)


def failures(results):
    return [r for r in results if not r["ok"]]


def describe(bad, limit=8):
    """Each failed request: its status or error, the upstream nginx tried, and when (monotonic s);
    then the balancer's error log, which names the cause of a 502 or 504."""
    rows = [f"{r.get('error') or r.get('status')} via {r.get('upstream') or '-'} "
            f"start {r['start']:.1f} end {(r.get('end') or 0):.1f}" for r in bad[:limit]]
    if bad:
        log = podman("exec", LB, "tail", "-n", "20", "/var/log/nginx/error.log", check=False)
        rows.append("nginx error.log on %s (last 20 lines): %s" % (LB, (log.stdout or log.stderr).strip()))
    return "%d failed: %s" % (len(bad), " | ".join(rows))


def test_balancer_reloaded_and_a_replica_drained_under_load(lab_host, load, head_ip):
    lb = lab_host(LB)
    master = lb.check_output("systemctl show -p MainPID --value nginx")
    lo = load()
    started(lo)
    t0 = time.monotonic()
    for _unused in range(3):
        lb.check_output("systemctl reload nginx")
        time.sleep(2)
    # A drain and an undrain: two real configuration changes, each tested and reloaded by the tool.
    # The balancer knows a replica by its name (vllm_service_replica); its head is its one upstream.
    lb.check_output("%s drain %s", DRAIN, "r1")
    time.sleep(4)
    during_drain = len(lo.snapshot())
    lb.check_output("%s undrain %s", DRAIN, "r1")
    wait_until(lambda: any(r["ok"] and served_by(r, head_ip[HEADS[0]]) and r["start"] > t0 + 10
                           for r in lo.snapshot()), 120, what=f"{HEADS[0]} back after the undrain")
    results = lo.take()
    bad = failures(results)
    FAULTS.append(("balancer reloaded x3, replica drained+undrained", len(results), len(bad), "-",
                   "same nginx master, every request answered"))
    assert not bad, describe(bad)
    assert len(results) > during_drain > 0
    assert lb.check_output("systemctl show -p MainPID --value nginx") == master, "a reload must not restart nginx"
    assert "drained" not in lb.check_output("%s status", DRAIN)


VLLM_PLAY = role_play("vllm_service", hosts="vllm_nodes", gather_facts=True)


def engine_state(h):
    return main_pid(h), h.file("/etc/vllm/config.yaml").sha256sum


def test_bad_engine_config_refused_while_the_engine_serves(run_play, lab_host, load):
    nodes = REPLICAS["r1"]  # the head and its worker: the change is refused on both, before either changes
    before = {n: engine_state(lab_host(n)) for n in nodes}
    lo = load()
    started(lo)
    res = run_play(VLLM_PLAY, limit=",".join(nodes),
                   extra_vars={"vllm_service_extra_args": {"enforce_eager": True, "no_such_flag": 1}})
    bad, out = refused_under_load(lo, res, "bad engine config pushed (unknown flag)",
                                  "play failed naming the flag; engine, config untouched")
    assert "unrecognized arguments: --no-such-flag" in out and "left untouched" in out, out[-3000:]
    assert {n: engine_state(lab_host(n)) for n in nodes} == before
    assert not bad, describe(bad)


NETWORK_PLAY = """
- name: A bad network file for one host
  hosts: %s
  gather_facts: true
  tasks:
    - name: The bad data, on this host only (set_fact, so the peers' data stays as it is)
      ansible.builtin.set_fact:
        network_interfaces:
          - name: eth0
            role: fabric
            addresses: ["%s/24"]
            netplan: {no-such-netplan-key: true}
    - name: Network
      ansible.builtin.include_role:
        name: llmops.vllm_cluster.network
"""


def test_bad_network_config_refused_before_apply_connectivity_kept(run_play, lab_host, load, head_ip):
    name = HEADS[0]
    h = lab_host(name)
    netplan_files = "find /etc/netplan -type f -exec sha256sum {} + 2>/dev/null | sort || true"
    before = (h.check_output(netplan_files), h.check_output("ip -4 -o addr show dev eth0"))
    lo = load()
    started(lo, head_ip[name])
    t0 = time.monotonic()
    res = run_play(NETWORK_PLAY % (name, head_ip[name]))
    t1 = time.monotonic()
    # The replica must go on serving through the balancer after the refusal.
    wait_until(lambda: any(r["ok"] and served_by(r, head_ip[name]) and r["start"] > t0 for r in lo.snapshot()),
               60, what=f"{name} serving after the refused network change")
    bad, out = refused_under_load(lo, res, "bad network config pushed (netplan refuses)",
                                  "refused before apply; netplan dir and eth0 unchanged")
    assert "no-such-netplan-key" in out, out[-3000:]
    # No netplan file written or changed (the role may have installed netplan to validate with it)
    # and eth0's addresses as they were.
    assert (h.check_output(netplan_files), h.check_output("ip -4 -o addr show dev eth0")) == before
    assert not bad, f"the play ran from {t0:.1f} to {t1:.1f}; " + describe(bad)


def engine_killed_under_load(lab_host, load, node, ip, fault, checked):
    """SIGKILL to NODE's engine under the load; waits until the replica (its head at IP) serves again,
    adds the table row, checks that systemd restarted the engine and that only in-flight requests
    failed. Returns the failed requests."""
    h = lab_host(node)
    pid = main_pid(h)
    restarts = int(h.check_output("systemctl show -p NRestarts --value vllm"))
    lo = load(timeout=60)  # a request in flight on the broken replica may hang until the client gives up
    started(lo, ip)
    t_fault = time.monotonic()
    h.check_output("kill -KILL %s", pid)
    t_done = time.monotonic()
    back = served_again(lo, ip, t_done, f"the replica of {node} to serve again after its engine was killed")
    time.sleep(3)
    results = lo.take()
    bad = failures(results)
    FAULTS.append((fault, len(results), len(bad), back["end"] - t_fault, checked))
    assert_only_in_flight_failed(bad, lo.concurrency, t_done, "the kill")
    assert int(h.check_output("systemctl show -p NRestarts --value vllm")) > restarts
    assert main_pid(h) not in ("0", pid)
    return bad


def watch_restarted(w, since):
    """The lines of the worker's head watch since `since` (epoch s) that restarted the worker."""
    return w.check_output("journalctl -u vllm-head-watch --since @%s -o cat | grep 'lost' || true", since)


def test_head_engine_killed_under_load_restarts_and_rejoins(lab_host, load, head_ip):
    """SIGKILL to r2's head engine: systemd restarts the head, and the worker's head watch restarts
    the worker (whose ranks would wait on the dead head for good), so the new head's world forms."""
    name, worker = REPLICAS["r2"]
    w = lab_host(worker)
    since = w.check_output("date +%s")
    engine_killed_under_load(lab_host, load, name, head_ip[name], "replica head engine killed (SIGKILL)",
                             "systemd restarted it, the watch its worker; nginx routed around it")
    assert "restarting vllm" in watch_restarted(w, since), "the worker rejoined without its head watch?"


def test_worker_engine_killed_under_load_only_its_replica_fails(lab_host, load, head_ip):
    """SIGKILL to the engine of r2's worker. Only requests in flight on r2 may fail: none sent after
    the kill (the balancer routes around r2 until it serves again), none served by r1. systemd
    restarts the worker, which joins its head again without anyone touching either node."""
    head, worker = REPLICAS["r2"]
    w = lab_host(worker)
    since = w.check_output("date +%s")
    bad = engine_killed_under_load(lab_host, load, worker, head_ip[head], "replica worker engine killed (SIGKILL)",
                                   "r2's in-flight only, none on r1; the worker rejoined by itself")
    other_ip = head_ip[REPLICAS["r1"][0]]
    assert not [r for r in bad if served_by(r, other_ip)], "r1 failed requests: " + describe(bad)
    # Each rank logs its place in the world group once all ranks met: the new worker joined its head.
    joined = w.check_output("journalctl -u vllm --since @%s -o cat | grep -c 'in world size 2 is assigned as' || true",
                            since)
    assert int(joined or 0) >= 1, f"no rank of {worker} joined its head again"


# A real change (the lab's max_num_seqs is 64): the role restarts the replica's worker, then its head.
ENGINE_CHANGE = {"max_num_seqs": 48, "max_num_batched_tokens": 2048, "enable_chunked_prefill": True,
                 "enable_prefix_caching": True}


def test_worker_that_cannot_reach_its_head_is_named_with_its_journal(run_play, lab_host, load, head_ip):
    """A change restarts r2 while its worker cannot reach the head's fabric address (a blackhole
    route on the worker; Ansible reaches it on the management network). The play fails with
    'replica r2 not ready: worker cluster-dgx4 did not join' and that worker's journal lines. r2 is
    drained first, as for maintenance: the load must not lose a request. Then the route goes, a run
    without the change puts r2 back, and it serves again."""
    head, worker = REPLICAS["r2"]
    lb, w = lab_host(LB), lab_host(worker)
    head_fabric = lab_host(head).check_output("ip -4 -o addr show dev eth1 | awk '{print $4}'").split("/")[0]
    lo = load()
    started(lo)
    lb.check_output("%s drain %s", DRAIN, "r2")
    t_fault = time.monotonic()
    try:
        w.check_output("ip route add blackhole %s/32", head_fabric)
        res = run_play(VLLM_PLAY, limit=",".join(REPLICAS["r2"]), extra_vars={
            "vllm_service_engine": ENGINE_CHANGE, "vllm_service_ready_timeout": 120, "vllm_service_recover_timeout": 30})
    finally:
        w.run("ip route del blackhole %s/32", head_fabric)
    t_fixed = time.monotonic()
    again = run_play(VLLM_PLAY, limit=",".join(REPLICAS["r2"]))
    lb.check_output("%s undrain %s", DRAIN, "r2")
    back = served_again(lo, head_ip[head], t_fixed, "r2 to serve again once its worker reaches its head")
    results = lo.take()
    bad = failures(results)
    FAULTS.append(("worker cannot reach its head at a restart", len(results), len(bad), back["end"] - t_fixed,
                   f"play named the worker ({t_fixed - t_fault:.0f} s); r2 drained, r1 served"))
    out = one_line(res.output)
    assert res.rc != 0, res
    assert f"replica r2 not ready: worker {worker} did not join" in out, out[-3000:]
    assert f"journalctl -u vllm on {worker}" in out, out[-3000:]
    assert again.rc == 0, again
    assert not bad, describe(bad)


def test_replica_host_stopped_under_load_comes_back(lab_host, load, head_ip):
    name = REPLICAS["r2"][0]
    ip = head_ip[name]
    since = lab_host(REPLICAS["r2"][1]).check_output("date +%s")
    lo = load(timeout=60)  # a request in flight on the dead host hangs until the client gives up
    started(lo, ip)
    t_fault = time.monotonic()
    # The host stops at once (SIGKILL to its init, like pulling the power). podman may report an
    # error while it tears the container down; what counts is that the host is no longer running.
    killed = podman("kill", name, check=False)
    wait_until(lambda: not running(name), 30, 0.5, what=f"{name} to stop (podman kill: {killed.stderr.strip()})")
    t_done = time.monotonic()
    time.sleep(20)  # the cluster serves on one replica meanwhile
    during = [r for r in lo.snapshot() if r["start"] > t_done]
    podman("start", name)
    t_start = time.monotonic()
    back = served_again(lo, ip, t_start, f"{name} to serve again after its host came back")
    time.sleep(3)
    results = lo.take()
    bad = failures(results)
    FAULTS.append(("replica head host stopped (podman kill), restarted", len(results), len(bad),
                   back["end"] - t_start, f"down {t_start - t_fault:.0f} s; recovery timed from its start"))
    assert sum(r["ok"] for r in during) >= 5, f"the other replica must serve meanwhile: {describe(failures(during))}"
    assert_only_in_flight_failed(bad, lo.concurrency, t_done, "the host stopped")
    # The host came back on its address with its engine enabled: no one had to touch it (the
    # worker's head watch restarted the worker, left waiting on the lost head).
    assert lab_host(name).service("vllm").is_running
    assert "restarting vllm" in watch_restarted(lab_host(REPLICAS["r2"][1]), since)
