"""playbooks/validate.yml on the converged site: the seed's checks, done right. The play fails on a
replica that does not answer, a failed request among the 100 through the balancer, or an uneven
spread; here its report is read back too, so a report that hides a failure fails the test."""
import glob
import json
import os

from conftest import HEADS, REPO, one_line


def test_validate_playbook_passes_and_its_report_says_so(run_play, tmp_path, monkeypatch):
    monkeypatch.setenv("VALIDATE_REPORT_DIR", str(tmp_path))
    res = run_play("- name: Validate\n  ansible.builtin.import_playbook: %s/playbooks/validate.yml\n" % REPO)
    assert res.rc == 0, res
    report = json.load(open(max(glob.glob(os.path.join(tmp_path, "validate-*.json"))), encoding="utf-8"))
    load = report["load"]
    assert (load["requests"], load["succeeded"], load["failed"]) == (100, 100, 0), load
    assert len(load["upstreams"]) == len(HEADS), load["upstreams"]
    for name in HEADS:
        head = report["heads"][name]
        assert head["ready"] and head["chat_usage"]["completion_tokens"] > 0, head
        assert head["tokens_per_second"] and head["ttft_s"] is not None, head
        assert "requests_waiting" in head["metrics"] and "kv_cache_usage_perc" in head["metrics"], head["metrics"]
    for ext in ("md", "svg"):
        assert glob.glob(os.path.join(tmp_path, "validate-*." + ext)), ext
    out = one_line(res.output)
    assert "load: 100/100 ok" in out, out[-3000:]  # the printed summary
