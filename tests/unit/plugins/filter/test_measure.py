"""Unit tests for plugins/filter/measure.py: the A/B measure behind canaries and tuning."""
from __future__ import annotations

import random

import pytest
from ansible.errors import AnsibleFilterError

from filter_cases import load_filter

measure = load_filter("measure")


def load(ttft=0.2, itl=0.05, tps=100.0, sent=20, failed=0, stream=20.0):
    """openai_load's result shape (the keys measure_figures reads)."""
    return {"sent": sent, "failed_requests": failed, "output_tokens_per_second": tps,
            "ttft": {"p50": ttft, "p99": ttft * 2}, "itl": {"p50": itl, "p99": itl * 2},
            "stream_tokens_per_second": {"p50": stream}}


def reading(drafts, draft_tokens, accepted):
    return {"figures": {"spec_decode_drafts_total": drafts, "spec_decode_draft_tokens_total": draft_tokens,
                        "spec_decode_accepted_tokens_total": accepted}}


def test_level_results_join_each_targets_load_and_readings_in_order():
    targets = [{"name": "r1", "url": "http://a"}, {"name": "r2", "url": "http://b"}]
    loads = {"results": [load(ttft=0.1), load(ttft=0.4)]}
    before = {"results": [reading(100, 500, 300), reading(0, 0, 0)]}
    after = {"results": [reading(160, 800, 480), reading(10, 50, 20)]}
    out = measure.measure_level_results(loads, "8", targets, before, after)
    assert [(r["level"], r["target"], r["figures"]["ttft_p50"]) for r in out] == [(8, "r1", 0.1), (8, "r2", 0.4)]
    assert out[0]["figures"]["acceptance_rate"] == 0.6 and out[1]["figures"]["acceptance_rate"] == 0.4
    # a target's name, or the target itself when it is a plain name
    assert measure.measure_level_results([load()], 1, ["only"], [{}], [{}])[0]["target"] == "only"


@pytest.mark.parametrize("loads, targets, level", [
    ([load()], [], 1), ([load()], ["a", "b"], 1), ([], ["a"], 1), ([load()], ["a"], "x"), (None, ["a"], 1)])
def test_level_results_refuse_mismatched_loops(loads, targets, level):
    with pytest.raises(AnsibleFilterError, match="measure_level_results"):
        measure.measure_level_results(loads, level, targets, [{}] * len(targets), [{}] * len(targets))


def test_spec_delta_is_the_window_between_two_readings():
    out = measure.measure_spec_delta(reading(100, 500, 300), reading(160, 800, 480))
    assert out == {"drafts": 60, "draft_tokens": 300, "accepted_tokens": 180, "acceptance_rate": 0.6,
                   "mean_accepted_length": 4.0}


@pytest.mark.parametrize("before, after", [
    ({"figures": {}}, {"figures": {}}),                   # no speculative decoding
    (reading(100, 500, 300), reading(10, 50, 30)),        # the engine restarted in between
    (None, reading(1, 5, 3))])
def test_spec_delta_without_counters_is_none(before, after):
    out = measure.measure_spec_delta(before, after)
    assert out["acceptance_rate"] is None and out["mean_accepted_length"] is None


def test_spec_delta_of_an_idle_window_has_no_rate():
    out = measure.measure_spec_delta(reading(5, 25, 10), reading(5, 25, 10))
    assert out["drafts"] == 0 and out["acceptance_rate"] is None


def test_figures_from_a_load_result():
    fig = measure.measure_figures(load(failed=2), {"acceptance_rate": 0.5, "mean_accepted_length": 2.5})
    assert fig["error_rate"] == 0.1 and fig["ttft_p50"] == 0.2 and fig["itl_p99"] == 0.1
    assert fig["stream_tokens_per_second_p50"] == 20.0 and fig["acceptance_rate"] == 0.5
    empty = measure.measure_figures({}, None)
    assert empty["error_rate"] is None and empty["ttft_p50"] is None and empty["requests"] == 0


def measures(base, cand, levels=(1, 8)):
    return [m for lv in levels for m in (
        {"level": lv, "target": "base", "figures": measure.measure_figures(base, {"acceptance_rate": 0.6})},
        {"level": lv, "target": "cand", "figures": measure.measure_figures(cand, {"acceptance_rate": 0.6})})]


THRESHOLDS = {"max_ttft_ratio": 1.3, "max_itl_ratio": 1.3, "min_throughput_ratio": 0.8, "max_error_rate": 0.0,
              "min_acceptance": 0.5}


def test_a_neutral_candidate_passes_with_ratios_near_one():
    out = measure.measure_compare(measures(load(), load(ttft=0.21, tps=98.0)), "base", "cand", THRESHOLDS)
    assert out["passed"] and out["failures"] == []
    assert out["levels"][0]["ratios"]["ttft_p50"] == 1.05 and out["levels"][0]["ratios"]["output_tokens_per_second"] == 0.98
    assert out["checked"] == sorted(THRESHOLDS)


@pytest.mark.parametrize("cand, name", [
    (load(ttft=0.5), "max_ttft_ratio"), (load(itl=0.1), "max_itl_ratio"), (load(tps=20.0), "min_throughput_ratio"),
    (load(failed=1), "max_error_rate")])
def test_a_worse_candidate_fails_naming_the_measure(cand, name):
    out = measure.measure_compare(measures(load(), cand), "base", "cand", THRESHOLDS)
    assert not out["passed"] and all(f.startswith(name + ":") for f in out["failures"]), out["failures"]
    assert len(out["failures"]) == 2  # at both levels


