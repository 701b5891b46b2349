"""The response cache's secrets never leak: the Redis password, LiteLLM's master key, the tenant keys
and the metrics key are rotated to new, known values by running the scenario's converge with
--diff and -v (as an operator would run a rotation), then searched for (tests/lab/leak_search.py):
the whole Ansible output, every file written on both hosts since the run began, their journals,
every process's command line. The only files allowed to hold them: the gateway's environment file
(root 0600) and Redis' include (root:redis 0640: Redis reads its password from it). tenants.json
holds sha256 digests, not keys.

The rotated secrets must then work (and the old ones not); the lab's own are put back the same way
and searched for too. This runs last in the verify step (file name): it restarts Redis and LiteLLM.
"""
import os
import secrets as pysecrets

from conftest import GATEWAY_PORT, HEAD, LB, METRICS_KEY, MODEL, REDIS_PASSWORD, TENANT_A, TENANT_B, call
from lab_testinfra import container_ip
from leak_search import leaks, touch_stamp  # tests/lab, on the verifier's PYTHONPATH

HOSTS = (LB, HEAD)
ALLOWED = {"/etc/llmops-response-cache/env": "600 root root",
           "/etc/redis/llmops-response-cache.conf": "640 root redis"}
STAMP = "/run/llmops-leak-stamp"
MASTER_KEY = "sk-lab-cache-master-000000000001"
CONVERGE = "- name: Converge\n  ansible.builtin.import_playbook: %s/converge.yml\n" % os.environ.get(
    "MOLECULE_SCENARIO_DIRECTORY", os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def secrets_vars(tenant_a, tenant_b, metrics, master, redis):
    return {"response_cache_tenants": [{"name": "team-a", "key": tenant_a}, {"name": "team-b", "key": tenant_b}],
            "response_cache_metrics_key": metrics, "response_cache_master_key": master,
            "response_cache_redis_password": redis}


def rotate(run_play, lab_host, values):
    touch_stamp(lab_host, HOSTS, STAMP)
    return run_play(CONVERGE, extra_vars=secrets_vars(*values), args=["--diff", "-v"], timeout=900)


def completion_status(key):
    status, _unused, _unused = call(container_ip(LB), GATEWAY_PORT, "POST", "/v1/completions",
                                    body={"model": MODEL, "prompt": "Hi", "max_tokens": 2, "temperature": 0.5},
                                    headers={"Authorization": "Bearer " + key})
    return status


def redis_answers(lb_host, password):
    return lb_host.run("REDISCLI_AUTH=%s redis-cli ping", password).stdout.strip() == "PONG"


def test_rotated_secrets_appear_nowhere_but_their_files(run_play, lab_host, engine):
    lab = (TENANT_A, TENANT_B, METRICS_KEY, MASTER_KEY, REDIS_PASSWORD)
    new = tuple("leak-canary-%s-%s" % (what, pysecrets.token_hex(12))
                for what in ("tenant-a", "tenant-b", "metrics", "master", "redis"))
    lb_host = lab_host(LB)
    try:
        res = rotate(run_play, lab_host, new)
        assert res.rc == 0, res
        shown = [i for i, word in enumerate(new) if word in res.output]
        assert not shown, "secrets %s are in the Ansible output" % shown
        assert "changed=" in res.output
        assert leaks(lab_host, HOSTS, list(new), ALLOWED, STAMP) == {}
        # The files were rewritten (so the search above had something to find), and the secrets work.
        assert lb_host.run("grep -c -- %s /etc/llmops-response-cache/env", new[4]).stdout.strip() == "1"
        assert redis_answers(lb_host, new[4]) and not redis_answers(lb_host, REDIS_PASSWORD)
        assert completion_status(new[0]) == 200 and completion_status(new[1]) == 200
        assert completion_status(TENANT_A) == 401
    finally:
        res = rotate(run_play, lab_host, lab)
        assert res.rc == 0, res
    assert completion_status(TENANT_A) == 200
    assert redis_answers(lb_host, REDIS_PASSWORD)
    assert not [w for w in lab if w in res.output], "a lab secret is in the Ansible output"
    assert leaks(lab_host, HOSTS, list(lab), ALLOWED, STAMP) == {}
