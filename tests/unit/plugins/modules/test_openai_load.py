"""openai_load: real concurrency against the loopback stand-in; aggregation and thresholds."""
from __future__ import annotations

import json

import pytest

from ansible_collections.llmops.vllm_cluster.plugins.modules import openai_load


def args(st, **kw):
    base = {'base_url': st.base_url, 'model': st.model, 'requests': 20, 'concurrency': 5, 'request_timeout': 5,
            'deadline': 30}
    base.update(kw)
    return base


def test_concurrency_is_real_and_bounded(openai_server, run_module):
    st = openai_server
    # Long enough answers that 5 clients overlap even on a loaded machine.
    st.delay = 0.3
    result, failed = run_module(openai_load, args(st, requests=20, concurrency=5))
    assert not failed, result
    assert result['succeeded'] == 20 and result['success_ratio'] == 1.0 and result['status_codes'] == {'200': 20}
    assert result['max_in_flight'] == 5 and st.max_in_flight == 5
    # 20 requests of >= 0.3 s at 5 in flight take >= 1.2 s, and far less than serially (6 s).
    assert 1.2 <= result['duration'] < 4.5
    assert result['latency']['count'] == 20 and result['latency']['p50'] >= 0.3
    assert result['latency']['p50'] <= result['latency']['p90'] <= result['latency']['p99']
    assert result['ttft']['count'] == 20
    assert result['output_tokens_total'] == 80 and result['prompt_tokens_total'] == 140
    assert result['output_tokens_per_second'] == pytest.approx(80 / result['duration'], rel=0.05)
    prompts = {r[2]['messages'][0]['content'] for r in st.requests if r[0] == 'POST'}
    assert len(prompts) == 4  # default prompt set used in turn


def test_upstream_distribution_and_skew(openai_server, run_module):
    st = openai_server
    st.upstreams = ['10.0.0.1:8000', '10.0.0.2:8000', '10.0.0.3:8000', '10.0.0.4:8000']  # header values only
    result, failed = run_module(openai_load, args(st, requests=40, concurrency=8, upstream_header='X-Upstream',
                                                  min_upstreams=4, max_distribution_skew=0.0))
    assert not failed, result
    assert result['upstreams'] == dict((u, 10) for u in st.upstreams) and result['distribution_skew'] == 0.0
    st.upstreams = ['a', 'a', 'a', 'b']
    result, failed = run_module(openai_load, args(st, requests=40, concurrency=8, upstream_header='X-Upstream',
                                                  min_upstreams=3, max_distribution_skew=0.5))
    assert failed
    assert "min_upstreams: 2 upstream(s) served requests ({'a': 30, 'b': 10}), required 3" in result['msg']
    assert 'max_distribution_skew: skew 1.0 exceeds 0.5' in result['msg']


def test_failures_counted_and_threshold_names_numbers(openai_server, run_module):
    st = openai_server
    st.completion_status = 503
    result, failed = run_module(openai_load, args(st, min_success_ratio=0.95, stream=False))
    assert failed
    assert result['status_codes'] == {'503': 20} and result['succeeded'] == 0
    assert ("min_success_ratio: 0 of 20 requests succeeded (0.0), required 0.95; status codes {'503': 20}"
            in result['msg'])
    assert result['failures_sample'][0]['status'] == 503 and len(result['failures_sample']) == 5


def test_latency_and_ttft_thresholds(openai_server, run_module):
    st = openai_server
    st.first_token_delay = 0.15
    result, failed = run_module(openai_load, args(st, requests=6, concurrency=3, max_p99_latency=0.05,
                                                  max_p99_ttft=0.1))
    assert failed
    assert 'max_p99_latency: p99 latency' in result['msg'] and 'exceeds 0.05s' in result['msg']
    assert 'max_p99_ttft: p99 TTFT' in result['msg'] and result['ttft']['p50'] >= 0.15


