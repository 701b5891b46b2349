"""nvidia_driver with Debian's real driver packages (no module load, no reboot)."""

PACKAGES = ["nvidia-smi", "nvidia-kernel-support", "nvidia-persistenced"]


def test_nonfree_source_is_deb822_with_the_archive_keyring(host):
    src = host.file("/etc/apt/sources.list.d/debian-nonfree.sources").content_string
    assert "Components: contrib non-free non-free-firmware" in src
    assert "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" in src


def test_real_driver_packages_installed_and_held(host):
    held = host.check_output("apt-mark showhold").split()
    for name in PACKAGES:
        assert host.package(name).is_installed, name
        assert name in held, held
    # Debian's real nvidia-smi binary (branch 535 on Debian 12)
    assert host.package("nvidia-smi").version.startswith("535.")
    assert host.file("/usr/bin/nvidia-smi").exists


def test_held_driver_is_not_upgraded_or_removed_by_apt(host):
    res = host.run("apt-get -s -y remove nvidia-smi")
    assert res.rc != 0 and "held" in (res.stdout + res.stderr).lower(), res


def test_nouveau_blacklisted(host):
    f = host.file("/etc/modprobe.d/llmops-blacklist-nouveau.conf")
    assert f.mode == 0o644
    assert "blacklist nouveau" in f.content_string and "options nouveau modeset=0" in f.content_string
    assert "Ansible managed" in f.content_string


def test_persistenced_enabled(host):
    assert host.service("nvidia-persistenced").is_enabled


def test_reboot_recorded_not_done(host):
    # nvidia_driver_reboot=never: the host was not rebooted (systemd has been up since before converge)
    assert host.file("/var/lib/llmops-nvidia-driver-reboot-required").exists


def test_no_module_was_loaded(host):
    assert not host.file("/proc/driver/nvidia/version").exists
