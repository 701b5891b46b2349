# -*- coding: utf-8 -*-
# Copyright: llmops.vllm_cluster developers
# Apache License 2.0 (see galaxy.yml)
"""The judgement of playbooks/validate.yml's report, from what its plays registered: which threshold was
met, not met or not checked, the four figures a validation answers, the verdict, the spread of the load
over the replicas and the report's plots. Pure functions of their inputs (the templates only write text).

  validate_problems(hostvars, hosts)               -> ['host: problem', ...]; a host without a list: not validated
  validate_thresholds(settings, load, metrics, heads)
                                                   -> one row per threshold: limit, measured, met and their text
  validate_figures(load, settings, replicas)       -> the four figures (HTTP 200, requests per replica,
                                                      output tok/s per stream, mean latency), each with met
  validate_verdict(problems, rows)                 -> PASS or FAIL, and the thresholds met, not met, not checked
  validate_distribution(load, replicas)            -> the requests each replica served, named by replica
  validate_plots(load, settings, replicas)         -> report_plot specs: latency histogram, tok/s per stream
                                                      histogram with its threshold, requests per replica
  validate_routed_load(load, replicas, before, after, settings)
                                                   -> the load with the requests per replica counted by the
                                                      heads' own counters (behind vLLM's router nginx names
                                                      the router, not the head)

settings: the validation settings (validate.yml's validate_settings: min_success_ratio, requests,
max_mean_latency, ... with None for a threshold not set). load: the result of openai_load (latency, ttft,
stream_tokens_per_second, upstreams, distribution_skew, threshold_failures and, with samples: true,
samples). metrics: {head: the result of vllm_metrics}. replicas: cluster_replica_report's rows.

met is 'yes', 'NO' or 'not checked' (the threshold is not set). A set threshold is met only when its
figure was measured and is within the limit, and the module that checked it did not report it failed:
a figure that could not be measured never counts as met.
"""

from __future__ import annotations

import math
import numbers

from ansible.errors import AnsibleFilterError
from ansible_collections.llmops.vllm_cluster.plugins.module_utils._stats import distribution_skew

YES = 'yes'
NO = 'NO'
NOT_CHECKED = 'not checked'
MAX_PLOT_SERIES = 20

# (key in the settings, what the row measures); the variable is validate_<key>, a max_ key is an upper
# limit and a min_ key a lower one.
LOAD_THRESHOLDS = (
    ('min_success_ratio', 'requests through the balancer that succeed'),
    ('max_distribution_skew', 'distribution skew ((max - min) / mean of the requests per replica)'),
    ('max_p99_latency', 'latency p99 through the balancer (s)'),
    ('max_p99_ttft', 'TTFT p99 through the balancer (s)'),
    ('max_mean_latency', 'mean latency through the balancer (s)'),
    ('min_stream_tokens_per_second', 'output tok/s per stream, p50'),
)
METRIC_THRESHOLDS = (
    ('max_requests_waiting', 'requests waiting on a head (most)'),
    ('max_kv_cache_usage', 'KV cache usage of a head (most)'),
    ('min_spec_acceptance_rate', 'speculative-decoding acceptance of a head (least)'),
)


def _fail(name, message):
    raise AnsibleFilterError('%s: %s' % (name, message))


