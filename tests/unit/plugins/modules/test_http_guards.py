"""The three HTTP modules end within their timeout against a server that trickles a byte at a
time, and never show the values of the `headers` option (no_log). Real HTTP on 127.0.0.1 (the
stand-in in conftest.py)."""
from __future__ import annotations

import json
import time

import pytest

from ansible_collections.llmops.vllm_cluster.plugins.module_utils._openai_http import http_argument_spec
from ansible_collections.llmops.vllm_cluster.plugins.modules import openai_endpoint, openai_load, vllm_metrics

SECRET = 'tenant-header-secret-value'
SLACK = 0.6


def test_headers_option_is_no_log():
    assert http_argument_spec()['headers'].get('no_log') is True


@pytest.mark.parametrize('module, args', [
    (vllm_metrics, {'request_timeout': 1}),
    (openai_endpoint, {'timeout': 1, 'request_timeout': 30, 'delay': 0.1}),
    (openai_load, {'model': 'tiny-llama', 'requests': 2, 'concurrency': 2, 'request_timeout': 1,
                   'min_success_ratio': 1}),
], ids=['vllm_metrics', 'openai_endpoint', 'openai_load'])
def test_module_returns_within_its_timeout_against_a_trickling_server(openai_server, run_module, module, args):
    openai_server.trickle = 0.05  # 400 bytes, one every 50 ms
    start = time.monotonic()
    result, failed = run_module(module, dict(args, base_url=openai_server.base_url, headers={'X-Tenant': SECRET}))
    elapsed = time.monotonic() - start
    assert failed, result
    assert elapsed < 1 + SLACK, (elapsed, result.get('msg'))
    assert 'timeout' in json.dumps(result)
    assert SECRET not in json.dumps(result)


def test_header_values_hidden_in_the_output(openai_server, run_module):
    openai_server.metrics = 'vllm:num_requests_waiting{model_name="m"} 1\n'
    result, failed = run_module(vllm_metrics, {'base_url': openai_server.base_url, 'headers': {'X-Tenant': SECRET}})
    assert not failed, result
    assert openai_server.requests[-1][3].get('X-Tenant') == SECRET  # it was sent...
    assert SECRET not in json.dumps(result)  # ...and is not in what the task shows


def test_max_response_size_is_checked(openai_server, run_module):
    result, failed = run_module(vllm_metrics, {'base_url': openai_server.base_url, 'max_response_size': 10})
    assert failed and 'max_response_size must be >= 1024' in result['msg']
    openai_server.metrics = 'vllm:num_requests_waiting{model_name="m"} 1\n' * 1000
    result, failed = run_module(vllm_metrics, {'base_url': openai_server.base_url, 'max_response_size': 4096})
    assert failed and 'max_response_size' in result['msg'] and 'Traceback' not in json.dumps(result)
