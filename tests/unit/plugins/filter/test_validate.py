"""Unit tests for plugins/filter/validate.py: the validation report's judgement (thresholds met, not met,
not checked; the four figures; the verdict), the spread per replica and the plots' specs."""
from __future__ import annotations

import copy
import json
import os

import pytest
from ansible.errors import AnsibleFilterError

from filter_cases import load_filter

validate = load_filter("validate")
report_plot = load_filter("report_plot")
RUN = json.load(open(os.path.join(os.path.dirname(__file__), "validate_run.json"), encoding="utf-8"))
REPLICAS = [
    {"replica": "r1", "head": "dgx1", "upstream": "10.89.40.11:8000", "requests": 52, "share": 0.52},
    {"replica": "r2", "head": "dgx3", "upstream": "10.89.40.13:8000", "requests": 48, "share": 0.48},
]
METRICS = {name: head["metrics"] for name, head in RUN["heads"].items()}


def settings(**kw):
    return dict(RUN["settings"], **kw)


def load(**kw):
    return dict(copy.deepcopy(RUN["load"]), **kw)


def rows_by_key(rows):
    return {r["key"]: r for r in rows}


def test_filters_exported():
    assert set(validate.FilterModule().filters()) == {
        "validate_problems", "validate_thresholds", "validate_figures", "validate_verdict", "validate_distribution",
        "validate_plots", "validate_routed_load"}


# validate_problems

def test_problems_from_pairs_mapping_and_hostvars():
    assert validate.validate_problems([["h1", []], ["h2", ["chat: no usage", "chat: no usage"]], ["lb1", None]]) == [
        "h2: chat: no usage", "lb1: not validated (unreachable, or failed before its checks)"]
    assert validate.validate_problems({"h1": ["readiness: timeout"]}) == ["h1: readiness: timeout"]
    hostvars = {"h1": {"validate_problems": []}, "h2": {"other": 1}, "lb1": {"validate_problems": ["load: x"]}}
    assert validate.validate_problems(hostvars, ["h1", "h2", "lb1", "gone"]) == [
        "h2: not validated (unreachable, or failed before its checks)", "lb1: load: x",
        "gone: not validated (unreachable, or failed before its checks)"]
    assert validate.validate_problems(hostvars, []) == []


@pytest.mark.parametrize("value, hosts, words", [
    ("text", None, ["list of [host, problems] pairs or a mapping"]),
    ([["h1"]], None, ["item 0 must be a [host, problems] pair"]),
    ({}, "h1", ["hosts must be a list"]),
])
def test_problems_bad_input(value, hosts, words):
    with pytest.raises(AnsibleFilterError) as err:
        validate.validate_problems(value, hosts)
    assert str(err.value).startswith("validate_problems: ")
    for word in words:
        assert word in str(err.value)


# validate_thresholds

def test_thresholds_met_not_checked_and_their_text():
    rows = validate.validate_thresholds(settings(), load(), METRICS, 2)
    assert [r["key"] for r in rows] == [
        "min_success_ratio", "min_upstreams", "max_distribution_skew", "max_p99_latency", "max_p99_ttft", "max_mean_latency",
        "min_stream_tokens_per_second", "max_requests_waiting", "max_kv_cache_usage", "min_spec_acceptance_rate"]
    by = rows_by_key(rows)
    assert {k: r["met"] for k, r in by.items()} == {
        "min_success_ratio": "yes", "min_upstreams": "yes", "max_distribution_skew": "yes", "max_p99_latency": "not checked",
        "max_p99_ttft": "not checked", "max_mean_latency": "yes", "min_stream_tokens_per_second": "yes",
        "max_requests_waiting": "yes", "max_kv_cache_usage": "yes", "min_spec_acceptance_rate": "not checked"}
    assert by["min_stream_tokens_per_second"] == {
        "key": "min_stream_tokens_per_second", "variable": "validate_min_stream_tokens_per_second",
        "name": "output tok/s per stream, p50", "limit": 70.0, "measured": 79.2298, "met": "yes", "limit_text": "70",
        "measured_text": "79.2 (min 60.8, 100 streams)"}
    assert (by["max_mean_latency"]["limit_text"], by["max_mean_latency"]["measured_text"]) == ("0.8", "0.408 (p99 0.550)")
    assert (by["max_p99_latency"]["limit_text"], by["max_p99_latency"]["measured"]) == ("not set", 0.5505)
    assert by["min_upstreams"]["variable"] is None and by["min_upstreams"]["measured_text"] == "2"
    assert (by["min_success_ratio"]["limit_text"], by["min_success_ratio"]["measured_text"]) == ("100 %", "100.0 % (100 of 100)")
    assert (by["max_kv_cache_usage"]["limit_text"], by["max_kv_cache_usage"]["measured_text"]) == ("90 %", "1.2 %")
    # The worst head counts: the lowest acceptance, the highest KV usage.
    assert by["min_spec_acceptance_rate"]["measured"] == min(m["figures"]["spec_decode"]["acceptance_rate"] for m in METRICS.values())


