"""plugins/filter/packages.py on a real dpkg-query capture and on constructed states."""
from __future__ import annotations

import os

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.vllm_cluster.plugins.filter import packages

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "dpkg")


def capture():
    with open(os.path.join(FIX, "lb1-debian12.txt"), encoding="utf-8") as handle:
        return handle.read()


def test_argv_drops_versions_and_ends_options():
    assert packages.dpkg_query_argv(["nginx=1.22.1-9+deb12u9", "mtail"]) == [
        "dpkg-query", "-W", "-f=${Package}\t${Version}\t${db:Status-Abbrev}\n", "--", "nginx", "mtail"]


def test_installed_packages_are_met_and_missing_ones_are_not():
    out = capture()
    assert packages.dpkg_unmet(out, ["nginx", "nftables", "mtail", "prometheus-node-exporter"]) == []
    assert packages.dpkg_unmet(out, ["rsync", "nginx", "no-such-pkg"]) == ["rsync", "no-such-pkg"]


@pytest.mark.parametrize("entry, unmet", [
    ("nginx=1.22.1-9+deb12u9", False),
    ("nginx=1.22.1-9+deb12u8", True),
    ("nginx=1.22*", False),
    ("nginx=1.24*", True),
    ("nginx=1.22", True),
    ("nftables:arm64", False),
])
def test_versions_as_apt_reads_them(entry, unmet):
    assert (packages.dpkg_unmet(capture(), [entry]) == [entry]) is unmet


def test_removed_or_half_installed_is_unmet():
    out = "nginx\t1.22.1-9\trc \ncurl\t7.88\tiF \nmtail\t3.0\tii \n"
    assert packages.dpkg_unmet(out, ["nginx", "curl", "mtail"]) == ["nginx", "curl"]


def test_unreadable_output_means_everything_is_unmet():
    assert packages.dpkg_unmet("", ["nginx"]) == ["nginx"]
    assert packages.dpkg_unmet(None, ["nginx"]) == ["nginx"]
    assert packages.dpkg_unmet("garbage line\n", ["nginx"]) == ["nginx"]


def test_holds():
    assert packages.dpkg_unheld(capture(), ["nginx", "mtail", "rsync"]) == ["mtail", "rsync"]


@pytest.mark.parametrize("entry", ["-oAPT::Get::Trivial-Only=true", "nginx; rm -rf /", "Nginx", "nginx\n", "",
                                   "../nginx", "nginx nginx-extras", 3, None])
def test_names_that_could_reach_a_command_line_are_refused(entry):
    with pytest.raises(AnsibleFilterError):
        packages.dpkg_query_argv([entry])
    with pytest.raises(AnsibleFilterError):
        packages.dpkg_unmet("", [entry])
