"""Rolling upgrades on real engines: playbooks/upgrade.yml pushes an engine-config change
(max_num_seqs halved) to every replica, one at a time (drain, let in-flight requests finish, change,
health-gate, undrain), under a constant load through the balancer: not one request may fail.
The change is a restart of every replica with a new config, so it is also the full rolling restart.
(benchmarks/cluster_bench.py runs the same on the 4-replica lab: a plain restart, the change, and
the change back, and prints the time per replica.) test_3_secrets' site run puts the config back."""
import re
import time

from conftest import FAULTS, HEADS, REPO, one_line, served_by
from lab_testinfra import container_ip, wait_until

UPGRADE = "- name: Upgrade\n  ansible.builtin.import_playbook: %s/playbooks/upgrade.yml\n" % REPO


def test_rolling_engine_config_change_under_load_loses_no_request(run_play, lab_host, load):
    before = {n: lab_host(n).check_output("systemctl show -p MainPID --value vllm") for n in HEADS}
    lo = load()
    lo.start()
    time.sleep(3)
    t0 = time.monotonic()
    res = run_play(UPGRADE, args=["-e", "upgrade_layer=vllm_service"], timeout=1800, extra_vars={
        "vllm_service_engine": {"max_num_seqs": 32, "max_num_batched_tokens": 2048,
                                "enable_chunked_prefill": True, "enable_prefix_caching": True}})
    t1 = time.monotonic()
    seconds = t1 - t0
    assert res.rc == 0, res
    # Both replicas serve again under the load: the balancer put each back.
    for ip in {container_ip(n) for n in HEADS}:
        wait_until(lambda ip=ip: any(r["ok"] and served_by(r, ip) and r["start"] > t1 for r in lo.snapshot()),
                   120, what=f"{ip} serving after the upgrade")
    results = lo.take()
    bad = [r for r in results if not r["ok"]]
    out = one_line(res.output)
    per = re.findall(r"upgrade: replica (\S+) changed and back in the balancer after ([0-9.]+) s", out)
    FAULTS.append(("rolling engine-config change (upgrade.yml)", len(results), len(bad), seconds,
                   "; ".join(f"{r} {float(s):.0f} s" for r, s in per) or "no replica line"))
    assert sorted(r for r, _unused in per) == sorted(HEADS), out[-3000:]
    assert not bad, sorted({str(r.get("error") or r.get("status")) for r in bad})
    for name in HEADS:
        h = lab_host(name)
        assert h.check_output("systemctl show -p MainPID --value vllm") != before[name], f"{name} not restarted"
        assert re.search(r"^max[-_]num[-_]seqs: 32$", h.file("/etc/vllm/config.yaml").content_string, re.M)
