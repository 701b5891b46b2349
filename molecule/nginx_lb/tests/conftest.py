"""HTTP helpers for the nginx_lb verify step: real requests from this machine to the lab balancer
(a container on the podman network this molecule run created)."""
import http.client
import json
import os
import ssl
import subprocess
import time

import pytest

LB = "nginx-lb-lb1"
EDGE_KEY = "lab-edge-key-000000000001"


def container_ip(name):
    out = subprocess.run(
        ["podman", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}", name],
        check=True, capture_output=True, text=True).stdout.split()
    assert out, f"{name} has no address"
    return out[0]


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
    return Client(container_ip(LB))


@pytest.fixture(scope="session")
def lb_tls():
    return Client(container_ip(LB), 443, tls=True)


@pytest.fixture(scope="session")
def backend_ips():
    return {container_ip(n): n for n in ("nginx-lb-head1", "nginx-lb-head2")}


@pytest.fixture(scope="session")
def run_converge():
    """Runs the scenario's converge playbook again with extra variables; returns (rc, output)."""
    scenario = os.environ["MOLECULE_SCENARIO_DIRECTORY"]

    def run(extra):
        res = subprocess.run(
            ["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"],
             os.path.join(scenario, "converge.yml"), "-e", json.dumps(extra)],
            capture_output=True, text=True, timeout=300, check=False)
        return res.returncode, res.stdout + res.stderr

    return run
