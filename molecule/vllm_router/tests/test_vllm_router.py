"""The router as the converge left it (nginx_lb_routing: cache_aware): where it listens, how it is
sandboxed, which workers it has, where requests land, how it drains a replica and comes back after a kill."""
import collections
import json
import re
import time

from conftest import (ARGS, CTL_RUN, HEADS, LB, LB_ADDRESS, METRICS, UNIT, WORKERS_FILE, chat, long_prefix,
                      record)
from lab_testinfra import exposure, main_pid_user, wait_until


def test_the_router_runs_sandboxed_and_restarts_itself(lab_host):
    lb = lab_host(LB)
    show = dict(line.split("=", 1) for line in lb.check_output(
        "systemctl show -p ActiveState,DynamicUser,ProtectSystem,NoNewPrivileges,PrivateDevices,ProtectHome,"
        "Restart,StartLimitBurst,StartLimitIntervalUSec,LimitNOFILE,CapabilityBoundingSet,UnitFileState %s"
        % UNIT).splitlines())
    assert show["ActiveState"] == "active" and show["UnitFileState"] == "enabled", show
    assert show["DynamicUser"] == "yes" and show["ProtectSystem"] == "strict" and show["NoNewPrivileges"] == "yes"
    assert show["PrivateDevices"] == "yes" and show["ProtectHome"] == "yes" and show["CapabilityBoundingSet"] == ""
    assert show["Restart"] == "on-failure" and show["StartLimitBurst"] == "5" and show["StartLimitIntervalUSec"] == "1min"
    assert show["LimitNOFILE"] == "65536"
    assert main_pid_user(lb, UNIT) != "root"
    level = exposure(lb, UNIT)
    record("systemd-analyze security exposure", "%.1f" % level)
    assert level <= 3.0, level


def test_it_listens_on_loopback_only(lab_host):
    lb = lab_host(LB)
    listening = lb.check_output("ss -ltnH")
    for port in (30000, 29000):
        found = re.findall(r"\s(\S+):%d\s" % port, listening)
        assert found == ["127.0.0.1"], (port, listening)
    # From another host of the network: nothing answers on the balancer's address.
    heads = lab_host("router-heads")
    for port in (30000, 29000):
        res = heads.run("curl -s -m 3 -o /dev/null -w '%%{http_code}' http://%s:%d/" % (LB_ADDRESS, port))
        assert res.stdout.strip() == "000" and res.rc != 0, (port, res.stdout, res.rc)


def test_its_workers_are_the_heads_addresses_from_the_inventory(lab):
    assert lab.live_workers() == sorted(HEADS.values())
    workers = json.loads(lab.lb.check_output("cat %s" % WORKERS_FILE))["workers"]
    assert workers == [{"name": n, "url": u} for n, u in HEADS.items()]
    argv = json.loads(lab.lb.check_output("cat %s" % ARGS))["argv"]
    flags = dict(zip(argv[::2], argv[1::2]))
    assert flags["--policy"] == "cache_aware" and flags["--host"] == "127.0.0.1", flags


def test_the_metrics_answer(lab):
    code, body = lab.get(METRICS)
    assert code == 200, body
    for url in HEADS.values():
        assert 'vllm_router_worker_health{worker="%s"} 1' % url in body, body[:2000]
    assert "vllm_router_active_workers 3" in body


def test_the_routers_own_parser_refuses_bad_arguments(lab):
    res = lab.lb.run("python3 -c 'import json,sys; a=json.load(open(\"%s\")); a[\"argv\"][a[\"argv\"].index(\"cache_aware\")]="
                     "\"bogus\"; json.dump(a, open(\"/tmp/bad-router.json\", \"w\"))' && %s check /tmp/bad-router.json"
                     % (ARGS, CTL_RUN))
    assert res.rc == 1 and "invalid choice: 'bogus'" in res.stderr, res.stdout + res.stderr
    assert lab.lb.run("%s check %s" % (CTL_RUN, ARGS)).rc == 0


def test_requests_with_the_same_long_prefix_land_on_one_head(lab):
    system = long_prefix(1)
    lab.reset()
    first = lab.backends([chat(system, "question 0")])
    rest = lab.backends([chat(system, "question %d" % i, delay=0.3) for i in range(1, 24)], concurrency=4)
    landed = collections.Counter(first + rest)
    record("cache_aware: same 1.5k-char prefix", "%d of %d requests on %s (%s)" % (
        landed.most_common(1)[0][1], len(first + rest), landed.most_common(1)[0][0], dict(landed)))
    assert len(landed) == 1, landed
    stats = lab.stats()
    assert stats[first[0]]["generations"] == 24
    # The router asked every head for the token ids of each request (its cache_aware input).
    assert all(s["renders"] >= 24 for s in stats.values()), stats


