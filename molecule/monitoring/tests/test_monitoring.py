"""Behaviour of the monitoring role: Prometheus on the monitoring host really scrapes the vLLM CPU
engine, the exporters and mtail; the rules are loaded; a bad rule never replaces the working one.

Every query goes to Prometheus' HTTP API from inside the monitoring host (curl on its loopback).
"""
import hashlib
import json
import os
import shlex
import subprocess
import sys
import time

import pytest

PROM = "http://127.0.0.1:9090"
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SCENARIO = os.path.join(ROOT, "molecule", "monitoring")

EXPECTED_ALERTS = {
    "VLLMQueueGrowing", "VLLMKVCacheNearlyFull", "VLLMReplicaDown", "VLLMTimeToFirstTokenHigh",
    "VLLMSpeculativeAcceptanceLow", "GPUMemoryNearlyFull", "BalancerHigh5xxRatio",
    "BalancerNginxDown", "ExporterDown", "EdgeAddressSplitBrain", "EdgeAddressNotHeld", "EdgeSingleBalancer",
    "VllmRouterDown", "VllmRouterNoHealthyWorker",
}


@pytest.fixture(scope="module")
def mon(lab_host, lab_groups):
    return lab_host(lab_groups["monitoring"][0])


@pytest.fixture(scope="module")
def heads(lab_groups):
    return lab_groups["vllm_heads"]


def api(mon, path, **params):
    args = " ".join("--data-urlencode " + shlex.quote(f"{k}={v}") for k, v in params.items())
    out = mon.check_output(f"curl -sS --fail -G {args} {PROM}{path}")
    doc = json.loads(out)
    assert doc["status"] == "success", doc
    return doc["data"]


def query(mon, expr):
    return api(mon, "/api/v1/query", query=expr)["result"]


