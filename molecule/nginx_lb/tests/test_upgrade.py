"""playbooks/upgrade.yml end to end on this scenario: a rolling restart of the two stand-in heads
(upgrade_layer=restart, vllm_service_unit=standin-backend from molecule.yml) drains each replica with
nginx-lb-drain, restarts it, gates on a completion and puts it back, while a client keeps sending
requests through the balancer: none of them may fail."""
import os
import re
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


def upgrade(*args):
    proc = subprocess.run(
        ["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"],
         os.path.join(os.environ["MOLECULE_PROJECT_DIRECTORY"], "playbooks", "upgrade.yml"),
         "-e", "upgrade_layer=restart", *args],
        capture_output=True, text=True, timeout=900, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def test_upgrade_changes_only_the_chosen_replicas_and_refuses_limit(lab_host, drain):
    heads = {name: lab_host(name) for name in ("nginx-lb-head1", "nginx-lb-head2")}

    def started():
        return {n: h.check_output("systemctl show -p ActiveEnterTimestampMonotonic --value standin-backend")
                for n, h in heads.items()}

    before = started()
    # Refused before any replica is drained: an unknown replica, and --limit (the plan needs the
    # whole inventory; upgrade_replicas is the way to choose).
    rc, out = upgrade("-e", "upgrade_replicas=r1,r9")
    assert rc != 0 and "upgrade_replicas must name replicas of this inventory" in out and "unknown: r9" in out, out[-3000:]
    rc, out = upgrade("--limit", "nginx-lb-head1")
    assert rc != 0 and "upgrade.yml does not take --limit" in out and "upgrade_replicas" in out, out[-3000:]
    assert started() == before, "a refused upgrade must not restart anything"
    assert all(line.split()[2] == "serving" for line in drain("status").stdout.splitlines())
    # Only r2 (nginx-lb-head2) is drained, restarted and put back.
    rc, out = upgrade("-e", "upgrade_replicas=r2")
    assert rc == 0, out[-4000:]
    assert "upgrade: replica r2 changed and back in the balancer" in out, out[-4000:]
    # The drain returned once the balancer's workers from before its reload had finished.
    plain = re.sub(r"\x1b\[[0-9;]*m", "", out)  # the callback may colour each folded line
    assert re.search(r"previous\s+workers:\s+nginx-lb-lb1\s+\d+s\)", plain), out[-4000:]
    assert "replica r1" not in out, out[-4000:]
    after = started()
    assert after["nginx-lb-head1"] == before["nginx-lb-head1"]
    assert after["nginx-lb-head2"] != before["nginx-lb-head2"]
    assert all(line.split()[2] == "serving" for line in drain("status").stdout.splitlines())
