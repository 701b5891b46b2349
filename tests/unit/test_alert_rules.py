"""The monitoring role's alert rules and its mtail program, tested with the real tools.

The rules template (roles/monitoring_prometheus/templates/llmops.rules.yml.j2) is rendered by Ansible itself
with the monitoring role's defaults, then checked with `promtool check rules` and unit-tested with
`promtool test rules` (tests/unit/rules/llmops-alerts.test.yml: every alert fires in one case and
stays silent in another). promtool comes from Debian's `prometheus` package, installed here with
apt-get when missing; the mtail program is run by Debian's `mtail` on a sample nginx access log.
"""
import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml
from real_tools import ansible_bin as _ansible_bin  # tests/unit
from real_tools import apt_tool as _apt_tool

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROLE = os.path.join(ROOT, "roles", "monitoring")
RULES_TEMPLATE = os.path.join(ROOT, "roles", "monitoring_prometheus", "templates", "llmops.rules.yml.j2")
RULES_TESTS = os.path.join(ROOT, "tests", "unit", "rules", "llmops-alerts.test.yml")
MTAIL_PROG_DIR = os.path.join(ROOT, "roles", "monitoring_exporters", "files", "mtail")


@pytest.fixture(scope="session")
def promtool():
    return _apt_tool("promtool", "prometheus")


@pytest.fixture(scope="session")
def mtail():
    return _apt_tool("mtail", "mtail")


def render_rules(dest, **overrides):
    """Render the rules template with Ansible (the role's defaults plus overrides) into dest."""
    ansible = _ansible_bin()
    assert ansible, "ansible is not installed (make venv && . tests/env.sh)"
    extra = {"ansible_facts": {"architecture": "x86_64"}, "ansible_python_interpreter": sys.executable}
    extra.update(overrides)
    cmd = [
        ansible, "localhost", "-c", "local", "-i", "localhost,",
        "-m", "ansible.builtin.template", "-a", f"src={RULES_TEMPLATE} dest={dest}",
        "-e", "@" + os.path.join(ROLE, "defaults", "main.yml"), "-e", json.dumps(extra),
    ]
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    res = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env, cwd=ROOT)
    assert res.returncode == 0, f"rendering the rules failed:\n{res.stdout}\n{res.stderr}"
    return dest


@pytest.fixture(scope="session")
def rules_dir(tmp_path_factory):
    """A directory with the rendered rules and the promtool tests beside them."""
    d = tmp_path_factory.mktemp("rules")
    render_rules(str(d / "llmops.rules.yml"))
    shutil.copy(RULES_TESTS, d / "llmops-alerts.test.yml")
    return d


