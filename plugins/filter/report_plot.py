# -*- coding: utf-8 -*-
# Copyright: llmops.vllm_cluster developers
# Apache License 2.0 (see galaxy.yml)
"""Plots for the collection's reports (validation, speculative-decoding tuning, A/B comparison), drawn on
the controller with matplotlib as SVG documents: written next to a Markdown report, or inlined in HTML.

  report_plot(spec)                  -> an SVG document (str) of a line, bar or histogram plot
  report_plot_available(_ignored)    -> whether matplotlib can be imported on the controller
  report_plot_inline(svg, prefix)    -> the <svg> element of such a document, to put inline in an HTML page

spec: kind (line, bar, hist), title, xlabel, ylabel, series, and per kind:
  line: series [{label, x: [numbers], y: [numbers]}]; a point whose x or y is None is skipped
  bar:  categories [names], series [{label, values: [numbers, one per category]}] (grouped bars)
  hist: series [{label, samples: [numbers]}], all series over the same bins (bins: 20 unless given);
        None samples are skipped (e.g. a failed request without a latency)
and optional logy (bool), width and height (inches, 7 x 4 unless given), and lines: reference lines
(a threshold, an even share), each {label, x: number} (vertical; not for bar) or {label, y: number}
(horizontal), drawn dashed and named in the legend; the axis stretches to show them.

The output is deterministic (same spec and matplotlib version, same bytes): matplotlib's default style
(not the controller user's matplotlibrc), a fixed svg.hashsalt for the element ids, no date in the
metadata. Text stays text (svg.fonttype none): the SVG is small and its words can be searched. User text
is literal: a '$' never starts matplotlib's math mode.

matplotlib is imported on first use, not when the file loads: Ansible imports every filter file of a
collection that precedes the one holding a filter it resolves, so a module-level import would cost every
playbook that uses this collection's later filters the import of matplotlib. Only the Figure object API
and the SVG canvas are used (no pyplot: no global figure state, no GUI backend); the rcParams the render
reads are global, so one lock serialises renders within a process.
"""

from __future__ import annotations

import importlib.util
import io
import math
import numbers
import re
import threading

from ansible.errors import AnsibleFilterError

try:
    HAS_MATPLOTLIB = importlib.util.find_spec('matplotlib') is not None
except (ImportError, ValueError):
    HAS_MATPLOTLIB = False

MISSING = 'matplotlib is not installed on the controller (pip install matplotlib)'
KINDS = ('line', 'bar', 'hist')
# The series' data keys per kind, and the top-level keys only one kind takes.
SERIES_KEYS = {'line': ('x', 'y'), 'bar': ('values',), 'hist': ('samples',)}
KIND_ONLY = {'categories': 'bar', 'bins': 'hist'}
KEYS = ('kind', 'title', 'xlabel', 'ylabel', 'series', 'categories', 'bins', 'logy', 'width', 'height', 'lines')
# Reference lines: colours and dash patterns in turn, apart from the series' default colour cycle.
LINE_STYLES = (('#d62728', '--'), ('#333333', ':'), ('#9467bd', '-.'), ('#8c564b', '--'))
DEFAULT_SIZE = (7.0, 4.0)
MAX_SIZE = 50.0
DEFAULT_BINS = 20
MAX_BINS = 500
MAX_SERIES = 20
# Beyond this, matplotlib's axis and tick arithmetic overflows.
MAX_ABS = 1e300
# A fixed salt makes the SVG's element ids the same on every render.
RC = {'svg.fonttype': 'none', 'svg.hashsalt': 'llmops.vllm_cluster.report_plot'}
_CONTROL = re.compile('[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]')
_PREFIX = re.compile(r'^[A-Za-z][A-Za-z0-9_-]{0,63}$')
# What refers to an element id in matplotlib's SVG: id="X", url(#X), xlink:href="#X" (and href="#X").
_ID_REFS = re.compile(r'(\bid=")([^"]+")|(url\(#)([^)]+\))|(href="#)([^"]+")')
_LOCK = threading.Lock()
_MPL = {}


