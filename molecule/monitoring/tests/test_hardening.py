"""Every monitoring service runs as its own user, sandboxed (roles/monitoring's drop-ins),
and still does its job (test_monitoring.py: Prometheus scrapes every exporter and mtail)."""
import pytest

from lab_testinfra import exposure, main_pid_user

# systemd-analyze's overall exposure (0 = fully sandboxed, 10 = none), per unit, and its user.
# Debian's units alone: node exporter, nginx exporter and mtail 9.2 (a user of their own and
# nothing else), prometheus 3.9 (Debian's unit has some sandboxing). With the drop-ins 1.2-1.5 was
# measured: what remains is the network (they serve metrics over HTTP; the node exporter also uses
# netlink) and, for the node exporter, a read-only /home and a visible process list. 2.0 leaves room
# for a systemd that scores a little differently, and fails if a drop-in is lost (>= 3.9).
UNITS = {
    # unit: (threshold, user)
    "prometheus-node-exporter": (2.0, "prometheus"),
    "prometheus-nginx-exporter": (2.0, "prometheus"),
    "mtail": (2.0, "mtail"),
    "prometheus": (2.0, "prometheus"),
}


def host_units(lab_groups, name):
    units = ["prometheus-node-exporter"]
    if name in lab_groups.get("balancers", []):
        units += ["prometheus-nginx-exporter", "mtail"]
    if name in lab_groups.get("monitoring", []):
        units.append("prometheus")
    return units


@pytest.mark.parametrize("name", ["monitoring-head1", "monitoring-mon"])
def test_monitoring_services_run_sandboxed_as_their_own_users(lab_host, lab_groups, name):
    h = lab_host(name)
    for unit in host_units(lab_groups, name):
        threshold, user = UNITS[unit]
        assert h.service(unit).is_running, unit
        assert h.file(f"/etc/systemd/system/{unit}.service.d/llmops-hardening.conf").exists, unit
        level = exposure(h, unit)
        print(f"\nexposure {name} {unit}.service: {level}")
        assert level < threshold, (unit, level)
        assert main_pid_user(h, unit) == user, unit
        pid = h.check_output(f"systemctl show -p MainPID --value {unit}")
        status = h.file(f"/proc/{pid}/status").content_string
        assert "NoNewPrivs:\t1" in status and "CapEff:\t0000000000000000" in status, (unit, status)
