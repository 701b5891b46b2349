"""vLLM's router behind nginx on both balancers (nginx_lb_routing: cache_aware), converged for these tests by
`llmops.vllm_cluster.site --tags vllm_router,nginx_lb` and put back to the lab's least_conn after them:
requests reach the two TP=2 replicas through the router, a long shared prefix stays on one head, a drain
takes a replica out of the router in the same step as out of nginx, a replica whose head engine is killed
is routed around until it serves again, a killed router leaves nginx serving from the heads until it is
back by itself, and validate.yml counts the spread from the heads' own counters. Each fault runs under the
constant streaming load through the virtual address and adds a row to the fault table.
The last of the CI tests (test_1_zz_*): its engine kill restarts r2, which the topology test's check of
the converge's start order (workers before heads) must not see.
Traffic goes only to this molecule run's podman network."""
import json
import re
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
import testinfra

from lab_testinfra import container_ip, wait_until

from conftest import BALANCERS, EDGE_KEY, FAULTS, HEADS, MODEL, REPLICAS, VIP

SITE = "- ansible.builtin.import_playbook: llmops.vllm_cluster.site\n"
VALIDATE = "- ansible.builtin.import_playbook: llmops.vllm_cluster.validate\n"
TAGS = ["--tags", "vllm_router,nginx_lb"]
UNIT = "llmops-vllm-router"
DRAIN = "/usr/local/libexec/llmops/nginx-lb-drain"
CTL = ("/opt/llmops/vllm-router/bin/python3 -I /usr/local/libexec/llmops/vllm-router-ctl status "
       "/etc/llmops-vllm-router/router.json")
ROUTER = "127.0.0.1:30000"
# The router's health for Prometheus (the node exporter's textfile collector; vllm_router_metrics_dir).
PROM = "/var/lib/prometheus/node-exporter/llmops_vllm_router.prom"
# Ready in the lab: a CPU engine restarted on a loaded 2-core machine takes minutes.
REJOIN_TIMEOUT = 900


def host(name):
    return testinfra.get_host("podman://" + name)


def local_get(name, url):
    """GET url on balancer NAME (the router and its metrics listen on its loopback only)."""
    return host(name).check_output("python3 -c %s" % json.dumps(
        "import urllib.request; print(urllib.request.urlopen(%r, timeout=10).read().decode())" % url))


def worker_url(head):
    return "http://%s:8000" % container_ip(head)


def processed(name):
    """{worker URL: requests the router on balancer NAME sent it} (vllm_router_processed_requests_total)."""
    text = local_get(name, "http://127.0.0.1:29000/metrics")
    return {m.group(1): float(m.group(2)) for m in re.finditer(
        r'^vllm_router_processed_requests_total\{[^}]*worker="([^"]+)"[^}]*\} ([0-9.e+]+)$', text, re.M)}


def prefix_decisions(name):
    """{outcome: count} of the router's cache_aware decisions on balancer NAME (prefix_hit, prefix_miss,
    missing_tokens: a head did not give the request's token ids, load_imbalance)."""
    out = {}
    for m in re.finditer(r'^vllm_router_prefix_routing_decisions_total\{([^}]*)\} ([0-9.e+]+)$',
                         local_get(name, "http://127.0.0.1:29000/metrics"), re.M):
        outcome = re.search(r'outcome="([^"]+)"', m.group(1))
        if outcome:
            out[outcome.group(1)] = out.get(outcome.group(1), 0) + float(m.group(2))
    return out


def delta(before, after):
    return {url: after.get(url, 0) - before.get(url, 0) for url in set(before) | set(after)}


def holder():
    holders = [b for b in BALANCERS
               if re.search(r" inet %s/" % re.escape(VIP), host(b).check_output("ip -o addr show"))]
    assert len(holders) == 1, holders
    return holders[0]