def _num(value):
    """A finite number as float, else None (strings of numbers count: -e values arrive as text)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, numbers.Real):
        value = float(value)
    elif isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None
    else:
        return None
    return value if math.isfinite(value) else None


def _dict(value):
    return value if isinstance(value, dict) else {}


def _fmt(value, pattern):
    return pattern % value if value is not None else '-'


def _pct(value, digits=1):
    return ('%.' + str(digits) + 'f %%') % (100 * value) if value is not None else '-'


def _limit_text(value, percent=False):
    if value is None:
        return 'not set'
    return _pct(value, 0 if float(value * 100).is_integer() else 1) if percent else '%g' % value


def _failed_options(result):
    """The options a module reported not met (each threshold_failures message starts with its option)."""
    return {str(m).split(':', 1)[0].strip() for m in (_dict(result).get('threshold_failures') or [])}


def validate_problems(host_problems, hosts=None):
    """Every problem as 'host: problem', in host order, each once. With HOSTS: HOST_PROBLEMS is hostvars
    and each host's list is its validate_problems; else a list of [host, problems] pairs or a
    {host: problems} mapping. No list (the host never recorded one: unreachable, or it failed before its
    checks) reads as 'not validated (unreachable, or failed before its checks)'."""
    if hosts is not None:
        if not isinstance(hosts, (list, tuple)):
            _fail('validate_problems', 'hosts must be a list of host names, got %r' % (hosts,))
        pairs = []
        for host in hosts:
            try:
                host_vars = host_problems[host]
            except (KeyError, TypeError):
                host_vars = None
            pairs.append((host, host_vars.get('validate_problems') if hasattr(host_vars, 'get') else None))
    elif isinstance(host_problems, dict):
        pairs = list(host_problems.items())
    elif isinstance(host_problems, (list, tuple)):
        pairs = []
        for index, pair in enumerate(host_problems):
            if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                _fail('validate_problems', 'item %d must be a [host, problems] pair, got %r' % (index, pair))
            pairs.append(tuple(pair))
    else:
        _fail('validate_problems', 'the input must be a list of [host, problems] pairs or a mapping, got %r'
              % (host_problems,))
    out = []
    for host, problems in pairs:
        if problems is None:
            items = ['not validated (unreachable, or failed before its checks)']
        elif isinstance(problems, (list, tuple)):
            items = [str(p) for p in problems]
        else:
            items = [str(problems)]
        for item in items:
            line = '%s: %s' % (host, item)
            if line not in out:
                out.append(line)
    return out


def _load_figures(load):
    load = _dict(load)
    latency = _dict(load.get('latency'))
    ttft = _dict(load.get('ttft'))
    rate = _dict(load.get('stream_tokens_per_second'))
    return {
        'min_success_ratio': _num(load.get('success_ratio')),
        'max_distribution_skew': _num(load.get('distribution_skew')),
        'max_p99_latency': _num(latency.get('p99')),
        'max_p99_ttft': _num(ttft.get('p99')),
        'max_mean_latency': _num(latency.get('mean')),
        'min_stream_tokens_per_second': _num(rate.get('p50')),
    }


def _within(key, measured, limit):
    return measured <= limit if key.startswith('max_') else measured >= limit


def _met(key, limit, measured, failed):
    if limit is None:
        return NOT_CHECKED
    if failed or measured is None:
        return NO
    return YES if _within(key, measured, limit) else NO


def _measured_text(key, load, measured):
    load = _dict(load)
    latency, ttft = _dict(load.get('latency')), _dict(load.get('ttft'))
    rate = _dict(load.get('stream_tokens_per_second'))
    if key == 'min_success_ratio':
        return '%s (%s of %s)' % (_pct(measured), load.get('succeeded', '-'), load.get('requests', '-'))
    if key == 'max_distribution_skew':
        return _fmt(measured, '%.2f')
    if key == 'max_p99_latency':
        return '%s (p50 %s)' % (_fmt(measured, '%.3f'), _fmt(_num(latency.get('p50')), '%.3f'))
    if key == 'max_p99_ttft':
        return '%s (p50 %s)' % (_fmt(measured, '%.3f'), _fmt(_num(ttft.get('p50')), '%.3f'))
    if key == 'max_mean_latency':
        return '%s (p99 %s)' % (_fmt(measured, '%.3f'), _fmt(_num(latency.get('p99')), '%.3f'))
    return '%s (min %s, %s streams)' % (_fmt(measured, '%.1f'), _fmt(_num(rate.get('min')), '%.1f'),
                                        rate.get('count', 0))


def validate_thresholds(settings, load, metrics=None, heads=None):
    """One row per threshold of the validation, in the report's order: key, variable (None for the
    replicas row, which is always checked), name, limit, measured, met, limit_text, measured_text."""
    if not isinstance(settings, dict):
        _fail('validate_thresholds', 'settings must be a mapping (validate_settings), got %r' % (settings,))
    load = _dict(load)
    failed = _failed_options(load)
    figures = _load_figures(load)
    rows = []
    for key, name in LOAD_THRESHOLDS:
        limit = _num(settings.get(key))
        measured = figures[key]
        rows.append({
            'key': key, 'variable': 'validate_' + key, 'name': name, 'limit': limit, 'measured': measured,
            'met': _met(key, limit, measured, key in failed),
            'limit_text': _limit_text(limit, percent=key == 'min_success_ratio'),
            'measured_text': _measured_text(key, load, measured),
        })
        if key == 'min_success_ratio':
            # Every head must serve at least one request (openai_load's min_upstreams): always checked.
            wanted = int(heads) if _num(heads) is not None else None
            served = [u for u in _dict(load.get('upstreams')) if u != 'unknown']
            measured_up = len(served) if load.get('upstreams') is not None else None
            if wanted is None:
                met = NOT_CHECKED
            elif 'min_upstreams' in failed or measured_up is None:
                met = NO
            else:
                met = YES if measured_up >= wanted else NO
            rows.append({
                'key': 'min_upstreams', 'variable': None, 'name': 'replicas that serve requests (every head)',
                'limit': wanted, 'measured': measured_up, 'met': met,
                'limit_text': str(wanted) if wanted is not None else 'not set',
                'measured_text': str(measured_up) if measured_up is not None else '-',
            })

    heads_metrics = _dict(metrics)
    for key, name in METRIC_THRESHOLDS:
        limit = _num(settings.get(key))
        values, missing, failed_any = [], False, False
        for head in sorted(heads_metrics):
            result = _dict(heads_metrics[head])
            fig = _dict(result.get('figures'))
            if key == 'max_requests_waiting':
                value = _num(fig.get('requests_waiting'))
            elif key == 'max_kv_cache_usage':
                value = _num(fig.get('kv_cache_usage_perc'))
            else:
                value = _num(_dict(fig.get('spec_decode')).get('acceptance_rate'))
            failed_any = failed_any or key in _failed_options(result)
            if value is None:
                missing = True
            else:
                values.append(value)
        measured = (max(values) if key.startswith('max_') else min(values)) if values else None
        met = _met(key, limit, measured, failed_any or missing)
        if key == 'max_requests_waiting':
            limit_text, measured_text = _limit_text(limit), _fmt(measured, '%g')
        else:
            limit_text, measured_text = _limit_text(limit, percent=True), _pct(measured)
        if key == 'min_spec_acceptance_rate' and measured is None:
            measured_text = '- (no drafts reported)'
        rows.append({'key': key, 'variable': 'validate_' + key, 'name': name, 'limit': limit, 'measured': measured,
                     'met': met, 'limit_text': limit_text, 'measured_text': measured_text})
    return rows


def _row(rows, key):
    return next(r for r in rows if r['key'] == key)


def validate_figures(load, settings, replicas=None):
    """The four figures a validation answers: every request answered HTTP 200 (success), the requests
    spread evenly over the replicas (requests_per_replica), each stream's output tokens per second
    (stream_tokens_per_second, p50 and min), the mean latency at the load's concurrency (mean_latency).
    Each has its variable, limit (None: not set), measured values and met."""
    if not isinstance(settings, dict):
        _fail('validate_figures', 'settings must be a mapping (validate_settings), got %r' % (settings,))
    load = _dict(load)
    replicas = [r for r in (replicas or []) if isinstance(r, dict)]
    rows = validate_thresholds(settings, load, None, len(replicas) if replicas else None)
    success, skew, upstreams = _row(rows, 'min_success_ratio'), _row(rows, 'max_distribution_skew'), _row(rows, 'min_upstreams')
    rate_row, mean_row = _row(rows, 'min_stream_tokens_per_second'), _row(rows, 'max_mean_latency')
    requests = _num(load.get('requests'))
    if requests is None:
        requests = _num(settings.get('requests'))
    served = [int(r.get('requests') or 0) for r in replicas]
    if upstreams['met'] == NO:
        spread_met = NO
    else:
        spread_met = skew['met']
    latency = _dict(load.get('latency'))
    rate = _dict(load.get('stream_tokens_per_second'))
    concurrency = load.get('concurrency', settings.get('concurrency'))
    return {
        'success': {
            'variable': success['variable'], 'limit': success['limit'], 'success_ratio': success['measured'],
            'http_200': int(_dict(load.get('status_codes')).get('200', 0) or 0),
            'requests': int(requests) if requests is not None else None,
            'met': success['met'],
        },
        'requests_per_replica': {
            'variable': skew['variable'], 'limit': skew['limit'], 'replicas': len(replicas),
            'even_share': round(requests / max(len(replicas), 1), 1) if requests is not None else None,
            'min': min(served) if served else None, 'max': max(served) if served else None,
            'per_replica': {str(r.get('replica')): int(r.get('requests') or 0) for r in replicas},
            'skew': skew['measured'], 'met': spread_met,
        },
        'stream_tokens_per_second': {
            'variable': rate_row['variable'], 'limit': rate_row['limit'], 'p50': rate_row['measured'],
            'min': _num(rate.get('min')), 'streams': int(rate.get('count') or 0), 'met': rate_row['met'],
        },
        'mean_latency': {
            'variable': mean_row['variable'], 'limit': mean_row['limit'], 'mean_s': mean_row['measured'],
            'p99_s': _num(latency.get('p99')), 'concurrency': concurrency,
            'max_in_flight': load.get('max_in_flight'), 'met': mean_row['met'],
        },
    }


def validate_verdict(problems, rows):
    """PASS when no problem was recorded and no set threshold was found not met, else FAIL; with the
    threshold variables met, not met and not checked (not set), so a PASS never hides what it did not check."""
    if not isinstance(problems, (list, tuple)):
        _fail('validate_verdict', 'problems must be a list, got %r' % (problems,))
    if not isinstance(rows, (list, tuple)) or not all(isinstance(r, dict) for r in rows):
        _fail('validate_verdict', 'rows must be the list validate_thresholds returns, got %r' % (rows,))

    def names(met):
        return [r.get('variable') or r.get('name') for r in rows if r.get('met') == met]
    not_met = names(NO)
    return {
        'verdict': 'PASS' if not problems and not not_met else 'FAIL',
        'problems': list(problems),
        'met': names(YES),
        'not_met': not_met,
        'not_checked': names(NOT_CHECKED),
    }


def _served_by(upstream):
    """nginx names every upstream it tried ('A:8000, B:8000'): the last one served the request."""
    return str(upstream).rsplit(',', 1)[-1].strip() if upstream is not None else 'unknown'


def _replica_names(replicas):
    return {str(r.get('upstream')): str(r.get('replica')) for r in (replicas or []) if isinstance(r, dict)}


def validate_distribution(load, replicas=None):
    """The requests of the load per replica, named by replica (not IP:port): one row per replica of the
    inventory (0 when it served none), then any upstream that is no replica's head (named 'not a replica:
    ADDRESS'); each with replica, head, upstream, requests and share of the answered requests."""
    load = _dict(load)
    names = _replica_names(replicas)
    heads = {str(r.get('upstream')): r.get('head') for r in (replicas or []) if isinstance(r, dict)}
    counts = {}
    for upstream, count in _dict(load.get('upstreams')).items():
        key = _served_by(upstream)
        counts[key] = counts.get(key, 0) + int(count or 0)
    total = sum(counts.values())
    rows = []
    for upstream, replica in names.items():
        rows.append({'replica': replica, 'head': heads.get(upstream), 'upstream': upstream,
                     'requests': counts.pop(upstream, 0)})
    for upstream in sorted(counts):
        rows.append({'replica': 'not a replica: %s' % upstream, 'head': None, 'upstream': upstream,
                     'requests': counts[upstream]})
    for row in rows:
        row['share'] = float(row['requests']) / total if total else None
    return rows


