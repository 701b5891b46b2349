"""_openai_http against a real HTTP server on 127.0.0.1 (the stand-in in conftest.py)."""
from __future__ import annotations

import socket

import pytest

from ansible_collections.llmops.vllm_cluster.plugins.module_utils import _openai_http as oh


@pytest.mark.parametrize('url, expected', [
    ('http://127.0.0.1:8000', 'http://127.0.0.1:8000'),
    ('http://127.0.0.1:8000/', 'http://127.0.0.1:8000'),
    ('http://127.0.0.1:8000/v1', 'http://127.0.0.1:8000'),
    ('https://llm.example/v1/', 'https://llm.example'),
    ('https://llm.example/prefix/v1', 'https://llm.example/prefix'),
    ('  http://[::1]:8000  ', 'http://[::1]:8000'),
])
def test_normalize_base_url(url, expected):
    assert oh.normalize_base_url(url) == expected


@pytest.mark.parametrize('url, words', [
    ('', 'non-empty'), ('127.0.0.1:8000', 'http://'), ('ftp://host', 'http://'), ('http://', 'no host'),
    ('http://host:port', 'not a valid URL'), ('http://host:99999', 'not a valid URL'),
    ('http://host/?a=1', 'query'), (None, 'non-empty'),
])
def test_normalize_base_url_rejects(url, words):
    with pytest.raises(ValueError) as exc:
        oh.normalize_base_url(url)
    assert words in str(exc.value)


def test_build_headers_never_leaks_elsewhere():
    h = oh.build_headers('sekret', {'X-A': 1})
    assert h['Authorization'] == 'Bearer sekret' and h['X-A'] == '1'
    assert 'Authorization' not in oh.build_headers(None, None)


def test_completion_body_matches_endpoint():
    chat = oh.completion_body('chat', 'm', 'hi', 8, True)
    assert chat['messages'] == [{'role': 'user', 'content': 'hi'}] and 'prompt' not in chat
    assert chat['stream_options'] == {'include_usage': True}
    comp = oh.completion_body('completion', 'm', 'hi', 8, False, {'temperature': 0})
    assert comp['prompt'] == 'hi' and 'messages' not in comp and comp['temperature'] == 0
    assert 'stream_options' not in comp
    with pytest.raises(ValueError):
        oh.completion_body('embeddings', 'm', 'hi', 8, False)


def test_model_ids():
    assert oh.model_ids(b'{"object":"list","data":[{"id":"a"},{"id":"b"}]}') == ['a', 'b']
    assert oh.model_ids(b'<html>') is None
    assert oh.model_ids(b'{"data": 3}') is None


def test_http_request_statuses(openai_server):
    st = openai_server
    st.health_failures = 1
    first = oh.http_request(st.base_url + '/health')
    assert first['status'] == 503 and b'loading' in first['body'] and first['error'] is None
    assert oh.http_request(st.base_url + '/health')['status'] == 200
    assert oh.http_request(st.base_url + '/nope')['status'] == 404


def test_http_request_connection_refused():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        port = sock.getsockname()[1]
    resp = oh.http_request('http://127.0.0.1:%d/health' % port, timeout=2)
    assert resp['status'] is None and resp['error'] == 'connection refused'


@pytest.mark.parametrize('api', ['chat', 'completion'])
def test_streaming_completion_measures_ttft(openai_server, api):
    st = openai_server
    st.first_token_delay = 0.2
    res = oh.completion(st.base_url, api, st.model, 'hello', max_tokens=16, stream=True, headers={}, timeout=5)
    assert res['ok'], res
    assert res['text'] == 'Hello, world!'
    assert res['output_tokens'] == 4 and res['tokens_counted_from'] == 'usage' and res['prompt_tokens'] == 7
    assert 0.2 <= res['ttft'] <= res['latency'] < 2  # both rounded to 0.1 ms: the rest may arrive within it
    assert res['finish_reason'] == 'length'
    assert res['role'] == ('assistant' if api == 'chat' else None)  # a chat answer names its author
    assert res['tokens_per_second'] == pytest.approx(4 / res['latency'], rel=0.01)
    method, path, body, _headers = st.requests[-1]
    assert path == ('/v1/chat/completions' if api == 'chat' else '/v1/completions')
    assert ('messages' in body) == (api == 'chat') and ('prompt' in body) == (api == 'completion')


@pytest.mark.parametrize('api', ['chat', 'completion'])
def test_streaming_completion_without_text_still_has_a_ttft(openai_server, api):
    # A model whose first token is its end-of-sequence token: one chunk, empty text, a finish reason.
    # (The integration test's tiny model does this now and then: 39 of 40 requests had a TTFT.)
    st = openai_server
    st.tokens = ['']
    st.first_token_delay = 0.1
    res = oh.completion(st.base_url, api, st.model, 'hello', max_tokens=16, stream=True, headers={}, timeout=5)
    assert res['ok'] and res['text'] == '' and res['output_tokens'] == 1, res
    assert 0.1 <= res['ttft'] <= res['latency'] < 2 and res['finish_reason'] == 'length'


def test_streaming_without_usage_counts_chunks(openai_server):
    st = openai_server
    st.send_usage = False
    res = oh.completion(st.base_url, 'chat', st.model, 'x', stream=True, timeout=5)
    assert res['ok'] and res['output_tokens'] == 4 and res['tokens_counted_from'] == 'chunks'


def test_non_streaming_completion(openai_server):
    st = openai_server
    res = oh.completion(st.base_url, 'completion', st.model, 'x', stream=False, timeout=5, upstream_header='X-Upstream')
    assert res['ok'] and res['ttft'] is None and res['output_tokens'] == 4 and res['text'] == 'Hello, world!'
    assert res['role'] is None
    chat = oh.completion(st.base_url, 'chat', st.model, 'x', stream=False, timeout=5)
    assert chat['ok'] and chat['role'] == 'assistant' and chat['text'] == 'Hello, world!', chat


def test_broken_stream_is_a_failure(openai_server):
    st = openai_server
    st.break_stream = True
    res = oh.completion(st.base_url, 'chat', st.model, 'x', stream=True, timeout=5)
    assert not res['ok'] and res['error'] == 'the stream ended without data: [DONE]'


def test_no_tokens_is_a_failure(openai_server):
    st = openai_server
    st.tokens = []
    res = oh.completion(st.base_url, 'chat', st.model, 'x', stream=False, timeout=5)
    assert not res['ok'] and 'generated no tokens' in res['error']


def test_http_error_and_auth(openai_server):
    st = openai_server
    st.api_key = 'k1'
    res = oh.completion(st.base_url, 'chat', st.model, 'x', stream=True, timeout=5)
    assert res['status'] == 401 and not res['ok'] and 'Unauthorized' in res['body']
    res = oh.completion(st.base_url, 'chat', st.model, 'x', stream=True, timeout=5,
                        headers=oh.build_headers('k1'))
    assert res['ok']
    st.completion_status = 500
    res = oh.completion(st.base_url, 'chat', st.model, 'x', stream=False, timeout=5, headers=oh.build_headers('k1'))
    assert res['status'] == 500 and res['error'] == 'HTTP 500' and 'engine dead' in res['body']


def test_timeout(openai_server):
    st = openai_server
    st.delay = 1.5
    res = oh.completion(st.base_url, 'chat', st.model, 'x', stream=True, timeout=0.3)
    assert not res['ok'] and res['status'] is None and res['error'] == 'timeout'
    assert res['latency'] < 1.4


def test_truncate():
    assert oh.truncate(b'x' * 600).endswith('...(100 more characters)')
    assert oh.truncate('short') == 'short' and oh.truncate(None) is None
