"""Routing benchmark: nginx's least_conn against vLLM's router (cache_aware), side by side in one run.

Against a converged cluster (an Ansible inventory; by default inventories/lab, the `make demo` lab),
three workloads, each run once per policy through the balancers' address (the keepalived virtual
address when set) with the edge API key, streamed chat completions:

  multi_turn     C conversations of T turns; each turn resends the whole history (the previous
                 turns and the model's answers) plus a new user message. Conversations run
                 concurrently, the turns of one conversation one after the other.
  shared_prompt  N tenants, each with a long system prompt of its own; each request picks a tenant
                 at random and asks a short question; K requests in flight.
  uniform        unique prompts of one length, nothing shared: what the router costs when there is
                 nothing to gain.

Policies, in this order: least_conn, then cache_aware. Each is set by the real code path,
`ansible-playbook -i INV playbooks/site.yml --tags vllm_router,nginx_lb -e nginx_lb_routing=POLICY`;
at the end the same play without -e puts the inventory's own value back.

Per run: TTFT p50/p99 (first streamed text), mean latency, tokens/s (prompt + generated, and
generated alone), and from each replica head's own /metrics, before and after the run (from this
machine, or on the first balancer where the heads' firewall keeps this machine out):
the prefix-cache hit rate (delta vllm:prefix_cache_hits / delta vllm:prefix_cache_queries, both in
tokens) per replica and overall, and the requests each replica finished (vllm:request_success), with
their spread ((max - min) / mean); with the router, its own cache_aware decisions (prefix hit or
miss, read on each balancer). Then the ratios cache_aware / least_conn. Markdown and JSON copies
go to reports/routing-bench-latest.{md,json}. Exit status 1 when any request failed.

Every prompt (and every system prompt) starts with a salt of its run, so no run finds another run's
prefixes in an engine's cache. Prompts are sized to the engines' max_model_len (the inventory's
vllm_service_scheduler.max_model_len, 512 in the lab): on vLLM's CPU backend the cache works in
blocks of 128 tokens, so the lab's prompts of up to ~480 tokens share 1 to 3 blocks.

Bounded and lab-only: a request count per workload, a deadline per run (requests not started by
then are counted as cut, not sent), a timeout per request; every URL (the endpoint, each head's
/metrics) must be loopback or inside one of this machine's podman networks.

  make bench-routing                                   # the lab (converged first when it does not serve)
  python3 benchmarks/routing_bench.py --plan           # what would run, from the inventory; no traffic
  python3 benchmarks/routing_bench.py -i ~/.cache/molecule/main/cluster/inventory --converge never
"""
import argparse
import datetime
import importlib.util
import json
import math
import os
import random
import re
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "lab"))
sys.path.insert(0, os.path.join(REPO, "plugins", "module_utils"))
import _prometheus  # noqa: E402  (standard library only: the vllm_metrics module's parser)
from bench_args import csv_of  # noqa: E402  (standard library only, shared with cluster_bench)

INVENTORY = os.path.join(REPO, "inventories", "lab")
POLICIES = ("least_conn", "cache_aware", "session")
WORKLOADS = ("multi_turn", "shared_prompt", "uniform")
ROUTER_TAGS = "vllm_router,nginx_lb"
# The lab's stand-in for a Python mirror of vllm-router (tests/lab/router_wheel.sh), as molecule/vllm_router.
LAB_ROUTER_WHEELHOUSE = "/srv/llmops-lab/vllm-router-wheelhouse"

# Prompt sizing. Words come from the lab model's own training text (tests/lab/vllm/tiny_model.py), so
# its tokenizer has them: 1.23 tokens a word measured, the chat template ~15 tokens a message.
TOKENS_PER_WORD = 1.3
MESSAGE_TOKENS = 20
SALT_WORDS = 6
FALLBACK_WORDS = ("the cluster serves an openai compatible endpoint behind a load balancer each replica runs "
                  "engine with speculative decoding small draft proposes tokens and target model verifies "
                  "them in one forward pass accepted are free operators upgrade layer at time").split()


