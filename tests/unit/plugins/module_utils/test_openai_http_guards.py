"""_openai_http's guards against a hostile or broken server, with real HTTP on 127.0.0.1 (the
stand-ins in conftest.py): the key never follows a redirect to another origin, answers are read up
to a size limit, and one deadline holds a request that trickles a byte at a time."""
from __future__ import annotations

import time

import pytest

from ansible_collections.llmops.vllm_cluster.plugins.module_utils import _openai_http as oh

KEY = 'sekret-key-0123456789'
TENANT = 'tenant-header-secret'


def _leaked(server):
    """Every request the server saw that carried the key or the secret header."""
    return [r for r in server.requests
            if any(KEY in str(v) or TENANT in str(v) for v in r[3].values())]


@pytest.mark.parametrize('target', ['other port', 'other host name'])
def test_get_redirect_to_another_origin_is_refused(openai_server, other_server, target):
    port = other_server.base_url.rsplit(':', 1)[1]
    location = other_server.base_url if target == 'other port' else 'http://localhost:%s' % port
    openai_server.redirects['/v1/models'] = location + '/v1/models'
    resp = oh.http_request(openai_server.base_url + '/v1/models', headers=oh.build_headers(KEY, {'X-Tenant': TENANT}),
                           timeout=5)
    assert other_server.requests == [] and _leaked(other_server) == []
    assert resp['status'] is None and 'redirect refused' in resp['error'] and 'another origin' in resp['error']
    assert KEY not in resp['error']


@pytest.mark.parametrize('stream', [True, False])
def test_post_redirect_to_another_origin_is_refused(openai_server, other_server, stream):
    openai_server.redirects['/v1/chat/completions'] = other_server.base_url + '/v1/chat/completions'
    res = oh.completion(openai_server.base_url, 'chat', 'tiny-llama', 'x', stream=stream,
                        headers=oh.build_headers(KEY, {'X-Tenant': TENANT}), timeout=5)
    assert other_server.requests == [] and not res['ok']
    if res['status'] is None:
        assert 'redirect refused' in res['error']
    else:
        assert res['status'] == 307  # a POST's redirect is answered as it came, never followed


def test_same_origin_redirect_of_a_get_is_followed_with_the_key(openai_server):
    openai_server.api_key = KEY
    openai_server.redirects['/models'] = '/v1/models'
    resp = oh.http_request(openai_server.base_url + '/models', headers=oh.build_headers(KEY), timeout=5)
    assert resp['status'] == 200 and oh.model_ids(resp['body']) == ['tiny-llama']


@pytest.mark.parametrize('chunked', [False, True])
def test_a_body_over_the_limit_fails_cleanly(openai_server, chunked):
    openai_server.metrics = 'vllm:x 1\n' * 300000  # 2.7 MB
    openai_server.chunked_metrics = chunked
    resp = oh.http_request(openai_server.base_url + '/metrics', timeout=10, max_size=1024 * 1024)
    assert resp['status'] is None and resp['body'] == b''
    assert 'max_response_size' in resp['error'] and '1048576' in resp['error']
    ok = oh.http_request(openai_server.base_url + '/metrics', timeout=10, max_size=4 * 1024 * 1024)
    assert ok['status'] == 200 and len(ok['body']) == 2700000


def test_a_stream_over_the_limit_fails_cleanly(openai_server):
    openai_server.tokens = ['word '] * 2000
    res = oh.completion(openai_server.base_url, 'completion', 'tiny-llama', 'x', max_tokens=2000, stream=True,
                        timeout=10, max_size=16 * 1024)
    assert not res['ok'] and 'max_response_size' in res['error']


def test_trickled_body_stops_at_the_deadline(openai_server):
    # 400 bytes, one every 50 ms: 20 s to the end. Every read gets a byte well within the timeout,
    # so only an overall deadline stops it.
    openai_server.trickle = 0.05
    start = time.monotonic()
    resp = oh.http_request(openai_server.base_url + '/metrics', timeout=1.0)
    elapsed = time.monotonic() - start
    assert resp['status'] is None and resp['error'] == 'timeout'
    assert elapsed < 1.5, elapsed


def test_trickled_headers_stop_at_the_deadline(openai_server):
    # The status line and headers themselves one byte every 50 ms (http.client reads them line by line).
    openai_server.trickle = 0.05
    openai_server.trickle_head = True
    start = time.monotonic()
    resp = oh.http_request(openai_server.base_url + '/health', timeout=1.0)
    assert resp['status'] is None and resp['error'] == 'timeout'
    assert time.monotonic() - start < 1.5


def test_trickled_stream_stops_at_the_deadline(openai_server):
    openai_server.trickle = 0.05
    start = time.monotonic()
    res = oh.completion(openai_server.base_url, 'completion', 'tiny-llama', 'x', stream=True, timeout=1.0)
    elapsed = time.monotonic() - start
    assert not res['ok'] and res['error'].startswith('timeout'), res
    assert elapsed < 1.5, elapsed


def test_an_earlier_deadline_wins_over_the_timeout(openai_server):
    openai_server.trickle = 0.05
    start = time.monotonic()
    resp = oh.http_request(openai_server.base_url + '/health', timeout=30, deadline=start + 0.8)
    assert resp['error'] == 'timeout' and time.monotonic() - start < 1.3