def test_timeouts_and_deadline(openai_server, run_module):
    st = openai_server
    st.delay = 0.5
    result, failed = run_module(openai_load, args(st, requests=6, concurrency=2, request_timeout=0.2, deadline=0.3))
    assert not failed  # no threshold set: measured and reported
    codes = result['status_codes']
    assert codes.get('timeout', 0) >= 2 and codes.get('not_sent', 0) >= 1
    assert sum(codes.values()) == 6 and result['succeeded'] == 0 and result['duration'] < 2


def test_api_key_not_in_result(openai_server, run_module):
    st = openai_server
    st.api_key = 'sk-load-secret'
    result, failed = run_module(openai_load, args(st, api_key='sk-load-secret', requests=4, model=None))
    assert not failed and result['model'] == 'tiny-llama' and 'sk-load-secret' not in json.dumps(result)


def test_check_mode_sends_nothing(openai_server, run_module):
    st = openai_server
    result, failed = run_module(openai_load, dict(args(st), _ansible_check_mode=True))
    assert not failed and result['skipped'] and st.requests == []


@pytest.mark.parametrize('bad, words', [
    ({'concurrency': -1}, 'concurrency must be between 1 and 512, got -1'),
    ({'concurrency': 0}, 'concurrency must be between 1 and 512'),
    ({'concurrency': 1000}, 'concurrency must be between 1 and 512'),
    ({'requests': 0}, 'requests must be between 1 and 100000'),
    ({'model': ''}, 'model must not be empty'),
    ({'prompts': []}, 'prompts must be a non-empty list'),
    ({'prompts': ['a', '']}, 'prompts must be a non-empty list'),
    ({'min_success_ratio': 1.5}, 'min_success_ratio must be between 0 and 1, got 1.5'),
    ({'min_success_ratio': -0.1}, 'min_success_ratio must be between 0 and 1'),
    ({'max_p99_latency': 0}, 'max_p99_latency must be > 0'),
    ({'max_mean_latency': 0}, 'max_mean_latency must be > 0 seconds, got 0.0'),
    ({'min_stream_tokens_per_second': -5}, 'min_stream_tokens_per_second must be > 0, got -5.0'),
    ({'max_p99_ttft': 1, 'stream': False}, 'max_p99_ttft needs stream=true'),
    ({'max_distribution_skew': 0.5}, 'max_distribution_skew needs upstream_header'),
    ({'max_distribution_skew': -1, 'upstream_header': 'X'}, 'max_distribution_skew must be >= 0'),
    ({'min_upstreams': 0, 'upstream_header': 'X'}, 'min_upstreams must be >= 1'),
    ({'deadline': 0}, 'deadline must be > 0'),
    ({'base_url': 'http://host:notaport'}, 'is not a valid URL'),
])
def test_bad_options(openai_server, run_module, bad, words):
    st = openai_server
    result, failed = run_module(openai_load, args(st, **bad))
    assert failed and words in result['msg'], result['msg']
    assert st.requests == []


def test_aggregate_pure():
    ok = {'sent': True, 'ok': True, 'status': 200, 'latency': 1.0, 'ttft': 0.1, 'output_tokens': 10,
          'prompt_tokens': 5, 'upstream': 'a'}
    bad = {'sent': True, 'ok': False, 'status': None, 'error': 'connection refused', 'latency': 0.01,
           'output_tokens': 0}
    skipped = {'sent': False, 'ok': False, 'status': None, 'error': 'not sent (deadline)'}
    figures = openai_load.aggregate([ok, dict(ok, latency=3.0, upstream='b'), bad, skipped],
                                    {'upstream_header': 'X-U'}, 2.0)
    assert figures['status_codes'] == {'200': 2, 'connection refused': 1, 'not_sent': 1}
    assert figures['success_ratio'] == 0.5 and figures['latency']['p50'] == 2.0
    assert figures['upstreams'] == {'a': 1, 'b': 1}  # only requests that got an HTTP answer
    assert figures['failed_requests'] == 2
    assert figures['output_tokens_per_second'] == 10.0 and figures['requests_per_second'] == 1.0


