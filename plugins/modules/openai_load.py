#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.vllm_cluster contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: openai_load
short_description: Bounded concurrent load test of an OpenAI-compatible endpoint
version_added: 0.1.0
description:
  - Sends O(requests) completions with at most O(concurrency) in flight (real threads, each request
    on its own connection), streaming or not, and measures every one.
  - Returns the status-code histogram, the success ratio, latency and (streaming) time-to-first-token
    percentiles, aggregate output tokens per second, each stream's own output tokens per second, the
    highest concurrency actually reached and,
    when the balancer names the upstream in a response header (O(upstream_header)), how the requests
    spread over the upstreams.
  - Optional thresholds fail the task with the measured numbers.
  - The load is bounded - O(requests) in total, O(concurrency) at a time, O(request_timeout) per request
    and O(deadline) overall (requests not started by then count as not sent, that is failed).
author:
  - llmops.vllm_cluster developers (@llmops)
extends_documentation_fragment:
  - llmops.vllm_cluster.openai_http
  - llmops.vllm_cluster.read_only
options:
  model:
    description:
      - Model name to request. When not set, the first model listed by C(/v1/models) is used.
    type: str
  requests:
    description:
      - Number of requests to send (1 to 100000).
    type: int
    default: 100
  concurrency:
    description:
      - Most requests in flight at once (1 to 512).
    type: int
    default: 10
  api:
    description:
      - V(chat) sends C(messages) to C(/v1/chat/completions); V(completion) sends C(prompt) to C(/v1/completions).
    type: str
    choices: [chat, completion]
    default: chat
  stream:
    description:
      - Stream the answers (server-sent events) and measure the time to the first token.
    type: bool
    default: true
  max_tokens:
    description:
      - Largest number of tokens each request may generate.
    type: int
    default: 32
  prompts:
    description:
      - Prompts used in turn, request I(i) gets prompt I(i mod len(prompts)).
    type: list
    elements: str
    default:
      - Write one sentence about the sea.
      - List three prime numbers.
      - Explain what a load balancer does.
      - Name a colour and a fruit.
  extra_body:
    description:
      - 'Extra fields merged into every request, for example V({"ignore_eos": true}) (vLLM) for a fixed output length.'
    type: dict
    default: {}
  deadline:
    description:
      - Seconds the whole test may take; requests not started by then are not sent and count as failed.
    type: float
    default: 600
  upstream_header:
    description:
      - Response header that names the upstream that served the request (for example C(X-Upstream-Addr)
        added by nginx with C(add_header X-Upstream-Addr $upstream_addr)). Enables RV(upstreams).
    type: str
  min_success_ratio:
    description:
      - Fail when fewer than this fraction of the requests succeed (0 to 1, V(1) means all).
    type: float
  max_p99_latency:
    description:
      - Fail when the 99th percentile latency of the successful requests exceeds this many seconds.
    type: float
  max_p99_ttft:
    description:
      - Fail when the 99th percentile time to first token exceeds this many seconds (needs O(stream)).
    type: float
  max_mean_latency:
    description:
      - Fail when the mean latency of the successful requests exceeds this many seconds.
      - Answers a target such as "under 1.5 s on average at 100 concurrent requests"; the mean hides the
        tail, so pair it with O(max_p99_latency).
      - Fails too when no request succeeded (nothing to measure).
    type: float
  min_stream_tokens_per_second:
    description:
      - Fail when the median (p50) per-stream output rate of the successful requests is below this many
        tokens per second (RV(stream_tokens_per_second)).
      - The median is the typical stream, the rate one user sees. The mean lets a few fast streams hide
        slow ones, and the minimum fails on the one stream that waited behind a prefill; the minimum is
        reported beside it (RV(stream_tokens_per_second)) and in the failure message.
      - Each stream's rate is its output tokens after the first over the time after the first token
        (the decode rate, measured when streaming); a request without that figure counts with its tokens over
        its whole latency.
      - Fails too when no request succeeded (nothing to measure).
    type: float
  max_distribution_skew:
    description:
      - Fail when the requests spread unevenly over the upstreams - (max - min) / mean of the per-upstream
        counts exceeds this (0 is a perfectly even split). Needs O(upstream_header).
    type: float
  min_upstreams:
    description:
      - Fail when fewer distinct upstreams served requests. Needs O(upstream_header).
    type: int
  samples:
    description:
      - Also return RV(samples), each successful request's own latency, TTFT, output rate and upstream, for a
        report that draws their distributions.
    type: bool
    default: false
