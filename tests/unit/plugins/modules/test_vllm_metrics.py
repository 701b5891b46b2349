"""vllm_metrics main() reading /metrics from the loopback stand-in server."""
from __future__ import annotations

import os

import pytest

from ansible_collections.llmops.vllm_cluster.plugins.modules import vllm_metrics

FIX = os.path.join(os.path.dirname(__file__), '..', '..', 'fixtures', 'vllm')


@pytest.fixture
def served(openai_server):
    with open(os.path.join(FIX, 'constructed_v1_two_engines.txt')) as handle:
        openai_server.metrics = handle.read()
    return openai_server


def test_reads_figures(served, run_module):
    result, failed = run_module(vllm_metrics, {'base_url': served.base_url + '/v1'})
    assert not failed, result
    assert result['model'] == 'qwen3-8b' and list(result['models']) == ['qwen3-8b']
    f = result['figures']
    assert f['requests_waiting'] == 7 and f['kv_cache_usage_perc'] == 0.5
    assert f['spec_decode']['acceptance_rate'] == 0.6 and f['spec_decode']['mean_accepted_length'] == 4.0
    assert f['ttft_seconds']['p99'] == 1.0 and result['threshold_failures'] == [] and result['parse_errors'] == []
    assert served.requests[-1][1] == '/metrics'


def test_thresholds_fail_with_numbers(served, run_module):
    result, failed = run_module(vllm_metrics, {'base_url': served.base_url, 'max_requests_waiting': 5,
                                               'max_kv_cache_usage': 0.9, 'min_spec_acceptance_rate': 0.7})
    assert failed
    assert result['msg'] == ('vLLM metrics thresholds not met: max_requests_waiting: requests waiting is 7.0, '
                             'limit 5; min_spec_acceptance_rate: draft acceptance rate is 0.6, limit 0.7')
    assert result['figures']['requests_waiting'] == 7


def test_unknown_model(served, run_module):
    result, failed = run_module(vllm_metrics, {'base_url': served.base_url, 'model': 'nope'})
    assert failed and "model 'nope' has no metrics; models with metrics: qwen3-8b" in result['msg']


def test_several_models_thresholds_apply_to_each(openai_server, run_module):
    openai_server.metrics = ('vllm:num_requests_waiting{model_name="a"} 1\n'
                             'vllm:num_requests_waiting{model_name="b"} 9\n')
    result, failed = run_module(vllm_metrics, {'base_url': openai_server.base_url, 'max_requests_waiting': 5})
    assert failed and result['model'] is None
    assert result['threshold_failures'] == ['b: max_requests_waiting: requests waiting is 9.0, limit 5']


@pytest.mark.parametrize('garbage', ['', 'hello world\n<html>', 'up 1\nnode_load1 0.5\n'])
def test_garbage_metrics_text(openai_server, run_module, garbage):
    openai_server.metrics = garbage
    result, failed = run_module(vllm_metrics, {'base_url': openai_server.base_url})
    assert failed and "no vllm: series in the metrics text: is this a vLLM server's /metrics?" in result['msg']


def test_metrics_404(openai_server, run_module):
    result, failed = run_module(vllm_metrics, {'base_url': openai_server.base_url, 'metrics_path': '/nope'})
    assert failed and result['msg'] == 'GET /nope answered HTTP 404' and result['status'] == 404


@pytest.mark.parametrize('bad, words', [
    ({'max_kv_cache_usage': 90}, 'max_kv_cache_usage is a fraction and must be between 0 and 1, got 90'),
    ({'min_spec_acceptance_rate': -0.2}, 'min_spec_acceptance_rate is a fraction'),
    ({'max_requests_waiting': -1}, 'max_requests_waiting must be >= 0'),
    ({'max_ttft_p99': 0}, 'max_ttft_p99 must be > 0'),
    ({'model': ''}, 'model must not be empty'),
    ({'metrics_path': 'metrics'}, "metrics_path must start with '/'"),
    ({'base_url': 'metrics.example'}, 'must start with http://'),
])
def test_bad_options(served, run_module, bad, words):
    result, failed = run_module(vllm_metrics, dict({'base_url': served.base_url}, **bad))
    assert failed and words in result['msg']
    assert served.requests == []


def test_non_finite_samples_give_null_figures_not_a_traceback(openai_server, run_module):
    # `_count +Inf`, `NaN` and `-Inf` are valid sample values of the text format.
    openai_server.metrics = ('vllm:num_requests_waiting{model_name="m"} NaN\n'
                             'vllm:num_requests_running{model_name="m"} -Inf\n'
                             'vllm:request_success_total{model_name="m"} +Inf\n'
                             'vllm:time_to_first_token_seconds_count{model_name="m"} +Inf\n'
                             'vllm:time_to_first_token_seconds_sum{model_name="m"} NaN\n'
                             'vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} +Inf\n'
                             'vllm:generation_tokens_total{model_name="m"} 12\n')
    result, failed = run_module(vllm_metrics, {'base_url': openai_server.base_url})
    assert not failed, result
    f = result['figures']
    assert f['requests_waiting'] is None and f['requests_running'] is None and f['requests_success_total'] is None
    assert f['ttft_seconds']['count'] is None and f['ttft_seconds']['p99'] is None
    assert f['generation_tokens_total'] == 12 and result['parse_errors'] == []
    result, failed = run_module(vllm_metrics, {'base_url': openai_server.base_url, 'max_requests_waiting': 5})
    assert failed and 'not a finite number' in result['msg']
