"""Behaviour of nginx_lb in front of two stand-in heads (real nginx, real HTTP)."""
import collections
import concurrent.futures
import json

COMPLETION = {"model": "standin", "prompt": "Hello", "max_tokens": 4}


def test_balancer_health_and_no_version_banner(lb, lb_tls):
    for client in (lb, lb_tls):
        status, headers, body = client.request("GET", "/lb-health", key=None)
        assert status == 200 and body == b"ok\n"
        assert headers.get("Server") == "nginx", headers  # server_tokens off: no version
    status, _unused, body = lb.request("GET", "/nope", key=None)
    assert status == 404 and b"nginx/" not in body


def test_replica_internals_are_not_exposed(lb):
    # /health and /metrics answer on the replicas themselves, but not through the edge.
    for path in ("/health", "/metrics", "/version", "/ping", "/", "/docs"):
        status, _unused, _unused = lb.request("GET", path)
        assert status == 404, path


def test_edge_key_is_required_and_replaced_by_the_backend_key(lb):
    assert lb.request("POST", "/v1/completions", COMPLETION, key=None)[0] == 401
    assert lb.request("POST", "/v1/completions", COMPLETION, key="wrong-key-but-long-enough")[0] == 401
    # The stand-in answers 401 unless it gets the backend key: 200 proves nginx replaced the header.
    for key in ("lab-edge-key-000000000001", "lab-edge-key-000000000002"):
        status, _unused, body = lb.request("POST", "/v1/completions", COMPLETION, key=key)
        assert status == 200, body


def test_tls_serves_the_self_signed_certificate(lab_host, lb_tls):
    status, _unused, body = lb_tls.request("GET", "/v1/models")
    assert status == 200 and json.loads(body)["data"][0]["id"] == "standin"
    lb1 = lab_host("nginx-lb-lb1")
    text = lb1.check_output("openssl x509 -in /etc/nginx/llmops/tls/vllm-lb.crt -noout -subject -ext subjectAltName")
    assert "llm.lab.invalid" in text, text
    key = lb1.file("/etc/nginx/llmops/tls/vllm-lb.key")
    assert key.mode == 0o600 and key.user == "root"


def test_requests_spread_evenly_and_name_their_replica(lb, backend_ips):
    def one(_unused):
        status, headers, _unused = lb.request("POST", "/v1/completions", COMPLETION)
        return status, headers.get("X-Upstream", "")

    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        results = list(pool.map(one, range(60)))
    assert all(s == 200 for s, _unused in results), results
    counts = collections.Counter(up.split(":")[0] for _unused, up in results)
    assert set(counts) == set(backend_ips), counts
    assert max(counts.values()) - min(counts.values()) <= 12, counts


def test_stream_reaches_the_client_before_it_ends(lb):
    status, headers, first, end, events = lb.stream("/v1/completions", COMPLETION)
    assert status == 200 and events[-1] == b"[DONE]" and len(events) == 6
    # The stand-in pauses 0.4 s between 5 chunks: a buffering proxy would deliver everything at ~2 s.
    assert first < 0.5 * end, (first, end)
    assert headers.get("X-Upstream")


def test_config_has_keepalive_below_vllm_idle_and_only_connect_retries(lab_host):
    host = lab_host("nginx-lb-lb1")
    conf = host.check_output("nginx -T 2>/dev/null")
    assert "keepalive_timeout 4s;" in conf and "least_conn;" in conf
    assert "proxy_next_upstream error timeout;" in conf and "non_idempotent" not in conf
    keys = host.file("/etc/nginx/llmops/llmops-vllm-keys.conf")
    assert keys.mode == 0o600 and keys.user == "root"
    assert "lab-edge-key" not in host.file("/etc/nginx/conf.d/llmops-vllm.conf").content_string
    assert host.check_output("dpkg-query -W -f '${Status}' nginx").startswith("hold ")


def test_a_stopped_replica_is_skipped(lb, lab_host, backend_ips):
    head2 = lab_host("nginx-lb-head2")
    head2.check_output("systemctl stop standin-backend")
    try:
        ups = collections.Counter()
        for _unused in range(20):
            status, headers, _unused = lb.request("POST", "/v1/completions", COMPLETION)
            assert status == 200
            ups[headers["X-Upstream"].split(", ")[-1].split(":")[0]] += 1
        assert set(ups) == {k for k, v in backend_ips.items() if v == "nginx-lb-head1"}, ups
    finally:
        head2.check_output("systemctl start standin-backend")


def test_a_rejected_config_leaves_nginx_serving(lab_host, lb, run_converge):
    lb1 = lab_host("nginx-lb-lb1")
    before = lb1.file("/etc/nginx/conf.d/llmops-vllm.conf").sha256sum
    # Every value passes its syntax class and the preflight; only nginx itself sees the duplicate.
    rc, out = run_converge({"nginx_lb_allowed_paths": ["/v1/", "/v1/"]})
    assert rc != 0 and "nginx -t rejected" in out and "duplicate location" in out, out[-3000:]
    assert lb1.file("/etc/nginx/conf.d/llmops-vllm.conf").sha256sum == before
    assert lb.request("POST", "/v1/completions", COMPLETION)[0] == 200


def test_a_change_is_applied_by_reload_not_restart(lab_host, lb, run_converge):
    lb1 = lab_host("nginx-lb-lb1")
    pid = lb1.check_output("systemctl show -p MainPID --value nginx")
    try:
        rc, out = run_converge({"nginx_lb_upstream_header": "X-Replica"})
        assert rc == 0, out[-3000:]
        status, headers, _unused = lb.request("POST", "/v1/completions", COMPLETION)
        assert status == 200 and "X-Replica" in headers and "X-Upstream" not in headers, headers
        assert lb1.check_output("systemctl show -p MainPID --value nginx") == pid
    finally:
        rc, out = run_converge({})
        assert rc == 0, out[-3000:]
