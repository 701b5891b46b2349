"""The vllm_router role's health timer: roles/vllm_router/files/vllm-router-metrics and its units.

The script's parsing on real captures of vllm-router 0.1.17's /metrics (tests/unit/fixtures/vllm_router/,
README there), and the whole script run as the timer runs it (python3 -I, `collect` then `publish`)
against a stand-in router on loopback (a stdlib HTTP server answering /liveness, /list_workers and
/metrics with a capture), with the role's router.json and workers.json shape and a drain state file, into a
temporary directory. It reads those files with vllm-router-ctl's own code (the file beside it), as the
router's launcher does. The units are rendered by Ansible with the role's defaults and constants; the file
name they write is the one the monitoring role's VllmRouterDown matches.
"""
import http.server
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import threading
import types

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "roles" / "vllm_router" / "files" / "vllm-router-metrics"
FIXTURES = ROOT / "tests" / "unit" / "fixtures" / "vllm_router"
NAMES = ROOT / "tests" / "unit" / "fixtures" / "monitoring" / "vllm-router-textfile.names.txt"
RULES = ROOT / "roles" / "monitoring_prometheus" / "templates" / "llmops.rules.yml.j2"
H1, H2 = "http://127.0.0.1:38101", "http://127.0.0.1:38102"

metrics = types.ModuleType("vllm_router_metrics")
exec(compile(SCRIPT.read_text(encoding="utf-8"), str(SCRIPT), "exec"), metrics.__dict__)  # pylint: disable=exec-used


def capture(name):
    return (FIXTURES / ("real_vllm-router-0.1.17_%s.txt" % name)).read_text(encoding="utf-8")


def test_the_parser_reads_each_workers_health_from_real_captures():
    assert metrics.worker_health(metrics.parse_samples(capture("fresh"))) == {H1: 1.0}
    assert metrics.worker_health(metrics.parse_samples(capture("two_healthy"))) == {H1: 1.0, H2: 1.0}
    assert metrics.worker_health(metrics.parse_samples(capture("one_head_down"))) == {H1: 1.0, H2: 0.0}
    # The removed head keeps its last value in the router's metrics.
    assert metrics.worker_health(metrics.parse_samples(capture("one_removed"))) == {H1: 1.0, H2: 0.0}
    samples = metrics.parse_samples(capture("two_healthy"))
    assert metrics.requests_total(samples) == 5
    assert metrics.requests_total(metrics.parse_samples(capture("one_head_down"))) == 8
    assert metrics.requests_total(metrics.parse_samples(capture("fresh"))) == 0
    # Histograms, label values with commas and escapes, timestamps: parsed or skipped, never mistaken.
    assert ("vllm_router_generate_duration_seconds_bucket", {"le": "+Inf"}, 5.0) in samples
    assert metrics.parse_samples('x{a="b,c",d="say \\"hi\\""} 2 1700000000000\nnot a sample\n') == \
        [("x", {"a": "b,c", "d": 'say "hi"'}, 2.0)]


def test_healthy_counts_only_configured_workers_the_router_serves():
    down = metrics.worker_health(metrics.parse_samples(capture("one_head_down")))
    assert metrics.healthy_count(down, [H1, H2]) == 1
    both = metrics.worker_health(metrics.parse_samples(capture("two_healthy")))
    assert metrics.healthy_count(both, [H1, H2]) == 2
    # H2 removed while healthy: its gauge would still say 1, /list_workers no longer names it.
    assert metrics.healthy_count(both, [H1, H2], live={H1}) == 1
    # A drained replica is not configured: not counted whatever its gauge says.
    assert metrics.healthy_count(both, [H1]) == 1
    assert metrics.healthy_count({}, [H1, H2]) == 0


def test_the_metrics_address_unspecified_means_loopback():
    assert metrics.metrics_url("127.0.0.1", "29000") == "http://127.0.0.1:29000/metrics"
    assert metrics.metrics_url("0.0.0.0", 29000) == "http://127.0.0.1:29000/metrics"
    assert metrics.metrics_url("::", 29000) == "http://[::1]:29000/metrics"
    assert metrics.metrics_url("10.0.0.11", 29001) == "http://10.0.0.11:29001/metrics"


def test_the_names_fixture_is_what_the_script_writes():
    written = {line.split("{")[0].split(" ")[0] for line in metrics.render(True, 2, 1, 7).splitlines()
               if line and not line.startswith("#")}
    listed = {line.strip() for line in NAMES.read_text(encoding="utf-8").splitlines()
              if line.strip() and not line.startswith("#")}
    assert written == listed