def test_a_limit_not_met_by_the_figures_or_by_the_module():
    rows = rows_by_key(validate.validate_thresholds(settings(max_mean_latency=0.3, min_stream_tokens_per_second="90"),
                                                    load(), METRICS, 2))
    assert rows["max_mean_latency"]["met"] == "NO" and rows["min_stream_tokens_per_second"]["met"] == "NO"
    assert rows["min_stream_tokens_per_second"]["limit"] == 90.0  # an -e value arrives as text
    # The module's word counts even where the rounded figure looks within the limit.
    failed = load(threshold_failures=["max_distribution_skew: skew 0.08 exceeds 0.05; requests per upstream {}"])
    assert rows_by_key(validate.validate_thresholds(settings(), failed, METRICS, 2))["max_distribution_skew"]["met"] == "NO"
    # A replica that served nothing fails the every-head row.
    one = load(upstreams={"10.89.40.11:8000": 100}, threshold_failures=["min_upstreams: 1 upstream(s) served requests"])
    row = rows_by_key(validate.validate_thresholds(settings(), one, METRICS, 2))["min_upstreams"]
    assert (row["measured"], row["met"]) == (1, "NO")


def test_nothing_measured_is_never_met():
    rows = rows_by_key(validate.validate_thresholds(settings(min_spec_acceptance_rate=0.1), {}, {"dgx1": {}, "dgx3": {}}, 2))
    for key in ("min_success_ratio", "min_upstreams", "max_distribution_skew", "max_mean_latency",
                "min_stream_tokens_per_second", "max_requests_waiting", "max_kv_cache_usage", "min_spec_acceptance_rate"):
        assert rows[key]["met"] == "NO", (key, rows[key])
    assert rows["max_p99_ttft"]["met"] == "not checked"
    assert rows["max_mean_latency"]["measured_text"] == "- (p99 -)"
    assert rows["min_spec_acceptance_rate"]["measured_text"] == "- (no drafts reported)"
    # One head without metrics is enough: its figure is not known.
    half = rows_by_key(validate.validate_thresholds(settings(), load(), {"dgx1": METRICS["dgx1"], "dgx3": {}}, 2))
    assert half["max_kv_cache_usage"]["met"] == "NO" and half["max_kv_cache_usage"]["measured"] == 0.012
    # A head whose vllm_metrics reported the threshold failed.
    bad = copy.deepcopy(METRICS)
    bad["dgx3"]["threshold_failures"] = ["max_requests_waiting: requests waiting is 9.0, limit 5"]
    assert rows_by_key(validate.validate_thresholds(settings(), load(), bad, 2))["max_requests_waiting"]["met"] == "NO"


def test_thresholds_bad_settings():
    with pytest.raises(AnsibleFilterError, match="validate_thresholds: settings must be a mapping"):
        validate.validate_thresholds(None, {}, {}, 2)


# validate_figures: the keys and values the report and molecule/cluster's test read

