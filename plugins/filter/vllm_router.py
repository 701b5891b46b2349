# -*- coding: utf-8 -*-
# Copyright: llmops.vllm_cluster developers
# Apache License 2.0 (see galaxy.yml)
"""Filters for the vllm_router role: the routing policy as the command line of vLLM's router
(PyPI vllm-router, pinned in the role; every flag below is one of its `vllm-router --help`), the
router's workers from the inventory, and every reason to refuse the settings.

  vllm_router_workers(backends)
      -> [{'name', 'url'}]: one worker per replica head of cluster_backends' answer, its URL
         http://ADDRESS:PORT (an IPv6 address in brackets)
  vllm_router_argv(policy, settings, host='127.0.0.1')
      -> the router's arguments for POLICY (nginx_lb_routing: cache_aware or session), without the
         worker URLs (the launcher adds those it serves: docs/roles/vllm_router.md)
  vllm_router_errors(backends, policy, settings, host='127.0.0.1')
      -> [message, ...]: every setting the router would refuse or misread, named by its variable

Only Python's standard library (ipaddress).
"""

from __future__ import annotations

import ipaddress
import re

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.vllm_cluster.plugins.plugin_utils._jinja_values import strict_int as _int

# nginx_lb_routing: least_conn is nginx's own balancing (no router); the others map to a policy of
# vllm-router 0.1.17 (`--policy {random,round_robin,cache_aware,kv_aware,power_of_two,consistent_hash,
# sticky_least_loaded}`).
POLICIES = {"cache_aware": "cache_aware", "session": "consistent_hash"}
ROUTING = ("least_conn",) + tuple(sorted(POLICIES))
# vLLM's health route (the router's --health-check-endpoint; its start-up wait always asks /health).
HEALTH_ENDPOINT = "/health"
# Seconds between the start-up probes of the workers (--worker-startup-check-interval, 30 by
# default): a restarted router answers as soon as one replica does, not up to 30 s later.
STARTUP_CHECK_INTERVAL = 2
# The router's log levels (--log-level {debug,info,warning,error,critical}).
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
# Replica names as the drain state file and nginx_lb's markers hold them.
_NAME = re.compile(r"[A-Za-z0-9._:@\[\]-]{1,253}")

# (variable, flag) of every setting the command line carries, in this order.
COMMON = (
    ("vllm_router_port", "--port"),
    ("vllm_router_metrics_address", "--prometheus-host"),
    ("vllm_router_metrics_port", "--prometheus-port"),
    ("vllm_router_health_check_interval", "--health-check-interval-secs"),
    ("vllm_router_health_check_timeout", "--health-check-timeout-secs"),
    ("vllm_router_health_failure_threshold", "--health-failure-threshold"),
    ("vllm_router_health_success_threshold", "--health-success-threshold"),
    ("vllm_router_cb_failure_threshold", "--cb-failure-threshold"),
    ("vllm_router_cb_timeout", "--cb-timeout-duration-secs"),
    ("vllm_router_worker_startup_timeout", "--worker-startup-timeout-secs"),
    ("vllm_router_request_timeout", "--request-timeout-secs"),
    ("vllm_router_log_level", "--log-level"),
)
CACHE_AWARE = (
    ("vllm_router_cache_threshold", "--cache-threshold"),
    ("vllm_router_balance_abs_threshold", "--balance-abs-threshold"),
    ("vllm_router_balance_rel_threshold", "--balance-rel-threshold"),
)
INTEGERS = {
    "vllm_router_port": (1, 65535), "vllm_router_metrics_port": (1, 65535),
    "vllm_router_health_check_interval": (1, 3600), "vllm_router_health_check_timeout": (1, 3600),
    "vllm_router_health_failure_threshold": (1, 100), "vllm_router_health_success_threshold": (1, 100),
    "vllm_router_cb_failure_threshold": (1, 100), "vllm_router_cb_timeout": (1, 3600),
    "vllm_router_worker_startup_timeout": (1, 86400), "vllm_router_request_timeout": (1, 86400),
    "vllm_router_balance_abs_threshold": (0, 1000000),
}
FLOATS = {"vllm_router_cache_threshold": (0.0, 1.0), "vllm_router_balance_rel_threshold": (1.0, 1000.0)}


def _float(value):
    if isinstance(value, bool):
        raise ValueError(value)
    return float(value)


def _host_port(address, port):
    if ":" in address and not address.startswith("["):
        address = "[%s]" % address
    return "%s:%s" % (address, port)


def vllm_router_workers(backends):
    """One {'name', 'url'} per entry of cluster_backends' answer ({address, port, name})."""
    if not isinstance(backends, list):
        raise AnsibleFilterError("vllm_router_workers: backends must be a list, got %r" % (backends,))
    out = []
    for entry in backends:
        if not isinstance(entry, dict):
            raise AnsibleFilterError("vllm_router_workers: each backend must be a mapping, got %r" % (entry,))
        address = str(entry.get("address", "")).strip()
        port = entry.get("port", 8000)
        out.append({"name": str(entry.get("name") or address), "url": "http://" + _host_port(address, port)})
    return out


def _value(settings, name):
    if name not in settings:
        raise AnsibleFilterError("vllm_router: setting %s is missing" % name)
    return settings[name]


