# -*- coding: utf-8 -*-
# Copyright: llmops.vllm_cluster developers
# Apache License 2.0 (see galaxy.yml)
"""Measures of replicas under the same load: the one mechanism behind canary upgrades (a changed
replica against one not yet changed) and the speculative-decoding tuning (one replica under each
setting). Only Python's standard library; the figures come from openai_load (one run per target and
concurrency level, the targets of a level loaded at the same time, so that whatever else the
machines do weighs on both alike) and vllm_metrics (a reading before and after each run).

  measure_spec_delta(before, after)              -> speculative-decoding figures of the window
  measure_figures(load, spec)                    -> the figures one run is judged by
  measure_level_results(loads, level, targets, befores, afters)
                                                 -> one level's {level, target, figures}, per target
  measure_compare(measures, baseline, candidate, thresholds)
                                                 -> per level: both figures, the ratios, the verdict
  measure_tune(measures, max_itl_ratio)          -> per setting and level: the table, and the best setting
  measure_settings(speculative, ks)              -> the speculative settings a tuning run measures
  measure_tune_plots(tune)                       -> the tuning report's plots (report_plot specs)
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

# What measure_compare judges: (threshold name, figure, kind). A ratio is candidate / baseline;
# "max" ratios fail above the limit (slower), "min" ratios below it (less throughput).
CHECKS = (
    ('max_ttft_ratio', 'ttft_p50', 'max_ratio'),
    ('max_itl_ratio', 'itl_p50', 'max_ratio'),
    ('min_throughput_ratio', 'output_tokens_per_second', 'min_ratio'),
    ('max_error_rate', 'error_rate', 'max_value'),
    ('min_acceptance', 'acceptance_rate', 'min_value'),
)
RATIOS = ('ttft_p50', 'ttft_p99', 'itl_p50', 'itl_p99', 'stream_tokens_per_second_p50', 'output_tokens_per_second',
          'acceptance_rate', 'mean_accepted_length')


def _num(value):
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _get(mapping, *path):
    for key in path:
        if not isinstance(mapping, dict):
            return None
        mapping = mapping.get(key)
    return mapping


def measure_spec_delta(before, after):
    """Drafts, draft tokens and accepted tokens between two vllm_metrics readings (their counters'
    differences), the acceptance rate (accepted / draft tokens) and the mean accepted length
    (1 + accepted / drafts) of that window. None for each where the engine reports no speculative
    decoding or its counters went back (a restart in between)."""
    keys = ('spec_decode_drafts_total', 'spec_decode_draft_tokens_total', 'spec_decode_accepted_tokens_total')
    b = [_num(_get(before, 'figures', k)) for k in keys]
    a = [_num(_get(after, 'figures', k)) for k in keys]
    out = {'drafts': None, 'draft_tokens': None, 'accepted_tokens': None, 'acceptance_rate': None,
           'mean_accepted_length': None}
    if any(v is None for v in a + b) or any(y < x for x, y in zip(b, a)):
        return out
    drafts, draft_tokens, accepted = (y - x for x, y in zip(b, a))
    out.update(drafts=int(drafts), draft_tokens=int(draft_tokens), accepted_tokens=int(accepted))
    if draft_tokens > 0:
        out['acceptance_rate'] = round(accepted / draft_tokens, 4)
    if drafts > 0:
        out['mean_accepted_length'] = round(1 + accepted / drafts, 4)
    return out


def measure_figures(load, spec=None):
    """The figures one run is judged by, from openai_load's result and measure_spec_delta's.
    ITL: each stream's mean gap between tokens after the first, (latency - TTFT) / (tokens - 1),
    its p50/p99 over the streams (openai_load's itl); under speculative decoding one chunk holds
    several tokens, so gaps between chunks would overstate it."""
    load = load if isinstance(load, dict) else {}
    sent = _num(load.get('sent')) or 0
    failed = _num(load.get('failed_requests')) or 0
    figures = {
        'requests': int(sent),
        'failed': int(failed),
        'error_rate': round(failed / sent, 4) if sent else None,
        'ttft_p50': _num(_get(load, 'ttft', 'p50')),
        'ttft_p99': _num(_get(load, 'ttft', 'p99')),
        'itl_p50': _num(_get(load, 'itl', 'p50')),
        'itl_p99': _num(_get(load, 'itl', 'p99')),
        'stream_tokens_per_second_p50': _num(_get(load, 'stream_tokens_per_second', 'p50')),
        'output_tokens_per_second': _num(load.get('output_tokens_per_second')),
        'acceptance_rate': _num(_get(spec, 'acceptance_rate')),
        'mean_accepted_length': _num(_get(spec, 'mean_accepted_length')),
    }
    return figures


def measure_level_results(loads, level, targets, befores, afters):
    """The figures of one level's runs, every target loaded at the same time: LOADS, BEFORES and
    AFTERS are the registered loops (over TARGETS, in their order) of the loads' async_status and of
    the vllm_metrics readings around them. A list of {level, target, figures}."""
    def results(reg):
        return (reg or {}).get('results') if isinstance(reg, dict) else reg
    loads, befores, afters = results(loads), results(befores), results(afters)
    if not isinstance(targets, (list, tuple)) or not targets:
        raise AnsibleFilterError('measure_level_results: targets must be a non-empty list, got %r' % (targets,))
    for name, reg in (('loads', loads), ('befores', befores), ('afters', afters)):
        if not isinstance(reg, (list, tuple)) or len(reg) != len(targets):
            raise AnsibleFilterError('measure_level_results: %s must hold one result per target (%d), got %r'
                                     % (name, len(targets), reg))
    try:
        level = int(level)
    except (TypeError, ValueError):
        raise AnsibleFilterError('measure_level_results: level must be an integer >= 1, got %r' % (level,))
    out = []
    for target, load, before, after in zip(targets, loads, befores, afters):
        name = target.get('name') if isinstance(target, dict) else target
        out.append({'level': level, 'target': name,
                    'figures': measure_figures(load, measure_spec_delta(before, after))})
    return out


def _ratio(candidate, baseline):
    if candidate is None or baseline is None or baseline == 0:
        return None
    return round(candidate / baseline, 4)


def measure_compare(measures, baseline, candidate, thresholds=None):
    """Per concurrency level, the baseline's and the candidate's figures and their ratios
    (candidate / baseline), and the verdict: every threshold given (not None) is checked at every
    level. A figure that cannot be measured (no successful stream, no speculative counters) fails a
    threshold that needs it: what was not measured is not a pass."""
    thresholds = dict(thresholds or {})
    unknown = sorted(set(thresholds) - set(name for name, _fig, _kind in CHECKS))
    if unknown:
        raise AnsibleFilterError('measure_compare: unknown threshold(s) %s; valid: %s'
                                 % (', '.join(unknown), ', '.join(name for name, _fig, _kind in CHECKS)))
    by = {}
    for m in measures or []:
        by.setdefault(int(m['level']), {})[m['target']] = m['figures']
    levels, failures = [], []
    for level in sorted(by):
        base, cand = by[level].get(baseline), by[level].get(candidate)
        if base is None or cand is None:
            failures.append('level %d: %s not measured' % (level, baseline if base is None else candidate))
            continue
        ratios = dict((k, _ratio(cand.get(k), base.get(k))) for k in RATIOS)
        row = {'level': level, 'baseline': base, 'candidate': cand, 'ratios': ratios, 'failed': []}
        for name, figure, kind in CHECKS:
            limit = _num(thresholds.get(name))
            if limit is None:
                continue
            value = ratios.get(figure) if kind.endswith('_ratio') else cand.get(figure)
            what = ('%s ratio' % figure) if kind.endswith('_ratio') else figure
            if value is None:
                row['failed'].append('%s: %s not measured at concurrency %d' % (name, what, level))
            elif kind.startswith('max') and value > limit:
                row['failed'].append('%s: %s %s > %s at concurrency %d' % (name, what, value, limit, level))
            elif kind.startswith('min') and value < limit:
                row['failed'].append('%s: %s %s < %s at concurrency %d' % (name, what, value, limit, level))
        failures.extend(row['failed'])
        levels.append(row)
    return {'baseline': baseline, 'candidate': candidate, 'levels': levels, 'failures': failures,
            'passed': not failures and bool(levels),
            'checked': sorted(name for name, _fig, _kind in CHECKS if _num(thresholds.get(name)) is not None)}


def measure_tune(measures, max_itl_ratio=None):
    """The tuning table: per setting (target) and level, the figures; and the recommended setting:
    the one with the highest aggregate output tokens/s summed over the levels (each level weighted
    by its share of the best figure at that level), among the settings with no failed request and,
    when max_itl_ratio is given, an ITL p50 no worse than that ratio of the first setting's (the
    baseline, speculation off) at every level."""
    settings, table = [], {}
    for m in measures or []:
        name = m['target']
        if name not in settings:
            settings.append(name)
        table.setdefault(name, {})[int(m['level'])] = m['figures']
    levels = sorted(set(lv for rows in table.values() for lv in rows))
    best_at = {}
    for lv in levels:
        values = [_num(table[s].get(lv, {}).get('output_tokens_per_second')) for s in settings]
        values = [v for v in values if v is not None]
        best_at[lv] = max(values) if values else None
    limit = _num(max_itl_ratio)
    base = settings[0] if settings else None
    scores, excluded = {}, {}
    for s in settings:
        reasons, score = [], 0.0
        for lv in levels:
            fig = table[s].get(lv)
            if fig is None:
                reasons.append('not measured at concurrency %d' % lv)
                continue
            if fig.get('failed'):
                reasons.append('%d failed request(s) at concurrency %d' % (fig['failed'], lv))
            tps = _num(fig.get('output_tokens_per_second'))
            if tps is None or not best_at.get(lv):
                reasons.append('no throughput at concurrency %d' % lv)
                continue
            score += tps / best_at[lv]
            if limit is not None and s != base:
                ratio = _ratio(_num(fig.get('itl_p50')), _num(table[base].get(lv, {}).get('itl_p50')))
                if ratio is not None and ratio > limit:
                    reasons.append('ITL p50 %sx the baseline at concurrency %d (limit %s)' % (ratio, lv, limit))
        if reasons:
            excluded[s] = reasons
        else:
            scores[s] = round(score / len(levels), 4) if levels else 0.0
    best = max(scores, key=lambda s: (scores[s], -settings.index(s))) if scores else None
    rows = []
    for s in settings:
        for lv in levels:
            fig = dict(table[s].get(lv, {}))
            fig.update(setting=s, level=lv,
                       throughput_vs_baseline=_ratio(_num(fig.get('output_tokens_per_second')),
                                                     _num(table[base].get(lv, {}).get('output_tokens_per_second'))),
                       itl_vs_baseline=_ratio(_num(fig.get('itl_p50')), _num(table[base].get(lv, {}).get('itl_p50'))))
            rows.append(fig)
    return {'settings': settings, 'levels': levels, 'rows': rows, 'scores': scores, 'excluded': excluded,
            'recommended': best, 'baseline': base}


def measure_settings(speculative, ks):
    """The settings a tuning run measures: speculation off ({}), then the replica's own speculative
    settings with each number of speculative tokens of KS (its method, draft model and the rest
    unchanged). Names: 'off', 'k1', 'k2', ..."""
    if not isinstance(speculative, dict) or not speculative.get('method'):
        raise AnsibleFilterError('measure_settings: the replica has no speculative method to tune '
                                 '(vllm_service_speculative.method), got %r' % (speculative,))
    out, seen = [{'name': 'off', 'k': 0, 'speculative': {}}], set()
    for k in ks or []:
        try:
            k = int(k)
        except (TypeError, ValueError):
            raise AnsibleFilterError('measure_settings: a number of speculative tokens must be an integer 1..20, got %r' % (k,))
        if not 1 <= k <= 20:
            raise AnsibleFilterError('measure_settings: a number of speculative tokens must be an integer 1..20, got %r' % (k,))
        if k in seen:
            continue
        seen.add(k)
        spec = dict(speculative)
        spec['num_speculative_tokens'] = k
        out.append({'name': 'k%d' % k, 'k': k, 'speculative': spec})
    return out


def measure_tune_plots(tune):
    """The tuning report's plots, as report_plot specs: aggregate output tokens/s, inter-token
    latency p50 and per-stream tokens/s against k (0 = speculation off), one line per concurrency
    level; acceptance rate against k (one line per level)."""
    rows = (tune or {}).get('rows') or []
    levels = (tune or {}).get('levels') or []
    k_of = {}
    for s in (tune or {}).get('settings') or []:
        k_of[s] = 0 if s == 'off' else int(s[1:]) if s[1:].isdigit() else None
    plots = []
    for name, figure, ylabel in (('throughput', 'output_tokens_per_second', 'output tokens/s (all streams)'),
                                 ('itl', 'itl_p50', 'inter-token latency p50 (s)'),
                                 ('stream', 'stream_tokens_per_second_p50', 'output tokens/s per stream (p50)'),
                                 ('acceptance', 'acceptance_rate', 'acceptance rate')):
        series = []
        for lv in levels:
            pts = sorted((k_of[r['setting']], _num(r.get(figure))) for r in rows
                         if r.get('level') == lv and k_of.get(r.get('setting')) is not None)
            pts = [(k, v) for k, v in pts if v is not None and (figure != 'acceptance_rate' or k > 0)]
            if pts:
                series.append({'label': 'concurrency %d' % lv, 'x': [p[0] for p in pts], 'y': [p[1] for p in pts]})
        if series:
            plots.append({'name': name, 'spec': {'kind': 'line', 'title': '%s against k' % ylabel,
                                                 'xlabel': 'num_speculative_tokens (0 = off)', 'ylabel': ylabel,
                                                 'series': series}})
    return plots


class FilterModule(object):
    """A/B measures of replicas: canaries and speculative-decoding tuning."""

    def filters(self):
        return {
            'measure_level_results': measure_level_results,
            'measure_spec_delta': measure_spec_delta,
            'measure_figures': measure_figures,
            'measure_compare': measure_compare,
            'measure_tune': measure_tune,
            'measure_settings': measure_settings,
            'measure_tune_plots': measure_tune_plots,
        }
