"""The vllm_router scenario's verify: a balancer (router-lb1) running the role's router in front of three
stand-in heads (router-heads, ports 8000-8002; molecule.yml).

Every request goes over real HTTP from the balancer itself (the router listens on loopback only) with the
stand-in client files/router_client.py; which head answered comes from the answer, and what each head was
asked from its own counters (GET /standin/stats). Figures the tests measure (how many requests of a prefix
landed on one head, seconds to come back after a kill, ...) are printed at the end of the run and written
beside the scenario's log, .cache/molecule-logs/vllm_router-measures.txt.
"""
import json
import os
import subprocess
import time

import pytest
from lab_testinfra import report_table  # tests/lab, on the verifier's PYTHONPATH

LB = "router-lb1"
HEADS_HOST = "router-heads"
HEADS = {"standin-a": "http://10.89.216.20:8000", "standin-b": "http://10.89.216.20:8001",
         "standin-c": "http://10.89.216.20:8002"}  # molecule.yml: the three vllm_heads entries
LB_ADDRESS = "10.89.216.10"
ROUTER = "http://127.0.0.1:30000"
METRICS = "http://127.0.0.1:29000/metrics"
UNIT = "llmops-vllm-router"
ARGS = "/etc/llmops-vllm-router/router.json"
WORKERS_FILE = "/etc/llmops-vllm-router/workers.json"
VENV = "/opt/llmops/vllm-router"
CTL = "/usr/local/libexec/llmops/vllm-router-ctl"
CTL_RUN = "%s/bin/python3 -I %s" % (VENV, CTL)
DRAIN_STATE = "/var/lib/llmops/nginx-lb-drained"  # nginx_lb's drain state file (nginx-lb-drain writes it)
REPO = os.environ.get("MOLECULE_PROJECT_DIRECTORY") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", "..", ".."))
MEASURES_FILE = os.path.join(REPO, ".cache", "molecule-logs", "vllm_router-measures.txt")
MEASURES = []  # (what, figure)


def pytest_terminal_summary(terminalreporter):
    if not MEASURES:
        return
    report_table(terminalreporter, "vllm_router measures (vllm-router behind the balancer, stand-in heads)",
                 ["%-48s %s" % (what, figure) for what, figure in MEASURES], MEASURES_FILE)


def record(what, figure):
    MEASURES.append((what, figure))


def long_prefix(seed, length=1500):
    """A system prompt of about LENGTH characters that differs from every other seed's from its first word."""
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo"]
    out, i = ["%s-%03d:" % (words[seed % len(words)], seed)], seed
    while sum(len(w) + 1 for w in out) < length:
        i = (i * 7 + 3) % 9973
        out.append(words[i % len(words)] + str(i))
    return " ".join(out)


def chat(system, question, headers=None, delay=None, **body):
    """One chat request for the client: a system prompt and a question."""
    item = {"path": "/v1/chat/completions", "headers": dict(headers or {}),
            "body": dict({"model": "standin", "max_tokens": 4,
                          "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}]},
                         **body)}
    if delay:
        item["headers"]["X-Standin-Delay"] = str(delay)
    return item


class Lab:
    def __init__(self, lab_host):
        self.lb = lab_host(LB)
        self.heads = lab_host(HEADS_HOST)

    def send(self, requests, concurrency=1):
        """The client's results for REQUESTS (one dict each, in order)."""
        spec = json.dumps({"url": ROUTER, "concurrency": concurrency, "requests": requests})
        res = self.lb.run("python3 /usr/local/bin/router-client <<'SPEC'\n%s\nSPEC" % spec)
        assert res.rc == 0, res.stderr
        return json.loads(res.stdout)

    def backends(self, requests, concurrency=1):
        """Which head answered each request; every request must have been answered (200)."""
        results = self.send(requests, concurrency)
        failed = [r for r in results if r["status"] != 200]
        assert not failed, failed[:5]
        return [r["backend"] for r in results]

    def stats(self):
        """{head: its counters} (asked on the heads' host)."""
        out = {}
        for name, url in HEADS.items():
            port = url.rsplit(":", 1)[1]
            out[name] = json.loads(self.heads.check_output("curl -sf http://127.0.0.1:%s/standin/stats" % port))
        return out

    def reset(self):
        for url in HEADS.values():
            port = url.rsplit(":", 1)[1]
            self.heads.check_output("curl -sf -X POST http://127.0.0.1:%s/standin/reset" % port)

    def get(self, url):
        res = self.lb.run("curl -s -m 5 -o /dev/stdout -w '\\n%%{http_code}' %s" % url)
        body, _sep, code = res.stdout.rpartition("\n")
        return (int(code) if code.strip().isdigit() else 0), body

    def live_workers(self):
        code, body = self.get(ROUTER + "/list_workers")
        assert code == 200, body
        return sorted(json.loads(body)["urls"])

    def main_pid(self):
        return int(self.lb.check_output("systemctl show -p MainPID --value %s" % UNIT) or 0)

    def wait_ready(self, timeout=60, not_pid=None):
        """Seconds until the router answers /liveness (with a main process other than NOT_PID)."""
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            pid = self.main_pid()
            if pid and pid != not_pid and self.get(ROUTER + "/liveness")[0] == 200:
                return time.monotonic() - start
            time.sleep(0.2)
        raise AssertionError("the router did not answer within %d s:\n%s" % (timeout, self.journal()))

    def journal(self, lines=30):
        return self.lb.run("journalctl -u %s --no-pager -n %d -o cat" % (UNIT, lines)).stdout

    def drain(self, names):
        """Writes the drain state as nginx-lb-drain leaves it (one replica name a line)."""
        content = "".join(n + "\n" for n in names)
        res = self.lb.run("mkdir -p %s && printf '%%s' '%s' > %s" % (os.path.dirname(DRAIN_STATE), content, DRAIN_STATE))
        assert res.rc == 0, res.stderr

    def sync(self):
        res = self.lb.run("%s sync %s" % (CTL_RUN, ARGS))
        assert res.rc == 0, res.stdout + res.stderr
        return res.stdout


@pytest.fixture()
def lab(lab_host):
    return Lab(lab_host)


@pytest.fixture(scope="session")
def converge():
    """Runs the scenario's converge.yml again: converge(extra_vars, check=False) -> (rc, output, its whitespace
    joined). Against molecule's inventory directory, whose extra `hosts` source holds two of the three stand-in
    heads (molecule.yml): the inventory file alone would give the role one worker."""
    inventory = os.path.dirname(os.environ["MOLECULE_INVENTORY_FILE"])
    playbook = os.path.join(os.environ["MOLECULE_SCENARIO_DIRECTORY"], "converge.yml")

    def run(extra, check=False):
        cmd = ["ansible-playbook", "-i", inventory, playbook, "-e", json.dumps(extra)] + (["--check"] if check else [])
        env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, timeout=900,
                              check=False)
        return proc.returncode, proc.stdout, " ".join(proc.stdout.split())

    return run