def vllm_router_argv(policy, settings, host="127.0.0.1"):
    """The router's arguments for POLICY (without --worker-urls)."""
    if policy not in POLICIES:
        raise AnsibleFilterError("vllm_router_argv: policy must be one of %s, got %r"
                                 % (", ".join(sorted(POLICIES)), policy))
    if not isinstance(settings, dict):
        raise AnsibleFilterError("vllm_router_argv: settings must be a mapping, got %r" % (settings,))
    argv = ["--host", str(host), "--policy", POLICIES[policy]]
    for name, flag in COMMON + (CACHE_AWARE if policy == "cache_aware" else ()):
        value = _value(settings, name)
        if isinstance(value, bool) or value is None or str(value).strip() == "" or str(value).startswith("-"):
            raise AnsibleFilterError("vllm_router_argv: %s must be a value, got %r" % (name, value))
        argv += [flag, str(value).strip()]
    argv += ["--health-check-endpoint", HEALTH_ENDPOINT,
             "--worker-startup-check-interval", str(STARTUP_CHECK_INTERVAL)]
    return argv


def _is_loopback(address):
    try:
        return ipaddress.ip_address(str(address)).is_loopback
    except ValueError:
        return False


def vllm_router_errors(backends, policy, settings, host="127.0.0.1"):
    """Messages for every setting the router would refuse or misread (see the module docstring).

    backends: cluster_backends' answer for the router's replica heads. settings: {variable: value}
    of the role's variables that vllm_router_argv reads, and nginx_lb_listen_port, nginx_lb_tls_port and
    nginx_lb_status_listen where nginx_lb is configured on the host (the router's ports must not be nginx's)."""
    if not isinstance(settings, dict):
        raise AnsibleFilterError("vllm_router_errors: settings must be a mapping, got %r" % (settings,))
    errors = []
    if policy not in ROUTING:
        errors.append("vllm_router_policy (nginx_lb_routing): '%s' is not one of %s" % (policy, ", ".join(ROUTING)))

    backends = list(backends or [])
    if not backends:
        errors.append("no replica head to route to: the group vllm_router_backend_group names has no host and "
                      "vllm_router_backends is empty")
    names, urls = {}, {}
    for entry in backends:
        entry = entry if isinstance(entry, dict) else {}
        name = str(entry.get("name") or "")
        address = str(entry.get("address") or "").strip()
        where = "replica %s" % (name or "?")
        if not _NAME.fullmatch(name):
            errors.append("%s: the replica name '%s' must be 1 to 253 letters, digits and . _ : @ [ ] - (the drain "
                          "state file names replicas)" % (where, name))
        elif name in names:
            errors.append("replica name %s is given twice: each head needs its own vllm_service_replica" % name)
        names.setdefault(name, address)
        try:
            ip = ipaddress.ip_address(address.strip("[]"))
        except ValueError:
            ip = None
        if ip is None:
            errors.append("%s: '%s' is not an IP address. The router's workers are the heads' addresses from the "
                          "inventory, never host names: set ansible_host (or nginx_lb_backend_address) of the head, "
                          "or the address in vllm_router_backends" % (where, address))
            continue
        if ip.is_unspecified:
            errors.append("%s: %s is the unspecified address, not a head's address" % (where, ip))
        try:
            port = _int(entry.get("port"))
        except (TypeError, ValueError):
            port = None
        if port is None or not 1 <= port <= 65535:
            errors.append("%s: port '%s' is not an integer 1..65535" % (where, entry.get("port")))
            continue
        url = "http://" + _host_port(str(ip), port)
        if url in urls:
            errors.append("%s and %s are the same worker %s" % (urls[url], where, url))
        urls.setdefault(url, where)

    if not _is_loopback(host):
        errors.append("the router's listen address %s is not a loopback address: only this host's nginx may reach "
                      "it" % host)
    numbers = {}
    for name, (low, high) in sorted(INTEGERS.items()):
        try:
            numbers[name] = _int(settings.get(name))
        except (TypeError, ValueError):
            errors.append("%s: '%s' is not an integer %d..%d" % (name, settings.get(name), low, high))
            continue
        if not low <= numbers[name] <= high:
            errors.append("%s: %s is not in %d..%d" % (name, numbers[name], low, high))
    for name, (low, high) in sorted(FLOATS.items()):
        try:
            value = _float(settings.get(name))
        except (TypeError, ValueError):
            errors.append("%s: '%s' is not a number %s..%s" % (name, settings.get(name), low, high))
            continue
        if not low <= value <= high:
            errors.append("%s: %s is not in %s..%s" % (name, value, low, high))
    level = settings.get("vllm_router_log_level")
    if level not in LOG_LEVELS:
        errors.append("vllm_router_log_level: '%s' is not one of %s" % (level, ", ".join(LOG_LEVELS)))
    metrics = settings.get("vllm_router_metrics_address")
    try:
        ipaddress.ip_address(str(metrics))
    except ValueError:
        # vllm-router binds its metrics to 0.0.0.0 when it cannot parse --prometheus-host.
        errors.append("vllm_router_metrics_address: '%s' is not an IP address (the router would listen on every "
                      "address instead)" % metrics)

    port, metrics_port = numbers.get("vllm_router_port"), numbers.get("vllm_router_metrics_port")
    if port is not None and port == metrics_port:
        errors.append("vllm_router_port and vllm_router_metrics_port are both %d: the router and its metrics "
                      "need a port each" % port)
    for other in ("nginx_lb_listen_port", "nginx_lb_tls_port", "nginx_lb_status_listen"):
        try:
            taken = _int(str(settings.get(other)).rsplit(":", 1)[-1])
        except (TypeError, ValueError):
            continue
        for mine, value in (("vllm_router_port", port), ("vllm_router_metrics_port", metrics_port)):
            if value is not None and value == taken:
                errors.append("%s is %d, nginx's %s on this balancer" % (mine, value, other))
    return errors


class FilterModule(object):
    def filters(self):
        return {"vllm_router_workers": vllm_router_workers, "vllm_router_argv": vllm_router_argv,
                "vllm_router_errors": vllm_router_errors}
