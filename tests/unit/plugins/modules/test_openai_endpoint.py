"""openai_endpoint main() against the loopback stand-in server (conftest.openai_server)."""
from __future__ import annotations

import json
import socket

import pytest

from ansible_collections.llmops.vllm_cluster.plugins.modules import openai_endpoint


def args(st, **kw):
    base = {'base_url': st.base_url, 'model': st.model, 'timeout': 5, 'delay': 0.05, 'request_timeout': 3}
    base.update(kw)
    return base


def test_ready_reports_stages_and_speed(openai_server, run_module):
    st = openai_server
    st.first_token_delay = 0.05
    result, failed = run_module(openai_endpoint, args(st))
    assert not failed, result
    assert result['ready'] is True and result['changed'] is False and result['attempts'] == 1
    assert set(result['stages']) == {'health', 'models', 'completion'}
    assert all(s['status'] == 200 for s in result['stages'].values())
    assert result['models'] == ['tiny-llama'] and result['model'] == 'tiny-llama'
    assert 0.05 <= result['ttft'] <= result['latency']
    assert result['output_tokens'] == 4 and result['tokens_per_second'] > 0
    assert result['usage']['completion_tokens'] == 4 and result['text'] == 'Hello, world!'
    paths = [r[1] for r in st.requests]
    assert paths == ['/health', '/v1/models', '/v1/chat/completions']


def test_health_503_then_ready_is_retried(openai_server, run_module):
    st = openai_server
    st.health_failures = 2
    st.models_failures = 1
    result, failed = run_module(openai_endpoint, args(st, api='completion', stream=False))
    assert not failed and result['attempts'] == 4 and result['ttft'] is None
    assert st.requests[-1][1] == '/v1/completions' and 'prompt' in st.requests[-1][2]


def test_health_200_is_not_readiness(openai_server, run_module):
    """/health answers 200 but the engine cannot generate: not ready, stage completion."""
    st = openai_server
    st.completion_status = 500
    result, failed = run_module(openai_endpoint, args(st, retries=2))
    assert failed and result['ready'] is False and result['failed_stage'] == 'completion'
    assert result['stages']['health']['status'] == 200 and result['status'] == 500
    assert 'engine dead' in result['body'] and result['attempts'] == 2
    assert result['msg'].startswith("stage 'completion' failed after 2 attempt(s)")


def test_wrong_model_fails_at_models_stage(openai_server, run_module):
    st = openai_server
    result, failed = run_module(openai_endpoint, args(st, model='other-model', timeout=0.3))
    assert failed and result['failed_stage'] == 'models'
    assert "model 'other-model' is not served; /v1/models lists: tiny-llama" in result['msg']
    assert result['models'] == ['tiny-llama'] and result['elapsed'] < 2


def test_api_key_is_used_and_never_returned(openai_server, run_module):
    st = openai_server
    st.api_key = 'sk-very-secret-123'
    result, failed = run_module(openai_endpoint, args(st, api_key='sk-very-secret-123'))
    assert not failed
    assert st.requests[-1][3]['Authorization'] == 'Bearer sk-very-secret-123'
    assert 'sk-very-secret-123' not in json.dumps(result)


def test_wrong_api_key_stops_at_once(openai_server, run_module):
    st = openai_server
    st.api_key = 'right'
    result, failed = run_module(openai_endpoint, args(st, api_key='wrong-key-xyz', timeout=30))
    assert failed and result['failed_stage'] == 'models' and result['status'] == 401
    assert result['attempts'] == 1 and 'valid api_key' in result['msg']
    assert 'wrong-key-xyz' not in json.dumps(result)


def test_no_model_given_takes_first_listed(openai_server, run_module):
    st = openai_server
    result, failed = run_module(openai_endpoint, args(st, model=None, health_path=''))
    assert not failed and result['model'] == 'tiny-llama' and 'health' not in result['stages']


def test_min_output_tokens(openai_server, run_module):
    st = openai_server
    st.tokens = ['a']
    result, failed = run_module(openai_endpoint, args(st, min_output_tokens=2, retries=1))
    assert failed and 'returned 1 token(s), fewer than min_output_tokens=2' in result['msg']


def test_timeout_while_server_down(run_module):
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        port = sock.getsockname()[1]
    result, failed = run_module(openai_endpoint, {'base_url': 'http://127.0.0.1:%d' % port, 'timeout': 0.5,
                                                  'delay': 0.1})
    assert failed and result['failed_stage'] == 'health' and result['status'] is None
    assert 'connection refused' in result['msg'] and result['attempts'] >= 2


@pytest.mark.parametrize('bad, words', [
    ({'base_url': 'localhost:8000'}, 'must start with http:// or https://'),
    ({'base_url': 'http://:8000'}, 'has no host name'),
    ({'model': ''}, 'model must not be empty'),
    ({'model': '  '}, 'model must not be empty'),
    ({'max_tokens': 0}, 'max_tokens must be >= 1'),
    ({'min_output_tokens': 20}, 'min_output_tokens must be between 1 and max_tokens (16)'),
    ({'timeout': -1}, 'timeout must be > 0'),
    ({'delay': -1}, 'delay must be >= 0'),
    ({'retries': 0}, 'retries must be >= 1'),
    ({'health_path': 'health'}, "health_path must start with '/'"),
    ({'request_timeout': 0}, 'request_timeout must be > 0'),
    ({'api': 'embeddings'}, 'value of api must be one of: chat, completion'),
])
def test_bad_options(openai_server, run_module, bad, words):
    st = openai_server
    result, failed = run_module(openai_endpoint, args(st, **bad))
    assert failed and words in result['msg']
    assert st.requests == []  # nothing was sent


def test_an_attempt_cut_by_the_deadline_keeps_the_answer_before_it(openai_server, run_module):
    # The first attempt is answered (wrong model), the next is cut by the deadline while the server
    # is slow: the failure names the answer, not the cut.
    st = openai_server
    st.models_answered = 1
    result, failed = run_module(openai_endpoint, args(st, model='other-model', timeout=1.0, delay=0.05))
    assert failed and result['failed_stage'] == 'models'
    assert "model 'other-model' is not served" in result['msg'], result['msg']
    assert "cut by the timeout" in result['msg'] and result['attempts'] == 2, result
