"""Secrets never leak (issue 8): the site's serving layers are run with two new, known keys (a key
rotation, with --diff and -v as an operator would run it), then every place a key could end up is
searched for them:

  - the whole Ansible output;
  - every file written on every host since the run began (units, configs, logs, state; / and the
    tmpfs mounts): a key may sit only in the files meant for it, owned by root, readable by no one
    else (mode 0600);
  - the systemd journal of every host;
  - every process's command line (a key passed as an argument shows in `ps`).

The rotated keys must then work (and the old ones not), and the lab keys are put back the same way.
"""
import http.client
import json
import secrets as pysecrets

from conftest import EDGE_KEY, HEADS, LB, MODEL, REPO, VLLM_KEY, one_line
from lab_testinfra import container_ip
from leak_search import leaks as search_leaks  # tests/lab, on the verifier's PYTHONPATH
from leak_search import touch_stamp

HOSTS = HEADS + (LB,)
# The only files a key may be in: the engine's environment file and the balancer's key map (the
# edge keys and the key it sends the replicas).
ALLOWED = {path: "600 root root" for path in ("/etc/vllm/vllm.env", "/etc/nginx/llmops/llmops-vllm-keys.conf")}
STAMP = "/run/llmops-leak-stamp"
SITE = "- name: Site\n  ansible.builtin.import_playbook: %s/playbooks/site.yml\n" % REPO
TAGS = ["--tags", "vllm_service,nginx_lb", "--diff", "-v"]


def status_with_key(key):
    c = http.client.HTTPConnection(container_ip(LB), 80, timeout=120)
    c.request("POST", "/v1/completions", body=json.dumps({"model": MODEL, "prompt": "Hi", "max_tokens": 4}),
              headers={"Content-Type": "application/json", "Authorization": "Bearer " + key})
    r = c.getresponse()
    r.read()
    c.close()
    return r.status


def leaks(lab_host, words):
    return search_leaks(lab_host, HOSTS, words, ALLOWED, STAMP)


def rotate(run_play, lab_host, edge, vllm):
    touch_stamp(lab_host, HOSTS, STAMP)
    res = run_play(SITE, extra_vars={"lab_edge_api_key": edge, "lab_vllm_api_key": vllm}, args=TAGS, timeout=1500)
    return res


def test_rotated_keys_appear_nowhere_but_their_root_only_files(run_play, lab_host):
    edge = "leak-canary-edge-" + pysecrets.token_hex(12)
    vllm = "leak-canary-vllm-" + pysecrets.token_hex(12)
    try:
        res = rotate(run_play, lab_host, edge, vllm)
        assert res.rc == 0, res
        out = one_line(res.output)
        assert edge not in res.output and vllm not in res.output, "a key is in the Ansible output"
        assert "changed=" in out
        assert leaks(lab_host, [edge, vllm]) == {}
        # The key files were rewritten (so the search above had something to find), and the keys work.
        for name in HEADS:
            assert lab_host(name).run("grep -c -- %s /etc/vllm/vllm.env", vllm).stdout.strip() == "1"
        # The edge key is in the balancer's two maps: whether a key is allowed, and which one it is.
        assert lab_host(LB).run("grep -c -- %s /etc/nginx/llmops/llmops-vllm-keys.conf", edge).stdout.strip() == "2"
        assert status_with_key(edge) == 200
        assert status_with_key(EDGE_KEY) == 401
    finally:
        res = rotate(run_play, lab_host, EDGE_KEY, VLLM_KEY)
        assert res.rc == 0, res
    assert status_with_key(EDGE_KEY) == 200
    assert leaks(lab_host, [EDGE_KEY, VLLM_KEY]) == {}
