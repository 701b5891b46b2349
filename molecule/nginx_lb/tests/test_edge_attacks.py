"""Attacks on the edge with a valid tenant key, or none: path tricks that would reach a replica's
/metrics (or any path outside /v1/), the API in clear next to TLS, keys that differ only in case,
key guessing, one key holding every stream, and keys that must be refused before nginx sees them
(listed twice, weak, the engines' key handed to keyless clients). Real requests to the lab
balancer; the stand-in heads log every request line they receive, so "never reached a replica" is
checked on the replicas themselves, not inferred from the answer."""
import collections
import concurrent.futures
import http.client
import ssl
import time

import pytest
from conftest import CONF, EDGE_KEY, LB, recap_changed

COMPLETION = {"model": "standin", "prompt": "Hello", "max_tokens": 4}
KEY2 = "lab-edge-key-000000000002"
HEADS = ("nginx-lb-head1", "nginx-lb-head2")
REQUEST_LOG = "/var/log/standin-requests.log"  # files/standin_backend.py
RATE, BURST = 20, 80  # molecule.yml: nginx_lb_rate_limit_rate / _burst
CONN_LIMIT = 40  # molecule.yml: nginx_lb_conn_limit
AUTH_FAIL_RATE, AUTH_FAIL_BURST = 600 / 60.0, 100  # molecule.yml: nginx_lb_auth_fail_rate (a minute) / _burst

# The replica paths an attacker wants (no key needed on vLLM for any of them but /v1).
TARGETS = ["metrics", "health", "tokenize", "invocations"]
# Ways to say "go up one segment" or "this segment" that some parser resolves and another does not.
UP = ["..", "%2e%2e", "%2E%2e", "%2e%2E", ".%2e", "%2e.", "%252e%252e", "%2E%2E"]
SLASH = ["/", "%2f", "%2F", "%252f", "\\", ";/", "%5c", "/./", "//", "%00/", "/%2e/"]


def _tricks():
    """Raw request targets that normalise to one path and say another: a whole class, not one."""
    out = set()
    for target in TARGETS:
        for up in UP:
            for slash in SLASH:
                # From an internal path into /v1/ (nginx sees /v1/..., the replica routes /metrics...).
                out.add("/%s%s%s/v1/models" % (target, slash, up))
                out.add("/%s/%s%sv1/models" % (target, up, slash))
                # From /v1/ out to an internal path, under more than one prefix.
                for prefix in ("/v1", "/v1/models", "/v1/chat"):
                    out.add("%s/%s%s%s" % (prefix, up, slash, target))
                out.add("/v1/models/%s/%s%s%s" % (up, up, slash, target))
        out.update({
            "/%s/../v1/" % target, "/%s;/../v1/models" % target, "//%s/../v1/models" % target,
            "/%s/%%2e%%2e/v1/" % target, "/%s%%2f..%%2fv1/" % target, "/%s%%00/../v1/models" % target,
            "/%s/./../v1/models" % target, "/%s/..%%5cv1/models" % target, "/%s\\..\\v1\\models" % target,
            "/%s/" % target.upper() + "../v1/models", "/v1/../%s" % target.upper(), "/V1/../%s" % target,
            "/v1/%%2e%%2e/%s?x=1" % target, "/%s/../v1/models?x=/../../" % target,
        })
    # Not normal, even when they stay under /v1/: encoded letters, empty or dot segments, odd characters.
    out.update({"/v1//models", "/v1/./models", "/v1/models/.", "/v1/models/..", "/v1/%6dodels", "/v1/models%2fstandin",
                "/v1/models;x", "/v1/models\\standin", "/v1/models%00", "/V1/models", "/v1/MODELS/../models",
                "/v1/models%252f..%252f..%252fmetrics", "/v1/%2e/models", "/v1/models/%2e%2e/models"})
    return sorted(out)


TRICKS = _tricks()


def _log_lines(lab_host):
    return {h: lab_host(h).run(f"cat {REQUEST_LOG} 2>/dev/null").stdout.splitlines() for h in HEADS}


