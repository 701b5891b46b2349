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
        "prometheus_duration_seconds": prometheus.prometheus_duration_seconds,
        "monitoring_errors": prometheus.monitoring_errors}


GOOD = {"durations": {"monitoring_scrape_interval": "15s", "monitoring_alert_ttft_for": "1h30m"},
        "ratios": {"monitoring_alert_kv_cache_ratio": 0.9, "monitoring_alert_balancer_5xx_ratio": "1"},
        "packages": {"monitoring_node_exporter_package": "prometheus-node-exporter",
                     "monitoring_dcgm_packages": ["datacenter-gpu-manager-4-core", "libdcgm4"]},
        "versions": {"monitoring_prometheus_package_version": "", "monitoring_grafana_package_version": "1:12.0.1+ds-2~bpo12"}}


def test_valid_settings_have_no_error():
    assert prometheus.monitoring_errors(GOOD) == []
    assert prometheus.monitoring_errors({}) == []


# Every class of bad value, one at a time over the valid settings: the error names the variable and
# the bad value.
@pytest.mark.parametrize("part, name, value", [
    ("durations", "monitoring_scrape_interval", "15 seconds"),
    ("durations", "monitoring_scrape_interval", "30s1m"),
    ("durations", "monitoring_scrape_interval", ""),
    ("durations", "monitoring_scrape_interval", 15),
    ("durations", "monitoring_alert_ttft_for", "5m; reboot"),
    ("ratios", "monitoring_alert_kv_cache_ratio", 90),
    ("ratios", "monitoring_alert_kv_cache_ratio", 0),
    ("ratios", "monitoring_alert_kv_cache_ratio", "ninety"),
    ("ratios", "monitoring_alert_kv_cache_ratio", True),
    ("packages", "monitoring_node_exporter_package", "--allow-downgrades"),
    ("packages", "monitoring_node_exporter_package", "mtail; rm -rf /"),
    ("packages", "monitoring_node_exporter_package", "Prometheus"),
    ("packages", "monitoring_node_exporter_package", "p"),
    ("packages", "monitoring_node_exporter_package", "node exporter"),
    ("packages", "monitoring_node_exporter_package", "../../etc/passwd"),
    ("packages", "monitoring_dcgm_packages", ["datacenter-gpu-manager-4-core", "DCGM Core"]),
    ("versions", "monitoring_prometheus_package_version", "2.45 -o APT::Get::Trivial-Only=false"),
    ("versions", "monitoring_prometheus_package_version", "-1.0"),
    ("versions", "monitoring_prometheus_package_version", "1.0\nrm"),
    ("versions", "monitoring_prometheus_package_version", "$(id)"),
    ("versions", "monitoring_prometheus_package_version", "1.0\n"),
    ("packages", "monitoring_node_exporter_package", "prometheus\n"),
])
def test_each_bad_value_is_named(part, name, value):
    settings = {k: dict(v) for k, v in GOOD.items()}
    settings[part][name] = value
    errors = prometheus.monitoring_errors(settings)
    assert len(errors) == 1, errors
    assert name in errors[0]
    shown = value[-1] if isinstance(value, list) else value
    assert str(shown) in errors[0]


def test_not_a_mapping():
    with pytest.raises(AnsibleFilterError):
        prometheus.monitoring_errors(["monitoring_scrape_interval"])
