# -*- coding: utf-8 -*-
# Copyright: llmops.vllm_cluster contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Prometheus text exposition format (0.0.4) parser, histogram quantiles, and vLLM's series.

histogram_quantile() follows Prometheus' own definition (linear interpolation inside the bucket
that holds the rank; the +Inf bucket answers with the highest finite bound).
"""

from __future__ import annotations

import math
import re

_NAME_RE = re.compile(r'[a-zA-Z_:][a-zA-Z0-9_:]*')
_LABEL_NAME_RE = re.compile(r'[a-zA-Z_][a-zA-Z0-9_]*')
_ESCAPES = {'\\': '\\', '"': '"', 'n': '\n'}


class MetricsParseError(ValueError):
    pass


def parse_value(text):
    lowered = text.lower()
    if lowered in ('+inf', 'inf'):
        return math.inf
    if lowered == '-inf':
        return -math.inf
    if lowered == 'nan':
        return math.nan
    return float(text)


def _parse_labels(line, pos):
    """Parse '{a="x",b="y"}' starting at line[pos] == '{'. Returns (labels, position after '}')."""
    labels = {}
    pos += 1
    while True:
        while pos < len(line) and line[pos] in ' \t':
            pos += 1
        if pos < len(line) and line[pos] == '}':
            return labels, pos + 1
        match = _LABEL_NAME_RE.match(line, pos)
        if not match:
            raise MetricsParseError('bad label name')
        name = match.group(0)
        pos = match.end()
        while pos < len(line) and line[pos] in ' \t':
            pos += 1
        if pos >= len(line) or line[pos] != '=':
            raise MetricsParseError("expected '=' after label %s" % name)
        pos += 1
        while pos < len(line) and line[pos] in ' \t':
            pos += 1
        if pos >= len(line) or line[pos] != '"':
            raise MetricsParseError('label %s value is not quoted' % name)
        pos += 1
        chars = []
        while True:
            if pos >= len(line):
                raise MetricsParseError('unterminated label value for %s' % name)
            char = line[pos]
            if char == '\\' and pos + 1 < len(line):
                chars.append(_ESCAPES.get(line[pos + 1], '\\' + line[pos + 1]))
                pos += 2
                continue
            if char == '"':
                pos += 1
                break
            chars.append(char)
            pos += 1
        labels[name] = ''.join(chars)
        while pos < len(line) and line[pos] in ' \t':
            pos += 1
        if pos < len(line) and line[pos] == ',':
            pos += 1
            continue
        if pos < len(line) and line[pos] == '}':
            return labels, pos + 1
        raise MetricsParseError("expected ',' or '}' after label %s" % name)


def parse_line(line):
    """Parse one sample line into (name, labels, value). Raises MetricsParseError."""
    match = _NAME_RE.match(line)
    if not match:
        raise MetricsParseError('no metric name')
    name = match.group(0)
    pos = match.end()
    labels = {}
    if pos < len(line) and line[pos] == '{':
        labels, pos = _parse_labels(line, pos)
    rest = line[pos:].split()
    if not rest or len(rest) > 2:
        raise MetricsParseError('expected a value (and an optional timestamp) after the series')
    try:
        value = parse_value(rest[0])
    except ValueError:
        raise MetricsParseError('value %r is not a number' % rest[0])
    if len(rest) == 2 and not re.match(r'^-?\d+$', rest[1]):
        raise MetricsParseError('timestamp %r is not an integer' % rest[1])
    return name, labels, value


def parse_text(text):
    """Parse exposition text. Returns {'samples': [(name, labels, value)], 'types': {name: type},
    'errors': ['line N: reason: text', ...]}. Malformed lines are reported, not fatal."""
    samples = []
    types = {}
    errors = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith('#'):
            parts = line.split(None, 3)
            if len(parts) >= 4 and parts[1] == 'TYPE':
                types[parts[2]] = parts[3].strip()
            continue
        try:
            samples.append(parse_line(line))
        except MetricsParseError as exc:
            errors.append('line %d: %s: %s' % (lineno, exc, line[:120]))
    return {'samples': samples, 'types': types, 'errors': errors}


def histogram_quantile(q, buckets):
    """Quantile q (0..1) from cumulative buckets [(le, count), ...] as Prometheus computes it.

    Returns None when there are no observations.
    """
    if not 0 <= q <= 1:
        raise ValueError('quantile must be between 0 and 1, got %r' % (q,))
    ordered = sorted(buckets, key=lambda b: b[0])
    if not ordered or not math.isinf(ordered[-1][0]):
        return None
    total = ordered[-1][1]
    if total <= 0:
        return None
    rank = q * total
    prev_bound = 0.0
    prev_count = 0.0
    for index, (bound, count) in enumerate(ordered):
        if count >= rank:
            if math.isinf(bound):
                # The rank falls in the open-ended bucket: the best answer is the highest finite bound.
                return ordered[index - 1][0] if index > 0 else None
            if index == 0 and bound <= 0:
                return bound
            in_bucket = count - prev_count
            if in_bucket <= 0:
                return bound
            return prev_bound + (bound - prev_bound) * (rank - prev_count) / in_bucket
        prev_bound = bound
        prev_count = count
    return None


# ----- vLLM -----------------------------------------------------------------------------------

GAUGES = {
    'requests_running': ('vllm:num_requests_running',),
    'requests_waiting': ('vllm:num_requests_waiting',),
    # kv_cache_usage_perc is a fraction 0..1 despite its name; gpu_cache_usage_perc is the pre-0.10 name.
    'kv_cache_usage_perc': ('vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc'),
}
COUNTERS = {
    'prompt_tokens_total': ('vllm:prompt_tokens_total', 'vllm:prompt_tokens'),
    'generation_tokens_total': ('vllm:generation_tokens_total', 'vllm:generation_tokens'),
    'preemptions_total': ('vllm:num_preemptions_total', 'vllm:num_preemptions'),
    'prefix_cache_queries_total': ('vllm:prefix_cache_queries_total', 'vllm:prefix_cache_queries'),
    'prefix_cache_hits_total': ('vllm:prefix_cache_hits_total', 'vllm:prefix_cache_hits'),
    'spec_decode_drafts_total': ('vllm:spec_decode_num_drafts_total', 'vllm:spec_decode_num_drafts'),
    'spec_decode_draft_tokens_total': ('vllm:spec_decode_num_draft_tokens_total', 'vllm:spec_decode_num_draft_tokens'),
    'spec_decode_accepted_tokens_total': ('vllm:spec_decode_num_accepted_tokens_total',
                                          'vllm:spec_decode_num_accepted_tokens'),
    'requests_success_total': ('vllm:request_success_total', 'vllm:request_success'),
}
HISTOGRAMS = {
    'ttft_seconds': ('vllm:time_to_first_token_seconds',),
    'inter_token_latency_seconds': ('vllm:inter_token_latency_seconds', 'vllm:time_per_output_token_seconds'),
    'e2e_latency_seconds': ('vllm:e2e_request_latency_seconds',),
}
MODEL_LABEL = 'model_name'


def _finite(value):
    return value is not None and not (isinstance(value, float) and (math.isnan(value) or math.isinf(value)))


def _r(value, digits=6):
    """A figure rounded; None for a missing one and for NaN, +Inf, -Inf (the text format allows them
    in any sample; a figure built from one is not a number a threshold can compare)."""
    if not _finite(value):
        return None
    return round(value, digits)


def _int(value):
    """A count as an int; None for a missing or non-finite one."""
    return int(value) if _finite(value) else None


def _sum(values):
    """Sum of samples; NaN when one of them is NaN or they hold both +Inf and -Inf, as Prometheus sums."""
    return math.fsum(values) if all(_finite(v) for v in values) else sum(values)


def _max(values):
    """Largest sample; NaN when one of them is NaN (Python's max() would depend on the order)."""
    return math.nan if any(isinstance(v, float) and math.isnan(v) for v in values) else max(values)


def _model_of(labels):
    return labels.get(MODEL_LABEL, '')


def vllm_summary(parsed):
    """Per-model vLLM figures from parse_text() output.

    Sums over the other labels (engine index, finished_reason...) of one model. Returns
    {model_name: {...}}; an empty dict when the text holds no vllm: series.
    """
    by_name = {}
    for name, labels, value in parsed['samples']:
        by_name.setdefault(name, []).append((labels, value))
    # Models are the model_name labels of vllm: series; info series without the label (such as
    # vllm:cache_config_info) belong to no model. Without any model_name label, one unnamed model.
    models = set()
    has_vllm = False
    for name, series in by_name.items():
        if name.startswith('vllm:'):
            has_vllm = True
            models.update(labels[MODEL_LABEL] for labels, _value in series if MODEL_LABEL in labels)
    if has_vllm and not models:
        models.add('')

    def pick(names):
        for candidate in names:
            if candidate in by_name:
                return by_name[candidate]
        return None

    result = {}
    for model in sorted(models):
        figures = {}
        reported = set()
        for key, names in list(GAUGES.items()) + list(COUNTERS.items()):
            series = pick(names)
            values = [v for labels, v in series or [] if _model_of(labels) == model]
            if values:
                reported.add(key)
            if not values:
                figures[key] = None
            elif key == 'kv_cache_usage_perc':
                # A fraction per engine: the fullest engine is what a threshold must see.
                figures[key] = _r(_max(values))
            else:
                figures[key] = _r(_sum(values))
        figures['requests_success_total'] = _int(figures['requests_success_total'])

        for key, names in HISTOGRAMS.items():
            hist = {'count': None, 'sum': None, 'mean': None, 'p50': None, 'p90': None, 'p99': None}
            for base in names:
                bucket_rows = [(labels, v) for labels, v in by_name.get(base + '_bucket', [])
                               if _model_of(labels) == model]
                if not bucket_rows and base + '_count' not in by_name:
                    continue
                merged = {}
                for labels, value in bucket_rows:
                    try:
                        bound = parse_value(labels.get('le', ''))
                    except ValueError:
                        continue
                    if math.isnan(bound):
                        continue  # not a bucket bound
                    merged[bound] = merged.get(bound, 0.0) + value
                buckets = sorted(merged.items())
                counts = [v for labels, v in by_name.get(base + '_count', []) if _model_of(labels) == model]
                sums = [v for labels, v in by_name.get(base + '_sum', []) if _model_of(labels) == model]
                count = _sum(counts) if counts else (buckets[-1][1] if buckets else None)
                total = _sum(sums) if sums else None
                hist['count'] = _int(count)
                hist['sum'] = _r(total)
                if _finite(count) and count and _finite(total):
                    hist['mean'] = _r(total / count)
                # Quantiles only from finite bucket counts (a NaN or infinite count has no rank).
                if buckets and all(_finite(c) for _bound, c in buckets):
                    for label, q in (('p50', 0.5), ('p90', 0.9), ('p99', 0.99)):
                        hist[label] = _r(histogram_quantile(q, buckets))
                break
            figures[key] = hist

        queries = figures['prefix_cache_queries_total']
        hits = figures['prefix_cache_hits_total']
        figures['prefix_cache_hit_rate'] = _r(hits / queries, 4) if queries and hits is not None else None

        drafts = figures['spec_decode_drafts_total']
        draft_tokens = figures['spec_decode_draft_tokens_total']
        accepted = figures['spec_decode_accepted_tokens_total']
        spec = {
            'enabled': 'spec_decode_drafts_total' in reported,
            'drafts': _int(drafts),
            'draft_tokens': _int(draft_tokens),
            'accepted_tokens': _int(accepted),
            'acceptance_rate': _r(accepted / draft_tokens, 4) if draft_tokens and accepted is not None else None,
            'mean_accepted_length': _r(1 + accepted / drafts, 4) if drafts and accepted is not None else None,
        }
        figures['spec_decode'] = spec
        result[model] = figures
    return result


def check_thresholds(figures, thresholds):
    """Compare one model's figures against thresholds; return failure messages with the numbers."""
    problems = []

    def over(key, value, limit, what):
        if limit is None:
            return
        if value is None:
            problems.append('%s: %s is not reported by the server, or not a finite number (limit %s)'
                            % (key, what, limit))
        elif value > limit:
            problems.append('%s: %s is %s, limit %s' % (key, what, value, limit))

    over('max_requests_waiting', figures.get('requests_waiting'), thresholds.get('max_requests_waiting'),
         'requests waiting')
    over('max_requests_running', figures.get('requests_running'), thresholds.get('max_requests_running'),
         'requests running')
    over('max_kv_cache_usage', figures.get('kv_cache_usage_perc'), thresholds.get('max_kv_cache_usage'),
         'KV cache usage')
    over('max_ttft_p99', (figures.get('ttft_seconds') or {}).get('p99'), thresholds.get('max_ttft_p99'),
         'TTFT p99 (s, from buckets)')
    over('max_e2e_latency_p99', (figures.get('e2e_latency_seconds') or {}).get('p99'),
         thresholds.get('max_e2e_latency_p99'), 'end-to-end latency p99 (s, from buckets)')
    over('max_preemptions', figures.get('preemptions_total'), thresholds.get('max_preemptions'), 'preemptions')
    limit = thresholds.get('min_spec_acceptance_rate')
    if limit is not None:
        rate = (figures.get('spec_decode') or {}).get('acceptance_rate')
        if rate is None:
            problems.append('min_spec_acceptance_rate: no speculative-decoding drafts reported '
                            '(speculative decoding off, or no request served yet), limit %s' % limit)
        elif rate < limit:
            problems.append('min_spec_acceptance_rate: draft acceptance rate is %s, limit %s' % (rate, limit))
    return problems
