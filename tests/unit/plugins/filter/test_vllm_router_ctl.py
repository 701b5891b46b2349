"""Unit tests for roles/vllm_router/files/vllm-router-ctl, the router's launcher and worker sync: the
command line it execs (drained replicas left out), the files it refuses, the router's own parser called
for `check` (a stand-in package here; the real one runs in the scenario), and `status` / `sync` against a
stand-in for the router's worker API on 127.0.0.1."""
from __future__ import annotations

import json
import os
import sys
import threading
import types
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

SCRIPT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "roles", "vllm_router",
                                      "files", "vllm-router-ctl"))
# Loaded from its source without a bytecode cache (nothing is written beside the role's files).
ctl = types.ModuleType("vllm_router_ctl")
with open(SCRIPT, encoding="utf-8") as _fh:
    exec(compile(_fh.read(), SCRIPT, "exec"), ctl.__dict__)  # pylint: disable=exec-used

WORKERS = [{"name": "r1", "url": "http://10.0.0.11:8000"}, {"name": "r2", "url": "http://10.0.0.12:8000"},
           {"name": "r3", "url": "http://[fd00::13]:8000"}]
ARGV = ["--host", "127.0.0.1", "--port", "30000", "--policy", "cache_aware"]


def write(tmp_path, drained=None, workers=None, router_url="http://127.0.0.1:1", argv=None):
    """The role's two files (and a drain state file when DRAINED is a list); the arguments file's path."""
    (tmp_path / "workers.json").write_text(json.dumps({"workers": WORKERS if workers is None else workers}))
    state = tmp_path / "drained"
    if drained is not None:
        state.write_text("".join(n + "\n" for n in drained))
    args = tmp_path / "router.json"
    args.write_text(json.dumps({"argv": ARGV if argv is None else argv, "workers_file": str(tmp_path / "workers.json"),
                                "drain_state_file": str(state), "router_url": router_url}))
    return str(args)


def run(args, capsys):
    """(exit code, stdout, stderr) of main(ARGS)."""
    code = 0
    try:
        ctl.main(args)
    except SystemExit as stop:
        code = stop.code
    out = capsys.readouterr()
    return code, out.out, out.err


def execed(monkeypatch, path):
    seen = {}

    def fake_execv(program, argv):
        seen["program"], seen["argv"] = program, argv
        raise SystemExit(0)

    monkeypatch.setattr(ctl.os, "execv", fake_execv)
    with pytest.raises(SystemExit):
        ctl.main(["exec", path])
    return seen


def test_exec_runs_the_venvs_router_with_every_worker(tmp_path, monkeypatch):
    seen = execed(monkeypatch, write(tmp_path))
    assert seen["program"] == os.path.join(os.path.dirname(sys.executable), "vllm-router")
    assert seen["argv"][1:] == ARGV + ["--worker-urls"] + [w["url"] for w in WORKERS]


def test_exec_leaves_out_the_drained_replicas(tmp_path, monkeypatch, capsys):
    seen = execed(monkeypatch, write(tmp_path, drained=["r2", "gone", "  "]))
    assert seen["argv"][1:] == ARGV + ["--worker-urls", WORKERS[0]["url"], WORKERS[2]["url"]]
    assert "not given to the router: r2" in capsys.readouterr().err


def test_exec_with_every_replica_drained_gives_no_worker(tmp_path, monkeypatch):
    seen = execed(monkeypatch, write(tmp_path, drained=["r1", "r2", "r3"]))
    assert seen["argv"][1:] == ARGV


def test_an_unreadable_drain_state_stops_the_start(tmp_path, capsys):
    path = write(tmp_path)
    os.mkdir(tmp_path / "drained")  # a directory where the file belongs: open() fails
    code, _out, err = run(["exec", path], capsys)
    assert code == 1 and "cannot read the drain state" in err


@pytest.mark.parametrize("argv", [["--worker-urls", "http://10.0.0.1:8000"], "--port 1", [1]])
def test_arguments_it_refuses(tmp_path, capsys, argv):
    code, _out, err = run(["exec", write(tmp_path, argv=argv)], capsys)
    assert code == 1 and "argv must" in err


@pytest.mark.parametrize("workers, text", [
    ([{"name": "r1", "url": "http://llm-head:8000"}], "is not http://ADDRESS:PORT"),
    ([{"name": "r1", "url": "http://10.0.0.1:8000"}, {"name": "r1", "url": "http://10.0.0.2:8000"}], "listed twice"),
    ([{"name": "", "url": "http://10.0.0.1:8000"}], "is not a {name, url}"),
    ("x", "workers must be a list"),
])
def test_check_workers_refuses(tmp_path, capsys, workers, text):
    (tmp_path / "w.json").write_text(json.dumps({"workers": workers}))
    code, _out, err = run(["check-workers", str(tmp_path / "w.json")], capsys)
    assert code == 1 and text in err, err


def test_check_workers_accepts_the_roles_file(tmp_path, capsys):
    write(tmp_path)
    assert run(["check-workers", str(tmp_path / "workers.json")], capsys)[0] == 0


def test_usage(capsys):
    assert run(["start", "x"], capsys)[0] == 2
    assert run([], capsys)[0] == 2


