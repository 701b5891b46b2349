"""Unit tests for plugins/filter/vllm_router.py: the routing policy as vllm-router 0.1.17's command line,
the router's workers from cluster_backends' answer, and the settings the role refuses."""
from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from filter_cases import load_filter

vr = load_filter("vllm_router")
cluster = load_filter("cluster")

# The role's defaults (roles/vllm_router/defaults/main.yml), as the preflight passes them.
SETTINGS = {
    "vllm_router_port": 30000, "vllm_router_metrics_address": "127.0.0.1", "vllm_router_metrics_port": 29000,
    "vllm_router_cache_threshold": 0.3, "vllm_router_balance_abs_threshold": 64,
    "vllm_router_balance_rel_threshold": 1.5, "vllm_router_health_check_interval": 5,
    "vllm_router_health_check_timeout": 5, "vllm_router_health_failure_threshold": 2,
    "vllm_router_health_success_threshold": 2, "vllm_router_cb_failure_threshold": 2, "vllm_router_cb_timeout": 30,
    "vllm_router_worker_startup_timeout": 600,
    "vllm_router_request_timeout": 1800, "vllm_router_log_level": "warning",
}
HOSTVARS = {
    "head1": {"ansible_host": "10.0.0.11", "vllm_service_replica": "r1"},
    "head2": {"ansible_host": "10.0.0.12", "vllm_service_replica": "r2", "vllm_service_api": {"port": 8001}},
    "head6": {"ansible_host": "fd00::16", "vllm_service_replica": "r6"},
}
# Every flag the role passes, as `vllm-router --help` of 0.1.17 names it (docs/roles/vllm_router.md).
HELP_FLAGS = {"--host", "--port", "--policy", "--prometheus-host", "--prometheus-port", "--health-check-endpoint",
              "--health-check-interval-secs", "--health-check-timeout-secs", "--health-failure-threshold",
              "--health-success-threshold", "--worker-startup-timeout-secs", "--worker-startup-check-interval",
              "--request-timeout-secs", "--log-level", "--cache-threshold", "--balance-abs-threshold",
              "--balance-rel-threshold", "--cb-failure-threshold", "--cb-timeout-duration-secs"}


def settings(**over):
    out = dict(SETTINGS)
    out.update(over)
    return out


def flags(argv):
    return dict(zip(argv[::2], argv[1::2]))


def backends(*names):
    return cluster.cluster_backends(HOSTVARS, list(names))


def test_cache_aware_command_line():
    argv = vr.vllm_router_argv("cache_aware", settings())
    assert len(argv) % 2 == 0, argv
    got = flags(argv)
    assert got == {
        "--host": "127.0.0.1", "--policy": "cache_aware", "--port": "30000", "--prometheus-host": "127.0.0.1",
        "--prometheus-port": "29000", "--health-check-interval-secs": "5", "--health-check-timeout-secs": "5",
        "--health-failure-threshold": "2", "--health-success-threshold": "2", "--worker-startup-timeout-secs": "600",
        "--request-timeout-secs": "1800", "--log-level": "warning", "--cache-threshold": "0.3",
        "--balance-abs-threshold": "64", "--balance-rel-threshold": "1.5", "--health-check-endpoint": "/health",
        "--worker-startup-check-interval": "2", "--cb-failure-threshold": "2", "--cb-timeout-duration-secs": "30"}
    assert set(got) == HELP_FLAGS
    assert "--worker-urls" not in argv  # the launcher adds the workers that are not drained


def test_session_is_consistent_hash_without_the_cache_thresholds():
    got = flags(vr.vllm_router_argv("session", settings()))
    assert got["--policy"] == "consistent_hash"
    assert not {"--cache-threshold", "--balance-abs-threshold", "--balance-rel-threshold"} & set(got)
    assert set(got) <= HELP_FLAGS


def test_the_listen_address_is_the_given_one():
    assert flags(vr.vllm_router_argv("session", settings(), "::1"))["--host"] == "::1"


@pytest.mark.parametrize("policy", ["least_conn", "round_robin", "", None])
def test_argv_refuses_a_policy_without_a_router(policy):
    with pytest.raises(AnsibleFilterError):
        vr.vllm_router_argv(policy, settings())


@pytest.mark.parametrize("value", ["--debug", "", None, True])
def test_argv_refuses_a_value_that_is_not_one(value):
    with pytest.raises(AnsibleFilterError):
        vr.vllm_router_argv("cache_aware", settings(vllm_router_log_level=value))


def test_argv_names_a_missing_setting():
    values = settings()
    del values["vllm_router_request_timeout"]
    with pytest.raises(AnsibleFilterError, match="vllm_router_request_timeout"):
        vr.vllm_router_argv("session", values)


