"""The runbooks of docs/operations.md, run as written on this scenario: "Add a replica" (after
removing one the way the same section says) and "Change the model (stage first, then roll)". Each
step is the doc's own ansible-playbook command (playbooks/site.yml, upgrade.yml, validate.yml with
the doc's tags and -e values) against a copy of this scenario's inventory that the test writes, the
way an operator edits theirs; streaming requests go through the balancer the whole time.

Named test_zz_ to run last: the replicas end on the model's new directory (the old name kept as an
alias). Slow (three engine starts, five playbook runs): only with LLMOPS_RUNBOOK_TESTS=1
(`make molecule-runbooks`)."""
import collections
import http.client
import json
import os
import re
import shutil
import subprocess
import threading
import time

import pytest
import yaml

from conftest import EDGE_KEY, HEADS, LB, MODEL, ansible_env

pytestmark = pytest.mark.skipif(os.environ.get("LLMOPS_RUNBOOK_TESTS") != "1",
                                reason="runbooks: LLMOPS_RUNBOOK_TESTS=1 (make molecule-runbooks)")

REPO = os.environ.get("MOLECULE_PROJECT_DIRECTORY", os.path.join(os.path.dirname(__file__), "..", "..", ".."))
DRAIN = "/usr/local/libexec/llmops/nginx-lb-drain"
NEW_MODEL = "tiny-llama-v2"
MODELS = "/var/lib/vllm/models"