def test_four_figures_keep_their_shape():
    figs = validate.validate_figures(load(), settings(), REPLICAS)
    assert figs["success"] == {"variable": "validate_min_success_ratio", "limit": 1.0, "success_ratio": 1.0, "http_200": 100,
                               "requests": 100, "met": "yes"}
    assert figs["requests_per_replica"] == {"variable": "validate_max_distribution_skew", "limit": 0.2, "replicas": 2,
                                            "even_share": 50.0, "min": 48, "max": 52, "per_replica": {"r1": 52, "r2": 48},
                                            "skew": 0.08, "met": "yes"}
    assert figs["stream_tokens_per_second"] == {"variable": "validate_min_stream_tokens_per_second", "limit": 70.0,
                                                "p50": 79.2298, "min": 60.8078, "streams": 100, "met": "yes"}
    assert figs["mean_latency"] == {"variable": "validate_max_mean_latency", "limit": 0.8, "mean_s": 0.4081, "p99_s": 0.5505,
                                    "concurrency": 100, "max_in_flight": 100, "met": "yes"}


def test_four_figures_not_checked_and_not_met():
    figs = validate.validate_figures(load(), settings(max_distribution_skew=None, max_mean_latency=None,
                                                      min_stream_tokens_per_second=None), REPLICAS)
    assert [figs[k]["met"] for k in ("success", "requests_per_replica", "stream_tokens_per_second", "mean_latency")] == [
        "yes", "not checked", "not checked", "not checked"]
    # A replica left out fails the spread even with no skew limit set.
    one = load(upstreams={"10.89.40.11:8000": 100}, distribution_skew=0.0)
    starved = [dict(REPLICAS[0], requests=100), dict(REPLICAS[1], requests=0)]
    figs = validate.validate_figures(one, settings(max_distribution_skew=None), starved)
    assert (figs["requests_per_replica"]["met"], figs["requests_per_replica"]["min"]) == ("NO", 0)
    # A 99/1 split fails a skew limit of 0.2 ((99 - 1) / 50 = 1.96).
    split = load(upstreams={"10.89.40.11:8000": 99, "10.89.40.13:8000": 1}, distribution_skew=1.96)
    assert validate.validate_figures(split, settings(), REPLICAS)["requests_per_replica"]["met"] == "NO"
    failed = load(success_ratio=0.98, status_codes={"200": 98, "502": 2},
                  threshold_failures=["min_success_ratio: 98 of 100 requests succeeded (0.98), required 1.0"])
    figs = validate.validate_figures(failed, settings(), REPLICAS)
    assert (figs["success"]["met"], figs["success"]["http_200"]) == ("NO", 98)
    nothing = validate.validate_figures({}, settings(), REPLICAS)
    assert nothing["success"]["requests"] == 100 and nothing["mean_latency"]["concurrency"] == 100
    assert {f["met"] for f in nothing.values()} == {"NO"}


# validate_verdict

def test_verdict_names_what_was_not_checked():
    rows = validate.validate_thresholds(settings(), load(), METRICS, 2)
    verdict = validate.validate_verdict([], rows)
    assert verdict["verdict"] == "PASS" and verdict["not_met"] == []
    assert verdict["not_checked"] == ["validate_max_p99_latency", "validate_max_p99_ttft", "validate_min_spec_acceptance_rate"]
    assert "replicas that serve requests (every head)" in verdict["met"] and len(verdict["met"]) == 7
    assert validate.validate_verdict(["lb1: load: failed"], rows)["verdict"] == "FAIL"
    # A threshold found not met fails the verdict even without a recorded problem.
    rows = validate.validate_thresholds(settings(max_mean_latency=0.1), load(), METRICS, 2)
    verdict = validate.validate_verdict([], rows)
    assert verdict["verdict"] == "FAIL" and verdict["not_met"] == ["validate_max_mean_latency"]


@pytest.mark.parametrize("problems, rows, words", [
    ("x", [], ["problems must be a list"]),
    ([], "x", ["rows must be the list validate_thresholds returns"]),
    ([], ["x"], ["rows must be the list"]),
])
def test_verdict_bad_input(problems, rows, words):
    with pytest.raises(AnsibleFilterError) as err:
        validate.validate_verdict(problems, rows)
    for word in words:
        assert word in str(err.value)


# validate_distribution

