"""The response cache's policy module (roles/response_cache/files/llmops_cache.py): which routes a
key may call through LiteLLM's custom_auth hook. The module runs inside LiteLLM's proxy; LiteLLM and
prometheus_client are not part of the toolchain, so the few names the module imports from them are
given here as minimal stand-ins (an exception that carries its HTTP code, a record of the
authenticated key, counters). What is tested is the module's own code: auth(), route_allowed(),
request_route(). molecule/response_cache proves the same against the real LiteLLM.
"""
import asyncio
import hashlib
import importlib.util
import os
import sys
import types

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODULE = os.path.join(ROOT, "roles", "response_cache", "files", "llmops_cache.py")
TENANT_KEY = "unit-tenant-key-0000000001"
METRICS_KEY = "unit-metrics-key-000000001"


class ProxyException(Exception):  # stand-in: litellm.proxy._types.ProxyException
    def __init__(self, message, type, param, code=None):  # pylint: disable=redefined-builtin
        super().__init__(message)
        self.message, self.type, self.param, self.code = message, type, param, str(code)


class UserAPIKeyAuth:  # stand-in: litellm.proxy._types.UserAPIKeyAuth
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)


class _Counter:  # stand-in: prometheus_client.Counter
    def __init__(self, *args, **kwargs):
        pass

    def labels(self, *args):
        return self

    def inc(self, *args):
        pass


def _standins():
    mods = {name: types.ModuleType(name) for name in (
        "litellm", "litellm.integrations", "litellm.integrations.custom_logger", "litellm.proxy",
        "litellm.proxy._types", "prometheus_client")}
    mods["litellm.integrations.custom_logger"].CustomLogger = object
    mods["litellm.proxy._types"].ProxyException = ProxyException
    mods["litellm.proxy._types"].ProxyErrorTypes = types.SimpleNamespace(auth_error="auth_error")
    mods["litellm.proxy._types"].UserAPIKeyAuth = UserAPIKeyAuth
    mods["prometheus_client"].Counter = _Counter
    mods["prometheus_client"].REGISTRY = types.SimpleNamespace(_names_to_collectors={})
    return mods


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    tenants = tmp_path_factory.mktemp("cache") / "tenants.json"
    tenants.write_text('{"%s": "team-a", "%s": "metrics:prometheus"}' % (
        hashlib.sha256(TENANT_KEY.encode()).hexdigest(), hashlib.sha256(METRICS_KEY.encode()).hexdigest()))
    saved = {name: sys.modules.get(name) for name in _standins()}
    sys.modules.update(_standins())
    os.environ["LLMOPS_CACHE_TENANTS"] = str(tenants)
    try:
        spec = importlib.util.spec_from_file_location("llmops_cache_under_test", MODULE)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        os.environ.pop("LLMOPS_CACHE_TENANTS", None)
        for name, mod in saved.items():
            if mod is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = mod


class Request:
    """What auth() may read of a Starlette request: the ASGI scope, and url.path as Starlette
    rebuilds it from the Host header (a malformed Host makes it "/")."""

    def __init__(self, path, root_path="", url_path=None):
        self.scope = {"type": "http", "path": path, "root_path": root_path}
        self.url = types.SimpleNamespace(path=path if url_path is None else url_path)


def auth_code(policy, key, path, **kwargs):
    """The HTTP code auth() answers with: 200 when it lets the request through."""
    try:
        user = asyncio.run(policy.auth(Request(path, **kwargs), "Bearer " + key if key else ""))
    except ProxyException as exc:
        return int(exc.code)
    assert user.user_id in ("team-a", "metrics:prometheus")
    return 200


ADMIN = ["/cache/flushall", "/cache/delete", "/cache/ping", "/cache/redis/info", "/key/generate", "/key/list",
         "/key/info", "/model/new", "/model/info", "/v1/model/info", "/config/update", "/config/list",
         "/config/yaml", "/get/config/callbacks", "/spend/logs", "/global/spend", "/user/info", "/team/list",
         "/health", "/routes", "/ui/", "/sso/key/generate", "/", "/openapi.json",
         # aliases and OpenAI routes the cache does not serve
         "/chat/completions", "/completions", "/models", "/v1/embeddings", "/v1/responses", "/v1/files",
         "/openai/deployments/m/chat/completions", "/engines/m/completions", "/utils/token_counter",
         # near misses of an allowed route
         "/v1/completions/", "/V1/completions", "/v1/completions/../../cache/flushall", "/v1//completions",
         "/v1/models/tiny", "/v1/completionsx", "/metrics", "/metrics/"]


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions", "/v1/models"])
def test_a_tenant_calls_the_openai_routes(policy, path):
    assert auth_code(policy, TENANT_KEY, path) == 200


@pytest.mark.parametrize("path", ADMIN)
def test_a_tenant_is_refused_every_other_route_with_403(policy, path):
    assert auth_code(policy, TENANT_KEY, path) == 403


@pytest.mark.parametrize("path", ["/metrics", "/metrics/"])
def test_the_metrics_key_reads_metrics_only(policy, path):
    assert auth_code(policy, METRICS_KEY, path) == 200


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/models", "/cache/flushall", "/metricsx", "/"])
def test_the_metrics_key_is_refused_elsewhere(policy, path):
    assert auth_code(policy, METRICS_KEY, path) == 403


@pytest.mark.parametrize("key", ["", "not-a-key-00000000000000", TENANT_KEY.upper(), TENANT_KEY[:-1]])
def test_unknown_keys_get_401_on_any_route(policy, key):
    for path in ("/v1/completions", "/cache/flushall", "/metrics"):
        assert auth_code(policy, key, path) == 401, (key, path)


def test_the_route_is_the_one_the_proxy_routes_on_not_the_rebuilt_url(policy):
    # A malformed Host header turns Starlette's url.path into "/": the route must still count.
    assert auth_code(policy, TENANT_KEY, "/cache/flushall", url_path="/v1/completions") == 403
    assert auth_code(policy, TENANT_KEY, "/metrics/", url_path="/") == 403


@pytest.mark.parametrize("scope,route", [
    ({"path": "/v1/models"}, "/v1/models"),
    ({"path": "/api/v1/models", "root_path": "/api"}, "/v1/models"),
    ({"path": "/api/", "root_path": "/api/"}, "/"),
    ({"path": "/apiv1/models", "root_path": "/api"}, "/apiv1/models"),
    ({}, ""),
    (None, ""),
])
def test_request_route(policy, scope, route):
    assert policy.request_route(scope) == route


def test_route_allowed_nobody_without_a_tenant(policy):
    assert not any(policy.route_allowed(None, r) for r in ("/v1/completions", "/metrics", "/"))
