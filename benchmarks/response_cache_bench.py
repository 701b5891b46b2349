# -*- coding: utf-8 -*-
# Copyright: llmops.vllm_cluster contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Latency of a response-cache hit vs a miss, in the same run (roles/response_cache).

Sends N deterministic completions with distinct prompts (each one a miss: answered by the engines
through nginx), then the same N again (each one a hit: answered from Redis), sequentially, and
prints the latency of both sets (mean, p50, p95, max) and the speed-up. With --engine-metrics it
also reads the engine's own counter (vllm:request_success_total) before and after each phase, to
show that the hits did not reach the engine. Prints numbers; asserts nothing.

  python3 benchmarks/response_cache_bench.py --url http://GATEWAY:4000 --key TENANT_KEY \\
      --model tiny-llama [--engine-metrics http://HEAD:8000/metrics] [-n 30] [--max-tokens 16]

Traffic goes only where --url and --engine-metrics point (in the lab: containers on the podman
network of the molecule scenario response_cache).
"""
import argparse
import json
import re
import statistics
import time
import urllib.request
import uuid


def post(url, key, body, timeout=120):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", "Authorization": "Bearer " + key})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        data = resp.read()
    elapsed = time.perf_counter() - t0
    return elapsed, json.loads(data)


def engine_requests(url):
    if not url:
        return None
    with urllib.request.urlopen(url, timeout=30) as resp:
        text = resp.read().decode()
    return sum(float(v) for v in re.findall(r"^vllm:request_success_total\{[^}]*\} ([0-9.e+]+)$", text, re.M))


def summary(values):
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]
    return {"mean_ms": 1000 * statistics.mean(values), "p50_ms": 1000 * statistics.median(values),
            "p95_ms": 1000 * p95, "max_ms": 1000 * ordered[-1]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--url", required=True, help="gateway base URL, e.g. http://10.89.1.2:4000")
    ap.add_argument("--key", required=True, help="a tenant key of the gateway")
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--engine-metrics", default="", help="an engine's /metrics URL (optional)")
    ap.add_argument("-n", type=int, default=30, help="requests per phase")
    ap.add_argument("--max-tokens", type=int, default=16)
    args = ap.parse_args()

    endpoint = args.url.rstrip("/") + "/v1/completions"
    run = uuid.uuid4().hex[:8]
    bodies = [{"model": args.model, "prompt": f"benchmark {run} prompt {i}", "max_tokens": args.max_tokens,
               "temperature": 0} for i in range(args.n)]

    results = {}
    for phase in ("miss", "hit"):
        before = engine_requests(args.engine_metrics)
        latencies, ids = [], []
        for body in bodies:
            elapsed, answer = post(endpoint, args.key, body)
            latencies.append(elapsed)
            ids.append(answer.get("id"))
        after = engine_requests(args.engine_metrics)
        results[phase] = dict(summary(latencies), requests=len(latencies), ids=ids,
                              engine_requests=None if before is None else after - before)

    same = sum(1 for a, b in zip(results["miss"]["ids"], results["hit"]["ids"]) if a == b)
    print(f"response cache benchmark: {args.n} distinct deterministic completions (max_tokens {args.max_tokens}),"
          f" then the same {args.n} again, sequential, via {args.url}")
    print(f"{'phase':6} {'mean ms':>9} {'p50 ms':>9} {'p95 ms':>9} {'max ms':>9} {'engine requests':>16}")
    for phase in ("miss", "hit"):
        r = results[phase]
        engine = "n/a" if r["engine_requests"] is None else "%d" % r["engine_requests"]
        print(f"{phase:6} {r['mean_ms']:9.1f} {r['p50_ms']:9.1f} {r['p95_ms']:9.1f} {r['max_ms']:9.1f} {engine:>16}")
    print(f"hits that returned the miss's answer (same id): {same}/{args.n}")
    print(f"speed-up of a hit (p50): {results['miss']['p50_ms'] / results['hit']['p50_ms']:.1f}x")
    print(json.dumps({p: {k: v for k, v in r.items() if k != "ids"} for p, r in results.items()}))


if __name__ == "__main__":
    main()