def chat(system, question, max_tokens=4):
    """One chat completion through the virtual address; (HTTP status, X-Upstream)."""
    import urllib.request

    body = json.dumps({"model": MODEL, "max_tokens": max_tokens, "messages": [
        {"role": "system", "content": system}, {"role": "user", "content": question}]}).encode()
    req = urllib.request.Request("http://%s/v1/chat/completions" % VIP, data=body, method="POST", headers={
        "Content-Type": "application/json", "Authorization": "Bearer " + EDGE_KEY})
    with urllib.request.urlopen(req, timeout=120) as res:
        res.read()
        return res.status, res.headers.get("X-Upstream")


def last_hop(result):
    return (result.get("upstream") or "").split(", ")[-1]


def router_serves(name, heads):
    lines = host(name).check_output(CTL).splitlines()
    serving = sorted(line.split()[0] for line in lines if line.endswith(" serving"))
    return serving == sorted(heads)


@pytest.fixture(scope="module")
def routed(run_play):
    res = run_play(SITE, extra_vars={"nginx_lb_routing": "cache_aware"}, args=TAGS, timeout=1200)
    assert res.rc == 0, res
    yield
    res = run_play(SITE, extra_vars={"nginx_lb_routing": "least_conn"}, args=TAGS, timeout=1200)
    assert res.rc == 0, res
    for b in BALANCERS:
        h = host(b)
        assert not h.file("/etc/systemd/system/%s.service" % UNIT).exists, b
        assert not h.file("/opt/llmops/vllm-router").exists, b
        assert not h.file(PROM).exists and not h.file("/etc/systemd/system/%s-metrics.timer" % UNIT).exists, b
        conf = h.check_output("cat /etc/nginx/conf.d/llmops-vllm.conf")
        assert "_router" not in conf and ROUTER not in conf, b


def test_both_balancers_run_the_router_in_front_of_both_replicas(routed):
    for b in BALANCERS:
        h = host(b)
        assert h.service(UNIT).is_running and h.service(UNIT).is_enabled, b
        assert router_serves(b, REPLICAS), h.check_output(CTL)
        conf = h.check_output("cat /etc/nginx/conf.d/llmops-vllm.conf")
        assert "server %s max_fails=1" % ROUTER in conf, conf
        # Its health for Prometheus, written by the role's timer.
        wait_until(lambda: h.file(PROM).exists and "llmops_vllm_router_up 1" in h.file(PROM).content_string, 60, 1,
                   what="the router's health in %s on %s" % (PROM, b))
        assert re.search(r'^llmops_vllm_router_workers\{state="healthy"\} 2$', h.file(PROM).content_string, re.M), \
            h.file(PROM).content_string
        # Reachable from its own nginx only: loopback.
        local = [line.split()[3] for line in h.check_output("ss -Htln 'sport = :30000'").splitlines()]
        assert local == ["127.0.0.1:30000"], local


def test_a_long_shared_prefix_stays_on_one_head_and_the_router_names_itself_upstream(routed):
    """cache_aware: a request whose prompt shares a long prefix with an earlier one goes to the head that
    served it (its prefix tree); nginx's upstream is the router."""
    lb = holder()
    system = "You are the lab's assistant %d. " % time.time_ns() + " ".join(
        "Rule %d: answer briefly and in plain words." % i for i in range(12))
    before, decided = processed(lb), prefix_decisions(lb)
    ups = [chat(system, "Question %d: what is %d + %d?" % (i, i, i)) for i in range(6)]
    after = delta(before, processed(lb))
    # The router matched the prefix itself (the heads gave it the requests' token ids: their render
    # endpoints are on), not by chance: every chat after the first was a prefix hit.
    decisions = delta(decided, prefix_decisions(lb))
    assert decisions.get("prefix_hit", 0) >= 5 and decisions.get("missing_tokens", 0) == 0, decisions
    assert all(status == 200 for status, _upstream in ups), ups
    assert {upstream for _status, upstream in ups} == {ROUTER}, ups
    served = {url: n for url, n in after.items() if n > 0}
    assert len(served) == 1 and sum(served.values()) == 6, after
    FAULTS.append(("cache_aware: 6 chats sharing a long system prompt", 6, 0, "-",
                   "all 6 on one head (%s)" % next(iter(served))))