@pytest.fixture()
def router_package(monkeypatch):
    """A stand-in vllm_router package: its parser refuses --policy bogus as argparse does (exit 2)."""
    seen = []

    def parse_router_args(argv):
        seen.append(list(argv))
        if "bogus" in argv:
            sys.stderr.write("vllm-router: error: argument --policy: invalid choice: 'bogus'\n")
            raise SystemExit(2)
        return types.SimpleNamespace(_validate_router_args=lambda: None)

    launch = types.ModuleType("vllm_router.launch_router")
    launch.parse_router_args = parse_router_args
    router = types.ModuleType("vllm_router.router")
    router.Router = types.SimpleNamespace(from_args=lambda args: object())
    monkeypatch.setitem(sys.modules, "vllm_router", types.ModuleType("vllm_router"))
    monkeypatch.setitem(sys.modules, "vllm_router.launch_router", launch)
    monkeypatch.setitem(sys.modules, "vllm_router.router", router)
    return seen


def test_check_asks_the_routers_own_parser(tmp_path, capsys, router_package):
    code, out, _err = run(["check", write(tmp_path)], capsys)
    assert code == 0 and out.startswith("ok: vllm-router accepts")
    assert router_package == [ARGV]
    code, _out, err = run(["check", write(tmp_path, argv=["--policy", "bogus"])], capsys)
    assert code == 1 and "invalid choice: 'bogus'" in err and "refuses the arguments --policy bogus" in err


class _Router(BaseHTTPRequestHandler):
    """The router's worker API as vllm-router 0.1.17 answers it: /list_workers, /remove_worker?url=,
    /add_worker?url= (which answers once the worker is healthy; here unless its URL is in `down`)."""
    urls = []
    down = set()
    calls = []

    def log_message(self, fmt, *args):
        pass

    def _send(self, code, body):
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._send(200, json.dumps({"urls": _Router.urls}))

    def do_POST(self):
        path, _sep, query = self.path.partition("?")
        url = urllib.parse.parse_qs(query)["url"][0]
        _Router.calls.append((path, url))
        if path == "/remove_worker":
            _Router.urls = [u for u in _Router.urls if u != url]
            self._send(200, "Successfully removed worker: " + url)
        elif url in _Router.down:
            self._send(400, "Timeout waiting for worker %s to become healthy" % url)
        else:
            _Router.urls.append(url)
            self._send(200, "Successfully added worker: " + url)


@pytest.fixture()
def router():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Router)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Router.urls, _Router.down, _Router.calls = [w["url"] for w in WORKERS], set(), []
    yield "http://127.0.0.1:%d" % server.server_address[1]
    server.shutdown()
    server.server_close()


def test_sync_takes_a_drained_replica_out_and_puts_it_back(tmp_path, capsys, router):
    path = write(tmp_path, drained=["r2"], router_url=router)
    code, out, _err = run(["sync", path], capsys)
    assert code == 0 and out == "changed: removed http://10.0.0.12:8000 (r2) from the router\n"
    assert _Router.urls == [WORKERS[0]["url"], WORKERS[2]["url"]]
    assert run(["sync", path], capsys)[:2] == (0, "")  # nothing left to do
    code, out, _err = run(["status", path], capsys)
    assert out.splitlines() == ["r1 http://10.0.0.11:8000 serving", "r2 http://10.0.0.12:8000 drained",
                                "r3 http://[fd00::13]:8000 serving"]
    write(tmp_path, drained=[], router_url=router)
    code, out, _err = run(["sync", path], capsys)
    assert code == 0 and out == "changed: added http://10.0.0.12:8000 (r2) to the router\n"
    assert ("/add_worker", "http://10.0.0.12:8000") in _Router.calls


def test_sync_removes_a_worker_no_replica_has_and_adds_a_new_one(tmp_path, capsys, router):
    _Router.urls = [WORKERS[0]["url"], "http://10.0.0.99:8000"]
    path = write(tmp_path, workers=WORKERS[:2], router_url=router)
    assert run(["status", path], capsys)[1].splitlines() == [
        "r1 http://10.0.0.11:8000 serving", "r2 http://10.0.0.12:8000 missing", "- http://10.0.0.99:8000 unknown"]
    code, out, _err = run(["sync", path], capsys)
    assert code == 0
    assert out.splitlines() == ["changed: removed http://10.0.0.99:8000 (no replica) from the router",
                                "changed: added http://10.0.0.12:8000 (r2) to the router"]


def test_sync_says_which_worker_is_not_healthy_yet(tmp_path, capsys, router):
    _Router.urls = [WORKERS[0]["url"]]
    _Router.down = {WORKERS[1]["url"]}
    code, out, err = run(["sync", write(tmp_path, router_url=router)], capsys)
    assert code == 3, err
    assert "changed: added http://[fd00::13]:8000 (r3)" in out
    assert "not added" in err and "http://10.0.0.12:8000 (r2)" in err


def test_sync_without_a_router_fails_naming_it(tmp_path, capsys):
    code, _out, err = run(["sync", write(tmp_path, router_url="http://127.0.0.1:9")], capsys)
    assert code == 1 and "does not answer GET /list_workers" in err