def _matplotlib():
    """The matplotlib pieces the render needs, imported once; AnsibleFilterError when not installed."""
    if not _MPL:
        if not HAS_MATPLOTLIB:
            raise AnsibleFilterError('report_plot: ' + MISSING)
        try:
            import matplotlib
            import matplotlib.style
            import numpy
            from matplotlib.backends.backend_svg import FigureCanvasSVG
            from matplotlib.figure import Figure
        except ImportError as exc:
            raise AnsibleFilterError('report_plot: %s: %s' % (MISSING, exc))
        _MPL.update(matplotlib=matplotlib, numpy=numpy, Figure=Figure, FigureCanvasSVG=FigureCanvasSVG)
    return _MPL


def report_plot_available(_ignored=None):
    """True when matplotlib imports on the controller (report_plot can draw), else False."""
    try:
        _matplotlib()
    except AnsibleFilterError:
        return False
    return True


def _fail(field, message):
    raise AnsibleFilterError('report_plot: %s: %s' % (field, message))


def _text(spec, field):
    """An optional text field as literal matplotlib text ('' when absent)."""
    value = spec.get(field)
    if value is None:
        return ''
    if not isinstance(value, str):
        _fail(field, 'must be a string, got %r' % (value,))
    return _literal(value)


def _literal(value):
    """Text matplotlib shows as given: no control characters (not valid in XML), '$' escaped (no math mode)."""
    return _CONTROL.sub('', value).replace('$', r'\$')


def _number(value, field, allow_none):
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        _fail(field, 'must be a number%s, got %r' % (' or None' if allow_none else '', value))
    value = float(value)
    if not math.isfinite(value) or abs(value) > MAX_ABS:
        _fail(field, 'must be a finite number within +-%g, got %r' % (MAX_ABS, value))
    return value


def _numbers(values, field, allow_none):
    if not isinstance(values, (list, tuple)):
        _fail(field, 'must be a list of numbers, got %r' % (values,))
    return [_number(v, '%s[%d]' % (field, i), allow_none) for i, v in enumerate(values)]


def _size(spec, field, default):
    value = spec.get(field)
    if value is None:
        return default
    value = _number(value, field, False)
    if not 0 < value <= MAX_SIZE:
        _fail(field, 'must be inches > 0 and <= %g, got %r' % (MAX_SIZE, spec.get(field)))
    return value


