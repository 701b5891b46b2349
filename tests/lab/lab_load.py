"""Load against the lab, shared by the benchmarks (benchmarks/) and the lab's fault tests.

  one_request()        one streamed /v1/completions request (the collection's own client): status,
                       TTFT, latency, upstream, times
  Load                 constant load: N workers, each sending one request after another, bounded by
                       a request cap; start() / take() around whatever is measured
  lab_networks(), check_lab_target(url)
                       the traffic rule: a target must be loopback or inside one of this machine's
                       podman networks (the lab); anything else is refused before a request is sent
  pct(values, q)       a percentile (linear interpolation)
  lab_address(host), lab_var(name), lab_endpoint()
                       a lab container's management address (podman), a variable of the lab
                       inventory's group_vars/all.yml, the URL clients use (the balancers' virtual
                       address): the benchmarks' default targets and keys
"""
import ipaddress
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from urllib.parse import urlsplit

# The collection's HTTP client (needs ansible-core, as every lab test and benchmark has in .venv).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "plugins", "module_utils"))
import _openai_http  # noqa: E402  pylint: disable=wrong-import-position

PROMPTS = [
    "Write one sentence about the sea.",
    "List three prime numbers.",
    "Explain what a load balancer does.",
    "Name a colour and a fruit.",
]


def lab_networks():
    """Subnets of this machine's podman networks (the lab), plus loopback."""
    nets = [ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128")]
    try:
        names = subprocess.run(["podman", "network", "ls", "--format", "{{.Name}}"], capture_output=True,
                               text=True, check=True, timeout=30).stdout.split()
        if names:
            data = json.loads(subprocess.run(["podman", "network", "inspect", *names], capture_output=True,
                                             text=True, check=True, timeout=30).stdout)
            for net in data:
                for sub in net.get("subnets") or []:
                    nets.append(ipaddress.ip_network(sub["subnet"]))
    except (OSError, subprocess.SubprocessError, ValueError):
        pass
    return nets


LAB_INVENTORY = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                             "inventories", "lab")


def lab_address(host):
    """The first address podman gives the lab container `host` (its management network)."""
    return subprocess.run(["podman", "inspect", host, "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}"],
                          capture_output=True, text=True, check=True, timeout=30).stdout.split()[0]


def lab_var(name):
    """A plain value of the lab inventory's group_vars/all.yml (the lab's keys)."""
    with open(os.path.join(LAB_INVENTORY, "group_vars", "all.yml"), encoding="utf-8") as fh:
        return re.search(r"^%s:\s*(\S+)" % re.escape(name), fh.read(), re.M).group(1)


def lab_endpoint():
    """http://ADDRESS of the lab's endpoint as clients reach it: the balancer pair's virtual address
    (keepalived_virtual_ipv4 of inventories/lab/group_vars/balancers.yml), else lb1's address."""
    with open(os.path.join(LAB_INVENTORY, "group_vars", "balancers.yml"), encoding="utf-8") as fh:
        match = re.search(r"^keepalived_virtual_ipv4:\s*([0-9.]+)/", fh.read(), re.M)
    return "http://" + (match.group(1) if match else lab_address("lb1"))


def check_lab_target(url, nets=None):
    nets = lab_networks() if nets is None else nets
    host = urlsplit(url).hostname
    addrs = {info[4][0] for info in socket.getaddrinfo(host, None)}
    for addr in addrs:
        ip = ipaddress.ip_address(addr)
        if not any(ip in net for net in nets if net.version == ip.version):
            sys.exit(f"{url} resolves to {addr}, outside loopback and this machine's podman networks; "
                     "lab load only goes to lab addresses")


