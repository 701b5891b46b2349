# -*- coding: utf-8 -*-
# Copyright: llmops.vllm_cluster contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Cache policy for the LiteLLM proxy (llmops.vllm_cluster, roles/response_cache).

LiteLLM does the caching itself (its Redis cache: lookup, store, TTL). This module, loaded by
LiteLLM from its config directory, decides what may be cached and under which key, where
LiteLLM's defaults are not safe for a shared endpoint:

- auth(request, api_key): LiteLLM's `custom_auth` hook, which LiteLLM calls for every
  authenticated route (its admin routes too: /cache/*, /key/*, /model/*, /config/*, /spend/*, ...)
  and whose answer it trusts without checks of its own. Tenants are the keys in tenants.json
  (sha256 of the bearer token -> tenant name); anything else is refused (401). A tenant may call
  the OpenAI routes of TENANT_ROUTES only, the tenant named `metrics:prometheus` /metrics only;
  any other route is refused (403): an allowlist, so a route a new LiteLLM adds stays closed.
- CachePolicy.async_pre_call_hook: runs before every request. It drops any cache control the
  client sent in the body (`cache`, `ttl`: a client must not pick another tenant's namespace or
  keep entries forever) and then either
    * bypasses the cache (no-cache + no-store) for a request that is not deterministic (by the
      rules in policy.json), a streaming request (never cached: see below), a request with the
      bypass header (or `Cache-Control: no-cache`/`no-store`), or an endpoint that is not a
      (chat) completion; or
    * sets the namespace to `<prefix>:<tenant>:<sha256 of the whole request body>` and the TTL.
  LiteLLM's own key hashes only the parameters it knows (model, messages/prompt, temperature,
  seed, max_tokens, ...); the body hash in the namespace makes the key cover every field the
  client sent (vLLM's extra sampling fields too), and the tenant part keeps tenants apart
  (LiteLLM's exact-match Redis cache does not key on the API key: only its semantic caches do).
- Counters (prometheus_client, served on the proxy's /metrics next to LiteLLM's own):
  llmops_response_cache_requests_total{decision} and llmops_response_cache_lookups_total{result}.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os

from litellm.integrations.custom_logger import CustomLogger
from litellm.proxy._types import ProxyErrorTypes, ProxyException, UserAPIKeyAuth
from prometheus_client import REGISTRY, Counter

LOG = logging.getLogger("llmops.response_cache")
HERE = os.path.dirname(os.path.abspath(__file__))
# Fields LiteLLM's proxy adds to the request before the hook runs: not part of the client's request.
PROXY_FIELDS = frozenset((
    "metadata", "litellm_metadata", "proxy_server_request", "secret_fields", "litellm_call_id",
    "litellm_logging_obj", "user_api_key_dict", "cache", "ttl", "litellm_parent_otel_span",
))
CACHEABLE_CALLS = frozenset(("completion", "acompletion", "text_completion", "atext_completion"))
# The only routes a tenant key may call (exact paths, as the proxy routes them).
TENANT_ROUTES = frozenset(("/v1/completions", "/v1/chat/completions", "/v1/models"))
METRICS_ROUTE = "/metrics"


def _load(name, default):
    path = os.environ.get("LLMOPS_CACHE_" + name.split(".")[0].upper(), os.path.join(HERE, name))
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        LOG.error("response_cache: %s is missing; using %r", path, default)
        return default


POLICY = _load("policy.json", {})
TENANTS = _load("tenants.json", {})
NAMESPACE = POLICY.get("namespace", "llmops")
TTL = int(POLICY.get("ttl", 3600))
RULES = frozenset(POLICY.get("deterministic_when", ["temperature_zero", "seed"]))
# The key Prometheus scrapes /metrics with (tenants.json names it so); it cannot call the API.
METRICS_TENANT = "metrics:prometheus"
BYPASS_HEADER = POLICY.get("bypass_header", "X-LLMOps-Cache-Bypass").lower()


def _counter(name, documentation, labels):
    # LiteLLM loads this file once per setting that names it (callbacks, custom_auth): the second
    # load finds the counters of the first in the registry.
    existing = REGISTRY._names_to_collectors.get(name + "_total")  # pylint: disable=protected-access
    return existing if existing is not None else Counter(name, documentation, labels)


DECISIONS = _counter(
    "llmops_response_cache_requests",
    "Requests seen by the response cache policy, by decision (cacheable or the reason it was bypassed)",
    ["decision"])
LOOKUPS = _counter(
    "llmops_response_cache_lookups",
    "Cacheable requests by outcome: hit (answered from Redis) or miss (answered by the engines)",
    ["result"])
for _decision in ("cacheable", "not_deterministic", "stream", "header", "endpoint"):
    DECISIONS.labels(_decision)
for _result in ("hit", "miss"):
    LOOKUPS.labels(_result)


def _tenant_of(token):
    return TENANTS.get(hashlib.sha256(token.encode()).hexdigest())


def _refuse(message, code=401):
    return ProxyException(message=message, type=ProxyErrorTypes.auth_error, param="Authorization", code=code)


def request_route(scope):
    """The path the proxy routes a request on: the ASGI scope's path less its root path (as
    Starlette's router and LiteLLM's own checks see it). Not request.url.path: Starlette rebuilds
    that from the Host header, and a malformed Host turns it into "/"."""
    path = str((scope or {}).get("path") or "")
    root = str((scope or {}).get("root_path") or "").rstrip("/")
    if root and (path == root or path.startswith(root + "/")):
        path = path[len(root):] or "/"
    return path


def route_allowed(tenant, route):
    """True when TENANT may call ROUTE: the metrics key /metrics only, a tenant TENANT_ROUTES only
    (not /metrics: it names every tenant), nobody else anything."""
    if tenant is None:
        return False
    if tenant == METRICS_TENANT:
        return route == METRICS_ROUTE or route.startswith(METRICS_ROUTE + "/")
    return route in TENANT_ROUTES


async def auth(request, api_key):
    """LiteLLM custom_auth: 401 without a known key, 403 for a known key outside its routes."""
    token = (api_key or "").strip()
    if token.lower().startswith("bearer "):
        token = token[7:].strip()
    tenant = _tenant_of(token) if token else None
    if tenant is None:
        raise _refuse("invalid or missing API key (Authorization: Bearer KEY)")
    route = request_route(getattr(request, "scope", None))
    if not route_allowed(tenant, route):
        LOG.warning("response_cache: refused %s for tenant=%s (not an allowed route)", route[:200], tenant)
        raise _refuse("this key is not allowed on this route", code=403)
    return UserAPIKeyAuth(api_key=hashlib.sha256(token.encode()).hexdigest(), user_id=tenant, key_alias=tenant)


def _is_deterministic(body):
    temperature = body.get("temperature")
    if "temperature_zero" in RULES and temperature is not None:
        try:
            if float(temperature) == 0.0:
                return True
        except (TypeError, ValueError):
            pass
    if "seed" in RULES and body.get("seed") is not None:
        return True
    return False


def _header_bypass(headers):
    lowered = {str(k).lower(): str(v) for k, v in (headers or {}).items()}
    value = lowered.get(BYPASS_HEADER, "").strip().lower()
    if value and value not in ("0", "false", "no"):
        return True
    cache_control = lowered.get("cache-control", "").lower()
    return "no-cache" in cache_control or "no-store" in cache_control


def _client_body(data):
    psr = data.get("proxy_server_request") or {}
    body = psr.get("body")
    if isinstance(body, dict) and body:
        return {k: v for k, v in body.items() if k not in PROXY_FIELDS}
    return {k: v for k, v in data.items() if k not in PROXY_FIELDS and not k.startswith("user_api_key")}


def decide(call_type, data, headers):
    """Returns (decision, body): decision is 'cacheable' or the reason for a bypass."""
    body = _client_body(data)
    if call_type not in CACHEABLE_CALLS:
        return "endpoint", body
    if _header_bypass(headers):
        return "header", body
    if body.get("stream"):
        # LiteLLM 1.108.7 replays a cached /v1/completions stream as chat.completion.chunk events
        # (measured; docs/roles/response_cache.md): streams are answered by the engines, uncached.
        return "stream", body
    if not _is_deterministic(body):
        return "not_deterministic", body
    return "cacheable", body


class CachePolicy(CustomLogger):
    """LiteLLM callback: cache decisions before the call, hit/miss counts after it."""

    async def async_pre_call_hook(self, user_api_key_dict, cache, data, call_type):
        # Cache controls come from this policy only, never from the client's body.
        data.pop("cache", None)
        data.pop("ttl", None)
        headers = (data.get("proxy_server_request") or {}).get("headers") or {}
        decision, body = decide(call_type, data, headers)
        DECISIONS.labels(decision).inc()
        tenant = user_api_key_dict.user_id or user_api_key_dict.api_key or "anonymous"
        metadata = data.setdefault("metadata", {})
        if decision != "cacheable":
            data["cache"] = {"no-cache": True, "no-store": True}
            metadata["llmops_cache"] = "bypass"
            LOG.info("response_cache: bypass (%s) tenant=%s model=%s", decision, tenant, body.get("model"))
            return data
        digest = hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"),
                                           default=str).encode()).hexdigest()
        tenant_id = hashlib.sha256(tenant.encode()).hexdigest()[:16]
        data["cache"] = {"namespace": "%s:%s:%s" % (NAMESPACE, tenant_id, digest), "ttl": TTL}
        metadata["llmops_cache"] = "lookup"
        return data

    def _count(self, kwargs):
        params = kwargs.get("litellm_params") or {}
        metadata = params.get("metadata") or kwargs.get("metadata") or {}
        if metadata.get("llmops_cache") != "lookup":
            return
        hit = bool(kwargs.get("cache_hit"))
        LOOKUPS.labels("hit" if hit else "miss").inc()
        LOG.info("response_cache: %s model=%s tenant=%s", "hit" if hit else "miss",
                 kwargs.get("model"), metadata.get("user_api_key_user_id"))

    async def async_log_success_event(self, kwargs, response_obj, start_time, end_time):
        self._count(kwargs)


handler = CachePolicy()