def _validate(spec):
    """The checked spec: kind, texts, sizes, logy, bins, categories and each series' label and numbers."""
    if not isinstance(spec, dict):
        raise AnsibleFilterError('report_plot: the spec must be a dict (kind, title, xlabel, ylabel, series, ...), got %r'
                                 % (spec,))
    unknown = sorted(str(k) for k in spec if k not in KEYS)
    if unknown:
        _fail(', '.join(unknown), 'unknown key(s); valid: %s' % ', '.join(KEYS))
    kind = spec.get('kind')
    if kind not in KINDS:
        _fail('kind', 'must be one of %s, got %r' % (', '.join(KINDS), kind))
    for key, only in KIND_ONLY.items():
        if spec.get(key) is not None and kind != only:
            _fail(key, 'only for kind %s (kind is %s)' % (only, kind))
    logy = spec.get('logy', False)
    if logy is None:
        logy = False
    if not isinstance(logy, bool):
        _fail('logy', 'must be true or false, got %r' % (logy,))
    out = {'kind': kind, 'logy': logy, 'title': _text(spec, 'title'), 'xlabel': _text(spec, 'xlabel'),
           'ylabel': _text(spec, 'ylabel'), 'width': _size(spec, 'width', DEFAULT_SIZE[0]),
           'height': _size(spec, 'height', DEFAULT_SIZE[1])}

    if kind == 'bar':
        categories = spec.get('categories')
        if not isinstance(categories, (list, tuple)) or not categories:
            _fail('categories', 'must be a non-empty list of names (one per bar group), got %r' % (categories,))
        for index, name in enumerate(categories):
            if isinstance(name, bool) or not isinstance(name, (str, numbers.Real)):
                _fail('categories[%d]' % index, 'must be a string or a number, got %r' % (name,))
        out['categories'] = [_literal(str(name)) for name in categories]
    if kind == 'hist':
        bins = spec.get('bins')
        if bins is None:
            bins = DEFAULT_BINS
        elif isinstance(bins, bool) or not isinstance(bins, int) or not 1 <= bins <= MAX_BINS:
            _fail('bins', 'must be an integer from 1 to %d, got %r' % (MAX_BINS, bins))
        out['bins'] = bins

    series = spec.get('series')
    if not isinstance(series, (list, tuple)) or not series:
        _fail('series', 'must be a non-empty list of {label, %s}, got %r' % (', '.join(SERIES_KEYS[kind]), series))
    if len(series) > MAX_SERIES:
        _fail('series', 'at most %d series, got %d' % (MAX_SERIES, len(series)))
    out['series'] = []
    for index, item in enumerate(series):
        where = 'series[%d]' % index
        if not isinstance(item, dict):
            _fail(where, 'must be a dict {label, %s}, got %r' % (', '.join(SERIES_KEYS[kind]), item))
        extra = sorted(str(k) for k in item if k not in ('label',) + SERIES_KEYS[kind])
        if extra:
            _fail(where, 'unknown key(s) %s for kind %s; valid: label, %s'
                  % (', '.join(extra), kind, ', '.join(SERIES_KEYS[kind])))
        label = item.get('label')
        if not isinstance(label, str) or not label.strip():
            _fail(where + '.label', 'must be a non-empty string, got %r' % (label,))
        entry = {'label': _literal(label)}
        for key in SERIES_KEYS[kind]:
            if key not in item:
                _fail('%s.%s' % (where, key), 'missing (a %s series is {label, %s})' % (kind, ', '.join(SERIES_KEYS[kind])))
        if kind == 'line':
            xs = _numbers(item['x'], where + '.x', True)
            ys = _numbers(item['y'], where + '.y', True)
            if len(xs) != len(ys):
                _fail(where, 'x and y must have the same length, got %d x and %d y' % (len(xs), len(ys)))
            points = [(x, y) for x, y in zip(xs, ys) if x is not None and y is not None]
            entry['x'] = [p[0] for p in points]
            entry['y'] = [p[1] for p in points]
        elif kind == 'bar':
            values = _numbers(item['values'], where + '.values', False)
            if len(values) != len(out['categories']):
                _fail(where + '.values', 'must have one value per category: %d categories, got %d values'
                      % (len(out['categories']), len(values)))
            entry['values'] = values
        else:
            entry['samples'] = [v for v in _numbers(item['samples'], where + '.samples', True) if v is not None]
        out['series'].append(entry)

    out['lines'] = _lines(spec, kind)

    if logy:
        # A histogram's y is its counts: > 0 wherever there is a sample.
        key = {'line': 'y', 'bar': 'values', 'hist': 'samples'}[kind]
        if not any(v > 0 or kind == 'hist' for s in out['series'] for v in s[key]):
            _fail('logy', 'a log scale needs at least one %s (all series\' %s are <= 0 or missing)'
                  % ('sample' if kind == 'hist' else 'value > 0', key))
    return out


def _lines(spec, kind):
    """The checked reference lines: [{label, axis ('x' or 'y'), value}]."""
    lines = spec.get('lines')
    if lines is None:
        return []
    if not isinstance(lines, (list, tuple)):
        _fail('lines', 'must be a list of {label, x} or {label, y}, got %r' % (lines,))
    if len(lines) > MAX_SERIES:
        _fail('lines', 'at most %d lines, got %d' % (MAX_SERIES, len(lines)))
    out = []
    for index, item in enumerate(lines):
        where = 'lines[%d]' % index
        if not isinstance(item, dict):
            _fail(where, 'must be a dict {label, x} or {label, y}, got %r' % (item,))
        extra = sorted(str(k) for k in item if k not in ('label', 'x', 'y'))
        if extra:
            _fail(where, 'unknown key(s) %s; valid: label, x or y' % ', '.join(extra))
        label = item.get('label')
        if not isinstance(label, str) or not label.strip():
            _fail(where + '.label', 'must be a non-empty string, got %r' % (label,))
        axes = [a for a in ('x', 'y') if a in item]
        if len(axes) != 1:
            _fail(where, 'needs exactly one of x (a vertical line) or y (a horizontal line), got %s'
                  % (', '.join(axes) or 'neither'))
        axis = axes[0]
        if axis == 'x' and kind == 'bar':
            _fail(where + '.x', 'a bar plot\'s x axis holds categories: use y (a horizontal line)')
        out.append({'label': _literal(label), 'axis': axis, 'value': _number(item[axis], '%s.%s' % (where, axis), False)})
    return out