attributes:
  check_mode:
    description: Can run in check mode and return the same result without changing the target.
    support: partial
    details: In check mode no request is sent; the task reports what it would send and is skipped.
seealso:
  - module: llmops.vllm_cluster.openai_endpoint
  - module: llmops.vllm_cluster.vllm_metrics
'''

EXAMPLES = r'''
- name: 100 requests, 20 at a time, all must succeed and reach all four replicas evenly
  llmops.vllm_cluster.openai_load:
    base_url: http://llm.internal.example
    model: deepseek-v4-flash
    api_key: "{{ vllm_api_key }}"
    requests: 100
    concurrency: 20
    max_tokens: 64
    upstream_header: X-Upstream-Addr
    min_success_ratio: 1.0
    min_upstreams: 4
    max_distribution_skew: 0.5
    max_p99_latency: 30
  register: load

- name: The seed's figures - every request answered, over 70 output tok/s per stream, under 1.5 s on average
  llmops.vllm_cluster.openai_load:
    base_url: http://llm.internal.example
    model: deepseek-v4-flash
    requests: 100
    concurrency: 100
    max_tokens: 16
    upstream_header: X-Upstream-Addr
    min_success_ratio: 1.0
    max_distribution_skew: 0.2
    min_stream_tokens_per_second: 70
    max_mean_latency: 1.5
  register: seed_load

- name: Report
  ansible.builtin.debug:
    msg: >-
      {{ load.succeeded }}/{{ load.requests }} ok, p99 {{ load.latency.p99 }} s, mean {{ load.latency.mean }} s,
      {{ load.output_tokens_per_second }} tok/s, {{ load.stream_tokens_per_second.p50 }} tok/s per stream (p50),
      per upstream {{ load.upstreams }}
'''

RETURN = r'''
requests:
  description: Requests asked for.
  returned: always
  type: int
  sample: 100
concurrency:
  description: Concurrency asked for.
  returned: always
  type: int
  sample: 100
max_in_flight:
  description: Highest number of requests actually in flight at the same time.
  returned: success
  type: int
  sample: 100
sent:
  description: Requests sent.
  returned: success
  type: int
  sample: 100
succeeded:
  description: Requests answered 200 with at least one generated token.
  returned: success
  type: int
  sample: 100
failed_requests:
  description: Requests that did not succeed, the ones not sent included.
  returned: success
  type: int
  sample: 0
not_sent:
  description: Requests not started before O(deadline).
  returned: success
  type: int
  sample: 0
success_ratio:
  description: succeeded / requests.
  returned: success
  type: float
  sample: 1.0
status_codes:
  description: Count per HTTP status, and per error (C(timeout), C(connection refused)...) where no status came back.
  returned: success
  type: dict
  sample: {"200": 98, "503": 1, "timeout": 1}
latency:
  description: Seconds per successful request - count, min, mean, p50, p90, p99, max.
  returned: success
  type: dict
  sample: {"count": 100, "min": 0.61, "mean": 2.35, "p50": 2.41, "p90": 3.05, "p99": 3.32, "max": 3.35}
ttft:
  description: >-
    Time to first token of the successful requests (streaming; for a completion without text, the time to its
    finish), same keys as RV(latency).
  returned: success
  type: dict
  sample: {"count": 100, "min": 0.09, "mean": 1.02, "p50": 1.1, "p90": 1.6, "p99": 1.8, "max": 1.82}
output_tokens_total:
  description: Tokens generated over all successful requests.
  returned: success
  type: int
  sample: 1600