def validate_plots(load, settings, replicas=None):
    """The report's plots as report_plot specs, [{name, title, spec}], each only when there is something
    to draw: 'latency' (histogram of each request's latency, one series per replica, with the mean and
    the mean and p99 limits), 'stream' (histogram of each stream's output tok/s, with the p50 and the
    validate_min_stream_tokens_per_second line), 'replicas' (requests served per replica, by replica name,
    with the even share). The histograms need openai_load's samples (samples: true)."""
    load = _dict(load)
    settings = _dict(settings)
    samples = _dict(load.get('samples'))
    names = _replica_names(replicas)
    plots = []
    count = load.get('requests', settings.get('requests'))
    concurrency = load.get('concurrency', settings.get('concurrency'))

    latencies = samples.get('latency') or []
    ups = samples.get('upstream') or []
    if any(_num(v) is not None for v in latencies):
        groups = {}
        for index, value in enumerate(latencies):
            if _num(value) is None:
                continue
            upstream = _served_by(ups[index]) if index < len(ups) and ups[index] is not None else None
            label = names.get(upstream, 'not a replica: %s' % upstream) if upstream is not None else 'all requests'
            groups.setdefault(label, []).append(_num(value))
        if len(groups) > MAX_PLOT_SERIES:
            groups = {'all requests': [v for vs in groups.values() for v in vs]}
        mean = _num(_dict(load.get('latency')).get('mean'))
        lines = [{'label': 'mean %.3f s' % mean, 'x': mean}] if mean is not None else []
        for key in ('max_mean_latency', 'max_p99_latency'):
            limit = _num(settings.get(key))
            if limit is not None:
                lines.append({'label': 'validate_%s %g s' % (key, limit), 'x': limit})
        title = 'Latency of each request through the balancer (%s requests, concurrency %s)' % (count, concurrency)
        plots.append({'name': 'latency', 'title': title, 'spec': {
            'kind': 'hist', 'title': title, 'xlabel': 'seconds', 'ylabel': 'requests',
            'series': [{'label': label, 'samples': values} for label, values in sorted(groups.items())],
            'lines': lines}})

    rates = [_num(v) for v in samples.get('stream_tokens_per_second') or []]
    rates = [v for v in rates if v is not None]
    if rates:
        p50 = _num(_dict(load.get('stream_tokens_per_second')).get('p50'))
        limit = _num(settings.get('min_stream_tokens_per_second'))
        lines = []
        if p50 is not None:
            lines.append({'label': 'p50 %.1f tok/s' % p50, 'x': p50})
        if limit is not None:
            lines.append({'label': 'validate_min_stream_tokens_per_second %g' % limit, 'x': limit})
        title = 'Output tokens/s of each stream (%d streams)' % len(rates)
        plots.append({'name': 'stream', 'title': title, 'spec': {
            'kind': 'hist', 'title': title, 'xlabel': 'output tokens/s (decode rate of the stream)',
            'ylabel': 'streams', 'series': [{'label': 'streams', 'samples': rates}], 'lines': lines}})

    rows = validate_distribution(load, replicas)
    if rows and load.get('upstreams') is not None:
        total = sum(r['requests'] for r in rows)
        even = float(total) / len(names) if names else None
        skew = _num(load.get('distribution_skew'))
        limit = _num(settings.get('max_distribution_skew'))
        title = 'Requests served per replica (skew %s%s)' % (
            _fmt(skew, '%.2f'), ', limit %g' % limit if limit is not None else ', no limit set')
        spec = {'kind': 'bar', 'title': title, 'xlabel': 'replica', 'ylabel': 'requests served',
                'categories': [r['replica'] for r in rows],
                'series': [{'label': 'requests', 'values': [r['requests'] for r in rows]}],
                'lines': [{'label': 'even share %.1f' % even, 'y': even}] if even is not None else []}
        plots.append({'name': 'replicas', 'title': title, 'spec': spec})
    return plots