def _draw(ax, plot, numpy):
    kind = plot['kind']
    handles = []
    if kind == 'line':
        for series in plot['series']:
            marker = 'o' if len(series['x']) <= 50 else None
            handles.extend(ax.plot(series['x'], series['y'], marker=marker, markersize=3, linewidth=1.5))
    elif kind == 'bar':
        count = len(plot['series'])
        positions = numpy.arange(len(plot['categories']), dtype=float)
        width = 0.8 / count
        for index, series in enumerate(plot['series']):
            offset = (index - (count - 1) / 2.0) * width
            handles.append(ax.bar(positions + offset, series['values'], width=width))
        ax.set_xticks(positions)
        long_names = sum(len(c) for c in plot['categories']) > 60
        ax.set_xticklabels(plot['categories'], rotation=30 if long_names else 0, ha='right' if long_names else 'center')
    else:
        samples = [s['samples'] for s in plot['series']]
        everything = numpy.concatenate([numpy.asarray(s, dtype=float) for s in samples])
        # One set of bins for every series: the distributions compare bin by bin.
        edges = numpy.histogram_bin_edges(everything, bins=plot['bins'])
        step = len(samples) > 1
        for values in samples:
            _counts, _edges, patches = ax.hist(values, bins=edges, histtype='stepfilled', alpha=0.45 if step else 0.8,
                                               edgecolor='black', linewidth=0.6)
            handles.append(patches[0] if len(patches) else None)
    shown = [(h, s['label']) for h, s in zip(handles, plot['series']) if h is not None]
    for index, ref in enumerate(plot['lines']):
        colour, dashes = LINE_STYLES[index % len(LINE_STYLES)]
        draw = ax.axvline if ref['axis'] == 'x' else ax.axhline
        shown.append((draw(ref['value'], color=colour, linestyle=dashes, linewidth=1.5, zorder=3), ref['label']))
    if plot['logy']:
        ax.set_yscale('log')
    ax.set_title(plot['title'])
    ax.set_xlabel(plot['xlabel'])
    ax.set_ylabel(plot['ylabel'])
    ax.grid(True, alpha=0.3)
    if shown:
        # Handles and labels given explicitly: a label starting with '_' is shown too.
        ax.legend([h for h, _label in shown], [label for _h, label in shown], loc='best', fontsize='small')


def report_plot(spec):
    """An SVG document (str) of the plot SPEC describes (see the module's docstring)."""
    plot = _validate(spec)
    mpl = _matplotlib()
    matplotlib = mpl['matplotlib']
    with _LOCK, matplotlib.style.context('default'), matplotlib.rc_context(RC):
        figure = mpl['Figure'](figsize=(plot['width'], plot['height']), layout='constrained')
        canvas = mpl['FigureCanvasSVG'](figure)
        _draw(figure.add_subplot(), plot, mpl['numpy'])
        buffer = io.BytesIO()
        canvas.print_svg(buffer, metadata={'Date': None})
    return buffer.getvalue().decode('utf-8')


def report_plot_inline(svg, prefix=''):
    """The <svg> element of a report_plot document, to put inline in an HTML page: no XML declaration,
    doctype or metadata; with PREFIX, every element id and every reference to one starts with
    'PREFIX-', so that several plots share a page without their ids (clip paths) colliding."""
    if not isinstance(svg, str) or '<svg' not in svg:
        raise AnsibleFilterError('report_plot_inline: the input must be an SVG document (a report_plot result), got %r'
                                 % (svg if not isinstance(svg, str) else svg[:80],))
    if prefix is None:
        prefix = ''
    if not isinstance(prefix, str) or (prefix and not _PREFIX.match(prefix)):
        raise AnsibleFilterError('report_plot_inline: prefix must be a letter then letters, digits, _ or - '
                                 '(at most 64), got %r' % (prefix,))
    element = svg[svg.index('<svg'):]
    element = re.sub(r'\s*<metadata>.*?</metadata>', '', element, flags=re.DOTALL)
    if prefix:
        def rename(match):
            groups = match.groups()
            for start in (0, 2, 4):
                if groups[start] is not None:
                    return groups[start] + prefix + '-' + groups[start + 1]
            return match.group(0)  # pragma: no cover - one of the three alternatives always matched
        element = _ID_REFS.sub(rename, element)
    return element.strip() + '\n'


class FilterModule(object):
    """Plots of the reports, as SVG."""

    def filters(self):
        return {
            'report_plot': report_plot,
            'report_plot_available': report_plot_available,
            'report_plot_inline': report_plot_inline,
        }
