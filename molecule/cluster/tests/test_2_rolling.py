"""Rolling upgrades of two-node replicas: playbooks/upgrade.yml, one replica at a time (drain, let
in-flight requests finish, restart the worker then the head, health-gate, undrain), under a constant
load through the balancer: not one request may fail. First a plain restart (upgrade_layer=restart),
then an engine-config change (max_num_seqs halved, upgrade_layer=vllm_service), which restarts every
node with the new config. (benchmarks/cluster_bench.py runs the same on the lab and prints the time
per replica.) Then the same engine-config change through `site.yml --tags vllm_service` on the
serving cluster: the site's plan sees engines running and rolls one replica per batch (drained,
restarted, ready, put back) instead of restarting both replicas at once; not one request may fail.
test_3_secrets' site run puts the config back."""
import re
import time

from conftest import FAULTS, REPLICAS, REPO, one_line, served_by
from lab_testinfra import container_ip, wait_until

SITE = "- name: Site\n  ansible.builtin.import_playbook: %s/playbooks/site.yml\n" % REPO
UPGRADE = "- name: Upgrade\n  ansible.builtin.import_playbook: %s/playbooks/upgrade.yml\n" % REPO
NODES = [n for pair in REPLICAS.values() for n in pair]
REPLICA_OF = {n: r for r, pair in REPLICAS.items() for n in pair}
# The tasks that (re)start a worker, then its head: upgrade.yml's own for the restart layer, the
# vllm_service role's for a config change.
RESTART_TASKS = {"restart": ("Restart the workers (before their head, as at first start)", "Restart the head"),
                 "vllm_service": ("Start the workers", "Start the heads")}
_TASK = re.compile(r"^TASK \[(?:[^\]]* : )?(?P<task>[^\]]+)\]")
_CHANGED = re.compile(r"^changed: \[(?P<host>[^\]\s]+)")


def changed_order(output, tasks):
    """(task, host) for every host a task of TASKS changed, in the order the play reported them."""
    events, task = [], None
    for line in output.splitlines():
        match = _TASK.match(line)
        if match:
            task = match.group("task").strip()
            continue
        match = _CHANGED.match(line)
        if match and task in tasks:
            events.append((task, match.group("host")))
    return events


def play_under_load(run_play, lab_host, load, playbook, args, extra_vars):
    """PLAYBOOK (its text) with ARGS and EXTRA_VARS under the constant load through the balancer,
    then until each replica served a request again: (play result, client results, seconds the play
    took, each node's MainPID before)."""
    pid = "systemctl show -p MainPID --value vllm"
    before = {n: lab_host(n).check_output(pid) for n in NODES}
    lo = load()
    lo.start()
    time.sleep(3)
    t0 = time.monotonic()
    res = run_play(playbook, args=args, timeout=1800, extra_vars=extra_vars)
    t1 = time.monotonic()
    for head, _unused in REPLICAS.values():
        ip = container_ip(head)
        wait_until(lambda ip=ip: any(r["ok"] and served_by(r, ip) and r["start"] > t1 for r in lo.snapshot()),
                   120, what=f"{head} serving after the play")
    return res, lo.take(), t1 - t0, before


def rolling_under_load(run_play, lab_host, load, layer, extra_vars=None):
    """upgrade.yml for LAYER under the load: (results, play output, seconds); every node restarted,
    each replica back in the balancer, its worker restarted before its head."""
    pid = "systemctl show -p MainPID --value vllm"
    res, results, seconds, before = play_under_load(run_play, lab_host, load, UPGRADE,
                                                    ["-e", "upgrade_layer=" + layer], extra_vars)
    assert res.rc == 0, res
    out = one_line(res.output)
    per = re.findall(r"upgrade: replica (\S+) changed and back in the balancer after ([0-9.]+) s", out)
    bad = [r for r in results if not r["ok"]]
    FAULTS.append((f"rolling {layer} of two-node replicas (upgrade.yml)", len(results), len(bad), seconds,
                   "; ".join(f"{r} {float(s):.0f} s" for r, s in per) or "no replica line"))
    assert sorted(r for r, _unused in per) == sorted(REPLICAS), out[-3000:]
    assert not bad, sorted({str(r.get("error") or r.get("status")) for r in bad})
    for name in NODES:
        assert lab_host(name).check_output(pid) != before[name], f"{name} not restarted"
    worker_task, head_task = RESTART_TASKS[layer]
    events = changed_order(res.output, (worker_task, head_task))
    for replica, (head, worker) in REPLICAS.items():
        assert (worker_task, worker) in events and (head_task, head) in events, (replica, events)
        assert events.index((worker_task, worker)) < events.index((head_task, head)), (replica, events)
    return results, res


