"""llmops.vllm_cluster.validate on the converged site, run by FQCN from the collection installed from
the built tarball (prepare.yml), as a user runs it. Its report is read back: a report that hides a
failure fails the test. Then a run with a threshold no lab can meet: the play must fail, and its
report must still be written and say FAIL and why."""
import glob
import json
import os
import re
import xml.etree.ElementTree as ET

from conftest import HEADS, WORKERS, one_line

VALIDATE = "- name: Validate\n  ansible.builtin.import_playbook: llmops.vllm_cluster.validate\n"


def latest(report_dir, ext):
    found = sorted(glob.glob(os.path.join(report_dir, "validate-2*." + ext)))
    assert found, f"no validate-*.{ext} in {report_dir}"
    return found[-1]


def test_the_collection_resolves_from_the_installed_tarball():
    """converge (llmops.vllm_cluster.site) and validate resolve from the tarball's install, not the tree."""
    first = os.environ["ANSIBLE_COLLECTIONS_PATH"].split(":")[0]
    coll = os.path.join(first, "ansible_collections", "llmops", "vllm_cluster")
    assert first.endswith("/collection/installed") and not os.path.islink(coll), first
    manifest = json.load(open(os.path.join(coll, "MANIFEST.json"), encoding="utf-8"))  # only an install has it
    assert manifest["collection_info"]["name"] == "vllm_cluster"
    assert os.path.exists(os.path.join(coll, "playbooks", "site.yml"))
    assert not os.path.exists(os.path.join(coll, "inventories", "lab")), "the lab inventory must not ship"