def _ok(latency, decode=None, total=None, upstream='a'):
    return {'sent': True, 'ok': True, 'status': 200, 'latency': latency, 'ttft': 0.1, 'output_tokens': 16,
            'prompt_tokens': 5, 'upstream': upstream, 'decode_tokens_per_second': decode, 'tokens_per_second': total}


def test_aggregate_stream_rate_prefers_decode_and_falls_back_to_whole_rate():
    results = [_ok(1.0, decode=80.0, total=16.0), _ok(1.2, decode=60.0, total=13.3),
               _ok(0.5, decode=None, total=32.0),  # no decode figure: its whole rate counts
               _ok(0.4, decode=None, total=None),  # neither: left out
               {'sent': True, 'ok': False, 'status': 503, 'error': 'HTTP 503', 'latency': 0.01, 'output_tokens': 0,
                'decode_tokens_per_second': 500.0, 'tokens_per_second': 500.0}]  # failed: never counted
    rate = openai_load.aggregate(results, {}, 2.0)['stream_tokens_per_second']
    assert set(rate) == {'count', 'min', 'mean', 'p50', 'p90', 'p99', 'max'}
    assert (rate['count'], rate['min'], rate['p50'], rate['max']) == (3, 32.0, 60.0, 80.0)
    assert rate['mean'] == pytest.approx((80 + 60 + 32) / 3, abs=1e-3)


def test_thresholds_stream_rate_and_mean_latency_met_and_not_met():
    figures = openai_load.aggregate([_ok(1.0, decode=80.0), _ok(2.0, decode=75.0), _ok(1.5, decode=40.0)], {}, 2.0)
    assert figures['latency']['mean'] == 1.5 and figures['stream_tokens_per_second']['p50'] == 75.0
    assert openai_load.check_thresholds(figures, {'max_mean_latency': 1.5, 'min_stream_tokens_per_second': 70}) == []
    problems = openai_load.check_thresholds(figures, {'max_mean_latency': 1.2, 'min_stream_tokens_per_second': 76})
    assert problems == [
        'max_mean_latency: mean latency 1.5s exceeds 1.2s (p50 1.5s, p99 1.99s)',
        'min_stream_tokens_per_second: p50 per-stream output rate 75.0 tok/s is below 76 tok/s (min 40.0, over 3 streams)',
    ]


def test_new_thresholds_with_nothing_succeeded_fail_and_say_so():
    results = [{'sent': True, 'ok': False, 'status': 503, 'error': 'HTTP 503', 'latency': 0.01, 'output_tokens': 0},
               {'sent': False, 'ok': False, 'status': None, 'error': 'not sent (deadline)'}]
    figures = openai_load.aggregate(results, {}, 1.0)
    assert figures['stream_tokens_per_second'] == {'count': 0, 'min': None, 'mean': None, 'p50': None, 'p90': None,
                                                   'p99': None, 'max': None}
    assert figures['latency']['mean'] is None
    assert openai_load.check_thresholds(figures, {}) == []  # nothing set, nothing checked
    problems = openai_load.check_thresholds(figures, {'max_mean_latency': 1.5, 'min_stream_tokens_per_second': 70.0,
                                                      'max_p99_latency': 3.0})
    assert problems == [
        'max_p99_latency: no successful request to measure, limit 3.0s',
        'max_mean_latency: no successful request to measure, limit 1.5s',
        'min_stream_tokens_per_second: no successful stream to measure, limit 70.0 tok/s',
    ]


