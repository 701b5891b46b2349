"""Load held by the balancer: thousands of concurrent streams through nginx as the nginx_lb role
configures it, and the latency nginx adds. Prints numbers.

The lab: one Debian host (a podman container on a network of the bench's own, `bench-edge`)
converged by benchmarks/edge_load_bench.yml - the stand-in SSE backend
(benchmarks/edge_standin_backend.py: fixed token pacing, so the balancer is what is measured) on
port 8000, and the nginx_lb role in front of it (edge key, rate limit, sandboxed unit, the worker
sizing defaults). This machine runs the client: asyncio on raw sockets, every stream on its own
connection.

At each concurrency (1, 64, 512, 4096 by default) the same streams run twice, directly to the
backend and through nginx; the table gives the streams held open at once (client side, and the
backend's count for the nginx run), the errors, and p50/p99 of the time to first token (TTFT, from
connect) and of the gap between tokens, direct, through nginx, and the difference: the latency the
balancer adds. Any error, or fewer streams held at once than asked, makes the exit status 1.

Bounded and lab-only: a fixed number of streams per level, each with a deadline; requests go only
to the bench's own container (its address is checked to be inside the bench's network). The
container and its network are removed at the end (--keep leaves them for a look).

  make bench-edge                               # the whole run
  python3 benchmarks/edge_load_bench.py --levels 1,64 --samples 4     # a quick look
"""
import argparse
import asyncio
import ipaddress
import json
import os
import platform
import re
import resource
import secrets
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "lab"))
from lab_load import pct  # noqa: E402  (the lab's percentile)

LAB = os.path.join(REPO, "tests", "lab", "lab.sh")
PLAYBOOK = os.path.join(REPO, "benchmarks", "edge_load_bench.yml")
NETWORK = "bench-edge"
SUBNET = "10.89.230.0/24"
HOST = "bench-edge-lb1"
BACKEND_PORT = 8000
LB_PORT = 80


def log(msg):
    print("[edge_load_bench] %s" % msg, flush=True)


def lab(*args):
    env = dict(os.environ, LAB_NETWORK=NETWORK, LAB_SUBNET=SUBNET, LAB_SSH="0")
    subprocess.run(["bash", LAB, *args], env=env, check=True)


def container_ip():
    out = subprocess.run(["podman", "inspect", HOST], capture_output=True, text=True, check=True).stdout
    address = json.loads(out)[0]["NetworkSettings"]["Networks"][NETWORK]["IPAddress"]
    if ipaddress.ip_address(address) not in ipaddress.ip_network(SUBNET):
        raise SystemExit("%s has %s, outside the bench's network %s: not sending anything" % (HOST, address, SUBNET))
    return address


def in_host(*argv):
    return subprocess.run(["podman", "exec", HOST, *argv], capture_output=True, text=True, check=False).stdout.strip()


def converge(key, extra, conn_limit):
    """The stand-in and nginx_lb on the bench's host (the role's real configuration)."""
    inventory = {"all": {"children": {"balancers": {"hosts": {HOST: {
        "ansible_connection": "containers.podman.podman", "ansible_python_interpreter": "/usr/bin/python3"}}}}}}
    variables = {
        "nginx_lb_backends": [{"address": "127.0.0.1", "port": BACKEND_PORT, "name": "standin"}],
        "nginx_lb_api_keys": [key],
        # One client address and one key send every stream: the limiter stays in the path, above them.
        "nginx_lb_rate_limit_rate": 100000,
        "nginx_lb_rate_limit_burst": 100000,
        # The per-key stream cap (limit_conn) stays in the path too, above the most streams asked.
        "nginx_lb_conn_limit": conn_limit,
    }
    variables.update(extra)
    with tempfile.TemporaryDirectory() as tmp:
        inv, var = os.path.join(tmp, "inventory.json"), os.path.join(tmp, "vars.json")
        for path, data in ((inv, inventory), (var, variables)):
            with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as fh:
                json.dump(data, fh)
        t0 = time.monotonic()
        proc = subprocess.run(["ansible-playbook", "-i", inv, PLAYBOOK, "-e", "@" + var], cwd=REPO,
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            sys.stdout.write((proc.stdout + proc.stderr).replace(key, "<key>")[-6000:])
            raise SystemExit("the converge failed")
        log("converged the stand-in and nginx_lb in %.0f s" % (time.monotonic() - t0))


class Level:
    def __init__(self):
        self.open = 0
        self.max_open = 0
        self.errors = {}
        self.ttft = []
        self.gaps = []
        self.streams = 0
        self.lag = []


async def one_stream(address, port, request, tokens, deadline, connecting, level):
    loop = asyncio.get_running_loop()
    writer = None
    opened = False
    try:
        async with connecting:  # connects in progress at once (the ramp), not streams open at once
            start = loop.time()
            reader, writer = await asyncio.wait_for(asyncio.open_connection(address, port), deadline)
        writer.write(request)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), deadline)
        status = head.split(b" ", 2)[1].decode()
        if status != "200":
            raise RuntimeError("HTTP " + status)
        level.open += 1
        opened = True
        level.max_open = max(level.max_open, level.open)
        times = []
        done = False
        end = start + deadline
        while not done:
            data = await asyncio.wait_for(reader.read(65536), max(end - loop.time(), 0.001))
            now = loop.time()
            if not data:
                break
            times.extend([now] * data.count(b'data: {'))
            done = b"data: [DONE]" in data
        if not done or len(times) != tokens:
            raise RuntimeError("stream ended after %d of %d tokens" % (len(times), tokens))
        level.ttft.append(times[0] - start)
        level.gaps.extend(b - a for a, b in zip(times, times[1:]))
        level.streams += 1
    except Exception as exc:  # every failure is counted by kind
        kind = "timeout" if isinstance(exc, asyncio.TimeoutError) else str(exc) or type(exc).__name__
        level.errors[kind] = level.errors.get(kind, 0) + 1
    finally:
        if opened:
            level.open -= 1
        if writer is not None:
            writer.close()


