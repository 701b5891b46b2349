"""HTTP helpers for the nginx_lb verify step: real requests from this machine to the lab balancer
(a container on the podman network this molecule run created)."""
import http.client
import json
import os
import re
import ssl
import time

import pytest
from lab_testinfra import container_ip  # tests/lab, on the verifier's PYTHONPATH

LB = "nginx-lb-lb1"
EDGE_KEY = "lab-edge-key-000000000001"


class Client:
    def __init__(self, address, port=80, tls=False):
        self.address, self.port, self.tls = address, port, tls

    def conn(self, timeout=30):
        if self.tls:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            return http.client.HTTPSConnection(self.address, self.port, timeout=timeout, context=ctx)
        return http.client.HTTPConnection(self.address, self.port, timeout=timeout)

    def request(self, method, path, body=None, key=EDGE_KEY, timeout=30):
        c = self.conn(timeout)
        headers = {"Content-Type": "application/json"}
        if key:
            headers["Authorization"] = "Bearer " + key
        c.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, dict(r.getheaders()), data

    def stream(self, path, body, key=EDGE_KEY):
        """Returns (status, headers, seconds to first data event, seconds to end, events)."""
        c = self.conn(60)
        t0 = time.monotonic()
        c.request("POST", path, body=json.dumps(dict(body, stream=True)),
                  headers={"Content-Type": "application/json", "Authorization": "Bearer " + key})
        r = c.getresponse()
        first, events = None, []
        if r.status != 200:  # an error answer (429, 401): a JSON body, not a stream
            r.read()
            c.close()
            return r.status, dict(r.getheaders()), None, time.monotonic() - t0, events
        while True:
            line = r.fp.readline()
            if not line:
                break
            if line.startswith(b"data: "):
                if first is None:
                    first = time.monotonic() - t0
                events.append(line[6:].strip())
                if line.strip() == b"data: [DONE]":
                    break
        end = time.monotonic() - t0
        c.close()
        return r.status, dict(r.getheaders()), first, end, events


@pytest.fixture(scope="session")
def lb():
    """The API (TLS: the scenario serves TLS, and :80 only redirects to it)."""
    return Client(container_ip(LB), 443, tls=True)


@pytest.fixture(scope="session")
def lb_tls():
    return Client(container_ip(LB), 443, tls=True)


@pytest.fixture(scope="session")
def lb_plain():
    """Port 80 in clear: with TLS on, it only redirects."""
    return Client(container_ip(LB))


@pytest.fixture(scope="session")
def backend_ips():
    return {container_ip(n): n for n in ("nginx-lb-head1", "nginx-lb-head2")}


CLIENT = "nginx-lb-client"
DRAIN = "/usr/local/libexec/llmops/nginx-lb-drain"
CONF = "/etc/nginx/conf.d/llmops-vllm.conf"
STATE = "/var/lib/llmops/nginx-lb-drained"
MEASUREMENTS = os.environ.get("NGINX_LB_MEASUREMENTS", "/tmp/nginx_lb-measurements.jsonl")


@pytest.fixture(scope="session")
def lb_host(lab_host):
    return lab_host(LB)


@pytest.fixture(scope="session")
def client_host(lab_host):
    return lab_host(CLIENT)


@pytest.fixture(scope="session")
def drain(lb_host):
    """drain('drain', 'r1') runs nginx-lb-drain on the balancer as upgrade.yml does; returns the command result."""
    def run(*args):
        return lb_host.run(" ".join([DRAIN] + [f"'{a}'" for a in args]))
    return run


@pytest.fixture(scope="session")
def master_pid(lb_host):
    return lambda: lb_host.check_output("systemctl show -p MainPID --value nginx")


def measure(name, **values):
    """Appends one measurement (a burst's counts, a timing) for the report."""
    with open(MEASUREMENTS, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(dict(values, test=name, at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))) + "\n")


def upstream_of(headers):
    """The address of the replica that answered (the last one tried)."""
    return headers.get("X-Upstream", "").split(", ")[-1].split(":")[0]


COMPLETION_BODY = {"model": "standin", "prompt": "Hello", "max_tokens": 4}


def recap_changed(out, host=LB):
    """The balancer's changed= count in a playbook's recap (None when it has no recap line)."""
    match = re.search(r"%s\s*:\s*ok=\d+\s+changed=(\d+)" % re.escape(host), out)
    return int(match.group(1)) if match else None
