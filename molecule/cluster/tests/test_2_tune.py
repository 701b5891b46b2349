"""playbooks/tune_speculative.yml on the lab's serving cluster, under a constant load through the
balancer: replica r1 leaves the balancer, runs with speculation off and with num_speculative_tokens
1..5 (the lab's ngram method), is measured at two concurrency levels under each, gets its
inventory's configuration back and returns; r2 serves the clients meanwhile and is not touched. Not one client request may fail.
The report's table is copied to reports/tune-latest.md (the numbers quoted in the docs)."""
import json
import os
import re
import shutil
import time

import yaml

from conftest import FAULTS, REPLICAS, REPO, one_line, served_by
from lab_testinfra import container_ip, wait_until

TUNE = "- name: Tune\n  ansible.builtin.import_playbook: %s/playbooks/tune_speculative.yml\n" % REPO
SETTINGS = ["off", "k1", "k2", "k3", "k4", "k5"]


def test_tune_speculative_measures_each_k_and_gives_the_replica_back(run_play, lab_host, load, tmp_path):
    r2_config = {n: lab_host(n).file("/etc/vllm/config.yaml").content_string for n in REPLICAS["r2"]}
    lo = load(max_seconds=3000)  # twelve measured settings and levels: about 20 min on 2 cores
    lo.start()
    time.sleep(3)
    t0 = time.monotonic()
    res = run_play(TUNE, timeout=3000, extra_vars={
        "tune_replica": "r1", "tune_levels": [1, 4], "tune_k": [1, 2, 3, 4, 5], "tune_max_tokens": 48,
        "tune_requests_per_stream": 3, "tune_report_dir": str(tmp_path)})
    t1 = time.monotonic()
    out = one_line(res.output)
    assert res.rc == 0, out[-3000:]
    head = REPLICAS["r1"][0]
    ip = container_ip(head)
    wait_until(lambda: any(r["ok"] and served_by(r, ip) and r["start"] > t1 for r in lo.snapshot()),
               120, what=f"{head} serving after the tuning")
    results = lo.take()
    bad = [r for r in results if not r["ok"]]
    FAULTS.append(("tune_speculative on r1 (off, k=1..5, 2 levels)", len(results), len(bad), t1 - t0,
                   "r1 out of the balancer, r2 serving, r1 back with its own config"))
    assert not bad, sorted({str(r.get("error") or r.get("status")) for r in bad})
    # r1 runs its inventory's configuration again (inventories/lab: max_num_seqs and k as written
    # there, whatever -e values an earlier test ran it with); r2 was not touched.
    with open(os.path.join(REPO, "inventories", "lab", "group_vars", "vllm_nodes.yml"), encoding="utf-8") as fh:
        inv = yaml.safe_load(fh)
    for name in REPLICAS["r1"]:
        text = lab_host(name).file("/etc/vllm/config.yaml").content_string
        assert re.search(r"^max[-_]num[-_]seqs: %d$" % inv["vllm_service_engine"]["max_num_seqs"], text, re.M), text
        assert re.search(r"^\s+num_speculative_tokens: %d$" % inv["vllm_service_speculative"]["num_speculative_tokens"],
                         text, re.M), text
    for name, text in r2_config.items():
        assert lab_host(name).file("/etc/vllm/config.yaml").content_string == text, f"{name} was changed"
    report = json.loads(next(tmp_path.glob("tune-*.json")).read_text(encoding="utf-8"))
    rows = report["table"]["rows"]
    assert sorted({(r["setting"], r["level"]) for r in rows}) == sorted((s, lv) for s in SETTINGS for lv in (1, 4))
    for r in rows:
        assert r["requests"] > 0 and r["failed"] == 0 and r["output_tokens_per_second"] > 0, r
        if r["setting"] != "off":
            assert r["acceptance_rate"] is not None, r  # the engine's own counters over the run
    assert report["recommended"] in SETTINGS
    md = next(p for p in tmp_path.glob("tune-*.md"))
    text = md.read_text(encoding="utf-8")
    assert "| k5 | 4 |" in text and "Recommended:" in text
    svgs = sorted(p.name for p in tmp_path.glob("tune-*.svg"))
    assert any(n.endswith("-throughput.svg") for n in svgs) and any(n.endswith("-acceptance.svg") for n in svgs), svgs
    assert (tmp_path / md.name.replace(".md", ".html")).exists()
    os.makedirs(os.path.join(REPO, "reports"), exist_ok=True)
    shutil.copy(md, os.path.join(REPO, "reports", "tune-latest.md"))
    assert re.search(r"recommended: (off|k[1-5])", out), out[-2000:]