def test_a_drained_replica_leaves_the_router_with_nginx_and_comes_back(routed, load):
    name, (head, _worker) = "r2", REPLICAS["r2"]
    lo = load()
    lo.start()
    wait_until(lambda: sum(1 for r in lo.snapshot() if r["ok"]) >= 8, 180, what="the load to flow")
    try:
        for b in BALANCERS:
            out = host(b).check_output("%s drain %s" % (DRAIN, name))
            assert "changed: removed %s" % worker_url(head) in out, out
            assert router_serves(b, ["r1"]), host(b).check_output(CTL)
        lb = holder()
        t_drained = time.monotonic()
        before = processed(lb)
        wait_until(lambda: sum(1 for r in lo.snapshot() if r["start"] > t_drained and r["ok"]) >= 12, 180,
                   what="12 requests served while r2 is drained")
        during = delta(before, processed(lb))
        assert during.get(worker_url(head), 0) == 0, during
        assert during.get(worker_url(HEADS[0]), 0) >= 12, during
    finally:
        for b in BALANCERS:
            out = host(b).check_output("%s undrain %s" % (DRAIN, name))
    assert "changed: added %s" % worker_url(head) in out, out
    for b in BALANCERS:
        assert router_serves(b, REPLICAS), host(b).check_output(CTL)
    results = lo.take()
    failed = [r for r in results if not r["ok"]]
    assert not failed, failed[:5]
    FAULTS.append(("router: r2 drained and undrained on both balancers", len(results), 0, "-",
                   "no request to r2 while drained; back in the router after"))


def worker_health(name, head):
    """The router's view of HEAD on balancer NAME: 1 healthy, 0 not, None not a worker."""
    m = re.search(r'^vllm_router_worker_health\{[^}]*worker="%s"[^}]*\} ([0-9.]+)$' % re.escape(worker_url(head)),
                  local_get(name, "http://127.0.0.1:29000/metrics"), re.M)
    return float(m.group(1)) if m else None


def test_a_replica_whose_head_engine_is_killed_is_routed_around(routed, load):
    """SIGKILL to r2's head engine under the load: a request the router sends to the dead head fails
    there (no connection), its circuit opens and the router's retry goes to r1; only requests in flight
    on r2 may fail. systemd restarts the engine, the router's health checks take r2 back, and a request
    with a prefix nobody holds goes to it (the least loaded head) again."""
    head = REPLICAS["r2"][0]
    h = host(head)
    pid = h.check_output("systemctl show -p MainPID --value vllm")
    lo = load(timeout=60)
    lo.start()
    wait_until(lambda: sum(1 for r in lo.snapshot() if r["ok"]) >= 8, 180, what="the load to flow")
    lb = holder()
    h.check_output("kill -KILL %s" % pid)
    t_kill = time.monotonic()
    wait_until(lambda: worker_health(lb, head) == 0, 60, 0.5, what="the router to see r2 unhealthy")
    out = time.monotonic() - t_kill
    wait_until(lambda: worker_health(lb, head) == 1 and h.check_output(
        "systemctl show -p MainPID --value vllm") not in ("0", pid), REJOIN_TIMEOUT, 3,
        what="r2's engine restarted and healthy in the router again")
    back = time.monotonic() - t_kill
    results = lo.take()
    failed = [r for r in results if not r["ok"]]
    late = [(round(r["start"] - t_kill, 1), r["status"], str(r.get("error"))[:100]) for r in failed if r["start"] > t_kill]
    # In flight on the killed head at most: one per client; none sent after the kill.
    assert len(failed) <= lo.concurrency and not late, (len(failed), late[:5])
    # Prompts that share nothing but the chat template (random from their first character, long enough
    # for the template to stay under the router's match threshold) go to the least loaded head: six at
    # once spread over both.
    before = processed(lb)
    with ThreadPoolExecutor(6) as pool:
        fresh = list(pool.map(lambda i: chat(" ".join(uuid.uuid4().hex for _part in range(6)), "Say one word.",
                                             max_tokens=16), range(6)))
    after = delta(before, processed(lb))
    assert all(status == 200 for status, _upstream in fresh), fresh
    assert after.get(worker_url(head), 0) >= 1, after
    FAULTS.append(("router: r2's head engine killed (SIGKILL)", len(results), len(failed), back,
                   "%d in flight; unhealthy in the router after %.1f s, served again after" % (len(failed), out)))


