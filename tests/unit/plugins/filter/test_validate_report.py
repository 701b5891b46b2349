"""playbooks/validate.yml's report, rendered by its own "Report" play on a captured run
(validate_run.json: what the earlier plays register on two TP=2 replicas behind a balancer). Only the
Report play runs, on localhost; the inventory's hosts hold the registered results as variables and are
never contacted. Checks the Markdown tables, the verdict naming the thresholds not checked, the HTML page
with its plots inline, the SVG files and the JSON; and the report without matplotlib."""
from __future__ import annotations

import copy
import glob
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[4]
RUN = json.loads((pathlib.Path(__file__).parent / "validate_run.json").read_text(encoding="utf-8"))
pytestmark = pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="ansible-playbook not installed")


def _has_matplotlib():
    try:
        import matplotlib  # noqa: F401  pylint: disable=unused-import,import-outside-toplevel
    except ImportError:
        return False
    return True


needs_matplotlib = pytest.mark.skipif(not _has_matplotlib(), reason="matplotlib is not installed")


def _inventory(run, report_dir):
    heads, workers, nodes = {}, {}, {}
    for index, (name, head) in enumerate(sorted(run["heads"].items())):
        heads[name] = {"ansible_host": "10.89.40.%d" % (11 + 2 * index), "vllm_service_replica": head["replica"],
                       "vllm_service_model": {"name": "deepseek-v4-flash"}, "validate_problems": head.get("problems", []),
                       "validate_ready": head["ready"], "validate_chat": head["chat"],
                       "validate_metrics": head["metrics"], "validate_engine": head["engine"]}
    for index, (name, replica) in enumerate(sorted(run["workers"].items())):
        workers[name] = {"ansible_host": "10.89.40.%d" % (12 + 2 * index), "vllm_service_replica": replica}
    for name in list(heads) + list(workers):
        nodes[name] = (heads.get(name) or workers[name])
        nodes[name]["validate_topology"] = run["topology"][name]
    settings = dict(run["settings"], report_dir=str(report_dir))
    balancer = {"validate_settings": settings, "validate_load": run["load"], "validate_lb_chat": run["lb_chat"],
                "validate_problems": run.get("lb_problems", [])}
    if run.get("lb_unreached"):
        del balancer["validate_problems"]
    return {"all": {"vars": {"ansible_connection": "local"}, "children": {"cluster": {"children": {
        "vllm_nodes": {"children": {"vllm_heads": {"hosts": heads}, "vllm_workers": {"hosts": workers}}},
        "balancers": {"hosts": {"lb1": balancer}}}}}}}


def render(tmp_path, run=None, env_extra=None):
    """Runs validate.yml's Report play on RUN; returns (process, output in one line, report dir)."""
    run = run or RUN
    work = tmp_path / "play"
    work.mkdir()
    report_dir = tmp_path / "reports"
    plays = yaml.safe_load((ROOT / "playbooks" / "validate.yml").read_text(encoding="utf-8"))
    report = [p for p in plays if p["name"] == "Report"]
    assert len(report) == 1, [p["name"] for p in plays]
    (work / "report.yml").write_text(yaml.safe_dump(report), encoding="utf-8")
    # The play's templates resolve beside it, as in playbooks/.
    (work / "templates").symlink_to(ROOT / "playbooks" / "templates")
    (work / "hosts.json").write_text(json.dumps(_inventory(run, report_dir)), encoding="utf-8")
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".cache" / "collections"),
               ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_STDOUT_CALLBACK="default")
    env.update(env_extra or {})
    proc = subprocess.run(["ansible-playbook", "-i", str(work / "hosts.json"), str(work / "report.yml"),
                           "-e", json.dumps({"ansible_python_interpreter": sys.executable})],
                          capture_output=True, text=True, env=env, check=False, timeout=300)
    return proc, " ".join((proc.stdout + proc.stderr).split()), report_dir


def one(report_dir, pattern):
    found = sorted(glob.glob(str(report_dir / pattern)))
    assert len(found) == 1, (pattern, os.listdir(report_dir))
    return pathlib.Path(found[0])


