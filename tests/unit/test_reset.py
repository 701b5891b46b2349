"""playbooks/reset.yml: it parses and lists its tasks on a shipped inventory (no host contacted);
without reset_confirm=yes, with a bad reset_* value, with a --limit that splits a replica or with an
inventory value its syntax class refuses, it stops before any host changes, naming the variable and
the valid values; --check on this machine lists what it would remove and keep without a
confirmation. The plan (plugins/filter/reset.py) on synthetic probes: the edge stops first, data,
packages and the accounts that own kept data stay unless asked, DGX OS keeps NVIDIA's packages, a
second run has nothing to do. And the whole surface: every file, directory, unit, account, hold,
repository, line and package a role task installs is in the layout (playbooks/vars/reset.yml), read
from every roles/*/tasks/*.yml, so a new one in a role fails here until the reset knows it."""
from __future__ import annotations

import fnmatch
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _collections():
    linked = ROOT / ".cache" / "collections"
    target = linked / "ansible_collections" / "llmops" / "vllm_cluster"
    if target.is_dir() and os.path.samefile(target, ROOT):
        return str(linked)
    root = tempfile.mkdtemp(prefix="llmops-reset-")
    os.makedirs(os.path.join(root, "ansible_collections", "llmops"))
    os.symlink(ROOT, os.path.join(root, "ansible_collections", "llmops", "vllm_cluster"))
    return root


COLLECTIONS = _collections()
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)

from ansible_collections.llmops.vllm_cluster.plugins.filter import reset as R  # noqa: E402
from ansible_collections.llmops.vllm_cluster.plugins.plugin_utils import _syntax  # noqa: E402

PLAYBOOK = ROOT / "playbooks" / "reset.yml"
LAYOUT = yaml.safe_load((ROOT / "playbooks" / "vars" / "reset.yml").read_text(encoding="utf-8"))["reset_layout"]
needs_ansible = pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="ansible-playbook not installed")
FACTS = {"reset_dgx_os": False, "reset_distribution": "Ubuntu", "reset_kernel": "6.8.0-1-generic"}
ALL_GROUPS = ["cluster", "gpu_nodes", "vllm_nodes", "vllm_heads", "vllm_workers", "balancers", "monitoring"]


def _env():
    return dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
                ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")


def _play(*args, timeout=300):
    proc = subprocess.run(["ansible-playbook", str(PLAYBOOK), *args], capture_output=True, text=True, env=_env(),
                          check=False, timeout=timeout)
    return proc, " ".join((proc.stdout + proc.stderr).split())


