"""The edge: keys on every /v1 path with JSON 401s, 413 over the body limit, 429 over the
rate (per key, per address, off), no version banner on error pages, TLS 1.2/1.3 only, the replicas'
/metrics and /health unreachable, and the local-only stub_status page. Real requests, real nginx."""
import collections
import concurrent.futures
import http.client
import json
import os
import socket
import ssl
import threading
import time
import warnings

import pytest
import yaml
from conftest import CONF, EDGE_KEY, LB, measure, recap_changed

COMPLETION = {"model": "standin", "prompt": "Hello", "max_tokens": 4}
KEY2 = "lab-edge-key-000000000002"
RATE, BURST = 20, 80  # molecule.yml: nginx_lb_rate_limit_rate / _burst


def _json_error(headers, body, code, kind):
    assert headers.get("Content-Type") == "application/json", headers
    assert headers.get("Server") == "nginx", headers  # no version, on error pages too
    assert b"nginx/" not in body and b"<html" not in body, body
    err = json.loads(body)["error"]
    assert err["code"] == code and err["type"] == kind, err


def _burst(client, n, key, threads=32):
    """n POSTs as fast as `threads` kept-alive connections go (a TLS handshake per request would
    spread the burst over seconds, and the rate would refill meanwhile); `key` is a key or a
    function of the request's number. Returns ({key: Counter of statuses}, one 429 answer, seconds)."""
    key_of = key if callable(key) else (lambda _unused: key)
    local = threading.local()
    opened = []

    def one(i):
        headers = {"Content-Type": "application/json", "Authorization": "Bearer " + key_of(i)}
        try:
            if getattr(local, "conn", None) is None:
                local.conn = client.conn()
                opened.append(local.conn)
            local.conn.request("POST", "/v1/completions", body=json.dumps(COMPLETION), headers=headers)
            resp = local.conn.getresponse()
            body = resp.read()
            return key_of(i), resp.status, dict(resp.getheaders()), body
        except (OSError, http.client.HTTPException) as exc:
            local.conn = None
            return key_of(i), "error: %s" % exc, {}, b""

    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        t0 = time.monotonic()
        results = list(pool.map(one, range(n)))
        elapsed = time.monotonic() - t0
    for conn in opened:
        conn.close()
    limited = next((r[1:] for r in results if r[1] == 429), None)
    counts = collections.defaultdict(collections.Counter)
    for k, status, _unused, _unused in results:
        counts[k][status] += 1
    return counts, limited, elapsed


def _post_body(address, size, key=EDGE_KEY):
    """POST a JSON completion of `size` bytes; returns (status, headers, body)."""
    body = json.dumps(dict(COMPLETION, prompt="x" * size)).encode()
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    conn = http.client.HTTPSConnection(address, 443, timeout=30, context=ctx)
    conn.putrequest("POST", "/v1/completions")
    for name, value in (("Content-Type", "application/json"), ("Authorization", "Bearer " + key),
                        ("Content-Length", str(len(body)))):
        conn.putheader(name, value)
    conn.endheaders()
    try:
        conn.send(body)
    except (BrokenPipeError, ConnectionResetError):
        pass  # nginx may answer 413 before it has read the whole body
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, dict(resp.getheaders()), data