def table(md, heading):
    """{first cell: [cells]} of the table under HEADING."""
    section = md.split(heading + "\n", 1)[1].split("\n#", 1)[0]
    rows = {}
    for line in section.splitlines():
        if line.startswith("| ") and not line.startswith("| ---"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows[cells[0]] = cells[1:]
    return rows


@needs_matplotlib
def test_pass_report_tables_verdict_plots_and_html(tmp_path):
    proc, out, report_dir = render(tmp_path)
    assert proc.returncode == 0, out[-4000:]
    md = one(report_dir, "validate-2*.md").read_text(encoding="utf-8")
    stamp = re.match(r"# Cluster validation (\S+): PASS\n", md).group(1)

    # The verdict: met thresholds counted and named, and the unset ones named as not checked.
    verdict = next(line for line in md.splitlines() if line.startswith("**PASS**"))
    assert "every threshold" not in verdict, verdict
    assert "thresholds met: 7 (" in verdict, verdict
    assert "not checked (not set): `validate_max_p99_latency`, `validate_max_p99_ttft`, `validate_min_spec_acceptance_rate`." in verdict, verdict

    four = table(md, "## The four figures")
    assert four["success (HTTP 200 share)"][-1] == "yes" and "100 of 100 HTTP 200" in four["success (HTTP 200 share)"][1]
    assert four["requests per replica"][1] == "r1 52, r2 48 (skew 0.08)" and four["requests per replica"][-1] == "yes"
    assert "50 each (100 requests over 2 replicas)" in four["requests per replica"][0]
    assert four["output tok/s per stream"] == ["`validate_min_stream_tokens_per_second`: p50 at least 70 tok/s",
                                               "p50 79.2, min 60.8 (100 streams)", "yes"]
    assert four["mean latency (s) at concurrency 100"] == ["`validate_max_mean_latency`: at most 0.8 s",
                                                           "0.408 (p99 0.550, 100 in flight at most)", "yes"]

    rows = table(md, "## Thresholds")
    assert rows["output tok/s per stream, p50"] == ["`validate_min_stream_tokens_per_second`", "70",
                                                    "79.2 (min 60.8, 100 streams)", "yes"]
    assert rows["mean latency through the balancer (s)"] == ["`validate_max_mean_latency`", "0.8", "0.408 (p99 0.550)", "yes"]
    assert rows["latency p99 through the balancer (s)"] == ["`validate_max_p99_latency`", "not set", "0.550 (p50 0.399)",
                                                            "not checked"]
    assert rows["replicas that serve requests (every head)"] == ["every head", "2", "2", "yes"]
    assert rows["requests through the balancer that succeed"][1:] == ["100 %", "100.0 % (100 of 100)", "yes"]
    assert rows["speculative-decoding acceptance of a head (least)"][1:] == ["not set", "58.0 %", "not checked"]

    # The spread named by replica, not by address alone.
    spread = table(md, "### Distribution over the replicas (skew 0.08)")
    assert spread["r1"] == ["dgx1", "10.89.40.11:8000", "52", "52 %"] and spread["r2"][-2:] == ["48", "48 %"]

    # Three plots beside the report, linked from it, and inline in the HTML page.
    for name in ("latency", "stream", "replicas"):
        svg = report_dir / ("validate-%s-%s.svg" % (stamp, name))
        ET.fromstring(svg.read_bytes())
        assert "](validate-%s-%s.svg)" % (stamp, name) in md
    strings = " ".join(ET.fromstring((report_dir / ("validate-%s-replicas.svg" % stamp)).read_bytes()).itertext())
    assert "r1" in strings and "r2" in strings and "10.89.40.11" not in strings and "even share 50.0" in strings
    strings = " ".join(ET.fromstring((report_dir / ("validate-%s-stream.svg" % stamp)).read_bytes()).itertext())
    assert "validate_min_stream_tokens_per_second 70" in strings and "p50 79.2 tok/s" in strings
    html = one(report_dir, "validate-2*.html").read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and "<title>Cluster validation %s: PASS</title>" % stamp in html
    assert html.count("<svg ") == 3 and "<?xml" not in html and "<!DOCTYPE svg" not in html
    assert 'id="plot-latency-' in html and 'id="plot-stream-' in html
    ids = re.findall(r'\bid="([^"]+)"', html)
    assert len(ids) == len(set(ids)), "duplicate ids in the page"
    assert "<td>output tok/s per stream, p50</td><td><code>validate_min_stream_tokens_per_second</code></td><td>70</td>" in html
    assert "not checked (not set): <code>validate_max_p99_latency</code>" in html
    assert "<td>r1</td><td>dgx1</td><td>10.89.40.11:8000</td><td>52</td>" in html
    assert "src=" not in html.split("<body>", 1)[1], "the page must not load anything"

    report = json.loads(one(report_dir, "validate-2*.json").read_text(encoding="utf-8"))
    assert report["verdict"] == "PASS" and report["problems"] == []
    assert report["not_checked"] == ["validate_max_p99_latency", "validate_max_p99_ttft", "validate_min_spec_acceptance_rate"]
    assert report["four_figures"]["stream_tokens_per_second"]["met"] == "yes"
    assert report["four_figures"]["requests_per_replica"]["even_share"] == 50.0
    assert sorted(report["plots"]) == ["latency", "replicas", "stream"] and report["plots_skipped"] is None
    assert len(report["load"]["samples"]["latency"]) == 100
    for ext in ("md", "json", "html"):
        assert os.readlink(report_dir / ("validate-latest." + ext)) == "validate-%s.%s" % (stamp, ext)
    assert "verdict: PASS" in out and "not checked (not set): validate_max_p99_latency" in out, out[-3000:]


@needs_matplotlib
def test_fail_report_names_the_threshold_and_the_unchecked_ones(tmp_path):
    run = copy.deepcopy(RUN)
    run["settings"].update(max_p99_latency=0.001, max_distribution_skew=None)
    failure = "max_p99_latency: p99 latency 0.5505s exceeds 0.001s (p50 0.3993s)"
    run["load"]["threshold_failures"] = [failure]
    run["lb_problems"] = ["load through the balancer: load test thresholds not met: " + failure]
    proc, out, report_dir = render(tmp_path, run)
    assert proc.returncode != 0 and "validation FAILED (1): lb1: load through the balancer" in out, out[-3000:]
    md = one(report_dir, "validate-2*.md").read_text(encoding="utf-8")
    assert md.splitlines()[0].endswith(": FAIL")
    head = md.split("## The four figures")[0]
    assert "**FAIL**: 1 problem(s), thresholds not met: `validate_max_p99_latency`:" in head, head
    assert "- lb1: load through the balancer: load test thresholds not met: max_p99_latency" in head, head
    assert "not checked (not set): `validate_max_distribution_skew`, `validate_max_p99_ttft`" in head, head
    rows = table(md, "## Thresholds")
    assert rows["latency p99 through the balancer (s)"] == ["`validate_max_p99_latency`", "0.001", "0.550 (p50 0.399)", "NO"]
    assert table(md, "## The four figures")["requests per replica"][-1] == "not checked"
    report = json.loads(one(report_dir, "validate-2*.json").read_text(encoding="utf-8"))
    assert report["verdict"] == "FAIL" and report["thresholds_not_met"] == ["validate_max_p99_latency"]


def test_an_unreached_balancer_and_no_load_still_write_the_tables(tmp_path):
    """Nothing measured: every set threshold reads NO (never met unmeasured), the report is written."""
    run = copy.deepcopy(RUN)
    run["load"] = {}
    run["lb_unreached"] = True
    proc, out, report_dir = render(tmp_path, run)
    assert proc.returncode != 0, out[-3000:]
    md = one(report_dir, "validate-2*.md").read_text(encoding="utf-8")
    assert "- lb1: not validated (unreachable, or failed before its checks)" in md
    rows = table(md, "## Thresholds")
    assert rows["mean latency through the balancer (s)"] == ["`validate_max_mean_latency`", "0.8", "- (p99 -)", "NO"]
    assert rows["replicas that serve requests (every head)"][-1] == "NO"
    assert "No plots: the load returned nothing to draw (no request answered)." in md
    assert not glob.glob(str(report_dir / "validate-*-latency.svg"))


def test_without_matplotlib_the_report_says_so_and_keeps_the_tables(tmp_path):
    """A controller without matplotlib (here: one whose matplotlib cannot be imported)."""
    fake = tmp_path / "no_matplotlib" / "matplotlib"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('matplotlib hidden for this test')\n", encoding="utf-8")
    path = os.pathsep.join(p for p in [str(fake.parent), os.environ.get("PYTHONPATH", "")] if p)
    proc, out, report_dir = render(tmp_path, env_extra={"PYTHONPATH": path})
    assert proc.returncode == 0, out[-4000:]
    md = one(report_dir, "validate-2*.md").read_text(encoding="utf-8")
    assert "No plots: matplotlib is not installed on the controller (pip install matplotlib)" in md
    assert table(md, "## Thresholds")["output tok/s per stream, p50"][-1] == "yes"
    html = one(report_dir, "validate-2*.html").read_text(encoding="utf-8")
    assert "<svg" not in html and "No plots: matplotlib is not installed" in html and "<td>mean latency" in html
    assert not glob.glob(str(report_dir / "*.svg"))
    report = json.loads(one(report_dir, "validate-2*.json").read_text(encoding="utf-8"))
    assert report["plots"] == {} and report["plots_skipped"] == "matplotlib is not installed on the controller"
    assert "no plots: matplotlib is not installed" in out, out[-3000:]