def _local_inventory(tmp_path, hosts):
    """hosts: {name: {groups: [...], vars: {...}}}; every host local (never reached over a network)."""
    groups = {}
    for name, spec in hosts.items():
        for group in spec["groups"]:
            groups.setdefault(group, {})[name] = spec.get("vars") or {}
    children = dict((g, {"hosts": members}) for g, members in groups.items())
    inv = {"all": {"children": {"cluster": {"children": children}},
                   "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(inv, sort_keys=False), encoding="utf-8")
    return str(path)


# ---------------------------------------------------------------------------------------------------
# The playbook, parsed and run where no host changes

@needs_ansible
def test_syntax_check():
    proc, out = _play("--syntax-check", "-i", str(ROOT / "inventories" / "dgx_spark"))
    assert proc.returncode == 0, out[-3000:]


@needs_ansible
def test_list_tasks_on_the_dgx_spark_inventory():
    proc, out = _play("--list-tasks", "-i", str(ROOT / "inventories" / "dgx_spark"))
    assert proc.returncode == 0, out[-3000:]
    plays = re.findall(r"play #\d+ \(([^)]*)\): ([^\t]+?)\s+TAGS", proc.stdout)
    assert [p[1].strip() for p in plays] == [
        "Check the reset request (before any host is contacted)",
        "Read what the collection installed on each host",
        "Take the replicas being reset out of the balancers that stay",
        "Remove what the collection installed (the edge first, the host layers last)"], plays
    for task in ("Require the confirmation", "Refuse a reset that would leave a replica half-removed",
                 "Refuse values a reset must not act on", "Stop and disable the units", "Release the holds the layers set",
                 "Remove the files, directories, units and drop-ins", "Report what was removed and what was kept"):
        assert task in out, task


@needs_ansible
def test_refused_without_the_confirmation(tmp_path):
    inv = _local_inventory(tmp_path, {"localhost": {"groups": ["balancers", "monitoring"]}})
    proc, out = _play("-i", inv)
    assert proc.returncode != 0
    assert "set -e reset_confirm=yes to remove what the collection installed on 1 host(s) (localhost)" in out, out[-3000:]
    assert "Nothing was changed." in out
    # Stopped in the first play: no host was read.
    assert "Read what the collection installed on each host" not in out


@needs_ansible
@pytest.mark.parametrize("extra, named", [
    (["-e", "reset_confirm=yes", "-e", "reset_remove_data=models,weights"],
     "reset_remove_data[1]: 'weights' must be one of models, caches, builds, metrics, backups, all"),
    (["-e", "reset_confirm=yes", "-e", "reset_remove_packages=maybe"], "reset_remove_packages: 'maybe' must be true or false"),
    (["-e", "reset_confirm=yes", "-e", "reset_partial_replicas=sometimes"], "reset_partial_replicas: 'sometimes' must be true or false"),
    (["-e", "reset_confirm=no"], "reset_confirm: 'no' must be one of yes; or empty"),
])
def test_bad_settings_are_named_before_any_host(tmp_path, extra, named):
    """The playbook's first task checks the reset_* values against their syntax classes (syntax_check)."""
    inv = _local_inventory(tmp_path, {"localhost": {"groups": ["balancers"]}})
    proc, out = _play("-i", inv, *extra)
    assert proc.returncode != 0
    assert named in out, out[-3000:]
    assert "nothing was changed" in out and "Read what the collection installed on each host" not in out


@needs_ansible
def test_a_limit_that_splits_a_replica_is_refused(tmp_path):
    inv = _local_inventory(tmp_path, {
        "head1": {"groups": ["gpu_nodes", "vllm_heads"], "vars": {"vllm_service_replica": "r1"}},
        "worker1": {"groups": ["gpu_nodes", "vllm_workers"], "vars": {"vllm_service_replica": "r1"}}})
    proc, out = _play("-i", inv, "--limit", "worker1", "-e", "reset_confirm=yes")
    assert proc.returncode != 0
    assert ("this --limit would leave r1 half-removed (r1: resets worker1, keeps head1): add the other nodes of the "
            "replica to --limit, or set -e reset_partial_replicas=true to reset only these") in out, out[-3000:]
    assert "Read what the collection installed on each host" not in out


@needs_ansible
def test_an_inventory_value_its_class_refuses_stops_every_host(tmp_path):
    inv = _local_inventory(tmp_path, {"localhost": {"groups": ["vllm_nodes", "vllm_heads"], "vars": {"vllm_service_config_dir": "/etc"}}})
    proc, out = _play("-i", inv, "--check")
    assert proc.returncode != 0
    assert "vllm_service_config_dir: '/etc' must be an absolute directory the role owns" in out, out[-3000:]
    assert "'/etc' is a system directory; a reset removes only what the collection owns" in out
    assert "Remove what the collection installed" not in out


@needs_ansible
def test_check_mode_lists_what_it_would_remove_without_a_confirmation(tmp_path):
    """On this machine, with the engine layer's paths in a scratch directory and names no host has:
    the probe and the plan run for real, nothing changes."""
    base = tmp_path / "root"
    (base / "etc-vllm").mkdir(parents=True)
    (base / "etc-vllm" / "config.yaml").write_text("model: x\n", encoding="utf-8")
    (base / "libexec").mkdir()
    (base / "libexec" / "vllm-head-watch").write_text("#!/bin/sh\n", encoding="utf-8")
    (base / "home" / "models" / "tiny").mkdir(parents=True)
    (base / "cache").mkdir()
    values = {"vllm_service_config_dir": str(base / "etc-vllm"), "vllm_service_libexec_dir": str(base / "libexec"),
              "vllm_service_home": str(base / "home"), "vllm_service_models_dir": str(base / "home" / "models"),
              "vllm_service_cache_dir": str(base / "cache"), "vllm_service_unit": "llmops-reset-test-engine",
              "vllm_service_user": "llmops-reset-test", "vllm_service_group": "llmops-reset-test",
              "dspark_build_root": str(base / "opt-vllm"), "firewall_unit": "llmops-reset-test-fw",
              "firewall_table": "llmops_reset_test", "firewall_conf_dir": str(base / "fw")}
    inv = _local_inventory(tmp_path, {"localhost": {"groups": ["vllm_nodes", "vllm_heads"], "vars": values}})
    proc, out = _play("-i", inv, "--check")
    assert proc.returncode == 0, out[-3000:]
    report = proc.stdout[proc.stdout.index("TASK [Report what was removed"):]
    assert "would remove:" in report
    for path in (base / "etc-vllm", base / "libexec"):
        assert "path %s" % path in report, report
    assert "%s (models data: -e reset_remove_data=models removes it)" % (base / "home" / "models") in " ".join(report.split())
    assert (base / "etc-vllm" / "config.yaml").exists() and (base / "libexec" / "vllm-head-watch").exists()


# ---------------------------------------------------------------------------------------------------
# The settings and the plan, in Python

def test_settings():
    s = R.reset_settings({"reset_confirm": "yes", "reset_remove_data": "models, builds", "reset_remove_packages": "true"})
    assert s == {"confirmed": True, "remove_data": ["models", "builds"], "remove_packages": True, "partial_replicas": False}
    assert R.reset_settings({"reset_remove_data": True})["remove_data"] == list(R.KINDS)
    assert R.reset_settings({"reset_remove_data": "all"})["remove_data"] == list(R.KINDS)
    assert R.reset_settings({"reset_remove_data": ["metrics"]})["remove_data"] == ["metrics"]
    assert R.reset_settings({"reset_remove_data": "false"})["remove_data"] == []
    assert not R.reset_settings({"reset_confirm": "YES please"})["confirmed"]
    assert not R.reset_settings({})["confirmed"]
    assert R.reset_settings({"reset_confirm": True})["confirmed"]
    assert R.reset_settings({"reset_remove_data": ["all"]})["remove_data"] == list(R.KINDS)
    assert R.reset_settings({"reset_remove_data": "yes", "reset_partial_replicas": "on"})["partial_replicas"]
    # The syntax class refuses any other value first; one read anyway confirms and removes nothing.
    assert R.reset_settings({"reset_confirm": "no", "reset_remove_data": "weights", "reset_remove_packages": "maybe"}) == {
        "confirmed": False, "remove_data": [], "remove_packages": False, "partial_replicas": False}


def test_half_replicas():
    replicas = {"r1": {"nodes": {"a": {}, "b": {}}}, "r2": {"nodes": {"c": {}}}}
    assert R.reset_half_replicas(replicas, ["a", "c"]) == [{"replica": "r1", "reset": ["a"], "kept": ["b"]}]
    assert R.reset_half_replicas(replicas, ["a", "b"]) == []


def _units(*states):
    """systemctl show blocks for (name, load, unit file state, active state)."""
    return "\n".join("Id=%s\nLoadState=%s\nUnitFileState=%s\nActiveState=%s\n" % s for s in states)


def _probe(resolved, paths=(), entries=(), packages=(), units=None, users=(), groups=(), tables=(), lines=()):
    names = []
    for layer in resolved["layers"]:
        for item in layer["units"] + layer["services"] + layer["kept_units"]:
            if item["name"] not in names:
                names.append(item["name"])
    units = units or {}
    blocks = [units.get(n, (n, "not-found", "", "inactive")) for n in names]
    out = ["path %s" % p for p in paths] + ["entry %s" % e for e in entries]
    out += ["user %s" % u for u in users] + ["group %s" % g for g in groups] + ["table %s" % t for t in tables]
    out += ["line %d" % n for n in lines]
    out += ["--- packages"] + ["%s\t1.0\t%s" % p for p in packages]
    out += ["--- units", _units(*blocks)]
    return "\n".join(out)


def _resolved(groups, values=None, facts=None):
    resolved = R.reset_layout(LAYOUT, values or {}, groups, dict(FACTS, **(facts or {})))
    assert resolved["errors"] == []
    return resolved


def _settings(**kw):
    return R.reset_settings(dict({"reset_confirm": "yes"}, **kw))


def test_the_edge_stops_first_and_a_second_run_has_nothing_to_do():
    resolved = _resolved(["cluster", "balancers", "monitoring"])

    def active(name):
        return (name, "loaded", "enabled", "active")

    state = dict(
        paths=["/etc/nginx/conf.d/llmops-vllm.conf", "/etc/keepalived/keepalived.conf", "/etc/keepalived",
               "/usr/local/libexec/llmops", "/usr/local/libexec/llmops/nginx-lb-drain",
               "/usr/local/libexec/llmops/keepalived-check-nginx", "/etc/nginx/llmops",
               "/etc/systemd/system/nginx.service.d", "/etc/systemd/system/nginx.service.d/llmops-restart.conf",
               "/etc/systemd/system/llmops-firewall.service", "/etc/llmops", "/etc/llmops/firewall",
               "/var/lib/prometheus/metrics2", "/etc/prometheus/rules/llmops.rules.yml", "/etc/prometheus/rules"],
        entries=["/usr/local/libexec/llmops/nginx-lb-drain", "/usr/local/libexec/llmops/keepalived-check-nginx",
                 "/etc/systemd/system/nginx.service.d/llmops-restart.conf", "/etc/llmops/firewall",
                 "/etc/keepalived/keepalived.conf", "/etc/prometheus/rules/llmops.rules.yml"],
        packages=[("nginx", "hi "), ("keepalived", "ii "), ("prometheus", "ii ")],
        units=dict((n, active(n)) for n in ("nginx.service", "keepalived.service", "prometheus.service",
                                            "llmops-firewall.service", "llmops-keepalived-metrics.timer")),
        users=["keepalived_script"], tables=["llmops"])
    plan = R.reset_plan(_probe(resolved, **state), resolved, _settings())
    stopped = [s["name"] for s in plan["stop"]]
    assert stopped == ["prometheus.service", "llmops-keepalived-metrics.timer", "keepalived.service", "nginx.service",
                       "llmops-firewall.service"]
    assert all(s["state"] == "stopped" and s["enabled"] is False for s in plan["stop"])
    # Shared directories go once everything in them goes; children of a removed directory are not listed.
    assert "/usr/local/libexec/llmops" in plan["remove"] and "/usr/local/libexec/llmops/nginx-lb-drain" not in plan["remove"]
    assert "/etc/llmops" in plan["remove"] and "/etc/systemd/system/nginx.service.d" in plan["remove"]
    assert "/etc/keepalived" in plan["remove"] and "/etc/prometheus/rules" in plan["remove"]
    assert plan["holds"] == ["nginx"] and plan["packages"] == []
    assert plan["users"] == ["keepalived_script"] and plan["tables"] == ["llmops"] and plan["daemon_reload"]
    assert "/var/lib/prometheus/metrics2" not in plan["remove"]
    kept = " | ".join(plan["kept"])
    assert "/var/lib/prometheus/metrics2 (metrics data: -e reset_remove_data=metrics removes it)" in kept
    assert "package keepalived (-e reset_remove_packages=true removes it)" in kept
    assert "/etc/prometheus/prometheus.yml" not in kept  # not there in this probe

    # The second run finds what the first left: nothing to do.
    again = dict(paths=["/var/lib/prometheus/metrics2"], packages=[("nginx", "ii "), ("keepalived", "ii "), ("prometheus", "ii ")])
    plan = R.reset_plan(_probe(resolved, **again), resolved, _settings())
    assert [plan[k] for k in ("stop", "holds", "packages", "lines", "remove", "tables", "users", "groups", "commands")] == [[]] * 9
    assert plan["removed"] == [] and not plan["daemon_reload"]


def test_packages_go_only_when_asked_and_only_where_the_layer_configured_them():
    resolved = _resolved(["cluster", "balancers", "monitoring"])
    probe = _probe(resolved, paths=["/etc/nginx/conf.d/llmops-vllm.conf", "/etc/default/mtail"],
                   packages=[("nginx", "hi "), ("mtail", "ii "), ("prometheus", "ii ")])
    plan = R.reset_plan(probe, resolved, _settings(reset_remove_packages=True))
    # nginx: the layer's configuration is there; mtail and prometheus: nothing of the layer's, not touched.
    assert plan["holds"] == ["nginx"] and plan["packages"] == ["nginx"]
    assert "/etc/default/mtail" not in plan["remove"]


def test_data_stays_unless_named_and_the_account_that_owns_it_with_it():
    resolved = _resolved(["cluster", "gpu_nodes", "vllm_nodes", "vllm_heads"])
    paths = ["/var/lib/vllm", "/var/lib/vllm/models", "/var/cache/vllm", "/opt/vllm", "/etc/vllm",
             "/etc/systemd/system/vllm.service", "/etc/systemd/system/vllm.service.12.2001-01-01@00:00:00~"]
    units = {"vllm.service": ("vllm.service", "loaded", "enabled", "active")}
    probe = _probe(resolved, paths=paths, units=units, users=["vllm"], groups=["vllm"])
    plan = R.reset_plan(probe, resolved, _settings())
    assert plan["engine_active"] and [s["name"] for s in plan["stop"]] == ["vllm.service"]
    assert sorted(plan["remove"]) == ["/etc/systemd/system/vllm.service", "/etc/systemd/system/vllm.service.12.2001-01-01@00:00:00~",
                                      "/etc/vllm"]
    assert plan["users"] == [] and plan["groups"] == []
    kept = " | ".join(plan["kept"])
    for text in ("/var/lib/vllm/models (models data", "/var/cache/vllm (caches data", "/opt/vllm (builds data",
                 "user vllm (owns the kept models, caches data)"):
        assert text in kept, kept
    plan = R.reset_plan(probe, resolved, _settings(reset_remove_data="models,caches"))
    assert {"/var/lib/vllm", "/var/cache/vllm"} <= set(plan["remove"]) and "/opt/vllm" not in plan["remove"]
    assert plan["users"] == ["vllm"] and plan["groups"] == ["vllm"]


def test_a_path_that_holds_kept_data_stays():
    resolved = _resolved(["cluster", "vllm_nodes", "vllm_heads"],
                         {"vllm_service_config_dir": "/srv/llmops/etc", "vllm_service_models_dir": "/srv/llmops/etc/models"})
    probe = _probe(resolved, paths=["/srv/llmops/etc", "/srv/llmops/etc/models"])
    plan = R.reset_plan(probe, resolved, _settings())
    assert "/srv/llmops/etc" not in plan["remove"]
    assert "/srv/llmops/etc (holds kept /srv/llmops/etc/models)" in plan["kept"]


def test_dgx_os_keeps_nvidias_packages():
    evidence = "/etc/apt/sources.list.d/nvidia-container-toolkit.sources"
    for dgx, manage, holds, removed in ((False, False, True, True), (True, False, False, False), (True, True, True, False)):
        resolved = _resolved(["cluster", "gpu_nodes"], {"container_toolkit_manage_dgx_os": manage}, {"reset_dgx_os": dgx})
        probe = _probe(resolved, paths=[evidence], packages=[("nvidia-container-toolkit", "hi ")])
        plan = R.reset_plan(probe, resolved, _settings(reset_remove_packages=True))
        assert (plan["holds"] == ["nvidia-container-toolkit"]) == holds, (dgx, manage, plan)
        assert (plan["packages"] == ["nvidia-container-toolkit"]) == removed, (dgx, manage, plan)
        assert (evidence in plan["remove"]) == removed
        if dgx:
            assert "package nvidia-container-toolkit (NVIDIA's, on DGX OS: never removed)" in plan["kept"]


def test_the_driver_packages_follow_the_hosts_distribution():
    resolved = _resolved(["gpu_nodes"], facts={"reset_distribution": "Debian", "reset_kernel": "6.1.0-1"})
    names = [p["name"] for layer in resolved["layers"] if layer["layer"] == "nvidia_driver" for p in layer["packages"]]
    assert "nvidia-open-kernel-dkms" in names and "nvidia-smi" in names
    resolved = _resolved(["gpu_nodes"], {"nvidia_driver_source": "cuda_repo", "nvidia_driver_fabricmanager": "auto"})
    names = [p["name"] for layer in resolved["layers"] if layer["layer"] == "nvidia_driver" for p in layer["packages"]]
    assert names == ["nvidia-driver-pinning-580", "nvidia-open", "nvidia-fabricmanager"]


def test_the_blacklist_removal_regenerates_the_initramfs_and_a_line_goes():
    resolved = _resolved(["gpu_nodes", "balancers"], facts={"reset_distribution": "Debian"})
    probe = _probe(resolved, paths=["/etc/modprobe.d/llmops-blacklist-nouveau.conf", "/usr/sbin/update-initramfs",
                                    "/etc/redis/llmops-response-cache.conf"], lines=[0])
    plan = R.reset_plan(probe, resolved, _settings(reset_remove_packages=True))
    assert plan["commands"] == [["update-initramfs", "-u", "-k", "all"]]
    assert plan["lines"] == [{"path": "/etc/redis/redis.conf", "line": "include /etc/redis/llmops-response-cache.conf"}]
    plan = R.reset_plan(probe, resolved, _settings())
    assert plan["commands"] == [] and "/etc/modprobe.d/llmops-blacklist-nouveau.conf" not in plan["remove"]


def test_every_name_the_layout_reads_resolves_from_the_roles_own_files():
    """No value is copied into the layout: every placeholder is a role default, a role constant, a
    playbook option or one of the plan's own values, and reads without an inventory."""
    defaults, constants, playbook, _options = R._sources()
    for name in R.reset_names(LAYOUT):
        assert name in defaults or name in constants or name in playbook, name
    resolved = R.reset_layout(LAYOUT, {}, ALL_GROUPS, FACTS)
    assert resolved["errors"] == []
    assert [layer["layer"] for layer in resolved["layers"]] == [
        "response_cache", "monitoring", "keepalived", "nginx_lb", "vllm_router", "vllm_service", "dspark_build",
        "container_toolkit", "nvidia_driver", "firewall", "network"]
    for text in R._strings(resolved["layers"]):
        assert "{" not in text, text


def test_the_layers_are_the_reverse_of_the_site():
    site = yaml.safe_load((ROOT / "playbooks" / "site.yml").read_text(encoding="utf-8"))
    order = [r["role"].split(".")[-1] for play in site for r in play.get("roles") or []]
    layers = [layer["layer"] for layer in LAYOUT]
    assert [o for o in reversed(order) if o in layers] == layers
    assert set(order) - set(layers) == {"headless"}  # installs nothing: the layout's header says why


# ---------------------------------------------------------------------------------------------------
# The whole surface: what every role task installs is in the layout

DEFAULTS, CONSTANTS, _PLAYBOOK, _OPTIONS = R._sources()
_VAR = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*(\|\s*(?:default\([^)]*\)|dirname|basename)\s*)?\}\}")
_ANY = re.compile(r"\{\{.*?\}\}|\{%.*?%\}", re.S)
# file_set `files:` given as an expression: what each one installs (a new expression fails the test
# until it is added here). UNITS stands for the monitoring components' units (monitoring_base_units).
DYNAMIC = {
    "['nginx'] | llmops.vllm_cluster.systemd_restart_files": ["/etc/systemd/system/nginx.service.d/llmops-restart.conf"],
    "['keepalived'] | llmops.vllm_cluster.systemd_restart_files": ["/etc/systemd/system/keepalived.service.d/llmops-restart.conf"],
    "['redis-server'] | llmops.vllm_cluster.systemd_restart_files": [
        "/etc/systemd/system/redis-server.service.d/llmops-restart.conf"],
    "monitoring_base_units | llmops.vllm_cluster.systemd_restart_files": ["/etc/systemd/system/UNIT.service.d/llmops-restart.conf"],
    "monitoring_base__sandboxed | llmops.vllm_cluster.systemd_dropin_files('llmops-hardening.conf'": [
        "/etc/systemd/system/SANDBOXED.service.d/llmops-hardening.conf"],
    "vllm_service__limit_files": ["/etc/systemd/system/{{ vllm_service_unit }}.service.d/llmops-restart.conf",
                                  "/etc/systemd/system/{{ vllm_service_unit }}-head-watch.service.d/llmops-restart.conf"],
    # The staged models' directories (vllm_service__stages): under vllm_service_models_dir by default.
    "file_set_directories": ["{{ vllm_service_models_dir }}/*"],
}
# Destinations that name no path of their own, with where the layout has them.
EXEMPT = {
    "{{ item.item }}": "nginx_lb: the first balancer's self-signed pair copied to the others (nginx_lb_tls_cert, nginx_lb_tls_key)",
    "{{ item.dest }}": "vllm_service restore.yml: the files a failed change replaced, put back where the layout has them",
    "{{ item.item.dest }}": "vllm_service stage.yml: a staged model unpacked into its directory (models data)",
    "/etc/modprobe.d": "the distribution's directory, created on a minimal host that lacks it",
    "{{ keepalived_metrics_dir }}": "the node exporter's textfile directory: only the layer's file in it goes",
    "{{ vllm_router_metrics_dir }}": "the node exporter's textfile directory: only the layer's file in it goes",
    "{{ monitoring_external_rules_dir }}": "an existing Prometheus' rules directory: only the layer's file in it goes",
}
# Each variable a hold's loop reads, and the layout package placeholder for it.
HOLDS = {"container_toolkit_packages": "{container_toolkit_packages}", "nginx_lb_packages": "{nginx_lb_packages}",
         "nvidia_driver__packages": "{reset_nvidia_driver_packages}",
         "monitoring_base_hold": ["{monitoring_prometheus_package}", "{monitoring_grafana_package}"]}