def test_stream_rate_and_mean_latency_through_the_module(openai_server, run_module):
    st = openai_server
    st.first_token_delay = 0.05
    result, failed = run_module(openai_load, args(st, requests=6, concurrency=3))
    assert not failed, result
    rate = result['stream_tokens_per_second']
    assert rate['count'] == 6 and 0 < rate['min'] <= rate['p50'] <= rate['max']
    result, failed = run_module(openai_load, args(st, requests=6, concurrency=3, max_mean_latency=0.001,
                                                  min_stream_tokens_per_second=1e9))
    assert failed
    assert 'max_mean_latency: mean latency' in result['msg'] and 'exceeds 0.001s' in result['msg']
    assert 'min_stream_tokens_per_second: p50 per-stream output rate' in result['msg']
    assert 'is below 1000000000.0 tok/s' in result['msg']
    assert len(result['threshold_failures']) == 2


def test_itl_is_each_streams_mean_gap_after_the_first_token():
    one = dict(_ok(1.6), output_tokens=16)            # (1.6 - 0.1) / 15 = 0.1
    two = dict(_ok(0.4), output_tokens=4)             # (0.4 - 0.1) / 3 = 0.1
    three = dict(_ok(0.7), output_tokens=7)           # (0.7 - 0.1) / 6 = 0.1
    single = dict(_ok(0.3), output_tokens=1)          # one token: no gap
    no_ttft = dict(_ok(0.9), ttft=None)               # not streamed: no gap
    itl = openai_load.aggregate([one, two, three, single, no_ttft], {}, 2.0)['itl']
    assert itl['count'] == 3 and itl['p50'] == pytest.approx(0.1) and itl['max'] == pytest.approx(0.1)
    slow = dict(_ok(3.1), output_tokens=16)           # (3.1 - 0.1) / 15 = 0.2
    itl = openai_load.aggregate([one, slow], {}, 2.0)['itl']
    assert (itl['min'], itl['max']) == (pytest.approx(0.1), pytest.approx(0.2))
    assert openai_load.aggregate([single], {}, 1.0)['itl']['count'] == 0


def test_itl_through_the_module(openai_server, run_module):
    st = openai_server
    st.first_token_delay = 0.05
    st.token_delay = 0.02
    result, failed = run_module(openai_load, args(st, requests=4, concurrency=2, max_tokens=8))
    assert not failed, result
    # Each stream's gaps are the stand-in's 0.02 s between tokens (and a little for the network).
    assert result['itl']['count'] == 4 and 0.02 <= result['itl']['p50'] < 0.2, result['itl']


def test_samples_per_successful_request_only_when_asked():
    results = [_ok(1.0, decode=80.0, upstream='a'), _ok(2.5, decode=None, total=6.4, upstream='b'),
               {'sent': True, 'ok': False, 'status': 503, 'error': 'HTTP 503', 'latency': 0.01, 'output_tokens': 0},
               dict(_ok(0.123456), ttft=None, decode_tokens_per_second=None, tokens_per_second=None)]
    assert 'samples' not in openai_load.aggregate(results, {}, 2.0)
    samples = openai_load.aggregate(results, {'samples': True}, 2.0)['samples']
    assert samples == {'latency': [1.0, 2.5, 0.1235], 'ttft': [0.1, 0.1, None],
                       'stream_tokens_per_second': [80.0, 6.4, None], 'upstream': ['a', 'b', 'a']}


def test_samples_through_the_module(openai_server, run_module):
    st = openai_server
    st.upstreams = ['10.0.0.1:8000', '10.0.0.2:8000']
    result, failed = run_module(openai_load, args(st, requests=6, concurrency=3, upstream_header='X-Upstream', samples=True))
    assert not failed, result
    samples = result['samples']
    assert all(len(samples[k]) == 6 for k in ('latency', 'ttft', 'stream_tokens_per_second', 'upstream')), samples
    assert sorted(set(samples['upstream'])) == st.upstreams and all(v > 0 for v in samples['latency'])
    result, failed = run_module(openai_load, args(st, requests=2, concurrency=2))
    assert not failed and 'samples' not in result