class StandinRouter:
    """A stdlib HTTP server on loopback answering as vllm-router does on /liveness, /list_workers and, on
    any other path (its Prometheus listener answers every path), a capture."""

    def __init__(self):
        self.live, self.metrics, self.metrics_status, self.urls = True, "", 200, []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                if self.path == "/liveness":
                    status, body = (200, "OK") if outer.live else (503, "")
                elif self.path == "/list_workers":
                    status, body = 200, json.dumps({"urls": outer.urls})
                else:
                    status, body = outer.metrics_status, outer.metrics
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture()
def router():
    standin = StandinRouter()
    yield standin
    standin.close()


def config(tmp_path, router_url, drained=()):
    """The role's router.json (argv, workers_file, drain_state_file, router_url) and workers.json."""
    workers = tmp_path / "workers.json"
    workers.write_text(json.dumps({"workers": [{"name": "r1", "url": H1}, {"name": "r2", "url": H2}]}),
                       encoding="utf-8")
    state = tmp_path / "drained"
    state.write_text("".join(name + "\n" for name in drained), encoding="utf-8")
    args = tmp_path / "router.json"
    args.write_text(json.dumps({"argv": ["--host", "127.0.0.1", "--port", "30000"], "workers_file": str(workers),
                                "drain_state_file": str(state), "router_url": router_url}), encoding="utf-8")
    return str(args)


def collect(out, args, port, address="127.0.0.1"):
    return subprocess.run([sys.executable, "-I", str(SCRIPT), "collect", str(out), args, address, str(port)],
                          capture_output=True, text=True, check=False, timeout=60)


def series(path):
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in pathlib.Path(path).read_text(encoding="ascii").splitlines() if line and line[0] != "#"}


def test_collect_writes_the_routers_health(router, tmp_path):
    router.metrics, router.urls = capture("one_head_down"), [H1, H2]
    out = tmp_path / "llmops_vllm_router.prom"
    res = collect(out, config(tmp_path, "http://127.0.0.1:%d" % router.port), router.port)
    assert res.returncode == 0, res.stderr
    assert series(out) == {"llmops_vllm_router_up": 1, 'llmops_vllm_router_workers{state="configured"}': 2,
                           'llmops_vllm_router_workers{state="healthy"}': 1, "llmops_vllm_router_requests_total": 8}
    assert oct(out.stat().st_mode & 0o777) == "0o644" and not (tmp_path / "llmops_vllm_router.prom.tmp").exists()
    # The unspecified address reaches the same listener on loopback.
    assert collect(out, config(tmp_path, "http://127.0.0.1:%d" % router.port), router.port, "0.0.0.0").returncode == 0


def test_collect_leaves_out_drained_and_removed_workers(router, tmp_path):
    # r2 drained and removed from the router while healthy: its gauge still says 1.
    router.metrics, router.urls = capture("two_healthy"), [H1]
    out = tmp_path / "m.prom"
    res = collect(out, config(tmp_path, "http://127.0.0.1:%d" % router.port, drained=["r2"]), router.port)
    assert res.returncode == 0, res.stderr
    got = series(out)
    assert got['llmops_vllm_router_workers{state="configured"}'] == 1
    assert got['llmops_vllm_router_workers{state="healthy"}'] == 1
    # Undrained but not added back yet (the sync has not run): configured 2, healthy still 1.
    res = collect(out, config(tmp_path, "http://127.0.0.1:%d" % router.port), router.port)
    assert res.returncode == 0, res.stderr
    assert series(out)['llmops_vllm_router_workers{state="healthy"}'] == 1
    assert series(out)['llmops_vllm_router_workers{state="configured"}'] == 2


def test_collect_says_up_0_when_the_router_does_not_answer(router, tmp_path):
    out = tmp_path / "m.prom"
    router.live = False
    res = collect(out, config(tmp_path, "http://127.0.0.1:%d" % router.port), router.port)
    assert res.returncode == 0, res.stderr
    assert series(out) == {"llmops_vllm_router_up": 0, 'llmops_vllm_router_workers{state="configured"}': 2,
                           'llmops_vllm_router_workers{state="healthy"}': 0}
    # Nothing listening at all (a stopped router): the same.
    port = router.port
    router.close()
    res = collect(out, config(tmp_path, "http://127.0.0.1:%d" % port), port)
    assert res.returncode == 0, res.stderr
    assert series(out)["llmops_vllm_router_up"] == 0
    router.server = types.SimpleNamespace(shutdown=lambda: None, server_close=lambda: None)


def test_collect_writes_nothing_when_the_metrics_do_not_answer(router, tmp_path):
    out = tmp_path / "m.prom"
    out.write_text("before\n", encoding="ascii")
    router.metrics_status = 500
    res = collect(out, config(tmp_path, "http://127.0.0.1:%d" % router.port), router.port)
    assert res.returncode == 1 and "its metrics" in res.stderr and "not written" in res.stderr
    assert out.read_text(encoding="ascii") == "before\n"


