"""Serving benchmark: the balancer (nginx_lb) against one replica (vllm_service) directly.

Prints numbers; it is not a timed test and asserts nothing. Same load, same run: the two targets
are measured in alternating rounds (lb, direct, lb, direct, ...) at each concurrency level, so
drift on a shared machine hits both alike. For every request it streams the completion and records
the time to the first generated text (TTFT) and to the end of the stream (latency).

Reports per target and level: successes, p50/p90/p99 latency and TTFT, output tokens/s; the ratios
balancer/direct (p50 and p90 latency and TTFT); and how the balancer spread its requests over the
replicas (from the response header nginx_lb adds, X-Upstream by default): counts, (max-min)/mean
skew and coefficient of variation.

At concurrency 1 the ratio is the proxy's own cost. At higher concurrency the balancer spreads
the same load over every replica while "direct" puts it all on one, so ratios below 1 are expected
there: that is the capacity the balancer adds.

The load and the latency figures come from vLLM's own serving client, `vllm bench serve` (the lab's
vLLM venv, or any node's: --vllm), with random prompts of --input-len tokens from the model's
tokenizer (--tokenizer, a local directory) and exactly --max-tokens generated (ignore_eos); its
per-request TTFT and latency (--save-detailed) are merged over the rounds. The spread over replicas
needs the balancer's response header, which vLLM's client does not keep: a last round through the
balancer uses this repository's streaming client (tests/lab/lab_load.py) for it. `--client builtin`
uses that client for every round (no vLLM needed on the machine that runs the benchmark).

Bounded and lab-only: at most 500 requests per target and level, 64 in flight, a deadline; targets
must be loopback or inside a podman network of this machine (the lab), nothing else is contacted
(the tokenizer is read from disk, with the Hugging Face hub switched off).

  make bench-serving                       # the lab: lb1 against dgx1 (r1's head), after make demo
  python3 benchmarks/serving_bench.py --lb http://10.89.x.y --lb-key KEY \
      --direct http://10.89.x.z:8000 --direct-key KEY --model tiny-llama
"""
import argparse
import collections
import json
import os
import statistics
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "lab"))
from lab_load import PROMPTS, check_lab_target, lab_address, lab_endpoint, lab_networks, lab_var, one_request, pct  # noqa: E402  (shared with the lab tests)


def run_round(target, n, concurrency, args, offset, stop_at):
    def work(i):
        if time.monotonic() > stop_at:
            return {"ok": False, "error": "deadline", "status": None, "upstream": None}
        return one_request(target["url"], target["key"], args.model, PROMPTS[(offset + i) % len(PROMPTS)],
                           args.max_tokens, args.upstream_header, args.request_timeout)

    t0 = time.monotonic()
    with ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(work, range(n)))
    return results, time.monotonic() - t0


# Run on the client host: the API key comes on stdin (never on a command line), the result file is
# printed back and the directory removed.
REMOTE = ('read -r OPENAI_API_KEY; export OPENAI_API_KEY HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1; '
          'd=$(mktemp -d) && "$@" --result-dir "$d" --result-filename round.json > "$d/out" 2>&1; rc=$?; '
          'if [ $rc = 0 ]; then cat "$d/round.json"; else tail -c 3000 "$d/out" >&2; fi; rm -rf "$d"; exit $rc')


def vllm_round(target, n, concurrency, args, offset, stop_at):
    """One round with `vllm bench serve`, on --client-host (over the lab's SSH) or here: results in
    run_round's shape (ok, latency, ttft, tokens, error), and the seconds vLLM's client measured."""
    remaining = stop_at - time.monotonic()
    if remaining <= 1:
        return [{"ok": False, "error": "deadline", "status": None, "upstream": None}] * n, 0.0
    bench = [args.vllm, "bench", "serve", "--backend", "openai", "--endpoint", "/v1/completions",
             "--base-url", target["url"], "--model", args.model, "--tokenizer", args.tokenizer,
             "--dataset-name", "random", "--random-input-len", str(args.input_len),
             "--random-output-len", str(args.max_tokens), "--ignore-eos", "--seed", str(offset),
             "--num-prompts", str(n), "--max-concurrency", str(concurrency), "--request-rate", "inf",
             "--num-warmups", "0", "--ready-check-timeout-sec", "60", "--disable-tqdm",
             "--save-result", "--save-detailed"]
    script = ["sh", "-c", REMOTE, "vllm-bench", *bench]
    if args.client_host:
        script = ["ssh", "-F", args.ssh_config, args.client_host, "--", " ".join(shlex.quote(a) for a in script)]
    proc = subprocess.run(script, input=target["key"] + "\n", capture_output=True, text=True, check=False,
                          timeout=remaining)
    if proc.returncode != 0:
        sys.exit(f"serving_bench: vllm bench serve failed on {args.client_host or 'this machine'} "
                 f"(rc {proc.returncode}):\n{proc.stderr[-3000:]}")
    data = json.loads(proc.stdout)
    results = [{"ok": not err, "latency": lat, "ttft": ttft, "tokens": tokens, "error": err or None, "status": None,
                "upstream": None}
               for err, lat, ttft, tokens in zip(data["errors"], data["latencies"], data["ttfts"], data["output_lens"])]
    return results, data["duration"]