prompt_tokens_total:
  description: Prompt tokens over all successful requests that reported usage.
  returned: success
  type: int
  sample: 2100
duration:
  description: Seconds from the first request to the last answer.
  returned: success
  type: float
  sample: 3.41
requests_per_second:
  description: Successful requests per second.
  returned: success
  type: float
  sample: 29.3
output_tokens_per_second:
  description: Aggregate output tokens per second over the test.
  returned: success
  type: float
  sample: 469.2
stream_tokens_per_second:
  description: >-
    Output tokens per second of each successful stream, same keys as RV(latency) (values C(null) and count 0
    when none succeeded). A stream's rate is its tokens after the first over the time after the first token
    (decode rate); a request without that figure (not streamed, or one token) counts with its tokens over its
    whole latency.
  returned: success
  type: dict
  sample: {"count": 100, "min": 58.2, "mean": 81.4, "p50": 83.0, "p90": 91.7, "p99": 95.1, "max": 95.6}
itl:
  description: >-
    Inter-token latency of the successful streams, same keys as RV(latency): each stream's mean gap between its
    tokens after the first, (latency - TTFT) / (tokens - 1) (a chunk may carry several tokens under speculative
    decoding, so gaps between chunks would overstate it). Count 0 when no stream had two tokens.
  returned: success
  type: dict
  sample: {"count": 100, "min": 0.0105, "mean": 0.0123, "p50": 0.012, "p90": 0.0141, "p99": 0.0172, "max": 0.0175}
upstreams:
  description: Requests per upstream (value of O(upstream_header); C(unknown) when the header was missing).
  returned: when upstream_header is set
  type: dict
  sample: {"10.0.0.11:8000": 52, "10.0.0.13:8000": 48}
distribution_skew:
  description: (max - min) / mean of the per-upstream counts.
  returned: when upstream_header is set
  type: float
  sample: 0.08
failures_sample:
  description: Up to five failed requests - status, error, body (truncated).
  returned: success
  type: list
  elements: dict
  sample: [{"status": 502, "error": "HTTP 502", "body": "<html>502 Bad Gateway</html>"}]
samples:
  description: >-
    Each successful request's figures, in the order the requests were sent, as lists of the same length:
    C(latency) and C(ttft) in seconds, C(stream_tokens_per_second) (the rate RV(stream_tokens_per_second)
    summarises) and C(upstream) (the value of O(upstream_header)); None where not measured.
  returned: when samples is true
  type: dict
  sample: {"latency": [0.41, 0.39], "ttft": [0.1, 0.09], "stream_tokens_per_second": [83.0, 85.2],
           "upstream": ["10.0.0.11:8000", "10.0.0.13:8000"]}
threshold_failures:
  description: Every threshold that was not met, with the numbers.
  returned: success
  type: list
  elements: str
  sample:
    - "max_p99_latency: p99 latency 3.32s exceeds 1.0s (p50 2.41s)"
    - "max_mean_latency: mean latency 2.35s exceeds 1.5s (p50 2.41s, p99 3.32s)"
    - "min_stream_tokens_per_second: p50 per-stream output rate 62.1 tok/s is below 70.0 tok/s (min 40.3, over 100 streams)"
model:
  description: Model requested.
  returned: success
  type: str
  sample: "deepseek-v4-flash"
