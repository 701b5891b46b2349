"""nginx restarts itself: a killed nginx serves again within seconds, and one that keeps dying is left
failed by its start limit instead of looping (the role's drop-in; Debian's unit has Restart=no).
Runs last in the scenario (the name): it kills the balancer under test."""
import os
import time

LB = "nginx-lb-lb1"
COMPLETION = {"model": "standin", "prompt": "Hello", "max_tokens": 4}
DROPIN = "/etc/systemd/system/nginx.service.d/llmops-restart.conf"
# The measured figures, beside the scenario's log (verify's output keeps only failures).
MEASURES = os.path.join(os.environ.get("LLMOPS_REPO", "."), ".cache", "molecule-logs", "nginx_lb-self-healing.txt")


def _record(line):
    os.makedirs(os.path.dirname(MEASURES), exist_ok=True)
    with open(MEASURES, "a", encoding="utf-8") as fh:
        fh.write(line + "\n")


def _show(h, prop):
    return h.check_output("systemctl show -p %s --value nginx" % prop).strip()


def _wait_serving(lb, h, since, limit=30.0):
    """Seconds from `since` until nginx is active and answers a completion (or None)."""
    while time.monotonic() - since < limit:
        if _show(h, "ActiveState") == "active":
            try:
                if lb.request("POST", "/v1/completions", COMPLETION)[0] == 200:
                    return time.monotonic() - since
            except OSError:
                pass
        time.sleep(0.2)
    return None


def test_the_restart_dropin_is_in_place(lab_host):
    h = lab_host(LB)
    text = h.file(DROPIN).content_string
    assert "Restart=on-failure" in text and "StartLimitBurst=5" in text and "StartLimitIntervalSec=60" in text
    assert _show(h, "Restart") == "on-failure"
    assert _show(h, "StartLimitBurst") == "5"


def test_a_killed_nginx_serves_again_by_itself(lab_host, lb):
    h = lab_host(LB)
    restarts = int(_show(h, "NRestarts"))
    pid = _show(h, "MainPID")
    t0 = time.monotonic()
    assert h.run("systemctl kill -s KILL nginx").rc == 0
    took = _wait_serving(lb, h, t0)
    _record("nginx SIGKILL -> a completion through the balancer again after %.2f s" % (took or -1))
    assert took is not None, "nginx did not come back within 30 s: %s" % _show(h, "ActiveState")
    assert int(_show(h, "NRestarts")) > restarts
    assert _show(h, "MainPID") != pid


def test_one_that_keeps_dying_is_left_failed_by_the_start_limit(lab_host, lb):
    h = lab_host(LB)
    burst = int(_show(h, "StartLimitBurst"))
    since = h.check_output("date '+%Y-%m-%d %H:%M:%S'")
    try:
        kills = 0
        for _unused in range(burst + 3):
            if _show(h, "ActiveState") != "active":
                break
            h.run("systemctl kill -s KILL nginx")
            kills += 1
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and _show(h, "ActiveState") not in ("active", "failed"):
                time.sleep(0.2)
            time.sleep(0.5)
        _record("kills until systemd gave up: %d (StartLimitBurst=%d)" % (kills, burst))
        assert _show(h, "ActiveState") == "failed", _show(h, "ActiveState")
        journal = h.check_output("journalctl -u nginx --since '%s' --no-pager -o cat" % since)
        assert "Start request repeated too quickly" in journal, journal[-2000:]
        assert kills <= burst + 1
    finally:
        h.run("systemctl reset-failed nginx; systemctl start nginx")
    assert _wait_serving(lb, h, time.monotonic()) is not None, "nginx did not start again after reset-failed"
