"""Behaviour of response_cache: LiteLLM + Redis in front of nginx_lb and a real vLLM CPU engine.
The engine's own counter (vllm:request_success_total) says whether a request reached it."""
import json
import time

from conftest import HEAD, MODEL, REDIS_PASSWORD, TENANT_A, TENANT_B, metric_value, unique_prompt
from lab_testinfra import wait_until


def test_repeated_deterministic_request_is_served_from_redis(gateway, engine, redis_cli):
    prompt = unique_prompt("cache me")
    before = engine.requests_done()
    first = gateway.complete(prompt=prompt, temperature=0)
    assert engine.requests_done() == before + 1
    second = gateway.complete(prompt=prompt, temperature=0)
    third = gateway.complete(prompt=prompt, temperature=0)
    assert engine.requests_done() == before + 1, "the repeats reached the engine"
    assert second["id"] == first["id"] == third["id"]
    assert second["choices"][0]["text"] == first["choices"][0]["text"]
    keys = redis_cli("--scan", "--pattern", "'llmops:*'").stdout.split()
    assert keys, "no entry under the llmops namespace in Redis"
    ttls = [int(redis_cli("TTL", k).stdout) for k in keys]
    assert all(0 < t <= 600 for t in ttls), ttls


def test_an_explicit_seed_makes_a_request_cacheable(gateway, engine):
    prompt = unique_prompt("seeded")
    before = engine.requests_done()
    first = gateway.complete(prompt=prompt, temperature=0.9, seed=7)
    second = gateway.complete(prompt=prompt, temperature=0.9, seed=7)
    assert engine.requests_done() == before + 1 and first["id"] == second["id"]


def test_non_deterministic_requests_are_not_cached(gateway, engine):
    prompt = unique_prompt("sample me")
    before = engine.requests_done()
    for body in ({"temperature": 0.8}, {"temperature": 0.8}, {}, {}):
        gateway.complete(prompt=prompt, **body)
    assert engine.requests_done() == before + 4


def test_tenants_never_share_an_entry(gateway, engine, redis_cli):
    prompt = unique_prompt("per tenant")
    before = engine.requests_done()
    a = gateway.complete(key=TENANT_A, prompt=prompt, temperature=0)
    b = gateway.complete(key=TENANT_B, prompt=prompt, temperature=0)
    assert engine.requests_done() == before + 2, "tenant B got tenant A's cached answer"
    assert a["id"] != b["id"]
    # Each tenant's repeat is its own hit.
    assert gateway.complete(key=TENANT_A, prompt=prompt, temperature=0)["id"] == a["id"]
    assert gateway.complete(key=TENANT_B, prompt=prompt, temperature=0)["id"] == b["id"]
    assert engine.requests_done() == before + 2
    tenants = {k.split(":")[1] for k in redis_cli("--scan", "--pattern", "'llmops:*'").stdout.split()}
    assert len(tenants) >= 2, tenants


def test_the_whole_request_is_in_the_key(gateway, engine):
    prompt = unique_prompt("whole body")
    before = engine.requests_done()
    gateway.complete(prompt=prompt, temperature=0, max_tokens=8)
    gateway.complete(prompt=prompt, temperature=0, max_tokens=7)
    # top_k is a vLLM field LiteLLM's own key does not know: the body hash tells the requests apart.
    gateway.complete(prompt=prompt, temperature=0, max_tokens=8, top_k=5)
    assert engine.requests_done() == before + 3


def test_client_cannot_choose_the_namespace(gateway, engine):
    prompt = unique_prompt("namespace")
    before = engine.requests_done()
    a = gateway.complete(key=TENANT_A, prompt=prompt, temperature=0)
    # Tenant B asks for tenant A's namespace through LiteLLM's cache controls: ignored.
    b = gateway.complete(key=TENANT_B, prompt=prompt, temperature=0, cache={"namespace": "llmops"})
    assert a["id"] != b["id"] and engine.requests_done() == before + 2


def test_the_bypass_header_reaches_the_engine(gateway, engine):
    prompt = unique_prompt("bypass")
    gateway.complete(prompt=prompt, temperature=0)
    before = engine.requests_done()
    gateway.complete(prompt=prompt, temperature=0, headers={"X-LLMOps-Cache-Bypass": "1"})
    gateway.complete(prompt=prompt, temperature=0, headers={"Cache-Control": "no-cache"})
    assert engine.requests_done() == before + 2
    gateway.complete(prompt=prompt, temperature=0)
    assert engine.requests_done() == before + 2, "the entry is still there after a bypass"


def test_streams_are_answered_by_the_engine_and_not_cached(gateway, engine):
    prompt = unique_prompt("stream")
    before = engine.requests_done()
    for _unused in range(2):
        status, events = gateway.stream(prompt=prompt, temperature=0)
        assert status == 200 and events[-1] == "[DONE]", events
        chunks = [json.loads(e) for e in events[:-1]]
        assert all(c["object"] == "text_completion" for c in chunks), chunks
    assert engine.requests_done() == before + 2