@pytest.fixture(scope="session")
def rules(rules_dir):
    with open(rules_dir / "llmops.rules.yml", encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def alerts_of(rules_doc):
    return [r for g in rules_doc["groups"] for r in g["rules"] if "alert" in r]


def test_rules_pass_promtool_check(promtool, rules_dir):
    res = subprocess.run([promtool, "check", "rules", str(rules_dir / "llmops.rules.yml")],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout


def test_rules_pass_promtool_unit_tests(promtool, rules_dir):
    res = subprocess.run([promtool, "test", "rules", "llmops-alerts.test.yml"], cwd=rules_dir,
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout


EXPECTED_ALERTS = {
    "VLLMQueueGrowing", "VLLMKVCacheNearlyFull", "VLLMReplicaDown", "VLLMTimeToFirstTokenHigh",
    "VLLMSpeculativeAcceptanceLow", "GPUMemoryNearlyFull", "BalancerHigh5xxRatio",
    "BalancerNginxDown", "ExporterDown", "EdgeAddressSplitBrain", "EdgeAddressNotHeld", "EdgeSingleBalancer",
    "VllmRouterDown", "VllmRouterNoHealthyWorker",
}


def test_every_required_alert_exists_with_runbook_and_severity(rules):
    alerts = alerts_of(rules)
    assert {a["alert"] for a in alerts} == EXPECTED_ALERTS
    for a in alerts:
        ann = a.get("annotations", {})
        assert ann.get("runbook", "").strip(), f"{a['alert']} has no runbook annotation"
        assert "docs/roles/monitoring.md#" + a["alert"].lower() in ann["runbook"], a["alert"]
        assert ann.get("summary") and ann.get("description"), a["alert"]
        assert a["labels"]["severity"] in ("warning", "critical"), a["alert"]


def test_every_alert_is_unit_tested_firing_and_silent(rules):
    with open(RULES_TESTS, encoding="utf-8") as fh:
        tests = yaml.safe_load(fh)["tests"]
    fires, silent = set(), set()
    for t in tests:
        for case in t.get("alert_rule_test", []):
            (fires if case["exp_alerts"] else silent).add(case["alertname"])
    names = {a["alert"] for a in alerts_of(rules)}
    assert names <= fires, f"alerts never shown firing: {sorted(names - fires)}"
    assert names <= silent, f"alerts never shown silent: {sorted(names - silent)}"


def test_rules_use_the_seed_threshold_and_real_vllm_metric_names(rules):
    by_name = {a["alert"]: a for a in alerts_of(rules)}
    assert "vllm:num_requests_waiting" in by_name["VLLMQueueGrowing"]["expr"]
    assert by_name["VLLMQueueGrowing"]["expr"].rstrip().endswith("> 5")
    assert "vllm:kv_cache_usage_perc" in by_name["VLLMKVCacheNearlyFull"]["expr"]
    text = json.dumps(rules)
    # The seed's `vllm:gpu_memory_utilization` and v0's gpu_cache_usage_perc are not vLLM metrics.
    assert "gpu_memory_utilization" not in by_name["GPUMemoryNearlyFull"]["expr"]
    assert "gpu_cache_usage_perc" not in text


def test_a_changed_threshold_breaks_the_unit_tests(promtool, tmp_path):
    """The promtool tests really depend on the thresholds: raise the queue threshold and they fail."""
    render_rules(str(tmp_path / "llmops.rules.yml"), monitoring_alert_queue_waiting=10)
    shutil.copy(RULES_TESTS, tmp_path / "llmops-alerts.test.yml")
    res = subprocess.run([promtool, "test", "rules", "llmops-alerts.test.yml"], cwd=tmp_path,
                         capture_output=True, text=True, check=False)
    assert res.returncode != 0
    assert "VLLMQueueGrowing" in res.stdout + res.stderr


def test_extra_rule_groups_are_appended_and_valid(promtool, tmp_path):
    extra = [{"name": "site-extra", "rules": [
        {"alert": "SiteTest", "expr": "vector(1) > 2", "labels": {"severity": "warning"},
         "annotations": {"summary": "s", "runbook": "r"}}]}]
    path = render_rules(str(tmp_path / "llmops.rules.yml"), monitoring_rule_groups_extra=extra,
                        monitoring_runbook_base_url="https://runbooks.example.invalid/monitoring")
    res = subprocess.run([promtool, "check", "rules", path], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    with open(path, encoding="utf-8") as fh:
        doc = yaml.safe_load(fh)
    assert doc["groups"][-1]["name"] == "site-extra"
    for a in alerts_of(doc):
        if a["alert"] != "SiteTest":
            assert a["annotations"]["runbook_url"] == "https://runbooks.example.invalid/monitoring#" + a["alert"].lower()


NGINX_LOG = """\
10.89.1.2 - - [02/Dec/2026:17:00:01 +0000] "POST /v1/completions HTTP/1.1" 200 512 "-" "curl/8.0"
10.89.1.2 - - [02/Dec/2026:17:00:02 +0000] "POST /v1/completions HTTP/1.1" 502 157 "-" "curl/8.0"
10.89.1.2 - - [02/Dec/2026:17:00:03 +0000] "GET /v1/models HTTP/1.1" 200 - "-" "python-httpx/0.27"
10.89.1.2 - - [02/Dec/2026:17:00:04 +0000] "\\x16\\x03\\x01" 400 157 "-" "-"
10.89.1.2 - user [02/Dec/2026:17:00:05 +0000] "POST /v1/chat/completions HTTP/1.1" 504 0 "-" "a \\"quoted\\" agent"
2026/12/02 17:00:06 [error] 12#12: *1 connect() failed (111: Connection refused) while connecting to upstream
"""


def test_mtail_counts_nginx_responses_by_status_code(mtail, tmp_path):
    log = tmp_path / "access.log"
    log.write_text(NGINX_LOG, encoding="utf-8")
    res = subprocess.run([mtail, "--progs", MTAIL_PROG_DIR, "--logs", str(log), "--one_shot",
                          "--one_shot_format", "prometheus", "--port", "0"],
                         capture_output=True, text=True, check=False, timeout=60)
    assert res.returncode == 0, res.stderr[-2000:]
    samples = {}
    for line in res.stdout.splitlines():
        if line.startswith("nginx_http_responses_total{"):
            labels, value = line.rsplit(" ", 1)
            code = labels.split('code="', 1)[1].split('"', 1)[0]
            samples[code] = float(value)
    # The error-log line is not an access-log line and counts nowhere.
    assert samples == {"200": 2.0, "400": 1.0, "502": 1.0, "504": 1.0}


def test_mtail_program_compiles(mtail):
    res = subprocess.run([mtail, "--progs", MTAIL_PROG_DIR, "--compile_only"],
                         capture_output=True, text=True, check=False, timeout=60)
    assert res.returncode == 0, res.stderr[-2000:]
