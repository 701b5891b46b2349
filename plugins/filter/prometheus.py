# -*- coding: utf-8 -*-
# Copyright: llmops.vllm_cluster developers
# Apache License 2.0 (see galaxy.yml)
"""Filters for the monitoring role.

  prometheus_duration_seconds(text) -> float seconds of a Prometheus duration ('1h30m', '500ms')

Only Python's standard library.
"""

from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError

# Prometheus' units, largest first; a duration is one or more NUMBER UNIT terms in that order.
UNITS = {"y": 365 * 86400, "w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1, "ms": 0.001}
TERM_RE = re.compile(r"([0-9]+)(ms|y|w|d|h|m|s)")


def prometheus_duration_seconds(text):
    """Seconds in a Prometheus duration; AnsibleFilterError naming the text when it is not one."""
    if not isinstance(text, str) or not text:
        raise AnsibleFilterError("prometheus_duration_seconds: %r is not a Prometheus duration" % (text,))
    pos, total, last = 0, 0.0, None
    order = list(UNITS)
    for match in TERM_RE.finditer(text):
        if match.start() != pos:
            break
        rank = order.index(match.group(2))
        if last is not None and rank <= last:
            raise AnsibleFilterError("prometheus_duration_seconds: '%s': units must go from largest to smallest, "
                                     "each once" % text)
        last = rank
        total += int(match.group(1)) * UNITS[match.group(2)]
        pos = match.end()
    if pos != len(text):
        raise AnsibleFilterError("prometheus_duration_seconds: '%s' is not a Prometheus duration "
                                 "(NUMBER UNIT terms, units ms, s, m, h, d, w, y)" % text)
    return total


class FilterModule(object):
    """Prometheus filters."""

    def filters(self):
        return {"prometheus_duration_seconds": prometheus_duration_seconds}
