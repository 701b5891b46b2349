"""Rolling upgrades of two-node replicas: playbooks/upgrade.yml, one replica at a time (drain, let
in-flight requests finish, restart the worker then the head, health-gate, undrain), under a constant
load through the balancer: not one request may fail. First a plain restart (upgrade_layer=restart),
then an engine-config change (max_num_seqs halved, upgrade_layer=vllm_service), which restarts every
node with the new config. (benchmarks/cluster_bench.py runs the same on the lab and prints the time
per replica.) test_3_secrets' site run puts the config back."""
import re
import time

from conftest import FAULTS, REPLICAS, REPO, one_line, served_by
from lab_testinfra import container_ip, wait_until

UPGRADE = "- name: Upgrade\n  ansible.builtin.import_playbook: %s/playbooks/upgrade.yml\n" % REPO
NODES = [n for pair in REPLICAS.values() for n in pair]
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


def rolling_under_load(run_play, lab_host, load, layer, extra_vars=None):
    """upgrade.yml for LAYER under the load: (results, play output, seconds); every node restarted,
    each replica back in the balancer, its worker restarted before its head."""
    pid = "systemctl show -p MainPID --value vllm"
    before = {n: lab_host(n).check_output(pid) for n in NODES}
    lo = load()
    lo.start()
    time.sleep(3)
    t0 = time.monotonic()
    res = run_play(UPGRADE, args=["-e", "upgrade_layer=" + layer], timeout=1800, extra_vars=extra_vars)
    t1 = time.monotonic()
    assert res.rc == 0, res
    # Both replicas serve again under the load: the balancer put each back.
    for head, _unused in REPLICAS.values():
        ip = container_ip(head)
        wait_until(lambda ip=ip: any(r["ok"] and served_by(r, ip) and r["start"] > t1 for r in lo.snapshot()),
                   120, what=f"{head} serving after the upgrade")
    results = lo.take()
    out = one_line(res.output)
    per = re.findall(r"upgrade: replica (\S+) changed and back in the balancer after ([0-9.]+) s", out)
    bad = [r for r in results if not r["ok"]]
    FAULTS.append((f"rolling {layer} of two-node replicas (upgrade.yml)", len(results), len(bad), t1 - t0,
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
