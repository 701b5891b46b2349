"""llmops.vllm_cluster.reset on the whole lab cluster, the last of the scenario's tests (it removes
what converge installed; runs with LLMOPS_CLUSTER_FAULTS=1, like the test_2_* files, conftest.py):
on every host no unit of the collection is loaded and the distribution's services the layers ran
(nginx, keepalived, Prometheus, the exporters) are stopped and disabled, the collection's files are
gone, the data is kept (the staged model, the vLLM build, Prometheus' TSDB, and the engine's account
that owns them), nginx's hold is released, the report says what was removed and kept, a second run
changes nothing, and neither the virtual address, nor a balancer, nor an engine answers."""
import re
import socket

import pytest
from conftest import BALANCERS, HEADS, REPLICAS, VIP, one_line
from lab_testinfra import container_ip

RESET = "- name: Reset\n  ansible.builtin.import_playbook: llmops.vllm_cluster.reset\n"
NODES = [n for pair in REPLICAS.values() for n in pair]
MONITORING = "cluster-lb1"
EVERY = NODES + list(BALANCERS)
# The collection's own units: gone from systemd (LoadState not-found) once the reset ran.
OWN_UNITS = {
    "all": ["llmops-firewall.service", "llmops-netplan-rollback.timer"],
    "nodes": ["vllm.service", "vllm-head-watch.service"],
    "balancers": ["llmops-keepalived-metrics.timer", "llmops-keepalived-metrics.service", "llmops-vllm-router.service",
                  "llmops-vllm-router-metrics.timer", "llmops-response-cache.service"],
}
# The distribution's services the layers enabled and started: still installed, stopped and disabled.
SERVICES = {
    "all": ["prometheus-node-exporter.service"],
    "balancers": ["nginx.service", "keepalived.service", "prometheus-nginx-exporter.service", "mtail.service"],
    "monitoring": ["prometheus.service"],
}
GONE = {
    "all": ["/etc/llmops", "/etc/systemd/system/llmops-firewall.service", "/usr/local/libexec/llmops",
            "/etc/systemd/system/prometheus-node-exporter.service.d", "/usr/local/sbin/llmops-netplan-rollback"],
    "nodes": ["/etc/vllm", "/etc/systemd/system/vllm.service", "/etc/systemd/system/vllm.service.d"],
    "balancers": ["/etc/nginx/conf.d/llmops-vllm.conf", "/etc/nginx/llmops", "/etc/systemd/system/nginx.service.d",
                  "/etc/keepalived/keepalived.conf", "/var/lib/llmops", "/etc/systemd/system/llmops-keepalived-metrics.timer",
                  "/etc/mtail/llmops_nginx.mtail", "/var/lib/prometheus/node-exporter/llmops_keepalived.prom"],
    "monitoring": ["/etc/prometheus/rules/llmops.rules.yml"],
}
KEPT = {
    "nodes": ["/var/lib/vllm/models/tiny-llama", "/opt/vllm/current", "/var/cache/vllm"],
    "monitoring": ["/var/lib/prometheus/metrics2"],
}


def _of(table, name):
    keys = ["all"] + (["nodes"] if name in NODES else []) + (["balancers"] if name in BALANCERS else []) \
        + (["monitoring"] if name == MONITORING else [])
    return [item for key in keys for item in table.get(key, [])]


def _recap(output):
    """{host: (changed, failed, unreachable)} of the play recap."""
    return {m.group(1): (int(m.group(2)), int(m.group(4)), int(m.group(3))) for m in re.finditer(
        r"^(\S+)\s+: ok=\d+\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", output, re.M)}


def _answers(address, port):
    try:
        with socket.create_connection((address, port), timeout=3):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def reset(run_play, lab_host):
    """The reset with its confirmation, once for this file (the other tests read what it left)."""
    assert lab_host(HEADS[0]).file("/etc/vllm/config.yaml").exists, "converge left no engine to reset"
    return run_play(RESET, extra_vars={"reset_confirm": "yes"}, timeout=1800)


def test_reset_runs_on_every_host_and_reports(reset):
    out = one_line(reset.output)
    assert reset.rc == 0, out[-4000:]
    recap = _recap(reset.output)
    assert sorted(recap) == sorted(EVERY), recap
    assert all(failed == 0 and unreachable == 0 for _changed, failed, unreachable in recap.values()), recap
    assert all(changed > 0 for changed, _f, _u in recap.values()), recap
    assert "removed:" in out and "kept:" in out
    assert "/var/lib/vllm/models (models data: -e reset_remove_data=models removes it)" in out, out[-4000:]
    assert "user vllm (owns the kept models, caches data)" in out
    # The whole cluster went: no balancer stayed to drain a replica from.
    assert "stay drained on" not in out


@pytest.mark.parametrize("name", EVERY)
def test_no_unit_of_the_collection_is_left(reset, lab_host, name):
    host = lab_host(name)
    for unit in _of(OWN_UNITS, name):
        load = host.run("systemctl show -p LoadState --value %s" % unit).stdout.strip()
        assert load == "not-found", "%s: %s is %s" % (name, unit, load)
    for unit in _of(SERVICES, name):
        enabled = host.run("systemctl is-enabled %s" % unit).stdout.strip()
        active = host.run("systemctl is-active %s" % unit).stdout.strip()
        assert enabled != "enabled" and active != "active", "%s: %s is %s, %s" % (name, unit, enabled, active)
    listed = host.run("systemctl list-units --all --no-legend --plain 'vllm*' 'llmops-*'").stdout.strip()
    assert listed == "", "%s still lists %s" % (name, listed)


@pytest.mark.parametrize("name", EVERY)
def test_files_are_gone_and_data_is_kept(reset, lab_host, name):
    host = lab_host(name)
    left = [p for p in _of(GONE, name) if host.file(p).exists]
    assert not left, "%s: %s" % (name, left)
    lost = [p for p in _of(KEPT, name) if not host.file(p).exists]
    assert not lost, "%s lost %s" % (name, lost)
    if name in NODES:
        assert host.user("vllm").exists, "%s: the account that owns the kept model went" % name
    if name in BALANCERS:
        status = host.check_output("dpkg-query -W -f='${db:Status-Abbrev}' nginx")
        assert status.startswith("ii"), "%s: nginx is %r (installed, no hold expected)" % (name, status)
        assert not host.user("keepalived_script").exists
        assert host.run("nft list table inet llmops").rc != 0, "%s: the firewall's table is still loaded" % name


def test_nothing_answers_any_more(reset):
    assert not _answers(VIP, 80), "the virtual address %s still answers" % VIP
    for name in BALANCERS:
        assert not _answers(container_ip(name), 80), "%s's nginx still answers" % name
    for name in HEADS:
        assert not _answers(container_ip(name), 8000), "%s's engine still answers" % name


def test_a_second_reset_changes_nothing(reset, run_play):
    again = run_play(RESET, extra_vars={"reset_confirm": "yes"}, timeout=1800)
    assert again.rc == 0, one_line(again.output)[-4000:]
    recap = _recap(again.output)
    assert sorted(recap) == sorted(EVERY), recap
    changed = {host: c for host, (c, _f, _u) in recap.items() if c}
    assert not changed, "a second reset changed %s:\n%s" % (changed, again.output[-4000:])
    assert "removed: []" in one_line(again.output)
