"""The key-rotation runbook (docs/operations.md, "Rotate an edge API key"): add the new key, move the
clients to it, remove the old key; each step is a converge of the nginx_lb role (nginx -t, then a
reload) and nothing else. Under constant streaming load from this machine to the lab balancer
(tests/lab/lab_load.py, the stand-in backends of this scenario): not one request fails, the old key
gets 401 once it is removed, the new key 200 from its addition on, and no engine (the stand-in's
unit on each head) and no nginx master is restarted.

The scenario's keys are EDGE_KEY and KEY2; KEY2 is rotated to NEW_KEY, EDGE_KEY stays (the other
tests use it), and the scenario's keys are put back at the end."""
import time

from conftest import EDGE_KEY, measure
from lab_load import Load  # tests/lab, on the verifier's PYTHONPATH
from lab_testinfra import wait_until

KEY2 = "lab-edge-key-000000000002"
NEW_KEY = "lab-edge-key-rotated-000003"
HEADS = ("nginx-lb-head1", "nginx-lb-head2")
MODEL = "standin"
TOKENS = 5  # the stand-in streams 5 chunks (0.4 s apart): one request lasts about 2 s


def _status(lb, key):
    status, _headers, _body = lb.request("GET", "/v1/models", key=key)
    return status


def _load(url, key):
    # 3 workers, 0.2 s apart: about 1.4 requests/s per load, well under the edge's per-key rate.
    return Load(url, key, MODEL, concurrency=3, max_tokens=TOKENS, cap=1500, timeout=60, pause=0.2,
                max_seconds=900)


def _failed(results):
    return [(r["status"], r["error"]) for r in results if not r["ok"]]


def test_rotate_an_edge_key_under_load_without_a_failed_request(lb, lab_host, master_pid, run_converge):
    url = f"https://{lb.address}:{lb.port}"  # the scenario serves TLS; :80 only redirects
    engines = {h: lab_host(h).check_output("systemctl show -p MainPID --value standin-backend") for h in HEADS}
    master = master_pid()
    assert _status(lb, NEW_KEY) == 401, "the new key is accepted before it was added: the test proves nothing"
    assert _status(lb, KEY2) == 200
    old_load, new_load = _load(url, KEY2), _load(url, NEW_KEY)
    try:
        # The clients still use the old key while the new one is added.
        old_load.start()
        wait_until(lambda: len(old_load.snapshot()) >= 3, timeout=60, what="the first requests with the old key")
        rc, out = run_converge({"nginx_lb_api_keys": [EDGE_KEY, KEY2, NEW_KEY]})
        assert rc == 0, out[-3000:]
        added = time.monotonic()
        wait_until(lambda: _status(lb, NEW_KEY) == 200, timeout=30, what="the new key to be accepted")
        # Both keys work side by side; the clients move over to the new one.
        new_load.start()
        wait_until(lambda: len(new_load.snapshot()) >= 3, timeout=60, what="the first requests with the new key")
        old_results = old_load.take()  # every client on the old key has finished its last request
        assert _status(lb, KEY2) == 200, "the old key stopped working before it was removed"

        rc, out = run_converge({"nginx_lb_api_keys": [EDGE_KEY, NEW_KEY]})
        assert rc == 0, out[-3000:]
        removed = time.monotonic()
        wait_until(lambda: _status(lb, KEY2) == 401, timeout=30, what="the old key to be refused")
        # The load on the new key goes on through the removal and after it.
        wait_until(lambda: sum(r["start"] > removed for r in new_load.snapshot()) >= 3, timeout=60,
                   what="requests with the new key after the old one was removed")
        new_results = new_load.take()
    finally:
        old_load.take()
        new_load.take()

    try:
        assert _failed(old_results) == [], _failed(old_results)
        assert _failed(new_results) == [], _failed(new_results)
        # The old key's load ran across the first reload, the new key's across the second.
        assert sum(r["end"] > added for r in old_results) >= 1
        assert sum(r["start"] < removed < r["end"] for r in new_results) + sum(
            r["start"] > removed for r in new_results) >= 3
        assert _status(lb, KEY2) == 401 and _status(lb, NEW_KEY) == 200 and _status(lb, EDGE_KEY) == 200
        status, headers, body = lb.request("POST", "/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": 2},
                                           key=KEY2)
        assert status == 401 and headers.get("Content-Type") == "application/json", (status, headers, body)
        # Nothing was restarted: the engines kept their processes, nginx only reloaded.
        assert {h: lab_host(h).check_output("systemctl show -p MainPID --value standin-backend")
                for h in HEADS} == engines
        assert master_pid() == master, "nginx was restarted, not reloaded"
        measure("key_rotation", old_key_requests=len(old_results), new_key_requests=len(new_results),
                failed=len(_failed(old_results)) + len(_failed(new_results)))
    finally:
        rc, out = run_converge({})  # the scenario's keys again
        assert rc == 0, out[-3000:]
    # A reload returns before nginx's new workers answer (as above): wait for the restored keys.
    wait_until(lambda: _status(lb, KEY2) == 200 and _status(lb, NEW_KEY) == 401, timeout=30,
               what="the scenario's keys to be back (KEY2 accepted, the new key refused)")