'''

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.llmops.vllm_cluster.plugins.module_utils._openai_http import (
    APIS,
    completion,
    http_argument_spec,
    http_request,
    model_ids,
    start_module,
    truncate,
)
from ansible_collections.llmops.vllm_cluster.plugins.module_utils._stats import distribution_skew, summarize

MAX_REQUESTS = 100000
MAX_CONCURRENCY = 512


def validate(params):
    """Return a list of problems with the options (empty when they are fine)."""
    problems = []
    if not 1 <= params['requests'] <= MAX_REQUESTS:
        problems.append('requests must be between 1 and %d, got %d' % (MAX_REQUESTS, params['requests']))
    if not 1 <= params['concurrency'] <= MAX_CONCURRENCY:
        problems.append('concurrency must be between 1 and %d, got %d' % (MAX_CONCURRENCY, params['concurrency']))
    if params['max_tokens'] < 1:
        problems.append('max_tokens must be >= 1, got %d' % params['max_tokens'])
    if params['model'] is not None and not params['model'].strip():
        problems.append('model must not be empty (leave it unset to use the first listed model)')
    if not params['prompts'] or any(not p for p in params['prompts']):
        problems.append('prompts must be a non-empty list of non-empty strings')
    if params['deadline'] <= 0:
        problems.append('deadline must be > 0 seconds, got %s' % params['deadline'])
    ratio = params['min_success_ratio']
    if ratio is not None and not 0 <= ratio <= 1:
        problems.append('min_success_ratio must be between 0 and 1, got %s' % ratio)
    for name in ('max_p99_latency', 'max_p99_ttft', 'max_mean_latency'):
        if params[name] is not None and params[name] <= 0:
            problems.append('%s must be > 0 seconds, got %s' % (name, params[name]))
    if params['min_stream_tokens_per_second'] is not None and params['min_stream_tokens_per_second'] <= 0:
        problems.append('min_stream_tokens_per_second must be > 0, got %s' % params['min_stream_tokens_per_second'])
    if params['max_p99_ttft'] is not None and not params['stream']:
        problems.append('max_p99_ttft needs stream=true (time to first token is only measured when streaming)')
    if params['max_distribution_skew'] is not None and params['max_distribution_skew'] < 0:
        problems.append('max_distribution_skew must be >= 0, got %s' % params['max_distribution_skew'])
    if params['min_upstreams'] is not None and params['min_upstreams'] < 1:
        problems.append('min_upstreams must be >= 1, got %d' % params['min_upstreams'])
    for name in ('max_distribution_skew', 'min_upstreams'):
        if params[name] is not None and not params['upstream_header']:
            problems.append('%s needs upstream_header (the response header naming the upstream)' % name)
    return problems


def run_load(conn, params, model):
    """Send the requests; return the list of per-request results and the measured concurrency."""
    lock = threading.Lock()
    state = {'in_flight': 0, 'max_in_flight': 0}
    start = time.monotonic()
    deadline = start + params['deadline']
    prompts = params['prompts']

    def one(index):
        if time.monotonic() >= deadline:
            return {'sent': False, 'ok': False, 'status': None, 'error': 'not sent (deadline)'}
        with lock:
            state['in_flight'] += 1
            state['max_in_flight'] = max(state['max_in_flight'], state['in_flight'])
        try:
            timeout = min(conn['timeout'], max(deadline - time.monotonic(), 0.001))
            res = completion(conn['base_url'], params['api'], model, prompts[index % len(prompts)],
                             params['max_tokens'], params['stream'], conn['headers'], timeout,
                             conn['validate_certs'], conn['ca_path'], params['upstream_header'],
                             params['extra_body'], max_size=conn['max_size'], deadline=deadline)
        finally:
            with lock:
                state['in_flight'] -= 1
        res['sent'] = True
        return res

    with ThreadPoolExecutor(max_workers=min(params['concurrency'], params['requests'])) as pool:
        results = list(pool.map(one, range(params['requests'])))
    duration = time.monotonic() - start
    return results, state['max_in_flight'], duration


def stream_rate(result):
    """A request's own output rate: its decode rate (tokens after the first over the time after the first
    token), else its tokens over its whole latency; None when it has neither."""
    rate = result.get('decode_tokens_per_second')
    return rate if rate is not None else result.get('tokens_per_second')


def inter_token_latency(result):
    """A stream's mean gap between its tokens after the first, (latency - TTFT) / (tokens - 1); None
    without a TTFT or with fewer than two tokens. Under speculative decoding one streamed chunk carries
    several tokens, so the gaps between chunks would overstate it."""
    ttft, latency, tokens = result.get('ttft'), result.get('latency'), result.get('output_tokens') or 0
    if ttft is None or not latency or tokens < 2 or latency <= ttft:
        return None
    return (latency - ttft) / (tokens - 1)


def request_samples(ok):
    """Per successful request, in order: latency, TTFT, output rate and upstream (lists of the same length)."""
    def r(value, digits):
        return None if value is None else round(float(value), digits)
    return {
        'latency': [r(x.get('latency'), 4) for x in ok],
        'ttft': [r(x.get('ttft'), 4) for x in ok],
        'stream_tokens_per_second': [r(stream_rate(x), 2) for x in ok],
        'upstream': [x.get('upstream') for x in ok],
    }


def aggregate(results, params, duration):
    """Figures over per-request results (pure; unit tested)."""
    total = len(results)
    ok = [r for r in results if r['ok']]
    codes = {}
    for r in results:
        if not r['sent']:
            key = 'not_sent'
        elif r['status'] is not None:
            key = str(r['status'])
        else:
            key = (r['error'] or 'error').split(':')[0]
        codes[key] = codes.get(key, 0) + 1
    out_tokens = sum(r['output_tokens'] for r in ok)
    prompt_tokens = sum(r.get('prompt_tokens') or 0 for r in ok)
    figures = {
        'sent': sum(1 for r in results if r['sent']),
        'succeeded': len(ok),
        'failed_requests': total - len(ok),
        'not_sent': sum(1 for r in results if not r['sent']),
        'success_ratio': round(len(ok) / total, 4) if total else 0.0,
        'status_codes': codes,
        'latency': summarize([r['latency'] for r in ok]),
        'ttft': summarize([r['ttft'] for r in ok if r.get('ttft') is not None]),
        'output_tokens_total': out_tokens,
        'prompt_tokens_total': prompt_tokens,
        'duration': round(duration, 3),
        'requests_per_second': round(len(ok) / duration, 2) if duration > 0 else None,
        'output_tokens_per_second': round(out_tokens / duration, 2) if duration > 0 else None,
        'stream_tokens_per_second': summarize([rate for rate in (stream_rate(r) for r in ok) if rate is not None]),
        'itl': summarize([gap for gap in (inter_token_latency(r) for r in ok) if gap is not None], digits=5),
        'failures_sample': [
            {'status': r.get('status'), 'error': r.get('error'), 'body': r.get('body')}
            for r in results if not r['ok']][:5],
    }
    if params.get('samples'):
        figures['samples'] = request_samples(ok)
    if params.get('upstream_header'):
        spread = {}
        for r in results:
            if r['sent'] and r.get('status') is not None:
                name = r.get('upstream') or 'unknown'
                spread[name] = spread.get(name, 0) + 1
        figures['upstreams'] = dict(sorted(spread.items()))
        skew = distribution_skew(spread.values())
        figures['distribution_skew'] = round(skew, 4) if skew is not None else None
    return figures


def check_thresholds(figures, params):
    problems = []
    limit = params.get('min_success_ratio')
    if limit is not None and figures['success_ratio'] < limit:
        problems.append('min_success_ratio: %d of %d requests succeeded (%s), required %s; status codes %s'
                        % (figures['succeeded'], figures['succeeded'] + figures['failed_requests'], figures['success_ratio'],
                           limit, figures['status_codes']))
    limit = params.get('max_p99_latency')
    if limit is not None:
        p99 = figures['latency']['p99']
        if p99 is None:
            problems.append('max_p99_latency: no successful request to measure, limit %ss' % limit)
        elif p99 > limit:
            problems.append('max_p99_latency: p99 latency %ss exceeds %ss (p50 %ss)' % (p99, limit, figures['latency']['p50']))
    limit = params.get('max_mean_latency')
    if limit is not None:
        lat = figures['latency']
        if lat['mean'] is None:
            problems.append('max_mean_latency: no successful request to measure, limit %ss' % limit)
        elif lat['mean'] > limit:
            problems.append('max_mean_latency: mean latency %ss exceeds %ss (p50 %ss, p99 %ss)'
                            % (lat['mean'], limit, lat['p50'], lat['p99']))
    limit = params.get('min_stream_tokens_per_second')
    if limit is not None:
        rate = figures.get('stream_tokens_per_second') or {}
        if rate.get('p50') is None:
            problems.append('min_stream_tokens_per_second: no successful stream to measure, limit %s tok/s' % limit)
        elif rate['p50'] < limit:
            problems.append('min_stream_tokens_per_second: p50 per-stream output rate %s tok/s is below %s tok/s'
                            ' (min %s, over %d streams)' % (rate['p50'], limit, rate['min'], rate['count']))
    limit = params.get('max_p99_ttft')
    if limit is not None:
        p99 = figures['ttft']['p99']
        if p99 is None:
            problems.append('max_p99_ttft: no time to first token measured, limit %ss' % limit)
        elif p99 > limit:
            problems.append('max_p99_ttft: p99 TTFT %ss exceeds %ss (p50 %ss)' % (p99, limit, figures['ttft']['p50']))
    limit = params.get('min_upstreams')
    if limit is not None:
        named = [k for k in figures.get('upstreams', {}) if k != 'unknown']
        if len(named) < limit:
            problems.append('min_upstreams: %d upstream(s) served requests (%s), required %d'
                            % (len(named), figures.get('upstreams'), limit))
    limit = params.get('max_distribution_skew')
    if limit is not None:
        skew = figures.get('distribution_skew')
        if skew is None or skew > limit:
            problems.append('max_distribution_skew: skew %s exceeds %s; requests per upstream %s'
                            % (skew, limit, figures.get('upstreams')))
    return problems


def main():
    argument_spec = http_argument_spec()
    argument_spec.update(
        model=dict(type='str'),
        requests=dict(type='int', default=100),
        concurrency=dict(type='int', default=10),
        api=dict(type='str', choices=list(APIS), default='chat'),
        stream=dict(type='bool', default=True),
        max_tokens=dict(type='int', default=32, no_log=False),
        prompts=dict(type='list', elements='str', default=[
            'Write one sentence about the sea.',
            'List three prime numbers.',
            'Explain what a load balancer does.',
            'Name a colour and a fruit.',
        ]),
        extra_body=dict(type='dict', default={}),
        deadline=dict(type='float', default=600.0),
        upstream_header=dict(type='str'),
        min_success_ratio=dict(type='float'),
        max_p99_latency=dict(type='float'),
        max_p99_ttft=dict(type='float'),
        max_mean_latency=dict(type='float'),
        min_stream_tokens_per_second=dict(type='float', no_log=False),
        max_distribution_skew=dict(type='float'),
        min_upstreams=dict(type='int'),
        samples=dict(type='bool', default=False),
    )
    module, conn = start_module(argument_spec, validate)
    params = module.params
    base = dict(changed=False, requests=params['requests'], concurrency=params['concurrency'])
    if module.check_mode:
        module.exit_json(skipped=True, msg='check mode: would send %d requests, %d at a time, to %s'
                         % (params['requests'], params['concurrency'], conn['base_url']), **base)

    model = params['model']
    if model is None:
        resp = http_request(conn['base_url'] + '/v1/models', headers=conn['headers'], timeout=conn['timeout'],
                            validate_certs=conn['validate_certs'], ca_path=conn['ca_path'], max_size=conn['max_size'])
        ids = model_ids(resp['body']) if resp['status'] == 200 else None
        if not ids:
            module.fail_json(msg='model is not set and GET /v1/models gave no model (%s)'
                             % (resp['error'] or 'HTTP %s' % resp['status']),
                             status=resp['status'], body=truncate(resp['body']), **base)
        model = ids[0]

    results, max_in_flight, duration = run_load(conn, params, model)
    figures = aggregate(results, params, duration)
    failures = check_thresholds(figures, params)
    figures.update(base, model=model, max_in_flight=max_in_flight, threshold_failures=failures)
    if failures:
        module.fail_json(msg='load test thresholds not met: ' + '; '.join(failures), **figures)
    module.exit_json(**figures)


if __name__ == '__main__':
    main()
