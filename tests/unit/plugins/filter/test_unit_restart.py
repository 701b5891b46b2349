"""Every long-running unit the collection starts restarts itself, with a bounded start limit.

The units are found by walking every task and handler of every role for systemd_service calls that
start or restart a unit; each must be listed in RESTARTS with how it restarts itself. A new unit the
roles start, without an entry, fails here. An entry that names a drop-in is checked against the role:
the task file must call llmops.vllm_cluster.systemd_restart_files on that unit; a unit file the role
writes must say Restart= (not no) and StartLimitBurst=.
"""
import pathlib
import re

import yaml

from ansible_collections.llmops.vllm_cluster.plugins.filter.file_set import systemd_restart_files

ROOT = pathlib.Path(__file__).resolve().parents[4]

# unit name as the tasks write it -> how it restarts itself:
#   ("dropin", ROLE/tasks/FILE, EXPRESSION)   a systemd_restart_files call on EXPRESSION in that file
#   ("unit", ROLE/templates/FILE)             the role's own unit file (Restart= and StartLimitBurst=)
#   ("vendor", REASON) / ("oneshot", REASON)  left as shipped, and why
RESTARTS = {
    "nginx": ("dropin", "nginx_lb/tasks/service.yml", "['nginx']"),
    "keepalived": ("dropin", "keepalived/tasks/service.yml", "['keepalived']"),
    "{{ item }}@monitoring_base": ("dropin", "monitoring_base/tasks/service.yml", "monitoring_base_units"),
    # the monitoring components' units (restarted by their handlers), started by monitoring_base
    "prometheus-node-exporter": ("dropin", "monitoring_base/tasks/service.yml", "monitoring_base_units"),
    "prometheus-nginx-exporter": ("dropin", "monitoring_base/tasks/service.yml", "monitoring_base_units"),
    "mtail": ("dropin", "monitoring_base/tasks/service.yml", "monitoring_base_units"),
    "prometheus": ("dropin", "monitoring_base/tasks/service.yml", "monitoring_base_units"),
    "grafana-server": ("dropin", "monitoring_base/tasks/service.yml", "monitoring_base_units"),
    "llmops-dcgm-exporter": ("dropin", "monitoring_base/tasks/service.yml", "monitoring_base_units"),
    "redis-server": ("dropin", "response_cache/tasks/service.yml", "['redis-server']"),
    "{{ response_cache__unit }}": ("unit", "response_cache/templates/llmops-response-cache.service.j2"),
    "{{ vllm_router__unit }}": ("unit", "vllm_router/templates/vllm-router.service.j2"),
    "{{ vllm_service_unit }}": ("dropin", "vllm_service/tasks/configure.yml", "[vllm_service_unit]"),
    "{{ vllm_service_unit }}-head-watch": ("dropin", "vllm_service/tasks/configure.yml",
                                           "[vllm_service_unit ~ '-head-watch']"),
    "{{ keepalived__metrics_unit }}.timer": ("oneshot", "a timer: systemd starts its oneshot service (writes a "
                                                        "metrics file and exits) every keepalived_metrics_interval s"),
    "{{ vllm_router__metrics_unit }}.timer": ("oneshot", "a timer: systemd starts its oneshot service (writes the "
                                                         "router's health and exits) every vllm_router_metrics_interval s"),
    "{{ firewall_unit }}": ("oneshot", "loads the nftables table and exits (Type=oneshot, RemainAfterExit)"),
    "docker": ("vendor", "Docker's own unit restarts itself (Restart=always); the role only configures the runtime"),
    "systemd-networkd": ("vendor", "part of systemd, restarted by systemd itself (Restart=on-failure in its unit)"),
    "nvidia-persistenced": ("vendor", "NVIDIA's unit, never changed by the collection (DGX OS: NVIDIA's own)"),
    "{{ nvidia_driver_fabricmanager_service }}": ("vendor", "NVIDIA's unit, never changed by the collection"),
}
# The monitoring components' units all go through monitoring_base's service step.
MONITORING_COMPONENTS = ("monitoring_dcgm", "monitoring_exporters", "monitoring_grafana", "monitoring_prometheus")


def _tasks(node):
    for task in node or []:
        if not isinstance(task, dict):
            continue
        yield task
        for key in ("block", "rescue", "always"):
            yield from _tasks(task.get(key))


