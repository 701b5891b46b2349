"""The monitoring role's Grafana dashboards: valid JSON, provisioned data source, valid PromQL (checked
by the real promtool) that only names metrics the cluster really exposes.

Known metric names come from real captures (tests/unit/fixtures/monitoring/*.names.txt: the vLLM CPU
engine with ngram speculative decoding, Debian's node and nginx exporters, mtail running the role's
program), the DCGM exporter's counter list the role installs, and the role's recording rules.
"""
import csv
import glob
import json
import os
import re
import shutil
import subprocess

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROLE = os.path.join(ROOT, "roles", "monitoring")
FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "monitoring")
DASHBOARDS = sorted(glob.glob(os.path.join(ROLE, "files", "dashboards", "*.json")))
DATASOURCE_UID = "llmops-prometheus"
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
            "offset", "inf", "nan"}


def _names(path):
    with open(path, encoding="utf-8") as fh:
        return {line.strip() for line in fh if line.strip() and not line.startswith("#")}


def _histogram_families(names):
    return {n[: -len(suffix)] for n in names for suffix in ("_bucket",) if n.endswith(suffix)}


@pytest.fixture(scope="module")
def known_metrics():
    names = set()
    for path in glob.glob(os.path.join(FIXTURES, "*.names.txt")):
        names |= _names(path)
    with open(os.path.join(ROLE, "files", "dcgm", "llmops-counters.csv"), encoding="utf-8") as fh:
        rows = list(csv.reader(line for line in fh if line.strip() and not line.startswith("#")))
    names |= {r[0].strip() for r in rows}
    with open(os.path.join(ROLE, "templates", "llmops.rules.yml.j2"), encoding="utf-8") as fh:
        names |= set(re.findall(r"record:\s*(\S+)", fh.read()))
    names.add("up")
    return names


def _dashboards():
    out = []
    for path in DASHBOARDS:
        with open(path, encoding="utf-8") as fh:
            out.append((os.path.basename(path), json.load(fh)))
    return out


def _panels(dash):
    for p in dash["panels"]:
        yield p
        yield from p.get("panels", [])


def _exprs(dash):
    for p in _panels(dash):
        for t in p.get("targets", []):
            yield p["title"], t["expr"]
    for v in dash.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            m = re.match(r"label_values\((\w[\w:]*)\s*,", q)
            if m:
                yield "variable " + v["name"], m.group(1)


def _concrete(expr):
    """Grafana variables replaced by values Prometheus accepts."""
    return expr.replace("$__rate_interval", "5m").replace("$__interval", "1m").replace("$replica", ".*")


def metric_names(expr):
    e = _concrete(expr)
    e = re.sub(r'"(?:[^"\\]|\\.)*"', "", e)  # strings
    e = re.sub(r"\{[^}]*\}", "", e)  # label matchers
    e = re.sub(r"\[[^\]]*\]", "", e)  # ranges
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", e)
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", e):
        rest = e[m.end():].lstrip()
        if rest.startswith("(") or m.group(0).lower() in KEYWORDS:
            continue
        names.add(m.group(0))
    return names


def test_there_is_a_dashboard():
    assert DASHBOARDS, "no dashboard under roles/monitoring/files/dashboards"


@pytest.mark.parametrize("name,dash", _dashboards())
def test_dashboard_structure(name, dash):
    assert dash["uid"] and dash["title"] and dash["schemaVersion"] >= 36, name
    ids = [p["id"] for p in _panels(dash)]
    assert len(ids) == len(set(ids)), f"{name}: duplicate panel ids"
    for p in _panels(dash):
        assert {"x", "y", "w", "h"} <= set(p["gridPos"]), p["title"]
        if p["type"] == "row":
            continue
        assert p["datasource"]["uid"] == DATASOURCE_UID, p["title"]
        assert p["targets"], f"{p['title']} has no query"
        for t in p["targets"]:
            assert t["datasource"]["uid"] == DATASOURCE_UID and t["expr"].strip(), p["title"]


def test_dashboards_use_the_provisioned_data_source():
    with open(os.path.join(ROLE, "templates", "grafana-datasource.yml.j2"), encoding="utf-8") as fh:
        text = fh.read()
    assert f"uid: {DATASOURCE_UID}" in text
    with open(os.path.join(ROLE, "templates", "grafana-dashboard.yml.j2"), encoding="utf-8") as fh:
        assert "monitoring__grafana_dashboards_dir" in fh.read()
    with open(os.path.join(ROLE, "vars", "main.yml"), encoding="utf-8") as fh:
        listed = yaml.safe_load(fh)["monitoring__grafana_dashboards"]
    assert sorted(listed) == sorted(os.path.basename(p) for p in DASHBOARDS)


@pytest.mark.parametrize("name,dash", _dashboards())
def test_every_query_names_only_real_metrics(name, dash, known_metrics):
    histograms = _histogram_families(known_metrics)
    unknown = {}
    for title, expr in _exprs(dash):
        for metric in metric_names(expr):
            if metric in known_metrics:
                continue
            if metric.endswith("_bucket") and metric[: -len("_bucket")] in histograms:
                continue
            unknown.setdefault(title, set()).add(metric)
    assert not unknown, f"{name}: metrics no captured exporter or rule exposes: {unknown}"


def test_the_metric_extraction_sees_what_it_should():
    names = metric_names('1 + sum by (replica) (rate(vllm:spec_decode_num_accepted_tokens_total{replica=~"$replica"}'
                         '[$__rate_interval])) / sum by (replica) (rate(vllm:spec_decode_num_drafts_total[5m]))')
    assert names == {"vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_drafts_total"}
    assert metric_names('histogram_quantile(0.99, sum by (le) (rate(x_bucket{a="b"}[1m])))') == {"x_bucket"}
    # The seed's metric is not one the cluster exposes.
    assert "vllm:gpu_memory_utilization" in metric_names("vllm:gpu_memory_utilization > 0.9")


@pytest.mark.parametrize("name,dash", _dashboards())
def test_the_dashboard_covers_what_operators_need(name, dash):
    text = " ".join(e for _unused, e in _exprs(dash))
    for needed in ("vllm:generation_tokens_total", "vllm:time_to_first_token_seconds_bucket",
                   "vllm:inter_token_latency_seconds_bucket", "vllm:num_requests_waiting",
                   "vllm:kv_cache_usage_perc", "vllm:spec_decode_num_accepted_tokens_total",
                   "vllm:spec_decode_num_drafts_total", "vllm:request_success_total",
                   "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_UTIL", "nginx_http_responses_total"):
        assert needed in text, f"{name} has no panel on {needed}"
    assert "sum by (replica)" in text  # per-replica traffic


@pytest.mark.parametrize("name,dash", _dashboards())
def test_every_query_is_valid_promql(name, dash, tmp_path):
    promtool = shutil.which("promtool") or "/usr/bin/promtool"
    if not os.path.exists(promtool):
        pytest.skip("promtool is missing: tests/unit/test_alert_rules.py installs Debian's prometheus package for it")
    rules = [{"record": f"dashboard:check_{i}", "expr": _concrete(expr)}
             for i, (_unused, expr) in enumerate(_exprs(dash))]
    path = tmp_path / "dashboard-queries.rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}), encoding="utf-8")
    res = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