def test_rolling_restart_under_load_loses_no_request(run_play, lab_host, load):
    rolling_under_load(run_play, lab_host, load, "restart")


def test_rolling_engine_config_change_under_load_loses_no_request(run_play, lab_host, load):
    rolling_under_load(run_play, lab_host, load, "vllm_service", {
        "vllm_service_engine": {"max_num_seqs": 32, "max_num_batched_tokens": 2048,
                                "enable_chunked_prefill": True, "enable_prefix_caching": True}})
    for name in NODES:
        assert re.search(r"^max[-_]num[-_]seqs: 32$", lab_host(name).file("/etc/vllm/config.yaml").content_string,
                         re.M), name


def test_tagged_site_run_on_a_serving_cluster_rolls_one_replica_at_a_time(run_play, lab_host, load):
    """site.yml --tags vllm_service with an engine change, under load: every node restarted, one
    replica per batch (all of r1's restarts and its return to the balancer before r2 leaves it),
    0 failed requests."""
    pid = "systemctl show -p MainPID --value vllm"
    seqs = new_max_num_seqs(lab_host, 48)
    res, results, seconds, before = play_under_load(run_play, lab_host, load, SITE, ["--tags", "vllm_service"],
                                                    {"vllm_service_engine": dict(ENGINE, max_num_seqs=seqs)})
    assert res.rc == 0, one_line(res.output)[-3000:]
    bad = [r for r in results if not r["ok"]]
    out = one_line(res.output)
    FAULTS.append(("engine change by site.yml --tags vllm_service", len(results), len(bad), seconds,
                   "one replica per batch, drained around its restart"))
    assert "the cluster serves: one replica at a time" in out, out[-3000:]
    assert not bad, sorted({str(r.get("error") or r.get("status")) for r in bad})
    for name in NODES:
        assert lab_host(name).check_output(pid) != before[name], f"{name} not restarted"
        assert re.search(r"^max[-_]num[-_]seqs: %d$" % seqs, config_of(lab_host, name), re.M), name
    # The play's own record: each replica out of the balancer, its nodes restarted, back in, and
    # only then the next replica.
    assert_one_replica_at_a_time(steps_order(res.output), "restart")


def assert_one_replica_at_a_time(order, action):
    """ORDER (steps_order): each replica out of the balancer, ACTION on both its nodes, back in, and
    only then the next replica."""
    seen = [REPLICA_OF[host] for _step, host in order]
    assert "r2" in seen and seen.index("r2") > 0, order
    first_r2 = seen.index("r2")
    assert set(seen[:first_r2]) == {"r1"} and set(seen[first_r2:]) == {"r2"}, order
    for replica, (head, worker) in REPLICAS.items():
        mine = [step for step, host in order if REPLICA_OF[host] == replica]
        assert mine[0] == "drain" and mine[-1] == "undrain", (replica, order)
        assert (action, worker) in order and (action, head) in order, (replica, order)


# The rolling sequence's tasks (vllm_service's drain.yml, service.yml, undrain.yml), matched by the
# start of their names (the drain's and undrain's end with the replica's name).
_STEPS = (("Drain from every balancer", "drain"), ("Start the workers", "restart"), ("Start the heads", "restart"),
          ("Undrain in every balancer", "undrain"))


def steps_order(output, steps=_STEPS):
    """(step, host) of every changed task of STEPS (prefix of its name, step), by default the drain,
    restart and undrain, in the order the play reported them."""
    events, step = [], None
    for line in output.splitlines():
        match = _TASK.match(line)
        if match:
            task = match.group("task").strip()
            step = next((kind for prefix, kind in steps if task.startswith(prefix)), None)
            continue
        match = _CHANGED.match(line)
        if match and step and match.group("host") in REPLICA_OF:
            if (step, match.group("host")) not in events[-2:]:
                events.append((step, match.group("host")))
    return events


def new_max_num_seqs(lab_host, wanted):
    """WANTED, or another value when the engines run with it already (a rerun on the same lab): the
    change must be a change."""
    match = re.search(r"^max[-_]num[-_]seqs: (\d+)$", config_of(lab_host, REPLICAS["r1"][0]), re.M)
    return wanted if not match or int(match.group(1)) != wanted else wanted + 8