def _tasks(node, inherited=None):
    if isinstance(node, list):
        for task in node:
            yield from _tasks(task, inherited)
    elif isinstance(node, dict):
        merged = dict(inherited or {})
        merged.update(node.get("vars") or {})
        yield node, merged
        for key in ("block", "rescue", "always"):
            if key in node:
                yield from _tasks(node[key], merged)


def _module(task):
    for key, args in task.items():
        short = key.split(".")[-1]
        if short in ("template", "copy", "get_url", "unarchive", "file", "lineinfile", "user", "group", "dpkg_selections",
                     "deb822_repository", "systemd_service", "apt", "file_set", "include_role", "set_fact"):
            return short, args if isinstance(args, dict) else {}
    return None, {}


def _role_tasks():
    for path in sorted((ROOT / "roles").glob("*/tasks/*.yml")):
        for task, task_vars in _tasks(yaml.safe_load(path.read_text(encoding="utf-8")) or []):
            yield path.relative_to(ROOT).as_posix(), task, task_vars


@pytest.fixture(scope="module")
def surface():
    """Every role task's destinations, units, accounts, holds, repositories, lines and packages, with
    the raw definitions (defaults, constants, set_fact, task vars) they are rendered from."""
    raw = dict(DEFAULTS)
    raw.update(CONSTANTS)
    units_of_base, out = set(), {"dests": [], "units": [], "accounts": [], "holds": [], "repos": [], "lines": [],
                                 "packages": [], "unread": []}
    for where, task, task_vars in _role_tasks():
        module, args = _module(task)
        for name, value in task_vars.items():
            raw.setdefault(name, value)
        if module == "set_fact":
            for name, value in args.items():
                raw.setdefault(name, value)
        if module == "include_role" and "monitoring_base_units" in (task.get("vars") or {}):
            value = task["vars"]["monitoring_base_units"]
            units_of_base.update(value if isinstance(value, list) else re.findall(r"'([a-z][a-z0-9-]+)'", str(value)))
    for where, task, task_vars in _role_tasks():
        module, args = _module(task)
        loop = task.get("loop")
        if module in ("template", "copy", "get_url", "unarchive"):
            out["dests"] += [(where, d) for d in _looped(args.get("dest"), loop)]
        elif module == "file" and args.get("state") != "absent":
            out["dests"] += [(where, d) for d in _looped(args.get("path") or args.get("dest"), loop)]
        elif module == "file_set":
            files = args.get("files")
            if isinstance(files, list):
                out["dests"] += [(where, f["dest"]) for f in files if f.get("state") != "absent"]
            else:
                known = [key for key in DYNAMIC if key in str(files)]
                if not known:
                    out["unread"].append("%s: file_set files %r (add it to DYNAMIC)" % (where, files))
                for key in known:
                    for dest in DYNAMIC[key]:
                        out["dests"] += [(where, dest.replace("UNIT", u).replace("SANDBOXED", u)) for u in sorted(units_of_base)
                                         if "SANDBOXED" not in dest or u in raw["monitoring_base__hardening"]] \
                            if ("UNIT" in dest or "SANDBOXED" in dest) else [(where, dest)]
                for name, value in task_vars.items():
                    if name in str(files) and isinstance(value, list):
                        out["dests"] += [(where, f["dest"]) for f in value if isinstance(f, dict) and f.get("state") != "absent"]
        elif module == "systemd_service" and (args.get("enabled") is True or args.get("state") == "started"):
            names = sorted(units_of_base) if args.get("name") == "{{ item }}" else [args.get("name")]
            out["units"] += [(where, n) for n in names]
        elif module in ("user", "group") and args.get("state", "present") != "absent":
            out["accounts"].append((where, args["name"]))
        elif module == "dpkg_selections" and "hold" in str(args.get("selection")):
            out["holds"].append((where, str(loop)))
        elif module == "deb822_repository":
            out["repos"].append((where, args["name"]))
        elif module == "lineinfile" and args.get("state", "present") != "absent":
            out["lines"].append((where, args["path"], args["line"]))
        elif module == "apt" and args.get("name") and args.get("state", "present") != "absent":
            out["packages"].append((where, args["name"]))
    out["raw"] = raw
    return out


