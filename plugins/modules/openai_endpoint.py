#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.vllm_cluster contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: openai_endpoint
short_description: Wait until an OpenAI-compatible server (vLLM) really answers
version_added: 0.1.0
description:
  - Polls a server in stages until all pass or O(timeout) runs out, starting again from the first
    stage after a failure - C(health) (GET O(health_path) answers 200), C(models) (GET C(/v1/models)
    lists O(model)), C(completion) (a real small chat or text completion returns at least
    O(min_output_tokens) tokens).
  - A C(/health) 200 alone does not prove readiness - the engine can be up while the model cannot
    answer; only the completion stage does.
  - Returns per-stage timings, the model list, time to first token (streaming), latency, output tokens
    per second and the usage block.
  - On failure says which stage failed, the HTTP status, the last response body (truncated) and the
    time spent. A 401 or 403 stops at once (a wrong O(api_key) does not heal by waiting).
author:
  - llmops.vllm_cluster developers (@llmops)
extends_documentation_fragment:
  - llmops.vllm_cluster.openai_http
  - llmops.vllm_cluster.read_only
options:
  model:
    description:
      - Model name that C(/v1/models) must list and the completion uses (vLLM C(--served-model-name)).
      - When not set, the first listed model is used.
    type: str
  api:
    description:
      - V(chat) sends C(messages) to C(/v1/chat/completions); V(completion) sends C(prompt) to C(/v1/completions).
    type: str
    choices: [chat, completion]
    default: chat
  prompt:
    description:
      - Text of the test request.
    type: str
    default: Say hello.
  max_tokens:
    description:
      - Largest number of tokens the test completion may generate.
    type: int
    default: 16
  min_output_tokens:
    description:
      - Fewest tokens the completion must return for the server to count as ready.
    type: int
    default: 1
  stream:
    description:
      - Stream the completion (server-sent events) and measure the time to the first token.
    type: bool
    default: true
  extra_body:
    description:
      - 'Extra fields merged into the completion request, for example V({"temperature": 0}).'
    type: dict
    default: {}
  health_path:
    description:
      - Path of the health stage. An empty string skips it (servers without C(/health)).
    type: str
    default: /health
  timeout:
    description:
      - Seconds to keep trying before failing.
    type: float
    default: 300
  delay:
    description:
      - Seconds to wait between attempts.
    type: float
    default: 5
  retries:
    description:
      - Most attempts; when not set, attempts continue until O(timeout).
    type: int
attributes:
  check_mode:
    description: Can run in check mode and return the same result without changing the target.
    support: full
    details: The module only sends read requests and one small completion; it runs the same in check mode.
seealso:
  - module: llmops.vllm_cluster.openai_load
  - module: llmops.vllm_cluster.vllm_metrics
'''

EXAMPLES = r'''
- name: Wait until the replica serves the model (after a start or an upgrade)
  llmops.vllm_cluster.openai_endpoint:
    base_url: "http://{{ inventory_hostname }}:8000"
    model: deepseek-v4-flash
    api_key: "{{ vllm_api_key }}"
    timeout: 1800
    delay: 10
  register: ready

- name: Through the balancer, with a plain completion and a private CA
  llmops.vllm_cluster.openai_endpoint:
    base_url: https://llm.internal.example
    ca_path: /etc/ssl/certs/internal-ca.pem
    model: deepseek-v4-flash
    api: completion
    prompt: "The capital of France is"
'''

RETURN = r'''
ready:
  description: True when every stage passed.
  returned: always
  type: bool
  sample: true
model:
  description: Model the completion used.
  returned: success
  type: str
  sample: "deepseek-v4-flash"
models:
  description: Model ids listed by C(/v1/models).
  returned: when the models stage answered
  type: list
  elements: str
  sample: ["deepseek-v4-flash"]
attempts:
  description: Attempts made.
  returned: always
  type: int
  sample: 1
elapsed:
  description: Seconds spent in total.
  returned: always
  type: float
  sample: 0.412
stages:
  description: Per stage - C(status) (HTTP status), C(seconds) (duration of the last try), C(error).
  returned: always
  type: dict
  sample:
    health: {status: 200, seconds: 0.002}
    models: {status: 200, seconds: 0.004}
    completion: {status: 200, seconds: 0.21}
ttft:
  description: Seconds to the first generated text, or to the finish of a completion that has no text (streaming only).
  returned: success
  type: float
  sample: 0.127