def test_distribution_named_by_replica():
    rows = validate.validate_distribution(
        {"upstreams": {"10.89.40.11:8000": 50, "10.89.40.13:8000, 10.89.40.11:8000": 2, "unknown": 1}},
        REPLICAS + [{"replica": "r3", "head": "dgx5", "upstream": "10.89.40.15:8000"}])
    assert rows == [
        {"replica": "r1", "head": "dgx1", "upstream": "10.89.40.11:8000", "requests": 52, "share": 52 / 53},
        {"replica": "r2", "head": "dgx3", "upstream": "10.89.40.13:8000", "requests": 0, "share": 0.0},
        {"replica": "r3", "head": "dgx5", "upstream": "10.89.40.15:8000", "requests": 0, "share": 0.0},
        {"replica": "not a replica: unknown", "head": None, "upstream": "unknown", "requests": 1, "share": 1 / 53}]
    assert validate.validate_distribution({}, REPLICAS)[0]["share"] is None


# validate_plots

def test_plots_specs():
    plots = validate.validate_plots(load(), settings(max_p99_latency=1.5), REPLICAS)
    assert [p["name"] for p in plots] == ["latency", "stream", "replicas"]
    latency, stream, replicas = (p["spec"] for p in plots)
    assert [s["label"] for s in latency["series"]] == ["r1", "r2"]
    assert sum(len(s["samples"]) for s in latency["series"]) == 100
    assert [line["label"] for line in latency["lines"]] == [
        "mean 0.408 s", "validate_max_mean_latency 0.8 s", "validate_max_p99_latency 1.5 s"]
    assert stream["lines"] == [{"label": "p50 79.2 tok/s", "x": 79.2298},
                               {"label": "validate_min_stream_tokens_per_second 70", "x": 70.0}]
    assert len(stream["series"][0]["samples"]) == 100
    assert replicas["categories"] == ["r1", "r2"] and replicas["series"][0]["values"] == [52, 48]
    assert replicas["lines"] == [{"label": "even share 50.0", "y": 50.0}]
    assert plots[2]["title"] == "Requests served per replica (skew 0.08, limit 0.2)"
    for plot in plots:  # valid report_plot specs (checked without matplotlib)
        report_plot._validate(plot["spec"])


def test_plots_without_samples_limits_or_upstreams():
    plain = load()
    del plain["samples"]
    plots = validate.validate_plots(plain, settings(max_distribution_skew=None), REPLICAS)
    assert [p["name"] for p in plots] == ["replicas"] and plots[0]["title"].endswith("no limit set)")
    assert validate.validate_plots({}, settings(), REPLICAS) == []
    # Samples without upstreams: one series; no limit set: only the measured line.
    bare = load(samples={"latency": [0.1, None, 0.3], "stream_tokens_per_second": [None, None]})
    del bare["upstreams"]
    plots = validate.validate_plots(bare, settings(max_mean_latency=None), [])
    assert [p["name"] for p in plots] == ["latency"]
    assert plots[0]["spec"]["series"] == [{"label": "all requests", "samples": [0.1, 0.3]}]
    assert [line["label"] for line in plots[0]["spec"]["lines"]] == ["mean 0.408 s"]


def test_plots_many_replicas_one_series_and_unknown_upstreams():
    ups = ["10.0.0.%d:8000" % i for i in range(25)]
    replicas = [{"replica": "r%02d" % i, "head": "h%d" % i, "upstream": u} for i, u in enumerate(ups)]
    many = load(samples={"latency": [0.1 * (i + 1) for i in range(25)], "upstream": ups,
                         "stream_tokens_per_second": [50.0] * 25},
                upstreams={u: 1 for u in ups})
    latency = validate.validate_plots(many, settings(), replicas)[0]["spec"]
    assert [s["label"] for s in latency["series"]] == ["all requests"]
    few = load(samples={"latency": [0.2, 0.3], "upstream": ["10.89.40.11:8000", "10.9.9.9:8000"],
                        "stream_tokens_per_second": [1.0, 2.0]})
    labels = [s["label"] for s in validate.validate_plots(few, settings(), REPLICAS)[0]["spec"]["series"]]
    assert labels == ["not a replica: 10.9.9.9:8000", "r1"]


