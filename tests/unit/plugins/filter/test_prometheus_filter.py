"""Unit tests for plugins/filter/prometheus.py (the monitoring role's duration comparison)."""
from __future__ import annotations

import importlib.util
import os

import pytest
from ansible.errors import AnsibleFilterError

_PATH = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "plugins", "filter", "prometheus.py")
_spec = importlib.util.spec_from_file_location("llmops_prometheus_filter", os.path.abspath(_PATH))
prometheus = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(prometheus)


@pytest.mark.parametrize("text, seconds", [
    ("15s", 15), ("10s", 10), ("5m", 300), ("1h30m", 5400), ("500ms", 0.5), ("1m30s500ms", 90.5),
    ("15d", 15 * 86400), ("2w", 14 * 86400), ("1y", 365 * 86400), ("0s", 0),
])
def test_durations(text, seconds):
    assert prometheus.prometheus_duration_seconds(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "15", "s", "15 s", "1.5s", "15sec", "30s1m", "1m1m", "-5s", "5S"])
def test_not_durations_name_the_text(text):
    with pytest.raises(AnsibleFilterError) as err:
        prometheus.prometheus_duration_seconds(text)
    assert "prometheus_duration_seconds" in str(err.value)


def test_not_a_string():
    with pytest.raises(AnsibleFilterError):
        prometheus.prometheus_duration_seconds(15)


def test_registered():
    assert prometheus.FilterModule().filters() == {
        "prometheus_duration_seconds": prometheus.prometheus_duration_seconds}
