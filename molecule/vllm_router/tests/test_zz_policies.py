"""The other values of nginx_lb_routing, each converged for real: session (consistent hashing on a key
the client sends), least_conn (no router: the role removes the one it installed, its sync and its
metrics timer, and nothing else), and back to the scenario's cache_aware (all of it installed again).
Last in the run: each converge restarts or removes the router."""
import collections
import json
import re

from conftest import ARGS, CTL, HEADS, UNIT, VENV, chat, record
from lab_testinfra import wait_until

LIBEXEC = "/usr/local/libexec/llmops"
# What the role puts in the shared libexec directory: the launcher, the sync nginx-lb-drain runs, the
# script of the metrics timer (tasks/metrics.yml).
HELPERS = ("vllm-router-ctl", "vllm-router-sync", "vllm-router-metrics")
METRICS_UNIT = "llmops-vllm-router-metrics"
METRICS_UNITS = ("/etc/systemd/system/%s.timer" % METRICS_UNIT, "/etc/systemd/system/%s.service" % METRICS_UNIT)
PROM = "/var/lib/prometheus/node-exporter/llmops_vllm_router.prom"


def assert_installed(lab):
    """The router's helpers, its metrics timer (enabled, running) and the file the timer writes."""
    libexec = lab.lb.check_output("ls -a %s" % LIBEXEC).split()
    assert set(HELPERS) <= set(libexec), libexec
    for path in METRICS_UNITS:
        assert lab.lb.run("test -f %s" % path).rc == 0, path
    assert lab.lb.check_output("systemctl is-enabled %s.timer" % METRICS_UNIT) == "enabled"
    assert lab.lb.check_output("systemctl is-active %s.timer" % METRICS_UNIT) == "active"
    wait_until(lambda: lab.lb.run("test -s %s" % PROM).rc == 0, timeout=30, what=PROM)


def policy(lab):
    argv = json.loads(lab.lb.check_output("cat %s" % ARGS))["argv"]
    return dict(zip(argv[::2], argv[1::2]))["--policy"]


def test_session_sticks_by_key(lab, converge):
    rc, out, _line = converge({"nginx_lb_routing": "session"})
    assert rc == 0, out[-3000:]
    assert policy(lab) == "consistent_hash"
    lab.wait_ready()
    keys = ["user-%02d" % i for i in range(8)]
    requests = [chat("same system prompt", "turn %d" % turn, headers={"X-Session-ID": key}, delay=0.1)
                for turn in range(5) for key in keys]
    landed = lab.backends(requests, concurrency=4)
    per_key = collections.defaultdict(collections.Counter)
    for item, backend in zip(requests, landed):
        per_key[item["headers"]["X-Session-ID"]][backend] += 1
    record("session: X-Session-ID keys on one head", "%d of %d keys (keys per head: %s)" % (
        sum(1 for c in per_key.values() if len(c) == 1), len(keys),
        dict(collections.Counter(c.most_common(1)[0][0] for c in per_key.values()))))
    assert all(len(c) == 1 for c in per_key.values()), dict(per_key)
    assert len({c.most_common(1)[0][0] for c in per_key.values()}) >= 2, dict(per_key)
    # A chat request's session_params.session_id is a key too.
    by_body = lab.backends([chat("s", "turn %d" % i, session_params={"session_id": "conv-9"}) for i in range(5)])
    assert len(set(by_body)) == 1, by_body


def test_session_without_a_key_goes_to_one_head_unless_each_request_has_an_id(lab):
    # vllm-router 0.1.17 hashes a chat request without a key header or session_params on an empty key,
    # and does not read the OpenAI `user` field there: such requests all go to one head. An X-Request-ID
    # per request (nginx's $request_id) spreads them.
    keyless = collections.Counter(lab.backends([chat("s", "q %d" % i) for i in range(9)]))
    with_user = collections.Counter(lab.backends([chat("s", "q %d" % i, user="user-%d" % i) for i in range(9)]))
    with_id = collections.Counter(lab.backends([chat("s", "q %d" % i, headers={"X-Request-ID": "req-%d" % i})
                                                for i in range(9)]))
    record("session: 9 keyless / `user` field / X-Request-ID", "%s / %s / %s" % (
        dict(keyless), dict(with_user), dict(with_id)))
    assert len(keyless) == 1 and len(with_user) == 1, (keyless, with_user)
    assert len(with_id) >= 2, with_id


def test_least_conn_removes_the_router_the_role_installed_and_nothing_else(lab, converge):
    assert_installed(lab)
    libexec = lab.lb.check_output("ls -a %s" % LIBEXEC)
    rc, _out, out = converge({"nginx_lb_routing": "least_conn"})
    assert rc == 0, out[-3000:]
    assert "is least_conn on router-lb1" in out and "stopped and removed" in out, out[-3000:]
    for path in ("/etc/systemd/system/%s.service" % UNIT, "/etc/llmops-vllm-router", VENV, CTL,
                 "/etc/systemd/system/timers.target.wants/%s.timer" % METRICS_UNIT, PROM) + METRICS_UNITS + tuple(
                     "%s/%s" % (LIBEXEC, name) for name in HELPERS):
        assert lab.lb.run("test -e %s" % path).rc == 1, path
    for unit in (UNIT, METRICS_UNIT + ".timer", METRICS_UNIT + ".service"):
        assert lab.lb.run("systemctl is-active %s" % unit).stdout.strip() in ("inactive", "unknown"), unit
    assert not re.search(r":(30000|29000)\s", lab.lb.check_output("ss -ltnH"))
    # The shared directory and everything else in it stay (nginx_lb's helpers, keepalived's, ...).
    left = lab.lb.check_output("ls -a %s" % LIBEXEC)
    assert sorted(set(libexec.split()) - set(HELPERS)) == sorted(left.split())
    rc, _out, out = converge({"nginx_lb_routing": "least_conn"})
    assert rc == 0 and "Nothing is installed, stopped or removed" in out, out[-3000:]
    assert re.search(r"router-lb1 : ok=\d+ changed=0 ", out), out[-1500:]


def test_back_to_cache_aware(lab, converge):
    rc, out, _line = converge({})
    assert rc == 0, out[-3000:]
    assert policy(lab) == "cache_aware"
    lab.wait_ready()
    assert lab.live_workers() == sorted(HEADS.values())
    assert lab.backends([chat("back", "hi")])[0] in HEADS
    assert_installed(lab)