def test_low_acceptance_and_unmeasured_figures_fail():
    ms = measures(load(), load())
    ms[1]["figures"]["acceptance_rate"] = 0.2
    ms[3]["figures"]["acceptance_rate"] = None
    out = measure.measure_compare(ms, "base", "cand", {"min_acceptance": 0.5})
    assert out["failures"] == ["min_acceptance: acceptance_rate 0.2 < 0.5 at concurrency 1",
                               "min_acceptance: acceptance_rate not measured at concurrency 8"]


def test_thresholds_left_unset_are_not_checked_and_unknown_ones_refused():
    out = measure.measure_compare(measures(load(), load(tps=1.0)), "base", "cand", {"min_throughput_ratio": None})
    assert out["passed"] and out["checked"] == []
    with pytest.raises(AnsibleFilterError, match="max_latency_ratio"):
        measure.measure_compare([], "base", "cand", {"max_latency_ratio": 2})
    assert not measure.measure_compare([], "base", "cand", THRESHOLDS)["passed"]  # nothing measured


@pytest.mark.parametrize("seed", range(200))
def test_compare_generated_ratios_agree_with_the_verdict(seed):
    """Random figures: a threshold fails exactly where its ratio or value crosses its limit."""
    rng = random.Random(seed)
    base = load(ttft=rng.uniform(0.05, 2), itl=rng.uniform(0.01, 0.2), tps=rng.uniform(10, 500))
    cand = load(ttft=rng.uniform(0.05, 2), itl=rng.uniform(0.01, 0.2), tps=rng.uniform(10, 500),
                failed=rng.choice([0, 0, 1]))
    limits = {"max_ttft_ratio": rng.uniform(0.5, 2), "min_throughput_ratio": rng.uniform(0.3, 1.2),
              "max_error_rate": 0.0}
    out = measure.measure_compare(measures(base, cand, levels=(4,)), "base", "cand", limits)
    r = out["levels"][0]["ratios"]
    expect = set()
    if r["ttft_p50"] > limits["max_ttft_ratio"]:
        expect.add("max_ttft_ratio")
    if r["output_tokens_per_second"] < limits["min_throughput_ratio"]:
        expect.add("min_throughput_ratio")
    if cand["failed_requests"]:
        expect.add("max_error_rate")
    assert {f.split(":")[0] for f in out["failures"]} == expect
    assert out["passed"] is (not expect)


def tune_measures(table):
    """{setting: {level: (tps, itl, failed)}} -> measures."""
    return [{"level": lv, "target": s, "figures": measure.measure_figures(load(tps=tps, itl=itl, failed=failed))}
            for s, rows in table.items() for lv, (tps, itl, failed) in rows.items()]


def test_tune_recommends_the_best_throughput_that_keeps_itl():
    out = measure.measure_tune(tune_measures({
        "off": {1: (60, 0.05, 0), 8: (300, 0.05, 0)},
        "k2": {1: (90, 0.04, 0), 8: (330, 0.05, 0)},
        "k4": {1: (110, 0.04, 0), 8: (280, 0.08, 0)},   # ITL 1.6x the baseline at 8
        "k5": {1: (120, 0.03, 1), 8: (400, 0.04, 0)}}), 1.2)  # a failed request
    assert out["baseline"] == "off" and out["recommended"] == "k2"
    assert set(out["excluded"]) == {"k4", "k5"} and "ITL p50 1.6x" in out["excluded"]["k4"][0]
    row = next(r for r in out["rows"] if r["setting"] == "k2" and r["level"] == 1)
    assert row["throughput_vs_baseline"] == 1.5 and row["itl_vs_baseline"] == 0.8


def test_tune_without_an_itl_limit_and_with_nothing_measured():
    out = measure.measure_tune(tune_measures({"off": {1: (60, 0.05, 0)}, "k4": {1: (110, 0.09, 0)}}))
    assert out["recommended"] == "k4"
    assert measure.measure_tune([])["recommended"] is None


def test_settings_are_off_then_each_k_with_the_replicas_own_method():
    spec = {"method": "dspark", "model": "/models/draft", "num_speculative_tokens": 5}
    out = measure.measure_settings(spec, [1, "3", 3, 5])
    assert [s["name"] for s in out] == ["off", "k1", "k3", "k5"]
    assert out[0]["speculative"] == {} and out[2]["speculative"] == dict(spec, num_speculative_tokens=3)
    assert spec["num_speculative_tokens"] == 5  # the replica's own settings are not changed


@pytest.mark.parametrize("spec, ks", [({}, [1]), ({"method": ""}, [1]), ({"method": "ngram"}, [0]),
                                      ({"method": "ngram"}, ["x"]), ({"method": "ngram"}, [21])])
def test_settings_refuse_no_method_and_bad_numbers(spec, ks):
    with pytest.raises(AnsibleFilterError, match="measure_settings"):
        measure.measure_settings(spec, ks)


def test_tune_plots_put_k_on_x_one_line_per_level():
    tune = measure.measure_tune(tune_measures({
        "off": {1: (60, 0.05, 0), 8: (300, 0.05, 0)}, "k2": {1: (90, 0.04, 0), 8: (330, 0.05, 0)}}))
    plots = {p["name"]: p["spec"] for p in measure.measure_tune_plots(tune)}
    assert set(plots) == {"throughput", "itl", "stream"}  # no acceptance figures measured
    series = plots["throughput"]["series"]
    assert [s["label"] for s in series] == ["concurrency 1", "concurrency 8"]
    assert series[0]["x"] == [0, 2] and series[0]["y"] == [60.0, 90.0]
    assert measure.measure_tune_plots({}) == []
