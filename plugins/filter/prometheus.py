# -*- coding: utf-8 -*-
# Copyright: llmops.vllm_cluster developers
# Apache License 2.0 (see galaxy.yml)
"""Filters for the monitoring role.

  prometheus_duration_seconds(text) -> float seconds of a Prometheus duration ('1h30m', '500ms')
  monitoring_errors(values)         -> [message, ...] for the monitoring layer's durations, ratios
                                       and Debian package names and versions (empty when all are valid)

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


# Debian package names (policy 5.6.1) and versions ([epoch:]upstream[-revision]); a version may be
# empty (no pin). Both reach apt's command line.
PACKAGE_RE = re.compile(r"[a-z0-9][a-z0-9+.-]+")
VERSION_RE = re.compile(r"(?:[0-9]+:)?[0-9A-Za-z][0-9A-Za-z.+~-]*")


def _duration_error(name, value):
    if isinstance(value, str) and value:
        try:
            prometheus_duration_seconds(value)
            return None
        except AnsibleFilterError:
            pass
    return ("%s='%s' is not a Prometheus duration; valid: a number with a unit among ms, s, m, h, d, w, y, "
            "largest first (for example 15s, 5m, 1h30m, 15d)" % (name, value))


def _ratio_error(name, value):
    try:
        ok = not isinstance(value, bool) and 0 < float(value) <= 1
    except (TypeError, ValueError):
        ok = False
    return None if ok else "%s=%s must be a fraction in (0, 1] (0.9 means 90 %%)" % (name, value)


def _package_error(name, value):
    if isinstance(value, str) and PACKAGE_RE.fullmatch(value):
        return None
    return ("%s has '%s', not a Debian package name; valid: lower-case letters, digits and + - . "
            "(2 characters or more), as in prometheus-node-exporter" % (name, value))


def _version_error(name, value):
    if isinstance(value, str) and (value == "" or VERSION_RE.fullmatch(value)):
        return None
    return "%s='%s' is not a Debian version; valid: empty (no pin) or a version such as 2.45.3+ds-2" % (name, value)


def monitoring_errors(values):
    """The errors of the monitoring layer's settings, each naming its variable and the valid values.

    values: {'durations': {variable: value}, 'ratios': {...}, 'packages': {variable: name or [names]},
    'versions': {...}}; any part may be missing.
    """
    if not isinstance(values, dict):
        raise AnsibleFilterError("monitoring_errors: expects a mapping of durations, ratios, packages, versions")
    errors = []
    for name, value in sorted((values.get("durations") or {}).items()):
        errors.append(_duration_error(name, value))
    for name, value in sorted((values.get("ratios") or {}).items()):
        errors.append(_ratio_error(name, value))
    for name, value in sorted((values.get("packages") or {}).items()):
        for one in (value if isinstance(value, list) else [value]):
            errors.append(_package_error(name, one))
    for name, value in sorted((values.get("versions") or {}).items()):
        errors.append(_version_error(name, value))
    return [e for e in errors if e]


class FilterModule(object):
    """Prometheus filters."""

    def filters(self):
        return {"prometheus_duration_seconds": prometheus_duration_seconds, "monitoring_errors": monitoring_errors}