def _handshake(address, port, version):
    """The TLS version agreed when the client offers only `version`, or 'refused: ...'."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if version < ssl.TLSVersion.TLSv1_2:
        ctx.set_ciphers("DEFAULT:@SECLEVEL=0")  # let this client really offer TLS 1.1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # TLS 1.0/1.1 on purpose
        ctx.minimum_version = ctx.maximum_version = version
    with socket.create_connection((address, port), timeout=10) as sock:
        try:
            with ctx.wrap_socket(sock) as tls:
                return tls.version()
        except (ssl.SSLError, ConnectionResetError) as exc:
            return "refused: %s" % exc


@pytest.mark.parametrize("path,method", [
    ("/v1/models", "GET"), ("/v1/completions", "POST"), ("/v1/chat/completions", "POST"),
    ("/v1/embeddings", "POST"), ("/v1/files", "GET"), ("/v1/models/standin", "DELETE"), ("/v1/", "GET")])
def test_every_v1_path_needs_a_key_answered_401_json(lb, lb_tls, path, method):
    body = COMPLETION if method == "POST" else None
    for client in (lb, lb_tls):
        for key in (None, "wrong-key-but-long-enough", EDGE_KEY + "x"):
            status, headers, data = client.request(method, path, body, key=key)
            assert status == 401, (path, key, status, data)
            _json_error(headers, data, 401, "authentication_error")
            assert headers.get("WWW-Authenticate") == "Bearer"
    # A valid key is let through (the stand-in answers, or says 404 itself for paths it lacks).
    status, headers, _unused = lb.request(method, path, body)
    assert status != 401 and headers.get("X-Upstream"), (path, status)


def test_body_over_the_limit_is_answered_413_json(lb):
    # molecule.yml: nginx_lb_client_max_body_size 1m (the default, 16m, would let 2 MiB through).
    status, _unused, data = _post_body(lb.address, 512 * 1024)
    assert status == 200, data[:200]
    status, headers, data = _post_body(lb.address, 2 * 1024 * 1024)
    assert status == 413, (status, data[:200])
    _json_error(headers, data, 413, "invalid_request_error")


def test_a_burst_over_the_rate_is_answered_429_per_key(lb):
    # 300 requests at once: 270 with one key, 30 (every tenth) with the other, interleaved.
    n = 300
    counts, limited, elapsed = _burst(lb, n, lambda i: EDGE_KEY if i % 10 == 0 else KEY2)
    ok, refused = counts[KEY2][200], counts[KEY2][429]
    measure("burst_per_key", sent=n - 30, ok=ok, status_429=refused, other=n - 30 - ok - refused,
            seconds=round(elapsed, 2), rate=RATE, burst=BURST, other_key=dict(counts[EDGE_KEY]))
    assert set(counts[KEY2]) <= {200, 429} and refused > 0, counts
    # nodelay: the burst is served at once, then the rate; never more than that.
    assert BURST <= ok <= BURST + 1 + RATE * elapsed + 5, (counts, elapsed)
    _json_error(limited[1], limited[2], 429, "rate_limit_error")
    # One key's bucket is its own: the other key's 30 requests, sent in the same burst, all pass.
    assert counts[EDGE_KEY] == {200: 30}, counts


def test_rate_limit_per_address_and_off_switch(lb, lb_host, client_host, run_converge):
    curl = ("curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer " + EDGE_KEY + "' "
            "-H 'Content-Type: application/json' -d '" + json.dumps(COMPLETION) + "' -k https://" + LB + "/v1/completions")
    try:
        rc, out = run_converge({"nginx_lb_rate_limit_by": "address"})
        assert rc == 0, out[-3000:]
        assert "limit_req_zone $binary_remote_addr zone=llmops_vllm_rl_address:" in lb_host.file(CONF).content_string
        counts, _unused, elapsed = _burst(lb, 300, EDGE_KEY)
        counts = counts[EDGE_KEY]
        measure("burst_per_address", sent=300, ok=counts[200], status_429=counts[429], seconds=round(elapsed, 2))
        assert counts[429] > 0 and set(counts) <= {200, 429}, counts
        assert BURST <= counts[200] <= BURST + 1 + RATE * elapsed + 5, (counts, elapsed)
        # This machine's address is over its rate; another host, with the same key, is not. The
        # second burst outruns a refilled bucket (BURST + RATE * seconds) unless it takes over 6 s.
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            other_host = pool.submit(client_host.check_output, curl)
            again, _unused, _unused = _burst(lb, 200, EDGE_KEY)
        assert other_host.result() == "200" and again[EDGE_KEY][429] > 0, again

        rc, out = run_converge({"nginx_lb_rate_limit": False})
        assert rc == 0, out[-3000:]
        # Only the request rate is off: the failed-key throttle (its own zone) stays.
        conf = lb_host.file(CONF).content_string
        assert "_rl_" not in conf and "zone=llmops_vllm_auth_fail burst=" in conf, conf
        counts, _unused, elapsed = _burst(lb, 300, EDGE_KEY)
        counts = counts[EDGE_KEY]
        measure("burst_rate_limit_off", sent=300, ok=counts[200], status_429=counts[429], seconds=round(elapsed, 2))
        assert counts == {200: 300}, counts
    finally:
        rc, out = run_converge({})
        assert rc == 0, out[-3000:]


@pytest.mark.parametrize("extra,named", [
    ({"nginx_lb_rate_limit_rate": "fast"}, "nginx_lb_rate_limit_rate"),      # not an int: argument spec
    ({"nginx_lb_rate_limit_rate": 0}, "nginx_lb_rate_limit_rate"),           # out of range: preflight
    ({"nginx_lb_rate_limit_unit": "hour"}, "nginx_lb_rate_limit_unit"),      # not a choice: argument spec
    ({"nginx_lb_rate_limit_burst": "lots"}, "nginx_lb_rate_limit_burst"),
])
def test_bad_rate_values_are_refused_before_any_change(lb_host, master_pid, run_converge, extra, named):
    before, pid = lb_host.file(CONF).sha256sum, master_pid()
    rc, out = run_converge(extra)
    assert rc != 0 and named in out, out[-3000:]
    assert recap_changed(out) == 0, out[-1500:]
    assert lb_host.file(CONF).sha256sum == before and master_pid() == pid


def test_tls_only_1_2_and_1_3(lb_tls):
    assert _handshake(lb_tls.address, 443, ssl.TLSVersion.TLSv1_3) == "TLSv1.3"
    assert _handshake(lb_tls.address, 443, ssl.TLSVersion.TLSv1_2) == "TLSv1.2"
    for old in (ssl.TLSVersion.TLSv1_1, ssl.TLSVersion.TLSv1):
        result = _handshake(lb_tls.address, 443, old)
        assert result.startswith("refused"), (old, result)


@pytest.mark.parametrize("path", [
    "/metrics", "/health", "/metrics?format=prometheus", "/health/", "//metrics", "/v1/../metrics",
    "/v1/%2e%2e/metrics", "/v1/..%2fhealth", "/./metrics", "/version", "/ping"])
def test_replica_metrics_and_health_are_not_reachable_at_the_edge(lb, lb_tls, path):
    for client in (lb, lb_tls):
        status, headers, data = client.request("GET", path)  # with a valid key: still refused
        assert status in (403, 404), (path, status)
        assert b"vllm:" not in data and headers.get("Server") == "nginx", (path, data[:200])


def test_stub_status_is_local_only_and_not_logged(lb, lb_host, client_host):
    project = os.environ.get("MOLECULE_PROJECT_DIRECTORY", os.getcwd())
    with open(os.path.join(project, "roles/monitoring/defaults/main.yml"), encoding="utf-8") as fh:
        url = yaml.safe_load(fh)["monitoring_nginx_stub_status_url"]  # what the nginx exporter scrapes
    assert url == "http://127.0.0.1:8081/nginx_status"
    log = "/var/log/nginx/access.log"
    lines = int(lb_host.check_output(f"wc -l < {log}"))
    for _unused in range(3):
        page = lb_host.check_output(f"curl -sf {url}")
        assert page.startswith("Active connections:") and "server accepts handled requests" in page, page
    assert int(lb_host.check_output(f"wc -l < {log}")) == lines, "stub_status scrapes reach the access log"
    assert lb.request("POST", "/v1/completions", COMPLETION)[0] == 200
    assert wait_for_log_growth(lb_host, log, lines), "the access log is not written at all: the check above proves nothing"

    # From another host: the port is closed (loopback only); the endpoint itself answers that host.
    res = client_host.run(f"curl -sS --max-time 5 -o /dev/null -w '%{{http_code}}' http://{LB}:8081/nginx_status")
    assert res.rc == 7 and res.stdout == "000", (res.rc, res.stdout, res.stderr)  # 7: could not connect
    assert client_host.check_output(f"curl -sk -o /dev/null -w '%{{http_code}}' https://{LB}/lb-health") == "200"
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((lb.address, 8081), timeout=5)
    status, _unused, data = lb.request("GET", "/nginx_status")
    assert status == 404 and b"Active connections" not in data


def wait_for_log_growth(host, log, lines, timeout=5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if int(host.check_output(f"wc -l < {log}")) > lines:
            return True
        time.sleep(0.2)
    return False


def test_a_long_key_is_served(lb, lb_host, run_converge):
    # 200 characters: nginx's default map hash bucket (64 bytes) holds keys of 39 at most, and a
    # longer one failed `nginx -t` ("could not build map_hash"). Keys are regular expressions now
    # (compared case-sensitively), which no hash bucket limits.
    long_key = "sk-" + "A1b2c3d4e5" * 19 + "f6g7h8i"
    keys_conf = "/etc/nginx/llmops/llmops-vllm-keys.conf"
    try:
        rc, out = run_converge({"nginx_lb_api_keys": [EDGE_KEY, KEY2, long_key]})
        assert rc == 0, out[-3000:]
        assert long_key not in out, "a key is in the Ansible output"
        assert "map_hash_bucket_size" not in lb_host.file(keys_conf).content_string
        assert lb.request("POST", "/v1/completions", COMPLETION, key=long_key)[0] == 200
        assert lb.request("POST", "/v1/completions", COMPLETION, key=long_key[:-1])[0] == 401
        assert lb.request("POST", "/v1/completions", COMPLETION)[0] == 200  # the other keys still work
    finally:
        rc, out = run_converge({})
        assert rc == 0, out[-3000:]
    assert lb.request("POST", "/v1/completions", COMPLETION, key=long_key)[0] == 401
