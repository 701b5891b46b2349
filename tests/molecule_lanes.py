"""Run molecule scenarios in parallel lanes: tests/molecule_lanes.py LANES SCENARIO...

Much of a scenario's time is spent waiting (apt, an engine loading, a container starting), so two
lanes on CI's two cores finish well before one. Every scenario keeps its own podman network and
containers (molecule/_shared/create.yml), so lanes do not share hosts. The longest scenarios start
first (WEIGHTS: measured minutes, a guide only); a free lane takes the next one.

Each scenario's output goes to .cache/molecule-logs/<scenario>.log and each duration to
.cache/gates.tsv (tests/gate.sh); a failed scenario's log tail is printed. Exit status: 0 when all
passed. LANES=1 runs them one after another, printing their output as it comes.
"""
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOGS = os.path.join(ROOT, ".cache", "molecule-logs")
# Rough minutes on a quiet 2-core machine: only the order depends on them.
WEIGHTS = {"cluster": 17, "gpu_stack_arm64": 14, "nginx_lb": 9, "dspark_build": 8, "response_cache": 8, "keepalived": 8,
           "vllm_service": 7, "network": 6, "bad_inputs": 6, "firewall": 5, "container_toolkit": 4,
           "monitoring": 4, "vllm_router": 4, "nvidia_driver_packages-nomodule": 3, "headless": 2}
PRINT = threading.Lock()


def say(text):
    with PRINT:
        print(text, flush=True)


def run(scenario, stream):
    cmd = [os.path.join(ROOT, "tests", "gate.sh"), f"molecule:{scenario}", "molecule", "test", "-s", scenario]
    log = os.path.join(LOGS, f"{scenario}.log")
    t0 = time.monotonic()
    say(f"[lanes] {scenario}: start (log {os.path.relpath(log, ROOT)})")
    with open(log, "w") as fh:
        if stream:
            proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for line in proc.stdout:
                fh.write(line)
                sys.stdout.write(line)
            rc = proc.wait()
        else:
            rc = subprocess.run(cmd, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, check=False).returncode
    seconds = time.monotonic() - t0
    if rc != 0 and not stream:
        with open(log, errors="replace") as fh:
            tail = fh.readlines()[-150:]
        say(f"[lanes] {scenario}: FAILED in {seconds:.0f}s; last lines of its log:\n" + "".join(tail))
    else:
        say(f"[lanes] {scenario}: {'passed' if rc == 0 else 'FAILED'} in {seconds:.0f}s")
    return scenario, rc, seconds


def main():
    if len(sys.argv) < 3 or not sys.argv[1].isdigit() or int(sys.argv[1]) < 1:
        sys.exit("usage: tests/molecule_lanes.py LANES(>=1) SCENARIO...")
    lanes, scenarios = int(sys.argv[1]), sys.argv[2:]
    missing = [s for s in scenarios if not os.path.isfile(os.path.join(ROOT, "molecule", s, "molecule.yml"))]
    if missing:
        sys.exit(f"molecule_lanes: no such scenario: {', '.join(missing)} (see molecule/*/molecule.yml)")
    os.makedirs(LOGS, exist_ok=True)
    order = sorted(scenarios, key=lambda s: -WEIGHTS.get(s, 5))
    t0 = time.monotonic()
    with ThreadPoolExecutor(lanes) as pool:
        results = list(pool.map(lambda s: run(s, lanes == 1), order))
    failed = [r[0] for r in results if r[1] != 0]
    say(f"\n[lanes] {len(results)} scenarios in {time.monotonic() - t0:.0f}s on {lanes} lane(s):")
    for s, rc, seconds in results:
        say(f"  {s:34} {'passed' if rc == 0 else 'FAILED':7} {seconds:6.0f}s")
    if failed:
        say(f"[lanes] FAILED: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
