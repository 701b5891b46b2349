"""_versions and _stats: version parsing/comparison and percentiles."""
from __future__ import annotations

import pytest

from ansible_collections.llmops.vllm_cluster.plugins.module_utils import _stats, _versions


@pytest.mark.parametrize('text, expected', [
    ('580', (580,)), ('580.159.04', (580, 159, 4)), ('13.0', (13, 0)), (' 12.1 ', (12, 1)), ('v2.19', (2, 19)),
])
def test_parse_version(text, expected):
    assert _versions.parse_version(text) == expected


@pytest.mark.parametrize('bad', ['', 'abc', '13.', '.5', '580-1', '13.0rc1', None, '1..2'])
def test_parse_version_rejects(bad):
    with pytest.raises(ValueError):
        _versions.parse_version(bad)


@pytest.mark.parametrize('a, b, expected', [
    ('580.95.05', '580', 1), ('580', '580.0.0', 0), ('550.127.05', '580', -1), ('13.0', '12.9', 1),
    ('12.10', '12.9', 1), ('9.0', '9.0', 0),
])
def test_compare_versions(a, b, expected):
    assert _versions.compare_versions(a, b) == expected
    assert _versions.compare_versions(b, a) == -expected


def test_version_at_least_and_major_minor():
    assert _versions.version_at_least('580.159.04', '580')
    assert not _versions.version_at_least('575.64', '580')
    assert _versions.major_minor('13.0.88') == '13.0'
    assert _versions.major_minor('13') == '13.0'


def test_percentile_matches_linear_definition():
    data = list(range(1, 101))  # 1..100
    assert _stats.percentile(data, 50) == pytest.approx(50.5)
    assert _stats.percentile(data, 99) == pytest.approx(99.01)
    assert _stats.percentile(data, 0) == 1
    assert _stats.percentile(data, 100) == 100
    assert _stats.percentile([3.0], 99) == 3.0
    assert _stats.percentile([], 50) is None
    with pytest.raises(ValueError):
        _stats.percentile(data, 101)


def test_summarize():
    s = _stats.summarize([0.1, 0.2, 0.3, 0.4])
    assert s['count'] == 4 and s['min'] == 0.1 and s['max'] == 0.4
    assert s['mean'] == pytest.approx(0.25) and s['p50'] == pytest.approx(0.25)
    assert _stats.summarize([])['p99'] is None


def test_distribution_skew():
    assert _stats.distribution_skew([25, 25, 25, 25]) == 0.0
    assert _stats.distribution_skew([30, 20]) == pytest.approx(0.4)
    assert _stats.distribution_skew([]) is None
    assert _stats.distribution_skew([0, 0]) == 0.0
