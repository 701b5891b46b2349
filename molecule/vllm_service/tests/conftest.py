"""Helpers for the vllm_service verify step: real HTTP from this machine to the lab containers
(on the podman network this molecule run created) and re-runs of the converge playbook."""
import http.client
import json
import os
import subprocess
import time

import pytest
from lab_testinfra import container_ip  # tests/lab, on the verifier's PYTHONPATH

HEADS = ("vllm-service-head1", "vllm-service-head2")
LB = "vllm-service-lb1"
MODEL = "tiny-llama"
VLLM_KEY = "lab-vllm-key-0000000000000001"
EDGE_KEY = "lab-edge-key-000000000001"


class Client:
    def __init__(self, address, port, key):
        self.address, self.port, self.key = address, port, key

    def request(self, method, path, body=None, key=None, timeout=60):
        c = http.client.HTTPConnection(self.address, self.port, timeout=timeout)
        headers = {"Content-Type": "application/json"}
        key = self.key if key is None else key
        if key:
            headers["Authorization"] = "Bearer " + key
        c.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, dict(r.getheaders()), data

    def complete(self, prompt="Hello", max_tokens=8, key=None, **extra):
        """key=None: the client's key; "" sends no Authorization header."""
        return self.request("POST", "/v1/completions",
                            dict({"model": MODEL, "prompt": prompt, "max_tokens": max_tokens}, **extra), key=key)

    def stream(self, prompt="Hello", max_tokens=128):
        """(status, headers, seconds to the first text, seconds to the end, text chunks)."""
        c = http.client.HTTPConnection(self.address, self.port, timeout=120)
        t0 = time.monotonic()
        c.request("POST", "/v1/completions", body=json.dumps(
            {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "stream": True, "ignore_eos": True}),
            headers={"Content-Type": "application/json", "Authorization": "Bearer " + self.key})
        r = c.getresponse()
        first, chunks = None, []
        while True:
            line = r.readline()  # HTTPResponse.readline decodes the chunked framing
            if not line or line.strip() == b"data: [DONE]":
                break
            if line.startswith(b"data: "):
                text = json.loads(line[6:])["choices"][0].get("text", "")
                if text and first is None:
                    first = time.monotonic() - t0
                chunks.append(text)
        end = time.monotonic() - t0
        c.close()
        return r.status, dict(r.getheaders()), first, end, chunks


@pytest.fixture(scope="session")
def lb():
    return Client(container_ip(LB), 80, EDGE_KEY)


@pytest.fixture(scope="session")
def heads():
    return {name: Client(container_ip(name), 8000, VLLM_KEY) for name in HEADS}


def ansible_env():
    env = dict(os.environ)
    env["ANSIBLE_FORCE_COLOR"] = "0"  # molecule may force colour (it does under CI=true)
    env["ANSIBLE_NOCOLOR"] = "1"
    return env


@pytest.fixture(scope="session")
def run_module():
    """Runs a collection module on a lab host (ad hoc, JSON callback); returns its result dict."""

    def run(host, module, args, timeout=300):
        env = ansible_env()
        env.update(ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="json")
        res = subprocess.run(
            ["ansible", "-i", os.environ["MOLECULE_INVENTORY_FILE"], host, "-m", module, "-a", json.dumps(args)],
            capture_output=True, text=True, timeout=timeout, check=False, env=env)
        data = json.loads(res.stdout[res.stdout.index("{"):])
        return data["plays"][0]["tasks"][0]["hosts"][host]

    return run