def vocabulary():
    """Distinct lower-case words of the lab model's training text (its tokenizer knows them)."""
    try:
        path = os.path.join(REPO, "tests", "lab", "vllm", "tiny_model.py")
        spec = importlib.util.spec_from_file_location("tiny_model", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        words = sorted(set(re.findall(r"[a-z]+", module.TEXT.lower())))
        if len(words) >= 50:
            return words
    except (OSError, AttributeError, ImportError, SyntaxError):
        pass
    return sorted(set(FALLBACK_WORDS))


# ---------------------------------------------------------------- pure parts (tests/unit/test_routing_bench.py)

def pct(values, q):
    """Percentile q (0..1) by linear interpolation (as tests/lab/lab_load.pct); NaN without values."""
    values = sorted(v for v in values if v is not None)
    if not values:
        return float("nan")
    k = (len(values) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def ratio(new, base):
    """new / base, None when either is missing, NaN or base is 0."""
    if new is None or base is None or base == 0 or (isinstance(new, float) and math.isnan(new)) \
            or (isinstance(base, float) and math.isnan(base)):
        return None
    return new / base


# vLLM's counters (v1, prometheus_client names: a counter `vllm:x` is exposed as `vllm:x_total`).
COUNTERS = {
    "queries": "vllm:prefix_cache_queries",      # prompt tokens looked up in the prefix cache
    "hits": "vllm:prefix_cache_hits",            # of those, tokens found cached
    "requests": "vllm:request_success",          # finished requests, every finished_reason
    "prompt_tokens": "vllm:prompt_tokens",
    "generation_tokens": "vllm:generation_tokens",
}


def engine_counters(text, model=None):
    """The COUNTERS of one /metrics text, each summed over its label sets (engines, finish reasons);
    only the series of `model` (label model_name) when given. A counter the text lacks is None.
    Raises ValueError when the text holds no vLLM series at all (not a vLLM /metrics)."""
    parsed = _prometheus.parse_text(text)
    out = {key: None for key in COUNTERS}
    seen = False
    for name, labels, value in parsed["samples"]:
        if name.startswith("vllm:"):
            seen = True
        base = name[:-len("_total")] if name.endswith("_total") else None
        for key, metric in COUNTERS.items():
            if base == metric or (base is None and name == metric):
                if model and labels.get("model_name") not in (None, model):
                    continue
                out[key] = (out[key] or 0.0) + value
    if not seen:
        raise ValueError("no vllm: series in the metrics text (%d samples, %d errors)"
                         % (len(parsed["samples"]), len(parsed["errors"])))
    return out


def counter_delta(before, after):
    """after - before per counter (None where either is missing). A counter that went down (the
    engine restarted in between) gives None too: its delta is unknown."""
    out = {}
    for key in COUNTERS:
        b, a = before.get(key), after.get(key)
        out[key] = None if a is None or b is None or a < b else a - b
    return out


def hit_rate(hits, queries):
    """hits / queries, None without queries."""
    if hits is None or not queries:
        return None
    return hits / queries


def spread(counts):
    """(max - min) / mean of per-replica counts (validate's skew), None without requests."""
    values = [c for c in counts if c is not None]
    if not values or not sum(values):
        return None
    mean = sum(values) / len(values)
    return (max(values) - min(values)) / mean


# vLLM router 0.1.17's counters (tests/unit/fixtures/vllm_router/): its cache_aware decisions
# (outcome prefix_hit / prefix_miss), how it got each request's token ids (result render, ...) and the
# requests it sent to each worker.
ROUTER_COUNTERS = {
    "vllm_router_prefix_routing_decisions_total": "outcome",
    "vllm_router_kv_routing_inputs_total": "result",
    "vllm_router_processed_requests_total": "worker",
}


def router_counters(text):
    """{'<metric short name>:<label value>': value} of ROUTER_COUNTERS in one router /metrics text, e.g.
    'prefix_routing_decisions:prefix_hit', 'kv_routing_inputs:render', 'processed_requests:http://...'."""
    out = {}
    for name, labels, value in _prometheus.parse_text(text)["samples"]:
        label = ROUTER_COUNTERS.get(name)
        if label:
            key = name[len("vllm_router_"):-len("_total")] + ":" + labels.get(label, "")
            out[key] = out.get(key, 0.0) + value
    return out


def router_delta(before, after):
    """after - before per key, summed over the balancers ({balancer: router_counters}); a balancer
    whose router answered only after the run counts from 0 (it started during the run)."""
    out = {}
    for host, counters in after.items():
        for key, value in counters.items():
            out[key] = out.get(key, 0.0) + value - (before.get(host) or {}).get(key, 0.0)
    return {k: v for k, v in sorted(out.items()) if v}


def router_prefix_share(delta):
    """prefix_hit / (prefix_hit + prefix_miss) of the router's cache_aware decisions, None without any."""
    hit = delta.get("prefix_routing_decisions:prefix_hit", 0.0)
    miss = delta.get("prefix_routing_decisions:prefix_miss", 0.0)
    return hit / (hit + miss) if hit + miss else None


def resolve(value, hostvars, depth=0):
    """An inventory value with its plain `{{ name }}` references replaced by the host's own variables
    (ansible-inventory --list does not template). Anything else templated is a ValueError."""
    if depth > 10:
        raise ValueError("a reference loop")
    if isinstance(value, list):
        return [resolve(v, hostvars, depth + 1) for v in value]
    if isinstance(value, str) and "{{" in value:
        match = re.fullmatch(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}", value.strip())
        if not match or match.group(1) not in hostvars:
            raise ValueError("a templated value this script cannot resolve")
        return resolve(hostvars[match.group(1)], hostvars, depth + 1)
    return value


def group_hosts(inv, group, seen=None):
    """Hosts of GROUP and its children, in inventory order, from `ansible-inventory --list`."""
    seen = set() if seen is None else seen
    if group in seen:
        return []
    seen.add(group)
    node = inv.get(group) or {}
    out = list(node.get("hosts") or [])
    for child in node.get("children") or []:
        out += [h for h in group_hosts(inv, child, seen) if h not in out]
    return out


def base_url(address, hv):
    """The balancers' URL for ADDRESS as nginx_lb serves it (TLS port when nginx_lb_tls)."""
    host = "[%s]" % address if ":" in address else address
    if hv.get("nginx_lb_tls") in (True, "true", "yes", "True"):
        port = int(hv.get("nginx_lb_tls_port", 443))
        return "https://%s%s" % (host, "" if port == 443 else ":%d" % port)
    port = int(hv.get("nginx_lb_listen_port", 80))
    return "http://%s%s" % (host, "" if port == 80 else ":%d" % port)


def targets(inv, endpoint_address):
    """What the benchmark needs from an inventory (`ansible-inventory --list`): the endpoint URL, the
    edge and backend keys, the heads ({name, replica, url}), the model, max_model_len, the
    balancers' nginx_lb_routing and whether they name a source for vllm-router's wheel.
    endpoint_address: the address clients use (the cluster_endpoint filter's)."""
    hostvars = inv.get("_meta", {}).get("hostvars", {})
    balancers = group_hosts(inv, "balancers")
    heads = group_hosts(inv, "vllm_heads")
    if not balancers or not heads:
        raise ValueError("the inventory needs the groups balancers and vllm_heads")
    lb = hostvars.get(balancers[0], {})
    keys = resolve(lb.get("nginx_lb_api_keys") or [], lb)
    edge_key = keys[0] if keys else ""
    backend_key = resolve(lb.get("nginx_lb_backend_api_key") or "", lb)
    out_heads = []
    for name in heads:
        hv = hostvars.get(name, {})
        address = str(hv.get("nginx_lb_backend_address") or hv.get("ansible_host") or name)
        port = int((hv.get("vllm_service_api") or {}).get("port", 8000))
        host = "[%s]" % address if ":" in address else address
        out_heads.append({"name": name, "replica": str(hv.get("vllm_service_replica") or name),
                          "url": "http://%s:%d" % (host, port)})
    head = hostvars.get(heads[0], {})
    return {
        "endpoint": base_url(endpoint_address, lb),
        "edge_key": edge_key,
        "backend_key": backend_key or resolve(head.get("vllm_service_api_key") or "", head),
        "heads": out_heads,
        "balancers": balancers,
        "model": str((head.get("vllm_service_model") or {}).get("name") or ""),
        "max_model_len": int((head.get("vllm_service_scheduler") or {}).get("max_model_len") or 0),
        "routing": str(lb.get("nginx_lb_routing") or "least_conn"),
        "router_source": any(lb.get(v) for v in ("vllm_router_pip_index_url", "vllm_router_pip_find_links")),
        "router_metrics_port": _int_or(lb.get("vllm_router_metrics_port"), 29000),
    }


def _int_or(value, default):
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def est_tokens(words, messages=1):
    """Estimated prompt tokens of WORDS words in MESSAGES chat messages (generous: sizing stays under
    max_model_len; the engines' own counts come back in each answer's usage)."""
    return int(math.ceil(words * TOKENS_PER_WORD)) + messages * MESSAGE_TOKENS


def salted(rng, salt, tag, words, vocab):
    """`SALT TAG w1 w2 ...`: the run's salt first, so nothing of it is cached from another run."""
    return " ".join([salt, tag] + [rng.choice(vocab) for dummy in range(words)])


def words_that_fit(prev_prompt_tokens, max_tokens, budget, wanted, minimum=8):
    """How many words the next user message of a conversation may have: the previous turn's prompt
    (its usage.prompt_tokens), the answer sent back (counted twice its max_tokens: re-tokenized text),
    two messages' template and the new words must stay within BUDGET prompt tokens. 0 when fewer than
    MINIMUM words fit (the conversation ends there)."""
    room = budget - prev_prompt_tokens - 2 * max_tokens - 2 * MESSAGE_TOKENS
    fit = int(room // TOKENS_PER_WORD)
    if fit < minimum:
        return 0
    return min(wanted, fit)


def upstream_counts(results, router_port=30000):
    """({upstream: requests} as nginx named them in X-Upstream, requests the router answered): with
    a router in the path nginx's upstream is 127.0.0.1:PORT; a head's address means nginx sent the
    request to the head itself (least_conn, or its fallback when the router did not answer)."""
    counts = {}
    for r in results:
        if r.get("upstream"):
            counts[r["upstream"]] = counts.get(r["upstream"], 0) + 1
    routed = sum(n for up, n in counts.items()
                 if any(part.strip() in ("127.0.0.1:%d" % router_port, "[::1]:%d" % router_port)
                        for part in up.split(",")))
    return counts, routed


def summarize(results, wall, deltas, replicas, router=None):
    """One row of the table from a run's request results and its per-replica counter deltas
    ({replica: delta}). results: dicts with ok, ttft, latency, prompt_tokens, output_tokens, cut."""
    sent = [r for r in results if not r.get("cut")]
    ok = [r for r in sent if r["ok"]]
    prompt = sum(r.get("prompt_tokens") or 0 for r in ok)
    output = sum(r.get("output_tokens") or 0 for r in ok)
    per = {}
    for rep in replicas:
        d = deltas.get(rep) or {}
        per[rep] = {"requests": d.get("requests"), "hit_rate": hit_rate(d.get("hits"), d.get("queries")),
                    "hits": d.get("hits"), "queries": d.get("queries")}
    hits = [d.get("hits") for d in deltas.values()]
    queries = [d.get("queries") for d in deltas.values()]
    total_hits = None if None in hits or not hits else sum(hits)
    total_queries = None if None in queries or not queries else sum(queries)
    lat = [r["latency"] for r in ok]
    return {
        "requests": len(sent), "failed": len(sent) - len(ok), "cut": len(results) - len(sent),
        "ttft_p50": pct([r.get("ttft") for r in ok], 0.5), "ttft_p99": pct([r.get("ttft") for r in ok], 0.99),
        "latency_mean": sum(lat) / len(lat) if lat else float("nan"),
        "seconds": wall,
        "tokens_per_s": (prompt + output) / wall if wall else None,
        "output_tokens_per_s": output / wall if wall else None,
        "prompt_tokens_mean": prompt / len(ok) if ok else None,
        "prompt_tokens_max": max((r.get("prompt_tokens") or 0 for r in ok), default=None),
        "hit_rate": hit_rate(total_hits, total_queries),
        "replicas": per,
        "spread": spread([per[rep]["requests"] for rep in replicas]),
        "via_router": upstream_counts(sent)[1],
        "router": router or {},
        "router_prefix_share": router_prefix_share(router or {}),
    }


RATIO_FIELDS = (("ttft_p50", "TTFT p50"), ("ttft_p99", "TTFT p99"), ("hit_rate", "hit rate"),
                ("tokens_per_s", "tok/s"))


def ratios(rows, new="cache_aware", base="least_conn"):
    """Per workload, {field: rows[new] / rows[base]} for RATIO_FIELDS; rows: {(workload, policy): row}."""
    out = {}
    for workload in dict.fromkeys(w for w, dummy in rows):
        if (workload, new) in rows and (workload, base) in rows:
            out[workload] = {f: ratio(rows[(workload, new)].get(f), rows[(workload, base)].get(f))
                             for f, dummy in RATIO_FIELDS}
    return out


def json_clean(node):
    """NODE with NaN and infinite floats as None (strict JSON), tuple keys joined with '/'."""
    if isinstance(node, float):
        return None if math.isnan(node) or math.isinf(node) else node
    if isinstance(node, dict):
        return {"/".join(k) if isinstance(k, tuple) else str(k): json_clean(v) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return [json_clean(v) for v in node]
    return node


def _f(value, fmt, width):
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-".rjust(width)
    return format(value, fmt).rjust(width)


def _pc(value):
    return "-" if value is None else "%.0f%%" % (100 * value)


def table_lines(rows, ratio_rows, replicas):
    """The printed table: one line per workload x policy, then the ratio lines."""
    head = (f"{'workload':14} {'policy':12} {'reqs':>5} {'fail':>5} {'cut':>4} {'TTFT p50':>9} {'TTFT p99':>9} "
            f"{'mean lat':>9} {'tok/s':>8} {'out tok/s':>9} {'hit rate':>8}  {'hit per replica':24} "
            f"{'reqs per replica':22} {'spread':>6} {'routed':>6} {'rtr prefix':>10}")
    lines = [head, "-" * len(head)]
    for (workload, policy), r in rows.items():
        per_hit, per_req = _per_replica(r, replicas, " ")
        lines.append(f"{workload:14} {policy:12} {r['requests']:5d} {r['failed']:5d} {r['cut']:4d} "
                     f"{_f(r['ttft_p50'], '.3f', 9)} {_f(r['ttft_p99'], '.3f', 9)} {_f(r['latency_mean'], '.3f', 9)} "
                     f"{_f(r['tokens_per_s'], '.1f', 8)} {_f(r['output_tokens_per_s'], '.1f', 9)} "
                     f"{_pc(r['hit_rate']):>8}  {per_hit:24} {per_req:22} {_f(r['spread'], '.2f', 6)} {r['via_router']:6d} "
                     f"{_pc(r.get('router_prefix_share')):>10}")
    if ratio_rows:
        lines.append("")
        lines.append(f"{'cache_aware / least_conn':27} " + " ".join(f"{label:>9}" for dummy, label in RATIO_FIELDS))
        for workload, rr in ratio_rows.items():
            lines.append(f"{workload:27} " + " ".join(_f(rr[f], '.3f', 9) for f, dummy in RATIO_FIELDS))
    return lines


def _per_replica(row, replicas, sep):
    """The hit rate and the requests of each replica of ROW, as text joined by SEP."""
    hits = sep.join(f"{rep} {_pc(row['replicas'][rep]['hit_rate'])}" for rep in replicas)
    reqs = sep.join(f"{rep} {'-' if row['replicas'][rep]['requests'] is None else int(row['replicas'][rep]['requests'])}"
                    for rep in replicas)
    return hits, reqs


def markdown(rows, ratio_rows, replicas, meta):
    """The report's Markdown: the settings, the table, the ratios, the playbook runs."""
    out = ["# Routing benchmark: least_conn against vLLM's router", "",
           f"{meta['date']}, inventory `{meta['inventory']}`, endpoint {meta['endpoint']}, model "
           f"{meta['model']} (max_model_len {meta['max_model_len']}), max_tokens {meta['max_tokens']}.", "",
           "Workloads: " + "; ".join(meta["workloads"]), "",
           "| workload | policy | requests | failed | cut | TTFT p50 s | TTFT p99 s | mean latency s | tok/s | "
           "output tok/s | prefix-cache hit rate | hit rate per replica | requests per replica | spread | "
           "prompt tokens mean / max | through the router | router's prefix decisions |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: |"]
    for (workload, policy), r in rows.items():
        per_hit, per_req = _per_replica(r, replicas, ", ")
        out.append(f"| {workload} | {policy} | {r['requests']} | {r['failed']} | {r['cut']} | "
                   f"{_f(r['ttft_p50'], '.3f', 0)} | {_f(r['ttft_p99'], '.3f', 0)} | {_f(r['latency_mean'], '.3f', 0)} | "
                   f"{_f(r['tokens_per_s'], '.1f', 0)} | {_f(r['output_tokens_per_s'], '.1f', 0)} | {_pc(r['hit_rate'])} | "
                   f"{per_hit} | {per_req} | {_f(r['spread'], '.2f', 0)} | "
                   f"{_f(r['prompt_tokens_mean'], '.0f', 0)} / {_f(r['prompt_tokens_max'], '.0f', 0)} | {r['via_router']} | "
                   f"{_pc(r.get('router_prefix_share'))} |")
    routed = [(k, r["router"]) for k, r in rows.items() if r.get("router")]
    if routed:
        out += ["", "The routers' counters over each run (summed over the balancers): " + "; ".join(
            f"{w}/{p}: " + ", ".join(f"{key} {v:.0f}" for key, v in c.items()) for (w, p), c in routed)]
    if ratio_rows:
        out += ["", "| cache_aware / least_conn | " + " | ".join(label for dummy, label in RATIO_FIELDS) + " |",
                "| --- |" + " ---: |" * len(RATIO_FIELDS)]
        for workload, rr in ratio_rows.items():
            out.append(f"| {workload} | " + " | ".join(_f(rr[f], '.3f', 0) for f, dummy in RATIO_FIELDS) + " |")
    if meta.get("playbooks"):
        out += ["", "| playbook run | seconds | rc |", "| --- | ---: | ---: |"]
        out += [f"| {p['what']} | {p['seconds']:.1f} | {p['rc']} |" for p in meta["playbooks"]]
    if meta.get("upstreams"):
        out += ["", "Upstreams nginx named (X-Upstream) per run: " + "; ".join(
            f"{k}: " + ", ".join(f"{u} x{n}" for u, n in v.items()) for k, v in meta["upstreams"].items())]
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- the lab side

def load_inventory(path):
    proc = subprocess.run(["ansible-inventory", "-i", path, "--list"], cwd=REPO, capture_output=True, text=True,
                          check=False)
    if proc.returncode:
        sys.exit(f"ansible-inventory -i {path} --list failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout)


def endpoint_address(inv):
    """The address clients use: the cluster_endpoint filter (plugins/filter/cluster.py) on the inventory."""
    spec = importlib.util.spec_from_file_location("llmops_cluster_filter", os.path.join(REPO, "plugins", "filter",
                                                                                        "cluster.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.cluster_endpoint(inv.get("_meta", {}).get("hostvars", {}), group_hosts(inv, "balancers"))["address"]


def fetch_metrics(url, key, timeout=30):
    req = urllib.request.Request(url.rstrip("/") + "/metrics",
                                 headers={"Authorization": "Bearer " + key} if key else {})
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 (lab URLs, checked)
        return resp.read().decode("utf-8", "replace")


# Run on a balancer (python3 there): each URL's /metrics, as one JSON document {url: text}, and
# {url: error} for those that did not answer (the router's listener is absent with least_conn).
METRICS_SNIPPET = (
    "import json, sys, urllib.request\n"
    "out, err = {}, {}\n"
    "for url in sys.argv[1:]:\n"
    "    try:\n"
    "        with urllib.request.urlopen(url + '/metrics', timeout=30) as resp:\n"
    "            out[url] = resp.read().decode('utf-8', 'replace')\n"
    "    except Exception as exc:\n"
    "        err[url] = '%s: %s' % (type(exc).__name__, exc)\n"
    "print(json.dumps({'ok': out, 'errors': err}))\n")


def metrics_via(inventory, pattern, urls):
    """{host: {'ok': {url: /metrics text}, 'errors': {url: why}}} for each host of PATTERN, each host
    fetching every URL itself (over Ansible's connection; one call for all hosts)."""
    env = dict(os.environ, ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
               ANSIBLE_FORCE_COLOR="0")
    proc = subprocess.run(["ansible", "-i", inventory, pattern, "-m", "ansible.builtin.command", "-a",
                           json.dumps({"argv": ["python3", "-c", METRICS_SNIPPET] + list(urls)})],
                          cwd=REPO, capture_output=True, text=True, env=env, check=False, timeout=180)
    out = {}
    try:
        for host, res in json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"].items():
            if res.get("rc") != 0 or res.get("failed"):
                raise RuntimeError(f"reading /metrics on {host} failed: "
                                   + (res.get("stderr") or res.get("msg") or "")[-1500:])
            out[host] = json.loads(res["stdout"])
    except (ValueError, KeyError, IndexError, TypeError):
        raise RuntimeError(f"reading /metrics on {pattern} failed: " + (proc.stdout + proc.stderr)[-1500:]) from None
    return out


class Metrics:
    """Each head's vLLM counters, read from the head's own /metrics at its lab address: from this
    machine (`here`), or, where the heads' firewall keeps the engine port to the balancers and
    monitoring hosts (the firewall role), on the first balancer over Ansible's connection
    (`balancer`); `auto` tries here first and stays with what worked. With `router`, also each
    balancer's vLLM router counters (its listener is on the balancer's loopback only), in the same
    Ansible call; a router that does not answer is left out, it fails nothing."""

    def __init__(self, t, inventory, mode, model, router_port=29000):
        self.t, self.inventory, self.mode, self.model = t, inventory, mode, model
        self.router_url = "http://127.0.0.1:%d" % router_port
        self.last = None  # {url: text} of the heads' last snapshot

    def _here(self):
        return {h["url"]: fetch_metrics(h["url"], self.t["backend_key"], timeout=10) for h in self.t["heads"]}

    def snapshot(self, router=False):
        """({replica: engine_counters}, {balancer: router_counters} or {} without `router`)."""
        texts, routers = None, {}
        heads = [h["url"] for h in self.t["heads"]]
        if self.mode in ("auto", "here"):
            try:
                texts = self._here()
                self.mode = "here"
            except OSError as exc:
                if self.mode == "here":
                    raise
                print(f"[routing_bench] the heads' /metrics from this machine: {exc}; reading them on "
                      f"{self.t['balancers'][0]} (the heads' firewall lets the balancers in)", flush=True)
                self.mode = "balancer"
        if texts is None or router:
            first = self.t["balancers"][0]
            pattern = ":".join(self.t["balancers"]) if router else first
            urls = (heads if texts is None else []) + ([self.router_url] if router else [])
            got = metrics_via(self.inventory, pattern, urls)
            if texts is None:
                missing = [u for u in heads if u not in got.get(first, {}).get("ok", {})]
                if missing:
                    raise RuntimeError(f"{first} could not read {', '.join(missing)}: {got.get(first, {}).get('errors')}")
                texts = {u: got[first]["ok"][u] for u in heads}
            for host, res in got.items():
                if self.router_url in res.get("ok", {}):
                    routers[host] = router_counters(res["ok"][self.router_url])
        self.last = texts
        return {h["replica"]: engine_counters(texts[h["url"]], self.model) for h in self.t["heads"]}, routers


def chat(t, model, messages, max_tokens, timeout):
    """One streamed chat completion through the endpoint (the collection's client, as lab_load's)."""
    # needs ansible-core (.venv), so imported here: --help works without it
    import _openai_http  # pylint: disable=import-outside-toplevel
    t0 = time.monotonic()
    try:
        res = _openai_http.completion(
            t["endpoint"], "chat", model, "", max_tokens=max_tokens, stream=True, timeout=timeout,
            validate_certs=False, headers={"Authorization": "Bearer " + t["edge_key"]} if t["edge_key"] else None,
            upstream_header="X-Upstream", extra_body={"messages": messages, "ignore_eos": True})
    except Exception as exc:  # pylint: disable=broad-except  # a client error is a failed request
        return {"ok": False, "error": f"client error {type(exc).__name__}: {exc}", "ttft": None,
                "latency": time.monotonic() - t0, "upstream": None, "text": "", "prompt_tokens": None,
                "output_tokens": 0, "status": None}
    out = {k: res.get(k) for k in ("ok", "status", "error", "ttft", "latency", "upstream", "text", "prompt_tokens",
                                   "output_tokens")}
    # ignore_eos: a served request generates exactly max_tokens (fewer: aborted; a lost request).
    if out["ok"] and out["output_tokens"] != max_tokens:
        out["ok"] = False
        out["error"] = f"generated {out['output_tokens']} of {max_tokens} tokens"
    if not out["ok"] and res.get("body"):
        out["error"] = f"{out['error']}: {res['body'][:200]}"
    return out


class Run:
    """One workload under one policy: its requests, a deadline, the results."""

    def __init__(self, t, args, budget, vocab, salt):
        self.t, self.args, self.budget, self.vocab, self.salt = t, args, budget, vocab, salt
        self.deadline = None
        self.lock = threading.Lock()
        self.results = []
        self.ended = 0  # multi_turn: turns not sent because the history left too little room

    def send(self, messages, **extra):
        if time.monotonic() > self.deadline:
            r = {"ok": False, "cut": True, "ttft": None, "latency": None, "upstream": None, "text": ""}
        else:
            r = chat(self.t, self.args.model, messages, self.args.max_tokens, self.args.request_timeout)
        r.update(extra)
        with self.lock:
            self.results.append(r)
        if not r["ok"] and not r.get("cut"):
            print(f"[routing_bench] failed request: status {r.get('status')}, {r.get('error')}", flush=True)
        return r

    def multi_turn(self):
        a = self.args

        def conversation(c):
            rng = random.Random(f"{self.salt}-c{c}")
            messages, prev = [], None
            for turn in range(a.turns):
                words = a.first_words if turn == 0 else words_that_fit(prev, a.max_tokens, self.budget, a.turn_words)
                if turn == 0:
                    words = min(words, int((self.budget - MESSAGE_TOKENS) / TOKENS_PER_WORD) - SALT_WORDS - 2)
                if words <= 0:
                    with self.lock:
                        self.ended += a.turns - turn
                    return
                messages.append({"role": "user", "content": salted(rng, self.salt, f"c{c} t{turn}", words, self.vocab)})
                r = self.send(list(messages), turn=turn)
                if not r["ok"]:
                    return
                messages.append({"role": "assistant", "content": r.get("text") or ""})
                prev = r.get("prompt_tokens") or est_tokens(sum(len(m["content"].split()) for m in messages),
                                                            len(messages))

        with ThreadPoolExecutor(a.conversation_concurrency) as pool:
            list(pool.map(conversation, range(a.conversations)))

    def shared_prompt(self):
        a = self.args
        rng = random.Random(f"{self.salt}-tenants")
        systems = [salted(rng, self.salt, f"tenant {n}", a.system_words, self.vocab) for n in range(a.tenants)]
        plan = [(rng.randrange(a.tenants), i) for i in range(a.shared_requests)]

        def one(item):
            tenant, i = item
            q = random.Random(f"{self.salt}-q{i}")
            question = " ".join(q.choice(self.vocab) for dummy in range(a.question_words))
            self.send([{"role": "system", "content": systems[tenant]}, {"role": "user", "content": question}],
                      tenant=tenant)

        with ThreadPoolExecutor(a.concurrency) as pool:
            list(pool.map(one, plan))

    def uniform(self):
        a = self.args
        words = a.uniform_words or (a.system_words + a.question_words)

        def one(i):
            rng = random.Random(f"{self.salt}-u{i}")
            self.send([{"role": "user", "content": salted(rng, self.salt, f"u{i}", words, self.vocab)}])

        with ThreadPoolExecutor(a.concurrency) as pool:
            list(pool.map(one, range(a.uniform_requests)))

    def run(self, workload):
        self.deadline = time.monotonic() + self.args.run_seconds
        t0 = time.monotonic()
        getattr(self, workload)()
        return time.monotonic() - t0


def playbook(inventory, policy, extra, log):
    """site.yml's vllm_router and nginx_lb plays with nginx_lb_routing=POLICY (None: the inventory's own)."""
    cmd = ["ansible-playbook", "-i", inventory, os.path.join(REPO, "playbooks", "site.yml"), "--tags", ROUTER_TAGS]
    if policy:
        cmd += ["-e", f"nginx_lb_routing={policy}"]
    cmd += extra
    print("[routing_bench] " + " ".join(cmd), flush=True)
    t0 = time.monotonic()
    with open(log, "a", encoding="utf-8") as fh:
        fh.write("\n### " + " ".join(cmd) + "\n")
        fh.flush()
        rc = subprocess.run(cmd, cwd=REPO, stdout=fh, stderr=subprocess.STDOUT, check=False,
                            env=dict(os.environ, ANSIBLE_FORCE_COLOR="0")).returncode
    seconds = time.monotonic() - t0
    print(f"[routing_bench]   rc {rc} after {seconds:.1f} s", flush=True)
    if rc:
        with open(log, encoding="utf-8") as fh:
            print(fh.read()[-3000:], file=sys.stderr)
    return {"what": f"--tags {ROUTER_TAGS}" + (f" -e nginx_lb_routing={policy}" if policy else " (inventory's value)"),
            "seconds": seconds, "rc": rc}


def serving(t, model):
    """Whether the endpoint answers two chat completions (the heads are not asked: their firewall may
    keep this machine out)."""
    return all(chat(t, model, [{"role": "user", "content": "hello %d" % n}], 2, 60)["ok"] for n in range(2))


def wait_serving(t, model, seconds=180):
    """After a policy change: until a few chat completions in a row succeed (they are not measured)."""
    deadline, good = time.monotonic() + seconds, 0
    while time.monotonic() < deadline:
        r = chat(t, model, [{"role": "user", "content": "warm up %d" % random.randrange(10 ** 9)}], 2, 60)
        good = good + 1 if r["ok"] else 0
        if good >= 3:
            return True
        time.sleep(0.5 if r["ok"] else 3)
    return False


def workload_text(a, budget):
    first = est_tokens(a.first_words + SALT_WORDS + 2)
    shared = est_tokens(a.system_words + SALT_WORDS + 2) + est_tokens(a.question_words)
    uniform = est_tokens((a.uniform_words or a.system_words + a.question_words) + SALT_WORDS + 2)
    return [f"multi_turn {a.conversations} conversations x {a.turns} turns, {a.conversation_concurrency} at a time "
            f"(first message ~{first} tokens, then +{a.turn_words} words a turn, up to the budget {budget})",
            f"shared_prompt {a.shared_requests} requests over {a.tenants} tenants, {a.concurrency} in flight "
            f"(system prompt + question ~{shared} tokens)",
            f"uniform {a.uniform_requests} unique prompts, {a.concurrency} in flight (~{uniform} tokens each)"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("-i", "--inventory", default=INVENTORY, help="a converged cluster's inventory (lab only)")
    p.add_argument("--plan", action="store_true", help="print the targets and workloads; send nothing, run no play")
    p.add_argument("--converge", choices=("auto", "always", "never"), default="auto",
                   help="run the whole site.yml first: auto = when a head or the endpoint does not serve")
    p.add_argument("--policies", type=csv_of(POLICIES), default=["least_conn", "cache_aware"],
                   help="in this order; the ratio rows compare cache_aware with least_conn")
    p.add_argument("--workloads", type=csv_of(WORKLOADS), default=list(WORKLOADS))
    p.add_argument("--skip-switch", action="store_true",
                   help="no playbook: measure the policy deployed now (give it as the one --policies entry)")
    p.add_argument("--router-wheelhouse", default="auto",
                   help="vllm_router_pip_find_links (offline) for the policy plays; auto: the lab's "
                        f"{LAB_ROUTER_WHEELHOUSE} when the inventory names no source for vllm-router; 'none': nothing")
    p.add_argument("-e", "--extra-vars", action="append", default=[], metavar="VARS",
                   help="more -e for the policy plays (repeatable)")
    p.add_argument("--metrics-from", choices=("auto", "here", "balancer"), default="auto",
                   help="where each head's /metrics is read: from this machine, or on the first balancer "
                        "(the heads' firewall lets only balancers and monitoring in); auto: here, else the balancer")
    p.add_argument("--model", default="", help="the model id (default: the heads' vllm_service_model.name)")
    p.add_argument("--max-model-len", type=int, default=0,
                   help="the engines' max_model_len the prompts must fit (default: the inventory's)")
    p.add_argument("--max-tokens", type=int, default=12, help="generated tokens per request (ignore_eos)")
    p.add_argument("--conversations", type=int, default=24)
    p.add_argument("--turns", type=int, default=4)
    p.add_argument("--conversation-concurrency", type=int, default=6, choices=range(1, 65), metavar="1..64")
    p.add_argument("--first-words", type=int, default=100, help="words of a conversation's first message")
    p.add_argument("--turn-words", type=int, default=60, help="words of each later user message (fewer to fit)")
    p.add_argument("--tenants", type=int, default=8)
    p.add_argument("--system-words", type=int, default=250, help="words of each tenant's system prompt")
    p.add_argument("--question-words", type=int, default=20)
    p.add_argument("--shared-requests", type=int, default=128)
    p.add_argument("--uniform-requests", type=int, default=96)
    p.add_argument("--uniform-words", type=int, default=0, help="default: system + question words")
    p.add_argument("--concurrency", type=int, default=6, choices=range(1, 65), metavar="1..64",
                   help="requests in flight (shared_prompt, uniform)")
    p.add_argument("--run-seconds", type=float, default=240,
                   help="deadline of one workload run: requests not started by then are cut")
    p.add_argument("--request-timeout", type=float, default=120)
    p.add_argument("--report-dir", default=os.path.join(REPO, "reports"))
    p.add_argument("--seed", default="", help="derive the run salts from this (default: random)")
    args = p.parse_args(argv)
    if args.skip_switch and len(args.policies) != 1:
        p.error("--skip-switch measures one policy: give it as --policies POLICY")
    for name in ("conversations", "turns", "tenants", "shared_requests", "uniform_requests", "max_tokens",
                 "first_words", "system_words", "question_words", "turn_words"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def main(argv=None):
    args = parse_args(argv)
    inventory = os.path.abspath(os.path.expanduser(args.inventory))
    inv = load_inventory(inventory)
    try:
        t = targets(inv, endpoint_address(inv))
    except ValueError as exc:
        sys.exit(f"{inventory}: {exc}")
    args.model = args.model or t["model"]
    max_model_len = args.max_model_len or t["max_model_len"] or 512
    budget = max_model_len - args.max_tokens - 24  # prompt tokens, with a margin for the estimate
    extra = [x for e in args.extra_vars for x in ("-e", e)]
    if args.router_wheelhouse == "auto" and not t["router_source"]:
        extra += ["-e", json.dumps({"vllm_router_pip_offline": True, "vllm_router_pip_find_links": [LAB_ROUTER_WHEELHOUSE]})]
    elif args.router_wheelhouse not in ("auto", "none"):
        extra += ["-e", json.dumps({"vllm_router_pip_offline": True, "vllm_router_pip_find_links": [args.router_wheelhouse]})]
    replicas = [h["replica"] for h in t["heads"]]
    wl_text = workload_text(args, budget)
    print(f"[routing_bench] inventory {inventory}: endpoint {t['endpoint']}, heads "
          + ", ".join(f"{h['replica']} {h['url']}" for h in t["heads"])
          + f"; model {args.model}, max_model_len {max_model_len} (prompt budget {budget}), "
          f"inventory's nginx_lb_routing {t['routing']}", flush=True)
    for line in wl_text:
        print("[routing_bench]   " + line)
    print(f"[routing_bench] policies {', '.join(args.policies)}; workloads {', '.join(args.workloads)}; "
          f"policy plays: --tags {ROUTER_TAGS} {' '.join(extra)}", flush=True)
    # lab_load needs ansible-core (.venv), so imported here: --help works without it
    from lab_load import check_lab_target, lab_networks  # pylint: disable=import-outside-toplevel
    nets = lab_networks()
    for url in [t["endpoint"]] + [h["url"] for h in t["heads"]]:
        check_lab_target(url, nets)
    if args.plan:
        return 0
    if not t["edge_key"]:
        print("[routing_bench] the inventory sets no nginx_lb_api_keys: requests go without a key", flush=True)

    os.makedirs(args.report_dir, exist_ok=True)
    log = os.path.join(args.report_dir, "routing_bench.log")
    open(log, "w", encoding="utf-8").close()
    meta = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "inventory": inventory,
            "endpoint": t["endpoint"], "model": args.model, "max_model_len": max_model_len,
            "max_tokens": args.max_tokens, "workloads": wl_text, "playbooks": [], "upstreams": {},
            "args": dict(vars(args))}
    t_all = time.monotonic()
    if args.converge == "always" or (args.converge == "auto" and not serving(t, args.model)):
        print("[routing_bench] converging the whole site first (the cluster does not serve, or --converge always)",
              flush=True)
        t0 = time.monotonic()
        with open(log, "a", encoding="utf-8") as fh:
            rc = subprocess.run(["ansible-playbook", "-i", inventory, os.path.join(REPO, "playbooks", "site.yml")],
                                cwd=REPO, stdout=fh, stderr=subprocess.STDOUT, check=False).returncode
        meta["playbooks"].append({"what": "site.yml (whole)", "seconds": time.monotonic() - t0, "rc": rc})
        if rc:
            sys.exit(f"site.yml failed (rc {rc}); its output: {log}")

    metrics = Metrics(t, inventory, args.metrics_from, args.model, t["router_metrics_port"])
    vocab = vocabulary()
    seed = args.seed or "%016x" % random.SystemRandom().getrandbits(64)
    rows, per_run, problems, switched = {}, {}, [], False
    try:
        for policy in args.policies:
            if not args.skip_switch:
                switched = True
                pb = playbook(inventory, policy, extra, log)
                meta["playbooks"].append(pb)
                if pb["rc"]:
                    problems.append(f"the {policy} play failed")
                    break
            if not wait_serving(t, args.model):
                problems.append(f"{policy}: the endpoint did not answer after the change")
                break
            for workload in args.workloads:
                srng = random.Random(f"{seed}-{policy}-{workload}")
                salt = " ".join(srng.choice(vocab) for dummy in range(SALT_WORDS))
                before, rbefore = metrics.snapshot(router=policy != "least_conn")
                run = Run(t, args, budget, vocab, salt)
                print(f"[routing_bench] {workload} with {policy} ...", flush=True)
                wall = run.run(workload)
                time.sleep(1.0)  # the engines' counters follow their last step
                after, rafter = metrics.snapshot(router=policy != "least_conn")
                deltas = {rep: counter_delta(before[rep], after[rep]) for rep in replicas}
                row = summarize(run.results, wall, deltas, replicas, router_delta(rbefore, rafter))
                rows[(workload, policy)] = row
                ups = upstream_counts(run.results)[0]
                meta["upstreams"][f"{workload}/{policy}"] = ups
                turns = {}
                for r in run.results:
                    if "turn" in r and r["ok"]:
                        turns.setdefault(r["turn"], []).append(r["ttft"])
                per_run[f"{workload}/{policy}"] = {
                    "row": row, "deltas": deltas, "upstreams": ups, "salt": salt, "turns_not_sent_to_fit": run.ended,
                    "ttft_p50_by_turn": {str(k): pct(v, 0.5) for k, v in sorted(turns.items())},
                    "errors": sorted({str(r.get("error")) for r in run.results if not r["ok"] and not r.get("cut")})}
                print(f"[routing_bench]   {row['requests']} requests, {row['failed']} failed, {row['cut']} cut, "
                      f"{wall:.1f} s, TTFT p50 {row['ttft_p50']:.3f} s, hit rate {_pc(row['hit_rate'])}, "
                      f"upstreams {ups}" + (f", {run.ended} turns left out to fit max_model_len" if run.ended else "")
                      + (f"; router counters {row['router']}" if row["router"] else ""), flush=True)
                if row["failed"]:
                    problems.append(f"{workload}/{policy}: {row['failed']} of {row['requests']} requests failed")
    finally:
        if switched and not args.skip_switch:
            pb = playbook(inventory, None, extra, log)
            meta["playbooks"].append(pb)
            if pb["rc"]:
                problems.append("putting the inventory's nginx_lb_routing back failed")
    meta["seconds"] = time.monotonic() - t_all
    meta["metrics_from"] = metrics.mode
    for h in t["heads"]:  # the last /metrics of each head, as read (a capture for tests and questions)
        if metrics.last and h["url"] in metrics.last:
            with open(os.path.join(args.report_dir, f"routing-bench-metrics-{h['replica']}.txt"), "w",
                      encoding="utf-8") as fh:
                fh.write(metrics.last[h["url"]])

    ratio_rows = ratios(rows) if {"least_conn", "cache_aware"} <= set(args.policies) else {}
    lines = table_lines(rows, ratio_rows, replicas)
    print(f"\n=== routing: {', '.join(args.policies)} (TTFT and latency in s; hit rate = prefix-cache hits / "
          "queries, tokens, from each head's /metrics; spread = (max - min) / mean of requests per replica)")
    print("\n".join(lines))
    for p in meta["playbooks"]:
        print(f"playbook {p['what']}: {p['seconds']:.1f} s, rc {p['rc']}")
    print(f"whole run: {meta['seconds']:.0f} s; heads' /metrics read from {'this machine' if metrics.mode == 'here' else t['balancers'][0]}; "
          f"playbook output: {log}")
    md = markdown(rows, ratio_rows, replicas, meta)
    with open(os.path.join(args.report_dir, "routing-bench-latest.md"), "w", encoding="utf-8") as fh:
        fh.write(md)
    with open(os.path.join(args.report_dir, "routing-bench-latest.json"), "w", encoding="utf-8") as fh:
        json.dump(json_clean({"meta": meta, "runs": per_run, "ratios": ratio_rows}), fh, indent=1, default=str)
    print(f"reports: {os.path.join(args.report_dir, 'routing-bench-latest.md')} (and .json)")
    if problems:
        print("FAILED: " + "; ".join(problems))
        return 1
    print("OK: no failed request")
    return 0


if __name__ == "__main__":
    sys.exit(main())
