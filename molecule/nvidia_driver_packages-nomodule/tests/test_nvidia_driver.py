"""nvidia_driver with Debian's real driver packages (no module load, no reboot)."""
from lab_testinfra import role_play

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


def _boot_id(host):
    return host.check_output("cat /proc/sys/kernel/random/boot_id; stat -c %Y /proc/1")


def test_system_reboot_request_alone_does_not_reboot(host, run_play):
    # Only the role's own driver change reboots: /var/run/reboot-required from other packages does
    # not, even with nvidia_driver_reboot=if_needed over a connection that could reboot.
    marker = "/var/lib/llmops-nvidia-driver-reboot-required"
    host.run(f"mv {marker} {marker}.kept; touch /var/run/reboot-required")
    started = _boot_id(host)
    try:
        res = run_play(role_play("nvidia_driver"), {"nvidia_driver_reboot": "if_needed"},
                       limit=host.backend.get_hostname())
        assert res.rc == 0, res
        assert "/var/run/reboot-required from other packages" in " ".join(res.output.split()), res
        assert "changed=0" in res.output, res
        assert _boot_id(host) == started
    finally:
        host.run(f"rm -f /var/run/reboot-required; mv {marker}.kept {marker}")


def test_dgx_os_driver_left_alone_even_for_an_upgrade(host, run_play):
    # A DGX OS stand-in: /etc/dgx-release on a host whose NVIDIA packages are installed. Asked for an
    # upgrade (which releases the hold elsewhere), the role changes nothing: no install, no hold change.
    held = sorted(host.check_output("apt-mark showhold").split())
    versions = {name: host.package(name).version for name in PACKAGES}
    host.run("printf 'DGX_NAME=\"DGX Server\"\\n' > /etc/dgx-release")
    try:
        res = run_play(role_play("nvidia_driver"), {"nvidia_driver_upgrade": True, "nvidia_driver_hold": False},
                       limit=host.backend.get_hostname())
        assert res.rc == 0, res
        assert "runs DGX OS" in " ".join(res.output.split()) and "changed=0" in res.output, res
        assert sorted(host.check_output("apt-mark showhold").split()) == held
        assert {name: host.package(name).version for name in PACKAGES} == versions
    finally:
        host.run("rm -f /etc/dgx-release")