def _served_total(result):
    value = _num(_dict(_dict(result).get('figures')).get('requests_success_total'))
    return value if value is not None and value >= 0 else None


def validate_routed_load(load, replicas, before, after, settings=None):
    """The load's requests per replica from each head's finished-request counter (vllm_metrics'
    requests_success_total after the load less before it), for a balancer that sends requests through
    vLLM's router: nginx's upstream header then names the router. upstreams is keyed like nginx's
    (each replica row's upstream), distribution_skew recomputed, and threshold_failures gains
    min_upstreams (a replica that served none, or one whose counters could not be read) and
    max_distribution_skew (over settings' limit). Requests other clients sent meanwhile count too."""
    if not isinstance(replicas, list):
        _fail('validate_routed_load', 'replicas must be the rows of cluster_replica_report, got %r' % (replicas,))
    result = dict(_dict(load))
    before, after, settings = _dict(before), _dict(after), _dict(settings)
    failures = [m for m in (result.get('threshold_failures') or [])
                if str(m).split(':', 1)[0].strip() not in ('min_upstreams', 'max_distribution_skew')]
    counts, unread = {}, []
    for row in replicas:
        row = _dict(row)
        head = row.get('head')
        start, end = _served_total(before.get(head)), _served_total(after.get(head))
        if start is None or end is None or end < start:
            unread.append(str(head))
            continue
        counts[str(row.get('upstream'))] = int(end - start)
    result['upstreams_counted_by'] = 'engine counters'
    if unread or not replicas:
        result['upstreams'] = None
        result['distribution_skew'] = None
        failures.append('min_upstreams: the requests per replica could not be counted (no /metrics before and after '
                        'the load from %s)' % (', '.join(unread) or 'any head'))
    else:
        result['upstreams'] = counts
        skew = distribution_skew(counts.values())
        result['distribution_skew'] = round(skew, 4) if skew is not None else None
        idle = sorted(u for u, c in counts.items() if c == 0)
        if idle:
            failures.append('min_upstreams: %d of %d replicas served requests (none: %s)'
                            % (len(counts) - len(idle), len(counts), ', '.join(idle)))
        limit = _num(settings.get('max_distribution_skew'))
        if limit is not None and (result['distribution_skew'] is None or result['distribution_skew'] > limit):
            failures.append('max_distribution_skew: skew %s exceeds %s; requests per replica %s'
                            % (result['distribution_skew'], limit, counts))
    result['threshold_failures'] = failures
    return result


class FilterModule(object):
    """The validation report's judgement and plots."""

    def filters(self):
        return {
            'validate_problems': validate_problems,
            'validate_thresholds': validate_thresholds,
            'validate_figures': validate_figures,
            'validate_verdict': validate_verdict,
            'validate_distribution': validate_distribution,
            'validate_plots': validate_plots,
            'validate_routed_load': validate_routed_load,
        }
