"""Unit tests for plugins/filter/nvidia_host.py: Secure Boot, NVSwitches, fabric state, driver packages."""
from __future__ import annotations

import importlib.util
import os

import pytest

HERE = os.path.dirname(__file__)
_PATH = os.path.join(HERE, "..", "..", "..", "..", "plugins", "filter", "nvidia_host.py")
_spec = importlib.util.spec_from_file_location("llmops_nvidia_host_filter", os.path.abspath(_PATH))
nh = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(nh)

FIX = os.path.abspath(os.path.join(HERE, "..", "..", "fixtures"))
REAL = os.path.join(FIX, "h200_hw")


def read(*parts):
    with open(os.path.join(FIX, *parts), encoding="utf-8") as fh:
        return fh.read()


def real_probe():
    """The role's probe text, assembled from what the real H200 host printed for each source."""
    mok = "missing" if read("h200_hw", "mokutil-sb-state.txt.rc").strip() == "127" else read("h200_hw", "mokutil-sb-state.txt")
    efi = read("h200_hw", "efivars-secureboot.txt")
    return "\n".join([
        "## mokutil", mok,
        "## efi", "absent" if "no-efi" in efi else "present",
        "## efivar", "",
        "## pci", read("h200_hw", "pci-nvidia.txt"),
    ])


def test_real_h200_no_efi_no_nvswitch():
    facts = nh.nvidia_host_facts(real_probe())
    assert facts["secure_boot"] == "legacy-bios" and facts["efi"] is False
    assert facts["nvidia_pci"] == [{"address": "0000:00:06.0", "device": "0x2335", "class": "0x030200"}]
    assert facts["nvswitches"] == []


def test_real_h200_fabric_is_not_applicable():
    states = nh.nvidia_fabric_states(read("h200", "nvidia-smi-q.txt"))
    assert states == [{"gpu": "00000000:00:06.0", "state": "N/A", "status": "N/A"}]


def test_real_h200_plan_has_no_fabric_manager_and_dkms():
    facts = nh.nvidia_host_facts(real_probe())
    plan = nh.nvidia_driver_plan({"distribution": "Ubuntu", "source": "distribution", "branch": "580",
                                  "flavor": "open", "kernel_modules": "auto", "secure_boot": facts["secure_boot"],
                                  "kernel": read("h200_hw", "pid1.txt").split()[1], "fabricmanager": "auto",
                                  "nvswitches": len(facts["nvswitches"])})
    assert plan["modules"] == "dkms" and plan["fabricmanager"] is False and plan["errors"] == []
    assert plan["packages"] == ["nvidia-headless-580-server-open", "nvidia-utils-580-server"]


def test_hgx_baseboard_four_nvswitches_secure_boot_on():
    facts = nh.nvidia_host_facts(read("nvidia", "constructed_hgx_probe.txt"))
    assert facts["secure_boot"] == "enabled"
    assert facts["nvswitches"] == ["0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"]
    assert len(facts["nvidia_pci"]) == 12


@pytest.mark.parametrize("probe, state", [
    ("## mokutil\nSecureBoot disabled\nrc=0\n## efi\npresent\n## efivar\n   6   0   0   0   1\n", "disabled"),
    ("## mokutil\nmissing\n## efi\npresent\n## efivar\n   6   0   0   0   1\n", "enabled"),
    ("## mokutil\nmissing\n## efi\npresent\n## efivar\n   6   0   0   0   0\n", "disabled"),
    ("## mokutil\nmissing\n## efi\npresent\n## efivar\n", "unknown"),
    ("## mokutil\nEFI variables are not supported on this system\nrc=255\n## efi\nabsent\n", "legacy-bios"),
])
def test_secure_boot_from_mokutil_then_the_efi_variable(probe, state):
    assert nh.nvidia_host_facts(probe)["secure_boot"] == state


def test_fabric_states_per_gpu():
    states = nh.nvidia_fabric_states(read("nvidia", "constructed_hgx_fabric_q.txt"))
    assert states == [{"gpu": "00000000:18:00.0", "state": "Completed", "status": "Success"},
                      {"gpu": "00000000:2A:00.0", "state": "In Progress", "status": "N/A"}]


BASE = {"distribution": "Ubuntu", "source": "distribution", "branch": "580", "flavor": "open",
        "kernel_modules": "auto", "secure_boot": "enabled", "kernel": "6.8.0-45-generic",
        "precompiled_kernel": "", "fabricmanager": "auto", "nvswitches": 4, "packages": [],
        "fabricmanager_packages": []}