@pytest.mark.skipif(not report_plot.report_plot_available(), reason="matplotlib is not installed")
def test_plots_draw():
    for plot in validate.validate_plots(load(), settings(), REPLICAS):
        svg = report_plot.report_plot(plot["spec"])
        assert plot["title"] in svg


def counters(**heads):
    return {name: {"figures": {"requests_success_total": n}} for name, n in heads.items()}


def test_routed_load_counts_each_replica_from_its_heads_counter_and_judges_the_spread():
    raw = load(upstreams={"127.0.0.1:30000": 100}, distribution_skew=0.0, threshold_failures=[])
    out = validate.validate_routed_load(raw, REPLICAS, counters(dgx1=10, dgx3=7), counters(dgx1=62, dgx3=55),
                                        settings(max_distribution_skew=1.0))
    assert out["upstreams"] == {"10.89.40.11:8000": 52, "10.89.40.13:8000": 48}
    assert out["distribution_skew"] == 0.08 and out["threshold_failures"] == []
    assert out["upstreams_counted_by"] == "engine counters"
    rows = rows_by_key(validate.validate_thresholds(settings(max_distribution_skew=1.0), out, METRICS, 2))
    assert rows["min_upstreams"]["met"] == "yes" and rows["max_distribution_skew"]["met"] == "yes"
    spread = validate.validate_distribution(out, REPLICAS)
    assert [(r["replica"], r["requests"]) for r in spread] == [("r1", 52), ("r2", 48)]
    assert raw["upstreams"] == {"127.0.0.1:30000": 100}  # the input is not changed


def test_routed_load_fails_a_replica_that_served_none_and_a_skew_over_the_limit():
    out = validate.validate_routed_load(load(threshold_failures=[]), REPLICAS, counters(dgx1=0, dgx3=5),
                                        counters(dgx1=100, dgx3=5), settings(max_distribution_skew=0.5))
    assert out["upstreams"] == {"10.89.40.11:8000": 100, "10.89.40.13:8000": 0}
    failed = {m.split(":", 1)[0] for m in out["threshold_failures"]}
    assert failed == {"min_upstreams", "max_distribution_skew"}, out["threshold_failures"]
    rows = rows_by_key(validate.validate_thresholds(settings(max_distribution_skew=0.5), out, METRICS, 2))
    assert rows["min_upstreams"]["met"] == "NO" and rows["max_distribution_skew"]["met"] == "NO"


@pytest.mark.parametrize("before, after", [
    ({}, counters(dgx1=5, dgx3=5)),                                   # not read before the load
    (counters(dgx1=5, dgx3=5), {"dgx1": {"failed": True}, "dgx3": {}}),  # not read after
    (counters(dgx1=50, dgx3=5), counters(dgx1=5, dgx3=9)),            # a counter went back (engine restarted)
])
def test_routed_load_that_cannot_be_counted_is_never_met(before, after):
    out = validate.validate_routed_load(load(threshold_failures=[]), REPLICAS, before, after, settings())
    assert out["upstreams"] is None and out["distribution_skew"] is None
    assert [m.split(":", 1)[0] for m in out["threshold_failures"]] == ["min_upstreams"], out["threshold_failures"]
    rows = rows_by_key(validate.validate_thresholds(settings(), out, METRICS, 2))
    assert rows["min_upstreams"]["met"] == "NO"


def test_routed_load_keeps_the_other_failures_and_refuses_bad_replicas():
    raw = load(threshold_failures=["max_mean_latency: mean 9 exceeds 1", "min_upstreams: stale"])
    out = validate.validate_routed_load(raw, REPLICAS, counters(dgx1=0, dgx3=0), counters(dgx1=3, dgx3=3), settings())
    assert out["threshold_failures"] == ["max_mean_latency: mean 9 exceeds 1"]
    with pytest.raises(AnsibleFilterError, match="validate_routed_load"):
        validate.validate_routed_load(raw, {"r1": {}}, {}, {}, settings())