def _started_units():
    """{unit expression: [where]} of every systemd_service call that starts, restarts or enables a unit."""
    found = {}
    for path in sorted(ROOT.glob("roles/*/*/*.yml")):
        if path.parent.name not in ("tasks", "handlers"):
            continue
        for task in _tasks(yaml.safe_load(path.read_text(encoding="utf-8"))):
            args = task.get("ansible.builtin.systemd_service")
            if not isinstance(args, dict) or "name" not in args:
                continue
            state = str(args.get("state", ""))
            if not (args.get("enabled") is True or "start" in state or "restart" in state):
                continue
            if "stopped" in state and "start" not in state:
                continue
            name = str(args["name"])
            role = path.parent.parent.name
            if name == "{{ item }}":
                if role == "headless":  # display managers: stopped and disabled, never started
                    continue
                name = "{{ item }}@" + role
            found.setdefault(name, []).append(str(path.relative_to(ROOT)))
    return found


def test_every_started_unit_says_how_it_restarts_itself():
    started = _started_units()
    missing = sorted(set(started) - set(RESTARTS))
    assert not missing, "units the roles start with no restart entry: %s" % {m: started[m] for m in missing}
    stale = sorted(set(RESTARTS) - set(started))
    assert not stale, "entries for units no role starts: %s" % stale


def test_each_dropin_entry_is_a_restart_dropin_of_its_role():
    for unit, how in RESTARTS.items():
        if how[0] != "dropin":
            continue
        text = (ROOT / "roles" / how[1]).read_text(encoding="utf-8")
        # the filter's input: the expression just before each call
        calls = [" ".join(text[max(0, m.start() - 120):m.start()].split())
                 for m in re.finditer(r"\|\s*llmops\.vllm_cluster\.systemd_restart_files\(", text)]
        assert any(how[2] in c for c in calls), (unit, how, calls)


def test_each_unit_file_entry_restarts_with_a_start_limit():
    for unit, how in RESTARTS.items():
        if how[0] != "unit":
            continue
        text = (ROOT / "roles" / how[1]).read_text(encoding="utf-8")
        assert re.search(r"^Restart=(always|on-failure|on-abnormal)$", text, re.M), (unit, how)
        assert re.search(r"^StartLimitBurst=", text, re.M) and re.search(r"^StartLimitIntervalSec=", text, re.M), unit


def test_every_monitoring_unit_goes_through_the_base_service_step():
    texts = {comp: (ROOT / "roles" / comp / "tasks" / "service.yml").read_text(encoding="utf-8")
             for comp in MONITORING_COMPONENTS}
    for comp, text in texts.items():
        assert "tasks_from: service" in text and "monitoring_base_units" in text, comp
    for unit, how in RESTARTS.items():
        if how[2:] == ("monitoring_base_units",) and not unit.startswith("{{"):
            assert any(unit in text for text in texts.values()), "%s is not in any component's monitoring_base_units" % unit


def test_the_restart_dropin_text():
    files = systemd_restart_files(["nginx", "vllm-head-watch.service"], 2, 5, 60, key_prefix="limit:")
    dirs = [f for f in files if f["state"] == "directory"]
    drops = [f for f in files if f["state"] == "file"]
    assert [d["dest"] for d in dirs] == ["/etc/systemd/system/nginx.service.d",
                                         "/etc/systemd/system/vllm-head-watch.service.d"]
    assert [d["dest"] for d in drops] == ["/etc/systemd/system/nginx.service.d/llmops-restart.conf",
                                          "/etc/systemd/system/vllm-head-watch.service.d/llmops-restart.conf"]
    assert [d["key"] for d in drops] == ["limit:nginx", "limit:vllm-head-watch.service"]
    text = drops[0]["content"]
    unit_part, service_part = text.split("[Service]")
    assert "[Unit]" in unit_part and "StartLimitIntervalSec=60\n" in unit_part and "StartLimitBurst=5\n" in unit_part
    assert "Restart=on-failure\n" in service_part and "RestartSec=2\n" in service_part


def test_bad_restart_arguments_are_refused():
    import pytest
    from ansible.errors import AnsibleFilterError
    for args in ((["nginx"], "x"), (["nginx"], 2, 0), (["nginx"], 2, 5, 60, "no"), (["../etc"],), ("nginx",)):
        with pytest.raises(AnsibleFilterError):
            systemd_restart_files(*args)