def test_a_killed_router_leaves_nginx_serving_from_the_heads_until_it_is_back(routed, load):
    lb = holder()
    h = host(lb)
    pid = h.check_output("systemctl show -p MainPID --value %s" % UNIT)
    lo = load(max_seconds=300)
    lo.start()
    wait_until(lambda: sum(1 for r in lo.snapshot() if r["ok"]) >= 8, 180, what="the load to flow")
    h.check_output("systemctl kill -s KILL %s" % UNIT)
    t_kill = time.monotonic()

    def router_answers():
        new = h.check_output("systemctl show -p MainPID --value %s" % UNIT)
        if new in ("0", pid):
            return False
        return h.run("python3 -c %s" % json.dumps(
            "import urllib.request; urllib.request.urlopen('http://%s/liveness', timeout=2)" % ROUTER)).rc == 0

    wait_until(router_answers, 120, 0.5, what="the router to answer again by itself")
    back = time.monotonic() - t_kill
    wait_until(lambda: any(r["ok"] and last_hop(r) == ROUTER and r["start"] > t_kill + back
                           for r in lo.snapshot()), 120, what="requests through the router again")
    results = lo.take()
    failed = [r for r in results if not r["ok"]]
    late = [(round(r["start"] - t_kill, 1), r["status"], str(r.get("error"))[:80]) for r in failed if r["start"] > t_kill]
    assert len(failed) <= lo.concurrency and not late, (len(failed), late[:5])
    # nginx names every upstream it tried: the router (refused) and then the head that served.
    fallback = [r for r in results if r["ok"] and t_kill < r["start"] < t_kill + back and last_hop(r) != ROUTER]
    served = [r for r in results if r["ok"] and t_kill < r["start"] < t_kill + back]
    # Served by the heads while the router was down (the last of them may already be the new router's:
    # it listens a moment before this test's probe sees it).
    assert fallback, [(last_hop(r), round(r["start"] - t_kill, 1)) for r in served][:10]
    FAULTS.append(("router SIGKILL on the holder", len(results), len(failed), back,
                   "%d in flight; %d served by the heads (nginx's fallback) until it was back" % (
                       len(failed), len(fallback))))


def test_validate_through_the_router_counts_the_spread_from_the_heads(routed, run_play, tmp_path, monkeypatch):
    """Behind the router nginx's upstream header names the router: validate.yml counts the requests per
    replica from the heads' own finished-request counters, and still judges the spread."""
    monkeypatch.setenv("VALIDATE_REPORT_DIR", str(tmp_path))
    res = run_play(VALIDATE, extra_vars={"nginx_lb_routing": "cache_aware", "validate_requests": 40}, timeout=900)
    found = sorted(tmp_path.glob("validate-2*.json"))
    assert found, res
    report = json.loads(found[-1].read_text(encoding="utf-8"))
    load = report["load"]
    assert res.rc == 0 and report["verdict"] == "PASS", (report["problems"], report["thresholds_not_met"], res)
    assert load["upstreams_counted_by"] == "engine counters", load
    assert (load["requests"], load["succeeded"]) == (40, 40), load
    per = report["four_figures"]["requests_per_replica"]
    assert sorted(per["per_replica"]) == ["r1", "r2"] and min(per["per_replica"].values()) > 0, per
    # Only the validation's own requests (nothing else runs meanwhile), counted by the engines.
    assert sum(per["per_replica"].values()) == 40, per
    FAULTS.append(("validate.yml through the router", 40, 0, "-",
                   "PASS; per replica from the engines' counters %s" % per["per_replica"]))