def summary(results, seconds):
    ok = [r for r in results if r["ok"]]
    lat = [r["latency"] for r in ok]
    ttft = [r["ttft"] for r in ok]
    tokens = sum(r.get("tokens", 0) for r in ok)
    return {
        "requests": len(results), "ok": len(ok),
        "lat_p50": pct(lat, 0.5), "lat_p90": pct(lat, 0.9), "lat_p99": pct(lat, 0.99),
        "ttft_p50": pct(ttft, 0.5), "ttft_p90": pct(ttft, 0.9), "ttft_p99": pct(ttft, 0.99),
        "tok_s": tokens / seconds if seconds else 0.0,
        "errors": collections.Counter(r.get("error") or r.get("status") for r in results if not r["ok"]),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    p.add_argument("--lb", default="", help="balancer base URL (nginx_lb; default: the lab balancers' virtual address)")
    p.add_argument("--lb-key", default="", help="API key for the balancer (default: the lab's edge key)")
    p.add_argument("--direct", default="", help="one replica head's base URL as the client sees it "
                   "(vllm_service; default: the lab's dgx1, its loopback when the client runs there)")
    p.add_argument("--direct-key", default="", help="API key for the replica (default: the lab's engine key)")
    p.add_argument("--model", default="tiny-llama")
    p.add_argument("--requests", type=int, default=48, help="requests per target and level (max 500)")
    p.add_argument("--levels", default="1,8", help="concurrency levels, comma-separated (each max 64)")
    p.add_argument("--rounds", type=int, default=4, help="alternating rounds per level")
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--upstream-header", default="X-Upstream")
    p.add_argument("--request-timeout", type=float, default=120)
    p.add_argument("--deadline", type=float, default=600, help="seconds for the whole run")
    lab_cache = os.environ.get("LAB_CACHE", "/var/cache/llmops-lab")
    p.add_argument("--client", choices=["vllm", "builtin"], default="vllm",
                   help="vllm: vLLM's `vllm bench serve` (default); builtin: this repository's streaming client")
    p.add_argument("--client-host", default="dgx1",
                   help="lab host that runs vllm bench serve, over the lab's SSH: a vLLM node has the venv and the "
                        "staged model, and the firewall lets it reach its own engine ('' = this machine)")
    p.add_argument("--ssh-config", default=os.environ.get("LAB_SSH_CONFIG", "/var/lib/llmops-lab/ssh/llmops-lab.config"))
    p.add_argument("--vllm", default="",
                   help="the vllm program (default: the node's /opt/vllm/current/bin/vllm, or the lab's vLLM venv here)")
    p.add_argument("--tokenizer", default="",
                   help="tokenizer directory on the client host (default: the model the node serves, or the lab's copy here)")
    p.add_argument("--input-len", type=int, default=64, help="prompt tokens per request (vllm client)")
    p.add_argument("--spread-requests", type=int, default=48,
                   help="requests of the last round through the balancer that measure the spread (vllm client)")
    args = p.parse_args()
    if not args.lb:
        args.lb, args.lb_key = lab_endpoint(), args.lb_key or lab_var("lab_edge_api_key")
    remote = args.client == "vllm" and args.client_host
    if not args.direct:
        args.direct = "http://127.0.0.1:8000" if remote else f"http://{lab_address('dgx1')}:8000"
        args.direct_key = args.direct_key or lab_var("lab_vllm_api_key")
    if not remote:
        args.client_host = ""
    args.vllm = args.vllm or ("/opt/vllm/current/bin/vllm" if remote else os.path.join(lab_cache, "vllm-venv", "bin", "vllm"))
    args.tokenizer = args.tokenizer or (f"/var/lib/vllm/models/{args.model}" if remote
                                        else os.path.join(lab_cache, "models", args.model))
    if args.client == "vllm" and not remote and not (os.access(args.vllm, os.X_OK) and os.path.isdir(args.tokenizer)):
        sys.exit(f"serving_bench: --client vllm needs the vllm program ({args.vllm}) and a local tokenizer directory "
                 f"({args.tokenizer}): make lab-vllm, or --vllm/--tokenizer, or --client builtin")

    levels = [int(x) for x in args.levels.split(",") if x]
    if (not 1 <= args.requests <= 500 or not all(1 <= c <= 64 for c in levels) or not 1 <= args.rounds <= 20
            or not 0 <= args.spread_requests <= 500 or not 1 <= args.input_len <= 4096):
        sys.exit("serving_bench: --requests 1..500, --levels each 1..64, --rounds 1..20, --spread-requests 0..500, "
                 "--input-len 1..4096 (bounded load)")
    nets = lab_networks()
    targets = [{"name": "lb", "url": args.lb, "key": args.lb_key}, {"name": "direct", "url": args.direct, "key": args.direct_key}]
    for t in targets:
        check_lab_target(t["url"], nets)

    stop_at = time.monotonic() + args.deadline
    print(f"serving_bench: model {args.model}, {args.requests} streamed requests per target and level, "
          f"max_tokens {args.max_tokens} (ignore_eos), {args.rounds} alternating rounds per level, client "
          + ("vllm bench serve (" + args.vllm + f", {args.input_len}-token random prompts)" if args.client == "vllm" else "builtin"))
    print(f"  lb     = {args.lb}\n  direct = {args.direct}"
          + (f" (as {args.client_host} sees it: the client runs there)" if args.client_host else "") + "\n")
    report = {}
    upstreams = collections.Counter()
    per_round = max(1, args.requests // args.rounds)
    for c in levels:
        collected = {t["name"]: ([], 0.0) for t in targets}
        for r in range(args.rounds):
            order = targets if r % 2 == 0 else targets[::-1]
            for t in order:
                one_round = vllm_round if args.client == "vllm" else run_round
                res, secs = one_round(t, per_round, c, args, r * per_round, stop_at)
                done, total = collected[t["name"]]
                collected[t["name"]] = (done + res, total + secs)
                if t["name"] == "lb":
                    upstreams.update(x["upstream"].split(", ")[-1] for x in res if x["ok"] and x.get("upstream"))
        report[c] = {name: summary(res, secs) for name, (res, secs) in collected.items()}
    if args.client == "vllm" and args.spread_requests:
        res, dummy = run_round(targets[0], args.spread_requests, max(levels), args, 0, stop_at)
        upstreams.update(x["upstream"].split(", ")[-1] for x in res if x["ok"] and x.get("upstream"))

    head = f"{'conc':>4} {'target':<7} {'ok':>7} {'lat p50':>8} {'p90':>7} {'p99':>7} {'ttft p50':>9} {'p90':>7} {'p99':>7} {'tok/s':>7}"
    print(head)
    print("-" * len(head))
    for c, rows in report.items():
        for name, s in rows.items():
            print(f"{c:>4} {name:<7} {s['ok']:>3}/{s['requests']:<3} {s['lat_p50']:>8.3f} {s['lat_p90']:>7.3f} "
                  f"{s['lat_p99']:>7.3f} {s['ttft_p50']:>9.3f} {s['ttft_p90']:>7.3f} {s['ttft_p99']:>7.3f} {s['tok_s']:>7.1f}"
                  + (f"  errors {dict(s['errors'])}" if s["errors"] else ""))
    print("\nratios balancer / direct (same load, same run; < 1 means faster through the balancer)")
    for c, rows in report.items():
        lb, d = rows["lb"], rows["direct"]
        print(f"  concurrency {c:>2}: latency p50 {lb['lat_p50'] / d['lat_p50']:.3f}  p90 {lb['lat_p90'] / d['lat_p90']:.3f}"
              f"   TTFT p50 {lb['ttft_p50'] / d['ttft_p50']:.3f}  p90 {lb['ttft_p90'] / d['ttft_p90']:.3f}"
              f"   tok/s {lb['tok_s'] / d['tok_s']:.3f}")
    print(f"\ndistribution over replicas through the balancer ({args.upstream_header}):")
    if upstreams:
        counts = list(upstreams.values())
        mean = statistics.mean(counts)
        for up, n in sorted(upstreams.items()):
            print(f"  {up:<24} {n:>5}  ({100 * n / sum(counts):.1f} %)")
        cv = statistics.pstdev(counts) / mean if len(counts) > 1 else 0.0
        print(f"  skew (max-min)/mean {(max(counts) - min(counts)) / mean:.3f}, coefficient of variation {cv:.3f}")
    else:
        print("  no upstream header seen")


if __name__ == "__main__":
    main()
