"""Cluster benchmark and rolling-upgrade test on the lab. Prints numbers.

Runs against the lab that `make lab-up` started (inventories/lab: dgx1..dgx4 replicas, lb1):

  converge  site.yml timed three ways in one run: the full converge (cold on a fresh lab), the
            no-change re-run (it must report changed=0), and a tagged single-layer re-run
            (--tags vllm_service); printed with their ratios to the full converge.
  rolling   constant streaming load through the balancer (lb1) while playbooks/upgrade.yml
            (1) restarts every replica, (2) pushes an engine-config change (max_num_seqs) and
            (3) pushes it back, replica by replica. Every request is counted: the table gives, per
            phase, requests sent, failed, and the time each replica took. Any failed request makes
            the exit status 1: this is the zero-failure test of the rolling upgrade.

Bounded and lab-only: the load has a fixed concurrency, a per-phase deadline and a request cap;
the balancer address must be loopback or inside one of this machine's podman networks.

  make bench-cluster                      # both parts (the Makefile target brings the lab up)
  python3 benchmarks/cluster_bench.py --skip-converge
  python3 benchmarks/cluster_bench.py --skip-converge --phases restart,change   # shorter
"""
import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "lab"))
from bench_args import csv_of  # noqa: E402
from lab_load import Load, lab_endpoint, lab_var, pct  # noqa: E402  (shared with the lab's fault tests)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INVENTORY = os.path.join(REPO, "inventories", "lab")
REPLICA_DONE = re.compile(r"upgrade: replica (\S+) changed and back in the balancer after ([0-9.]+) s")


def _messages(node):
    """Every 'msg' string anywhere in the json callback's document (debug and fail messages)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "msg" and isinstance(value, str):
                yield value
            else:
                yield from _messages(value)
    elif isinstance(node, list):
        for item in node:
            yield from _messages(item)


def playbook(name, *args, log=None):
    """Run one playbook on the lab; return (seconds, changed total, failed total, messages).

    Ansible's json stdout callback (ansible.posix.json) gives the per-host stats and every message,
    so nothing is read back from the human-readable output."""
    cmd = ["ansible-playbook", "-i", INVENTORY, os.path.join(REPO, "playbooks", name), *args]
    print("[cluster_bench] " + " ".join(cmd), flush=True)
    t0 = time.monotonic()
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_FORCE_COLOR="0")
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env, check=False)
    seconds = time.monotonic() - t0
    if log:
        with open(log, "a") as fh:
            fh.write(proc.stdout + proc.stderr)
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        print(proc.stdout[-4000:] + proc.stderr[-4000:], file=sys.stderr)
        return seconds, 0, 1, ""
    stats = doc.get("stats", {})
    changed = sum(s.get("changed", 0) for s in stats.values())
    failed = sum(s.get("failures", 0) + s.get("unreachable", 0) for s in stats.values()) + (proc.returncode != 0)
    messages = "\n".join(_messages(doc.get("plays", [])))
    if proc.returncode != 0:
        print(messages[-4000:] + proc.stderr[-2000:], file=sys.stderr)
    return seconds, changed, failed, messages, doc


def _stamp(text):
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def task_profile(doc):
    """[(seconds, task name)] of every task of the json callback's document, by its wall time (the
    callback's start and end of the task over all its hosts)."""
    out = []
    for play in doc.get("plays", []):
        for task in play.get("tasks", []):
            span = task.get("task", {}).get("duration", {})
            if span.get("start") and span.get("end"):
                out.append((_stamp(span["end"]) - _stamp(span["start"]), task["task"].get("name", "?")))
    return out


def print_profile(label, doc, top=20):
    """The slowest tasks of a run, and the time per role (the part of a task name before ' : ')."""
    tasks = task_profile(doc)
    total = sum(seconds for seconds, dummy in tasks)
    roles = {}
    for seconds, name in tasks:
        role = name.split(" : ", 1)[0] if " : " in name else "(playbook)"
        roles[role] = roles.get(role, 0.0) + seconds
    print(f"\n=== {label}: {len(tasks)} tasks, {total:.1f} s of task time")
    print(f"{'role':28} {'seconds':>8} {'share':>6}")
    for role, seconds in sorted(roles.items(), key=lambda kv: -kv[1]):
        print(f"{role:28} {seconds:8.1f} {seconds / total if total else 0:6.1%}")
    print(f"\n{'slowest tasks':70} {'seconds':>8}")
    for seconds, name in sorted(tasks, reverse=True)[:top]:
        print(f"{name[:70]:70} {seconds:8.2f}")


def lab_vars():
    """The balancer's address and the edge key, as the lab inventory defines them."""
    return lab_endpoint(), lab_var("lab_edge_api_key")


def converge_part(log, profile=False):
    rows = []
    for label, args in (("full converge", ()), ("no-change re-run", ()),
                        ("--tags vllm_service re-run", ("--tags", "vllm_service"))):
        seconds, changed, failed, dummy, doc = playbook("site.yml", *args, log=log)
        rows.append((label, seconds, changed, failed))
        if label == "no-change re-run" and profile:
            print_profile(label, doc)
    full = rows[0][1]
    print("\n=== site.yml on the lab (one run)")
    print(f"{'run':30} {'seconds':>9} {'changed':>8} {'failed':>7} {'ratio to full':>14}")
    for label, seconds, changed, failed in rows:
        print(f"{label:30} {seconds:9.1f} {changed:8d} {failed:7d} {seconds / full:14.3f}")
    problems = [f"{row[0]}: {row[3]} failed" for row in rows if row[3]]
    if rows[1][2] != 0:
        problems.append(f"no-change re-run reported changed={rows[1][2]}")
    return problems


