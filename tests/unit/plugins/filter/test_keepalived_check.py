"""Unit tests for roles/keepalived/files/keepalived-check-nginx, keepalived's track script: run as
keepalived runs it (python3 -I, URL and timeout as arguments) against a local HTTP server on 127.0.0.1
that answers as told (a stand-in for nginx's health location)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import types
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

SCRIPT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "roles", "keepalived",
                                      "files", "keepalived-check-nginx"))
# Loaded from its source without a bytecode cache (nothing is written beside the role's files).
check = types.ModuleType("keepalived_check_nginx")
with open(SCRIPT, encoding="utf-8") as _fh:
    exec(compile(_fh.read(), SCRIPT, "exec"), check.__dict__)  # pylint: disable=exec-used


class _Handler(BaseHTTPRequestHandler):
    answers = {"/lb-health": 200, "/down": 503, "/moved": 308}
    seen = []

    def log_message(self, fmt, *args):
        pass

    def do_GET(self):
        _Handler.seen.append((self.path, self.headers.get("Host"), self.request_version))
        if self.path == "/slow":
            time.sleep(3)
        code = self.answers.get(self.path, 404)
        self.send_response(code)
        if code == 308:
            self.send_header("Location", "https://127.0.0.1/lb-health")
        self.send_header("Content-Length", "3")
        self.end_headers()
        self.wfile.write(b"ok\n")


@pytest.fixture(scope="module")
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.daemon_threads = True
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield "http://127.0.0.1:%d" % srv.server_address[1]
    srv.shutdown()
    srv.server_close()


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run(*args):
    """The script as keepalived runs it: (exit status, stderr)."""
    proc = subprocess.run([sys.executable, "-I", SCRIPT, *args], capture_output=True, text=True, timeout=30, check=False)
    return proc.returncode, proc.stderr


def test_a_2xx_health_answer_is_healthy(server):
    assert run(server + "/lb-health", "1") == (0, "")
    assert _Handler.seen[-1] == ("/lb-health", "127.0.0.1", "HTTP/1.0")


@pytest.mark.parametrize("path, words", [
    ("/down", "answered 503"),
    ("/moved", "answered 308"),
    ("/missing", "answered 404"),
])
def test_any_other_answer_is_a_failure(server, path, words):
    rc, err = run(server + path, "1")
    assert rc == 1 and words in err, err


def test_no_answer_within_the_timeout_is_a_failure(server):
    t0 = time.monotonic()
    rc, err = run(server + "/slow", "1")
    assert rc == 1 and "timed out" in err, err
    assert time.monotonic() - t0 < 2.9


def test_nothing_listening_is_a_failure():
    rc, err = run("http://127.0.0.1:%d/lb-health" % _free_port(), "1")
    assert rc == 1 and "refused" in err.lower(), err


def test_https_to_a_plain_port_is_a_failure(server):
    rc, err = run(server.replace("http://", "https://") + "/lb-health", "1")
    assert rc == 1, err


@pytest.mark.parametrize("args", [(), ("a", "b", "c"), ("ftp://127.0.0.1/x",), ("http://:80/x",), ("http://h:x/",)])
def test_a_bad_command_line_exits_2(args):
    rc, err = run(*args)
    assert rc == 2 and err, err


@pytest.mark.parametrize("url, parts", [
    ("http://127.0.0.1:80/lb-health", ("http", "127.0.0.1", 80, "/lb-health")),
    ("https://127.0.0.1/lb-health", ("https", "127.0.0.1", 443, "/lb-health")),
    ("http://[::1]:8080/a/b?x=1", ("http", "::1", 8080, "/a/b?x=1")),
    ("http://localhost", ("http", "localhost", 80, "")),
    ("ftp://h/", None),
    ("127.0.0.1/lb-health", None),
])
def test_parse(url, parts):
    assert check.parse(url) == parts


def test_it_imports_no_more_than_it_needs():
    """keepalived starts it every second: the modules of an http check are socket and sys only."""
    code = ("import sys; before = set(sys.modules); exec(compile(open(%r).read(), 'c', 'exec'), {}); "
            "print(' '.join(sorted(set(sys.modules) - before)))" % SCRIPT)
    proc = subprocess.run([sys.executable, "-I", "-B", "-c", code], capture_output=True, text=True, check=True)
    loaded = set(proc.stdout.split())
    assert not loaded & {"ssl", "http", "http.client", "urllib", "email"}, loaded
