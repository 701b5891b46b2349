"""playbooks/upgrade.yml end to end on this scenario: a rolling restart of the two stand-in heads
(upgrade_layer=restart, vllm_service_unit=standin-backend from molecule.yml) drains each replica with
nginx-lb-drain, restarts it, gates on a completion and puts it back, while a client keeps sending
requests through the balancer: none of them may fail."""
import os
import subprocess
import threading
import time

from conftest import COMPLETION_BODY, STATE, measure, upstream_of


def test_rolling_restart_drains_each_replica_and_loses_no_request(lb, lab_host, lb_host, drain, backend_ips):
    heads = {name: lab_host(name) for name in ("nginx-lb-head1", "nginx-lb-head2")}
    started = {n: h.check_output("systemctl show -p ActiveEnterTimestampMonotonic --value standin-backend")
               for n, h in heads.items()}
    results, stop = [], threading.Event()

    def client():
        while not stop.is_set():
            try:
                status, headers, _unused = lb.request("POST", "/v1/completions", COMPLETION_BODY)
                results.append((time.monotonic(), status, upstream_of(headers)))
            except OSError as exc:
                results.append((time.monotonic(), "error: %s" % exc, ""))
            time.sleep(0.1)  # ~10 requests/s: under the scenario's rate limit

    thread = threading.Thread(target=client, daemon=True)
    thread.start()
    t0 = time.monotonic()
    try:
        proc = subprocess.run(
            ["ansible-playbook", "-v", "-i", os.environ["MOLECULE_INVENTORY_FILE"],
             os.path.join(os.environ["MOLECULE_PROJECT_DIRECTORY"], "playbooks", "upgrade.yml"),
             "-e", "upgrade_layer=restart"],
            capture_output=True, text=True, timeout=900, check=False)
        time.sleep(1)
    finally:
        stop.set()
        thread.join(30)
    out = proc.stdout + proc.stderr
    measure("rolling_restart", requests=len(results), failed=sum(1 for r in results if r[1] != 200),
            seconds=round(time.monotonic() - t0, 1), rc=proc.returncode)
    assert proc.returncode == 0, out[-4000:]
    for replica in ("r1", "r2"):
        assert "changed: replica %s drained" % replica in out, out[-4000:]
        assert "changed: replica %s back in service" % replica in out, out[-4000:]
    # Each stand-in was restarted, and both are in service again.
    for name, host in heads.items():
        assert host.check_output("systemctl show -p ActiveEnterTimestampMonotonic --value standin-backend") != started[name]
    assert lb_host.file(STATE).content_string.strip() == ""
    assert all(line.split()[2] == "serving" for line in drain("status").stdout.splitlines())
    # Not one request failed while the replicas were restarted one after the other.
    failed = [r for r in results if r[1] != 200]
    assert len(results) > 20 and not failed, (len(results), failed[:5])
    assert {r[2] for r in results} == set(backend_ips), "both replicas should have served during the run"