def rolling_part(args, log):
    url, key = args.lb or lab_vars()[0], args.lb_key or lab_vars()[1]
    base = json.loads(subprocess.run(
        ["ansible-inventory", "-i", INVENTORY, "--host", "dgx1"], cwd=REPO, capture_output=True, text=True,
        check=True).stdout).get("vllm_service_engine", {})
    changed_engine = dict(base, max_num_seqs=max(1, int(base.get("max_num_seqs", 64)) // 2))
    phases = {
        "restart": ("rolling restart", ["-e", "upgrade_layer=restart"]),
        "change": ("engine config change", ["-e", "upgrade_layer=vllm_service",
                                            "-e", json.dumps({"vllm_service_engine": changed_engine})]),
        "back": ("engine config back", ["-e", "upgrade_layer=vllm_service"]),
    }
    phases = [phases[name] for name in args.phases]
    load = Load(url, key, args.model, args.concurrency, args.max_tokens, args.cap, pause=args.pause)
    table, problems = [], []
    for label, extra in phases:
        load.start()
        time.sleep(2)
        seconds, dummy, failed, out, dummy_doc = playbook("upgrade.yml", *extra, log=log)
        time.sleep(2)
        results = load.take()
        bad = [r for r in results if not r["ok"]]
        lat = [r["latency"] for r in results if r["ok"]]
        replicas = REPLICA_DONE.findall(out)
        # Complete streams (200, tokens generated, [DONE]) whose tokens decoded to no text: the tiny
        # lab model can sample special or partial-byte tokens. Counted as served, and shown.
        no_text = sum(1 for r in results if r["ok"] and not r.get("text_chunks"))
        table.append((label, seconds, len(results), len(bad), pct(lat, 0.5), pct(lat, 0.99), replicas,
                      sorted({str(r.get("error") or r.get("status")) for r in bad}), no_text))
        for r in bad:
            print(f"[cluster_bench] {label}: failed request at +{r['start'] - load.t_start:.1f} s "
                  f"({r['end'] - r['start']:.2f} s): status {r.get('status')}, {r.get('error')}, "
                  f"upstream {r.get('upstream')}", flush=True)
        if failed:
            problems.append(f"{label}: upgrade.yml failed")
        if bad:
            problems.append(f"{label}: {len(bad)} of {len(results)} requests failed")
    print(f"\n=== rolling upgrades under load (concurrency {args.concurrency}, max_tokens {args.max_tokens})")
    print(f"{'phase':22} {'seconds':>8} {'sent':>6} {'failed':>7} {'p50 s':>7} {'p99 s':>7} {'no text':>8}"
          "  time per replica")
    for label, seconds, sent, failed, p50, p99, replicas, errors, no_text in table:
        per = ", ".join(f"{r} {float(s):.1f}s" for r, s in replicas) or "-"
        print(f"{label:22} {seconds:8.1f} {sent:6d} {failed:7d} {p50:7.2f} {p99:7.2f} {no_text:8d}  {per}")
        if errors:
            print(f"{'':22} errors: {errors}")
    return problems


PHASES = ("restart", "change", "back")


phase_list = csv_of(PHASES)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    p.add_argument("--skip-converge", action="store_true", help="only the rolling part")
    p.add_argument("--skip-rolling", action="store_true", help="only the converge timings")
    p.add_argument("--profile", action="store_true",
                   help="print the no-change run's time per role and its slowest tasks (from the json callback)")
    p.add_argument("--lb", default="", help="balancer base URL (default: the lab balancers' virtual address)")
    p.add_argument("--lb-key", default="", help="edge API key (default: the lab's)")
    p.add_argument("--model", default="tiny-llama")
    p.add_argument("--concurrency", type=int, default=4, choices=range(1, 33), metavar="1..32")
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--cap", type=int, default=20000, help="most requests per phase")
    p.add_argument("--pause", type=float, default=0.3,
                   help="seconds each client waits between requests (stays under the edge's rate limit)")
    p.add_argument("--phases", default="restart,change,back", type=phase_list,
                   help="rolling phases, in order, from restart,change,back (default: all three)")
    p.add_argument("--log", default=os.path.join(REPO, "reports", "cluster_bench.log"))
    args = p.parse_args()
    os.makedirs(os.path.dirname(args.log), exist_ok=True)
    open(args.log, "w").close()
    problems = []
    if not args.skip_converge:
        problems += converge_part(args.log, args.profile)
    if not args.skip_rolling:
        problems += rolling_part(args, args.log)
    print(f"\nplaybook output: {args.log}")
    if problems:
        print("FAILED: " + "; ".join(problems))
        return 1
    print("OK: no failed request, no failed play" + ("" if args.skip_converge else ", re-run changed=0"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
