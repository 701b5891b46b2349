"""Secrets never leak: the site's serving and monitoring layers are run with new, known secrets (the
edge key, the engines' key, Prometheus' basic-auth password and its bcrypt hash: a rotation, with
--diff and -v as an operator would run it), then every place a secret could end up is searched for
them:

  - the whole Ansible output;
  - every file written on every host since the run began (units, configs, logs, state; / and the
    tmpfs mounts): a key may sit only in the files meant for it, owned by root, readable by no one
    else (mode 0600);
  - the systemd journal of every host;
  - every process's command line (a key passed as an argument shows in `ps`).

The rotated keys must then work (and the old ones not), Prometheus must refuse a request without
them, and the lab keys (no Prometheus auth) are put back the same way. The cache's secrets (Redis
password, master, tenant and metrics keys) are rotated and searched the same way in
molecule/response_cache, the hf token in molecule/vllm_service: the lab site runs neither.
"""
import http.client
import json
import secrets as pysecrets
import warnings

from conftest import EDGE_KEY, HEADS, LB, MODEL, REPO, VLLM_KEY, one_line
from lab_testinfra import container_ip
from leak_search import leaks as search_leaks  # tests/lab, on the verifier's PYTHONPATH
from leak_search import touch_stamp

HOSTS = HEADS + (LB,)
# The only files a key may be in: the engine's environment file and the balancer's key map (the
# edge keys and the key it sends the replicas).
ALLOWED = {path: "600 root root" for path in ("/etc/vllm/vllm.env", "/etc/nginx/llmops/llmops-vllm-keys.conf")}
# Prometheus' password is in no file; its bcrypt hash only in Prometheus' web config.
PROM_WEB = "/etc/prometheus/web.yml"
ALLOWED_ROTATED = dict(ALLOWED, **{PROM_WEB: "640 root prometheus"})
PROM_STATUS = ("python3 -c 'import urllib.request as u, urllib.error as e\ntry: "
               "print(u.urlopen(\"http://127.0.0.1:9090/api/v1/status/runtimeinfo\", timeout=10).status)\n"
               "except e.HTTPError as x: print(x.code)'")
STAMP = "/run/llmops-leak-stamp"
SITE = "- name: Site\n  ansible.builtin.import_playbook: %s/playbooks/site.yml\n" % REPO
TAGS = ["--tags", "vllm_service,nginx_lb,monitoring", "--diff", "-v"]


def prometheus_auth(password):
    """The monitoring role's basic-auth variables for this password (its bcrypt hash, cost 10), or
    none (auth off, the lab's setting) for an empty one."""
    if not password:
        return {"monitoring_prometheus_web_username": "", "monitoring_prometheus_web_password": "",
                "monitoring_prometheus_web_password_hash": ""}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        # libxcrypt's bcrypt (the controller's Python has neither bcrypt nor passlib).
        import crypt  # pylint: disable=import-outside-toplevel,deprecated-module
    return {"monitoring_prometheus_web_username": "llmops-leak-test", "monitoring_prometheus_web_password": password,
            "monitoring_prometheus_web_password_hash": crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=1024))}


def status_with_key(key):
    c = http.client.HTTPConnection(container_ip(LB), 80, timeout=120)
    c.request("POST", "/v1/completions", body=json.dumps({"model": MODEL, "prompt": "Hi", "max_tokens": 4}),
              headers={"Content-Type": "application/json", "Authorization": "Bearer " + key})
    r = c.getresponse()
    r.read()
    c.close()
    return r.status


def leaks(lab_host, words, allowed=None):
    return search_leaks(lab_host, HOSTS, words, allowed or ALLOWED, STAMP)


def rotate(run_play, lab_host, edge, vllm, prom=""):
    touch_stamp(lab_host, HOSTS, STAMP)
    extra = dict(prometheus_auth(prom), lab_edge_api_key=edge, lab_vllm_api_key=vllm)
    res = run_play(SITE, extra_vars=extra, args=TAGS, timeout=1500)
    return res, extra


def test_rotated_keys_appear_nowhere_but_their_root_only_files(run_play, lab_host):
    edge = "leak-canary-edge-" + pysecrets.token_hex(12)
    vllm = "leak-canary-vllm-" + pysecrets.token_hex(12)
    prom = "leak-canary-prom-" + pysecrets.token_hex(12)
    try:
        res, extra = rotate(run_play, lab_host, edge, vllm, prom)
        assert res.rc == 0, res
        out = one_line(res.output)
        words = [edge, vllm, prom, extra["monitoring_prometheus_web_password_hash"]]
        assert not [w for w in words if w in res.output], "a secret is in the Ansible output"
        assert "changed=" in out
        assert leaks(lab_host, words, ALLOWED_ROTATED) == {}
        # Prometheus took the new hash (the role's readiness check passed with the password) and
        # refuses a request without it.
        web = lab_host(LB).file(PROM_WEB)
        assert extra["monitoring_prometheus_web_password_hash"] in web.content_string
        assert lab_host(LB).check_output(PROM_STATUS) == "401"
        # The key files were rewritten (so the search above had something to find), and the keys work.
        for name in HEADS:
            assert lab_host(name).run("grep -c -- %s /etc/vllm/vllm.env", vllm).stdout.strip() == "1"
        # The edge key is in the balancer's key map once (the map gives its index; whether a key is
        # allowed is read from the index, never from the key).
        assert lab_host(LB).run("grep -c -- %s /etc/nginx/llmops/llmops-vllm-keys.conf", edge).stdout.strip() == "1"
        assert status_with_key(edge) == 200
        assert status_with_key(EDGE_KEY) == 401
    finally:
        res, _extra = rotate(run_play, lab_host, EDGE_KEY, VLLM_KEY)
        assert res.rc == 0, res
    assert status_with_key(EDGE_KEY) == 200
    assert not lab_host(LB).file(PROM_WEB).exists and lab_host(LB).check_output(PROM_STATUS) == "200"
    assert leaks(lab_host, [EDGE_KEY, VLLM_KEY]) == {}
