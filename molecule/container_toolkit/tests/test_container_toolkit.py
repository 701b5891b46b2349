"""container_toolkit against the STAND-IN NVIDIA repository (tests/lab/standins/nvidia_apt_repos.sh)."""
import json

import pytest
from lab_testinfra import role_play

VERSION = "1.17.8-1"
PACKAGES = ["nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
            "libnvidia-container1"]
NVIDIA_VERSION = "1.18.0-1"  # what the DGX OS stand-in has from NVIDIA (newer than the role's pin)


def dgx_os(host):
    return host.backend.get_hostname().endswith("-dgxos")


def managed_only(host):
    if dgx_os(host):
        pytest.skip("the DGX OS stand-in keeps NVIDIA's repository and packages")


def test_keyring_stored_under_etc_apt_keyrings(host):
    managed_only(host)
    key = host.file("/etc/apt/keyrings/nvidia-container-toolkit.asc")
    assert key.exists and key.user == "root"
    assert "BEGIN PGP PUBLIC KEY BLOCK" in key.content_string
    assert not host.file("/etc/apt/trusted.gpg.d/nvidia-container-toolkit.gpg").exists


def test_deb822_source_uses_signed_by_and_the_arch_path(host):
    managed_only(host)
    arch = host.check_output("dpkg --print-architecture")
    src = host.file("/etc/apt/sources.list.d/nvidia-container-toolkit.sources").content_string
    assert "Signed-By: /etc/apt/keyrings/nvidia-container-toolkit.asc" in src
    assert "libnvidia-container/stable/deb/%s" % arch in src
    assert "Suites: /" in src


def test_signature_is_checked(host):
    # apt accepted the stand-in repository only through its signed InRelease and the keyring
    out = host.run("apt-get update -o Debug::Acquire::gpgv=false 2>&1; apt-cache policy nvidia-container-toolkit")
    assert "1.18.0-1" in out.stdout and "NO_PUBKEY" not in out.stdout, out.stdout


def test_every_package_at_the_pinned_version_and_held(host):
    managed_only(host)
    held = host.check_output("apt-mark showhold").split()
    for name in PACKAGES:
        pkg = host.package(name)
        assert pkg.is_installed and pkg.version == VERSION, (name, pkg.version)
        assert name in held
    # the repository offers 1.18.0-1: an upgrade must leave the held toolkit alone
    sim = host.check_output("apt-get -s upgrade")
    assert "Inst nvidia-container-toolkit " not in sim


def test_nvidia_ctk_is_the_stand_in(host):
    assert "(llmops-lab stand-in)" in host.check_output("nvidia-ctk --version")


def test_runtime_added_and_user_settings_kept(host):
    cfg = json.loads(host.file("/etc/docker/daemon.json").content_string)
    assert cfg["runtimes"]["nvidia"]["path"] == "nvidia-container-runtime"
    assert cfg["log-driver"] == "journald"
    assert cfg["data-root"] == "/srv/docker-data"
    assert cfg["default-ulimits"]["memlock"]["Hard"] == -1


def test_docker_from_debian_installed_but_left_stopped(host):
    managed_only(host)
    assert host.package("docker.io").is_installed
    # container_toolkit_engine_start=false: the role neither enabled nor restarted it here
    assert host.run("test -x /usr/sbin/dockerd -o -x /usr/bin/dockerd").rc == 0


def test_no_cdi_spec_without_a_gpu(host):
    assert not host.file("/etc/cdi/nvidia.yaml").exists


def test_dgx_os_packages_kept_never_downgraded_nor_held(host):
    if not dgx_os(host):
        pytest.skip("DGX OS stand-in only")
    held = host.check_output("apt-mark showhold").split()
    for name in PACKAGES:
        pkg = host.package(name)
        # nvidia-container-toolkit was missing: added from the host's own source, at its version.
        assert pkg.is_installed and pkg.version == NVIDIA_VERSION, (name, pkg.version)
        assert name not in held
    # The role added no repository of its own beside DGX OS's.
    assert not host.file("/etc/apt/sources.list.d/nvidia-container-toolkit.sources").exists
    assert host.file("/etc/apt/sources.list.d/dgx-nvidia.sources").exists
    # What was missing was still added: the runtime in the engine configuration.
    cfg = json.loads(host.file("/etc/docker/daemon.json").content_string)
    assert cfg["runtimes"]["nvidia"]["path"] == "nvidia-container-runtime"


def test_dgx_os_converge_said_why(host, run_play):
    if not dgx_os(host):
        pytest.skip("DGX OS stand-in only")
    res = run_play(role_play("container_toolkit"), limit=host.backend.get_hostname())
    assert res.rc == 0, res
    out = " ".join(res.output.split())
    assert "runs DGX OS" in out and "no downgrade, no hold" in out, res
    assert "changed=0" in res.output, res
