"""HTTP helpers for the response_cache verify step: real requests from this machine to the lab
balancer's cache front (nginx on :4000, in front of LiteLLM on the balancer's loopback :4001) and to
the head's real vLLM engine (/metrics), both containers on the podman network this molecule run
created; and requests made on a lab host itself (its loopback, or another host's address)."""
import http.client
import json
import re
import uuid

import pytest
from lab_testinfra import container_ip, wait_until  # tests/lab, on the verifier's PYTHONPATH

LB = "response-cache-lb1"
HEAD = "response-cache-head1"
TENANT_A = "lab-cache-tenant-a-000001"
TENANT_B = "lab-cache-tenant-b-000001"
METRICS_KEY = "lab-cache-metrics-0000001"
REDIS_PASSWORD = "lab-redis-password-00001"
MODEL = "tiny-llama"
GATEWAY_PORT = 4000   # the front (nginx)
LITELLM_PORT = 4001   # LiteLLM itself, on the balancer's loopback


def call(address, port, method, path, body=None, headers=None, timeout=60):
    conn = http.client.HTTPConnection(address, port, timeout=timeout)
    hdrs = {"Content-Type": "application/json"}
    hdrs.update(headers or {})
    conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=hdrs)
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, dict(resp.getheaders()), data


class Gateway:
    def __init__(self, address):
        self.address = address

    def post(self, path, body, key=TENANT_A, headers=None):
        hdrs = dict(headers or {})
        if key:
            hdrs["Authorization"] = "Bearer " + key
        return call(self.address, GATEWAY_PORT, "POST", path, body, hdrs)

    def complete(self, key=TENANT_A, headers=None, **body):
        body = dict({"model": MODEL, "max_tokens": 8}, **body)
        status, hdrs, data = self.post("/v1/completions", body, key, headers)
        assert status == 200, data
        return json.loads(data)

    def stream(self, key=TENANT_A, **body):
        conn = http.client.HTTPConnection(self.address, GATEWAY_PORT, timeout=60)
        conn.request("POST", "/v1/completions", body=json.dumps(dict({"model": MODEL, "max_tokens": 6}, stream=True, **body)),
                     headers={"Content-Type": "application/json", "Authorization": "Bearer " + key})
        resp = conn.getresponse()
        events = []
        for line in resp.read().decode().splitlines():
            if line.startswith("data: "):
                events.append(line[6:].strip())
        conn.close()
        return resp.status, events

    def metrics(self, key=METRICS_KEY):
        status, _unused, data = call(self.address, GATEWAY_PORT, "GET", "/metrics/",
                                     headers={"Authorization": "Bearer " + key} if key else {})
        return status, data.decode()


class Engine:
    def __init__(self, address):
        self.address = address

    def requests_done(self):
        """vllm:request_success_total summed over finish reasons: requests the engine answered."""
        status, _unused, data = call(self.address, 8000, "GET", "/metrics")
        assert status == 200
        pattern = r'^vllm:request_success_total\{[^}]*\} ([0-9.e+]+)$'
        return sum(float(m) for m in re.findall(pattern, data.decode(), re.M))


# Runs on a lab host: one HTTP request, prints the status (or "refused: ..." when nothing answers).
_ON_HOST = r"""
import http.client, sys
host, port, method, path, body, key = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
try:
    c = http.client.HTTPConnection(host, port, timeout=20)
    c.request(method, path, body=body or None,
              headers=dict({"Content-Type": "application/json"}, **({"Authorization": "Bearer " + key} if key else {})))
    r = c.getresponse()
    print(r.status, r.read()[:300].decode(errors="replace"))
except OSError as e:
    print("refused:", e)
"""


def call_on_host(host, address, port, method, path, key=None, body=None):
    """(status or None when nothing answered, text) of a request made on lab HOST to address:port."""
    out = host.run("python3 -c %s %s %s %s %s %s %s", _ON_HOST, address, str(port), method, path,
                   json.dumps(body) if body is not None else "", key or "").stdout.strip()
    first = out.split(" ", 1)
    return (int(first[0]) if first[0].isdigit() else None), out


def unique_prompt(label):
    return f"{label} {uuid.uuid4().hex[:8]}"


def metric_value(text, name, **labels):
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.fixture(scope="session")
def gateway():
    return Gateway(container_ip(LB))


@pytest.fixture(scope="session")
def engine(gateway):
    eng = Engine(container_ip(HEAD))

    def ready():
        try:
            status, _unused, _unused = gateway.post(
                "/v1/completions", {"model": MODEL, "prompt": "warm up", "max_tokens": 2, "temperature": 0.5})
            return status == 200
        except OSError:
            return False

    # The engine loads while check, converge and idempotence run: a real completion proves it answers.
    wait_until(ready, timeout=300, interval=3, what="a completion through the gateway")
    return eng


@pytest.fixture(scope="session")
def lb_host(lab_host):
    return lab_host(LB)


@pytest.fixture(scope="session")
def redis_cli(lb_host):
    def run(*args):
        return lb_host.run("REDISCLI_AUTH=%s redis-cli %s" % (REDIS_PASSWORD, " ".join(args)))
    return run
