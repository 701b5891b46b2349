# -*- coding: utf-8 -*-
# Copyright: llmops.vllm_cluster developers
# Apache License 2.0 (see galaxy.yml)
"""Filters for the response_cache role.

  response_cache_errors(settings) -> [message, ...] (empty when the settings are usable); each message
                                     names the variable and never contains a secret's value

Only Python's standard library.
"""

from __future__ import annotations

import re

from ansible_collections.llmops.vllm_cluster.plugins.plugin_utils._jinja_values import jinja_int as _int

MAXMEMORY_RE = re.compile(r"^[0-9]+(b|kb|k|mb|m|gb|g)?$", re.IGNORECASE)
HEADER_RE = re.compile(r"^[A-Za-z0-9-]+$")
LOOPBACK_RE = re.compile(r"^(127\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}|::1)$")
LISTEN_RE = re.compile(r"^$|^[0-9]{1,3}(\.[0-9]{1,3}){3}$|^\[[0-9A-Fa-f:.]+\]$")
NGINX_SIZE_RE = re.compile(r"^[0-9]+[kKmMgG]?$")
SECRET_MIN = 16
RESERVED_TENANT = "metrics:prometheus"
TRUE_WORDS = ("1", "true", "yes", "on", "y", "t")


def _bool(value):
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in TRUE_WORDS


def _text(value):
    return "" if value is None else str(value)


def _tenant_errors(tenants):
    errors = []
    if len(tenants) == 0:
        errors.append("response_cache_tenants: at least one tenant {name, key} is required")
    for index, tenant in enumerate(tenants):
        tenant = tenant if isinstance(tenant, dict) else {}
        if "name" not in tenant or "key" not in tenant:
            errors.append("response_cache_tenants[%d]: needs name and key" % index)
        elif len(_text(tenant["key"])) < SECRET_MIN:
            errors.append("response_cache_tenants[%d] (%s): key must be 16 or more characters" % (index, tenant["name"]))
        if tenant.get("name", "") == RESERVED_TENANT:
            errors.append("response_cache_tenants[%d]: the name %s is reserved" % (index, RESERVED_TENANT))
    keys = [_text(t["key"]) for t in tenants if isinstance(t, dict) and "key" in t]
    if len(set(keys)) != len(keys):
        errors.append("response_cache_tenants: every tenant needs its own key (two tenants share one)")
    return errors, keys


def response_cache_errors(settings):
    """Every problem with the response cache's settings that argument validation cannot see.

    settings: {variable name: value} of the role's variables (response_cache_*). One message per
    problem, naming the variable; a secret's value is never part of a message.
    """
    s = settings
    errors = []
    for name in ("response_cache_redis_password", "response_cache_master_key"):
        if len(_text(s[name])) < SECRET_MIN:
            errors.append("%s: 16 or more characters (from vault) are required" % name)
    tenant_errors, tenant_keys = _tenant_errors(list(s["response_cache_tenants"] or []))
    errors.extend(tenant_errors)
    metrics_key = _text(s["response_cache_metrics_key"])
    if 0 < len(metrics_key) < SECRET_MIN:
        errors.append("response_cache_metrics_key: empty or 16 or more characters")
    if metrics_key and metrics_key in tenant_keys:
        errors.append("response_cache_metrics_key: must not be a tenant key")
    if len(s["response_cache_models"] or []) == 0:
        errors.append("response_cache_models: list the served model names (not empty)")
    if len(s["response_cache_redis_bind"] or []) == 0:
        errors.append("response_cache_redis_bind: at least one address")
    maxmemory = _text(s["response_cache_redis_maxmemory"])
    if not MAXMEMORY_RE.fullmatch(maxmemory):
        errors.append("response_cache_redis_maxmemory: a Redis size such as 256mb or 2gb, got '%s'" % maxmemory)
    header = _text(s["response_cache_bypass_header"])
    if not HEADER_RE.fullmatch(header):
        errors.append("response_cache_bypass_header: a header name (letters, digits, -), got '%s'" % header)
    for port in (s["response_cache_redis_port"], s["response_cache_port"], s["response_cache_gateway_port"]):
        if not 1 <= _int(port) <= 65535:
            errors.append("response_cache_redis_port/response_cache_port/response_cache_gateway_port: a port 1-65535, got %s" % port)
    gateway = _text(s["response_cache_gateway_address"])
    if not LOOPBACK_RE.fullmatch(gateway):
        errors.append("response_cache_gateway_address: a loopback address (127.x.x.x or ::1; LiteLLM's admin routes must not be "
                      "reachable from the network, clients use the front), got '%s'" % gateway)
    if s["response_cache_gateway_port"] == s["response_cache_port"]:
        errors.append("response_cache_gateway_port: must differ from response_cache_port (the front), got %s"
                      % s["response_cache_gateway_port"])
    listen = _text(s["response_cache_listen_address"])
    if not LISTEN_RE.fullmatch(listen):
        errors.append("response_cache_listen_address: empty (every address), an IPv4 address or a bracketed IPv6 address, got '%s'"
                      % listen)
    body = _text(s["response_cache_client_max_body_size"])
    if not NGINX_SIZE_RE.fullmatch(body):
        errors.append("response_cache_client_max_body_size: an nginx size such as 16m or 512k, got '%s'" % body)
    if _int(s["response_cache_rate_limit"]) < 0 or _int(s["response_cache_rate_limit_burst"]) < 0:
        errors.append("response_cache_rate_limit/response_cache_rate_limit_burst: 0 or more")
    if _bool(s["response_cache_tls"]) and (len(_text(s["response_cache_tls_cert"])) == 0 or len(_text(s["response_cache_tls_key"])) == 0):
        errors.append("response_cache_tls_cert/response_cache_tls_key: both paths are required with response_cache_tls")
    if _int(s["response_cache_ttl"]) < 1:
        errors.append("response_cache_ttl: seconds, at least 1, got %s" % s["response_cache_ttl"])
    return errors


class FilterModule(object):
    """The response cache's checks."""

    def filters(self):
        return {"response_cache_errors": response_cache_errors}