def test_collect_refuses_a_broken_workers_file_with_the_launchers_words(router, tmp_path):
    args = config(tmp_path, "http://127.0.0.1:%d" % router.port)
    (tmp_path / "workers.json").write_text('{"workers": [{"name": "r1", "url": "http://head1:8000"}]}',
                                           encoding="utf-8")
    res = collect(tmp_path / "m.prom", args, router.port)
    assert res.returncode == 1 and res.stderr.startswith("vllm-router-ctl: ") and "http://ADDRESS:PORT" in res.stderr
    assert not (tmp_path / "m.prom").exists()


def test_publish_copies_only_the_routers_series(tmp_path):
    src, dest = tmp_path / "src.prom", tmp_path / "textfile" / "llmops_vllm_router.prom"
    dest.parent.mkdir()
    src.write_text(metrics.render(True, 2, 2, 123456789), encoding="ascii")
    run = [sys.executable, "-I", str(SCRIPT), "publish", str(src), str(dest)]
    res = subprocess.run(run, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    assert dest.read_text(encoding="ascii") == src.read_text(encoding="ascii")
    assert oct(dest.stat().st_mode & 0o777) == "0o644" and os.listdir(dest.parent) == [dest.name]
    src.write_text(metrics.render(False, 2, 0), encoding="ascii")
    assert subprocess.run(run, capture_output=True, text=True, check=False).returncode == 0
    assert series(dest)["llmops_vllm_router_up"] == 0
    # Anything else (another metric, a label of its own) never reaches the exporter's directory.
    before = dest.read_text(encoding="ascii")
    for bad in ('node_load1 99\n', 'llmops_vllm_router_up{host="x"} 1\n', "llmops_vllm_router_up 1", "",
                "# HELP node_load1 x\n"):
        src.write_text(bad, encoding="ascii")
        res = subprocess.run(run, capture_output=True, text=True, check=False)
        assert res.returncode == 1 and "not this script's output" in res.stderr, bad
        assert dest.read_text(encoding="ascii") == before


def test_usage(tmp_path):
    for args in (["collect", "x"], ["collect", "o", "a", "127.0.0.1", "port"], ["publish", "x"], []):
        res = subprocess.run([sys.executable, "-I", str(SCRIPT), *args], capture_output=True, text=True, check=False)
        assert res.returncode == 2 and "usage" in res.stderr


@pytest.fixture(scope="module")
def units(tmp_path_factory):
    if shutil.which("ansible-playbook") is None:
        pytest.skip("ansible-playbook not installed")
    from ansible_run import render_role_templates  # tests/unit
    return render_role_templates(tmp_path_factory.mktemp("units"), "vllm_router",
                                 ["metrics.service.j2", "metrics.timer.j2"])


def test_the_service_collects_unprivileged_and_publishes_into_the_textfile_directory(units):
    service = units["metrics.service.j2"]
    starts = [line for line in service.splitlines() if line.startswith("ExecStart=")]
    python, script = "/opt/llmops/vllm-router/bin/python3", "/usr/local/libexec/llmops/vllm-router-metrics"
    runtime = "/run/llmops-vllm-router-metrics/llmops_vllm_router.prom"
    assert starts == [
        "ExecStart=%s -I %s collect %s /etc/llmops-vllm-router/router.json 127.0.0.1 29000" % (python, script, runtime),
        "ExecStart=!%s -I %s publish %s /var/lib/prometheus/node-exporter/llmops_vllm_router.prom"
        % (python, script, runtime)]
    for setting in ("Type=oneshot", "DynamicUser=yes", "RuntimeDirectory=llmops-vllm-router-metrics",
                    "ReadWritePaths=/var/lib/prometheus/node-exporter", "CapabilityBoundingSet=", "NoNewPrivileges=yes",
                    "ProtectSystem=strict", "IPAddressDeny=any", "IPAddressAllow=localhost 127.0.0.1"):
        assert setting in service.splitlines(), setting
    assert not [line for line in service.splitlines() if line.startswith(("User=", "Group="))]
    timer = units["metrics.timer.j2"]
    assert "OnUnitActiveSec=10s" in timer.splitlines() and "WantedBy=timers.target" in timer.splitlines()


def test_the_file_is_the_one_the_alert_watches():
    with open(ROOT / "roles" / "vllm_router" / "vars" / "main.yml", encoding="utf-8") as fh:
        name = re.search(r"^vllm_router__metrics_file: (\S+)$", fh.read(), re.M).group(1)
    pattern = re.search(r'file=~"([^"]+)"', RULES.read_text(encoding="utf-8")).group(1).replace("\\\\", "\\")
    assert re.fullmatch(pattern, name) and re.fullmatch(pattern, "/var/lib/prometheus/node-exporter/" + name)
    assert not re.fullmatch(pattern, "llmops_keepalived.prom")
