"""monitoring_prometheus_install=false: on monitoring-ext, a Prometheus of the site's own (Debian's
package and a configuration of its own, from prepare) gets the cluster's scrape targets (file_sd
files) and rules from the role, checked by its promtool, and picks them up; the role installs,
rewrites and restarts nothing of it, and no second Prometheus appears.

Queries go to that Prometheus' HTTP API on the host's loopback (curl inside the container)."""
import json

import pytest
from test_monitoring import EXPECTED_ALERTS, api, eventually

TARGETS = "/etc/prometheus/llmops-targets"  # converge.yml: monitoring_external_file_sd_dir
RULES = "/etc/prometheus/llmops-rules/llmops.rules.yml"  # monitoring_external_rules_dir
JOBS = ("vllm", "node", "nginx", "nginx_log", "dcgm")


@pytest.fixture(scope="module")
def ext(lab_host, lab_groups):
    return lab_host(lab_groups["monitoring_external"][0])


def test_targets_and_rules_are_written_and_promtool_valid(ext, lab_groups):
    for job in JOBS:
        f = ext.file(f"{TARGETS}/llmops-{job}.json")
        assert f.is_file and f.mode == 0o644, job
    groups = {job: json.loads(ext.file(f"{TARGETS}/llmops-{job}.json").content_string) for job in JOBS}
    assert [t for g in groups["vllm"] for t in g["targets"]] == ["monitoring-head1:8000"]
    assert groups["vllm"][0]["labels"] == {"host": "monitoring-head1", "replica": "r1"}
    assert sorted(t for g in groups["node"] for t in g["targets"]) == sorted(f"{h}:9100" for h in lab_groups["cluster"])
    assert groups["dcgm"] == []  # cluster_has_gpu is false
    res = ext.run(f"promtool check rules {RULES}")
    assert res.rc == 0 and "SUCCESS" in res.stdout + res.stderr, res.stdout + res.stderr
    res = ext.run("promtool check config /etc/prometheus/prometheus.yml")
    assert res.rc == 0, res.stdout + res.stderr


def test_the_existing_prometheus_scrapes_the_targets_and_loads_the_rules(ext, lab_groups):
    def targets_up():
        active = api(ext, "/api/v1/targets", state="active")["activeTargets"]
        by_job = {}
        for t in active:
            assert t["health"] == "up", (t["labels"], t.get("lastError"))
            assert t["discoveredLabels"]["__meta_filepath"].startswith(TARGETS + "/"), t["discoveredLabels"]
            by_job.setdefault(t["labels"]["job"], set()).add(t["labels"]["instance"])
        assert set(by_job) == {"vllm", "node", "nginx", "nginx_log"}, by_job
        return by_job

    # The engine on the head may still be loading (prepare starts it): a CPU engine takes minutes.
    by_job = eventually(targets_up, timeout=480, interval=5)
    assert by_job["vllm"] == {"monitoring-head1:8000"}
    assert by_job["node"] == {f"{h}:9100" for h in lab_groups["cluster"]}

    def rules_ok():
        rules = [r for g in api(ext, "/api/v1/rules")["groups"] for r in g["rules"]]
        assert {r["name"] for r in rules if r["type"] == "alerting"} == EXPECTED_ALERTS
        assert all(r["health"] == "ok" for r in rules), [(r["name"], r.get("lastError")) for r in rules]
        return rules

    rules = eventually(rules_ok, timeout=60)
    assert {r["name"] for r in rules if r["type"] == "recording"} >= {"llmops:vllm_generation_tokens:rate1m"}


def test_nothing_of_prometheus_is_installed_rewritten_or_restarted(ext):
    # The package list is the one prepare recorded: the role installed nothing (no second Prometheus,
    # no exporter: the host is outside `cluster`).
    now = ext.check_output("dpkg-query -W -f '${Package} ${Version}\\n'")
    assert now.strip() == ext.file("/root/existing-prometheus/packages.txt").content_string.strip()
    # The site's configuration and arguments are untouched; the server was reloaded, never restarted.
    assert ext.run("sha256sum -c /root/existing-prometheus/config.sha256").rc == 0
    assert ext.check_output("systemctl show -p MainPID --value prometheus") == \
        ext.file("/root/existing-prometheus/pid").content_string.strip()
    assert ext.check_output("pgrep -cx prometheus") == "1"
    for path in ("/usr/local/bin/prometheus", "/etc/systemd/system/prometheus.service",
                 "/etc/systemd/system/prometheus.service.d/llmops-hardening.conf", "/var/lib/llmops-monitoring"):
        assert not ext.file(path).exists, path
    # The reload went through: Prometheus' last configuration reload succeeded.
    assert api(ext, "/api/v1/status/runtimeinfo")["reloadConfigSuccess"] is True


def test_a_rule_promtool_rejects_never_reaches_the_existing_prometheus(ext, lab_groups, run_converge):
    before = ext.file(RULES).sha256sum
    broken = [{"name": "broken", "rules": [{"alert": "Broken", "expr": "rate(vllm:num_requests_waiting[5m]"}]}]
    rc, out = run_converge({"monitoring_rule_groups_extra": broken}, limit=lab_groups["monitoring_external"][0])
    assert rc != 0 and "failed to validate" in out, out[-3000:]
    assert ext.file(RULES).sha256sum == before
    assert "Broken" not in json.dumps(api(ext, "/api/v1/rules"))