def tokens_for(concurrency, args):
    """Tokens a stream of this level gets: --tokens, or more where starting every stream takes
    longer than --tokens would last (--hold-ms per stream), so that they are all open at once."""
    return max(args.tokens, -(-concurrency * args.hold_ms // args.gap_ms))


async def run_level(address, port, key, concurrency, total, args):
    """total streams, concurrency at a time; returns the Level."""
    tokens = tokens_for(concurrency, args)
    body = json.dumps({"model": "standin", "prompt": "Hello", "max_tokens": tokens, "stream": True}).encode()
    request = (b"POST /v1/completions HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer %s\r\n"
               b"Content-Type: application/json\r\nX-Tokens: %d\r\nX-Gap-Ms: %d\r\nConnection: close\r\n"
               b"Content-Length: %d\r\n\r\n%s") % (key.encode(), tokens, args.gap_ms, len(body), body)
    level = Level()
    connecting = asyncio.Semaphore(args.connect_burst)
    deadline = args.ttft + tokens * args.gap_ms / 1000.0 + args.slack
    queue = list(range(total))

    async def worker():
        while queue:
            queue.pop()
            await one_stream(address, port, request, tokens, deadline, connecting, level)

    async def ticker():
        """The client's own lateness: a tick every 50 ms, how late it ran. A late client reads
        several tokens at once (a gap of 0, then a long one) and starts connections late (TTFT), so
        the numbers of a level whose lag is near the token gap measure this client, not the balancer."""
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + 0.05
            await asyncio.sleep(0.05)
            level.lag.append(max(loop.time() - due, 0.0))

    tick = asyncio.ensure_future(ticker())
    await asyncio.gather(*(worker() for _unused in range(concurrency)))
    tick.cancel()
    return level


def backend_stats(address, reset=False):
    import http.client
    conn = http.client.HTTPConnection(address, BACKEND_PORT, timeout=10)
    conn.request("GET", "/stats/reset" if reset else "/stats")
    data = json.loads(conn.getresponse().read())
    conn.close()
    return data


def ms(value):
    return "%.1f" % (value * 1000)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--levels", default="1,64,512,4096", help="concurrencies, comma-separated")
    parser.add_argument("--samples", type=int, default=10, help="fewest streams per level (level 1 runs this many)")
    parser.add_argument("--tokens", type=int, default=8, help="tokens per stream (at least)")
    parser.add_argument("--hold-ms", type=int, default=4,
                        help="a level of N streams makes each last at least N times this (they must overlap)")
    parser.add_argument("--gap-ms", type=int, default=500, help="the stand-in's gap between tokens")
    parser.add_argument("--connect-burst", type=int, default=256, help="connects in progress at once")
    parser.add_argument("--suite", default="bookworm", choices=["bookworm", "trixie"])
    parser.add_argument("--nginx-var", action="append", default=[], metavar="NAME=VALUE",
                        help="an nginx_lb variable for the run (a YAML value), e.g. nginx_lb_worker_connections=768")
    parser.add_argument("--keep", action="store_true", help="leave the container and network up")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    args.ttft = 0.05
    args.slack = 30.0
    levels = [int(x) for x in args.levels.split(",")]
    if max(levels) > 8192 or args.tokens > 100 or args.samples > 1000 or not 0 <= args.hold_ms <= 10:
        raise SystemExit("bounded: at most 8192 streams at once, 100 tokens a stream, 1000 samples, --hold-ms 0-10")
    extra = {}
    for item in args.nginx_var:
        name, _sep, value = item.partition("=")
        if not re.match(r"^nginx_lb_[a-z_]+$", name):
            raise SystemExit("--nginx-var takes nginx_lb_NAME=VALUE, got %r" % item)
        import yaml
        extra[name] = yaml.safe_load(value)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = max(levels) + 1024
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(need, soft)), hard))
    key = "bench-" + secrets.token_urlsafe(24)
    rows, problems = [], []
    try:
        lab("up", "%s@%s" % (HOST, args.suite))
        address = container_ip()
        converge(key, extra, max(levels) + 64)
        machine = {
            "client": "%s, %d cores, Python %s" % (platform.platform(), os.cpu_count(), platform.python_version()),
            "balancer": in_host("sh", "-c", "nginx -v 2>&1; echo workers $(pgrep -c -P $(cat /run/nginx.pid))"),
            "sizing": in_host("sh", "-c", "grep -E '^\\s*(worker_connections|worker_rlimit_nofile)' /etc/nginx/nginx.conf"),
            "load_before": os.getloadavg(),
        }
        log("balancer %s: %s" % (address, " | ".join(machine["balancer"].split("\n") + machine["sizing"].split("\n"))))
        for concurrency in levels:
            total = max(concurrency, args.samples)
            result = {"concurrency": concurrency, "streams": total, "tokens": tokens_for(concurrency, args)}
            for mode, port in (("direct", BACKEND_PORT), ("nginx", LB_PORT)):
                backend_stats(address, reset=True)
                t0 = time.monotonic()
                level = asyncio.run(run_level(address, port, key, concurrency, total, args))
                seconds = time.monotonic() - t0
                result[mode] = {
                    "held": level.max_open, "backend_held": backend_stats(address)["max_open"],
                    "ok": level.streams, "errors": sum(level.errors.values()), "error_kinds": level.errors,
                    "ttft_p50": pct(level.ttft, 0.5), "ttft_p99": pct(level.ttft, 0.99),
                    "gap_p50": pct(level.gaps, 0.5), "gap_p99": pct(level.gaps, 0.99), "seconds": round(seconds, 1),
                    "client_lag_p50": pct(level.lag, 0.5), "client_lag_p99": pct(level.lag, 0.99),
                }
                r = result[mode]
                log("c=%d %s: %d/%d ok, held %d (backend %d), errors %s, TTFT p50 %s p99 %s ms, gap p50 %s p99 %s ms, "
                    "client lag p50 %s p99 %s ms, %.1f s"
                    % (concurrency, mode, r["ok"], total, r["held"], r["backend_held"], level.errors or 0,
                       ms(r["ttft_p50"]), ms(r["ttft_p99"]), ms(r["gap_p50"]), ms(r["gap_p99"]),
                       ms(r["client_lag_p50"]), ms(r["client_lag_p99"]), seconds))
                if r["errors"]:
                    problems.append("c=%d %s: %d errors %s" % (concurrency, mode, r["errors"], level.errors))
                if r["held"] < min(concurrency, total) or r["backend_held"] < min(concurrency, total):
                    problems.append("c=%d %s: only %d streams open at once (backend %d)"
                                    % (concurrency, mode, r["held"], r["backend_held"]))
            rows.append(result)
        machine["load_after"] = os.getloadavg()
    finally:
        if not args.keep:
            lab("down", HOST)
    print()
    print("Balancer's added latency (through nginx minus direct to the stand-in), ms; tokens %d ms apart, "
          "the first after %d ms; %s tokens a stream" % (args.gap_ms, args.ttft * 1000,
                                                         ", ".join("%d at %d" % (r["tokens"], r["concurrency"]) for r in rows)))
    print()
    print("| concurrency | streams held at once (nginx / backend) | errors (direct / nginx) "
          "| TTFT p50 direct / nginx / added | TTFT p99 direct / nginx / added "
          "| gap p50 direct / nginx / added | gap p99 direct / nginx / added | client lag p99 direct / nginx |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        d, n = row["direct"], row["nginx"]
        cells = []
        for key_ in ("ttft_p50", "ttft_p99", "gap_p50", "gap_p99"):
            cells.append("%s / %s / **%s**" % (ms(d[key_]), ms(n[key_]), ms(n[key_] - d[key_])))
        cells.append("%s / %s" % (ms(d["client_lag_p99"]), ms(n["client_lag_p99"])))
        print("| %d | %d / %d | %d / %d | %s |" % (row["concurrency"], n["held"], n["backend_held"], d["errors"],
                                                   n["errors"], " | ".join(cells)))
    print()
    print("client: %s; balancer: %s; %s; load average before %s, after %s" % (
        machine["client"], machine["balancer"].replace("\n", ", "), machine["sizing"].replace("\n", " ").strip(),
        " ".join("%.1f" % x for x in machine["load_before"]),
        " ".join("%.1f" % x for x in machine.get("load_after", ()))))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"machine": machine, "rows": rows, "args": vars(args)}, fh, indent=1)
    if problems:
        print("\nFAILED: " + "; ".join(problems))
        return 1
    print("\nheld every level with 0 errors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