latency:
  description: Seconds from sending the completion to its last byte.
  returned: success
  type: float
  sample: 0.749
output_tokens:
  description: Tokens generated (from C(usage), else the number of streamed text chunks).
  returned: success
  type: int
  sample: 32
tokens_per_second:
  description: Output tokens divided by latency.
  returned: success
  type: float
  sample: 42.7
decode_tokens_per_second:
  description: Tokens after the first divided by the time after the first (streaming only).
  returned: success
  type: float
  sample: 49.8
usage:
  description: The server's usage block.
  returned: success
  type: dict
  sample: {"prompt_tokens": 14, "completion_tokens": 32, "total_tokens": 46}
text:
  description: The generated text.
  returned: success
  type: str
  sample: "Hello! How can I help you today?"
role:
  description: Author role of the chat answer's message (V(assistant) from a conforming server); null for O(api=completion).
  returned: success
  type: str
  sample: assistant
finish_reason:
  description: Why generation stopped.
  returned: success
  type: str
  sample: length
failed_stage:
  description: Stage of the last failure (V(health), V(models), V(completion)).
  returned: failure
  type: str
  sample: "completion"
status:
  description: HTTP status of the last failed request, null when no HTTP answer came back.
  returned: failure
  type: int
  sample: 503
body:
  description: Last response body of the failed stage, truncated to 500 characters.
  returned: failure
  type: str
  sample: "{\"error\": {\"message\": \"The model is still loading\", \"code\": 503}}"