def one_request(url, key, model, prompt, max_tokens, header="X-Upstream", timeout=120):
    """One streamed /v1/completions request, sent and judged by the collection's own client
    (plugins/module_utils/_openai_http.completion, the one openai_endpoint and openai_load use).

    Success is a complete stream: HTTP 200, exactly max_tokens generated tokens (usage; the request
    sets ignore_eos) and the closing `data: [DONE]`. A stream cut before [DONE] fails even when
    text had arrived. A complete stream whose tokens decode to no text (special tokens) succeeds,
    its TTFT taken at its first finish event.

    Returns a dict: ok, status, ttft, latency, tokens, upstream, start, end, error, finish_reason,
    text_chunks (streamed chunks that carried text)."""
    t0 = time.monotonic()
    res = _openai_http.completion(
        url.rstrip("/"), "completion", model, prompt,
        max_tokens=max_tokens, stream=True, timeout=timeout, validate_certs=False,
        headers={"Authorization": "Bearer " + key} if key else None, upstream_header=header,
        extra_body={"ignore_eos": True})
    result = {"ok": res["ok"], "status": res["status"], "ttft": res["ttft"], "latency": res["latency"],
              "tokens": res["output_tokens"], "upstream": res["upstream"], "start": t0, "end": time.monotonic(),
              "error": res["error"], "finish_reason": res["finish_reason"], "text_chunks": res["chunks"]}
    # ignore_eos: a served request generates exactly max_tokens tokens. Fewer (an engine that
    # aborted it while stopping, finish_reason "abort") is a lost request, whatever the status.
    if result["ok"] and result["tokens"] != max_tokens:
        result["ok"] = False
        result["error"] = "generated %s of %s tokens (finish_reason %s)" % (
            result["tokens"], max_tokens, result["finish_reason"])
    if not result["ok"] and res.get("body"):
        result["error"] = "%s: %s" % (result["error"], res["body"][:200])
    return result


def pct(values, q):
    if not values:
        return float("nan")
    values = sorted(values)
    k = (len(values) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


class Load:
    """Constant streaming load: `concurrency` workers, each sending one request after another and
    then pausing `pause` seconds.

    The pause keeps the load under the edge's rate limit (nginx_lb_rate_limit_rate, 20 requests/s
    per key by default): 4 workers with 0.3 s pauses send at most ~13/s however fast the replicas
    answer, so a 429 is a real failure, not the load's own doing.
    Bounded: at most `cap` requests and `max_seconds` between start() and take(), each request with
    a timeout. The target is checked against the traffic rule (check_lab_target) when the Load is
    made."""

    def __init__(self, url, key, model, concurrency=4, max_tokens=16, cap=20000, timeout=120, pause=0.3,
                 max_seconds=3600):
        check_lab_target(url)
        self.url, self.key, self.model = url, key, model
        self.concurrency, self.max_tokens, self.cap, self.timeout = concurrency, max_tokens, cap, timeout
        self.pause, self.max_seconds, self.t_start = pause, max_seconds, None
        self.results, self.lock, self.stop = [], threading.Lock(), threading.Event()
        self.threads = []

    def _worker(self, n):
        i = n
        while not self.stop.is_set():
            with self.lock:
                if len(self.results) >= self.cap or time.monotonic() - self.t_start > self.max_seconds:
                    return
            t0 = time.monotonic()
            # A worker must never die silently: any client error is a failed request.
            try:
                r = one_request(self.url, self.key, self.model, PROMPTS[i % len(PROMPTS)], self.max_tokens,
                                "X-Upstream", self.timeout)
            except Exception as exc:  # pylint: disable=broad-except
                r = {"ok": False, "status": None, "upstream": None, "start": t0, "end": time.monotonic(),
                     "error": f"client error {type(exc).__name__}: {exc}"}
            r["t"] = r["end"]
            with self.lock:
                self.results.append(r)
            i += self.concurrency
            self.stop.wait(self.pause)

    def start(self):
        self.stop.clear()
        self.t_start = time.monotonic()
        self.threads = [threading.Thread(target=self._worker, args=(n,), daemon=True)
                        for n in range(self.concurrency)]
        for t in self.threads:
            t.start()

    def snapshot(self):
        """The results so far, without stopping. Raises when every worker has ended although the
        load was not stopped (a wait on it would otherwise last until its own deadline)."""
        with self.lock:
            out = list(self.results)
        if self.threads and not self.stop.is_set() and not any(t.is_alive() for t in self.threads):
            raise RuntimeError("the load's workers all ended after %d requests in %.0f s (cap %d, %d s)" % (
                len(out), time.monotonic() - self.t_start, self.cap, self.max_seconds))
        return out

    def take(self):
        """Stop the workers (each finishes its request) and return every result since start()."""
        self.stop.set()
        for t in self.threads:
            t.join(timeout=self.timeout + 60)
        with self.lock:
            out, self.results = self.results, []
        return out
