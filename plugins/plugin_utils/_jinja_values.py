# -*- coding: utf-8 -*-
# Copyright: llmops.vllm_cluster developers
# Apache License 2.0 (see galaxy.yml)
"""Values read the way the roles' Jinja read them, for filters that replaced a Jinja check and must
give the same answers (controller side, standard library only)."""

from __future__ import annotations


def jinja_int(value):
    """Like Jinja's int filter: the integer, or 0 when the value is not a number."""
    try:
        return int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError):
            return 0


def strict_int(value):
    """The integer a setting holds, as int() reads it (an int, or a string of one); ValueError for a
    boolean or a float with a fraction, which int() would take silently."""
    if isinstance(value, bool):
        raise ValueError(value)
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(value)
    return int(value)