def _looped(dest, loop):
    if dest is None:
        return []
    if isinstance(loop, list) and "item" in dest:
        return [_ANY.sub(lambda m: _item(m.group(0), item), dest) if "item" in dest else dest for item in loop]
    return [dest]


def _item(expr, item):
    inner = expr.strip("{} ")
    if inner == "item" and isinstance(item, str):
        return item
    if inner.startswith("item.") and isinstance(item, dict) and inner[5:] in item:
        return item[inner[5:]]
    return expr


def _render(text, raw, depth=0):
    """TEXT with each `{{ name }}` (and `| default(...)`, `| dirname`) replaced from RAW, anything else '*'."""
    if not isinstance(text, str):
        return str(text)

    def one(match):
        name, pipe = match.group(1), (match.group(2) if match.re is _VAR else "") or ""
        if name not in raw or depth > 8:
            literal = re.search(r"default\('([^']*)'\)", pipe)
            return literal.group(1) if literal else "*"
        value = raw[name]
        if isinstance(value, list):
            return "*"
        value = _render(str(value).strip(), raw, depth + 1)
        return os.path.dirname(value) if "dirname" in pipe else value

    def other(match):
        # `{{ name ~ ... }}`: the value of NAME, then anything
        lead = re.match(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*~", match.group(0))
        return (one(lead) + "*") if lead and lead.group(1) in raw else "*"
    return _ANY.sub(other, _VAR.sub(one, text))


@pytest.fixture(scope="module")
def layout_paths():
    """Every path, unit, account, package and line the layout names, all conditions taken."""
    resolve = R._Resolver({}, FACTS)
    paths, units, accounts, packages, lines, kept_packages = set(), set(), set(), set(), set(), set()
    for layer in LAYOUT:
        for section in ("files", "data", "kept"):
            for item in layer.get(section) or []:
                paths.update(R._expand(item if isinstance(item, str) else item["path"], resolve))
        for item in layer.get("packages") or []:
            packages.update(R._expand(item["name"], resolve))
            for path in item.get("files") or []:
                paths.update(R._expand(path, resolve))
        for section in ("units", "services", "kept_units"):
            for item in layer.get(section) or []:
                units.update(R._expand(item if isinstance(item, str) else item["name"], resolve))
        for item in layer.get("users") or []:
            accounts.update(R._expand(item["name"], resolve))
            accounts.update(R._expand(item["group"], resolve) if item.get("group") else [])
        for item in layer.get("lines") or []:
            lines.update((p, line) for p in R._expand(item["path"], resolve) for line in R._expand(item["line"], resolve))
        for item in layer.get("kept_packages") or []:
            kept_packages.update(R._expand(item, resolve))
    return {"paths": paths, "units": units, "accounts": accounts, "packages": packages, "lines": lines,
            "kept_packages": kept_packages}


def _covered(dest, paths):
    prefix = dest.split("*", 1)[0]
    for path in paths:
        if dest == path or fnmatch.fnmatchcase(dest, path) or (prefix and R._under(prefix.rstrip("/") or "/", path)):
            return True
    return False


def test_every_destination_a_role_writes_is_in_the_layout(surface, layout_paths):
    assert not surface["unread"], "\n".join(surface["unread"])
    missing = []
    for where, dest in surface["dests"]:
        if dest in EXEMPT:
            continue
        rendered = _render(dest, surface["raw"])
        if rendered in EXEMPT or not _covered(rendered, layout_paths["paths"]):
            missing.append("%s: %s (%s)" % (where, dest, rendered))
    print("role destinations checked: %d" % len(surface["dests"]))
    assert len(surface["dests"]) > 80
    assert not missing, "written by a role but not in playbooks/vars/reset.yml:\n" + "\n".join(missing)


def test_every_unit_a_role_enables_is_in_the_layout(surface, layout_paths):
    missing = []
    for where, name in surface["units"]:
        rendered = _render(name, surface["raw"])
        unit = rendered if "." in rendered else rendered + ".service"
        if unit not in layout_paths["units"]:
            missing.append("%s: %s (%s)" % (where, name, unit))
    assert len(surface["units"]) > 10
    assert not missing, "enabled by a role but not in playbooks/vars/reset.yml (units, services or kept_units):\n" + "\n".join(missing)


def test_every_account_a_role_creates_is_in_the_layout(surface, layout_paths):
    missing = [(w, n) for w, n in surface["accounts"] if _render(n, surface["raw"]) not in layout_paths["accounts"]]
    assert len(surface["accounts"]) >= 5
    assert not missing, missing


def test_every_hold_a_role_sets_is_released(surface):
    text = yaml.safe_dump(LAYOUT)
    missing = []
    for where, loop in surface["holds"]:
        names = [n for n in HOLDS if re.search(r"\b%s\b" % n, loop)]
        if not names:
            missing.append("%s: a hold over %s (add its variable to HOLDS)" % (where, loop))
        for name in names:
            for placeholder in HOLDS[name] if isinstance(HOLDS[name], list) else [HOLDS[name]]:
                if placeholder not in text:
                    missing.append("%s: %s" % (where, placeholder))
    assert len(surface["holds"]) >= 4
    assert not missing, missing


def test_every_repository_and_line_a_role_adds_is_in_the_layout(surface, layout_paths):
    missing = []
    for where, name in surface["repos"]:
        slug = re.sub(r"[^a-z0-9-]+", "", re.sub(r"[_\s]+", "-", name.lower()))
        if "/etc/apt/sources.list.d/%s.sources" % slug not in layout_paths["paths"]:
            missing.append("%s: repository %s" % (where, name))
    for where, path, line in surface["lines"]:
        rendered_path, rendered_line = _render(path, surface["raw"]), _render(line, surface["raw"])
        if rendered_path not in layout_paths["paths"] and not any(
                p == rendered_path and fnmatch.fnmatchcase(rendered_line, l.replace("*", "?")) or rendered_line == l
                for p, l in layout_paths["lines"]):
            missing.append("%s: %s in %s" % (where, line, path))
    assert len(surface["repos"]) >= 5 and len(surface["lines"]) >= 3
    assert not missing, missing


def test_every_package_a_role_installs_is_removable_or_a_kept_tool(surface, layout_paths):
    known = layout_paths["packages"] | layout_paths["kept_packages"]
    raw = surface["raw"]
    missing = []
    for where, expr in surface["packages"]:
        text = str(expr)
        names = re.findall(r"'([a-z0-9][a-z0-9+.-]+)'", text)
        for var in re.findall(r"\b([a-z_][a-z0-9_]*(?:packages|package|_specs))\b", text):
            value = raw.get(var)
            if var == "nginx_lb__package_specs":
                value = raw["nginx_lb_packages"]
            if var in ("monitoring_base_packages", "nvidia_driver__packages", "container_toolkit__engine_packages"):
                continue  # the components' own package variables (below), the driver's plan, the engine (kept)
            names += value if isinstance(value, list) else [_render(str(value), raw)] if value is not None else [var]
        if not re.search(r"\{\{", text):
            names.append(text)
        for name in names:
            if name.startswith("linux-headers-") or "*" in name:
                name = "linux-headers-*" if name.startswith("linux-headers-") else name
            if name not in known and not any(fnmatch.fnmatchcase(name, k) for k in known):
                missing.append("%s: %s" % (where, name))
    for var in ("monitoring_node_exporter_package", "monitoring_nginx_exporter_package", "monitoring_mtail_package",
                "monitoring_prometheus_package", "monitoring_grafana_package"):
        if raw[var] not in known:
            missing.append("monitoring: %s" % raw[var])
    assert not missing, "installed by a role but neither a layout package nor a kept tool:\n" + "\n".join(missing)


def test_no_path_the_layout_removes_is_a_system_directory(layout_paths):
    for path in layout_paths["paths"]:
        assert path.rstrip("/") not in _syntax.SYSTEM_DIRS, path