class RawClient:
    """Sends a request target byte for byte (urllib and curl would clean some of it up), over one
    kept-alive TLS connection where nginx keeps it open (it closes after a 400)."""

    def __init__(self, address, port=443, tls=True, host="llm.lab.invalid"):
        self.host = host
        if tls:
            ctx = ssl.create_default_context()
            ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
            self.conn = http.client.HTTPSConnection(address, port, timeout=15, context=ctx)
        else:
            self.conn = http.client.HTTPConnection(address, port, timeout=15)

    def request(self, target, method="GET", key=EDGE_KEY):
        for attempt in (1, 2):
            try:
                self.conn.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
                self.conn.putheader("Host", self.host)
                if key:
                    self.conn.putheader("Authorization", "Bearer " + key)
                self.conn.putheader("Content-Length", "0")
                self.conn.endheaders()
                resp = self.conn.getresponse()
                body = resp.read()
                return resp.status, dict(resp.getheaders()), body
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self.conn.close()  # nginx closed the kept-alive connection: once more on a new one
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def close(self):
        self.conn.close()


def test_standin_serves_metrics_as_a_mount_like_vllm(lab_host):
    # Without this the trick test below would prove nothing: on the replica itself, the raw paths
    # reach /metrics (vLLM routes the decoded path and does not resolve dot segments).
    head = lab_host(HEADS[0])
    for raw in ("/metrics/../v1/models", "/metrics%2f..%2fv1/models", "/metrics/%2e%2e/v1/"):
        out = head.check_output(f"curl -s --path-as-is 'http://127.0.0.1:8000{raw}'")
        assert out.startswith("vllm:"), (raw, out)


def test_path_tricks_get_404_and_never_reach_a_replica(lb, lab_host):
    before = _log_lines(lab_host)
    answers = collections.Counter()
    leaked = []

    def share(part):
        client = RawClient(lb.address, lb.port)
        try:
            return [(target,) + client.request(target) for target in TRICKS[part::4]]
        finally:
            client.close()

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        for target, status, headers, body in [r for part in pool.map(share, range(4)) for r in part]:
            answers[status] += 1
            if status not in (400, 404) or b"vllm:" in body or headers.get("X-Upstream"):
                leaked.append((target, status, headers.get("X-Upstream"), body[:80]))
    # The absolute form of the request line, and other methods, the same.
    for target, method in (("http://llm.lab.invalid/metrics/../v1/models", "GET"),
                           ("/invocations/../v1/completions", "POST"), ("/v1/../tokenize", "POST"),
                           ("/metrics/..%2fv1/models", "HEAD"), ("/metrics/../v1/models", "DELETE")):
        status, headers, body = RawClient(lb.address, lb.port).request(target, method=method)
        answers[status] += 1
        if status not in (400, 404) or headers.get("X-Upstream"):
            leaked.append((target, method, status))
    after = _log_lines(lab_host)
    reached = {h: after[h][len(before[h]):] for h in HEADS}
    assert not leaked, "%d of %d tricks were not refused: %s" % (len(leaked), len(TRICKS), leaked[:20])
    assert reached == {h: [] for h in HEADS}, reached
    # The log is written: a normal request appears in it (the check above is not vacuous).
    status, headers, _unused = lb.request("GET", "/v1/models")
    assert status == 200, status
    final = _log_lines(lab_host)
    new = [line for h in HEADS for line in final[h][len(after[h]):]]
    assert new == ["GET /v1/models HTTP/1.1"], new
    print("path tricks refused: %d (%s), none reached a replica" % (sum(answers.values()), dict(answers)))


def test_plain_http_only_redirects_when_tls_is_on(lb_plain, lab_host):
    before = _log_lines(lab_host)
    for method, path, body in (("GET", "/v1/models", None), ("POST", "/v1/completions", COMPLETION),
                               ("GET", "/lb-health", None), ("GET", "/metrics/../v1/models", None)):
        status, headers, data = lb_plain.request(method, path, body)
        assert status in (301, 308), (method, path, status, data[:200])
        assert headers["Location"] == "https://llm.lab.invalid" + path, headers
        assert not headers.get("X-Upstream") and b"standin" not in data, (path, headers)
    assert _log_lines(lab_host) == before, "a request in clear text reached a replica"


def test_hsts_on_every_tls_answer(lb):
    answers = [lb.request("GET", "/v1/models"), lb.request("GET", "/v1/models", key=None),
               lb.request("GET", "/nope"), lb.request("GET", "/lb-health", key=None),
               lb.request("POST", "/v1/completions", COMPLETION)]
    assert [a[0] for a in answers] == [200, 401, 404, 200, 200]
    for status, headers, _unused in answers:
        assert headers.get("Strict-Transport-Security") == "max-age=31536000", (status, headers)


