"""A tenant key reaches the OpenAI routes of the cache and nothing else (LiteLLM's admin routes
stay closed), and LiteLLM itself is not reachable from another host: the network reaches the
cache only through the role's nginx front.

Two layers, each tested on its own:
  - the front (nginx on :4000) forwards only /v1/completions, /v1/chat/completions, /v1/models
    (and /metrics/) and answers 404 to every other path, tricks included;
  - LiteLLM (loopback :4001) refuses a tenant key on any other route with 403 (the policy
    module's allowlist), for a caller on the balancer itself.
"""
import json

import pytest
from conftest import (GATEWAY_PORT, HEAD, LITELLM_PORT, MODEL, TENANT_A, TENANT_B, call, call_on_host,
                      unique_prompt)

# LiteLLM 1.108.7's routes that need a key, by kind: cache, keys, models, config, spend, users and
# teams, health (it calls every model), the un-prefixed aliases and the other OpenAI routes the
# cache does not serve.
ADMIN_ROUTES = [
    ("POST", "/cache/flushall"), ("POST", "/cache/delete"), ("GET", "/cache/ping"), ("GET", "/cache/redis/info"),
    ("POST", "/key/generate"), ("GET", "/key/list"), ("GET", "/key/info"),
    ("GET", "/model/info"), ("GET", "/v1/model/info"), ("POST", "/model/new"),
    ("POST", "/config/update"), ("GET", "/config/list"), ("GET", "/get/config/callbacks"),
    ("GET", "/spend/logs"), ("GET", "/global/spend"),
    ("GET", "/user/info"), ("GET", "/team/list"),
    ("GET", "/health"),
    ("POST", "/chat/completions"), ("POST", "/completions"), ("GET", "/models"),
    ("POST", "/v1/embeddings"), ("POST", "/utils/token_counter"),
]
# Routes LiteLLM serves without a key: closed at the front only (LiteLLM is on loopback).
PUBLIC_ROUTES = [("GET", "/"), ("GET", "/ui/"), ("GET", "/openapi.json"), ("GET", "/health/liveliness"),
                 ("GET", "/health/readiness"), ("GET", "/routes"), ("GET", "/config/yaml"), ("GET", "/test"),
                 ("GET", "/.well-known/litellm-ui-config"), ("GET", "/sso/key/generate"), ("GET", "/login")]
# Paths nginx normalises (or not) before it matches a location: none may reach an admin route.
TRICKS = ["/v1/../cache/flushall", "/v1/completions/../../cache/flushall", "/v1/%2e%2e/cache/flushall",
          "/v1/models/%2E%2E/%2E%2E/cache/flushall", "//cache/flushall", "/v1//../cache/flushall",
          "/cache%2Fflushall", "/v1/models/../../key/generate",
          "/V1/../CACHE/FLUSHALL", "/metrics/../cache/flushall"]


def cached_entry_survives(gateway, engine, attack):
    """Tenant A caches an answer, ATTACK runs, A's repeat must still be a hit (engine count unchanged)."""
    prompt = unique_prompt("survives")
    first = gateway.complete(key=TENANT_A, prompt=prompt, temperature=0)
    attack()
    before = engine.requests_done()
    again = gateway.complete(key=TENANT_A, prompt=prompt, temperature=0)
    return engine.requests_done() == before and again["id"] == first["id"]


@pytest.mark.parametrize("method,path", ADMIN_ROUTES + PUBLIC_ROUTES)
def test_front_answers_404_on_every_other_route(gateway, method, path):
    status, _unused, data = call(gateway.address, GATEWAY_PORT, method, path, body={} if method == "POST" else None,
                                 headers={"Authorization": "Bearer " + TENANT_B})
    assert status == 404, (status, data[:300])
    assert b"not_found_error" in data, data[:300]


@pytest.mark.parametrize("path", TRICKS)
def test_front_path_tricks_never_reach_an_admin_route(gateway, path):
    status, _unused, data = call(gateway.address, GATEWAY_PORT, "POST", path, body={},
                                 headers={"Authorization": "Bearer " + TENANT_B})
    assert status in (400, 404), (status, data[:300])


@pytest.mark.parametrize("method,path", ADMIN_ROUTES)
def test_litellm_refuses_a_tenant_key_on_admin_routes(lb_host, method, path):
    status, out = call_on_host(lb_host, "127.0.0.1", LITELLM_PORT, method, path, key=TENANT_B,
                               body={} if method == "POST" else None)
    assert status == 403, out


def test_litellm_allows_a_tenant_the_openai_routes(lb_host, engine):
    status, out = call_on_host(lb_host, "127.0.0.1", LITELLM_PORT, "GET", "/v1/models", key=TENANT_B)
    assert status == 200 and MODEL in out, out
    status, out = call_on_host(lb_host, "127.0.0.1", LITELLM_PORT, "POST", "/v1/chat/completions", key=TENANT_B,
                               body={"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]})
    assert status == 200, out
    status, out = call_on_host(lb_host, "127.0.0.1", LITELLM_PORT, "GET", "/v1/models", key="not-a-tenant-0000000001")
    assert status == 401, out


def test_the_front_serves_the_openai_routes(gateway, engine):
    status, _unused, data = call(gateway.address, GATEWAY_PORT, "GET", "/v1/models",
                                 headers={"Authorization": "Bearer " + TENANT_A})
    assert status == 200 and MODEL in json.dumps(json.loads(data)), data[:300]
    status, _unused, data = gateway.post("/v1/chat/completions", {
        "model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]}, key=TENANT_A)
    assert status == 200, data[:300]
    # A dot segment that nginx normalises to an allowed route reaches that route, and only it.
    status, _unused, data = call(gateway.address, GATEWAY_PORT, "GET", "/cache/flushall/../../v1/models",
                                 headers={"Authorization": "Bearer " + TENANT_A})
    assert status == 200 and MODEL in data.decode(), data[:300]


def test_a_tenant_cannot_flush_another_tenants_entries(gateway, engine, lb_host):
    def flush():
        for path in ("/cache/flushall", "/cache/delete"):
            body = {} if path == "/cache/flushall" else {"keys": ["*"]}
            call(gateway.address, GATEWAY_PORT, "POST", path, body=body, headers={"Authorization": "Bearer " + TENANT_B})
            call_on_host(lb_host, "127.0.0.1", LITELLM_PORT, "POST", path, key=TENANT_B, body=body)
        for path in TRICKS:
            call(gateway.address, GATEWAY_PORT, "POST", path, body={}, headers={"Authorization": "Bearer " + TENANT_B})

    assert cached_entry_survives(gateway, engine, flush), "tenant B's flush removed tenant A's cached answer"


@pytest.mark.parametrize("port", [GATEWAY_PORT, LITELLM_PORT])
def test_litellm_does_not_answer_from_another_host(lab_host, lb_host, port):
    """From the replica head: nothing on the balancer's cache ports is LiteLLM (its liveness route
    and an admin route with a tenant key); the front answers 404, LiteLLM's own port nothing."""
    head = lab_host(HEAD)
    address = lb_host.check_output("hostname -I").split()[0]
    status, out = call_on_host(head, address, port, "GET", "/health/liveliness")
    assert status in (None, 404), out
    status, out = call_on_host(head, address, port, "POST", "/cache/flushall", key=TENANT_B, body={})
    assert status in (None, 404), out
    if port == LITELLM_PORT:
        assert status is None, out
