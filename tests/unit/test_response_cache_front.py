"""The response cache's nginx front (roles/response_cache/templates/nginx-internal.conf.j2), run on
a real nginx on loopback: rendered by Ansible with the role's defaults and vars, in front of a
stand-in for LiteLLM (a Python HTTP server on loopback that records every path it is sent).

Only /v1/completions, /v1/chat/completions, /v1/models and /metrics/ reach the stand-in, each as
exactly that path; LiteLLM's admin routes and every path trick get 404 (or nginx's 400) from the
front and never reach it. nginx comes from Debian's `nginx` package (apt-get when missing).
molecule/response_cache proves the same on a lab balancer in front of the real LiteLLM.
"""
import http.client
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest
from real_tools import ansible_bin, apt_tool  # tests/unit

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
ROLE = os.path.join(ROOT, "roles", "response_cache")
ALLOWED = ["/v1/completions", "/v1/chat/completions", "/v1/models", "/metrics/"]
REFUSED = ["/cache/flushall", "/cache/delete", "/key/generate", "/model/new", "/config/update", "/config/yaml",
           "/spend/logs", "/user/info", "/ui/", "/sso/key/generate", "/", "/routes", "/health",
           "/health/liveliness", "/openapi.json", "/chat/completions", "/completions", "/models",
           "/v1/embeddings", "/v1/completions/", "/v1/models/x", "/V1/completions", "/metrics",
           "/v1/../cache/flushall", "/v1/completions/../../cache/flushall", "/v1/%2e%2e/cache/flushall",
           "/v1/models/%2E%2E/%2E%2E/cache/flushall", "//cache/flushall", "/cache%2Fflushall",
           "/metrics/../cache/flushall", "/v1/models/../../key/generate", "/v1/../../cache/flushall"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def render(dest, **overrides):
    extra = {"ansible_python_interpreter": sys.executable}
    extra.update(overrides)
    cmd = [ansible_bin(), "localhost", "-c", "local", "-i", "localhost,", "-m", "ansible.builtin.template",
           "-a", "src=%s dest=%s" % (os.path.join(ROLE, "templates", "nginx-internal.conf.j2"), dest),
           "-e", "@" + os.path.join(ROLE, "defaults", "main.yml"), "-e", "@" + os.path.join(ROLE, "vars", "main.yml"),
           "-e", json.dumps(extra)]
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    res = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env, cwd=ROOT)
    assert res.returncode == 0, "rendering failed:\n%s\n%s" % (res.stdout[-3000:], res.stderr[-3000:])
    return dest


