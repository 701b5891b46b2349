#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.vllm_cluster contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: vllm_metrics
short_description: Read and check a vLLM server's Prometheus metrics
version_added: 0.1.0
description:
  - Reads C(/metrics) from a vLLM server (the API port; vLLM has no separate metrics port) and parses
    the Prometheus text format.
  - Returns, per served model, requests running and waiting, KV cache usage, time to first token,
    inter-token latency and end-to-end latency (count, mean, and p50/p90/p99 estimated from the
    histogram buckets as Prometheus' C(histogram_quantile) does), prompt and generation token
    totals, preemptions, prefix-cache hit rate and speculative decoding (drafts, draft tokens,
    accepted tokens, acceptance rate, mean accepted length = 1 + accepted / drafts).
  - Optional thresholds fail the task with the numbers.
  - Counters and histograms are totals since the server started.
  - Samples of V(NaN), V(+Inf) or V(-Inf) (the text format allows them in any sample) are parsed; a
    figure built from one (a sum, count, mean, quantile or ratio) is V(null), the other figures stand,
    and a threshold on a V(null) figure fails saying it is not reported or not a finite number.
author:
  - llmops.vllm_cluster developers (@llmops)
extends_documentation_fragment:
  - llmops.vllm_cluster.openai_http
  - llmops.vllm_cluster.read_only
options:
  metrics_path:
    description:
      - Path of the metrics endpoint.
    type: str
    default: /metrics
  model:
    description:
      - Served model name (the C(model_name) label) whose figures RV(figures) holds and the thresholds apply to.
      - When not set and the server serves one model, that one; with several, the thresholds apply to each.
    type: str
  max_requests_waiting:
    description:
      - Fail when more requests than this are queued (C(vllm:num_requests_waiting)).
    type: int
  max_requests_running:
    description:
      - Fail when more requests than this are running (C(vllm:num_requests_running)).
    type: int
  max_kv_cache_usage:
    description:
      - Fail when the KV cache usage fraction (C(vllm:kv_cache_usage_perc), 0 to 1) is above this.
    type: float
  max_ttft_p99:
    description:
      - Fail when the p99 time to first token, estimated from the buckets, is above this many seconds.
    type: float
  max_e2e_latency_p99:
    description:
      - Fail when the p99 end-to-end request latency, estimated from the buckets, is above this many seconds.
    type: float
  max_preemptions:
    description:
      - Fail when more requests than this were preempted since start (KV cache too small).
    type: int
  min_spec_acceptance_rate:
    description:
      - Fail when the speculative-decoding acceptance rate (accepted / draft tokens, 0 to 1) is below this,
        or when no drafts are reported.
    type: float
attributes:
  check_mode:
    description: Can run in check mode and return the same result without changing the target.
    support: full
    details: The module only reads; it runs the same in check mode.
seealso:
  - module: llmops.vllm_cluster.openai_load
'''

EXAMPLES = r'''
- name: The replica is not saturated and DSpark drafts are accepted
  llmops.vllm_cluster.vllm_metrics:
    base_url: "http://{{ inventory_hostname }}:8000"
    max_requests_waiting: 5
    max_kv_cache_usage: 0.9
    min_spec_acceptance_rate: 0.3
  register: metrics

- name: Report
  ansible.builtin.debug:
    msg: >-
      TTFT p50 {{ metrics.figures.ttft_seconds.p50 }} s,
      mean accepted length {{ metrics.figures.spec_decode.mean_accepted_length }}
'''

RETURN = r'''
models:
  description: Figures per served model name (see RV(figures) for the keys).
  returned: always
  type: dict
  sample:
    deepseek-v4-flash: {requests_running: 1.0, requests_waiting: 0.0, kv_cache_usage_perc: 0.02, preemptions_total: 0.0}
model:
  description: Model whose figures RV(figures) holds; null when the server serves several and O(model) is not set.
  returned: always
  type: str
  sample: "deepseek-v4-flash"
figures:
  description: The figures of RV(model).
  returned: when one model is selected
  type: dict
  contains:
    requests_running:
      description: Requests being processed.
      type: float
    requests_waiting:
      description: Requests queued.
      type: float
    kv_cache_usage_perc:
      description: KV cache usage as a fraction 0 to 1 (the fullest engine when there are several).
      type: float
    prompt_tokens_total:
      description: Prompt tokens processed since start.
      type: float
    generation_tokens_total:
      description: Tokens generated since start.
      type: float
    preemptions_total:
      description: Preemptions since start.
      type: float
    requests_success_total:
      description: Finished requests since start, all finish reasons.
      type: int
    prefix_cache_hit_rate:
      description: Prefix cache hits / queries (tokens).
      type: float
    ttft_seconds:
      description: Time to first token - count, sum, mean, p50, p90, p99.
      type: dict
    inter_token_latency_seconds:
      description: Inter-token latency - count, sum, mean, p50, p90, p99.
      type: dict
    e2e_latency_seconds:
      description: End-to-end request latency - count, sum, mean, p50, p90, p99.
      type: dict
    spec_decode:
      description: Speculative decoding - enabled, drafts, draft_tokens, accepted_tokens, acceptance_rate, mean_accepted_length.
      type: dict
  sample:
    requests_running: 0.0
    requests_waiting: 0.0
    kv_cache_usage_perc: 0.02
    preemptions_total: 0.0
    prefix_cache_hit_rate: 0.61
    ttft_seconds:
      count: 104
      p50: 0.09
      p99: 1.8
    spec_decode:
      enabled: true
      drafts: 90
      draft_tokens: 212
      accepted_tokens: 198
      acceptance_rate: 0.934
      mean_accepted_length: 3.2
threshold_failures:
  description: Every threshold that was not met, with the numbers.
  returned: always
  type: list
  elements: str
  sample: ["max_kv_cache_usage: KV cache usage is 0.95, limit 0.9"]
parse_errors:
  description: Lines of the metrics text that could not be parsed (at most 10).
  returned: always
  type: list
  elements: str
  sample: []
'''

from ansible_collections.llmops.vllm_cluster.plugins.module_utils._openai_http import (
    http_argument_spec,
    http_request,
    start_module,
    truncate,
)
from ansible_collections.llmops.vllm_cluster.plugins.module_utils._prometheus import (
    check_thresholds,
    parse_text,
    vllm_summary,
)

THRESHOLDS = ('max_requests_waiting', 'max_requests_running', 'max_kv_cache_usage', 'max_ttft_p99',
              'max_e2e_latency_p99', 'max_preemptions', 'min_spec_acceptance_rate')


def validate(params):
    problems = []
    for name in ('max_kv_cache_usage', 'min_spec_acceptance_rate'):
        if params[name] is not None and not 0 <= params[name] <= 1:
            problems.append('%s is a fraction and must be between 0 and 1, got %s' % (name, params[name]))
    for name in ('max_requests_waiting', 'max_requests_running', 'max_preemptions'):
        if params[name] is not None and params[name] < 0:
            problems.append('%s must be >= 0, got %s' % (name, params[name]))
    for name in ('max_ttft_p99', 'max_e2e_latency_p99'):
        if params[name] is not None and params[name] <= 0:
            problems.append('%s must be > 0 seconds, got %s' % (name, params[name]))
    if params['model'] is not None and not params['model'].strip():
        problems.append('model must not be empty (leave it unset to select the only served model)')
    if not params['metrics_path'].startswith('/'):
        problems.append("metrics_path must start with '/', got '%s'" % params['metrics_path'])
    return problems


def evaluate(text, params):
    """Parse the metrics text and apply the thresholds. Returns (result dict, error message or None)."""
    parsed = parse_text(text)
    models = vllm_summary(parsed)
    result = {'models': models, 'model': None, 'threshold_failures': [], 'parse_errors': parsed['errors'][:10]}
    if not models:
        detail = ' (%d malformed line(s), first: %s)' % (len(parsed['errors']), parsed['errors'][0]) \
            if parsed['errors'] else ''
        return result, ('no vllm: series in the metrics text: is this a vLLM server\'s /metrics?%s' % detail)
    selected = params.get('model')
    if selected is not None and selected not in models:
        return result, "model '%s' has no metrics; models with metrics: %s" % (selected, ', '.join(sorted(models)))
    if selected is None and len(models) == 1:
        selected = next(iter(models))
    result['model'] = selected
    if selected is not None:
        result['figures'] = models[selected]
    thresholds = dict((k, params.get(k)) for k in THRESHOLDS)
    failures = []
    for name in ([selected] if selected is not None else sorted(models)):
        for problem in check_thresholds(models[name], thresholds):
            failures.append(problem if selected is not None else '%s: %s' % (name, problem))
    result['threshold_failures'] = failures
    if failures:
        return result, 'vLLM metrics thresholds not met: ' + '; '.join(failures)
    return result, None


def main():
    argument_spec = http_argument_spec()
    argument_spec.update(
        metrics_path=dict(type='str', default='/metrics'),
        model=dict(type='str'),
        max_requests_waiting=dict(type='int'),
        max_requests_running=dict(type='int'),
        max_kv_cache_usage=dict(type='float'),
        max_ttft_p99=dict(type='float'),
        max_e2e_latency_p99=dict(type='float'),
        max_preemptions=dict(type='int'),
        min_spec_acceptance_rate=dict(type='float'),
    )
    module, conn = start_module(argument_spec, validate)
    params = module.params
    resp = http_request(conn['base_url'] + params['metrics_path'], headers=conn['headers'], timeout=conn['timeout'],
                        validate_certs=conn['validate_certs'], ca_path=conn['ca_path'], max_size=conn['max_size'])
    if resp['status'] != 200:
        module.fail_json(msg='GET %s answered %s' % (params['metrics_path'], resp['error'] or 'HTTP %s' % resp['status']),
                         status=resp['status'], body=truncate(resp['body']))
    result, error = evaluate(resp['body'].decode('utf-8', 'replace'), params)
    if error:
        module.fail_json(msg=error, **result)
    module.exit_json(changed=False, **result)


if __name__ == '__main__':
    main()