def canary_under_load(run_play, lab_host, load, tmp_path, engine, limits):
    """upgrade.yml, layer vllm_service, with the canary on, under the load: (play result, client
    results, seconds, the Markdown report, each node's MainPID before)."""
    extra = {"upgrade_canary": True, "upgrade_canary_levels": [1, 4], "upgrade_canary_max_tokens": 32,
             "upgrade_canary_requests_per_stream": 3, "upgrade_canary_report_dir": str(tmp_path),
             "vllm_service_engine": dict(ENGINE, **engine)}
    extra.update({"upgrade_canary_" + k: v for k, v in limits.items()})
    res, results, seconds, before = play_under_load(run_play, lab_host, load, UPGRADE,
                                                    ["-e", "upgrade_layer=vllm_service"], extra)
    reports = sorted(tmp_path.glob("canary-*.md"))
    assert len(reports) == 1, (list(tmp_path.iterdir()), one_line(res.output)[-3000:])
    return res, results, seconds, reports[0].read_text(encoding="utf-8"), before


ENGINE = {"max_num_batched_tokens": 2048, "enable_chunked_prefill": True, "enable_prefix_caching": True}
# Lenient on purpose: the lab's two cores are shared by both replicas and the clients, so a neutral
# change must pass with room to spare, and a replica that runs one sequence at a time still fails
# them by far (its TTFT at 4 streams is a queue of whole requests).
CANARY_LIMITS = {"max_ttft_ratio": 2.5, "max_itl_ratio": 2.5, "min_throughput_ratio": 0.4, "max_error_rate": 0.0}


def config_of(lab_host, name):
    return lab_host(name).file("/etc/vllm/config.yaml").content_string


def test_canary_rolls_back_a_worse_change_and_leaves_the_rest_untouched(run_play, lab_host, load, tmp_path):
    configs = {n: config_of(lab_host, n) for n in NODES}
    res, results, seconds, report, before = canary_under_load(
        run_play, lab_host, load, tmp_path, {"max_num_seqs": 1}, CANARY_LIMITS)
    out = one_line(res.output)
    bad = [r for r in results if not r["ok"]]
    FAULTS.append(("canary with max_num_seqs 1 (rolled back)", len(results), len(bad), seconds,
                   "r1 measured against r2, restored, r2 untouched"))
    assert res.rc != 0 and "canary: replica r1 did not measure up against r2" in out, out[-3000:]
    assert re.search(r"(max_ttft_ratio|min_throughput_ratio): ", out), out[-3000:]
    assert "# Canary" in report and ": FAIL" in report and "| TTFT p50 (s) |" in report, report[:2000]
    assert not bad, sorted({str(r.get("error") or r.get("status")) for r in bad})
    pid = "systemctl show -p MainPID --value vllm"
    for name in REPLICAS["r1"]:
        assert config_of(lab_host, name) == configs[name], f"{name}: the previous configuration is not back"
        assert lab_host(name).check_output(pid) != before[name], f"{name} not restarted"
        assert not lab_host(name).run("ls /etc/vllm/*~ 2>/dev/null").stdout.strip(), "backups left behind"
    for name in REPLICAS["r2"]:
        assert config_of(lab_host, name) == configs[name], f"{name} was changed"
        assert lab_host(name).check_output(pid) == before[name], f"{name} was restarted"


def test_canary_passes_a_neutral_change_and_the_roll_goes_on(run_play, lab_host, load, tmp_path):
    seqs = new_max_num_seqs(lab_host, 40)
    res, results, seconds, report, _before = canary_under_load(
        run_play, lab_host, load, tmp_path, {"max_num_seqs": seqs}, CANARY_LIMITS)
    out = one_line(res.output)
    bad = [r for r in results if not r["ok"]]
    FAULTS.append((f"canary with max_num_seqs {seqs} (passed, rolled on)", len(results), len(bad), seconds,
                   "r1 measured against r2, then r2 changed"))
    assert res.rc == 0, out[-3000:]
    assert ": PASS" in report, report[:2000]
    assert not bad, sorted({str(r.get("error") or r.get("status")) for r in bad})
    for name in NODES:
        assert re.search(r"^max[-_]num[-_]seqs: %d$" % seqs, config_of(lab_host, name), re.M), name
