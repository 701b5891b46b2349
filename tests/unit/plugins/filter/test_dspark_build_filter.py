"""Unit tests for plugins/filter/dspark_build.py (patches and the pinned release)."""
from __future__ import annotations

import importlib.util
import os

import pytest

_PATH = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "plugins", "filter", "dspark_build.py")
_spec = importlib.util.spec_from_file_location("llmops_dspark_build_filter", os.path.abspath(_PATH))
db = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(db)

REMOTE = "https://git.example.invalid/vllm-gb10.git"


@pytest.fixture
def patch_file(tmp_path):
    path = tmp_path / "0001-sm121.patch"
    path.write_text("diff --git a/x b/x\n", encoding="utf-8")
    return str(path)


def test_valid_patches_and_release(patch_file):
    patches = [{"file": patch_file}, {"name": "fork-fix", "commit": "0123abc"}]
    assert db.dspark_patch_errors(patches, REMOTE, "vllm-0123456789ab", "source") == []
    assert db.dspark_patch_list(patches, "/opt/vllm/build/patches") == [
        {"name": "0001-sm121.patch", "file": "/opt/vllm/build/patches/00.patch"},
        {"name": "fork-fix", "commit": "0123abc"},
    ]


@pytest.mark.parametrize("patches, remote, release, method, expected", [
    ([{"name": "x"}], REMOTE, "", "source", "dspark_build_patches[0] (x) must have exactly one of file"),
    ([{"file": "FILE", "commit": "0123abc"}], REMOTE, "", "source", "exactly one of file"),
    ([{"commit": "main"}], REMOTE, "", "source", "commit must be 7 to 40 lower-case hex digits"),
    ([{"commit": "0123abc"}], "", "", "source", "needs dspark_build_patch_git_url"),
    ([{"file": "relative/x.patch"}], REMOTE, "", "source", "file must be an absolute path on the controller"),
    ([{"file": "/nonexistent/x.patch"}], REMOTE, "", "source", "does not exist on the controller"),
    ([{"file": "FILE", "url": "x"}], REMOTE, "", "source", "unknown keys url (valid: name, file, commit)"),
    ([{"name": "a b", "commit": "0123abc"}], REMOTE, "", "source", "name must be letters"),
    ([{"name": "a", "commit": "0123abc"}, {"name": "a", "commit": "0123abd"}], REMOTE, "", "source",
     "name 'a' is used twice"),
    ([{"file": "FILE"}], REMOTE, "", "wheel", "apply to source builds only"),
    ([], "", "current", "source", "dspark_build_active_release must be empty"),
    ([], "", "vllm-0123", "source", "vllm- and 12 hex digits"),
    ("x.patch", "", "", "source", "dspark_build_patches must be a list"),
])
def test_each_problem_named(patch_file, patches, remote, release, method, expected):
    if isinstance(patches, list):
        patches = [{k: (patch_file if v == "FILE" else v) for k, v in p.items()} for p in patches]
    errors = db.dspark_patch_errors(patches, remote, release, method)
    assert any(expected in e for e in errors), errors


def _fixture(name):
    path = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "dspark", name)
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def test_release_state_of_a_real_probe():
    state = db.dspark_release_state(_fixture("release-state-dgx1.txt"))
    assert state["link"] == "/opt/vllm/releases/vllm-f52208f8ff7f"
    assert state["releases"] == [{"path": "/opt/vllm/releases/vllm-f52208f8ff7f", "mtime": 1796476576}]
    assert state["record"]["probe"]["python"] == "3.11.2"
    assert "dspark" in state["record"]["probe"]["speculative_methods"]


def test_release_state_without_link_releases_or_record():
    # As Ansible returns it: the last newline stripped (a fresh host: no link, no release, no record).
    assert db.dspark_release_state("--- releases\n--- record") == {"link": "", "releases": [], "record": None}
    assert db.dspark_release_state("--- releases\n--- record\n") == {"link": "", "releases": [], "record": None}
    state = db.dspark_release_state(_fixture("release-state-dgx1.txt").rstrip("\n"))
    assert state["record"]["probe"]["python"] == "3.11.2"
    broken = db.dspark_release_state("/x\n--- releases\n12 /a\nnot a line\n--- record\n{half\n")
    assert broken["releases"] == [{"path": "/a", "mtime": 12}] and broken["record"] is None


@pytest.mark.parametrize("text", ["", "/x\n", "/x\n--- releases\n", "--- record\n--- releases", None])
def test_release_state_refuses_output_without_its_sections(text):
    with pytest.raises(Exception):
        db.dspark_release_state(text)


# TORCH_CUDA_ARCH_LIST from the GPUs' compute capabilities: the arch-specific suffix on 12.x, every
# capability once, sorted; an explicit list wins as given.
@pytest.mark.parametrize("caps, want", [
    (["12.1"], "12.1a"),
    (["9.0"], "9.0"),
    (["10.0"], "10.0"),
    (["8.6"], "8.6"),
    (["8.0", "8.0"], "8.0"),
    (["12.1", "9.0", "12.1"], "9.0;12.1a"),
    (["12.0f"], "12.0f"),
    (["12.1a"], "12.1a"),
    ([], ""),
])
def test_cuda_arch_list_from_capabilities(caps, want):
    assert db.dspark_cuda_arch_list("", caps) == want


@pytest.mark.parametrize("major", range(7, 13))
@pytest.mark.parametrize("minor", range(0, 10))
def test_cuda_arch_list_every_capability(major, minor):
    out = db.dspark_cuda_arch_list("", ["%d.%d" % (major, minor)])
    assert out == "%d.%d%s" % (major, minor, "a" if major == 12 else "")


def test_explicit_cuda_arch_list_wins():
    assert db.dspark_cuda_arch_list("12.1", ["9.0"]) == "12.1"


@pytest.mark.parametrize("bad", ["sm_121", "12", "12.1;9.0", "12.1b", "", " ", "121"])
def test_cuda_arch_list_refuses_what_is_not_a_capability(bad):
    with pytest.raises(db.AnsibleFilterError, match="not a compute capability"):
        db.dspark_cuda_arch_list("", [bad])