class StandIn(http.server.BaseHTTPRequestHandler):
    """Stand-in for LiteLLM: answers 200 and records (method, path as received)."""
    seen = []

    def _answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        StandIn.seen.append((self.command, self.path))
        body = json.dumps({"stand_in": True, "path": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def standin():
    """The stand-in LiteLLM on a loopback port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


def start_front(d, backend, **overrides):
    """nginx with the rendered front on a free loopback port, proxying to BACKEND: (process, port, text)."""
    nginx = apt_tool("nginx", "nginx")
    port = free_port()
    conf = render(str(d / "front.conf"), response_cache_listen_address="127.0.0.1", response_cache_port=port,
                  response_cache_gateway_port=backend, response_cache_upstream_url="http://127.0.0.1:9/v1", **overrides)
    text = open(conf, encoding="utf-8").read().replace("/var/log/nginx/", str(d) + "/")
    with open(conf, "w", encoding="utf-8") as fh:
        fh.write(text)
    main = d / "nginx.conf"
    main.write_text("%sworker_processes 1; pid %s/nginx.pid; error_log %s/error.log;\nevents {}\n"
                    "http {\n  client_body_temp_path %s/cb; proxy_temp_path %s/pt; fastcgi_temp_path %s/ft;\n"
                    "  uwsgi_temp_path %s/ut; scgi_temp_path %s/st;\n  include %s;\n}\n"
                    % ("user root root; " if os.geteuid() == 0 else "", d, d, d, d, d, d, d, conf))
    test = subprocess.run([nginx, "-t", "-p", str(d), "-c", str(main)], capture_output=True, text=True, check=False)
    assert test.returncode == 0, test.stderr
    proc = subprocess.Popen([nginx, "-p", str(d), "-c", str(main), "-g", "daemon off;"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            return proc, port, text
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, "nginx did not start: %s" % (
                proc.stderr.read().decode() if proc.poll() is not None else "timeout")
            time.sleep(0.1)


def stop(proc):
    proc.terminate()
    proc.wait(10)


@pytest.fixture(scope="module")
def front(tmp_path_factory, standin):
    proc, port, text = start_front(tmp_path_factory.mktemp("front"), standin, response_cache_rate_limit=1000)
    yield port, text
    stop(proc)


def send(port, method, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request(method, path, body="{}" if method == "POST" else None,
              headers={"Authorization": "Bearer unit-tenant-key-0000000001", "Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


@pytest.mark.parametrize("path", ALLOWED)
def test_the_openai_routes_reach_litellm_as_they_are(front, path):
    port, _unused = front
    del StandIn.seen[:]
    method = "GET" if path in ("/v1/models", "/metrics/") else "POST"
    status, _unused = send(port, method, path + "?a=1")
    assert status == 200
    assert StandIn.seen == [(method, path + "?a=1")]


@pytest.mark.parametrize("path", REFUSED)
def test_every_other_path_gets_404_and_never_reaches_litellm(front, path):
    port, _unused = front
    del StandIn.seen[:]
    for method in ("GET", "POST"):
        status, data = send(port, method, path)
        # /metrics: nginx's redirect to /metrics/ (the front's own address), nothing forwarded.
        assert status in ((301, 404) if path == "/metrics" else (400, 404)), (method, path, status, data[:200])
    assert StandIn.seen == [], StandIn.seen


def test_a_dot_segment_reaches_only_the_normalised_route(front):
    port, _unused = front
    del StandIn.seen[:]
    status, _unused = send(port, "GET", "/cache/flushall/../../v1/models")
    assert status == 200 and StandIn.seen == [("GET", "/v1/models")]


def test_litellm_is_proxied_on_loopback_and_rate_limited(front):
    _unused, text = front
    assert "limit_req zone=llmops_response_cache_rl" in text
    passes = [line.strip() for line in text.splitlines() if line.strip().startswith("proxy_pass")]
    assert len(passes) == len(ALLOWED) and all(p.startswith("proxy_pass http://127.0.0.1:") for p in passes), passes


def test_the_rate_limit_answers_429_before_litellm_sees_the_key(tmp_path, standin):
    """Requests over the rate per client address, failed keys included, stop at the front."""
    proc, port, _unused = start_front(tmp_path, standin, response_cache_rate_limit=1, response_cache_rate_limit_burst=2)
    try:
        del StandIn.seen[:]
        codes = [send(port, "GET", "/v1/models")[0] for _unused in range(8)]
    finally:
        stop(proc)
    assert codes.count(429) >= 4 and len(StandIn.seen) == codes.count(200) <= 4, codes


def test_with_tls_the_front_has_no_clear_text_port(tmp_path):
    nginx = apt_tool("nginx", "nginx")
    cert, key = tmp_path / "front.crt", tmp_path / "front.key"
    made = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=front",
                           "-keyout", str(key), "-out", str(cert)], capture_output=True, text=True, check=False)
    assert made.returncode == 0, made.stderr
    conf = render(str(tmp_path / "front.conf"), nginx_lb_tls=True, response_cache_tls_cert=str(cert),
                  response_cache_tls_key=str(key), response_cache_upstream_url="http://127.0.0.1:9/v1")
    text = open(conf, encoding="utf-8").read().replace("/var/log/nginx/", str(tmp_path) + "/")
    listens = [line.strip() for line in text.splitlines() if line.strip().startswith("listen ")]
    assert listens == ["listen 4000 ssl;"], listens
    with open(conf, "w", encoding="utf-8") as fh:
        fh.write(text)
    main = tmp_path / "nginx.conf"
    main.write_text("pid %s/nginx.pid; error_log %s/error.log;\nevents {}\nhttp {\n  include %s;\n}\n" % (tmp_path, tmp_path, conf))
    test = subprocess.run([nginx, "-t", "-p", str(tmp_path), "-c", str(main)], capture_output=True, text=True, check=False)
    assert test.returncode == 0, test.stderr
