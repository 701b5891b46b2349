"""nginx-lb-drain, the helper playbooks/upgrade.yml runs on every balancer: a replica (the heads'
vllm_service_replica, r1 and r2 here) taken out of the upstream and put back by nginx -t + reload,
state that a converge keeps, idempotent output, a failed nginx -t restoring the file."""
import json
import re
import threading
import time

from conftest import CONF, STATE, upstream_of
from lab_testinfra import wait_until

COMPLETION = {"model": "standin", "prompt": "Hello", "max_tokens": 4}


def _status(drain):
    res = drain("status")
    assert res.rc == 0, res.stderr
    return {line.split()[0]: (line.split()[1], line.split()[2]) for line in res.stdout.splitlines() if line.strip()}


def _only_to(lb, address, count=10):
    """True when `count` requests in a row were all answered by `address`."""
    for _unused in range(count):
        status, headers, _unused = lb.request("POST", "/v1/completions", COMPLETION)
        if status != 200 or upstream_of(headers) != address:
            return False
    return True


def _both(lb, addresses, tries=30):
    seen = set()
    for _unused in range(tries):
        status, headers, _unused = lb.request("POST", "/v1/completions", COMPLETION)
        assert status == 200
        seen.add(upstream_of(headers))
        if seen >= set(addresses):
            return True
    return False


def _ip(backend_ips, name):
    return next(ip for ip, host in backend_ips.items() if host == name)


def test_upstream_has_a_marker_per_replica_and_status_lists_them(lb_host, drain, backend_ips):
    conf = lb_host.file(CONF).content_string
    for replica, head in (("r1", "nginx-lb-head1"), ("r2", "nginx-lb-head2")):
        line = next(x for x in conf.splitlines() if x.rstrip().endswith("# llmops-replica=" + replica))
        assert re.match(r"^\s*server \S+:8000 max_fails=2 fail_timeout=30s;  # llmops-replica=%s$" % replica, line), line
        # The address as the upstream names it (here the lab host's name; on a cluster its address).
        assert _status(drain)[replica] == (head + ":8000", "serving")
        assert _ip(backend_ips, head)


def test_unknown_replica_exits_2_naming_the_valid_ones(drain):
    for action in ("drain", "undrain"):
        res = drain(action, "nginx-lb-head1")  # a host name, not a replica name
        assert res.rc == 2, (res.rc, res.stdout, res.stderr)
        assert "unknown replica 'nginx-lb-head1'" in res.stderr and "r1 r2" in res.stderr, res.stderr
        assert "changed" not in res.stdout
    assert drain("drain").rc == 2 and drain("restart", "r1").rc == 2


def _workers(lb_host, master):
    """The PIDs of nginx's workers (the master's children) as they are now."""
    out = lb_host.check_output("grep -ls '^PPid:[[:space:]]*%s$' /proc/[0-9]*/status || true", master)
    return {line.split("/")[2] for line in out.splitlines() if line.strip()}


def test_reload_returns_once_workers_of_the_new_configuration_run(lb_host, drain, master_pid):
    """The role's reload handler runs `nginx-lb-drain reload`: whatever follows it (the rest of the
    play, a test, a drain) meets the new configuration, not workers of the previous one. A plain
    `systemctl reload` returns once the master got the signal, before it started new workers."""
    pid = master_pid()
    for _unused in range(3):
        before = _workers(lb_host, pid)
        res = drain("reload")
        after = _workers(lb_host, pid)
        assert res.rc == 0 and res.stdout.startswith("changed: nginx reloaded"), (res.stdout, res.stderr)
        assert after - before, f"returned while nginx ran only the previous workers {sorted(before)}: {res.stdout}"
    assert master_pid() == pid, "nginx was restarted, not reloaded"
    assert drain("reload", "r1").rc == 2


def test_drain_and_undrain_by_reload_idempotent(lb, lb_host, drain, master_pid, backend_ips):
    head1, head2 = _ip(backend_ips, "nginx-lb-head1"), _ip(backend_ips, "nginx-lb-head2")
    pid = master_pid()
    try:
        res = drain("drain", "r2")
        assert res.rc == 0 and res.stdout.startswith("changed: replica r2 drained"), (res.stdout, res.stderr)
        assert _status(drain)["r2"][1] == "drained" and _status(drain)["r1"][1] == "serving"
        assert lb_host.file(STATE).content_string.split() == ["r2"]
        assert " down;  # llmops-replica=r2" in lb_host.file(CONF).content_string
        # A reload: new workers take over within moments; from then on only r1 answers.
        wait_until(lambda: _only_to(lb, head1), what="requests to stop reaching the drained replica")
        assert _only_to(lb, head1, 20)

        before = lb_host.file(CONF).sha256sum
        again = drain("drain", "r2")
        assert again.rc == 0 and "changed" not in again.stdout and "already drained" in again.stdout, again.stdout
        assert lb_host.file(CONF).sha256sum == before

        res = drain("undrain", "r2")
        assert res.rc == 0 and res.stdout.startswith("changed: replica r2 back in service"), (res.stdout, res.stderr)
        assert _status(drain)["r2"][1] == "serving" and lb_host.file(STATE).content_string.split() == []
        wait_until(lambda: _both(lb, [head1, head2]), what="requests to reach the undrained replica")
        again = drain("undrain", "r2")
        assert again.rc == 0 and "changed" not in again.stdout, again.stdout
        assert master_pid() == pid, "nginx was restarted, not reloaded"
    finally:
        drain("undrain", "r2")