def test_workers_are_the_heads_addresses_from_the_inventory():
    assert vr.vllm_router_workers(backends("head1", "head2", "head6")) == [
        {"name": "r1", "url": "http://10.0.0.11:8000"},
        {"name": "r2", "url": "http://10.0.0.12:8001"},
        {"name": "r6", "url": "http://[fd00::16]:8000"},
    ]


def test_workers_of_explicit_backends():
    explicit = cluster.cluster_backends({}, [], [{"address": "10.0.0.21", "port": 9000, "name": "x"},
                                                 {"address": "10.0.0.22"}])
    assert vr.vllm_router_workers(explicit) == [{"name": "x", "url": "http://10.0.0.21:9000"},
                                                {"name": "10.0.0.22", "url": "http://10.0.0.22:8000"}]


@pytest.mark.parametrize("value", ["x", [1], {"address": "10.0.0.1"}])
def test_workers_refuse_what_is_not_a_list_of_mappings(value):
    with pytest.raises(AnsibleFilterError):
        vr.vllm_router_workers(value)


def errors(items, policy="cache_aware", host="127.0.0.1", **over):
    return vr.vllm_router_errors(items, policy, settings(**over), host)


def test_the_defaults_and_the_inventory_pass():
    assert errors(backends("head1", "head2", "head6")) == []
    assert errors(backends("head1"), policy="session") == []


def test_a_head_known_by_name_only_is_refused():
    # No ansible_host: cluster_address falls back to the inventory name, which the router must not get.
    found = errors(cluster.cluster_backends({"head9": {"vllm_service_replica": "r9"}}, ["head9"]))
    assert len(found) == 1 and "'head9' is not an IP address" in found[0] and "ansible_host" in found[0], found
    found = errors([{"address": "llm-head.example", "port": 8000, "name": "r1"}])
    assert "never host names" in found[0], found


def test_no_head_is_refused():
    assert "no replica head" in errors([])[0]


def test_the_same_worker_or_name_twice_is_refused():
    dup = backends("head1") + [{"address": "10.0.0.11", "port": 8000, "name": "other"}]
    assert any("same worker http://10.0.0.11:8000" in e for e in errors(dup)), errors(dup)
    same_name = backends("head1") + [{"address": "10.0.0.12", "port": 8000, "name": "r1"}]
    assert any("replica name r1 is given twice" in e for e in errors(same_name)), errors(same_name)


@pytest.mark.parametrize("item, text", [
    ({"address": "0.0.0.0", "port": 8000, "name": "r"}, "unspecified"),
    ({"address": "10.0.0.1", "port": 70000, "name": "r"}, "port '70000'"),
    ({"address": "10.0.0.1", "port": "x", "name": "r"}, "port 'x'"),
    ({"address": "10.0.0.1", "port": 8000, "name": "r 1"}, "replica name 'r 1'"),
])
def test_a_bad_backend_is_named(item, text):
    found = errors([item])
    assert any(text in e for e in found), found


def test_the_policy_must_be_known():
    assert any("vllm_router_policy" in e for e in errors(backends("head1"), policy="round_robin"))
    assert errors(backends("head1"), policy="least_conn") == []


def test_the_router_listens_on_loopback_only():
    assert any("not a loopback address" in e for e in errors(backends("head1"), host="0.0.0.0"))
    assert errors(backends("head1"), host="::1") == []


@pytest.mark.parametrize("over, text", [
    ({"vllm_router_metrics_address": "localhost"}, "every address instead"),
    ({"vllm_router_port": 29000}, "need a port each"),
    ({"vllm_router_port": 0}, "vllm_router_port: 0 is not in 1..65535"),
    ({"vllm_router_cache_threshold": 1.5}, "vllm_router_cache_threshold"),
    ({"vllm_router_balance_rel_threshold": 0.5}, "vllm_router_balance_rel_threshold"),
    ({"vllm_router_health_check_interval": "often"}, "vllm_router_health_check_interval"),
    ({"vllm_router_log_level": "loud"}, "vllm_router_log_level"),
    ({"nginx_lb_listen_port": 30000}, "vllm_router_port is 30000, nginx's nginx_lb_listen_port"),
    ({"nginx_lb_status_listen": "127.0.0.1:29000"}, "vllm_router_metrics_port is 29000, nginx's nginx_lb_status_listen"),
])
def test_a_bad_setting_is_named(over, text):
    found = errors(backends("head1"), **over)
    assert any(text in e for e in found), found


def test_nginx_ports_that_differ_pass():
    assert errors(backends("head1"), nginx_lb_listen_port=80, nginx_lb_tls_port=443,
                  nginx_lb_status_listen="127.0.0.1:8081") == []


def test_errors_refuse_settings_that_are_not_a_mapping():
    with pytest.raises(AnsibleFilterError):
        vr.vllm_router_errors([], "cache_aware", ["x"])