def make_inventory(dest, drop=(), vllm_nodes_vars=None):
    """A copy of this scenario's inventory, laid out like inventories/dgx_spark (a `cluster` group
    over the nodes and the balancer, as site.yml's firewall and monitoring plays expect), without the
    hosts in `drop`, with vllm_nodes' group variables updated by `vllm_nodes_vars`. Returns its path."""
    src_file = os.environ["MOLECULE_INVENTORY_FILE"]
    shutil.copytree(os.path.dirname(src_file), dest)
    path = os.path.join(dest, os.path.basename(src_file))
    with open(path, encoding="utf-8") as fh:
        inv = yaml.safe_load(fh)
    for group in inv.values():
        for host in drop:
            (group.get("hosts") or {}).pop(host, None)
    inv["cluster"] = {"children": {"vllm_nodes": None, "balancers": None}}
    with open(path, "w", encoding="utf-8") as fh:
        yaml.safe_dump(inv, fh)
    if vllm_nodes_vars:
        gv = os.path.join(dest, "group_vars", "vllm_nodes")
        with open(gv, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
        data.update(vllm_nodes_vars)
        with open(gv, "w", encoding="utf-8") as fh:
            yaml.safe_dump(data, fh)
    return path


def playbook(name, inventory, *args, cwd=None, timeout=1500):
    """ansible-playbook playbooks/NAME -i INVENTORY ARGS..., as the runbook writes it; (rc, output, seconds)."""
    t0 = time.monotonic()
    res = subprocess.run(["ansible-playbook", os.path.join(REPO, "playbooks", name), "-i", inventory, *args],
                         capture_output=True, text=True, timeout=timeout, check=False, env=ansible_env(), cwd=cwd)
    took = time.monotonic() - t0
    print(f"\nansible-playbook {name} {' '.join(args)}: rc={res.returncode} in {took:.0f}s")
    return res.returncode, res.stdout + res.stderr, took


class StreamLoad:
    """Streaming completions through the balancer from `workers` threads until stop() (bounded by
    `limit` seconds). A request counts as served only with HTTP 200, its last chunk's finish_reason
    and `data: [DONE]`; each result records the replica (X-Upstream) that served it."""

    def __init__(self, address, workers=2, max_tokens=16, model=MODEL, limit=1200):
        self.address, self.max_tokens, self.model = address, max_tokens, model
        self.deadline = time.monotonic() + limit
        self.stopped = threading.Event()
        self.lock = threading.Lock()
        self.results = []  # (ok, upstream address, detail, time)
        self.threads = [threading.Thread(target=self._run, daemon=True) for _unused in range(workers)]

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
        self.stopped.set()
        for t in self.threads:
            t.join(timeout=180)

    def _one(self):
        c = http.client.HTTPConnection(self.address, 80, timeout=120)
        try:
            c.request("POST", "/v1/completions", body=json.dumps(
                {"model": self.model, "prompt": "one two three one two three", "max_tokens": self.max_tokens,
                 "stream": True, "ignore_eos": True}),
                headers={"Content-Type": "application/json", "Authorization": "Bearer " + EDGE_KEY})
            r = c.getresponse()
            upstream = (r.getheader("X-Upstream") or "").split(", ")[-1].split(":")[0]
            if r.status != 200:
                return False, upstream, f"HTTP {r.status}: {r.read()[:300]!r}"
            finish, done = None, False
            for line in r:
                line = line.strip()
                if line == b"data: [DONE]":
                    done = True
                    break
                if line.startswith(b"data: "):
                    event = json.loads(line[6:])
                    if "error" in event:
                        return False, upstream, f"error event: {event}"
                    finish = event["choices"][0].get("finish_reason") or finish
            return done and finish == "length", upstream, f"finish_reason={finish} done={done}"
        except (OSError, http.client.HTTPException, ValueError) as e:
            return False, "", f"{type(e).__name__}: {e}"
        finally:
            c.close()

    def _run(self):
        while not self.stopped.is_set() and time.monotonic() < self.deadline:
            ok, upstream, detail = self._one()
            with self.lock:
                self.results.append((ok, upstream, detail, time.monotonic()))
            time.sleep(0.05)

    def since(self, t):
        with self.lock:
            return [r for r in self.results if r[3] >= t]

    def failures(self):
        with self.lock:
            return [r for r in self.results if not r[0]]


def served_by(results):
    return collections.Counter(r[1] for r in results if r[0])


def wait_serving(clients, names, timeout=600):
    """Each head answers a real completion (test_serving's stopped replica is started again unwaited)."""
    end = time.monotonic() + timeout
    for name in names:
        while True:
            try:
                status = clients[name].complete()[0]
            except OSError:
                status = None
            if status == 200:
                break
            assert time.monotonic() < end, f"{name} does not serve"
            time.sleep(3)


def engine_state(h):
    return h.check_output("systemctl show -p MainPID -p ActiveEnterTimestamp vllm")


def models_of(client):
    status, _unused, body = client.request("GET", "/v1/models")
    assert status == 200, body
    return sorted(m["id"] for m in json.loads(body)["data"])


def test_remove_then_add_a_replica_under_load(tmp_path, lab_host, lb, heads):
    wait_serving(heads, HEADS)
    new = HEADS[1]  # the replica removed, then added back (no vllm_service_replica: its name is the head's)
    addr = {c.address: n for n, c in heads.items()}
    without = make_inventory(tmp_path / "without", drop=[new])
    full = make_inventory(tmp_path / "with")
    balancer = lab_host(LB)

    # Remove a replica (the paragraph after "Add a replica"): drain it on the balancers, take it out
    # of the inventory, --tags nginx_lb, --tags firewall (this scenario has no monitoring host), and
    # stop its units.
    with StreamLoad(lb.address) as load:
        balancer.check_output(f"{DRAIN} drain {new}")
        for tag in ("nginx_lb", "firewall"):
            rc, out, _unused = playbook("site.yml", without, "--tags", tag)
            assert rc == 0, out[-3000:]
        lab_host(new).check_output("systemctl stop vllm")
        t_removed = time.monotonic()
        time.sleep(10)
    assert not load.failures(), load.failures()[:5]
    after = served_by(load.since(t_removed))
    assert set(after) == {heads[HEADS[0]].address} and sum(after.values()) >= 3, after
    assert new not in balancer.file("/etc/nginx/conf.d/llmops-vllm.conf").content_string

    # Add it back: the runbook's steps 1 and 3 to 6 (step 2 builds a bare node up to dspark_build:
    # this node has its vLLM release already, from prepare.yml).
    rc, out, _unused = playbook("site.yml", full, "--list-hosts")
    assert rc == 0 and new in out, out[-3000:]
    timings = {}
    with StreamLoad(lb.address) as load:
        rc, out, timings["firewall"] = playbook("site.yml", full, "--tags", "firewall")
        assert rc == 0, out[-3000:]
        rc, out, timings["vllm_service"] = playbook("site.yml", full, "--limit", new, "--tags", "vllm_service")
        assert rc == 0, out[-3000:]
        assert lab_host(new).service("vllm").is_running
        # Until the balancer learns of it, the new replica gets nothing (clients never see it loading).
        assert served_by(load.results).keys() == {heads[HEADS[0]].address}, served_by(load.results)
        rc, out, timings["nginx_lb"] = playbook("site.yml", full, "--tags", "nginx_lb")
        assert rc == 0, out[-3000:]
        # A name drained before (removed, now back) stays drained: the balancers keep their drain
        # state across runs of the role, and the run says so. The runbook's step 5 undrains it.
        assert f"replicas drained on {LB}: {new}" in " ".join(out.split()), out[-3000:]
        assert balancer.check_output(f"{DRAIN} status | grep '^{new} '").endswith(" drained")
        balancer.check_output(f"{DRAIN} undrain {new}")
        t_added = time.monotonic()
        end = time.monotonic() + 60
        while time.monotonic() < end and heads[new].address not in served_by(load.since(t_added)):
            time.sleep(1)
        time.sleep(5)
    print(f"\nadd a replica: {len(load.results)} streams, per replica {dict(served_by(load.results))}, "
          f"playbooks {timings}")
    assert not load.failures(), load.failures()[:5]
    assert heads[new].address in served_by(load.since(t_added)), served_by(load.since(t_added))

    # Step 6: validate.yml on the whole inventory; it fails unless the load through the balancer
    # reached every replica (min_upstreams = the heads). A smaller load than its default, for 2 cores.
    rc, out, _unused = playbook("validate.yml", full, "-e", "validate_requests=20", "-e", "validate_concurrency=4",
                                cwd=str(tmp_path))
    assert rc == 0, out[-4000:]
    report = json.loads((tmp_path / "reports" / "validate-latest.json").read_text(encoding="utf-8"))
    per_replica = {addr.get(k.split(":")[0], k): v for k, v in report["load"]["upstreams"].items()}
    print(f"\nvalidate.yml: {report['verdict']}, requests per replica {per_replica}")
    assert report["verdict"] == "PASS" and set(per_replica) == set(HEADS), report
    assert min(per_replica.values()) > 0, per_replica


def test_change_the_model_stage_first_then_roll(tmp_path, lab_host, lb, heads):
    wait_serving(heads, HEADS)
    old_dir, new_dir = f"{MODELS}/{MODEL}", f"{MODELS}/{NEW_MODEL}"
    for name in HEADS:
        lab_host(name).run(f"rm -rf {new_dir}")
    old_sums = {n: lab_host(n).check_output(f"cd {old_dir} && find . -type f | sort | xargs sha256sum")
                for n in HEADS}

    # Step 1: the new model in its own directory; the clients' name stays, the new one is an alias
    # until they have moved (a balancer sends a client to either replica while the roll goes on).
    model = {"name": MODEL, "aliases": [NEW_MODEL], "path": new_dir, "dtype": "float32"}
    inventory = make_inventory(tmp_path / "inv", vllm_nodes_vars={"vllm_service_model": model})

    # Step 2: stage on every node; no engine restarts.
    before = {n: engine_state(lab_host(n)) for n in HEADS}
    rc, out, took = playbook("site.yml", inventory, "--tags", "vllm_service_preflight,vllm_service_install")
    assert rc == 0, out[-3000:]
    for name in HEADS:
        h = lab_host(name)
        assert engine_state(h) == before[name], name
        assert h.file(f"{new_dir}/config.json").exists and h.file(f"{new_dir}/model.safetensors").exists, name
        assert h.file("/etc/vllm/config.yaml").contains(f"model: {old_dir}$"), name
        assert models_of(heads[name]) == [MODEL], name
    rc, out, _unused = playbook("site.yml", inventory, "--tags", "vllm_service_preflight,vllm_service_install")
    assert rc == 0 and not re.search(r"changed=[1-9]", out), out[-3000:]  # "again until it reports no change"

    # Step 3: roll one replica at a time (replica names: the heads' names here), the canary checked
    # with validate.yml in between, under streaming load the whole time.
    rolled = []
    with StreamLoad(lb.address) as load:
        for i, replica in enumerate(HEADS):
            rc, out, took = playbook("upgrade.yml", inventory, "-e", "upgrade_layer=vllm_service",
                                     "-e", f"upgrade_replicas={replica}")
            assert rc == 0, out[-4000:]
            rolled.append(replica)
            for name in HEADS:
                expected = sorted([MODEL, NEW_MODEL]) if name in rolled else [MODEL]
                assert models_of(heads[name]) == expected, (replica, name)
                # The old directory is untouched until step 4.
                assert lab_host(name).check_output(
                    f"cd {old_dir} && find . -type f | sort | xargs sha256sum") == old_sums[name]
            if i == 0:
                rc, out, _unused = playbook("validate.yml", inventory, "-e", "validate_requests=20",
                                            "-e", "validate_concurrency=4", cwd=str(tmp_path))
                assert rc == 0, out[-4000:]
    print(f"\nchange the model: {len(load.results)} streams, per replica {dict(served_by(load.results))}")
    assert not load.failures(), load.failures()[:5]
    assert len(served_by(load.results)) == 2, served_by(load.results)

    for name in HEADS:
        h = lab_host(name)
        assert h.file("/etc/vllm/config.yaml").contains(f"model: {new_dir}$"), name
        status, _unused, body = heads[name].complete()  # the old name
        assert status == 200, body
        status, _unused, body = heads[name].request(
            "POST", "/v1/completions", {"model": NEW_MODEL, "prompt": "Hello", "max_tokens": 4})
        assert status == 200, body
    status, _unused, body = lb.request("POST", "/v1/completions", {"model": NEW_MODEL, "prompt": "Hi", "max_tokens": 4})
    assert status == 200, body

    # Step 4: the old directory goes once every replica serves the new one (kept here: the stage of
    # the next converge is then a no-op, and nothing after this test reads it).
    for name in HEADS:
        assert lab_host(name).file(old_dir).is_directory