def test_hits_and_misses_are_on_metrics_for_prometheus_only(gateway, engine):
    status, text = gateway.metrics()
    assert status == 200
    assert metric_value(text, "llmops_response_cache_lookups_total", result="hit") >= 1
    assert metric_value(text, "llmops_response_cache_lookups_total", result="miss") >= 1
    assert metric_value(text, "llmops_response_cache_requests_total", decision="not_deterministic") >= 1
    assert metric_value(text, "llmops_response_cache_requests_total", decision="stream") >= 1
    assert metric_value(text, "litellm_cache_hits_metric_total") >= 1
    # Tenants cannot read /metrics (it names every tenant: LiteLLM's metrics middleware answers
    # 401 to any refusal); the metrics key cannot call the API (a known key off its route: 403).
    assert gateway.metrics(key=TENANT_A)[0] == 401
    assert gateway.metrics(key=None)[0] == 401
    status, _unused, _unused = gateway.post("/v1/completions", {"model": MODEL, "prompt": "x"}, key="lab-cache-metrics-0000001")
    assert status == 403
    status, _unused, _unused = gateway.post("/v1/completions", {"model": MODEL, "prompt": "x"}, key="not-a-tenant-key-000000")
    assert status == 401


def test_redis_down_requests_still_answered_uncached_and_logged(gateway, engine, lb_host):
    prompt = unique_prompt("redis down")
    since = lb_host.check_output("date '+%Y-%m-%d %H:%M:%S'")
    lb_host.check_output("systemctl stop redis-server")
    try:
        before = engine.requests_done()
        t0 = time.monotonic()
        for _unused in range(3):
            gateway.complete(prompt=prompt, temperature=0)
        elapsed = time.monotonic() - t0
        assert engine.requests_done() == before + 3
        assert elapsed < 30, elapsed
        log = lb_host.check_output(f"journalctl -u llmops-response-cache --since '{since}' --no-pager")
        assert "redis" in log.lower() and ("error" in log.lower() or "refused" in log.lower()), log[-3000:]
    finally:
        lb_host.check_output("systemctl start redis-server")
    # Back: once LiteLLM's circuit breaker closes (10 s in this scenario), repeats are hits again.
    wait_until(lambda: lb_host.run(f"REDISCLI_AUTH={REDIS_PASSWORD} redis-cli ping").stdout.strip() == "PONG",
               what="redis to answer PING")

    def repeat_is_a_hit():
        gateway.complete(prompt=prompt, temperature=0)
        before = engine.requests_done()
        gateway.complete(prompt=prompt, temperature=0)
        return engine.requests_done() == before

    wait_until(repeat_is_a_hit, timeout=60, interval=2, what="the repeated request to be a cache hit")


def test_redis_is_a_bounded_cache_with_a_password_on_the_internal_address(redis_cli, lb_host, lab_host):
    assert "allkeys-lru" in redis_cli("CONFIG", "GET", "maxmemory-policy").stdout
    assert str(64 * 1024 * 1024) in redis_cli("CONFIG", "GET", "maxmemory").stdout
    save = redis_cli("CONFIG", "GET", "save").stdout.split("\n")
    assert save[1].strip() == "", save
    assert "no" in redis_cli("CONFIG", "GET", "appendonly").stdout
    # Reachable from another host on the internal network, only with the password.
    head = lab_host(HEAD)
    address = lb_host.check_output("hostname -I").split()[0]
    head.check_output("command -v redis-cli || (apt-get install -y -qq redis-tools >/dev/null 2>&1 || "
                      "(apt-get update -qq && apt-get install -y -qq redis-tools >/dev/null))")
    assert "NOAUTH" in head.run(f"redis-cli -h {address} ping").stdout
    assert head.run(f"REDISCLI_AUTH={REDIS_PASSWORD} redis-cli -h {address} ping").stdout.strip() == "PONG"
    assert lb_host.file("/etc/llmops-response-cache/env").mode == 0o600
    assert "lab-cache-tenant" not in lb_host.file("/etc/llmops-response-cache/tenants.json").content_string


def test_uncached_requests_go_through_nginx_to_the_replicas(gateway, engine, lb_host):
    log = "/var/log/nginx/llmops-response-cache.access.log"
    before = int(lb_host.check_output(f"wc -l < {log}"))
    gateway.complete(prompt=unique_prompt("through nginx"), temperature=0.7)
    assert int(lb_host.check_output(f"wc -l < {log}")) == before + 1
    unit = lb_host.service("llmops-response-cache")
    assert unit.is_running and unit.is_enabled
    assert lb_host.user("llmops-cache").exists