@pytest.mark.parametrize("change, modules, packages, fm", [
    ({}, "precompiled", ["linux-modules-nvidia-580-server-open-6.8.0-45-generic",
                         "nvidia-headless-no-dkms-580-server-open", "nvidia-utils-580-server"],
     ["nvidia-fabricmanager-580"]),
    ({"precompiled_kernel": "generic"}, "precompiled", ["linux-modules-nvidia-580-server-open-generic",
                                                        "nvidia-headless-no-dkms-580-server-open",
                                                        "nvidia-utils-580-server"], ["nvidia-fabricmanager-580"]),
    ({"secure_boot": "disabled", "nvswitches": 0}, "dkms",
     ["nvidia-headless-580-server-open", "nvidia-utils-580-server"], []),
    ({"kernel_modules": "dkms"}, "dkms", ["nvidia-headless-580-server-open", "nvidia-utils-580-server"],
     ["nvidia-fabricmanager-580"]),
    ({"secure_boot": "disabled", "kernel_modules": "precompiled", "fabricmanager": "never"}, "precompiled",
     ["linux-modules-nvidia-580-server-open-6.8.0-45-generic", "nvidia-headless-no-dkms-580-server-open",
      "nvidia-utils-580-server"], []),
    ({"source": "cuda_repo"}, "dkms", ["nvidia-driver-pinning-580", "nvidia-open"], ["nvidia-fabricmanager"]),
    ({"nvswitches": 0, "fabricmanager": "always"}, "precompiled",
     ["linux-modules-nvidia-580-server-open-6.8.0-45-generic", "nvidia-headless-no-dkms-580-server-open",
      "nvidia-utils-580-server"], ["nvidia-fabricmanager-580"]),
    ({"distribution": "Debian", "nvswitches": 0}, "dkms",
     ["nvidia-open-kernel-dkms", "firmware-nvidia-gsp", "nvidia-smi", "libcuda1", "nvidia-persistenced"], []),
])
def test_driver_plan(change, modules, packages, fm):
    plan = nh.nvidia_driver_plan(dict(BASE, **change))
    assert plan["errors"] == []
    assert (plan["modules"], plan["packages"], plan["fabricmanager_packages"]) == (modules, packages, fm)
    assert plan["fabricmanager"] == bool(fm)


def test_precompiled_refused_off_ubuntu_archive():
    plan = nh.nvidia_driver_plan(dict(BASE, distribution="Debian", kernel_modules="precompiled", nvswitches=0))
    assert len(plan["errors"]) == 1 and "nvidia_driver_kernel_modules=precompiled" in plan["errors"][0]
    assert "valid: auto, dkms" in plan["errors"][0]


def test_fabric_manager_on_debian_archive_is_refused_with_the_fix():
    plan = nh.nvidia_driver_plan(dict(BASE, distribution="Debian", secure_boot="disabled"))
    assert len(plan["errors"]) == 1 and "nvidia_driver_source=cuda_repo" in plan["errors"][0]
    assert "nvidia_driver_fabricmanager_packages" in plan["errors"][0]


def test_real_h200_role_probe_and_plan_agree_with_the_filter():
    # What the role's own probe printed on the real H200 and what the role decided there.
    import json

    facts = nh.nvidia_host_facts(read("h200_hw", "nvidia_driver_probe.txt"))
    recorded = json.loads(read("h200_hw", "nvidia_driver_plan.json"))
    assert facts == recorded["host"]
    assert recorded["plan"]["modules"] == "dkms" and recorded["plan"]["fabricmanager"] is False


def test_real_h200_checks_passed_and_the_impossible_minimum_failed():
    assert read("h200_hw", "nvidia_driver_check.rc").strip() == "0"
    log = read("h200_hw", "nvidia_driver_check.log")
    assert "1 x NVIDIA H200, driver 580.159.04, CUDA 13.0" in log and "failed=0" in log
    assert "Secure Boot legacy-bios, 0 NVSwitch(es)" in log
    assert read("h200_hw", "nvidia_driver_check_999.rc").strip() != "0"
    assert "driver 580.159.04 is older than the required 999" in read("h200_hw", "nvidia_driver_check_999.log")
    probe = read("h200_hw", "dspark_build_probe.log")
    assert read("h200_hw", "dspark_build_probe.rc").strip() == "0" and "failed=0" in probe
    assert "TORCH_CUDA_ARCH_LIST=9.0" in probe and "'version': '13.0.88'" in probe