def test_a_drain_returns_once_the_requests_in_flight_have_finished(lb, drain):
    """upgrade.yml restarts an engine as soon as the drain returns: by then no request routed by the
    configuration before the reload may still be running (the old workers finish theirs, then exit).
    The stand-in streams for 2 s (5 chunks, 0.4 s apart); the drain starts 0.5 s into it."""
    out = {}

    def stream():
        out["status"], dummy, dummy, dummy, out["events"] = lb.stream("/v1/completions", COMPLETION)
        out["end"] = time.monotonic()

    try:
        worker = threading.Thread(target=stream)
        worker.start()
        time.sleep(0.5)
        res = drain("drain", "r1")
        returned = time.monotonic()
        worker.join(30)
        assert res.rc == 0 and res.stdout.startswith("changed: replica r1 drained"), (res.stdout, res.stderr)
        assert "the previous workers finished their requests in" in res.stdout, res.stdout
        # The stream was not cut, and the drain did not return before it had ended.
        assert out["status"] == 200 and out["events"][-1] == b"[DONE]", out
        assert returned >= out["end"] - 0.3, "the drain returned %.2f s before the stream in flight ended" % (
            out["end"] - returned)
    finally:
        drain("undrain", "r1")


def test_a_converge_keeps_a_drained_replica_drained(lb, lb_host, drain, run_converge, backend_ips):
    head1, head2 = _ip(backend_ips, "nginx-lb-head1"), _ip(backend_ips, "nginx-lb-head2")
    try:
        assert drain("drain", "r1").rc == 0
        rc, out = run_converge({})
        assert rc == 0, out[-3000:]
        # Nothing to change (the template renders r1 down), and the run says r1 stays drained.
        assert re.search(r"nginx-lb-lb1\s*:\s*ok=\d+\s+changed=0\s", out), out[-1500:]
        assert "replicas drained on nginx-lb-lb1: r1" in out and "stay drained" in out, out[-3000:]
        assert _status(drain)["r1"][1] == "drained"
        wait_until(lambda: _only_to(lb, head2), what="requests to go only to the replica left serving")

        # Asked explicitly, a converge puts it back (and says so by a change).
        rc, out = run_converge({"nginx_lb_drain_on_converge": "undrain"})
        assert rc == 0, out[-3000:]
        assert re.search(r"nginx-lb-lb1\s*:\s*ok=\d+\s+changed=[1-9]", out), out[-1500:]
        assert _status(drain)["r1"][1] == "serving" and lb_host.file(STATE).content_string.strip() == ""
        wait_until(lambda: _both(lb, [head1, head2]), what="requests to reach both replicas again")
    finally:
        drain("undrain", "r1")


def test_a_failed_nginx_t_restores_the_file_and_says_why(lb, lb_host, drain, master_pid):
    before, state, pid = lb_host.file(CONF).sha256sum, lb_host.file(STATE).content_string, master_pid()
    # Something else in the configuration is broken: nginx -t fails, the drain must not stay half-done.
    lb_host.check_output("printf 'this_is_not_a_directive on;\\n' > /etc/nginx/conf.d/zz-broken.conf")
    try:
        res = drain("drain", "r1")
        assert res.rc == 1, (res.rc, res.stdout, res.stderr)
        assert "nginx -t failed" in res.stderr and "restored" in res.stderr
        assert 'unknown directive "this_is_not_a_directive"' in res.stderr, res.stderr  # nginx's own message
        assert "changed" not in res.stdout
        assert lb_host.file(CONF).sha256sum == before and lb_host.file(STATE).content_string == state
    finally:
        lb_host.check_output("rm -f /etc/nginx/conf.d/zz-broken.conf")
    assert _status(drain)["r1"][1] == "serving" and master_pid() == pid
    assert lb.request("POST", "/v1/completions", COMPLETION)[0] == 200


def test_every_replica_drained_answers_502_as_json_without_version(lb, drain):
    try:
        assert drain("drain", "r1").rc == 0
        last = drain("drain", "r2")
        assert last.rc == 0 and "every replica" in last.stderr, last.stderr

        def gone():
            status, headers, body = lb.request("POST", "/v1/completions", COMPLETION)
            return (status, headers, body) if status == 502 else None

        status, headers, body = wait_until(gone, what="a 502 with every replica drained")
        assert headers.get("Content-Type") == "application/json" and headers.get("Server") == "nginx", headers
        assert json.loads(body)["error"]["type"] == "server_error" and b"nginx/" not in body
    finally:
        drain("undrain", "r1")
        drain("undrain", "r2")