def test_validate_passes_and_its_report_says_so(run_play, tmp_path, monkeypatch):
    monkeypatch.setenv("VALIDATE_REPORT_DIR", str(tmp_path))
    res = run_play(VALIDATE)
    assert res.rc == 0, res
    report = json.load(open(latest(tmp_path, "json"), encoding="utf-8"))
    assert report["verdict"] == "PASS" and report["problems"] == [], report["problems"]
    load = report["load"]
    assert (load["requests"], load["succeeded"], load["failed"]) == (100, 100, 0), load
    assert len(load["upstreams"]) == len(HEADS), load["upstreams"]
    # Every successful stream has its own output rate.
    assert load["stream_tokens_per_second"]["count"] == 100, load["stream_tokens_per_second"]
    assert load["stream_tokens_per_second"]["p50"] > 0, load["stream_tokens_per_second"]
    # The four figures, all four checked: the lab sets the skew, per-stream rate and mean latency limits
    # (inventories/lab/group_vars/all.yml) and leaves the p99s and the acceptance unset, named as not checked.
    figs = report["four_figures"]
    assert sorted(figs) == ["mean_latency", "requests_per_replica", "stream_tokens_per_second", "success"], figs
    assert (figs["success"]["met"], figs["success"]["http_200"], figs["success"]["limit"]) == ("yes", 100, 1.0), figs
    per = figs["requests_per_replica"]
    assert (per["met"], per["limit"], per["replicas"], per["even_share"]) == ("yes", 1.0, len(HEADS), 100 / len(HEADS)), per
    assert 0 < per["min"] <= per["max"] < 100, per
    assert sorted(per["per_replica"]) == ["r1", "r2"] and sum(per["per_replica"].values()) == 100, per
    rate = figs["stream_tokens_per_second"]
    assert (rate["met"], rate["limit"], rate["streams"]) == ("yes", 0.5, 100) and rate["p50"] >= 0.5, rate
    mean = figs["mean_latency"]
    assert (mean["met"], mean["limit"], mean["concurrency"]) == ("yes", 60, 100) and 0 < mean["mean_s"] <= 60, mean
    assert set(report["not_checked"]) == {"validate_max_p99_latency", "validate_max_p99_ttft",
                                          "validate_min_spec_acceptance_rate"}, report["not_checked"]
    assert report["thresholds_not_met"] == [], report["thresholds_not_met"]
    checks = {c["key"]: c for c in report["threshold_checks"]}
    assert checks["min_stream_tokens_per_second"]["met"] == "yes" and checks["max_mean_latency"]["met"] == "yes", checks
    # Each request's own figures, for the histograms.
    samples = load["samples"]
    assert len(samples["latency"]) == len(samples["stream_tokens_per_second"]) == len(samples["upstream"]) == 100, samples
    chat = report["chat_through_balancer"]
    assert chat["role"] == "assistant" and chat["usage"]["completion_tokens"] > 0, chat
    for name in HEADS:
        head = report["heads"][name]
        assert head["ready"] and head["chat_usage"]["completion_tokens"] > 0, head
        assert head["tokens_per_second"] and head["ttft_s"] is not None, head
        assert "requests_waiting" in head["metrics"] and "kv_cache_usage_perc" in head["metrics"], head["metrics"]
        assert head["vllm_version"].startswith("0."), head["vllm_version"]
        assert head["release"]["release"].startswith("/opt/vllm/releases/vllm-"), head["release"]
        # The lab's ngram drafter really proposed under the validation load, and drafts were accepted.
        spec = head["metrics"]["spec_decode"]
        assert spec["drafts"] > 0 and spec["draft_tokens"] > 0, (name, spec)
        assert 0 < spec["acceptance_rate"] <= 1 and spec["mean_accepted_length"] > 1, (name, spec)
    # Per replica, as the engines report them: two nodes, TP 2, world size 2, both ranks joined,
    # and the shares of the 100 requests add up.
    replicas = {r["head"]: r for r in report["replicas"]}
    assert sorted(replicas) == sorted(HEADS), report["replicas"]
    for worker, head in WORKERS.items():
        rep = replicas[head]
        assert rep["workers"] == [worker] and rep["nnodes"] == 2, rep
        assert (rep["tensor_parallel_size"], rep["world_size"], rep["backend"]) == (2, 2, "gloo"), rep
        assert rep["ranks"] == {head: [0], worker: [1]}, rep
        assert rep["requests"] > 0, rep
    assert sum(r["requests"] for r in report["replicas"]) == 100, report["replicas"]
    assert abs(sum(r["share"] for r in report["replicas"]) - 1) < 1e-9, report["replicas"]
    md = open(latest(tmp_path, "md"), encoding="utf-8").read()
    assert "## Replicas as the engines report them" in md, md[:3000]
    assert md.startswith("# Cluster validation ") and md.splitlines()[0].endswith(": PASS"), md[:200]
    assert "`validate_max_kv_cache_usage`" in md and "| vLLM | 0." in md, md[:3000]
    # The verdict counts the thresholds met and names the unset ones, then come the four figures.
    verdict = next(line for line in md.splitlines() if line.startswith("**PASS**"))
    assert "thresholds met: " in verdict and "not checked (not set): " in verdict, verdict
    assert "`validate_max_p99_latency`" in verdict.split("not checked (not set): ")[1], verdict
    assert "`validate_max_mean_latency`" in verdict.split("not checked")[0] and "every threshold" not in verdict, verdict
    four = md.split("## The four figures\n", 1)[1].split("\n## ", 1)[0]
    assert md.index("## The four figures") < md.index("## Thresholds"), md[:3000]
    rows = {line.split("|")[1].strip(): line.split("|")[-2].strip() for line in four.splitlines()[2:] if line.startswith("| ")}
    assert rows["success (HTTP 200 share)"] == "yes" and rows["requests per replica"] == "yes", rows
    assert rows["output tok/s per stream"] == "yes", rows
    assert [met for name, met in rows.items() if name.startswith("mean latency")] == ["yes"], rows
    # The thresholds table: the per-stream rate and the mean latency beside their limits, each met.
    table = md.split("## Thresholds\n", 1)[1].split("\n## ", 1)[0]
    cells = {line.split("|")[2].strip(): [c.strip() for c in line.split("|")[3:-1]] for line in table.splitlines()[2:]
             if line.startswith("| ")}
    assert cells["`validate_min_stream_tokens_per_second`"][0] == "0.5", cells
    assert cells["`validate_min_stream_tokens_per_second`"][-1] == "yes", cells
    assert cells["`validate_max_mean_latency`"][0] == "60" and cells["`validate_max_mean_latency`"][-1] == "yes", cells
    assert cells["`validate_max_p99_ttft`"][0] == "not set" and cells["`validate_max_p99_ttft`"][-1] == "not checked", cells
    assert "| tok/s per stream p50 | latency mean (s) |" in md, md[:3000]
    for name in HEADS:  # the replica rows show numbers in the acceptance column, not "-"
        row = next(line for line in md.splitlines() if line.startswith(f"| {name} |"))
        assert row.split("|")[-3].strip().endswith("%"), row
    # The plots (matplotlib on the controller): beside the report, linked from it, the replicas by name.
    stamp = re.match(r"# Cluster validation (\S+): PASS", md).group(1)
    for name in ("latency", "stream", "replicas"):
        svg = os.path.join(tmp_path, f"validate-{stamp}-{name}.svg")
        assert os.path.exists(svg) and f"](validate-{stamp}-{name}.svg)" in md, (name, os.listdir(tmp_path))
        ET.parse(svg)
    assert sorted(report["plots"]) == ["latency", "replicas", "stream"], report["plots"]
    bars = " ".join(ET.parse(os.path.join(tmp_path, f"validate-{stamp}-replicas.svg")).getroot().itertext())
    assert "r1" in bars and "r2" in bars and ":8000" not in bars, bars
    # The HTML page: self-contained, the same tables, the three plots inline.
    html = open(latest(tmp_path, "html"), encoding="utf-8").read()
    assert html.startswith("<!DOCTYPE html>") and f"Cluster validation {stamp}: PASS" in html, html[:500]
    assert html.count("<svg ") == 3 and "<?xml" not in html, html.count("<svg ")
    assert "<td>output tok/s per stream, p50</td><td><code>validate_min_stream_tokens_per_second</code></td><td>0.5</td>" in html
    assert "<h2>Heads</h2>" in html and "<h2>Replicas as the engines report them</h2>" in html
    assert os.path.islink(os.path.join(tmp_path, "validate-latest.html"))
    out = one_line(res.output)
    assert "verdict: PASS" in out and "load: 100/100 ok" in out, out[-3000:]
    assert "not checked (not set): validate_max_p99_latency" in out, out[-3000:]