def eventually(check, timeout=120, interval=3):
    """Retry check() until it returns without AssertionError (bounded in time)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return check()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(interval)


def test_every_target_is_up_and_gpu_targets_are_skipped(mon, heads, lab_groups):
    def check():
        targets = api(mon, "/api/v1/targets", state="active")["activeTargets"]
        down = [(t["labels"]["job"], t["labels"]["instance"], t["health"], t.get("lastError")) for t in targets
                if t["health"] != "up"]
        assert not down, down
        return targets

    # The engine was started in prepare and loads while check, converge and idempotence run; on a
    # loaded 2-core machine a CPU engine can take minutes to answer.
    targets = eventually(check, timeout=480, interval=5)
    by_job = {}
    for t in targets:
        by_job.setdefault(t["labels"]["job"], set()).add(t["labels"]["instance"])
    # cluster_has_gpu is false in the lab: no DCGM target at all.
    assert set(by_job) == {"prometheus", "vllm", "node", "nginx", "nginx_log"}, by_job
    assert by_job["vllm"] == {f"{h}:8000" for h in heads}
    assert by_job["node"] == {f"{h}:9100" for h in lab_groups["cluster"]}
    balancers = lab_groups["balancers"]
    assert by_job["nginx"] == {f"{h}:9113" for h in balancers}
    assert by_job["nginx_log"] == {f"{h}:3903" for h in balancers}
    replica = {t["labels"]["instance"]: t["labels"].get("replica") for t in targets if t["labels"]["job"] == "vllm"}
    assert replica == {"monitoring-head1:8000": "r1"}  # vllm_service_replica from host_vars


def test_live_vllm_series_for_every_head(mon, heads):
    def check():
        res = query(mon, 'count by (instance) ({__name__=~"vllm:.+", job="vllm"})')
        counts = {r["metric"]["instance"]: int(r["value"][1]) for r in res}
        assert set(counts) == {f"{h}:8000" for h in heads}, counts
        return counts

    counts = eventually(check)
    assert all(n > 10 for n in counts.values()), counts
    # The gauges the alerts use exist, with the real names (not the seed's gpu_memory_utilization).
    for name in ("vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc"):
        assert {r["metric"]["instance"] for r in query(mon, name)} == {f"{h}:8000" for h in heads}, name


def test_rules_are_loaded_and_evaluate(mon):
    def check():
        groups = api(mon, "/api/v1/rules")["groups"]
        rules = [r for g in groups for r in g["rules"]]
        assert {r["name"] for r in rules if r["type"] == "alerting"} == EXPECTED_ALERTS
        assert all(r["health"] == "ok" for r in rules), [(r["name"], r["health"], r.get("lastError")) for r in rules]
        return groups

    groups = eventually(check, timeout=60)
    expected = {"llmops-vllm-recording", "llmops-vllm-alerts", "llmops-gpu-alerts",
                "llmops-balancer-alerts", "llmops-exporter-alerts"}
    assert {g["name"] for g in groups} >= expected
    for g in groups:
        for r in g["rules"]:
            if r["type"] == "alerting":
                assert r["annotations"]["runbook"], r["name"]
    # Nothing is wrong in the lab: no alert fires.
    assert [a for a in api(mon, "/api/v1/alerts")["alerts"] if a["state"] == "firing"] == []


def test_traffic_through_the_balancer_is_counted(mon):
    ok = 0
    for i in range(6):  # bounded: 6 completions and 3 failing requests, all on the host's loopback
        body = json.dumps({"model": "tiny-llama", "prompt": f"{i} hello world", "max_tokens": 8})
        code = mon.check_output(
            "curl -s -o /dev/null -w '%{http_code}' --max-time 60 -H 'Content-Type: application/json' "
            f"-d {shlex.quote(body)} http://127.0.0.1/v1/completions")
        ok += code == "200"
    assert ok == 6
    for _unused in range(3):
        assert mon.check_output("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1/broken") == "502"

    def check():
        value = {}
        for expr in ('sum(vllm:request_success_total)', 'sum(vllm:generation_tokens_total)',
                     'sum(nginx_http_responses_total{code="200"})', 'sum(nginx_http_responses_total{code="502"})',
                     'sum(nginx_connections_accepted)', 'min(nginx_up)'):
            res = query(mon, expr)
            value[expr] = float(res[0]["value"][1]) if res else 0.0
        assert value['sum(vllm:request_success_total)'] >= 6, value
        assert value['sum(vllm:generation_tokens_total)'] >= 6, value
        assert value['sum(nginx_http_responses_total{code="200"})'] >= 6, value
        assert value['sum(nginx_http_responses_total{code="502"})'] >= 3, value
        assert value['sum(nginx_connections_accepted)'] >= 9, value
        assert value['min(nginx_up)'] == 1, value
        # Speculative decoding (draft_model on the CPU engine): the recording rule's mean accepted length
        # (random tiny models: few or no drafts accepted, so about 1).
        mal = query(mon, 'llmops:vllm_spec_mean_accepted_length:rate5m{replica="r1"}')
        assert mal and 1.0 <= float(mal[0]["value"][1]) <= 4.0, mal  # 1 + accepted/drafts, 3 tokens drafted
        return value

    eventually(check, timeout=60)


def test_no_dcgm_exporter_on_a_host_without_gpu(lab_host, heads):
    for h in heads:
        assert lab_host(h).run("systemctl cat llmops-dcgm-exporter").rc != 0


def test_exporters_run_as_their_packages_units(lab_host, lab_groups):
    for h in lab_groups["cluster"]:
        assert lab_host(h).service("prometheus-node-exporter").is_running, h
    for h in lab_groups["balancers"]:
        host = lab_host(h)
        assert host.service("prometheus-nginx-exporter").is_running
        assert host.service("mtail").is_running
        # stub_status is loopback-only: the exporter reads it, other hosts do not.
        assert "Active connections" in host.check_output("curl -s http://127.0.0.1:8081/nginx_status")


def _converge(extra_vars, limit):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".cache", "collections"),
               ANSIBLE_ROLES_PATH=os.path.join(ROOT, "roles"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"),
           "-i", os.environ["MOLECULE_INVENTORY_FILE"], "--limit", limit,
           "-e", json.dumps(extra_vars), os.path.join(SCENARIO, "converge.yml")]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)


def _digest(host, path):
    return hashlib.sha256(host.file(path).content).hexdigest()


def test_a_rule_that_promtool_rejects_never_replaces_the_working_rules(mon, lab_groups):
    before = _digest(mon, "/etc/prometheus/rules/llmops.rules.yml")
    broken = [{"name": "broken", "rules": [{"alert": "Broken", "expr": "rate(vllm:num_requests_waiting[5m]"}]}]
    res = _converge({"monitoring_rule_groups_extra": broken}, lab_groups["monitoring"][0])
    out = res.stdout + res.stderr
    assert res.returncode != 0, out[-3000:]
    # file_set names the file, says nothing was replaced and passes on promtool's own words.
    assert "the check of the new /etc/prometheus/rules/llmops.rules.yml failed" in out, out[-3000:]
    assert "nothing of this set was replaced" in out and "unclosed left parenthesis" in out, out[-3000:]
    assert _digest(mon, "/etc/prometheus/rules/llmops.rules.yml") == before
    assert "Broken" not in mon.file("/etc/prometheus/rules/llmops.rules.yml").content_string
    # Prometheus kept its rules and its last reload succeeded.
    assert api(mon, "/api/v1/status/runtimeinfo")["reloadConfigSuccess"] is True
    assert "Broken" not in json.dumps(api(mon, "/api/v1/rules"))


def test_bad_input_fails_before_any_change_naming_the_variable(mon, lab_groups):
    before = _digest(mon, "/etc/prometheus/prometheus.yml")
    res = _converge({"monitoring_scrape_interval": "fast"}, lab_groups["monitoring"][0])
    out = res.stdout + res.stderr
    assert res.returncode != 0
    # the syntax check, first task of the preflight, names the variable and its class
    assert "monitoring_scrape_interval: 'fast' must be a Prometheus duration" in out, out[-3000:]
    res = _converge({"monitoring_prometheus_install_method": "zip"}, lab_groups["monitoring"][0])
    out = res.stdout + res.stderr
    assert res.returncode != 0
    assert "monitoring_prometheus_install_method" in out and "package, tarball" in out, out[-3000:]
    assert _digest(mon, "/etc/prometheus/prometheus.yml") == before
