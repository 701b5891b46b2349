"""The router's health for Prometheus (the role's tasks/metrics.yml): a timer writes it for the node exporter's
textfile collector, as keepalived's does for the pair. Checked on the converged balancer: the timer runs, its
service collects as a user of its own and publishes as root without capabilities, the file says what the
router says, and a stopped router reads up 0 within one interval."""
import time

from conftest import LB, UNIT
from lab_testinfra import wait_until

METRICS_UNIT = "llmops-vllm-router-metrics"
PROM = "/var/lib/prometheus/node-exporter/llmops_vllm_router.prom"
INTERVAL = 10  # vllm_router_metrics_interval's default


def series(lb):
    out = {}
    for line in lb.run("cat %s" % PROM).stdout.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def age(lb):
    return time.time() - float(lb.check_output("stat -c %%Y %s" % PROM))


def test_the_timer_runs_its_sandboxed_service(lab_host):
    lb = lab_host(LB)
    show = dict(line.split("=", 1) for line in lb.check_output(
        "systemctl show -p ActiveState,UnitFileState %s.timer" % METRICS_UNIT).splitlines())
    assert show == {"ActiveState": "active", "UnitFileState": "enabled"}, show
    show = dict(line.split("=", 1) for line in lb.check_output(
        "systemctl show -p Result,DynamicUser,CapabilityBoundingSet,ProtectSystem,NoNewPrivileges %s.service"
        % METRICS_UNIT).splitlines())
    assert show["DynamicUser"] == "yes" and show["CapabilityBoundingSet"] == "" and show["ProtectSystem"] == "strict"
    assert show["NoNewPrivileges"] == "yes"
    wait_until(lambda: lb.run("test -s %s" % PROM).rc == 0, timeout=3 * INTERVAL, what=PROM)
    assert wait_until(lambda: age(lb) < 2 * INTERVAL + 5, timeout=3 * INTERVAL, what="a fresh write")
    journal = lb.run("journalctl -u %s --no-pager -n 50 -o cat" % METRICS_UNIT).stdout
    assert "Traceback" not in journal and "not written" not in journal, journal
    assert lb.check_output("stat -c '%%U %%a' %s" % PROM) == "root 644"


def test_the_file_says_what_the_router_says(lab_host):
    lb = lab_host(LB)
    got = wait_until(lambda: series(lb).get('llmops_vllm_router_workers{state="healthy"}') == 3 and series(lb),
                     timeout=3 * INTERVAL, what="3 healthy heads in %s" % PROM)
    assert got["llmops_vllm_router_up"] == 1
    assert got['llmops_vllm_router_workers{state="configured"}'] == 3
    assert "llmops_vllm_router_requests_total" in got


def test_a_stopped_router_reads_up_0(lab, lab_host):
    lb = lab_host(LB)
    lb.check_output("systemctl stop %s" % UNIT)
    try:
        got = wait_until(lambda: series(lb).get("llmops_vllm_router_up") == 0 and series(lb),
                         timeout=3 * INTERVAL, what="up 0 in %s" % PROM)
        assert got['llmops_vllm_router_workers{state="healthy"}'] == 0
        assert got['llmops_vllm_router_workers{state="configured"}'] == 3
        assert "llmops_vllm_router_requests_total" not in got
    finally:
        lb.check_output("systemctl start %s" % UNIT)
        lab.wait_ready()
    wait_until(lambda: series(lb).get("llmops_vllm_router_up") == 1, timeout=3 * INTERVAL, what="up 1 again")