'''

import time

from ansible_collections.llmops.vllm_cluster.plugins.module_utils._openai_http import (
    APIS,
    completion,
    http_argument_spec,
    http_request,
    model_ids,
    start_module,
    truncate,
)


def _validate(params):
    problems = []
    if params['model'] is not None and not params['model'].strip():
        problems.append('model must not be empty (leave it unset to use the first listed model)')
    if params['max_tokens'] < 1:
        problems.append('max_tokens must be >= 1, got %d' % params['max_tokens'])
    if params['min_output_tokens'] < 1 or params['min_output_tokens'] > params['max_tokens']:
        problems.append('min_output_tokens must be between 1 and max_tokens (%d), got %d'
                        % (params['max_tokens'], params['min_output_tokens']))
    if params['timeout'] <= 0:
        problems.append('timeout must be > 0 seconds, got %s' % params['timeout'])
    if params['delay'] < 0:
        problems.append('delay must be >= 0 seconds, got %s' % params['delay'])
    if params['retries'] is not None and params['retries'] < 1:
        problems.append('retries must be >= 1, got %d' % params['retries'])
    if params['health_path'] and not params['health_path'].startswith('/'):
        problems.append("health_path must start with '/', got '%s'" % params['health_path'])
    if not params['prompt']:
        problems.append('prompt must not be empty')
    return problems


class StageFailure(Exception):
    def __init__(self, stage, message, status=None, body=None, fatal=False):
        super().__init__(message)
        self.stage = stage
        self.message = message
        self.status = status
        self.body = body
        self.fatal = fatal


def _describe(resp):
    if resp['status'] is None:
        return resp['error']
    return 'HTTP %s' % resp['status']


def attempt(params, conn, stages, state, deadline):
    """One pass through the stages; raises StageFailure. Returns the completion result.

    Every request ends within request_timeout and by deadline (the module's timeout).
    """
    request_timeout = conn['timeout']
    if params['health_path']:
        resp = http_request(conn['base_url'] + params['health_path'], headers=conn['headers'],
                            timeout=request_timeout, validate_certs=conn['validate_certs'], ca_path=conn['ca_path'],
                            max_size=conn['max_size'], deadline=deadline)
        stages['health'] = {'status': resp['status'], 'seconds': resp['seconds'], 'error': resp['error']}
        if resp['status'] != 200:
            raise StageFailure('health', 'GET %s answered %s' % (params['health_path'], _describe(resp)),
                               resp['status'], truncate(resp['body']))

    resp = http_request(conn['base_url'] + '/v1/models', headers=conn['headers'], timeout=request_timeout,
                        validate_certs=conn['validate_certs'], ca_path=conn['ca_path'], max_size=conn['max_size'],
                        deadline=deadline)
    stages['models'] = {'status': resp['status'], 'seconds': resp['seconds'], 'error': resp['error']}
    if resp['status'] in (401, 403):
        raise StageFailure('models', 'GET /v1/models answered HTTP %s: the server wants a valid api_key'
                           % resp['status'], resp['status'], truncate(resp['body']), fatal=True)
    if resp['status'] != 200:
        raise StageFailure('models', 'GET /v1/models answered %s' % _describe(resp), resp['status'],
                           truncate(resp['body']))
    ids = model_ids(resp['body'])
    if ids is None:
        raise StageFailure('models', 'GET /v1/models did not return an OpenAI model list', resp['status'],
                           truncate(resp['body']))
    state['models'] = ids
    model = params['model']
    if model is None:
        if not ids:
            raise StageFailure('models', 'GET /v1/models lists no model yet', resp['status'], truncate(resp['body']))
        model = ids[0]
    elif model not in ids:
        raise StageFailure('models', "model '%s' is not served; /v1/models lists: %s"
                           % (model, ', '.join(ids) or '(none)'), resp['status'], truncate(resp['body']))
    state['model'] = model

    result = completion(conn['base_url'], params['api'], model, params['prompt'], params['max_tokens'],
                        params['stream'], conn['headers'], request_timeout, conn['validate_certs'],
                        conn['ca_path'], extra_body=params['extra_body'], max_size=conn['max_size'],
                        deadline=deadline)
    stages['completion'] = {'status': result['status'], 'seconds': result['latency'], 'error': result['error']}
    if result['status'] in (401, 403):
        raise StageFailure('completion', 'the completion answered HTTP %s: the server wants a valid api_key'
                           % result['status'], result['status'], result['body'], fatal=True)
    if not result['ok']:
        raise StageFailure('completion', 'the %s completion failed: %s' % (params['api'], result['error']),
                           result['status'], result['body'])
    if result['output_tokens'] < params['min_output_tokens']:
        raise StageFailure('completion', 'the completion returned %d token(s), fewer than min_output_tokens=%d'
                           % (result['output_tokens'], params['min_output_tokens']), result['status'])
    return result


def main():
    argument_spec = http_argument_spec()
    argument_spec.update(
        model=dict(type='str'),
        api=dict(type='str', choices=list(APIS), default='chat'),
        prompt=dict(type='str', default='Say hello.'),
        max_tokens=dict(type='int', default=16, no_log=False),
        min_output_tokens=dict(type='int', default=1, no_log=False),
        stream=dict(type='bool', default=True),
        extra_body=dict(type='dict', default={}),
        health_path=dict(type='str', default='/health'),
        timeout=dict(type='float', default=300.0),
        delay=dict(type='float', default=5.0),
        retries=dict(type='int'),
    )
    module, conn = start_module(argument_spec, _validate)
    params = module.params

    start = time.monotonic()
    deadline = start + params['timeout']
    stages = {}
    state = {'models': None, 'model': None}
    attempts = 0
    failure = None
    result = None
    while True:
        attempts += 1
        try:
            result = attempt(params, conn, stages, state, deadline)
            failure = None
            break
        except StageFailure as exc:
            # An attempt the deadline cut says less than the answer before it (a wrong model, a 503).
            if failure is not None and failure.status is not None and exc.status is None \
                    and time.monotonic() >= deadline:
                failure.message += ' (the next attempt was cut by the timeout)'
            else:
                failure = exc
        if failure.fatal:
            break
        if params['retries'] is not None and attempts >= params['retries']:
            break
        if time.monotonic() + params['delay'] >= deadline:
            break
        time.sleep(params['delay'])

    elapsed = round(time.monotonic() - start, 3)
    common = dict(changed=False, attempts=attempts, elapsed=elapsed, stages=stages, models=state['models'])
    if failure is not None:
        module.fail_json(
            msg="stage '%s' failed after %d attempt(s) in %.1fs: %s" % (failure.stage, attempts, elapsed, failure.message),
            ready=False, failed_stage=failure.stage, status=failure.status, body=failure.body, **common)
    module.exit_json(
        ready=True, model=state['model'], ttft=result['ttft'], latency=result['latency'],
        output_tokens=result['output_tokens'], tokens_per_second=result['tokens_per_second'],
        decode_tokens_per_second=result['decode_tokens_per_second'], usage=result['usage'],
        text=result['text'], role=result['role'], finish_reason=result['finish_reason'], **common)


if __name__ == '__main__':
    main()
