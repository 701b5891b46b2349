# -*- coding: utf-8 -*-
# Copyright: llmops.vllm_cluster contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Small statistics helpers for latency samples."""

from __future__ import annotations

import math


def percentile(values, q):
    """Percentile q (0..100) of values, linear interpolation between closest ranks.

    Same definition as numpy's default ('linear'). Returns None for an empty sample.
    """
    if not 0 <= q <= 100:
        raise ValueError('percentile must be between 0 and 100, got %r' % (q,))
    data = sorted(float(v) for v in values)
    if not data:
        return None
    if len(data) == 1:
        return data[0]
    rank = (len(data) - 1) * (q / 100.0)
    low = int(math.floor(rank))
    high = int(math.ceil(rank))
    if low == high:
        return data[low]
    return data[low] + (data[high] - data[low]) * (rank - low)


def summarize(values, digits=4):
    """count, min, mean, p50, p90, p99, max of a sample (None values when empty)."""
    data = [float(v) for v in values]
    if not data:
        return {'count': 0, 'min': None, 'mean': None, 'p50': None, 'p90': None, 'p99': None, 'max': None}

    def r(x):
        return None if x is None else round(x, digits)
    return {
        'count': len(data),
        'min': r(min(data)),
        'mean': r(sum(data) / len(data)),
        'p50': r(percentile(data, 50)),
        'p90': r(percentile(data, 90)),
        'p99': r(percentile(data, 99)),
        'max': r(max(data)),
    }


def distribution_skew(counts):
    """Relative spread of a distribution: (max - min) / mean over the given counts.

    0.0 is a perfectly even split; 1.0 means the busiest target got a mean's worth more than the
    idlest. None when there are no counts.
    """
    values = [float(c) for c in counts]
    if not values:
        return None
    mean = sum(values) / len(values)
    if mean == 0:
        return 0.0
    return (max(values) - min(values)) / mean