def test_requests_with_different_prefixes_spread(lab):
    lab.reset()
    landed = collections.Counter(lab.backends([chat(long_prefix(100 + i), "hello", delay=1.0) for i in range(12)],
                                              concurrency=6))
    record("cache_aware: 12 different prefixes, 6 at once", str(dict(landed)))
    assert len(landed) == 3, landed


def test_a_head_that_fails_its_health_checks_gets_no_requests(lab):
    down = "standin-c"
    lab.heads.check_output("touch /run/standin-head/%s.down" % down)
    try:
        start = time.monotonic()
        wait_until(lambda: 'vllm_router_worker_health{worker="%s"} 0' % HEADS[down] in lab.get(METRICS)[1],
                   timeout=30, what="the router to mark %s unhealthy" % down)
        record("health: failing head out of the choice after", "%.1f s" % (time.monotonic() - start))
        lab.reset()
        landed = collections.Counter(lab.backends([chat(long_prefix(200 + i), "hi", delay=0.5) for i in range(9)],
                                                  concurrency=3))
        assert down not in landed and lab.stats()[down]["generations"] == 0, landed
    finally:
        lab.heads.check_output("rm -f /run/standin-head/%s.down" % down)
    wait_until(lambda: 'vllm_router_worker_health{worker="%s"} 1' % HEADS[down] in lab.get(METRICS)[1],
               timeout=30, what="the router to mark %s healthy again" % down)


def test_a_drained_replica_gets_no_new_requests_and_stays_out_after_a_restart(lab):
    system = long_prefix(7)
    owner = lab.backends([chat(system, "whose prefix is this")])[0]
    lab.drain([owner])
    try:
        assert lab.sync() == "changed: removed %s (%s) from the router\n" % (HEADS[owner], owner)
        assert lab.sync() == ""
        assert HEADS[owner] not in lab.live_workers()
        lab.reset()
        landed = lab.backends([chat(system, "again %d" % i, delay=0.2) for i in range(12)]
                              + [chat(long_prefix(300 + i), "new", delay=0.2) for i in range(12)], concurrency=4)
        stats = lab.stats()
        record("drain: requests on the drained head", "%d of %d (its prefix went to %s)" % (
            stats[owner]["generations"], len(landed), collections.Counter(landed[:12]).most_common(1)[0][0]))
        assert owner not in landed and stats[owner]["generations"] == 0 and stats[owner]["renders"] == 0, stats
        # A restart (a crash, a new version) keeps it out: the launcher reads the drain state.
        pid = lab.main_pid()
        lab.lb.check_output("systemctl restart %s" % UNIT)
        lab.wait_ready(not_pid=pid)
        assert HEADS[owner] not in lab.live_workers()
        assert "not given to the router: %s" % owner in lab.journal(60)
    finally:
        lab.drain([])
    assert lab.sync() == "changed: added %s (%s) to the router\n" % (HEADS[owner], owner)
    assert lab.live_workers() == sorted(HEADS.values())
    lab.reset()
    landed = collections.Counter(lab.backends([chat(long_prefix(400 + i), "back", delay=1.0) for i in range(12)],
                                              concurrency=6))
    assert landed[owner] > 0, landed


def test_the_router_restarts_itself_after_a_kill(lab):
    pid = lab.main_pid()
    restarts = int(lab.lb.check_output("systemctl show -p NRestarts --value %s" % UNIT))
    lab.lb.check_output("systemctl kill -s KILL %s" % UNIT)
    seconds = lab.wait_ready(timeout=90, not_pid=pid)
    record("restart after systemctl kill -s KILL", "%.1f s to answer again (RestartSec=2)" % seconds)
    assert int(lab.lb.check_output("systemctl show -p NRestarts --value %s" % UNIT)) == restarts + 1
    # RestartSec=2, then Python's imports of vllm-router's launcher: ~1 s on a quiet host, up to 13 s on the
    # lab's loaded 2 cores.
    assert seconds < 45, seconds
    assert lab.live_workers() == sorted(HEADS.values())
    assert lab.backends([chat("after the kill", "hi")])[0] in HEADS


def test_check_mode_on_the_converged_balancer_changes_nothing(converge):
    rc, out, line = converge({}, check=True)
    assert rc == 0, out[-3000:]
    assert re.search(r"router-lb1 : ok=\d+ changed=0 ", line), out[-3000:]
