# -*- coding: utf-8 -*-
# Copyright: llmops.vllm_cluster contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Dotted numeric version parsing and comparison (driver 580.159.04, CUDA 13.0, sm 12.1)."""

from __future__ import annotations

import re

_VERSION_RE = re.compile(r'^\s*v?(\d+(?:\.\d+)*)\s*$')


def parse_version(text):
    """Return a tuple of ints for a dotted version such as '580.159.04' -> (580, 159, 4).

    Raises ValueError for anything that is not a dotted number (no letters, no empty parts).
    """
    if text is None:
        raise ValueError('version is missing')
    match = _VERSION_RE.match(str(text))
    if not match:
        raise ValueError("'%s' is not a dotted numeric version such as 580 or 13.0 or 580.95.05" % (text,))
    return tuple(int(part) for part in match.group(1).split('.'))


def compare_versions(left, right):
    """Compare two versions (strings or tuples); missing trailing parts count as zero.

    Returns -1, 0 or 1.
    """
    a = parse_version(left) if not isinstance(left, tuple) else left
    b = parse_version(right) if not isinstance(right, tuple) else right
    width = max(len(a), len(b))
    a = a + (0,) * (width - len(a))
    b = b + (0,) * (width - len(b))
    return (a > b) - (a < b)


def version_at_least(actual, minimum):
    """True when actual >= minimum."""
    return compare_versions(actual, minimum) >= 0


def major_minor(version):
    """'13.0.88' -> '13.0'; '580' -> '580.0'."""
    parts = parse_version(version) + (0,)
    return '%d.%d' % (parts[0], parts[1])
