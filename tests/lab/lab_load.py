"""Load against the lab, shared by the benchmarks (benchmarks/) and the lab's fault tests.

  one_request()        one streamed /v1/completions request: status, TTFT, latency, upstream, times
  Load                 constant load: N workers, each sending one request after another, bounded by
                       a request cap; start() / take() around whatever is measured
  lab_networks(), check_lab_target(url)
                       the traffic rule: a target must be loopback or inside one of this machine's
                       podman networks (the lab); anything else is refused before a request is sent
  pct(values, q)       a percentile (linear interpolation)
"""
import http.client
import ipaddress
import json
import socket
import subprocess
import sys
import threading
import time
from urllib.parse import urlsplit

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
    """One streamed completion. Returns a dict: ok, status, ttft, latency, tokens, upstream, start, end,
    error (on a transport error)."""
    parts = urlsplit(url)
    conn_cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    kwargs = {}
    if parts.scheme == "https":
        import ssl
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        kwargs["context"] = ctx
    conn = conn_cls(parts.hostname, parts.port, timeout=timeout, **kwargs)
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens, "stream": True,
                       "ignore_eos": True, "stream_options": {"include_usage": True}})
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    t0 = time.monotonic()
    result = {"ok": False, "ttft": None, "latency": None, "tokens": 0, "upstream": None, "status": None,
              "start": t0, "end": None}
    try:
        conn.request("POST", (parts.path.rstrip("/") or "") + "/v1/completions", body=body, headers=headers)
        resp = conn.getresponse()
        result["status"] = resp.status
        result["upstream"] = resp.getheader(header) if header else None
        while True:
            line = resp.readline()  # decodes the chunked framing (fp.readline would not)
            if not line or line.strip() == b"data: [DONE]":
                break
            if not line.startswith(b"data: "):
                continue
            event = json.loads(line[6:])
            if event.get("choices") and event["choices"][0].get("text") and result["ttft"] is None:
                result["ttft"] = time.monotonic() - t0
            if event.get("usage"):
                result["tokens"] = event["usage"].get("completion_tokens", 0)
        result["latency"] = time.monotonic() - t0
        result["ok"] = resp.status == 200 and result["ttft"] is not None
        if not result["ok"] and "error" not in result:
            result["error"] = f"HTTP {resp.status}" if resp.status != 200 else "stream ended without text"
    except (OSError, http.client.HTTPException, ValueError) as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()
        result["end"] = time.monotonic()
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
