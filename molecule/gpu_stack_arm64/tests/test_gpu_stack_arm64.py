"""nvidia_driver (CUDA repository path) and container_toolkit on arm64 (DGX Spark's architecture)."""
import json


def test_userland_is_aarch64(host):
    assert host.check_output("uname -m") == "aarch64"
    assert host.check_output("dpkg --print-architecture") == "arm64"


def test_cuda_repository_uses_sbsa(host):
    src = host.file("/etc/apt/sources.list.d/nvidia-cuda.sources").content_string
    assert "/cuda/debian12/sbsa/" in src and "Signed-By: /etc/apt/keyrings/nvidia-cuda.asc" in src


def test_driver_packages_from_the_sbsa_repository_installed_and_held(host):
    held = host.check_output("apt-mark showhold").split()
    for name in ("nvidia-driver-pinning-580", "nvidia-open"):
        assert host.package(name).is_installed, name
        assert name in held
    assert host.check_output("dpkg-query -W -f '${Architecture}' nvidia-open") == "arm64"


def test_nouveau_blacklisted_and_reboot_recorded_not_done(host):
    conf = host.file("/etc/modprobe.d/llmops-blacklist-nouveau.conf").content_string
    assert "blacklist nouveau" in conf and "modeset=0" in conf
    assert host.file("/var/lib/llmops-nvidia-driver-reboot-required").exists


def test_toolkit_repository_uses_arm64(host):
    src = host.file("/etc/apt/sources.list.d/nvidia-container-toolkit.sources").content_string
    assert "libnvidia-container/stable/deb/arm64" in src
    assert host.check_output("dpkg-query -W -f '${Version} ${Architecture}' nvidia-container-toolkit") == "1.17.8-1 arm64"


def test_runtime_merged_on_arm64(host):
    cfg = json.loads(host.file("/etc/docker/daemon.json").content_string)
    assert cfg["runtimes"]["nvidia"]["path"] == "nvidia-container-runtime"
    assert cfg["log-driver"] == "journald"
    assert not host.package("docker.io").is_installed
