"""The balancer step of the add-a-replica runbook (docs/operations.md, "Add a replica"): a converge of
the nginx_lb role with one more head in the inventory puts the new replica behind the balancer
(nginx -t, then a reload) under constant streaming load from this machine (tests/lab/lab_load.py,
the stand-in backends of this scenario): no request fails, the new replica takes requests, nginx is
reloaded, not restarted.

The balancer starts with r1 only (nginx_lb_backends: the inventory before the change); the scenario's
inventory, with r1 and r2 in vllm_heads, is the one after it."""
import time

from conftest import EDGE_KEY, measure, upstream_of
from lab_load import Load  # tests/lab, on the verifier's PYTHONPATH
from lab_testinfra import wait_until

ONLY_R1 = [{"address": "nginx-lb-head1", "port": 8000, "name": "r1"}]
COMPLETION = {"model": "standin", "prompt": "Hello", "max_tokens": 4}


def _ip(result):
    """The address of the replica that answered a load request (the last one tried)."""
    return (result["upstream"] or "").split(", ")[-1].split(":")[0]


def _answered_by(lb, count=10):
    seen = set()
    for _unused in range(count):
        status, headers, _unused = lb.request("POST", "/v1/completions", COMPLETION)
        assert status == 200
        seen.add(upstream_of(headers))
    return seen


def test_a_replica_added_by_a_converge_takes_requests_without_a_failed_one(lb, backend_ips, master_pid,
                                                                          run_converge):
    by_name = {name: ip for ip, name in backend_ips.items()}
    rc, out = run_converge({"nginx_lb_backends": ONLY_R1})
    restored = False
    try:
        assert rc == 0, out[-3000:]
        wait_until(lambda: _answered_by(lb) == {by_name["nginx-lb-head1"]}, timeout=30,
                   what="the balancer to send every request to r1 only")
        master = master_pid()
        load = Load(f"http://{lb.address}", EDGE_KEY, "standin", concurrency=3, max_tokens=5, cap=1500,
                    timeout=60, pause=0.2, max_seconds=900)
        load.start()
        try:
            wait_until(lambda: len(load.snapshot()) >= 3, timeout=60, what="the first requests")
            rc, out = run_converge({})  # the inventory with the new replica's head: the scenario's own
            assert rc == 0, out[-3000:]
            restored = True
            added = time.monotonic()
            wait_until(lambda: sum(_ip(r) == by_name["nginx-lb-head2"] and r["start"] > added
                                   for r in load.snapshot()) >= 3,
                       timeout=90, what="requests answered by the new replica")
        finally:
            results = load.take()
        failed = [(r["status"], r["error"]) for r in results if not r["ok"]]
        assert failed == [], failed
        per_replica = {name: sum(1 for r in results if _ip(r) == ip) for name, ip in by_name.items()}
        assert per_replica["nginx-lb-head2"] >= 3 and sum(r["end"] > added for r in results) >= 3, per_replica
        assert master_pid() == master, "nginx was restarted, not reloaded"
        measure("add_replica", requests=len(results), failed=len(failed), per_replica=per_replica)
    finally:
        if not restored:  # the scenario's upstream again for the tests after this one
            rc, out = run_converge({})
            assert rc == 0, out[-3000:]