@pytest.mark.parametrize("variant", [
    EDGE_KEY.upper(), EDGE_KEY.capitalize(), EDGE_KEY.replace("edge", "EDGE"), KEY2.swapcase()])
def test_keys_are_compared_exactly_case_included(lb, variant):
    assert variant != EDGE_KEY and variant.lower() in (EDGE_KEY, KEY2)
    status, headers, _unused = lb.request("POST", "/v1/completions", COMPLETION, key=variant)
    assert status == 401, (variant, status)
    assert not headers.get("X-Upstream")
    assert lb.request("POST", "/v1/completions", COMPLETION, key=EDGE_KEY)[0] == 200


def test_failed_keys_are_throttled_per_address(lb, client_host):
    # From the client host: a burst of wrong keys on one connection (curl's URL range).
    n = 300
    cmd = ("curl -sk -o /dev/null -w '%{http_code}\\n' -H 'Authorization: Bearer guess-000000000000000000' "
           f"'https://{LB}/v1/models?guess=[1-{n}]'")
    t0 = time.monotonic()
    codes = collections.Counter(client_host.check_output(cmd).split())
    elapsed = time.monotonic() - t0
    print("failed keys from one address: %d sent in %.1f s: %s" % (n, elapsed, dict(codes)))
    assert set(codes) <= {"401", "429"} and codes["429"] > 0, codes
    assert codes["401"] <= AUTH_FAIL_BURST + 1 + AUTH_FAIL_RATE * elapsed + 5, (codes, elapsed)
    # The throttled address's valid key still works; another address still gets its 401s.
    ok = client_host.check_output(f"curl -sk -o /dev/null -w '%{{http_code}}' -H 'Authorization: Bearer {KEY2}' "
                                  f"https://{LB}/v1/models")
    assert ok == "200", ok
    assert lb.request("GET", "/v1/models", key="guess-from-another-address-0001")[0] == 401


def test_one_key_cannot_hold_every_stream(lb):
    time.sleep(BURST / RATE + 1)  # the rate-limit buckets of the earlier bursts are full again
    n = CONN_LIMIT + 8

    def stream(_unused):
        # The stand-in holds each stream 5 x 1.5 s: every one is open while the others connect.
        return lb.stream("/v1/completions", dict(COMPLETION, standin_pause=1.5), key=KEY2)[0]

    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        streams = [pool.submit(stream, i) for i in range(n)]
        time.sleep(3)
        other = lb.request("POST", "/v1/completions", COMPLETION, key=EDGE_KEY)
        codes = collections.Counter(f.result() for f in streams)
    print("streams with one key, cap %d: %s; the other key meanwhile: %d" % (CONN_LIMIT, dict(codes), other[0]))
    assert codes == {200: CONN_LIMIT, 429: n - CONN_LIMIT}, codes
    assert other[0] == 200, other


@pytest.mark.parametrize("extra,named,rule", [
    ({"nginx_lb_api_keys": [EDGE_KEY, KEY2, EDGE_KEY]}, "nginx_lb_api_keys[2]", "same key as nginx_lb_api_keys[0]"),
    ({"nginx_lb_api_keys": [EDGE_KEY, "team-a-change-me-000001"]}, "nginx_lb_api_keys[1]", "placeholder word"),
    ({"nginx_lb_api_keys": [EDGE_KEY, "Qa1Qa1Qa1Qa1Qa1Qa1Qa1Qa1"]}, "nginx_lb_api_keys[1]", "low variety"),
    ({"nginx_lb_api_keys": []}, "nginx_lb_backend_api_key", "open relay"),
])
def test_bad_keys_are_refused_before_nginx_without_showing_a_key(lab_host, master_pid, run_converge, extra, named, rule):
    lb1 = lab_host(LB)
    keys_file = "/etc/nginx/llmops/llmops-vllm-keys.conf"
    before, keys_before, pid = lb1.file(CONF).sha256sum, lb1.file(keys_file).sha256sum, master_pid()
    rc, out = run_converge(extra, one_line=True)
    assert rc != 0 and named in out and rule in out, out[-3000:]
    for key in set(extra["nginx_lb_api_keys"]) | {"lab-backend-key-0000000001"}:
        assert key not in out, "a key is in the Ansible output"
    assert "nginx -t" not in out, "refused by nginx, not by the preflight"
    assert recap_changed(out) == 0, out[-1500:]
    assert lb1.file(CONF).sha256sum == before and lb1.file(keys_file).sha256sum == keys_before
    assert master_pid() == pid