def test_a_failed_threshold_still_writes_a_report_that_says_fail(run_play, tmp_path, monkeypatch):
    """No lab answers 8 requests with a p99 latency of 1 ms: the report lands, says FAIL and why, and
    the play exits non-zero (a short load on the cluster already up)."""
    monkeypatch.setenv("VALIDATE_REPORT_DIR", str(tmp_path))
    res = run_play(VALIDATE, extra_vars={"validate_requests": 8, "validate_concurrency": 4,
                                         "validate_max_p99_latency": 0.001})
    assert res.rc != 0, res
    report = json.load(open(latest(tmp_path, "json"), encoding="utf-8"))
    assert report["verdict"] == "FAIL", report
    assert any("max_p99_latency" in p for p in report["problems"]), report["problems"]
    assert report["load"]["requests"] == 8 and report["load"]["succeeded"] == 8, report["load"]
    md = open(latest(tmp_path, "md"), encoding="utf-8").read()
    first = md.splitlines()
    assert first[0].endswith(": FAIL") and "**FAIL**" in md, md[:500]
    assert "max_p99_latency" in md.split("## Thresholds")[0], md[:1500]  # the why, before the details
    assert "| `validate_max_p99_latency` | 0.001 |" in md, md[:3000]
    p99 = next(line for line in md.splitlines() if "| `validate_max_p99_latency` |" in line)
    assert p99.rstrip().endswith("| NO |"), p99
    assert "validate_max_p99_latency" in report["thresholds_not_met"], report["thresholds_not_met"]
    assert os.path.exists(latest(tmp_path, "html"))
    assert "## The four figures" in md and report["four_figures"]["success"]["met"] == "yes", report["four_figures"]
    out = one_line(res.output)
    assert "verdict: FAIL" in out and "validation FAILED" in out, out[-3000:]
